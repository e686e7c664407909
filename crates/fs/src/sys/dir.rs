//! Directories and the filesystem under them: listing a directory whole, what filesystem
//! it is on, and its inode flags (casefold, encryption, project inheritance).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};

use super::{cvt, owned, raw, reopen};

/// A directory's entries (name, `d_ino`, `d_type`), `..` included, `.` not.
pub fn read_dir(fd: impl AsFd) -> io::Result<Vec<(Vec<u8>, u64, u8)>> {
    let d = reopen(fd, libc::O_RDONLY | libc::O_DIRECTORY)?;
    // fdopendir takes ownership of the fd it is given (closedir closes it): hand it a
    // fresh one, released from its OwnedFd so it is closed exactly once, by closedir.
    let dup = OwnedFd::from(d).into_raw_fd();
    // SAFETY: `dup` is an open directory fd we own; on success the DIR owns it.
    let dirp = unsafe { libc::fdopendir(dup) };
    if dirp.is_null() {
        let e = io::Error::last_os_error();
        drop(owned(dup));
        return Err(e);
    }
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: readdir64 reports an error only through errno, which must be cleared
        // first; `__errno_location` is this thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `dirp` is a live DIR* (closed only below, after the loop).
        let ent = unsafe { libc::readdir64(dirp) };
        if ent.is_null() {
            // SAFETY: as above.
            let errno = unsafe { *libc::__errno_location() };
            break if errno != 0 {
                Err(io::Error::from_raw_os_error(errno))
            } else {
                Ok(())
            };
        }
        // SAFETY: a non-null entry stays valid until the next readdir on `dirp`; its name
        // is NUL-terminated. Both are copied out before then.
        let ent = unsafe { &*ent };
        let name = unsafe { CStr::from_ptr(ent.d_name.as_ptr()) }.to_bytes();
        if name == b"." {
            continue;
        }
        out.push((name.to_vec(), ent.d_ino, ent.d_type));
    };
    // SAFETY: `dirp` is live and closed once; it closes the fd it owns.
    unsafe { libc::closedir(dirp) };
    result.map(|()| out)
}

/// The type of the filesystem `fd` is on (`statfs.f_type`, e.g. `libc::EXT4_SUPER_MAGIC`).
pub fn fs_type(fd: impl AsFd) -> io::Result<i64> {
    // SAFETY: statfs is plain data; all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable statfs; the descriptor is borrowed for the call.
    cvt(unsafe { libc::fstatfs(raw(&fd), &mut st) })?;
    #[allow(clippy::unnecessary_cast)] // (its type differs between architectures)
    Ok(st.f_type as i64)
}

/// The inode flags (`FS_IOC_GETFLAGS`: casefold, encrypt, …) of the directory the O_PATH
/// fd `dir` stands for; 0 where its filesystem keeps none.
pub fn dir_flags(dir: impl AsFd) -> io::Result<u32> {
    let f = reopen(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    // (The kernel writes an int, whatever the request's declared size.)
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes an int into `flags`, which lives across the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOTTY | libc::EOPNOTSUPP | libc::EINVAL) => Ok(0),
            _ => Err(e),
        };
    }
    Ok(flags as u32)
}
