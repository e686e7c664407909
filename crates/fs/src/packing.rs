//! Whether this mount packs small files (format 4), decided once at mount: the backing
//! filesystem must keep a location record (a 56-byte user xattr) without spending a block on
//! it — otherwise a packed file would cost what a container costs, plus its share of a pack.
//! The packs themselves are always opened, so files packed before can be read.

use std::io;
use std::path::Path;
use std::sync::Arc;

use squeezefs_container::pack::format::{LOCATION_LEN, LOCATION_LEN_V3};
use squeezefs_container::pack::{FsPackDir, Packs, LOCATION_XATTR};
use squeezefs_container::{FileStorage, Storage};

/// Why files are not packed on this backing filesystem, or `None` when they can be.
pub fn probe(backing: &Path) -> io::Result<Option<String>> {
    probe_len(backing, LOCATION_LEN)
}

/// Why a location record of `len` bytes would cost a block of its own on this backing
/// filesystem (or cannot be set at all), or `None` when it costs none.
fn probe_len(backing: &Path, len: usize) -> io::Result<Option<String>> {
    crate::backing_check::with_probe_file(backing, "pack", |f| {
        let st = FileStorage::new(f);
        match st.set_xattr(LOCATION_XATTR, &vec![0x5a; len]) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EPERM)) => {
                return Ok(Some(format!("it has no user xattrs ({e})")))
            }
            r => r?,
        }
        st.sync_all()?;
        use std::os::unix::fs::MetadataExt;
        let blocks = st.file().metadata()?.blocks();
        Ok((blocks > 0).then(|| {
            format!(
                "a {len}-byte xattr takes {} KiB of its own there (ext4 with 256-byte inodes and \
                 SELinux labels: make it with `mkfs.ext4 -I 512`)",
                blocks / 2
            )
        }))
    })
}

/// The packs of `backing`; with `pack`, new files of at most one extent go to them when the
/// backing filesystem keeps records for free (said once, either way).
pub fn open(backing: &Path, pack: bool, cache: usize) -> io::Result<Arc<Packs>> {
    let writable = pack
        && match probe(backing) {
            Ok(None) => {
                log::info!(
                    "small files are packed (format 4) in {}",
                    FsPackDir::new(backing, false).path().display()
                );
                true
            }
            Ok(Some(why)) => {
                log::warn!(
                    "small files are not packed on the filesystem holding {}: {why}; each file keeps \
                     a container of its own",
                    backing.display()
                );
                false
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) => {
                log::warn!(
                    "the filesystem holding {} is full ({e}): packing not probed, not packing",
                    backing.display()
                );
                false
            }
            Err(e) => return Err(e),
        };
    let packs = Arc::new(Packs::new(
        Box::new(FsPackDir::new(backing, writable)),
        writable,
        cache,
    )?);
    if writable {
        packs.set_keep_ctime(keeps_ctime(backing));
    }
    Ok(packs)
}

/// Whether records moved by reclaim and the background pass may keep the file's change
/// time (a 64-byte version 3 record) without costing a block: said once when not, since
/// `stat` then shows a moved packed file's record change as its ctime.
pub fn keeps_ctime(backing: &Path) -> bool {
    let why = match probe_len(backing, LOCATION_LEN_V3) {
        Ok(None) => return true,
        Ok(Some(why)) => why,
        Err(e) => e.to_string(),
    };
    log::info!(
        "packed files moved by a reclaim or the background pass show the move as their change \
         time on the filesystem holding {}: {why}",
        backing.display()
    );
    false
}
