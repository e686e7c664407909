//! Thin, safe wrappers over the `*at()` system calls the filesystem uses. Every path is a
//! single name relative to a directory fd, or an fd itself (through `/proc/self/fd`), so
//! nothing is ever resolved from the backing root and no symlink is followed out of it.

pub mod cpu;
mod dir;
mod handle;
pub mod mount;
mod xattr;

pub use dir::{dir_flags, fs_type, read_dir};
pub use handle::{file_handle, open_handle, open_handle_with};
pub use xattr::{xattr_get, xattr_list, xattr_remove, xattr_set, xattr_size};

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
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

/// `/proc/self/fd/N`: reopens or addresses the file an O_PATH fd refers to. Takes the fd by
/// reference: the path is only valid while the fd stays open, so the caller must keep it
/// (taking it by value let a caller's temporary close before the call that used the path,
/// which then named nothing, or whatever file reused the number).
pub fn proc_path<F: AsFd>(fd: &F) -> CString {
    let fd = fd.as_fd().as_raw_fd();
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL")
}

pub fn open_path(dir: impl AsFd, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is a live fd borrowed
    // for the call. openat touches no memory of ours beyond the name.
    let fd = cvt(unsafe {
        libc::openat(
            raw(&dir),
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    Ok(owned(fd))
}

pub fn open_root(path: &std::path::Path) -> io::Result<OwnedFd> {
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
    Ok(owned(fd))
}

/// Opens the file behind an O_PATH fd for I/O with `flags`.
pub fn reopen(fd: impl AsFd, flags: i32) -> io::Result<std::fs::File> {
    let p = proc_path(&fd);
    // SAFETY: `p` is NUL-terminated and outlives the call.
    let r = cvt(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC) })?;
    Ok(std::fs::File::from(owned(r)))
}

/// Opens `name` in `dir` for reading, without following a symlink or blocking on a fifo,
/// and without updating its atime when the caller may ask that (read-ahead).
pub fn open_quietly(dir: impl AsFd, name: &CStr) -> io::Result<std::fs::File> {
    let base = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY (both calls): `name` is NUL-terminated and outlives the call; `dir` is
    // borrowed for the call.
    let r = unsafe { libc::openat(raw(&dir), name.as_ptr(), base | libc::O_NOATIME) };
    let r = if r < 0 {
        // O_NOATIME needs ownership; try without.
        cvt(unsafe { libc::openat(raw(&dir), name.as_ptr(), base) })?
    } else {
        r
    };
    Ok(std::fs::File::from(owned(r)))
}

/// `posix_fadvise(WILLNEED)`: start reading the first `len` bytes of `file` into the cache.
pub fn will_need(file: impl AsFd, len: i64) {
    // SAFETY: an advisory call on a borrowed, live fd; no memory is passed.
    unsafe { libc::posix_fadvise(raw(&file), 0, len, libc::POSIX_FADV_WILLNEED) };
}

/// Creates and opens a regular file `name` in `dir` for reading and writing (`O_EXCL`).
pub fn create_rw(dir: impl AsFd, name: &CStr, mode: u32) -> io::Result<std::fs::File> {
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is borrowed for it.
    let r = cvt(unsafe {
        libc::openat(
            raw(&dir),
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(std::fs::File::from(owned(r)))
}

pub fn fstat(fd: impl AsFd) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<Stat>::uninit();
    // SAFETY: the kernel writes a whole `struct stat` into `st` on success (checked by cvt
    // before `assume_init`); the empty path is a NUL-terminated literal.
    cvt(unsafe {
        libc::fstatat(
            raw(&fd),
            c"".as_ptr(),
            st.as_mut_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat succeeded, so `st` is initialised.
    Ok(unsafe { st.assume_init() })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: the entry itself, not what a symlink names.
pub fn stat_at(dir: impl AsFd, name: &CStr) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<Stat>::uninit();
    // SAFETY: as in `fstat`; `name` is NUL-terminated.
    cvt(unsafe {
        libc::fstatat(
            raw(&dir),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat succeeded, so `st` is initialised.
    Ok(unsafe { st.assume_init() })
}

pub fn mkdirat(dir: impl AsFd, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is borrowed for it.
    cvt(unsafe { libc::mkdirat(raw(&dir), name.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(dir: impl AsFd, name: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    // SAFETY: as for mkdirat.
    cvt(unsafe { libc::mknodat(raw(&dir), name.as_ptr(), mode, rdev) }).map(drop)
}

pub fn symlinkat(target: &CStr, dir: impl AsFd, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated and outlive the call.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), raw(&dir), name.as_ptr()) }).map(drop)
}

pub fn readlink(fd: impl AsFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which we own.
    let n = unsafe {
        libc::readlinkat(
            raw(&fd),
            c"".as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

pub fn unlinkat(dir: impl AsFd, name: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: as for mkdirat.
    cvt(unsafe { libc::unlinkat(raw(&dir), name.as_ptr(), flags) }).map(drop)
}

pub fn renameat2(od: impl AsFd, on: &CStr, nd: impl AsFd, nn: &CStr, flags: u32) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated and outlive the call; both fds are borrowed.
    cvt(unsafe { libc::renameat2(raw(&od), on.as_ptr(), raw(&nd), nn.as_ptr(), flags) }).map(drop)
}

/// Hard link to the file behind an O_PATH fd.
pub fn linkat(fd: impl AsFd, dir: impl AsFd, name: &CStr) -> io::Result<()> {
    let p = proc_path(&fd);
    // SAFETY: both paths are NUL-terminated and outlive the call; `dir` is borrowed.
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            p.as_ptr(),
            raw(&dir),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

pub fn chmod(fd: impl AsFd, mode: u32) -> io::Result<()> {
    let p = proc_path(&fd);
    // SAFETY: `p` is NUL-terminated and outlives the call.
    cvt(unsafe { libc::chmod(p.as_ptr(), mode) }).map(drop)
}

/// A file's attributes and whether it is append-only or immutable, in one `statx`, as a
/// chmod or chown that is to wait in memory must know them (`Files::defer_meta`), whose
/// reply is then made from the same attributes (no second call).
///
/// Where `statx` does not say (its attributes mask lacks the two: FUSE filesystems such
/// as GlusterFS's client, NFS), the inode flags are asked (`FS_IOC_GETFLAGS`), and a
/// filesystem that keeps none (the ioctl refused: nothing on it can be made append-only
/// or immutable through it, `chattr` fails the same way) is remembered by device, so its
/// files cost no second call: there every owner and mode change of a file being written
/// waited for the network.
pub fn stat_and_fixed(file: &std::fs::File) -> io::Result<(Stat, bool)> {
    use std::os::fd::AsRawFd;
    let mut stx = std::mem::MaybeUninit::<libc::statx>::uninit();
    // SAFETY: the kernel writes a whole `struct statx` into `stx` on success (checked by
    // cvt before `assume_init`); the empty path is a NUL-terminated literal; `file` is a
    // live fd borrowed for the call.
    cvt(unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS | libc::STATX_MNT_ID,
            stx.as_mut_ptr(),
        )
    })?;
    // SAFETY: statx succeeded, so `stx` is initialised.
    let stx = unsafe { stx.assume_init() };
    let fixed = (libc::STATX_ATTR_APPEND | libc::STATX_ATTR_IMMUTABLE) as u64;
    let st = stat_of(&stx);
    if stx.stx_attributes_mask & fixed == fixed {
        return Ok((st, stx.stx_attributes & fixed != 0));
    }
    // (The mount's ID with the device: an anonymous device number is given again to
    // another filesystem once its own is unmounted.)
    let mnt = (stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id);
    Ok((st, flags_fixed(file, (st.st_dev, mnt))))
}

/// Filesystems (device and mount ID) that keep no inode flags (`FS_IOC_GETFLAGS` refused),
/// learnt as [`stat_and_fixed`] meets them (a handful at most: the backing filesystem and
/// what is mounted inside it).
static NO_FLAGS: std::sync::Mutex<Vec<(u64, Option<u64>)>> = std::sync::Mutex::new(Vec::new());

/// Whether `file` (on filesystem `dev`) is append-only or immutable by its inode flags; false
/// where its filesystem keeps none; true when they cannot be read otherwise (the caller
/// then makes its change at once, as for such a file).
fn flags_fixed(file: &std::fs::File, dev: (u64, Option<u64>)) -> bool {
    if NO_FLAGS.lock().unwrap().contains(&dev) {
        return false;
    }
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes an int (whatever the request's declared size) into
    // `flags`, which lives across the call; `file` is a live fd borrowed for it.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    if r == 0 {
        // FS_IMMUTABLE_FL and FS_APPEND_FL (linux/fs.h; not in the libc crate).
        const FIXED_FL: u32 = 0x10 | 0x20;
        return flags as u32 & FIXED_FL != 0;
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOTTY | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => {
            let mut no = NO_FLAGS.lock().unwrap();
            if !no.contains(&dev) && no.len() < 64 {
                no.push(dev);
            }
            false
        }
        _ => true,
    }
}

/// The `struct stat` that `fstat` would have given for the attributes `stx` holds.
fn stat_of(stx: &libc::statx) -> Stat {
    // SAFETY: `struct stat` is plain integers: all-zero is a valid value of it.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    st.st_dev = libc::makedev(stx.stx_dev_major, stx.stx_dev_minor);
    st.st_ino = stx.stx_ino;
    st.st_mode = u32::from(stx.stx_mode);
    st.st_nlink = stx.stx_nlink as _;
    st.st_uid = stx.stx_uid;
    st.st_gid = stx.stx_gid;
    st.st_rdev = libc::makedev(stx.stx_rdev_major, stx.stx_rdev_minor);
    st.st_size = stx.stx_size as i64;
    st.st_blksize = stx.stx_blksize as _;
    st.st_blocks = stx.stx_blocks as i64;
    st.st_atime = stx.stx_atime.tv_sec;
    st.st_atime_nsec = i64::from(stx.stx_atime.tv_nsec);
    st.st_mtime = stx.stx_mtime.tv_sec;
    st.st_mtime_nsec = i64::from(stx.stx_mtime.tv_nsec);
    st.st_ctime = stx.stx_ctime.tv_sec;
    st.st_ctime_nsec = i64::from(stx.stx_ctime.tv_nsec);
    st
}

/// chmod of a file open for I/O (not an O_PATH fd: that is [`chmod`]).
pub fn fchmod(file: &std::fs::File, mode: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `file` is a live fd borrowed for the call; fchmod reads no memory of ours.
    cvt(unsafe { libc::fchmod(file.as_raw_fd(), mode) }).map(drop)
}

pub fn chown(fd: impl AsFd, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let u = uid.unwrap_or(u32::MAX);
    let g = gid.unwrap_or(u32::MAX);
    // SAFETY: the empty path is a NUL-terminated literal; `fd` is borrowed for the call.
    cvt(unsafe {
        libc::fchownat(
            raw(&fd),
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
pub fn utimens(fd: impl AsFd, atime: libc::timespec, mtime: libc::timespec) -> io::Result<()> {
    let t = [atime, mtime];
    // SAFETY: `t` is the two-element array utimensat reads; the path is a literal.
    let r = unsafe { libc::utimensat(raw(&fd), c"".as_ptr(), t.as_ptr(), libc::AT_EMPTY_PATH) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(e);
    }
    let p = proc_path(&fd);
    // SAFETY: as above, with a NUL-terminated path that outlives the call.
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), t.as_ptr(), 0) }).map(drop)
}

/// The bytes of a `kB` field of `/proc/meminfo`'s text (`name` with its colon, e.g.
/// `"MemAvailable:"`).
pub fn meminfo_bytes(meminfo: &str, name: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb.saturating_mul(1024))
}

/// The status flags of the open file description behind `fd` (`F_GETFL`).
pub fn status_flags(fd: impl AsFd) -> io::Result<i32> {
    // SAFETY: F_GETFL takes no argument; the descriptor is borrowed for the call.
    let flags = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// Sets or clears `O_NONBLOCK` on the open file description behind `fd` (shared by its
/// duplicates).
pub fn set_nonblocking(fd: impl AsFd, on: bool) -> io::Result<()> {
    let flags = status_flags(&fd)?;
    let new = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    if new != flags {
        // SAFETY: F_SETFL takes an int; the descriptor is borrowed for the call.
        if unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_SETFL, new) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn statvfs(fd: impl AsFd) -> io::Result<libc::statvfs> {
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: the kernel fills the whole struct on success, checked before assume_init.
    cvt(unsafe { libc::fstatvfs(raw(&fd), s.as_mut_ptr()) })?;
    // SAFETY: fstatvfs succeeded.
    Ok(unsafe { s.assume_init() })
}

/// `syncfs` of the filesystem `fd` is on.
pub fn syncfs(fd: impl AsFd) -> io::Result<()> {
    // SAFETY: no memory is passed; `fd` is borrowed for the call.
    cvt(unsafe { libc::syncfs(raw(&fd)) }).map(drop)
}

pub fn fsync_path(fd: impl AsFd, data_only: bool) -> io::Result<()> {
    let f = reopen(fd, libc::O_RDONLY)?;
    if data_only {
        f.sync_data()
    } else {
        f.sync_all()
    }
}

/// Takes an exclusive `flock` on `fd` without waiting: `Ok(false)` when another holds it.
pub fn try_lock_exclusive(fd: impl AsFd) -> io::Result<bool> {
    // SAFETY: no memory is passed; `fd` is borrowed for the call.
    if unsafe { libc::flock(raw(&fd), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// mount_setattr(2)'s attribute bits (linux/mount.h).
pub const MOUNT_ATTR__ATIME: u64 = 0x70;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;

/// `struct mount_attr` (linux/mount.h, MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Sets the per-mount attribute bits `set` and clears `clear` on the mount at `path`
/// (mount_setattr(2); the access-time mode is cleared with MOUNT_ATTR__ATIME).
pub fn mount_setattr(path: &std::path::Path, set: u64, clear: u64) -> io::Result<()> {
    let c = cstr(path.as_os_str())?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `c` is NUL-terminated and `attr` a live `struct mount_attr` of the size
    // passed; both outlive the call, which only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            0,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// This process's effective group id.
pub fn egid() -> u32 {
    // SAFETY: getegid cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

/// Sets this process's umask (returns the old one).
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask cannot fail and touches no memory.
    unsafe { libc::umask(mask) }
}

/// Hands the C heap's free pages back to the system (`malloc_trim(3)`: every arena, not
/// only the top of the main heap). glibc keeps what a thread frees in that thread's arena
/// for reuse, and arenas rarely shrink by themselves: after the kernel forgot a million
/// inodes the daemon still held 533 MiB. A no-op where the C library is not glibc.
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes a byte count and touches only the allocator's own state,
    // under its arena locks; any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Raises the soft limit on open files to the hard limit (root: the hard limit too, up to
/// `nr_open`). Returns the soft limit in force, or 1024 when it cannot be read.
pub fn raise_fd_limit(nr_open: u64) -> u64 {
    let get = |lim: &mut libc::rlimit| {
        // SAFETY: getrlimit writes one `rlimit` into the struct we own.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, lim) == 0 }
    };
    let set = |lim: &libc::rlimit| {
        // SAFETY: setrlimit reads one `rlimit` from the struct we own.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, lim) == 0 }
    };
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if get(&mut lim) {
        if euid() == 0 {
            lim.rlim_max = lim.rlim_max.max(nr_open as libc::rlim_t);
        }
        lim.rlim_cur = lim.rlim_max;
        if !set(&lim) {
            // Keep the old limits; the hard one may be as high as we may go.
            get(&mut lim);
            lim.rlim_cur = lim.rlim_max;
            set(&lim);
        }
    }
    if get(&mut lim) {
        return lim.rlim_cur;
    }
    1024
}

/// Descriptors the fd table is grown to hold at once ([`reserve_fd_table`]): 64 Ki, 512 KiB
/// of kernel memory at most.
pub const FD_TABLE_RESERVE: u64 = 1 << 16;

/// Grows this process's descriptor table to hold `n` descriptors now (at most
/// [`FD_TABLE_RESERVE`]), by duplicating `fd` to a number just below `n` and closing the copy.
///
/// Why: the kernel grows the table by doubling as descriptors are opened, and while other
/// threads share it each growth waits for an RCU grace period (`expand_files`:
/// `synchronize_rcu`), tens of milliseconds on a virtual machine. A `cp -r` of 765 files
/// through a mount grew it three times (256 → 2048), each time holding up the CREATE or
/// OPEN that opened the descriptor, and the copy behind it. Grown once, at the start, it
/// never shrinks. A failure (a limit below `n`) only leaves growth to the kernel.
pub fn reserve_fd_table(fd: BorrowedFd<'_>, n: u64) {
    let n = n.min(FD_TABLE_RESERVE);
    if n < 2 {
        return;
    }
    // SAFETY: F_DUPFD_CLOEXEC takes an integer and returns a new descriptor (or -1) that
    // nothing else knows of; it is closed at once.
    unsafe {
        let copy = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, (n - 1) as libc::c_int);
        if copy >= 0 {
            libc::close(copy);
        }
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and the threads it starts from now on) and
/// returns a function that waits for one of them and returns its number.
pub fn block_termination_signals() -> impl FnOnce() -> i32 + Send + 'static {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset and pthread_sigmask then read and
    // write only that set, which we own.
    let set = unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        let mut set = set.assume_init();
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    move || {
        let mut sig = 0;
        // SAFETY: sigwait reads the set and writes one int, both ours.
        unsafe { libc::sigwait(&set, &mut sig) };
        sig
    }
}

fn raw(fd: &impl AsFd) -> RawFd {
    fd.as_fd().as_raw_fd()
}

/// An fd the kernel just returned to us, owned from now on.
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: only called with an fd a successful open/openat/syscall just returned: open,
    // and owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Makes the calling thread a background one: nice 19 (on Linux `setpriority` with
/// `PRIO_PROCESS` and 0 names the calling thread, not the process) and the idle I/O class
/// (`ioprio_set`, which has no libc wrapper). Best effort: a failure leaves the thread as
/// it was, and is logged.
pub fn lower_thread_priority() {
    // SAFETY: plain syscalls on the calling thread with constant arguments.
    let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    // SAFETY: as above.
    let io = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    if nice != 0 || io != 0 {
        log::debug!(
            "background thread priority not lowered: {}",
            io::Error::last_os_error()
        );
    }
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

    /// The table is grown to the number asked at once (the kernel reports its size as
    /// `FDSize` in /proc/self/status), bounded by the limit on open files.
    #[test]
    fn the_descriptor_table_is_grown_at_once() {
        let fd_size = || {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = s.lines().find(|l| l.starts_with("FDSize:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
        };
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` into the struct we own.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        let want = lim.rlim_cur.min(8192);
        let f = std::fs::File::open("/").unwrap();
        reserve_fd_table(f.as_fd(), want);
        assert!(fd_size() >= want, "FDSize {} < {want}", fd_size());
        // Nothing is left open at that number.
        // SAFETY: F_GETFD only asks whether the number is an open descriptor.
        assert_eq!(unsafe { libc::fcntl((want - 1) as i32, libc::F_GETFD) }, -1);
    }

    /// An fd handed over by value (the last reference to it) stays open until the call that
    /// addresses its file through `/proc/self/fd/N` is done. (It used to be closed first:
    /// chmod and xattr calls then failed with ENOENT, or hit whatever file reused the
    /// number — tar extractions lost directory modes under load.)
    #[test]
    fn calls_through_proc_keep_the_fd_they_are_given_open() {
        let dir = std::env::temp_dir().join(format!("sqz-proc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        let root = open_root(&dir).unwrap();
        let name = CString::new("f").unwrap();
        let path = || open_path(&root, &name).unwrap();
        chmod(path(), 0o640).unwrap();
        let st = fstat(path()).unwrap();
        assert_eq!(st.st_mode & 0o7777, 0o640);
        let attr = CString::new("user.sqz-test").unwrap();
        match xattr_set(path(), &attr, b"v", 0) {
            Ok(()) => {
                assert_eq!(xattr_get(path(), &attr, 16).unwrap(), b"v");
                assert_eq!(xattr_size(path(), &attr).unwrap(), 1);
                assert!(xattr_list(path(), 4096).unwrap().len() > 1);
                xattr_remove(path(), &attr).unwrap();
            }
            // (A temporary directory without user xattrs, e.g. some tmpfs.)
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
        let f = reopen(path(), libc::O_RDONLY).unwrap();
        assert_eq!(std::io::read_to_string(f).unwrap(), "x");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Needs CAP_DAC_READ_SEARCH (root) for the reopen; name_to_handle_at works for anyone.
    #[test]
    fn handles_round_trip() {
        let dir = std::env::temp_dir();
        let fd = open_root(&dir).unwrap();
        let (_, h) = file_handle(&fd).unwrap();
        let st = fstat(&fd).unwrap();
        let mount_fd = reopen(&fd, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
        match open_handle(&mount_fd, &h) {
            Ok(again) => assert_eq!(fstat(&again).unwrap().st_ino, st.st_ino),
            Err(e) => assert_ne!(euid(), 0, "root must reopen by handle: {e}"),
        }
    }
}
