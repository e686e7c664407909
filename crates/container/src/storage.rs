//! The narrow I/O interface a container needs, and its implementation over a real file.
//! Everything above this trait is testable on [`crate::sim::MemDisk`], which can lose
//! unsynced writes and tear a write.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// The value of the file's extended attribute `name` (`None`: not set). Storage that
    /// has no xattrs answers `None`.
    fn get_xattr(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let _ = name;
        Ok(None)
    }
    /// Sets extended attribute `name` (atomically: a reader sees the old or the new value).
    /// Made durable by [`Storage::sync_all`], not by [`Storage::sync_data`].
    fn set_xattr(&self, name: &str, value: &[u8]) -> io::Result<()> {
        let _ = (name, value);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
    /// Removes extended attribute `name`; absent is not an error.
    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        let _ = name;
        Ok(())
    }
    /// Makes everything durable: data, length and metadata (xattrs) — `fsync(2)`.
    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
    /// Which file this is (device and inode number), when the storage can tell: pack reclaim
    /// checks that a name still leads to the file a walk found there.
    fn identity(&self) -> io::Result<Option<(u64, u64)>> {
        Ok(None)
    }
    /// The file's change time (ctime) in nanoseconds since the epoch, when the storage
    /// has one: a reclaim keeps it in the location record it replaces
    /// (`Location::kept_ctime`), so `stat` goes on showing it.
    fn change_time(&self) -> io::Result<Option<u64>> {
        Ok(None)
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
    /// Set by every call that moves the file's mtime (a write, a punch, a length change;
    /// not an xattr, which moves only its ctime), cleared by [`FileStorage::take_modified`].
    modified: AtomicBool,
    /// Its (device, inode), once asked: an open file's never changes.
    identity: std::sync::OnceLock<(u64, u64)>,
    /// A file opened read-only because its mode keeps its owner from writing (a daemon
    /// without root; [`FileStorage::writable_later`]): opened for writing at the first
    /// write, with owner write added for the open if need be. `None`: `file` is the one
    /// written to.
    writer: Option<std::sync::OnceLock<File>>,
}

impl FileStorage {
    pub fn new(file: File) -> FileStorage {
        FileStorage {
            file,
            modified: AtomicBool::new(false),
            identity: std::sync::OnceLock::new(),
            writer: None,
        }
    }

    /// A file opened read-only because its mode refused writing to its owner (mode 0444:
    /// git objects, `cp -p`): it is opened for writing only when something is written,
    /// with [`with_owner_access`] if its mode still refuses. Opening it for writing at
    /// once would take a chmod and back, moving its ctime, for a `stat` or a read.
    pub fn writable_later(mut self) -> FileStorage {
        self.writer = Some(std::sync::OnceLock::new());
        self
    }

    /// The file to write to: `file`, or (see [`FileStorage::writable_later`]) the file
    /// opened again for writing.
    fn writer(&self) -> io::Result<&File> {
        use std::os::fd::AsRawFd;
        let Some(w) = &self.writer else {
            return Ok(&self.file);
        };
        if let Some(f) = w.get() {
            return Ok(f);
        }
        let proc = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let f = match open_with_flags(std::path::Path::new(&proc), libc::O_RDWR) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                reopen_as_owner(&self.file, libc::O_RDWR)?.ok_or(e)?
            }
            r => r?,
        };
        // (Two writers at once: one of the two files is kept.)
        let _ = w.set(f);
        Ok(w.get().expect("set just now"))
    }

    /// A file whose (device, inode) the caller knows already (spares a `stat` when it is
    /// asked).
    pub fn with_identity(self, id: (u64, u64)) -> FileStorage {
        let _ = self.identity.set(id);
        self
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether the file was written, punched or resized (so its mtime moved) since the last
    /// call. The FUSE layer puts times set through the mount back after such a write-out.
    pub fn take_modified(&self) -> bool {
        self.modified.swap(false, Ordering::Relaxed)
    }

    fn modifies(&self) {
        self.modified.store(true, Ordering::Relaxed);
    }
}

