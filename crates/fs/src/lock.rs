//! One daemon (or `squeezefs check --repair`) per backing directory: an exclusive `flock` on
//! the backing directory itself. Nothing is written into the directory, and the kernel drops
//! the lock when its holder dies, so a daemon killed with SIGKILL never blocks the next mount.
//! When the lock is taken, `/proc/locks` tells which process holds it.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Holds the lock while alive.
#[derive(Debug)]
pub struct BackingLock {
    _dir: File,
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
    let dir = File::open(backing)
        .map_err(|e| io::Error::new(e.kind(), format!("backing directory {}: {e}", backing.display())))?;
    match crate::sys::try_lock_exclusive(&dir) {
        Ok(true) => return Ok(BackingLock { _dir: dir }),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let again = lock(&dir).unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
