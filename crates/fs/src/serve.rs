//! Serving a backing directory at a mount point, from the lock to the last file written
//! out: [`mount`], which the CLI's `mount` runs in the foreground or as a daemon.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use squeezefs_container::format::FORMAT_VERSION_DICT;
use squeezefs_container::pack::format::PACKS_FORMAT_VERSION;

use crate::backing_check::check_backing;
use crate::ops::SqueezeFs;
use crate::{devfuse, fuse_mount, lock, packing, sys, MountConfig};

/// Raises the soft limit on open files (often 1024) to the hard limit, as libfuse's
/// passthrough_hp does: open files and, without handles, every known inode hold an fd.
/// Returns the limit in force.
fn raise_fd_limit() -> u64 {
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    sys::raise_fd_limit(nr_open.min(1 << 20))
}

/// How long a new mount waits for the previous daemon of its backing directory, unmounted
/// but still writing its files out.
pub const UNMOUNT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Mounts and serves until unmounted (or `stop` fires). Calls `ready` once the mount is live.
/// Serves `backing` at `mountpoint` until unmounted. `ready` runs once the mount is live;
/// `after_unmount` once every file is written out and the session is over, while this
/// process still holds the backing directory's lock (nothing else can touch it: pack
/// garbage is reclaimed there). It is told whether the packs are known clean: the mount
/// started from a valid clean mark (`squeezefs_container::pack::clean`) and made no pack
/// garbage, so no walk of the tree can find any to reclaim.
pub fn mount(
    backing: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
    after_unmount: impl FnOnce(&Path, bool),
) -> io::Result<()> {
    let backing: PathBuf = backing.canonicalize()?;
    devfuse::check()?;
    // SIGINT/SIGTERM unmount cleanly, so dirty data is written: blocked here, before this
    // function starts any thread (a thread inherits the mask it is started with, and a
    // signal for the process goes to any thread that does not block it — whose default
    // action then ends the process with files unwritten), and waited for below.
    let wait_for_signal = sys::block_termination_signals();
    // One daemon per backing directory; held until this function returns. A daemon just
    // unmounted may still be writing its last files out (on a loaded machine, seconds):
    // wait for it, as long as it serves no mount.
    let _lock = lock::lock_wait(&backing, UNMOUNT_WAIT, |why| {
        log::info!(
            "{why}; its mount is gone, so waiting up to {} s for it to finish writing",
            UNMOUNT_WAIT.as_secs()
        )
    })?;
    if !cfg.read_only {
        check_backing(&backing)?;
    }
    let limit = raise_fd_limit();
    // The descriptor table grown now, not a doubling at a time under a copy's CREATEs.
    if let Ok(dir) = std::fs::File::open(&backing) {
        use std::os::fd::AsFd;
        sys::reserve_fd_table(dir.as_fd(), limit);
    }
    // The zstd workspace pool: one compressing thread per core (plus the reserved
    // max-level workspace), tables sized for this mount's largest extents (those of files
    // written whole, `grow_extent_shift`, where the mount did not name its extent size).
    let largest = cfg.extent_shift.max(cfg.grow_extent_shift().unwrap_or(0));
    squeezefs_codec::workspace::configure(squeezefs_codec::workspace::PoolConfig {
        max_workspaces: std::thread::available_parallelism().map_or(2, |n| n.get()) + 1,
        input_size: 1 << largest,
        ..Default::default()
    });
    let mut opts = cfg.container_options();
    let packs = packing::open(&backing, cfg.pack && !cfg.read_only, cfg.pack_cache)?;
    // Before any request can change a record: a crash from here on leaves no mark.
    let started_clean = !cfg.read_only
        && packs.take_clean_mark().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot remove the clean mark {}: {e}",
                    backing
                        .join(squeezefs_container::pack::dir::DIR_NAME)
                        .join(squeezefs_container::pack::clean::MARK_NAME)
                        .display()
                ),
            )
        })?;
    let packs_seen = packs.clone();
    // Announced here, once the probe has said whether this mount packs (format 4).
    log::info!(
        "mounting {} at {} (compress={}, extent size {} KiB, format {})",
        backing.display(),
        mountpoint.display(),
        opts.compress_name(),
        (1u32 << cfg.extent_shift) / 1024,
        // (Versions 5 and 6 are only ever written by the background pass, for the files it
        // keeps the times of or gives larger extents.)
        if packs.writable() {
            PACKS_FORMAT_VERSION
        } else {
            FORMAT_VERSION_DICT
        }
    );
    opts.packs = Some(packs);
    let fs = SqueezeFs::new(&backing, opts, cfg, limit)?;
    fs.fit_fd_limit(limit);
    if !fs.uses_handles() {
        log::info!("files are reopened by name (no CAP_DAC_READ_SEARCH for file handles)");
    }
    let notifier = fs.notifier_slot();
    let spin = fs.spin_handle();
    // The mount is made here, not by fuser, so that only a mount that is still this one is
    // ever unmounted (`fuse_mount`). `own` unmounts on every way out of this function.
    let (dev, own) = fuse_mount::mount(&cfg.mount_request(&backing), mountpoint)?;
    let own = Arc::new(own);
    let fuse_cfg = cfg.session_config();
    let threads = fuse_cfg.n_threads.unwrap_or(1);
    let session = fuser::Session::from_fd(fs, dev, fuse_cfg.acl, fuse_cfg)?;
    set_mount_attrs(own.path(), &cfg.mount_attrs)?;
    let _ = notifier.set(session.notifier());
    {
        use std::os::fd::AsFd;
        let (choice, why) = cfg.spin.for_backing(backing_type(&backing).as_deref());
        if let Some(why) = why {
            log::info!("{why}");
            spin.decline(why);
        }
        if let Err(e) = spin.attach(session.as_fd(), choice, threads) {
            log::warn!("not spinning on /dev/fuse: {e}");
        }
    }
    // The signal thread holds the mount weakly: once serving ended, it is not its to touch.
    let on_signal = Arc::downgrade(&own);
    std::thread::spawn(move || {
        let sig = wait_for_signal();
        log::info!("signal {sig}: unmounting");
        let Some(own) = on_signal.upgrade() else { return };
        match own.unmount(false) {
            Ok(true) => {}
            Ok(false) => log::info!("{} was already unmounted", own.path().display()),
            Err(e) => log::error!("unmount failed: {e}; run `fusermount3 -u` or `umount -l`"),
        }
    });
    ready();
    // `run` returns once the filesystem is destroyed (every file written out and synced):
    // after the user's unmount, or ours on a signal.
    let ended = session.run();
    spin.stop();
    // Normally gone already; if serving ended with the mount still there (a session thread
    // panicked), it is unmounted now, as it is this daemon's.
    drop(own);
    session_ended(ended)?;
    log::info!("unmounted {}: every file written out", mountpoint.display());
    let clean = started_clean && packs_seen.made_no_garbage();
    drop(packs_seen);
    after_unmount(&backing, clean);
    Ok(())
}