/// Runs `f` on a file of this process whose mode denies its owner (stat: its owner and
/// mode), with owner read and write added for the call (`chmod`), then puts the mode back
/// if nothing changed it meanwhile (a chmod through the mount wins). `Ok(None)`: nothing
/// to add — not this process's file (a daemon without root owns all of its own), or its
/// owner has read and write already — so the refusal stands.
///
/// The kernel checks a `user.*` xattr against the mode at every call, whatever the fd was
/// opened for, and an open against the mode: without this a daemon without
/// CAP_DAC_OVERRIDE could not record where a read-only file's bytes are (mode 0444: git
/// objects, `cp -p`) and lost its data at the commit, nor open a mode-0 file (`tar`'s
/// placeholders for symlinks).
pub fn with_owner_access<T>(
    stat: impl Fn() -> io::Result<(u32, u32)>,
    chmod: impl Fn(u32) -> io::Result<()>,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<Option<T>> {
    with_owner_bits(0o600, stat, chmod, f)
}

/// [`with_owner_access`] for the owner bits `need`: read and write (0o600) for a file's
/// data and xattrs, read and search (0o500) to list a directory, search (0o100) to look up
/// a name in one.
fn with_owner_bits<T>(
    need: u32,
    stat: impl Fn() -> io::Result<(u32, u32)>,
    chmod: impl Fn(u32) -> io::Result<()>,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<Option<T>> {
    let (uid, mode) = stat()?;
    let mode = mode & 0o7777;
    if uid != sys::euid() || mode & need == need {
        return Ok(None);
    }
    let granted = mode | need;
    chmod(granted)?;
    let r = f();
    if stat()?.1 & 0o7777 == granted {
        chmod(mode)?;
    }
    r.map(Some)
}

/// [`with_owner_bits`] on the file or directory `found` (any fd, `O_PATH` too): its mode
/// is changed through the fd's magic link, which names it whatever is renamed meanwhile.
fn as_owner_of<T>(found: &File, need: u32, f: impl FnOnce() -> io::Result<T>) -> io::Result<Option<T>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let proc = format!("/proc/self/fd/{}", found.as_raw_fd());
    with_owner_bits(
        need,
        || found.metadata().map(|m| (m.uid(), m.mode())),
        |mode| std::fs::set_permissions(&proc, std::fs::Permissions::from_mode(mode)),
        f,
    )
}

/// Lists the directory `dir` (an fd opened on it), with owner read and search granted for
/// the listing when its mode refuses them (a mode-0 directory of a squeezefs without root).
pub fn list_dir_as_owner(dir: &File) -> io::Result<Vec<std::fs::DirEntry>> {
    use std::os::fd::AsRawFd;
    let list =
        || std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?.collect::<io::Result<Vec<_>>>();
    match list() {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => as_owner_of(dir, 0o500, list)?.ok_or(e),
        r => r,
    }
}

impl FileStorage {
    /// Runs the xattr call `f`, again with [`with_owner_access`] if the mode refused it.
    fn as_owner<T>(&self, f: impl Fn() -> io::Result<T>) -> io::Result<T> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => with_owner_access(
                || self.file.metadata().map(|m| (m.uid(), m.mode())),
                |mode| self.file.set_permissions(std::fs::Permissions::from_mode(mode)),
                f,
            )?
            .ok_or(e),
            r => r,
        }
    }
}

impl Storage for FileStorage {
    fn identity(&self) -> io::Result<Option<(u64, u64)>> {
        use std::os::unix::fs::MetadataExt;
        if let Some(&id) = self.identity.get() {
            return Ok(Some(id));
        }
        let m = self.file.metadata()?;
        Ok(Some(*self.identity.get_or_init(|| (m.dev(), m.ino()))))
    }

