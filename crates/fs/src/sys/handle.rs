//! File handles (`name_to_handle_at`, `open_by_handle_at`): how an inode is reopened
//! without a path, where the daemon may (CAP_DAC_READ_SEARCH).

use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};

use super::{owned, raw};

/// The kernel's persistent handle of the file `fd` refers to (`name_to_handle_at` with
/// `AT_EMPTY_PATH`): its mount id and the opaque handle (type ‖ bytes).
pub fn file_handle(fd: impl AsFd) -> io::Result<(i32, Box<[u8]>)> {
    const MAX: usize = 128; // MAX_HANDLE_SZ
    #[repr(C)]
    struct Fh {
        bytes: u32,
        kind: i32,
        data: [u8; MAX],
    }
    let mut fh = Fh {
        bytes: MAX as u32,
        kind: 0,
        data: [0; MAX],
    };
    let mut mount_id = 0i32;
    // SAFETY: `fh` has the layout of `struct file_handle` with room for MAX_HANDLE_SZ bytes
    // (announced in `bytes`, so the kernel writes no further); `mount_id` is an int.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            raw(&fd),
            c"".as_ptr(),
            &mut fh as *mut Fh,
            &mut mount_id as *mut i32,
            libc::AT_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (fh.bytes as usize).min(MAX);
    let mut out = Vec::with_capacity(4 + n);
    out.extend_from_slice(&fh.kind.to_ne_bytes());
    out.extend_from_slice(&fh.data[..n]);
    Ok((mount_id, out.into_boxed_slice()))
}

/// Opens a file by a handle from [`file_handle`] (`open_by_handle_at`, needs
/// CAP_DAC_READ_SEARCH), as an `O_PATH` fd. `mount_fd` must be a real open file on the same
/// filesystem, not an `O_PATH` one.
pub fn open_handle(mount_fd: impl AsFd, handle: &[u8]) -> io::Result<OwnedFd> {
    open_handle_with(mount_fd, handle, libc::O_PATH | libc::O_NOFOLLOW)
}

/// [`open_handle`] with other open flags (`O_RDWR` to open a file for I/O without going
/// through `/proc/self/fd`).
pub fn open_handle_with(mount_fd: impl AsFd, handle: &[u8], flags: i32) -> io::Result<OwnedFd> {
    if handle.len() < 4 || handle.len() > 4 + 128 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = vec![0u8; 8 + handle.len() - 4];
    buf[0..4].copy_from_slice(&((handle.len() - 4) as u32).to_ne_bytes());
    buf[4..8].copy_from_slice(&handle[0..4]);
    buf[8..].copy_from_slice(&handle[4..]);
    // SAFETY: `buf` is a `struct file_handle` (bytes, type, then `bytes` bytes of handle),
    // built above with its length checked; the kernel only reads it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            raw(&mount_fd),
            buf.as_mut_ptr(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned(fd as RawFd))
}
