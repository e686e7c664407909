//! Where a path's bytes live: a path on a squeezefs mount is translated to the same path in
//! its backing directory (read from the mount's statistics file), any other path is taken
//! to be in a backing directory already. Shared by `stats`, `compress` and `estimate`.

use std::path::{Path, PathBuf};

/// A path resolved to the backing directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The same file or directory in the backing directory.
    pub backing: PathBuf,
    /// The squeezefs mount the path was given on, if any.
    pub mount: Option<PathBuf>,
    /// That mount's backing directory (the root of the squeezefs).
    pub root: Option<PathBuf>,
}

/// Mount points of squeezefs filesystems, from a mountinfo document.
pub fn squeezefs_mounts(mountinfo: &str) -> Vec<PathBuf> {
    squeezefs_fs::mountinfo::squeezefs_mounts(mountinfo)
        .into_iter()
        .map(|m| m.mountpoint)
        .collect()
}

/// Resolves `path` (which must exist).
pub fn locate(path: &Path) -> Result<Located, String> {
    let canon = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mount = squeezefs_mounts(&info)
        .into_iter()
        .filter(|m| canon.starts_with(m))
        .max_by_key(|m| m.as_os_str().len());
    let Some(mount) = mount else {
        return Ok(Located {
            backing: canon,
            mount: None,
            root: None,
        });
    };
    let doc = crate::statsfile::read(&mount)?;
    let root = doc["mount"]["backing"].as_str().ok_or_else(|| {
        format!(
            "{}: the statistics file does not name the backing directory",
            mount.display()
        )
    })?;
    let rel = canon.strip_prefix(&mount).expect("prefix");
    Ok(Located {
        backing: Path::new(root).join(rel),
        mount: Some(mount),
        root: Some(PathBuf::from(root)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_squeezefs_mounts_in_mountinfo() {
        let info = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    90 22 0:50 / /srv/my\\040logs rw,nosuid,nodev,relatime shared:60 - fuse.squeezefs squeezefs:/srv/b rw,user_id=0\n\
                    91 22 0:51 / /mnt/other rw shared:61 - fuse.sshfs host: rw\n\
                    92 22 0:52 / /tmp/sm rw - fuse squeezefs:/tmp/sb rw,user_id=0\n\
                    93 22 0:53 / /tmp/x rw - fuse other:/tmp/sb rw,user_id=0\n";
        assert_eq!(
            squeezefs_mounts(info),
            vec![PathBuf::from("/srv/my logs"), PathBuf::from("/tmp/sm")]
        );
    }

    #[test]
    fn a_path_off_any_mount_is_its_own_backing_path() {
        let d = std::env::temp_dir();
        let l = locate(&d).unwrap();
        assert_eq!(l.backing, d.canonicalize().unwrap());
        assert_eq!(l.mount, None);
    }
}