    fn change_time(&self) -> io::Result<Option<u64>> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata()?;
        Ok(crate::pack::format::ctime_ns(m.ctime(), m.ctime_nsec()))
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, off) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let w = self.writer()?;
        self.modifies();
        w.write_all_at(buf, off)
    }

    fn punch(&self, off: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (Ok(o), Ok(l)) = (i64::try_from(off), i64::try_from(len)) else {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        };
        let w = self.writer()?;
        self.modifies();
        sys::punch_hole(w.as_fd(), o, l)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let w = self.writer()?;
        self.modifies();
        w.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn get_xattr(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.as_owner(|| sys::get_xattr(self.file.as_fd(), name))
    }

    fn set_xattr(&self, name: &str, value: &[u8]) -> io::Result<()> {
        self.as_owner(|| sys::set_xattr(self.file.as_fd(), name, value))
    }

    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        match self.as_owner(|| sys::remove_xattr(self.file.as_fd(), name)) {
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(()),
            r => r,
        }
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
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

/// Makes everything written to the filesystem holding `f` durable (metadata included).
pub fn syncfs(f: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    sys::syncfs(f.as_fd())
}

/// Opens `rel` (a relative path) below the directory `dir` with `flags` (plus `O_CLOEXEC`,
/// `O_NOCTTY`, `O_NONBLOCK`), refusing any symlink on the way and any escape from `dir`
/// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): a tool walking a tree that
/// users change meanwhile never opens what a swapped-in symlink names, and never blocks
/// on a fifo.
pub fn open_beneath(dir: &File, rel: &std::path::Path, flags: i32) -> io::Result<File> {
    sys::open_beneath(dir.as_fd(), rel, flags)
}

/// [`open_beneath`], and when a mode on the way refuses the owner and the caller is that
/// owner (a squeezefs without root and a mode-0 placeholder of `tar`, a `chmod 0` file or
/// directory), again with [`with_owner_access`]'s rule: the path is followed one name at a
/// time, a directory that refuses its owner the search gets it for the one lookup, and the
/// file or directory at the end is found with `O_PATH` (no access needed), then reopened
/// through `/proc/self/fd` with the access it needs. Without this a mount's pack rounds
/// (and its unmount's) stopped at such a file or directory, and `check` reported it as
/// damaged.
pub fn open_beneath_as_owner(dir: &File, rel: &std::path::Path, flags: i32) -> io::Result<File> {
    match open_beneath(dir, rel, flags) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => match open_by_steps(dir, rel, flags) {
            Err(e2) if e2.raw_os_error() == Some(libc::EACCES) => Err(e),
            r => r,
        },
        r => r,
    }
}

/// [`open_beneath_as_owner`]'s slow path: `rel` one name at a time (also
/// `owner_path`'s, below the nearest directory of a path that opens).
pub(crate) fn open_by_steps(dir: &File, rel: &std::path::Path, flags: i32) -> io::Result<File> {
    use std::path::Component;
    let refused = || io::Error::from_raw_os_error(libc::EACCES);
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(refused)?;
    let (last, parents) = names.split_last().ok_or_else(refused)?;
    let mut at = dir.try_clone()?;
    for name in parents {
        at = lookup_as_owner(&at, name, libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY)?;
    }
    match lookup_as_owner(&at, last, flags) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            let found = lookup_as_owner(&at, last, libc::O_PATH | libc::O_NOFOLLOW)?;
            reopen_as_owner(&found, flags & !libc::O_NOFOLLOW)?.ok_or(e)
        }
        r => r,
    }
}

/// `name` (one component) in the directory `dir` opened with `flags`, again with owner
/// search granted on `dir` for the call when its mode refuses it.
fn lookup_as_owner(dir: &File, name: &std::ffi::OsStr, flags: i32) -> io::Result<File> {
    let open = || open_beneath(dir, std::path::Path::new(name), flags);
    match open() {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => as_owner_of(dir, 0o100, open)?.ok_or(e),
        r => r,
    }
}

