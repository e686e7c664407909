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

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points of squeezefs filesystems, from a mountinfo document.
pub fn squeezefs_mounts(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut fields = right.split(' ');
            let (fstype, source) = (fields.next()?, fields.next()?);
            let mountpoint = left.split(' ').nth(4)?;
            // Mounted through fusermount3 the type is `fuse.squeezefs`; mounted directly by
            // root it is `fuse`, and the source (`squeezefs:BACKING`) says what it is.
            let ours = fstype == "fuse.squeezefs" || (fstype == "fuse" && source.starts_with("squeezefs:"));
            ours.then(|| PathBuf::from(unescape(mountpoint)))
        })
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
    let doc = crate::stats::read(&mount)?;
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
