//! Extended attributes of the file an fd refers to. The fd may be an `O_PATH` one, which
//! `fgetxattr` and kin refuse: the calls go through its `/proc/self/fd` path, which names
//! that very file and follows no symlink out of the backing directory.

use std::ffi::CStr;
use std::io;
use std::os::fd::AsFd;

use super::{cvt, proc_path};

pub fn xattr_get(fd: impl AsFd, name: &CStr, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_path(&fd);
    let mut buf = vec![0u8; size];
    // SAFETY: the kernel writes at most `size` (= buf.len()) bytes into `buf`; both strings
    // are NUL-terminated and outlive the call.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_void,
            size,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// The length of an xattr's value (`getxattr` with an empty buffer: the kernel's size query).
pub fn xattr_size(fd: impl AsFd, name: &CStr) -> io::Result<usize> {
    let p = proc_path(&fd);
    // SAFETY: a NULL buffer with size 0 is getxattr's documented size query; both strings
    // are NUL-terminated and live across the call.
    let n = unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

pub fn xattr_list(fd: impl AsFd, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_path(&fd);
    let mut buf = vec![0u8; size];
    // SAFETY: the kernel writes at most `size` (= buf.len()) bytes into `buf`.
    let n = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, size) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

pub fn xattr_set(fd: impl AsFd, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    let p = proc_path(&fd);
    // SAFETY: the kernel reads `value.len()` bytes from `value`; strings NUL-terminated.
    cvt(unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr() as *const libc::c_void,
            value.len(),
            flags,
        )
    })
    .map(drop)
}

pub fn xattr_remove(fd: impl AsFd, name: &CStr) -> io::Result<()> {
    let p = proc_path(&fd);
    // SAFETY: both strings are NUL-terminated and outlive the call.
    cvt(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }).map(drop)
}
