//! Where a squeezefs keeps its dictionaries (`BACKING/.squeezefs-dicts`), and loading them
//! for the tools that read backing files directly (`check`, `compress`, `estimate`,
//! `stats --dict-gain`) and for `dict`.

use std::path::{Path, PathBuf};

use squeezefs_container::dicts;

use crate::locate::Located;

/// The dictionary directory of the squeezefs `path` is on: the mount's backing root, else
/// the nearest ancestor of a backing path that has one.
pub fn dict_dir(l: &Located) -> Option<PathBuf> {
    if let Some(root) = &l.root {
        return Some(root.join(dicts::DIR_NAME));
    }
    l.backing
        .ancestors()
        .map(|a| a.join(dicts::DIR_NAME))
        .find(|d| d.is_dir())
}

/// Loads the dictionaries the backing files under a located path may need (tools that read
/// backing files directly). Returns one message per dictionary file that was refused.
pub fn load_near(l: &Located) -> Vec<String> {
    match dict_dir(l) {
        Some(d) => dicts::load_all(&d).1,
        None => Vec::new(),
    }
}

/// The same for a backing path given as such (`check`).
pub fn load_for(backing: &Path) -> Vec<String> {
    load_near(&Located {
        backing: backing.to_path_buf(),
        mount: None,
        root: None,
    })
}
