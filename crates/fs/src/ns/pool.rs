//! Files made ahead in the private directory (`.squeezefs-packs/.new-PID-SEQ`), for
//! CREATEs to take: made by the applier thread between its places, so the caller pays
//! no `openat(O_CREAT)`, `fstat`, `O_PATH` open or file handle.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use squeezefs_container::pack::dir::{DIR_NAME, POOL_PREFIX};

use crate::sys;

/// The mode pool files are made with; a CREATE asking another sets its own.
pub const POOL_MODE: u32 = 0o644;

/// A file made ahead: its name in the private directory, opened for I/O and as `O_PATH`,
/// and its file handle.
pub struct Ready {
    pub name: CString,
    pub file: std::fs::File,
    pub path: OwnedFd,
    pub handle: Option<(i32, Box<[u8]>)>,
}

/// The private directory, and the next pool file's number.
pub struct Pool {
    pub dir: std::fs::File,
    seq: AtomicU64,
}

impl Pool {
    /// The private directory of the backing directory whose root is `root` (made if
    /// missing, as the mount's probe does), with the pool files an earlier daemon left
    /// removed ([`recover`]).
    pub fn open(root: &std::fs::File) -> io::Result<Pool> {
        let name = CString::new(DIR_NAME).expect("no NUL");
        match sys::mkdirat(root, &name, 0o700) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let path = sys::open_path(root, &name)?;
        let dir = sys::reopen(&path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        recover(&dir)?;
        Ok(Pool {
            dir,
            seq: AtomicU64::new(1),
        })
    }

    /// One more file made ahead.
    pub fn make(&self) -> io::Result<Ready> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = CString::new(format!("{POOL_PREFIX}{}-{n}", std::process::id())).expect("no NUL");
        let file = sys::create_rw(&self.dir, &name, POOL_MODE)?;
        let path = match sys::open_path(&self.dir, &name) {
            Ok(x) => x,
            Err(e) => {
                let _ = sys::unlinkat(&self.dir, &name, 0);
                return Err(e);
            }
        };
        let handle = sys::file_handle(&path).ok();
        Ok(Ready {
            name,
            file,
            path,
            handle,
        })
    }

    /// Removes pool file `name` (one not taken, or whose place failed).
    pub fn remove(&self, name: &CString) {
        if let Err(e) = sys::unlinkat(&self.dir, name, 0) {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!("could not remove {DIR_NAME}/{}: {e}", name.to_string_lossy());
            }
        }
    }
}

/// Removes every pool file from the private directory `dir`: a daemon that ended without
/// applying its queue (a kill, a crash) left files that were never named — the tree is as
/// the mount showed it before their creates. Returns how many went.
pub fn recover(dir: &std::fs::File) -> io::Result<u64> {
    let mut n = 0;
    for (name, _, _) in sys::read_dir(dir)? {
        if !name.starts_with(POOL_PREFIX.as_bytes()) {
            continue;
        }
        let c = CString::new(name).expect("a listed name has no NUL");
        match sys::unlinkat(dir, &c, 0) {
            Ok(()) => n += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if n > 0 {
        log::info!("removed {n} files made ahead for new files and never named (the daemon before this one ended without naming them)");
    }
    Ok(n)
}
