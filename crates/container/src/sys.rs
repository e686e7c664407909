//! The Linux calls `FileStorage` and `open_at` need that std does not wrap: punching a hole
//! (`fallocate(2)`), finding data (`lseek(2)` with `SEEK_DATA`), a packed file's
//! location record (`fgetxattr(2)`, `fsetxattr(2)`, `fremovexattr(2)`), and `syncfs(2)`
//! and `openat2(2)` for pack reclaim (std has neither), the `FICLONERANGE` and
//! `FIDEDUPERANGE` ioctls that share blocks between two files (`copy_file_range` within a
//! mount, the background pass), and `FS_IOC_FIEMAP`, which tells which blocks are shared
//! (`squeezefs stats`); and `pread(2)` into a new buffer's uninitialised capacity (std's
//! `read_at` wants initialised bytes, and zeroing each payload's buffer before reading over
//! it was 2 % of a cold read's daemon time); and `sync_file_range(2)`, which starts a
//! file's writeback without waiting for it (std has only `sync_all`/`sync_data`, which wait).
//!
//! The crate's only `unsafe`. `nix` wraps the first two safely (not xattrs), but no crate of
//! the workspace uses it yet and the workspace's `nix = "0.29"` is not in Cargo.lock: taking
//! it would add a second version of nix beside fuser's (0.31) for two system calls. The
//! `xattr` crate would cover the last three, for three calls the fs crate already makes the
//! same way (`squeezefs_fs::sys`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Largest xattr value read (the kernel's limit is 64 KiB; squeezefs reads only its own
/// small records, so anything longer is refused by the caller's decoder anyway).
const XATTR_MAX: usize = 64 << 10;

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The value of xattr `name`, `None` when the file has none of that name.
pub(crate) fn get_xattr(fd: BorrowedFd<'_>, name: &str) -> io::Result<Option<Vec<u8>>> {
    let n = c_name(name)?;
    xattr_loop(|buf| {
        // SAFETY: `n` is a NUL-terminated string that outlives the call, and `buf` is a
        // live, writable allocation of exactly `buf.len()` bytes, which is the size
        // passed: the kernel writes at most that many bytes into it. The fd is kept open
        // by `BorrowedFd`. Failures come back through errno, read at once by the loop.
        unsafe { libc::fgetxattr(fd.as_raw_fd(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
    })
}

/// [`get_xattr`] of the file an `O_PATH` fd stands for (`fgetxattr` refuses such an fd:
/// the value is read through `/proc/self/fd/N`, which leads to the file itself).
pub(crate) fn get_xattr_at_path_fd(fd: BorrowedFd<'_>, name: &str) -> io::Result<Option<Vec<u8>>> {
    let n = c_name(name)?;
    let p = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL in a number");
    xattr_loop(|buf| {
        // SAFETY: `p` and `n` are NUL-terminated strings that outlive the call, and `buf`
        // is a live, writable allocation of exactly `buf.len()` bytes, which is the size
        // passed. The fd the path names is kept open by `BorrowedFd`.
        unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
    })
}

/// Calls `get` (an xattr read into the buffer it is given, returning the value's length or
/// -1 with errno) with a buffer grown until the value fits.
fn xattr_loop(mut get: impl FnMut(&mut [u8]) -> isize) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 256];
    loop {
        let r = get(&mut buf);
        if r >= 0 {
            buf.truncate(r as usize);
            return Ok(Some(buf));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENODATA) => return Ok(None),
            // Backing filesystems without user xattrs have no records.
            Some(libc::EOPNOTSUPP) => return Ok(None),
            Some(libc::ERANGE) if buf.len() < XATTR_MAX => buf.resize(XATTR_MAX, 0),
            _ => return Err(e),
        }
    }
}