/// The mountinfo type (`ext4`, `fuse.glusterfs`, …) of the filesystem holding `backing`.
fn backing_type(backing: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(backing).ok()?.dev();
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    crate::mountinfo::fstype_of_dev(&info, dev)
}

/// What `fuser::Session::run` returned, with the end of an unmount that raced a request
/// counted as the clean end it is. The kernel aborts the connection at unmount: it marks
/// each device's processing queue disconnected, then the input queue. A session thread
/// that takes a request off the input queue in between (a RELEASE of a file closed just
/// before, or one moved there by the abort itself from the background queue) is answered
/// `ECONNABORTED` (`fuse_dev_do_read`, fs/fuse/dev.c) instead of the `ENODEV` fuser 0.18
/// takes for the end, and `run` returns that error, although every thread ended and
/// `destroy` wrote every file out. Without `FUSE_ABORT_ERROR` (never asked for here) no
/// other read of /dev/fuse fails so: it only ever means the connection is gone. The
/// request is lost as every request still queued at an unmount is (a RELEASE's file is
/// written out by `destroy`).
fn session_ended(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {
            log::debug!("the session ended with {e} (an unmount that raced a request)");
            Ok(())
        }
        r => r,
    }
}

/// Sets the per-mount flags `attrs` (`nodiratime`, `diratime`, `strictatime`, in order) on
/// the new mount at `mountpoint` with mount_setattr(2). Needs root (CAP_SYS_ADMIN) for the
/// mount: without it the error says so. Nothing is done when `attrs` is empty.
fn set_mount_attrs(mountpoint: &Path, attrs: &[String]) -> io::Result<()> {
    let (mut set, mut clear) = (0u64, 0u64);
    for a in attrs {
        match a.as_str() {
            "nodiratime" => {
                set |= sys::MOUNT_ATTR_NODIRATIME;
                clear &= !sys::MOUNT_ATTR_NODIRATIME;
            }
            "diratime" => {
                clear |= sys::MOUNT_ATTR_NODIRATIME;
                set &= !sys::MOUNT_ATTR_NODIRATIME;
            }
            "strictatime" => {
                set = (set & !sys::MOUNT_ATTR__ATIME) | sys::MOUNT_ATTR_STRICTATIME;
                clear |= sys::MOUNT_ATTR__ATIME;
            }
            _ => {}
        }
    }
    if set == 0 && clear == 0 {
        return Ok(());
    }
    sys::mount_setattr(mountpoint, set, clear).map_err(|e| {
        let names = attrs.join(",");
        match e.raw_os_error() {
            Some(libc::EPERM) => io::Error::new(
                e.kind(),
                format!("mount option `{names}`: {e} (only root can set it on a FUSE mount)"),
            ),
            _ => io::Error::new(e.kind(), format!("mount option `{names}`: mount_setattr: {e}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unmount racing a request ends the session with ECONNABORTED: a clean end.
    /// Any other error still fails the mount.
    #[test]
    fn an_unmount_that_raced_a_request_is_a_clean_end() {
        let aborted = io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert!(session_ended(Err(aborted)).is_ok());
        assert!(session_ended(Ok(())).is_ok());
        let e = session_ended(Err(io::Error::from_raw_os_error(libc::EIO))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        let panicked = io::Error::other("event loop thread panicked");
        assert!(session_ended(Err(panicked)).is_err());
    }
}
