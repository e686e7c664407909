//! Walking a directory tree without following symlinks (shared by `check`, `stats` and
//! `property set -r`), leaving out squeezefs's own directories and lock file. The caller's
//! own directories that refuse it (mode 0: a squeezefs without root keeps them) are listed
//! and their entries stat-ed by the owner-access rule, as the daemon's pack walk does.

use std::fs::Metadata;
use std::path::{Path, PathBuf};

use squeezefs_container::{dir_names_as_owner, symlink_metadata_as_owner};

/// A backing directory's dictionary directory (`.squeezefs-dicts` holding only dictionary
/// files): not data, so tools that walk a backing tree leave it alone.
fn is_dict_dir(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n == squeezefs_container::dicts::DIR_NAME)
        && dir_names_as_owner(path).is_ok_and(|names| {
            names
                .iter()
                .all(|n| n.to_str().is_some_and(|n| n.contains(".zdict")))
        })
}

/// A backing directory's pack directory (`.squeezefs-packs` holding only `ID.pack` files,
/// the clean mark, and perhaps a probe file a crash left): the packed files' bytes, not
/// files of the tree.
pub fn is_pack_dir(path: &Path) -> bool {
    use squeezefs_container::pack::clean::is_mark_name;
    use squeezefs_container::pack::dir::{parse_name, DIR_NAME, POOL_PREFIX, PROBE_PREFIX};
    path.file_name().is_some_and(|n| n == DIR_NAME)
        && dir_names_as_owner(path).is_ok_and(|names| {
            names.iter().all(|n| {
                n.to_str().is_some_and(|n| {
                    parse_name(n).is_some()
                        || n.starts_with(PROBE_PREFIX)
                        || n.starts_with(POOL_PREFIX)
                        || is_mark_name(n)
                })
            })
        })
}

/// A backing directory's lock file (`.squeezefs-lock`, empty): not a file of the tree.
fn is_lock_file(path: &Path, meta: &Metadata) -> bool {
    meta.len() == 0
        && path
            .file_name()
            .is_some_and(|n| n == squeezefs_fs::lock::LOCK_FILE)
}

/// Paths and their metadata.
pub type Entries = Vec<(PathBuf, Metadata)>;

/// Every directory and regular file below `root` (not `root` itself; the dictionary and
/// pack directories excepted), depth first, with its metadata; symlinks and special files
/// are left out and never followed.
pub fn entries(root: &Path) -> Result<Entries, String> {
    Ok(entries_and_packs(root)?.0)
}

/// [`entries`], and the directories (`root` included) whose pack directory was left out:
/// the backing roots in the tree (`stats` accounts their packs).
pub fn entries_and_packs(root: &Path) -> Result<(Entries, Vec<PathBuf>), String> {
    let mut packs = Vec::new();
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let names = dir_names_as_owner(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for name in names {
            let path = dir.join(name);
            let meta = symlink_metadata_as_owner(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.is_dir() {
                if is_pack_dir(&path) {
                    packs.push(dir.clone());
                    continue;
                }
                if is_dict_dir(&path) {
                    continue;
                }
                stack.push(path.clone());
            } else if !meta.is_file() || is_lock_file(&path, &meta) {
                continue;
            }
            out.push((path, meta));
        }
    }
    Ok((out, packs))
}
