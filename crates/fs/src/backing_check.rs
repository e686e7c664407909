//! Checks of a backing directory before it is mounted (it is a directory, its
//! filesystem punches holes), and the scratch file those probes run on.

use std::io;
use std::path::Path;

/// Runs `probe` on a new scratch file in squeezefs's private directory of `backing`
/// (`.squeezefs-packs/.probe-WHAT-PID`, the directory made if missing), which is removed
/// afterwards whatever happened. Nothing the mount shows is touched: the root's entries and
/// times stay the user's.
pub(crate) fn with_probe_file<T>(
    backing: &Path,
    what: &str,
    probe: impl FnOnce(std::fs::File) -> io::Result<T>,
) -> io::Result<T> {
    use squeezefs_container::pack::dir::{FsPackDir, PROBE_PREFIX};
    let private = FsPackDir::new(backing, true);
    private.ensure()?;
    let path = private
        .path()
        .join(format!("{PROBE_PREFIX}{what}-{}", std::process::id()));
    let result = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(probe);
    let _ = std::fs::remove_file(&path);
    result
}

/// Refuses backing directories whose filesystem cannot punch holes: containers rely on it
/// (their unused halves are holes, and so are all-zero extents).
pub fn check_backing(backing: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(backing)
        .map_err(|e| io::Error::new(e.kind(), format!("backing directory {}: {e}", backing.display())))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", backing.display()),
        ));
    }
    let result = with_probe_file(backing, "punch", |f| {
        use std::os::unix::fs::FileExt;
        f.write_all_at(&[1u8; 16384], 0)?;
        let s = squeezefs_container::FileStorage::new(f);
        use squeezefs_container::Storage;
        s.punch(4096, 8192)
    });
    if let Err(e) = &result {
        if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
            // A full backing filesystem must still mount (to read, and to delete).
            log::warn!(
                "the filesystem holding {} is full ({e}): hole punching not probed; writes will fail with ENOSPC until space is freed",
                backing.display()
            );
            return Ok(());
        }
    }
    result.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "the filesystem holding {} cannot punch holes in files ({e}); squeezefs needs sparse \
                 files and FALLOC_FL_PUNCH_HOLE (ext4, xfs, btrfs, tmpfs, NFS 4.2 and CephFS have them)",
                backing.display()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hole_punching_backing_is_accepted() {
        let dir = std::env::temp_dir().join(format!("sqz-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        check_backing(&dir).unwrap();
        let private = dir.join(squeezefs_container::pack::dir::DIR_NAME);
        assert_eq!(
            std::fs::read_dir(&private).unwrap().count(),
            0,
            "probe file removed"
        );
        std::fs::remove_dir(&private).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert!(check_backing(Path::new("/nonexistent/squeezefs")).is_err());
    }
}