/// `struct open_how` of openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &std::path::Path,
    flags: i32,
) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let p =
        CString::new(rel.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // (`openat2` refuses `O_PATH` with any flag but these.)
    let extra = if flags & libc::O_PATH != 0 {
        libc::O_CLOEXEC
    } else {
        libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK
    };
    let how = OpenHow {
        flags: (flags | extra) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `p` is NUL-terminated and outlives the call; `how` is a live, initialised
    // `open_how` of the size passed; the fd is kept open by `BorrowedFd`. The kernel
    // returns a new fd we own, or -1 with errno.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            p.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` is a new fd returned to us by the kernel, owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(r as i32) })
}

/// Up to `len` bytes at `off`, in a new buffer no byte of which was zeroed first; short
/// only at EOF.
pub(crate) fn pread_vec(fd: BorrowedFd<'_>, len: usize, off: u64) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    while buf.len() < len {
        let done = buf.len();
        let spare = buf.spare_capacity_mut();
        // (The capacity may exceed `len`: never more than asked for.)
        let n = (len - done).min(spare.len());
        let at = off
            .checked_add(done as u64)
            .and_then(|a| libc::off64_t::try_from(a).ok())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `spare` is this buffer's unused capacity: at least `n` writable bytes
        // that nothing else refers to; the kernel writes at most `n`, and returns how many
        // (or -1 with errno). The fd is kept open by `BorrowedFd`.
        let r = unsafe { libc::pread64(fd.as_raw_fd(), spare.as_mut_ptr().cast(), n, at) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            break;
        }
        // SAFETY: the kernel initialised the `r` (≤ `n`) bytes after `done`.
        unsafe { buf.set_len(done + r as usize) };
    }
    Ok(buf)
}

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Starts the writeback of the file's dirty pages (`sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE` over the whole file): it neither waits for it nor makes anything
/// durable (no metadata, no cache flush), so it orders nothing; a later `fsync` finds less
/// to do. Pages already under writeback are not waited for.
pub(crate) fn start_writeback(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain integer arguments; the fd is kept open by `BorrowedFd`.
    if unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain integer argument; the fd is kept open by `BorrowedFd`.
    if unsafe { libc::syncfs(fd.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn set_xattr(fd: BorrowedFd<'_>, name: &str, value: &[u8]) -> io::Result<()> {
    let n = c_name(name)?;
    // SAFETY: `n` is NUL-terminated and `value` is a live slice of `value.len()` bytes,
    // the length passed; the kernel only reads them during the call. The fd is kept
    // open by `BorrowedFd`; failures come back through errno.
    let r = unsafe { libc::fsetxattr(fd.as_raw_fd(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn remove_xattr(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let n = c_name(name)?;
    // SAFETY: `n` is NUL-terminated and outlives the call; the fd is kept open by
    // `BorrowedFd`; failures come back through errno.
    let r = unsafe { libc::fremovexattr(fd.as_raw_fd(), n.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Deallocates `[off, off+len)` without changing the file's length.
pub(crate) fn punch_hole(fd: BorrowedFd<'_>, off: i64, len: i64) -> io::Result<()> {
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
pub(crate) fn seek_data(fd: BorrowedFd<'_>, off: i64) -> io::Result<i64> {
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

/// `struct file_clone_range` of `linux/fs.h`.
#[repr(C)]
struct FileCloneRange {
    src_fd: i64,
    src_offset: u64,
    src_length: u64,
    dest_offset: u64,
}

/// `FICLONERANGE` = `_IOW(0x94, 13, struct file_clone_range)`.
const FICLONERANGE: libc::c_ulong = 0x4020_940d;

/// Makes `[dst_off, dst_off + len)` of `dst` share the blocks of `[src_off, src_off + len)` of
/// `src` (`ioctl(FICLONERANGE)`: XFS with reflink, btrfs). Offsets block aligned; `len` too
/// unless the range ends at `src`'s end.
pub(crate) fn clone_range(
    dst: BorrowedFd<'_>,
    dst_off: u64,
    src: BorrowedFd<'_>,
    src_off: u64,
    len: u64,
) -> io::Result<()> {
    let arg = FileCloneRange {
        src_fd: i64::from(src.as_raw_fd()),
        src_offset: src_off,
        src_length: len,
        dest_offset: dst_off,
    };
    // SAFETY: `arg` is a live, properly laid out `struct file_clone_range` (repr(C), four
    // 64-bit fields) that the kernel only reads, for the duration of the call; both
    // descriptors are borrowed, so open for the whole call. Failures come back through
    // errno, read at once below.
    let r = unsafe { libc::ioctl(dst.as_raw_fd(), FICLONERANGE as _, &arg as *const FileCloneRange) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct file_dedupe_range` with room for one destination (`linux/fs.h`).
#[repr(C)]
struct FileDedupeRange {
    src_offset: u64,
    src_length: u64,
    dest_count: u16,
    reserved1: u16,
    reserved2: u32,
    dest_fd: i64,
    dest_offset: u64,
    bytes_deduped: u64,
    status: i32,
    reserved: u32,
}

const _: () = assert!(std::mem::size_of::<FileDedupeRange>() == 24 + 32);

/// `_IOWR(0x94, 54, struct file_dedupe_range)` (24 bytes without its destinations).
const FIDEDUPERANGE: libc::c_ulong = 0xc018_9436;
const FILE_DEDUPE_RANGE_SAME: i32 = 0;
const FILE_DEDUPE_RANGE_DIFFERS: i32 = 1;

/// Makes `[dst_off, dst_off + len)` of `dst` share the blocks of `[src_off, src_off + len)` of
/// `src` if their bytes are equal (`ioctl(FIDEDUPERANGE)`: XFS with reflink, btrfs; the
/// kernel compares them with both files locked): `Some(bytes shared)`, or `None` when the
/// bytes differ. A status error of the one destination comes back as the call's error.
pub(crate) fn dedupe_range(
    dst: BorrowedFd<'_>,
    dst_off: u64,
    src: BorrowedFd<'_>,
    src_off: u64,
    len: u64,
) -> io::Result<Option<u64>> {
    let mut arg = FileDedupeRange {
        src_offset: src_off,
        src_length: len,
        dest_count: 1,
        reserved1: 0,
        reserved2: 0,
        dest_fd: i64::from(dst.as_raw_fd()),
        dest_offset: dst_off,
        bytes_deduped: 0,
        status: 0,
        reserved: 0,
    };
    // SAFETY: `arg` is a live `struct file_dedupe_range` followed by exactly `dest_count`
    // (one) `struct file_dedupe_range_info` (repr(C): 24 bytes, then 32), which the kernel
    // reads and writes only during the call; both descriptors are borrowed, so open for the
    // whole call. Failures come back through errno, read at once below.
    let r = unsafe {
        libc::ioctl(
            src.as_raw_fd(),
            FIDEDUPERANGE as _,
            &mut arg as *mut FileDedupeRange,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    match arg.status {
        FILE_DEDUPE_RANGE_SAME => Ok(Some(arg.bytes_deduped)),
        FILE_DEDUPE_RANGE_DIFFERS => Ok(None),
        e if e < 0 => Err(io::Error::from_raw_os_error(-e)),
        e => Err(io::Error::other(format!("FIDEDUPERANGE: unknown status {e}"))),
    }
}

/// One extent of a file as `FS_IOC_FIEMAP` maps it (`struct fiemap_extent`): bytes
/// `[logical, logical + len)` of the file at `physical` on its device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mapped {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
    pub flags: u32,
}

/// `FIEMAP_EXTENT_LAST`: the file's last extent.
pub const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// `FIEMAP_EXTENT_SHARED`: other files (or snapshots) use these blocks too.
pub const FIEMAP_EXTENT_SHARED: u32 = 0x2000;
/// `FIEMAP_EXTENT_UNKNOWN | DELALLOC | ENCODED | DATA_INLINE`: no physical range that holds
/// the extent's bytes as they are.
pub const FIEMAP_EXTENT_NOT_PLAIN: u32 = 0x2 | 0x4 | 0x8 | 0x200;

/// `struct fiemap_extent` (`linux/fiemap.h`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

/// Extents asked for per call.
const FIEMAP_BATCH: usize = 256;

/// `struct fiemap` with room for [`FIEMAP_BATCH`] extents.
#[repr(C)]
struct Fiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [FiemapExtent; FIEMAP_BATCH],
}

const _: () = assert!(std::mem::size_of::<FiemapExtent>() == 56);
const _: () = assert!(std::mem::size_of::<Fiemap>() == 32 + 56 * FIEMAP_BATCH);

/// `FS_IOC_FIEMAP` = `_IOWR('f', 11, struct fiemap)` (32 bytes without its extents).
const FS_IOC_FIEMAP: libc::c_ulong = 0xc020_660b;

/// The extents holding `[start, start + len)` of `fd`'s file, in order, as the filesystem
/// maps them (holes are absent; delayed allocations come with their flags and no physical
/// address). At most `max` extents: a file mapped in more is cut short there (the caller's
/// bound on memory). `ENOTSUP`/`EOPNOTSUPP` where the filesystem maps nothing (tmpfs, FUSE).
pub(crate) fn fiemap(fd: BorrowedFd<'_>, start: u64, len: u64, max: usize) -> io::Result<Vec<Mapped>> {
    let end = start.saturating_add(len);
    let mut out = Vec::new();
    let mut at = start;
    let mut m = Box::new(Fiemap {
        start: 0,
        length: 0,
        flags: 0,
        mapped_extents: 0,
        extent_count: FIEMAP_BATCH as u32,
        reserved: 0,
        extents: [FiemapExtent::default(); FIEMAP_BATCH],
    });
    while at < end && out.len() < max {
        m.start = at;
        m.length = end - at;
        m.flags = 0;
        m.mapped_extents = 0;
        m.extent_count = FIEMAP_BATCH as u32;
        // SAFETY: `m` is a live, properly laid out `struct fiemap` (repr(C), checked sizes
        // above) followed by room for exactly `extent_count` extents, which the kernel reads
        // and fills only during the call; the descriptor is borrowed, so open for the whole
        // call. Failures come back through errno, read at once below.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *m as *mut Fiemap) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (m.mapped_extents as usize).min(FIEMAP_BATCH);
        if n == 0 {
            break;
        }
        out.extend(m.extents[..n].iter().map(|e| Mapped {
            logical: e.logical,
            physical: e.physical,
            len: e.length,
            flags: e.flags,
        }));
        let last = m.extents[n - 1];
        let next = last.logical.saturating_add(last.length);
        if last.flags & FIEMAP_EXTENT_LAST != 0 || next <= at {
            break;
        }
        at = next;
    }
    out.truncate(max);
    Ok(out)
}
