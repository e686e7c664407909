//! The narrow I/O interface a container needs, and its implementation over a real file.
//! Everything above this trait is testable on [`crate::sim::MemDisk`], which can lose
//! unsynced writes and tear a write.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

/// Positioned I/O on one backing file. Methods take `&self` so extents can be written from
/// several threads at once (pwrite is safe to call concurrently on distinct ranges).
#[allow(clippy::len_without_is_empty)] // a file length, not a collection
pub trait Storage: Send + Sync {
    /// Reads up to `buf.len()` bytes at `off`; returns the bytes read, short only at EOF.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `off`, extending the file when needed.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Deallocates `[off, off+len)` without changing the file length; reads there return zeros.
    fn punch(&self, off: u64, len: u64) -> io::Result<()>;
    /// Makes every completed write, punch and length change durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Sets the file length.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The file length.
    fn len(&self) -> io::Result<u64>;
    /// The first offset ≥ `off` that may hold data (`None`: only holes from `off` to EOF).
    /// The default knows nothing about holes and answers `off`.
    fn next_data(&self, off: u64) -> io::Result<Option<u64>> {
        Ok(if off < self.len()? { Some(off) } else { None })
    }
}

/// Reads exactly `buf.len()` bytes unless EOF comes first; returns the count.
pub fn read_full<S: Storage + ?Sized>(s: &S, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = s.read_at(&mut buf[done..], off + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// A real backing file.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
}

impl FileStorage {
    pub fn new(file: File) -> FileStorage {
        FileStorage { file }
    }

    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Storage for FileStorage {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, off) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.file.write_all_at(buf, off)
    }

    fn punch(&self, off: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (Ok(o), Ok(l)) = (i64::try_from(off), i64::try_from(len)) else {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        };
        sys::punch_hole(self.file.as_fd(), o, l)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn next_data(&self, off: u64) -> io::Result<Option<u64>> {
        let Ok(o) = i64::try_from(off) else {
            return Ok(None);
        };
        let e = match sys::seek_data(self.file.as_fd(), o) {
            Ok(r) => return Ok(Some(r as u64)),
            Err(e) => e,
        };
        match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            // A host without SEEK_DATA: assume data.
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(Some(off)),
            _ => Err(e),
        }
    }
}

/// The two Linux calls `FileStorage` needs that std does not wrap: punching a hole
/// (`fallocate(2)`) and finding data (`lseek(2)` with `SEEK_DATA`).
///
/// The crate's only `unsafe`. `nix` wraps both calls safely, but no crate of the workspace
/// uses it yet and the workspace's `nix = "0.29"` is not in Cargo.lock: taking it would add
/// a second version of nix beside fuser's (0.31) for two system calls.
#[allow(unsafe_code)]
mod sys {
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd};

    /// Deallocates `[off, off+len)` without changing the file's length.
    pub(super) fn punch_hole(fd: BorrowedFd<'_>, off: i64, len: i64) -> io::Result<()> {
        // SAFETY: fallocate(2) takes no pointers, only integers and a file descriptor, and
        // `BorrowedFd` guarantees that descriptor is open for the whole call. It cannot
        // touch this process's memory; every failure is reported through errno, read at
        // once below.
        let r = unsafe {
            libc::fallocate(
                fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// The first offset ≥ `off` holding data (`ENXIO`: only holes from `off` on).
    pub(super) fn seek_data(fd: BorrowedFd<'_>, off: i64) -> io::Result<i64> {
        // SAFETY: lseek(2) takes no pointers, only integers and a file descriptor that
        // `BorrowedFd` keeps open for the whole call; failures come back through errno, read
        // at once below. It moves the descriptor's file offset, which nothing here relies
        // on: `FileStorage` does all its I/O with explicit offsets (pread/pwrite).
        let r = unsafe { libc::lseek(fd.as_raw_fd(), off, libc::SEEK_DATA) };
        if r >= 0 {
            Ok(r)
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
