//! Thin, safe wrappers over the `*at()` system calls the filesystem uses. Every path is a
//! single name relative to a directory fd, or an fd itself (through `/proc/self/fd`), so
//! nothing is ever resolved from the backing root and no symlink is followed out of it.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

pub type Stat = libc::stat;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A directory entry's name as the kernel hands it over, checked to be one component: not
/// empty, no `/`, not `.` or `..` (which would address the parent of the backing root). The
/// kernel never sends those; a daemon that trusted them could be walked out of BACKING.
pub fn entry_name(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    cstr(name)
}

/// `/proc/self/fd/N`: reopens or addresses the file an O_PATH fd refers to.
pub fn proc_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL")
}

pub fn open_path(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let fd = cvt(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn open_root(path: &std::path::Path) -> io::Result<OwnedFd> {
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the file behind an O_PATH fd for I/O with `flags`.
pub fn reopen(fd: RawFd, flags: i32) -> io::Result<std::fs::File> {
    let p = proc_path(fd);
    let r = cvt(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC) })?;
    Ok(unsafe { std::fs::File::from_raw_fd(r) })
}

/// Creates and opens a regular file `name` in `dir` for reading and writing (`O_EXCL`).
pub fn create_rw(dir: RawFd, name: &CStr, mode: u32) -> io::Result<std::fs::File> {
    let r = cvt(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(unsafe { std::fs::File::from_raw_fd(r) })
}

pub fn fstat(fd: RawFd) -> io::Result<Stat> {
    let mut st: Stat = unsafe { std::mem::zeroed() };
    cvt(unsafe {
        libc::fstatat(
            fd,
            c"".as_ptr(),
            &mut st,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

pub fn mkdirat(dir: RawFd, name: &CStr, mode: u32) -> io::Result<()> {
    cvt(unsafe { libc::mkdirat(dir, name.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(dir: RawFd, name: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    cvt(unsafe { libc::mknodat(dir, name.as_ptr(), mode, rdev) }).map(drop)
}

pub fn symlinkat(target: &CStr, dir: RawFd, name: &CStr) -> io::Result<()> {
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) }).map(drop)
}

pub fn readlink(fd: RawFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    let n = unsafe { libc::readlinkat(fd, c"".as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

pub fn unlinkat(dir: RawFd, name: &CStr, flags: i32) -> io::Result<()> {
    cvt(unsafe { libc::unlinkat(dir, name.as_ptr(), flags) }).map(drop)
}

pub fn renameat2(od: RawFd, on: &CStr, nd: RawFd, nn: &CStr, flags: u32) -> io::Result<()> {
    cvt(unsafe { libc::renameat2(od, on.as_ptr(), nd, nn.as_ptr(), flags) }).map(drop)
}

/// Hard link to the file behind an O_PATH fd.
pub fn linkat(fd: RawFd, dir: RawFd, name: &CStr) -> io::Result<()> {
    let p = proc_path(fd);
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            p.as_ptr(),
            dir,
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

pub fn chmod(fd: RawFd, mode: u32) -> io::Result<()> {
    let p = proc_path(fd);
    cvt(unsafe { libc::chmod(p.as_ptr(), mode) }).map(drop)
}

pub fn chown(fd: RawFd, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let u = uid.unwrap_or(u32::MAX);
    let g = gid.unwrap_or(u32::MAX);
    cvt(unsafe {
        libc::fchownat(
            fd,
            c"".as_ptr(),
            u,
            g,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// Sets times on the file behind an O_PATH fd, symlinks included (`AT_EMPTY_PATH` on
/// the fd itself, which Linux accepts for utimensat since 5.8; older kernels fall back to
/// the `/proc/self/fd` path, which cannot reach a symlink).
pub fn utimens(fd: RawFd, atime: libc::timespec, mtime: libc::timespec) -> io::Result<()> {
    let t = [atime, mtime];
    let r = unsafe { libc::utimensat(fd, c"".as_ptr(), t.as_ptr(), libc::AT_EMPTY_PATH) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(e);
    }
    let p = proc_path(fd);
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), t.as_ptr(), 0) }).map(drop)
}

pub fn statvfs(fd: RawFd) -> io::Result<libc::statvfs> {
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstatvfs(fd, &mut s) })?;
    Ok(s)
}

/// Entries of a directory (without `.` and `..`): name, backing inode, d_type.
/// A directory's entries (name, `d_ino`, `d_type`), `..` included, `.` not.
pub fn read_dir(fd: RawFd) -> io::Result<Vec<(Vec<u8>, u64, u8)>> {
    let d = reopen(fd, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let raw = d.as_raw_fd();
    let dup = cvt(unsafe { libc::dup(raw) })?;
    let dirp = unsafe { libc::fdopendir(dup) };
    if dirp.is_null() {
        let e = io::Error::last_os_error();
        unsafe { libc::close(dup) };
        return Err(e);
    }
    let mut out = Vec::new();
    loop {
        unsafe { *libc::__errno_location() = 0 };
        let ent = unsafe { libc::readdir64(dirp) };
        if ent.is_null() {
            let errno = unsafe { *libc::__errno_location() };
            unsafe { libc::closedir(dirp) };
            if errno != 0 {
                return Err(io::Error::from_raw_os_error(errno));
            }
            break;
        }
        let ent = unsafe { &*ent };
        let name = unsafe { CStr::from_ptr(ent.d_name.as_ptr()) }.to_bytes();
        if name == b"." {
            continue;
        }
        out.push((name.to_vec(), ent.d_ino, ent.d_type));
    }
    Ok(out)
}

pub fn xattr_get(fd: RawFd, name: &CStr, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_path(fd);
    let mut buf = vec![0u8; size];
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
pub fn xattr_size(fd: RawFd, name: &CStr) -> io::Result<usize> {
    let p = proc_path(fd);
    // SAFETY: a NULL buffer with size 0 is getxattr's documented size query; both strings
    // are NUL-terminated and live across the call.
    let n = unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

pub fn xattr_list(fd: RawFd, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_path(fd);
    let mut buf = vec![0u8; size];
    let n = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, size) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

pub fn xattr_set(fd: RawFd, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    let p = proc_path(fd);
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

pub fn xattr_remove(fd: RawFd, name: &CStr) -> io::Result<()> {
    let p = proc_path(fd);
    cvt(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }).map(drop)
}

pub fn fsync_path(fd: RawFd, data_only: bool) -> io::Result<()> {
    let f = reopen(fd, libc::O_RDONLY)?;
    if data_only {
        f.sync_data()
    } else {
        f.sync_all()
    }
}

/// The kernel's persistent handle of the file `fd` refers to (`name_to_handle_at` with
/// `AT_EMPTY_PATH`): its mount id and the opaque handle (type ‖ bytes).
pub fn file_handle(fd: RawFd) -> io::Result<(i32, Box<[u8]>)> {
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
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            fd,
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
pub fn open_handle(mount_fd: RawFd, handle: &[u8]) -> io::Result<OwnedFd> {
    open_handle_with(mount_fd, handle, libc::O_PATH | libc::O_NOFOLLOW)
}

/// [`open_handle`] with other open flags (`O_RDWR` to open a file for I/O without going
/// through `/proc/self/fd`).
pub fn open_handle_with(mount_fd: RawFd, handle: &[u8], flags: i32) -> io::Result<OwnedFd> {
    if handle.len() < 4 || handle.len() > 4 + 128 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = vec![0u8; 8 + handle.len() - 4];
    buf[0..4].copy_from_slice(&((handle.len() - 4) as u32).to_ne_bytes());
    buf[4..8].copy_from_slice(&handle[0..4]);
    buf[8..].copy_from_slice(&handle[4..]);
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd,
            buf.as_mut_ptr(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_single_components() {
        for bad in ["", ".", "..", "a/b", "/", "../x"] {
            assert!(entry_name(OsStr::new(bad)).is_err(), "{bad:?}");
        }
        for good in ["a", "...", ".hidden", "a b", "ü"] {
            assert!(entry_name(OsStr::new(good)).is_ok(), "{good:?}");
        }
    }

    /// Needs CAP_DAC_READ_SEARCH (root) for the reopen; name_to_handle_at works for anyone.
    #[test]
    fn handles_round_trip() {
        let dir = std::env::temp_dir();
        let fd = open_root(&dir).unwrap();
        let (_, h) = file_handle(fd.as_raw_fd()).unwrap();
        let st = fstat(fd.as_raw_fd()).unwrap();
        let mount_fd = reopen(fd.as_raw_fd(), libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
        match open_handle(mount_fd.as_raw_fd(), &h) {
            Ok(again) => assert_eq!(fstat(again.as_raw_fd()).unwrap().st_ino, st.st_ino),
            Err(e) => assert_ne!(unsafe { libc::geteuid() }, 0, "root must reopen by handle: {e}"),
        }
    }
}
