//! The system calls the `squeezefs` binary makes that neither std nor nix wraps safely:
//! `fork`, the path-based xattr calls, `mallinfo2` and SIGPIPE's disposition. Each wrapper takes Rust types
//! (`&Path`, `&CStr`, slices) and returns `io::Result`, the error being the call's errno
//! (`io::Error::last_os_error()`), as before. This is the only module of the binary allowed
//! `unsafe` (main.rs denies it elsewhere).

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Which side of a `fork` we are on.
pub enum Forked {
    Parent,
    Child,
}

/// `fork(2)`. Only to be called while the process has one thread: the child gets a copy of
/// the calling thread only, and must not depend on locks another thread held.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: the only caller is `squeezefs mount --daemon`, which forks from main before
    // any thread is started (logging set up, options parsed, nothing spawned), so no lock
    // or allocator state can be held by a thread missing in the child.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => Ok(Forked::Child),
        Ok(nix::unistd::ForkResult::Parent { .. }) => Ok(Forked::Parent),
        Err(e) => Err(e.into()),
    }
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `getxattr(2)` on `path` (symlinks followed) into `buf`: the length of the value.
pub fn getxattr(path: &Path, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let c = cpath(path)?;
    // SAFETY: both strings are NUL-terminated and outlive the call; the kernel writes at
    // most `buf.len()` bytes into `buf`, which is valid and exclusively borrowed.
    let n = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `setxattr(2)` on `path` (symlinks followed), `flags` 0 (create or replace).
pub fn setxattr(path: &Path, name: &CStr, value: &[u8]) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: both strings are NUL-terminated and outlive the call; the kernel reads
    // `value.len()` bytes of `value`.
    let r = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `removexattr(2)` on `path` (symlinks followed).
pub fn removexattr(path: &Path, name: &CStr) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: both strings are NUL-terminated and outlive the call.
    let r = unsafe { libc::removexattr(c.as_ptr(), name.as_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes the C heap holds right now (all arenas and mmapped chunks), from `mallinfo2(3)`.
pub fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 takes no arguments and returns a struct by value (glibc ≥ 2.33).
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

/// Gives SIGPIPE its default action back (the Rust runtime starts every program with it
/// ignored, so a write to a closed pipe returns EPIPE and `println!` panics with "failed
/// printing to stdout"). A report piped into `head` then ends the command quietly, as it
/// ends any Unix tool. Not for the daemon: one whose log pipe closes must keep serving.
pub fn default_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_DFL installs no handler, so no code runs in signal context; called from
    // main before any thread starts, so nothing races the change of disposition.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
