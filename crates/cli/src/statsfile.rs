//! The statistics file at the root of a squeezefs mount (`MOUNTPOINT/.squeezefs-stats`):
//! what the daemon serving it reports, including its mount options and backing directory.
//! Read by `stats --live`, and by the tools that need to know about a mount (`locate`,
//! `property`, `compress`, `dict`, `umount`).

use std::path::Path;

use serde_json::Value;

/// Reads the statistics document of the squeezefs mounted at `mountpoint`.
pub fn read(mountpoint: &Path) -> Result<Value, String> {
    let file = mountpoint.join(squeezefs_fs::statsfile::NAME);
    let raw = std::fs::read(&file).map_err(|e| {
        format!(
            "{}: {e} (is a squeezefs mounted at {}? the statistics file exists only at the root of a mount)",
            file.display(),
            mountpoint.display()
        )
    })?;
    serde_json::from_slice(&raw).map_err(|e| format!("{}: not a statistics document: {e}", file.display()))
}
