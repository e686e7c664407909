//! One daemon (or `squeezefs check --repair`) per backing directory, on this machine and
//! across the clients of a network filesystem:
//! * an exclusive `flock` on the backing directory itself, which the local kernel enforces
//!   (`/proc/locks` then tells which process holds it);
//! * an exclusive `flock` on the regular file [`LOCK_FILE`] in it, which a network
//!   filesystem's server enforces across its clients. Measured on GlusterFS 10.3 (a
//!   replica-2 volume, two FUSE clients): a `flock` on a directory is not seen by the other
//!   client; a `flock`, a POSIX or OFD `fcntl` lock on a regular file and an `O_EXCL` create
//!   are refused there, and the lock goes when its holder dies (kill -9) or when its client
//!   does. docs/RELIABILITY.md has the matrix for GlusterFS, CephFS and NFS.
//!
//! Both are dropped by the kernel (or the server) when the holder dies, so a daemon killed
//! with SIGKILL never blocks the next mount. A backing directory where the lock file cannot
//! be made (read-only) has the directory lock alone.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The lock file in a backing directory's root: empty, hidden from the mount, left out by
/// the tools that walk a backing tree.
pub const LOCK_FILE: &str = ".squeezefs-lock";

/// Holds the lock while alive. (The file's lock goes first, then the directory's: a local
/// waiter that gets the directory then finds the file free.)
#[derive(Debug)]
pub struct BackingLock {
    _file: Option<File>,
    _dir: File,
}

/// Takes the lock file's `flock` (after the directory's). `Ok(None)`: no lock file could be
/// made (a read-only backing directory); an error when another holder has it.
fn lock_file(backing: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = backing.join(LOCK_FILE);
    // Made at the first mount: the root's times (the mount root's, the user's) stay.
    let made = squeezefs_container::keeping_times(backing, || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
    });
    let f = match made {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EACCES)) => {
            log::info!("{}: {e}; locking the backing directory alone", path.display());
            return Ok(None);
        }
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("lock file {}: {e}", path.display()),
            ))
        }
    };
    match crate::sys::try_lock_exclusive(&f) {
        Ok(true) => Ok(Some(f)),
        Ok(false) => Err(io::Error::other(format!(
            "backing directory {} is in use by a squeezefs elsewhere: its lock file {} is held, \
             and no process on this machine holds the directory — another machine (a client of \
             the same network filesystem) serves it. One squeezefs per backing directory: \
             unmount it there first (a holder that died releases the lock by itself)",
            backing.display(),
            path.display()
        ))),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot lock {}: {e}", path.display()),
        )),
    }
}

/// The pid holding an flock on the file with (`dev`, `ino`), from `/proc/locks`.
fn holder(dev: u64, ino: u64) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 12345 00:2a:123456 0 EOF"
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

fn describe(pid: u32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    if cmd.is_empty() {
        format!("process {pid}")
    } else {
        format!("process {pid} ({cmd})")
    }
}

/// The process holding `backing`'s lock (the daemon serving it), if any.
pub fn holder_of(backing: &Path) -> Option<u32> {
    let m = std::fs::metadata(backing).ok()?;
    holder(m.dev(), m.ino())
}

/// Takes the lock on `backing`, or fails with a message naming the holder.
pub fn lock(backing: &Path) -> io::Result<BackingLock> {
    let dir = lock_dir(backing)?;
    Ok(BackingLock {
        _file: lock_file(backing)?,
        _dir: dir,
    })
}

