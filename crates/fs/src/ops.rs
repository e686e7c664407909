//! The FUSE request handlers: thin glue from fuser to the inode table, the `*at()` wrappers
//! and the container. Policy (what to compress, how to store) lives in the container crate;
//! properties are parsed in `props.rs`, the live statistics file is `statsfile.rs`.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use log::{error, warn};
use squeezefs_container::{dicts, Container, FileStorage, Options};

use crate::commit::Committer;
use crate::creds;
use crate::inode::{Inode, Inodes, OpenFile, PathFd};
use crate::prefetch::{self, Prefetcher};
use crate::props::{self, DirProps, Prop, Value};
use crate::statsfile;
use crate::sys;

/// Entry and attribute timeout: long, since this daemon is the only writer of the backing
/// directory (the kernel invalidates what its own changes affect).
const TTL: Duration = Duration::from_secs(60);

/// Most kernel cache write-backs (for SEEK_DATA/SEEK_HOLE) waited for at once: each holds
/// a daemon thread while others serve the WRITEs it causes (the session runs at least 4).
const KERNEL_FLUSHES: usize = 1;

/// File capabilities, as the mount shows them.
const CAPS: &[u8] = b"security.capability";
/// Where a root daemon keeps them on the backing file: the backing kernel strips a real
/// `security.capability` at any write to the file, and the daemon writes containers long
/// after the caller's `setcap` (the group commit); a trusted xattr only CAP_SYS_ADMIN can
/// set is left alone, and means nothing to the backing file (a container, not a program).
const CAPS_STORED: &std::ffi::CStr = c"trusted.squeezefs.capability";

/// Most containers kept open without a handle after a lookup.
const IDLE_MAX: usize = 128;

/// A directory's entries as read at opendir (and again at a rewind): name, inode number
/// (as `stat` through the mount gives it) and type; `..`'s number apart.
struct DirList {
    entries: Vec<(Vec<u8>, u64, FileType)>,
    dotdot: u64,
}

/// An open directory: its listing, the directory's `dir_gen` when it was taken, and
/// whether a `readdir` has used it yet. A `readdir` from offset 0 (a `rewinddir`, or the
/// first one) lists the directory again if the listing was used or entries were made or
/// removed since: names made after `opendir` appear after a rewind, as POSIX asks.
struct DirHandle {
    list: Arc<DirList>,
    gen: u64,
    used: bool,
}

pub struct SqueezeFs {
    inodes: Arc<Inodes>,
    committer: Arc<Committer>,
    commit_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    opts: Options,
    read_only: bool,
    /// Directory handles: a snapshot of the entries taken at opendir (or the last rewind).
    dirs: Mutex<std::collections::HashMap<u64, DirHandle>>,
    /// Containers opened to answer a lookup, kept (no handle) so the `open` that usually
    /// follows need not open and parse them again; the oldest beyond [`IDLE_MAX`] close.
    idle: Mutex<std::collections::VecDeque<(u64, std::sync::Weak<Inode>)>>,
    prefetch: Prefetcher,
    next_fh: AtomicU64,
    /// Running as root: new files are given to the caller with chown.
    as_root: bool,
    /// The backing directory, for the statistics file.
    backing: String,
    /// `BACKING/.squeezefs-dicts`: the dictionaries (hidden from the mount).
    dict_dir: std::path::PathBuf,
    /// Owner of the mount root, given to the statistics file.
    root_owner: (u32, u32),
    /// Asks the kernel to write back its page cache (set once the session exists).
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    /// Kernel cache write-backs under way (at most [`KERNEL_FLUSHES`]).
    kernel_flushes: std::sync::atomic::AtomicUsize,
    /// Open statistics files: the document rendered at their open.
    stats_open: Mutex<std::collections::HashMap<u64, Arc<Vec<u8>>>>,
}

fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// Answers a request that returns nothing but success or an error.
fn reply_empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn dtype_kind(d: u8) -> FileType {
    match d {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs((-sec) as u64) + Duration::from_nanos(nsec as u64)
    }
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut s = -(d.as_secs() as i64);
                    let mut n = -(d.subsec_nanos() as i64);
                    if n < 0 {
                        s -= 1;
                        n += 1_000_000_000;
                    }
                    (s, n)
                }
            };
            libc::timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            }
        }
    }
}

