//! `/proc/self/mountinfo`, read once here for everyone: which squeezefs mounts exist, where,
//! from which backing directory, with which per-mount flags (the CLI's `locate` and
//! `umount`, the remount helper, and the backing lock's wait for a daemon still unmounting).

use std::path::{Path, PathBuf};

/// One squeezefs mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub mountpoint: PathBuf,
    /// `fuse.squeezefs` (or `fuse` for a mount made by an older squeezefs as root).
    pub fstype: String,
    /// `squeezefs:BACKING` (the FSName every squeezefs mount is given).
    pub source: String,
    /// The per-mount options (`rw,nosuid,nodev,relatime`).
    pub options: String,
}

impl Mount {
    /// The backing directory, from the source name.
    pub fn backing(&self) -> Option<PathBuf> {
        self.source.strip_prefix("squeezefs:").map(PathBuf::from)
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
pub fn unescape(s: &str) -> String {
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

/// The squeezefs mounts in a mountinfo document.
pub fn squeezefs_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut fields = right.split(' ');
            let (fstype, source) = (fields.next()?, fields.next()?);
            let mut left = left.split(' ');
            let mountpoint = left.nth(4)?;
            let options = left.next()?;
            // `fuse.squeezefs`; a mount made by an older squeezefs as root shows `fuse`, and
            // its source (`squeezefs:BACKING`) says what it is.
            let ours = fstype == "fuse.squeezefs" || (fstype == "fuse" && source.starts_with("squeezefs:"));
            ours.then(|| Mount {
                mountpoint: PathBuf::from(unescape(mountpoint)),
                fstype: fstype.to_string(),
                source: unescape(source),
                options: options.to_string(),
            })
        })
        .collect()
}

/// Every mount point in a mountinfo document, whatever its filesystem.
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape(m)))
        .collect()
}

/// The filesystem type (`ext4`, `fuse.glusterfs`) of the mount whose device is `dev`
/// (`st_dev`), in a mountinfo document.
pub fn fstype_of_dev(mountinfo: &str, dev: u64) -> Option<String> {
    let want = format!("{}:{}", libc::major(dev), libc::minor(dev));
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (left.split(' ').nth(2)? == want).then(|| right.split(' ').next().map(str::to_string))?
    })
}

/// This process's view of the squeezefs mounts (none if mountinfo cannot be read).
pub fn current() -> Vec<Mount> {
    squeezefs_mounts(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// Where `backing` (canonical) is mounted, if anywhere.
pub fn mounted_from(backing: &Path) -> Option<Mount> {
    current()
        .into_iter()
        .find(|m| m.backing().as_deref() == Some(backing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filesystem_type_of_a_device() {
        let info = "\
44 27 0:41 / /other rw,relatime - fuse sshfs#host: rw\n\
45 27 8:1 / /data rw,relatime - ext4 /dev/sda1 rw\n\
46 27 0:52 / /vol rw,relatime shared:5 - fuse.glusterfs 10.0.0.1:/v rw,user_id=0\n";
        assert_eq!(
            fstype_of_dev(info, libc::makedev(0, 52)).as_deref(),
            Some("fuse.glusterfs")
        );
        assert_eq!(fstype_of_dev(info, libc::makedev(8, 1)).as_deref(), Some("ext4"));
        assert_eq!(fstype_of_dev(info, libc::makedev(8, 2)), None);
    }

    #[test]
    fn finds_squeezefs_mounts_with_their_flags_and_backing() {
        let info = "\
42 27 0:39 / /work/m\\040x rw,nosuid,nodev,relatime - fuse.squeezefs squeezefs:/srv/b\\040y rw,user_id=0\n\
43 27 0:40 / /old rw,relatime - fuse squeezefs:/srv/old rw,user_id=0\n\
44 27 0:41 / /other rw,relatime - fuse sshfs#host: rw\n\
45 27 8:1 / /data rw,relatime - ext4 /dev/sda1 rw\n";
        let m = squeezefs_mounts(info);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mountpoint, PathBuf::from("/work/m x"));
        assert_eq!(m[0].options, "rw,nosuid,nodev,relatime");
        assert_eq!(m[0].backing(), Some(PathBuf::from("/srv/b y")));
        assert_eq!(m[1].mountpoint, PathBuf::from("/old"));
        assert_eq!(m[0].fstype, "fuse.squeezefs");
        assert_eq!(m[1].fstype, "fuse");
        assert_eq!(mount_points(info).len(), 4);
        assert_eq!(mount_points(info)[0], PathBuf::from("/work/m x"));
    }
}