/// Reopens the file or directory `found` (an `O_PATH` fd) with `flags` under
/// [`with_owner_access`]; `None` when that has nothing to add.
pub(crate) fn reopen_as_owner(found: &File, flags: i32) -> io::Result<Option<File>> {
    use std::os::fd::AsRawFd;
    let m = found.metadata()?;
    let acc = flags & libc::O_ACCMODE;
    // A file: read and write; a directory (only ever opened to be read): read and search.
    let need = if m.is_file() {
        0o600
    } else if m.is_dir() && acc == libc::O_RDONLY {
        0o500
    } else {
        return Ok(None);
    };
    let proc = format!("/proc/self/fd/{}", found.as_raw_fd());
    as_owner_of(found, need, || {
        open_with_flags(std::path::Path::new(&proc), flags)
    })
}

/// `open(2)` of `path` with `flags`, their access mode included (`O_CLOEXEC` added).
pub(crate) fn open_with_flags(path: &std::path::Path, flags: i32) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let acc = flags & libc::O_ACCMODE;
    std::fs::OpenOptions::new()
        .read(acc != libc::O_WRONLY)
        .write(acc != libc::O_RDONLY)
        .custom_flags(flags & !libc::O_ACCMODE)
        .open(path)
}

/// The Linux calls `FileStorage` needs that std does not wrap: punching a hole
/// (`fallocate(2)`), finding data (`lseek(2)` with `SEEK_DATA`), a packed file's
/// location record (`fgetxattr(2)`, `fsetxattr(2)`, `fremovexattr(2)`), and `syncfs(2)`
/// and `openat2(2)` for pack reclaim (std has neither).
///
/// The crate's only `unsafe`. `nix` wraps the first two safely (not xattrs), but no crate of
/// the workspace uses it yet and the workspace's `nix = "0.29"` is not in Cargo.lock: taking
/// it would add a second version of nix beside fuser's (0.31) for two system calls. The
/// `xattr` crate would cover the last three, for three calls the fs crate already makes the
/// same way (`squeezefs_fs::sys`).
#[allow(unsafe_code)]
mod sys {
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
    pub(super) fn get_xattr(fd: BorrowedFd<'_>, name: &str) -> io::Result<Option<Vec<u8>>> {
        let n = c_name(name)?;
        let mut buf = vec![0u8; 256];
        loop {
            // SAFETY: `n` is a NUL-terminated string that outlives the call, and `buf` is a
            // live, writable allocation of exactly `buf.len()` bytes, which is the size
            // passed: the kernel writes at most that many bytes into it. The fd is kept open
            // by `BorrowedFd`. Failures come back through errno, read at once below.
            let r =
                unsafe { libc::fgetxattr(fd.as_raw_fd(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
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

    pub(super) fn open_beneath(
        dir: BorrowedFd<'_>,
        rel: &std::path::Path,
        flags: i32,
    ) -> io::Result<std::fs::File> {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let p = CString::new(rel.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
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

    pub(super) fn euid() -> u32 {
        // SAFETY: geteuid cannot fail and touches no memory.
        unsafe { libc::geteuid() }
    }

    pub(super) fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: plain integer argument; the fd is kept open by `BorrowedFd`.
        if unsafe { libc::syncfs(fd.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub(super) fn set_xattr(fd: BorrowedFd<'_>, name: &str, value: &[u8]) -> io::Result<()> {
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

    pub(super) fn remove_xattr(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
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

/// Runs `make`, which may add an entry of squeezefs's own (its lock file, its private
/// directory) to the directory `dir`, and puts `dir`'s access and modification times back
/// if that moved them. `dir` is a backing root, whose times are the mount root's: the
/// user's, which a mount must not change. (Its ctime moves: no call can set that.)
pub fn keeping_times<T>(dir: &std::path::Path, make: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let before = std::fs::metadata(dir).ok();
    let r = make()?;
    if let Some(before) = before {
        let moved = std::fs::metadata(dir).is_ok_and(|now| now.modified().ok() != before.modified().ok());
        if moved {
            let times = std::fs::FileTimes::new()
                .set_accessed(before.accessed()?)
                .set_modified(before.modified()?);
            if let Err(e) = File::open(dir).and_then(|d| d.set_times(times)) {
                log::debug!("{}: times not put back: {e}", dir.display());
            }
        }
    }
    Ok(r)
}
