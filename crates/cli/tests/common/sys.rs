//! The system calls the tests make that std and nix do not wrap as the tests need them:
//! each wrapper takes `&Path`/`&CStr`/`AsFd` and returns what the C call returns (0 or -1,
//! a length or -1), leaving `errno` as the call set it, so a test can check the exact
//! errno the filesystem answered. The only module of the tests allowed `unsafe`.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `lseek(2)`: the new offset, or -1 with errno set.
pub fn lseek(fd: impl AsFd, off: i64, whence: i32) -> i64 {
    // SAFETY: the descriptor is borrowed, so open for the whole call; lseek touches no memory.
    unsafe { libc::lseek(fd.as_fd().as_raw_fd(), off, whence) }
}

/// `close(2)` of a file the caller gives up: 0, or -1 with errno set (dropping a `File`
/// ignores what `close` reports).
pub fn close(f: std::fs::File) -> i32 {
    use std::os::fd::IntoRawFd;
    let fd = f.into_raw_fd();
    // SAFETY: `fd` was the `File`'s own descriptor, given up by `into_raw_fd`: nothing else
    // owns or closes it.
    unsafe { libc::close(fd) }
}

/// `fallocate(2)`: 0, or -1 with errno set.
pub fn fallocate(fd: impl AsFd, mode: i32, off: i64, len: i64) -> i32 {
    // SAFETY: the descriptor is borrowed, so open for the whole call; no memory is passed.
    unsafe { libc::fallocate(fd.as_fd().as_raw_fd(), mode, off, len) }
}

/// `copy_file_range(2)` of `len` bytes at the files' own offsets: bytes copied, or -1.
pub fn copy_file_range(src: impl AsFd, dst: impl AsFd, len: usize) -> isize {
    // SAFETY: both descriptors are borrowed, so open for the whole call; the offset
    // pointers are NULL (the files' own offsets are used).
    unsafe {
        libc::copy_file_range(
            src.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            dst.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            len,
            0,
        )
    }
}

/// `getxattr(2)` (symlinks followed) into `buf`: the value's length, or -1 with errno set.
/// An empty `buf` is the size query (`getxattr(path, name, NULL, 0)`).
pub fn getxattr(path: &Path, name: &CStr, buf: &mut [u8]) -> isize {
    let p = c(path);
    let value = if buf.is_empty() {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: the strings are NUL-terminated and outlive the call; the kernel writes at
    // most `buf.len()` bytes at `value` (none when it is NULL and the length 0).
    unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), value, buf.len()) }
}

/// `setxattr(2)` (symlinks followed), flags 0: 0, or -1 with errno set.
pub fn setxattr(path: &Path, name: &CStr, value: &[u8]) -> i32 {
    let p = c(path);
    // SAFETY: the strings are NUL-terminated and outlive the call; the kernel reads
    // `value.len()` bytes of `value`.
    unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) }
}

/// `listxattr(2)` (symlinks followed) into `buf`: the list's length, or -1 with errno set.
pub fn listxattr(path: &Path, buf: &mut [u8]) -> isize {
    let p = c(path);
    // SAFETY: the path is NUL-terminated and outlives the call; the kernel writes at most
    // `buf.len()` bytes into `buf`.
    unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
}

/// `removexattr(2)` (symlinks followed): 0, or -1 with errno set.
pub fn removexattr(path: &Path, name: &CStr) -> i32 {
    let p = c(path);
    // SAFETY: both strings are NUL-terminated and outlive the call.
    unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }
}

/// `mknod(2)`: 0, or -1 with errno set.
pub fn mknod(path: &Path, mode: libc::mode_t, dev: libc::dev_t) -> i32 {
    let p = c(path);
    // SAFETY: the path is NUL-terminated and outlives the call.
    unsafe { libc::mknod(p.as_ptr(), mode, dev) }
}

/// `mkfifo(3)`: 0, or -1 with errno set.
pub fn mkfifo(path: &Path, mode: libc::mode_t) -> i32 {
    let p = c(path);
    // SAFETY: the path is NUL-terminated and outlives the call.
    unsafe { libc::mkfifo(p.as_ptr(), mode) }
}

/// `renameat2(2)` of two paths (relative ones from the working directory) with `flags`:
/// 0, or -1 with errno set.
pub fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> libc::c_int {
    let (a, b) = (c(from), c(to));
    // SAFETY: both paths are NUL-terminated and outlive the call.
    unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) }
}