/// Whether a squeezefs serves `dir`, taking nothing and creating nothing (`compress` asks
/// of every ancestor of what it converts): an error of kind `WouldBlock`, naming the
/// holder, when the directory's lock is held here or its lock file is held by anyone.
pub fn probe(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    drop(lock_dir(dir)?);
    let path = dir.join(LOCK_FILE);
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(_) => return Ok(()), // none (not a backing directory), or not ours to judge
    };
    match crate::sys::try_lock_exclusive(&f) {
        Ok(false) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "backing directory {} is in use by a squeezefs: its lock file {} is held (on \
                 another machine if no process here holds the directory)",
                dir.display(),
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Takes the `flock` of the directory `backing` itself, or fails naming the holder.
fn lock_dir(backing: &Path) -> io::Result<File> {
    let dir = File::open(backing)
        .map_err(|e| io::Error::new(e.kind(), format!("backing directory {}: {e}", backing.display())))?;
    match crate::sys::try_lock_exclusive(&dir) {
        Ok(true) => return Ok(dir),
        Ok(false) => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot lock backing directory {}: {e}", backing.display()),
            ))
        }
    }
    let who = dir
        .metadata()
        .ok()
        .and_then(|m| holder(m.dev(), m.ino()))
        .map_or_else(|| "another process".to_string(), describe);
    Err(io::Error::new(
        io::ErrorKind::WouldBlock,
        format!(
            "backing directory {} is in use by {who}: one squeezefs per backing directory \
             (unmount the other mount first)",
            backing.display()
        ),
    ))
}

/// [`lock`], waiting for a holder that is finishing: a daemon whose mount is gone (just
/// unmounted: `umount` returns before the daemon has written its last files out and
/// exited) or a `check --repair`, for up to `wait`. A holder still serving a mount of
/// `backing` is refused at once, naming where it is mounted. `waiting` is called once,
/// with the reason, if it has to wait.
pub fn lock_wait(
    backing: &Path,
    wait: std::time::Duration,
    waiting: impl FnOnce(&str),
) -> io::Result<BackingLock> {
    let deadline = std::time::Instant::now() + wait;
    let mut waiting = Some(waiting);
    loop {
        match lock(backing) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Some(m) = crate::mountinfo::mounted_from(backing) {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{e}; it is mounted at {}", m.mountpoint.display()),
                    ));
                }
                if std::time::Instant::now() >= deadline {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{e}; still held after {} s", wait.as_secs()),
                    ));
                }
                if let Some(w) = waiting.take() {
                    w(&e.to_string());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Whether process `pid` still runs: it exists and has not exited. A zombie (exited,
/// not collected by its parent yet) has closed all its files — once its other threads are
/// gone too: its main thread is a zombie as soon as it ends, while the others may still
/// be exiting (and holding the files they share), so it is running while
/// `/proc/PID/task` lists more than it.
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold any
        // character: look after the last ')'.
        Ok(stat) => {
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
            !zombie || std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|t| t.count() > 1)
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// `f` until it returns `Some`, 5 s at most. A lock dropped here can outlive its drop
    /// for an instant: another test of this process forking a child (`Command::spawn`)
    /// gives the child a copy of every descriptor, the lock's included, until its `exec`
    /// closes them (CI saw a re-lock refused "in use by process" this very process).
    fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(t) = f() {
                return t;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "still held after 5 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_zombie_is_not_running() {
        assert!(running(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let start = Instant::now();
        while running(child.id()) {
            assert!(start.elapsed() < Duration::from_secs(10), "`true` never ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Exited, not collected yet: a zombie, which `umount` must not wait for.
        assert!(std::path::Path::new(&format!("/proc/{}", child.id())).exists());
        child.wait().unwrap();
        assert!(!running(child.id()));
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_freed_on_drop() {
        let dir = std::env::temp_dir().join(format!("squeezefs-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = lock(&dir).unwrap();
        let e = lock(&dir).unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(msg.contains(&format!("process {}", std::process::id())), "{msg}");
        drop(first);
        let again = eventually(|| lock(&dir).ok());
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `probe` tells a served directory and creates nothing in one that is not (offline
    /// `compress` asks of every ancestor: it made `/.squeezefs-lock`, `/tmp/.squeezefs-lock`).
    #[test]
    fn a_probe_finds_a_held_lock_and_leaves_no_file_behind() {
        let dir = std::env::temp_dir().join(format!("squeezefs-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        probe(&dir).unwrap();
        assert!(!dir.join(LOCK_FILE).exists(), "a probe made a lock file");
        let held = lock(&dir).unwrap();
        assert_eq!(probe(&dir).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        // Held by another machine: the lock file alone (its directory lock is not seen).
        let other = File::open(dir.join(LOCK_FILE)).unwrap();
        drop(held);
        eventually(|| crate::sys::try_lock_exclusive(&other).unwrap().then_some(()));
        assert_eq!(probe(&dir).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        drop(other);
        eventually(|| probe(&dir).ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
