//! Walking a directory tree without following symlinks (shared by `check` and
//! `property set -r`).

use std::fs::Metadata;
use std::path::{Path, PathBuf};

/// Every directory and regular file below `root` (not `root` itself), depth first, with its
/// metadata; symlinks and special files are left out and never followed.
pub fn entries(root: &Path) -> Result<Vec<(PathBuf, Metadata)>, String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in rd {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.is_dir() {
                stack.push(path.clone());
            } else if !meta.is_file() {
                continue;
            }
            out.push((path, meta));
        }
    }
    Ok(out)
}