/// Whether the first page of the file is in the page cache: `mincore(2)` of a one-page
/// shared mapping of it.
pub fn first_page_cached(f: impl AsFd) -> bool {
    // SAFETY: a fresh read-only mapping chosen by the kernel (NULL hint) of one page of a
    // borrowed, open descriptor; it is only passed to mincore, which writes one byte per
    // page into `v` (one page: one byte), and unmapped before returning. No Rust reference
    // points into it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_fd().as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        let mut v = [0u8; 1];
        assert_eq!(libc::mincore(p, 4096, v.as_mut_ptr()), 0);
        libc::munmap(p, 4096);
        v[0] & 1 == 1
    }
}

/// Which pages of the first `len` bytes of the file are in the page cache: `mincore(2)` of
/// a shared read-only mapping of them.
pub fn pages_cached(f: impl AsFd, len: usize) -> Vec<bool> {
    let pages = len.div_ceil(4096);
    // SAFETY: a fresh read-only mapping chosen by the kernel (NULL hint) of `len` bytes of a
    // borrowed, open descriptor; it is only passed to mincore, which writes one byte per
    // page into `v` (sized for every page), and unmapped before returning. No Rust
    // reference points into it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_fd().as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        let mut v = vec![0u8; pages];
        assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0);
        libc::munmap(p, len);
        v.iter().map(|b| b & 1 == 1).collect()
    }
}

/// `posix_fadvise(2)` of the whole file (`POSIX_FADV_RANDOM`: no read-ahead;
/// `POSIX_FADV_DONTNEED`: the file's clean pages dropped, no root needed).
pub fn fadvise(f: impl AsFd, advice: i32) {
    // SAFETY: plain syscall on a borrowed, open descriptor; no memory is passed.
    let r = unsafe { libc::posix_fadvise(f.as_fd().as_raw_fd(), 0, 0, advice) };
    assert_eq!(r, 0, "posix_fadvise({advice})");
}

/// A directory stream (`opendir(3)`), read with `readdir64` and rewound with `rewinddir`
/// exactly when the test says (nix's `Dir` rewinds whenever an iterator is dropped).
pub struct DirStream(std::ptr::NonNull<libc::DIR>);

impl DirStream {
    pub fn open(path: &Path) -> Option<DirStream> {
        let p = c(path);
        // SAFETY: the path is NUL-terminated and outlives the call; the stream returned
        // (or NULL) is owned by the DirStream and closed once, in Drop.
        std::ptr::NonNull::new(unsafe { libc::opendir(p.as_ptr()) }).map(DirStream)
    }

    pub fn rewind(&mut self) {
        // SAFETY: the stream is open (closed only in Drop) and used by one thread (&mut).
        unsafe { libc::rewinddir(self.0.as_ptr()) }
    }

    /// Every name from where the stream stands, with `d_ino`.
    pub fn read_all(&mut self) -> Vec<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        loop {
            // SAFETY: the stream is open and used by one thread (&mut self); the entry
            // returned stays valid until the next readdir64 on this stream, and is copied
            // out (name bytes up to the NUL glibc puts in d_name) before that.
            unsafe {
                let e = libc::readdir64(self.0.as_ptr());
                if e.is_null() {
                    return out;
                }
                let e = &*e;
                let name = CStr::from_ptr(e.d_name.as_ptr());
                out.push((name.to_bytes().to_vec(), e.d_ino));
            }
        }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the stream was opened by opendir and is closed only here.
        unsafe { libc::closedir(self.0.as_ptr()) };
    }
}

/// Makes `cmd`'s child start with an open-file limit (soft and hard) of `n`.
pub fn limit_open_files(cmd: &mut Command, n: u64) {
    use nix::sys::resource::{setrlimit, Resource};
    // SAFETY: the closure runs in the child between fork and exec, and only makes the
    // setrlimit system call, which is async-signal-safe (no allocation, no locks).
    unsafe {
        cmd.pre_exec(move || setrlimit(Resource::RLIMIT_NOFILE, n, n).map_err(std::io::Error::from));
    }
}

/// `sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER` over the
/// whole file: the kernel writes its dirty pages back (on FUSE: WRITE requests) and waits
/// for them, without an fsync. 0, or -1 with errno set.
pub fn write_back_pages(fd: impl AsFd) -> i32 {
    // SAFETY: the descriptor is borrowed, so open for the whole call; no memory is passed.
    unsafe {
        libc::sync_file_range(
            fd.as_fd().as_raw_fd(),
            0,
            0,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    }
}