impl SqueezeFs {
    pub fn new(backing: &Path, opts: Options, read_only: bool) -> io::Result<SqueezeFs> {
        // Modes arrive already masked with the caller's umask; ours must not mask again.
        unsafe { libc::umask(0) };
        let root = sys::open_root(backing)?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&root);
        let st = sys::fstat(raw)?;
        let root_dir = sys::reopen(raw, libc::O_RDONLY | libc::O_DIRECTORY)?;
        // Dictionaries: every file that used one needs it to be read.
        let (ids, refused) = dicts::load_all(&backing.join(dicts::DIR_NAME));
        if !ids.is_empty() {
            log::info!("{} zstd dictionaries loaded: {ids:?}", ids.len());
        }
        for why in refused {
            error!("dictionary refused (files compressed with it will read as EIO): {why}");
        }
        Ok(SqueezeFs {
            inodes: Arc::new(Inodes::new(root, root_dir, &st)),
            committer: Committer::new(),
            commit_thread: Mutex::new(None),
            opts,
            read_only,
            dirs: Mutex::new(Default::default()),
            idle: Mutex::new(Default::default()),
            prefetch: Prefetcher::start()?,
            next_fh: AtomicU64::new(1),
            as_root: unsafe { libc::geteuid() } == 0,
            backing: backing.display().to_string(),
            dict_dir: backing.join(dicts::DIR_NAME),
            root_owner: (st.st_uid, st.st_gid),
            stats_open: Mutex::new(Default::default()),
            notifier: Default::default(),
            kernel_flushes: Default::default(),
        })
    }

    fn inode(&self, ino: INodeNo) -> Result<Arc<Inode>, Errno> {
        self.inodes.get(ino.0).ok_or(Errno::ESTALE)
    }

    /// Where the mount puts the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }

    /// Whether inode fds are cached and reopened by handle (see `inode.rs`).
    pub fn uses_handles(&self) -> bool {
        self.inodes.uses_handles()
    }

    /// Sizes caches that hold fds to the open-file limit.
    pub fn fit_fd_limit(&self, limit: u64) {
        self.inodes.fit_fd_cache(limit);
        self.committer.fit_fd_limit(limit);
    }

    fn fd(&self, inode: &Arc<Inode>) -> Result<PathFd, Errno> {
        self.inodes.fd(inode).map_err(errno)
    }

    /// A path for log lines: where the inode lives in the backing directory.
    fn describe(&self, inode: &Arc<Inode>) -> String {
        self.inodes.describe(inode)
    }

    fn container_error(&self, inode: &Arc<Inode>, what: &str, e: squeezefs_container::Error) -> Errno {
        if e.is_corruption() {
            error!("{}: {what}: {e}", self.describe(inode));
        } else {
            warn!("{}: {what}: {e}", self.describe(inode));
        }
        Errno::from_i32(e.errno())
    }

    fn open_container(&self, inode: &Arc<Inode>) -> Result<Container<FileStorage>, Errno> {
        let file = if self.read_only {
            self.inodes.reopen(inode, libc::O_RDONLY)
        } else {
            self.inodes
                .reopen(inode, libc::O_RDWR)
                .or_else(|e| match e.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EROFS) | Some(libc::EPERM) => {
                        self.inodes.reopen(inode, libc::O_RDONLY)
                    }
                    _ => Err(e),
                })
        }
        .map_err(errno)?;
        Container::open(FileStorage::new(file), &self.opts)
            .map_err(|e| self.container_error(inode, "open", e))
    }

    /// Runs `f` on the file's container: the shared open one, or a temporary one that is
    /// flushed and closed afterwards.
    fn with_container<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        let mut open = inode.open.lock().unwrap();
        if let Some(of) = open.as_mut() {
            let r = f(&mut of.container).map_err(|e| self.container_error(inode, what, e))?;
            // Nobody has it open (kept after a lookup, or waiting for its commit): a change
            // is written back now, like a change to a closed file.
            if of.handles == 0 && !of.container.commit_pending() {
                let pending = of
                    .container
                    .write_back()
                    .map_err(|e| self.container_error(inode, "flush", e))?;
                if pending {
                    of.container.drop_cache();
                    drop(open);
                    if let Some(ino) = self.inodes.number(inode) {
                        self.committer.push(ino, inode.clone());
                    }
                }
            }
            return Ok(r);
        }
        drop(open);
        let mut c = self.open_container(inode)?;
        let r = f(&mut c).map_err(|e| self.container_error(inode, what, e))?;
        c.flush().map_err(|e| self.container_error(inode, "flush", e))?;
        *inode.size_cache.lock().unwrap() = c.size().ok();
        Ok(r)
    }

    fn logical_size(&self, ino: u64, inode: &Arc<Inode>) -> Result<u64, Errno> {
        if let Some(of) = inode.open.lock().unwrap().as_ref() {
            return of
                .container
                .size()
                .map_err(|e| self.container_error(inode, "size", e));
        }
        if let Some(s) = *inode.size_cache.lock().unwrap() {
            return Ok(s);
        }
        let c = self.open_container(inode)?;
        let s = c.size().map_err(|e| self.container_error(inode, "size", e))?;
        *inode.size_cache.lock().unwrap() = Some(s);
        self.keep_idle(ino, inode, c);
        Ok(s)
    }

    /// Keeps a container opened for a lookup, closing the oldest kept one beyond
    /// [`IDLE_MAX`] (unless it was opened or waits for its commit meanwhile).
    fn keep_idle(&self, ino: u64, inode: &Arc<Inode>, c: Container<FileStorage>) {
        {
            let mut open = inode.open.lock().unwrap();
            if open.is_some() {
                return;
            }
            *open = Some(OpenFile {
                container: c,
                handles: 0,
                writers: 0,
            });
        }
        let mut q = self.idle.lock().unwrap();
        q.push_back((ino, Arc::downgrade(inode)));
        while q.len() > IDLE_MAX {
            let Some((old_ino, w)) = q.pop_front() else { break };
            let Some(old) = w.upgrade() else { continue };
            let Ok(mut open) = old.open.try_lock() else {
                // Busy right now: look again next time.
                q.push_front((old_ino, w));
                break;
            };
            if open.as_ref().is_some_and(|of| {
                of.handles == 0 && !of.container.commit_pending() && of.container.dirty_bytes() == 0
            }) {
                *open = None;
                drop(open);
                self.inodes.forget(old_ino, 0);
            }
        }
    }

    fn attr(&self, ino: u64, inode: &Arc<Inode>) -> Result<FileAttr, Errno> {
        let st = sys::fstat(self.fd(inode)?.raw()).map_err(errno)?;
        self.attr_with(ino, inode, &st)
    }

    /// The attributes from a `stat` the caller just took (no second `fstat`).
    fn attr_with(&self, ino: u64, inode: &Arc<Inode>, st: &libc::stat) -> Result<FileAttr, Errno> {
        let size = if inode.is_reg {
            self.logical_size(ino, inode)?
        } else {
            st.st_size as u64
        };
        // A regular file's I/O and allocation unit is its extent: what holes, SEEK_HOLE and
        // efficient I/O sizes are measured in (as seek tests and `cp` read st_blksize).
        let blksize = if inode.is_reg {
            let open = inode.open.lock().unwrap();
            open.as_ref()
                .and_then(|of| of.container.extent_size())
                .unwrap_or(1 << self.opts.extent_shift)
        } else {
            4096
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: st.st_blocks as u64,
            atime: time(st.st_atime, st.st_atime_nsec),
            mtime: time(st.st_mtime, st.st_mtime_nsec),
            ctime: time(st.st_ctime, st.st_ctime_nsec),
            crtime: UNIX_EPOCH,
            kind: kind_of(st.st_mode),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: blksize as u32,
            flags: 0,
        })
    }

    /// Whether `name` in directory `parent` is the dictionary directory: hidden from the
    /// mount, and no entry may be made under its name.
    fn is_dict_dir(parent: u64, name: &[u8]) -> bool {
        parent == 1 && name == dicts::DIR_NAME.as_bytes()
    }

    fn is_root(&self, inode: &Arc<Inode>) -> bool {
        self.inodes.get(1).is_some_and(|r| Arc::ptr_eq(&r, inode))
    }

    fn refuse_dict_dir(parent: u64, name: &OsStr) -> Result<(), Errno> {
        if Self::is_dict_dir(parent, name.as_bytes()) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// Makes sure dictionary `id` is loaded, loading it from the backing directory's
    /// `.squeezefs-dicts` if needed (`squeezefs dict train` stores it there before setting
    /// the property). The error says what is wrong.
    fn ensure_dict(&self, id: u32) -> Result<(), String> {
        if squeezefs_codec::dict::get(id).is_some() {
            return Ok(());
        }
        dicts::load(&self.dict_dir, id)
    }

    fn lookup_name(&self, parent: &Arc<Inode>, name: &OsStr) -> Result<(u64, FileAttr), Errno> {
        if self.is_root(parent) && Self::is_dict_dir(1, name.as_bytes()) {
            return Err(Errno::ENOENT);
        }
        let c = sys::entry_name(name).map_err(errno)?;
        let fd = sys::open_path(self.fd(parent)?.raw(), &c).map_err(errno)?;
        let st = sys::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd)).map_err(errno)?;
        let (ino, inode) = self.inodes.insert(fd, &st);
        match self.attr_with(ino, &inode, &st) {
            Ok(a) => Ok((ino, a)),
            Err(e) => {
                self.inodes.forget(ino, 1);
                Err(e)
            }
        }
    }

    /// The mode to create an entry in `parent` with. The kernel leaves the umask to us
    /// (FUSE_POSIX_ACL with FUSE_DONT_MASK): a directory with a default ACL gets the mode
    /// unmasked, and the backing filesystem applies the ACL to it (this daemon's own umask
    /// is 0), as POSIX says; elsewhere the caller's umask applies.
    fn creation_mode(&self, parent: INodeNo, mode: u32, umask: u32) -> u32 {
        let default_acl = self
            .inode(parent)
            .ok()
            .and_then(|p| self.fd(&p).ok())
            .is_some_and(|fd| sys::xattr_size(fd.raw(), c"system.posix_acl_default").is_ok_and(|n| n > 0));
        if default_acl {
            mode
        } else {
            mode & !umask
        }
    }

    /// Clears the setuid/setgid bits a change to `inode`'s data by the request's caller
    /// clears on a local filesystem (see `creds`): after a write FUSE flags, a truncate, an
    /// fallocate.
    fn kill_privs(&self, req: &Request, ino: INodeNo, inode: &Arc<Inode>) -> Result<(), Errno> {
        self.clear_mode_bits(
            req,
            ino,
            inode,
            libc::S_ISUID | libc::S_ISGID,
            creds::privs_to_kill,
        )
    }

    /// Clears what `rule` says of the bits `watched` of `inode`'s mode (nothing is read
    /// unless one of them is set), and has the kernel forget the mode it cached.
    fn clear_mode_bits(
        &self,
        req: &Request,
        ino: INodeNo,
        inode: &Arc<Inode>,
        watched: u32,
        rule: fn(u32, u32, &creds::Caller) -> u32,
    ) -> Result<(), Errno> {
        let fd = self.fd(inode)?;
        let st = sys::fstat(fd.raw()).map_err(errno)?;
        if st.st_mode & watched == 0 {
            return Ok(());
        }
        let kill = rule(st.st_mode, st.st_gid, &creds::Caller::of(req.pid(), req.gid()));
        if kill != 0 {
            sys::chmod(fd.raw(), st.st_mode & 0o7777 & !kill).map_err(errno)?;
            self.invalidate_attr(ino);
        }
        Ok(())
    }

    /// fallocate's promise, as far as a compressing filesystem can keep it (ZFS's rule):
    /// ENOSPC unless the holes in `start..end` would fit on the backing filesystem even
    /// stored uncompressed. Nothing is reserved: other writes may still use that room.
    fn check_room_for(&self, inode: &Arc<Inode>, start: u64, end: u64) -> Result<(), Errno> {
        let holes = self.with_container(
            inode,
            |c| {
                let mut holes = 0u64;
                let mut off = start;
                while off < end {
                    let Some(data) = c.seek_data(off)?.filter(|&d| d < end) else {
                        holes += end - off;
                        break;
                    };
                    holes += data - off;
                    off = c.seek_hole(data)?.unwrap_or(end).min(end);
                }
                Ok(holes)
            },
            "fallocate",
        )?;
        let root = self.inode(INodeNo(1))?;
        let st = sys::statvfs(self.fd(&root)?.raw()).map_err(errno)?;
        let room = st.f_bavail.saturating_mul(st.f_frsize);
        if holes > room {
            return Err(Errno::ENOSPC);
        }
        Ok(())
    }

    /// After an access ACL is set: the setgid bit goes if the caller is outside the file's
    /// group without CAP_FSETID (the kernel cannot tell us without FUSE_SETXATTR_EXT).
    fn kill_sgid_after_acl(&self, req: &Request, ino: INodeNo, inode: &Arc<Inode>) -> Result<(), Errno> {
        self.clear_mode_bits(req, ino, inode, libc::S_ISGID, creds::sgid_to_kill_on_acl)
    }

    /// Tells the kernel its cached attributes of `ino` are stale (a mode changed behind a
    /// request that does not return attributes). Only attributes: no page is touched, so
    /// this cannot wait on I/O.
    fn invalidate_attr(&self, ino: INodeNo) {
        if let Some(n) = self.notifier.get() {
            if let Err(e) = n.inval_inode(ino, -1, 0) {
                // ENOENT: the kernel has already forgotten the inode; nothing is cached.
                if e.raw_os_error() != Some(libc::ENOENT) {
                    warn!("inode {}: cannot invalidate the kernel's attributes: {e}", ino.0);
                }
            }
        }
    }

    /// Gives a newly created entry to the caller (the daemon creates as itself).
    fn chown_new(&self, req: &Request, parent: &Arc<Inode>, name: &OsStr) -> Result<(), Errno> {
        if !self.as_root {
            return Ok(());
        }
        let c = sys::entry_name(name).map_err(errno)?;
        let fd = sys::open_path(self.fd(parent)?.raw(), &c).map_err(errno)?;
        self.give_to_caller(req, parent, std::os::fd::AsRawFd::as_raw_fd(&fd))
    }

    /// Chowns the new entry open as `fd` to the caller (group: the parent's when setgid).
    fn give_to_caller(
        &self,
        req: &Request,
        parent: &Arc<Inode>,
        fd: std::os::fd::RawFd,
    ) -> Result<(), Errno> {
        let pst = sys::fstat(self.fd(parent)?.raw()).map_err(errno)?;
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            pst.st_gid
        } else {
            req.gid()
        };
        let before = sys::fstat(fd).map_err(errno)?.st_mode;
        sys::chown(fd, Some(req.uid()), Some(gid)).map_err(errno)?;
        // chown clears setuid, and setgid on a group-executable file, even for root: the
        // bits the entry was made with (the kernel already dropped what the caller may not
        // have) are put back. Symlinks have none.
        let special = before & (libc::S_ISUID | libc::S_ISGID);
        if special != 0 && before & libc::S_IFMT != libc::S_IFLNK {
            let after = sys::fstat(fd).map_err(errno)?.st_mode;
            if after & special != special {
                sys::chmod(fd, (after | special) & 0o7777).map_err(errno)?;
            }
        }
        Ok(())
    }

    /// A new regular file: created and opened for I/O in one `openat`, given to the caller,
    /// registered, and its (empty) container attached without reading anything back.
    fn create_new(
        &self,
        req: &Request,
        p: &Arc<Inode>,
        name: &OsStr,
        mode: u32,
    ) -> Result<(u64, FileAttr), Errno> {
        if self.is_root(p) {
            Self::refuse_dict_dir(1, name)?;
        }
        let c = sys::entry_name(name).map_err(errno)?;
        let pfd = self.fd(p)?;
        let file = sys::create_rw(pfd.raw(), &c, mode).map_err(errno)?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
        let made = (|| {
            if self.as_root {
                self.give_to_caller(req, p, raw)?;
            }
            let path = sys::open_path(pfd.raw(), &c).map_err(errno)?;
            let st = sys::fstat(raw).map_err(errno)?;
            Ok((path, st))
        })();
        let (path, st) = match made {
            Ok(x) => x,
            Err(e) => {
                let _ = sys::unlinkat(pfd.raw(), &c, 0);
                return Err(e);
            }
        };
        let (ino, inode) = self.inodes.insert(path, &st);
        inode.no_caps.store(true, Ordering::Relaxed);
        let mut container = Container::open(FileStorage::new(file), &self.opts)
            .map_err(|e| self.container_error(&inode, "create", e))?;
        // A new file inherits its directory's properties.
        let dp = self.dir_props(p);
        if dp.codec.is_some() {
            container
                .set_compression_property(dp.codec)
                .map_err(|e| self.container_error(&inode, "inherit compression", e))?;
        }
        if dp.shift.is_some() {
            container
                .set_extent_size_property(dp.shift)
                .map_err(|e| self.container_error(&inode, "inherit extent size", e))?;
        }
        if dp.dict.is_some() {
            container
                .set_dictionary_property(dp.dict)
                .map_err(|e| self.container_error(&inode, "inherit dictionary", e))?;
        }
        {
            let mut open = inode.open.lock().unwrap();
            match open.as_mut() {
                Some(of) => {
                    of.handles += 1;
                    of.writers += 1;
                }
                None => {
                    *open = Some(OpenFile {
                        container,
                        handles: 1,
                        writers: 1,
                    })
                }
            }
        }
        let attr = self.attr_with(ino, &inode, &st)?;
        Ok((ino, attr))
    }

    /// A directory's properties (read once, then cached: we are the only writer).
    fn dir_props(&self, dir: &Arc<Inode>) -> DirProps {
        if !dir.is_dir {
            return DirProps::default();
        }
        let mut cache = dir.dir_props.lock().unwrap();
        if let Some(d) = *cache {
            return d;
        }
        let d = match self.fd(dir) {
            Ok(fd) => props::read_dir(fd.raw(), || self.describe(dir)),
            Err(_) => DirProps::default(),
        };
        *cache = Some(d);
        d
    }

    /// The property `p` of an inode itself (`None`: not set on it).
    fn get_prop(&self, inode: &Arc<Inode>, p: Prop) -> Result<Option<Value>, Errno> {
        if inode.is_dir {
            return Ok(self.dir_props(inode).get(p));
        }
        if !inode.is_reg {
            return Ok(None);
        }
        self.with_container(
            inode,
            |c| {
                Ok(match p {
                    Prop::Compression => c.compression_property().map(Value::Codec),
                    Prop::ExtentSize => c
                        .extent_size_property()
                        .map(|b| Value::Shift(b.trailing_zeros() as u8)),
                    Prop::Dictionary => c.dictionary_property().map(Value::Dict),
                })
            },
            "get property",
        )
    }

    /// Sets (`Some` raw value) or removes (`None`) property `p`, with setxattr's
    /// XATTR_CREATE / XATTR_REPLACE semantics. A bad value is EINVAL and a log line.
    fn set_prop(&self, inode: &Arc<Inode>, p: Prop, raw: Option<&[u8]>, flags: i32) -> Result<(), Errno> {
        self.check_writable()?;
        let v = match raw.map(|r| props::parse(p, r)) {
            Some(Err(why)) => {
                warn!(
                    "{}: refusing {} = {:?}: {why}",
                    self.describe(inode),
                    p.xattr(),
                    String::from_utf8_lossy(raw.unwrap_or_default())
                );
                return Err(Errno::EINVAL);
            }
            Some(Ok(v)) => Some(v),
            None => None,
        };
        if !inode.is_dir && !inode.is_reg {
            // Like user.* xattrs on the host: not on symlinks and special files.
            return Err(Errno::EPERM);
        }
        if let Some(Value::Dict(id)) = v {
            // Only a dictionary that is there and intact: data written with it must be
            // readable again.
            if let Err(why) = self.ensure_dict(id) {
                warn!("{}: refusing {} = {id}: {why}", self.describe(inode), p.xattr());
                return Err(Errno::EINVAL);
            }
        }
        let current = self.get_prop(inode, p)?;
        if (flags & libc::XATTR_CREATE != 0 && current.is_some())
            || (flags & libc::XATTR_REPLACE != 0 || v.is_none()) && current.is_none()
        {
            return Err(if current.is_some() {
                Errno::EEXIST
            } else {
                Errno::ENODATA
            });
        }
        if inode.is_dir {
            props::write_dir(self.fd(inode)?.raw(), p, v, 0).map_err(|e| {
                warn!("{}: cannot store {}: {e}", self.describe(inode), p.xattr());
                errno(e)
            })?;
            let mut cache = inode.dir_props.lock().unwrap();
            let mut d = cache.unwrap_or_default();
            d.set(v, p);
            *cache = Some(d);
            return Ok(());
        }
        self.with_container(
            inode,
            |c| match (p, v) {
                (Prop::Compression, Some(Value::Codec(s))) => c.set_compression_property(Some(s)),
                (Prop::Compression, _) => c.set_compression_property(None),
                (Prop::ExtentSize, Some(Value::Shift(s))) => c.set_extent_size_property(Some(s)),
                (Prop::ExtentSize, _) => c.set_extent_size_property(None),
                (Prop::Dictionary, Some(Value::Dict(d))) => c.set_dictionary_property(Some(d)),
                (Prop::Dictionary, _) => c.set_dictionary_property(None),
            },
            "set property",
        )
    }

    /// `user.squeezefs.rewrite`: recompress the file's extents in place.
    fn rewrite(&self, inode: &Arc<Inode>, value: &[u8]) -> Result<(), Errno> {
        if !inode.is_reg {
            return Err(Errno::EPERM);
        }
        let Some(range) = props::parse_rewrite(value) else {
            warn!(
                "{}: {} = {:?}: expected nothing or OFFSET:LENGTH",
                self.describe(inode),
                props::REWRITE,
                String::from_utf8_lossy(value)
            );
            return Err(Errno::EINVAL);
        };
        self.with_container(inode, |c| c.rewrite(range).map(|_| ()), "rewrite")
    }

    /// A directory listing as `readdir` reports it: the dictionary directory hidden, inode
    /// numbers as `stat` through the mount gives them.
    fn dir_list(&self, ino: u64, dir: &Arc<Inode>, entries: Vec<(Vec<u8>, u64, u8)>) -> DirList {
        let dev = dir.key.0;
        let mut list = DirList {
            entries: Vec::with_capacity(entries.len()),
            // The backing root's parent is outside the mount: the root is its own parent.
            dotdot: ino,
        };
        for (name, d_ino, t) in entries {
            if name == b".." {
                if ino != 1 {
                    list.dotdot = self.inodes.entry_number(dev, d_ino);
                }
            } else if !Self::is_dict_dir(ino, &name) {
                list.entries
                    .push((name, self.inodes.entry_number(dev, d_ino), dtype_kind(t)));
            }
        }
        list
    }

    /// SEEK_DATA / SEEK_HOLE, exact. While the file is open for writing, written data may
    /// still sit in the kernel's page cache (writeback cache), unseen here: the kernel is
    /// asked to write it back first, so holes and data are answered from every byte
    /// written. Only when it cannot be asked (several such seeks at once) is the answer
    /// the coarse one POSIX allows: all data up to a size only the kernel knows.
    fn do_lseek(&self, ino: INodeNo, offset: i64, whence: i32) -> Result<i64, Errno> {
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return Err(Errno::EINVAL);
        }
        // lseek(2): ENXIO for an offset beyond the end, and so for a negative one.
        let off = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
        let i = self.inode(ino)?;
        let writers = i.open.lock().unwrap().as_ref().is_some_and(|of| of.writers > 0);
        if writers && !self.write_back_kernel_cache(ino) {
            return match whence {
                libc::SEEK_DATA => Ok(offset),
                _ => Ok(i64::MAX),
            };
        }
        let found = match whence {
            libc::SEEK_DATA => self.with_container(&i, |c| c.seek_data(off), "lseek")?,
            _ => self.with_container(&i, |c| c.seek_hole(off), "lseek")?,
        };
        found.map(|o| o as i64).ok_or(Errno::ENXIO)
    }

    /// Has the kernel write back (and drop) its cached pages of `ino`, so the container
    /// holds every byte written: a FUSE_NOTIFY_INVAL_INODE launders dirty pages, as WRITE
    /// requests that other daemon threads serve while this one waits. At most
    /// [`KERNEL_FLUSHES`] at once, so threads are always left to serve them; `false` when
    /// none could be made (or the kernel refused).
    fn write_back_kernel_cache(&self, ino: INodeNo) -> bool {
        let Some(n) = self.notifier.get() else {
            return false;
        };
        if self.kernel_flushes.fetch_add(1, Ordering::AcqRel) >= KERNEL_FLUSHES {
            self.kernel_flushes.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let r = n.inval_inode(ino, 0, 0);
        self.kernel_flushes.fetch_sub(1, Ordering::AcqRel);
        match r {
            Ok(()) => true,
            Err(e) => {
                warn!("inode {}: the kernel refused to write its cache back: {e}", ino.0);
                false
            }
        }
    }

    /// Notes that entries of directory `dir` were made, removed or renamed (open listings
    /// of it are stale from now on).
    fn dir_changed(&self, dir: INodeNo) {
        if let Ok(d) = self.inode(dir) {
            d.dir_gen.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn check_writable(&self) -> Result<(), Errno> {
        if self.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    fn new_entry(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
        make: impl FnOnce(std::os::fd::RawFd, &std::ffi::CStr) -> io::Result<()>,
    ) {
        let r = (|| {
            self.check_writable()?;
            Self::refuse_dict_dir(parent.0, name)?;
            let p = self.inode(parent)?;
            let c = sys::entry_name(name).map_err(errno)?;
            let pfd = self.fd(&p)?;
            make(pfd.raw(), &c).map_err(errno)?;
            if let Err(e) = self.chown_new(req, &p, name) {
                let _ = sys::unlinkat(pfd.raw(), &c, 0)
                    .or_else(|_| sys::unlinkat(pfd.raw(), &c, libc::AT_REMOVEDIR));
                return Err(e);
            }
            self.dir_changed(parent);
            self.lookup_name(&p, name)
        })();
        match r {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// A new handle on a regular file: shares the open container (opening it for the first
    /// handle) and truncates it for O_TRUNC.
    fn attach(&self, inode: &Arc<Inode>, truncate: bool, writable: bool) -> Result<(), Errno> {
        let mut open = inode.open.lock().unwrap();
        let of = match open.as_mut() {
            Some(of) => {
                of.handles += 1;
                of
            }
            None => open.insert(OpenFile {
                container: self.open_container(inode)?,
                handles: 1,
                writers: 0,
            }),
        };
        of.writers += u32::from(writable);
        if truncate {
            of.container
                .set_size(0)
                .map_err(|e| self.container_error(inode, "truncate", e))?;
        }
        Ok(())
    }

    /// Commits what waits, then writes out every file still open and makes it all durable
    /// (unmount).
    pub fn flush_all(&self) {
        self.committer.stop();
        if let Some(t) = self.commit_thread.lock().unwrap().take() {
            let _ = t.join();
        }
        for inode in self.inodes.all() {
            if let Some(of) = inode.open.lock().unwrap().as_mut() {
                if let Err(e) = of.container.fsync() {
                    error!("{}: flush at unmount failed: {e}", self.describe(&inode));
                }
            }
        }
        if let Err(e) = self.inodes.syncfs() {
            error!("syncfs of the backing filesystem at unmount failed: {e}");
        }
    }

    /// getxattr on an inode's fd: `Ok(Ok(value))`, or `Ok(Err(len))` for a size query
    /// (`size` 0: the value's length, which getfattr, getfacl and getcap ask first).
    fn getxattr_at(
        &self,
        fd: &PathFd,
        c: &std::ffi::CStr,
        size: u32,
    ) -> Result<Result<Vec<u8>, usize>, Errno> {
        if size == 0 {
            return sys::xattr_size(fd.raw(), c).map(Err).map_err(errno);
        }
        sys::xattr_get(fd.raw(), c, size as usize).map(Ok).map_err(errno)
    }
}

impl Filesystem for SqueezeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        // POSIX ACLs enforced by the kernel, with the umask left to us (a default ACL
        // replaces it); setuid/setgid cleared by us on write, truncate and fallocate, by the
        // rule local filesystems follow (see `creds`).
        let mut want = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_POSIX_ACL
            | InitFlags::FUSE_DONT_MASK
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if !self.read_only {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let have = config.capabilities();
        let _ = config.add_capabilities(want & have);
        let (c, i) = (self.committer.clone(), self.inodes.clone());
        let t = std::thread::Builder::new()
            .name("squeezefs-commit".into())
            .spawn(move || c.run(&i))?;
        *self.commit_thread.lock().unwrap() = Some(t);
        // Idle zstd workspaces are freed after 45 s (checked every 5 s); the thread ends with
        // the daemon.
        std::thread::Builder::new()
            .name("squeezefs-reclaim".into())
            .spawn(|| loop {
                std::thread::sleep(Duration::from_secs(5));
                squeezefs_codec::workspace::global().reclaim();
            })?;
        Ok(())
    }

    fn destroy(&mut self) {
        self.flush_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == 1 && name.as_bytes() == statsfile::NAME.as_bytes() {
            let (uid, gid) = self.root_owner;
            return reply.entry(&TTL, &statsfile::attr(uid, gid), Generation(0));
        }
        match self.inode(parent).and_then(|p| self.lookup_name(&p, name)) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 == statsfile::INO {
            return;
        }
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == statsfile::INO {
            let (uid, gid) = self.root_owner;
            return reply.attr(&TTL, &statsfile::attr(uid, gid));
        }
        match self.inode(ino).and_then(|i| self.attr(ino.0, &i)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if ino.0 == statsfile::INO {
            return reply.error(Errno::EPERM);
        }
        let r = (|| {
            self.check_writable()?;
            let inode = self.inode(ino)?;
            if let Some(m) = mode {
                sys::chmod(self.fd(&inode)?.raw(), m & 0o7777).map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                sys::chown(self.fd(&inode)?.raw(), uid, gid).map_err(errno)?;
            }
            if let Some(s) = size {
                if !inode.is_reg {
                    return Err(if inode.is_dir {
                        Errno::EISDIR
                    } else {
                        Errno::EINVAL
                    });
                }
                self.with_container(&inode, |c| c.set_size(s), "truncate")?;
                self.kill_privs(req, ino, &inode)?;
                // The backing file's mtime/ctime follow a size change like a kernel
                // filesystem's do (the kernel may also send explicit times).
                if mtime.is_none() {
                    let now = timespec(Some(TimeOrNow::Now));
                    sys::utimens(self.fd(&inode)?.raw(), timespec(None), now).map_err(errno)?;
                }
            }
            if atime.is_some() || mtime.is_some() {
                sys::utimens(self.fd(&inode)?.raw(), timespec(atime), timespec(mtime)).map_err(errno)?;
            }
            self.attr(ino.0, &inode)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .inode(ino)
            .and_then(|i| sys::readlink(self.fd(&i)?.raw()).map_err(errno))
        {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let mode = self.creation_mode(parent, mode, umask);
        if mode & libc::S_IFMT == libc::S_IFREG {
            // A regular file made by mknod is an empty container, like any other, and
            // inherits its directory's properties (written into its superblock now).
            let dp = self.inode(parent).map(|p| self.dir_props(&p)).unwrap_or_default();
            return self.new_entry(req, parent, name, reply, |p, c| {
                sys::mknodat(p, c, mode, 0)?;
                if dp == DirProps::default() {
                    return Ok(());
                }
                let inherit = || -> Result<(), squeezefs_container::Error> {
                    let path = sys::open_path(p, c)?;
                    let file = sys::reopen(std::os::fd::AsRawFd::as_raw_fd(&path), libc::O_RDWR)?;
                    let mut ct = Container::open(FileStorage::new(file), &self.opts)?;
                    ct.set_compression_property(dp.codec)?;
                    ct.set_extent_size_property(dp.shift)?;
                    ct.set_dictionary_property(dp.dict)?;
                    ct.fsync()
                };
                inherit().map_err(|e| {
                    let _ = sys::unlinkat(p, c, 0);
                    io::Error::from_raw_os_error(e.errno())
                })
            });
        }
        self.new_entry(req, parent, name, reply, |p, c| {
            sys::mknodat(p, c, mode, rdev as u64)
        });
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        // A new directory inherits its parent's properties.
        let dp = self.inode(parent).map(|p| self.dir_props(&p)).unwrap_or_default();
        let mode = self.creation_mode(parent, mode, umask);
        self.new_entry(req, parent, name, reply, |p, c| {
            sys::mkdirat(p, c, mode)?;
            if dp != DirProps::default() {
                let fd = sys::open_path(p, c)?;
                let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
                for prop in Prop::ALL {
                    if let Some(v) = dp.get(prop) {
                        if let Err(e) = props::write_dir(raw, prop, Some(v), 0) {
                            let _ = sys::unlinkat(p, c, libc::AT_REMOVEDIR);
                            return Err(e);
                        }
                    }
                }
            }
            Ok(())
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            self.check_writable()?;
            let p = self.inode(parent)?;
            let c = sys::entry_name(name).map_err(errno)?;
            sys::unlinkat(self.fd(&p)?.raw(), &c, 0).map_err(errno)?;
            self.dir_changed(parent);
            Ok(())
        })();
        reply_empty(reply, r)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            self.check_writable()?;
            let p = self.inode(parent)?;
            let c = sys::entry_name(name).map_err(errno)?;
            sys::unlinkat(self.fd(&p)?.raw(), &c, libc::AT_REMOVEDIR).map_err(errno)?;
            self.dir_changed(parent);
            Ok(())
        })();
        reply_empty(reply, r)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let t = match sys::cstr(target.as_os_str()) {
            Ok(t) => t,
            Err(e) => return reply.error(errno(e)),
        };
        self.new_entry(req, parent, link_name, reply, |p, c| sys::symlinkat(&t, p, c));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            self.check_writable()?;
            Self::refuse_dict_dir(parent.0, name)?;
            Self::refuse_dict_dir(newparent.0, newname)?;
            let p = self.inode(parent)?;
            let np = self.inode(newparent)?;
            let a = sys::entry_name(name).map_err(errno)?;
            let b = sys::entry_name(newname).map_err(errno)?;
            sys::renameat2(self.fd(&p)?.raw(), &a, self.fd(&np)?.raw(), &b, flags.bits()).map_err(errno)?;
            self.dir_changed(parent);
            self.dir_changed(newparent);
            Ok(())
        })();
        reply_empty(reply, r)
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            self.check_writable()?;
            Self::refuse_dict_dir(newparent.0, newname)?;
            let inode = self.inode(ino)?;
            let np = self.inode(newparent)?;
            let c = sys::entry_name(newname).map_err(errno)?;
            sys::linkat(self.fd(&inode)?.raw(), self.fd(&np)?.raw(), &c).map_err(errno)?;
            self.dir_changed(newparent);
            self.lookup_name(&np, newname)
        })();
        match r {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 == statsfile::INO {
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                return reply.error(Errno::EACCES);
            }
            // Closed files waiting for their superblock are committed first: whoever reads
            // the statistics (or counts the backing files next) sees them as closed.
            self.committer.commit_now(&self.inodes);
            let doc = statsfile::render(&self.backing, &self.opts, self.read_only);
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            self.stats_open.lock().unwrap().insert(fh, Arc::new(doc));
            return reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
        }
        let r = (|| {
            let inode = self.inode(ino)?;
            if !inode.is_reg {
                return Err(Errno::EINVAL);
            }
            let acc = flags.0 & libc::O_ACCMODE;
            if self.read_only && acc != libc::O_RDONLY {
                return Err(Errno::EROFS);
            }
            let writable = acc != libc::O_RDONLY;
            let truncate = flags.0 & libc::O_TRUNC != 0 && writable;
            self.attach(&inode, truncate, writable)?;
            if truncate {
                self.kill_privs(req, ino, &inode)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino.0 == statsfile::INO {
            let Some(doc) = self.stats_open.lock().unwrap().get(&_fh.0).cloned() else {
                return reply.error(Errno::EBADF);
            };
            let start = (offset as usize).min(doc.len());
            let end = start.saturating_add(size as usize).min(doc.len());
            return reply.data(&doc[start..end]);
        }
        let r = self
            .inode(ino)
            .and_then(|i| self.with_container(&i, |c| c.read(offset, size as usize), "read"));
        match r {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        wf: WriteFlags,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = (|| {
            self.check_writable()?;
            let i = self.inode(ino)?;
            // A caller without CAP_FSETID writing a setuid/setgid file (FUSE_HANDLE_KILLPRIV_V2).
            if wf.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                self.kill_privs(req, ino, &i)?;
            }
            self.with_container(&i, |c| c.write(offset, data), "write")
        })();
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _lo: LockOwner, reply: ReplyEmpty) {
        if ino.0 == statsfile::INO {
            return reply.ok();
        }
        // close(2): write the data out (errors reach the caller); the superblock follows
        // in the next group commit.
        let r = self
            .inode(ino)
            .and_then(|i| self.with_container(&i, |c| c.write_back().map(|_| ()), "flush"));
        reply_empty(reply, r)
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if ino.0 == statsfile::INO {
            self.stats_open.lock().unwrap().remove(&_fh.0);
            return reply.ok();
        }
        let r = (|| {
            let inode = self.inode(ino)?;
            let mut open = inode.open.lock().unwrap();
            let Some(of) = open.as_mut() else {
                return Ok(());
            };
            of.handles -= 1;
            if _flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                of.writers = of.writers.saturating_sub(1);
            }
            if of.handles > 0 {
                return Ok(());
            }
            // Last handle: write everything out and drop the state (and its memory), or
            // keep it, cache emptied, until the group commit writes its superblock.
            match of.container.write_back() {
                // A superblock to commit, or old copies to remove once a sync covers what
                // replaced them (a rewritten small file's older superblock copy): the
                // group commit does both.
                Ok(pending) if pending || of.container.needs_settle() => {
                    of.container.drop_cache();
                    drop(open);
                    self.committer.push(ino.0, inode.clone());
                    Ok(())
                }
                res => {
                    *inode.size_cache.lock().unwrap() = of.container.size().ok();
                    *open = None;
                    res.map(|_| ())
                        .map_err(|e| self.container_error(&inode, "flush at close", e))
                }
            }
        })();
        reply_empty(reply, r)
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        if ino.0 == statsfile::INO {
            return reply.ok();
        }
        let r = self
            .inode(ino)
            .and_then(|i| self.with_container(&i, |c| c.fsync(), "fsync"));
        reply_empty(reply, r)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let inode = self.inode(ino)?;
            let dfd = self.fd(&inode)?;
            // The count before the listing: a change racing with it makes the listing stale.
            let gen = inode.dir_gen.load(Ordering::Acquire);
            let entries = sys::read_dir(dfd.raw()).map_err(errno)?;
            // A reader is about to walk this directory: start reading its files.
            let files: Vec<std::ffi::CString> = entries
                .iter()
                .filter(|(_, _, t)| *t == libc::DT_REG)
                .take(prefetch::FILES)
                .filter_map(|(n, _, _)| std::ffi::CString::new(n.clone()).ok())
                .collect();
            self.prefetch.directory(dfd, files);
            let list = Arc::new(self.dir_list(ino.0, &inode, entries));
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            self.dirs.lock().unwrap().insert(
                fh,
                DirHandle {
                    list,
                    gen,
                    used: false,
                },
            );
            Ok(fh)
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let list = {
            let mut dirs = self.dirs.lock().unwrap();
            let Some(h) = dirs.get_mut(&fh.0) else {
                return reply.error(Errno::EBADF);
            };
            let inode = match self.inode(ino) {
                Ok(i) => i,
                Err(e) => return reply.error(e),
            };
            let gen = inode.dir_gen.load(Ordering::Acquire);
            let stale = offset == 0 && (h.used || gen != h.gen);
            h.used = true;
            if stale {
                drop(dirs);
                let fresh = self.fd(&inode).and_then(|fd| {
                    let entries = sys::read_dir(fd.raw()).map_err(errno)?;
                    Ok(Arc::new(self.dir_list(ino.0, &inode, entries)))
                });
                let fresh = match fresh {
                    Ok(l) => l,
                    Err(e) => return reply.error(e),
                };
                if let Some(h) = self.dirs.lock().unwrap().get_mut(&fh.0) {
                    h.list = fresh.clone();
                    h.gen = gen;
                }
                fresh
            } else {
                h.list.clone()
            }
        };
        // Offsets: 1 = ".", 2 = "..", 3.. = entries.
        let mut off = offset;
        while off < 2 {
            let (name, n) = if off == 0 {
                (".", ino.0)
            } else {
                ("..", list.dotdot)
            };
            if reply.add(INodeNo(n), off + 1, FileType::Directory, name) {
                return reply.ok();
            }
            off += 1;
        }
        for (i, (name, n, kind)) in list.entries.iter().enumerate().skip((off - 2) as usize) {
            if reply.add(INodeNo(*n), i as u64 + 3, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        match self
            .inode(ino)
            .and_then(|i| sys::fsync_path(self.fd(&i)?.raw(), datasync).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self
            .inode(INodeNo(1))
            .and_then(|r| sys::statvfs(self.fd(&r)?.raw()).map_err(errno))
        {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            self.check_writable()?;
            let i = self.inode(ino)?;
            if let Some(p) = Prop::from_xattr(name.as_bytes()) {
                return self.set_prop(&i, p, Some(value), flags);
            }
            if name.as_bytes() == props::REWRITE.as_bytes() {
                return self.rewrite(&i, value);
            }
            if name.as_bytes() == CAPS_STORED.to_bytes() {
                return Err(Errno::EPERM);
            }
            let c = sys::cstr(name).map_err(errno)?;
            i.no_caps.store(false, Ordering::Relaxed);
            let fd = self.fd(&i)?;
            if name.as_bytes() == CAPS && self.as_root {
                sys::xattr_set(fd.raw(), CAPS_STORED, value, flags).map_err(errno)?;
                // A copy under the real name (stored by an older squeezefs) goes.
                let _ = sys::xattr_remove(fd.raw(), &c);
                return Ok(());
            }
            sys::xattr_set(fd.raw(), &c, value, flags).map_err(errno)?;
            if name.as_bytes() == b"system.posix_acl_access" {
                self.kill_sgid_after_acl(req, ino, &i)?;
            }
            Ok(())
        })();
        reply_empty(reply, r)
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = (|| {
            if ino.0 == statsfile::INO {
                return Err(Errno::ENODATA);
            }
            let i = self.inode(ino)?;
            if let Some(p) = Prop::from_xattr(name.as_bytes()) {
                let v = props::format(self.get_prop(&i, p)?.ok_or(Errno::ENODATA)?).into_bytes();
                return match size as usize {
                    0 => Ok(Err(v.len())),
                    n if n < v.len() => Err(Errno::ERANGE),
                    _ => Ok(Ok(v)),
                };
            }
            let caps = name.as_bytes() == b"security.capability";
            if caps && i.no_caps.load(Ordering::Relaxed) {
                return Err(Errno::ENODATA);
            }
            if name.as_bytes() == CAPS_STORED.to_bytes() {
                return Err(Errno::ENODATA);
            }
            let fd = self.fd(&i)?;
            let c = sys::cstr(name).map_err(errno)?;
            let mut r = Err(Errno::ENODATA);
            if caps && self.as_root {
                r = self.getxattr_at(&fd, CAPS_STORED, size);
            }
            if !caps || matches!(r, Err(e) if e == Errno::ENODATA) {
                r = self.getxattr_at(&fd, &c, size);
            }
            if caps && matches!(r, Err(e) if e == Errno::ENODATA) {
                i.no_caps.store(true, Ordering::Relaxed);
            }
            r
        })();
        match r {
            Ok(Ok(v)) => reply.data(&v),
            Ok(Err(n)) => reply.size(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if ino.0 == statsfile::INO {
            return if size == 0 { reply.size(0) } else { reply.data(&[]) };
        }
        let r = self.inode(ino).and_then(|i| {
            let raw = sys::xattr_list(self.fd(&i)?.raw(), 65536).map_err(errno)?;
            // Properties are listed as they are in force (a file's live in its container; a
            // value forged on the backing entry around squeezefs is not one), the rest as is.
            // Capabilities kept under their stored name are listed under their own, once.
            let names: Vec<&[u8]> = raw
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty() && Prop::from_xattr(n).is_none())
                .map(|n| if n == CAPS_STORED.to_bytes() { CAPS } else { n })
                .collect();
            let mut v: Vec<u8> = Vec::with_capacity(raw.len());
            for (k, n) in names.iter().enumerate() {
                if *n == CAPS && names[..k].contains(&CAPS) {
                    continue;
                }
                v.extend_from_slice(n);
                v.push(0);
            }
            if i.is_reg || i.is_dir {
                for p in Prop::ALL {
                    if self.get_prop(&i, p)?.is_some() {
                        v.extend_from_slice(p.xattr().as_bytes());
                        v.push(0);
                    }
                }
            }
            Ok(v)
        });
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            self.check_writable()?;
            let i = self.inode(ino)?;
            if let Some(p) = Prop::from_xattr(name.as_bytes()) {
                return self.set_prop(&i, p, None, 0);
            }
            if name.as_bytes() == CAPS_STORED.to_bytes() {
                return Err(Errno::EPERM);
            }
            let c = sys::cstr(name).map_err(errno)?;
            let fd = self.fd(&i)?;
            if name.as_bytes() == CAPS && self.as_root {
                let stored = sys::xattr_remove(fd.raw(), CAPS_STORED);
                let real = sys::xattr_remove(fd.raw(), &c);
                return stored.or(real).map_err(errno);
            }
            sys::xattr_remove(fd.raw(), &c).map_err(errno)
        })();
        reply_empty(reply, r)
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (default_permissions); existence is ours.
        if ino.0 == statsfile::INO {
            return reply.ok();
        }
        match self.inode(ino) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            self.check_writable()?;
            let p = self.inode(parent)?;
            let excl = flags & libc::O_EXCL != 0;
            let mode = self.creation_mode(parent, mode, umask) & 0o7777;
            match self.create_new(req, &p, name, mode) {
                Ok((_, attr)) => {
                    self.dir_changed(parent);
                    return Ok(attr);
                }
                Err(e) if e == Errno::EEXIST && !excl => {}
                Err(e) => return Err(e),
            }
            // It exists: open it like any other.
            let (ino, attr) = self.lookup_name(&p, name)?;
            let inode = self.inodes.get(ino).ok_or(Errno::ESTALE)?;
            if !inode.is_reg {
                self.inodes.forget(ino, 1);
                return Err(Errno::EISDIR);
            }
            let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
            let truncate = flags & libc::O_TRUNC != 0;
            self.attach(&inode, truncate, writable)?;
            if truncate {
                self.kill_privs(req, INodeNo(ino), &inode)?;
            }
            let attr = self.attr(ino, &inode).unwrap_or(attr);
            Ok(attr)
        })();
        match r {
            Ok(attr) => reply.created(&TTL, &attr, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            self.check_writable()?;
            let i = self.inode(ino)?;
            let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
            let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
            let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
            let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
            let known = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
            if mode & !known != 0 || (punch && !keep) || (punch && zero) {
                return Err(Errno::EOPNOTSUPP);
            }
            self.kill_privs(req, ino, &i)?;
            if !punch && !zero {
                self.check_room_for(&i, offset, end)?;
            }
            self.with_container(
                &i,
                |c| {
                    if punch || zero {
                        c.punch_hole(offset, length)?;
                    }
                    // Plain allocation reserves nothing (extents are allocated when written,
                    // compressed; docs/ARCHITECTURE.md "Space"); it only grows the file
                    // unless KEEP_SIZE.
                    if !keep && end > c.size()? {
                        c.set_size(end)?;
                    }
                    Ok(())
                },
                "fallocate",
            )
        })();
        reply_empty(reply, r)
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.do_lseek(ino, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }
}
