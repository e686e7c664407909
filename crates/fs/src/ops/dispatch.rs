//! `impl fuser::Filesystem`: every request is routed (the virtual statistics file, or an
//! inode of the backing directory), handed to its `do_x` in the file of its family, and
//! the result sent back through `reply.rs`. Nothing here decides anything.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::attrs::SetAttr;
use super::open_create::FH_LAZY;
use super::reply::{self, Xattr};
use super::virtual_file::{is_stats_name, route, Node};
use super::{flags, readdir, Core, SqueezeFs, Who, TTL};
use crate::requests::Kind;

/// Inodes forgotten since the last housekeeping round that make it trim the heap (about
/// half a KiB each; fewer are not worth a walk of every arena).
const TRIM_AFTER_FORGETS: u64 = 1024;

impl Filesystem for SqueezeFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        // The kernel grants a FUSE mount at most its default read-ahead (128 KiB) whatever
        // is asked here; asking more only documents that the daemon would take it.
        let _ = config.set_max_readahead(1 << 20);
        // POSIX ACLs enforced by the kernel, with the umask left to us (a default ACL
        // replaces it); setuid/setgid cleared by us on write, truncate and fallocate, by the
        // rule local filesystems follow (see `creds`).
        let mut want = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_POSIX_ACL
            | InitFlags::FUSE_DONT_MASK
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            // Listings with attributes: no LOOKUP per file on a walk. AUTO: the kernel asks
            // for them at a directory's first read, and after that only where lookups follow.
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO;
        if !self.read_only {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        } else {
            // Read-only: no writer can exist, so nothing hangs on OPEN and RELEASE (rule 11
            // needs them to know writers; a write-back needs the last close). The first
            // OPEN is answered ENOSYS and the kernel opens every file itself from then on,
            // keeping its pages: a warm re-read sends nothing per file. Without an OPEN an
            // atomic O_TRUNC would be done by nobody: O_TRUNC comes as a SETATTR of the
            // size instead, which is refused like every change (even should the kernel's
            // mount be made writable by a remount behind our back).
            want |= InitFlags::FUSE_NO_OPEN_SUPPORT;
            want &= !InitFlags::FUSE_ATOMIC_O_TRUNC;
        }
        let have = config.capabilities();
        let _ = config.add_capabilities(want & have);
        self.no_open.store(
            (want & have).contains(InitFlags::FUSE_NO_OPEN_SUPPORT),
            Ordering::Relaxed,
        );
        self.files.start()?;
        // Housekeeping every 5 s; the thread ends with the daemon. Dirty extents held in
        // memory for `dirty_expire=` are written out (`lifecycle::behind`). Idle zstd workspaces are
        // freed after 45 s. After FORGETs, the inode table gives back its room and the heap
        // its free pages (`sys::trim_heap`: glibc keeps freed memory in its per-thread
        // arenas; measured in docs/BENCHMARKS.md, "Memory after a million files").
        let inodes = self.inodes.clone();
        let behind = self.files.write_behind();
        std::thread::Builder::new()
            .name("squeezefs-reclaim".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(5));
                behind.run();
                squeezefs_codec::workspace::global().reclaim();
                if inodes.compact() >= TRIM_AFTER_FORGETS {
                    crate::sys::trim_heap();
                }
            })?;
        Ok(())
    }

    fn destroy(&mut self) {
        self.flush_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _serving = self.spin.serving();
        if is_stats_name(parent, name) {
            return reply::stats_entry(reply, self.stats_attr(true));
        }
        let _timed = self.timed(Kind::Lookup);
        let r = self.inode(parent).and_then(|p| self.lookup_name(&p, name));
        reply::lookup(reply, r.map(|(_, attr)| attr))
    }

    /// No [`crate::spin::Spin::serving`] guard: fuser 0.18 serves a BATCH_FORGET as a
    /// FORGET per inode (its `batch_forget` takes a type it does not export), and a thread
    /// must not stand aside half-way through the batch.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_one(ino, nlookup)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _serving = self.spin.serving();
        let _timed = self.count(ino, Kind::Getattr);
        match route(ino) {
            Node::Stats => reply::stats_attr(reply, self.stats_attr(false)),
            Node::Backing(ino) => reply::attr(reply, self.do_getattr(ino)),
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
        let _serving = self.spin.serving();
        self.background.touched(0);
        let _timed = self.count(ino, Kind::Setattr);
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        let who = Who::from(req);
        match route(ino) {
            Node::Stats => reply::attr(reply, Err(Errno::EPERM)),
            Node::Backing(ino) => match self.do_setattr(&who, ino, a, false) {
                Err(e) if e == Errno::EWOULDBLOCK => {
                    self.defer(move |c| reply::attr(reply, c.do_setattr(&who, ino, a, true)))
                }
                r => reply::attr(reply, r),
            },
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _serving = self.spin.serving();
        reply::data(reply, self.do_readlink(ino))
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
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::entry(reply, self.do_mknod(&req.into(), parent, name, mode, umask, rdev))
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::entry(reply, self.do_mkdir(&req.into(), parent, name, mode, umask))
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::empty(reply, self.do_remove(parent, name, 0))
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::empty(reply, self.do_remove(parent, name, libc::AT_REMOVEDIR))
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::entry(reply, self.do_symlink(&req.into(), parent, link_name, target))
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
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::empty(reply, self.do_rename(parent, name, newparent, newname, flags))
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::entry(reply, self.do_link(ino, newparent, newname))
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _serving = self.spin.serving();
        let _timed = self.count(ino, Kind::Open);
        if self.no_open.load(Ordering::Relaxed) {
            // Once, for the whole mount (`init`).
            return reply.error(Errno::ENOSYS);
        }
        let handle = |(keep, lazy): (bool, bool)| {
            let f = if keep {
                FopenFlags::FOPEN_KEEP_CACHE
            } else {
                FopenFlags::empty()
            };
            (if lazy { FH_LAZY } else { 0 }, f)
        };
        let who = Who::from(req);
        let r = match route(ino) {
            Node::Stats => self.open_stats(flags.0),
            Node::Backing(ino) => match self.do_open(&who, ino, flags.0, false) {
                Err(e) if e == Errno::EWOULDBLOCK => {
                    let f = flags.0;
                    return self
                        .defer(move |c| reply::opened(reply, c.do_open(&who, ino, f, true).map(handle)));
                }
                r => r.map(handle),
            },
        };
        reply::opened(reply, r)
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _serving = self.spin.serving();
        let _timed = self.count(ino, Kind::Read);
        match route(ino) {
            Node::Stats => reply::data(reply, self.stats.read(fh.0, offset, size)),
            Node::Backing(ino) => match self.do_read(ino, offset, size) {
                Ok((data, spill)) => {
                    reply.data(&data);
                    if let Some(s) = spill {
                        self.spill(ino, s);
                    }
                }
                Err(e) => reply::data(reply, Err(e)),
            },
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
        let _serving = self.spin.serving();
        self.background.touched(data.len() as u64);
        let timed = self.timed(Kind::Write);
        match self.do_write(&req.into(), ino, offset, data, wf) {
            Ok(later) => {
                reply.written(data.len() as u32);
                // (The time to answer, not the compression after it.)
                drop(timed);
                // A batch of extents this WRITE filled, compressed after the answer.
                if let Some(later) = later {
                    self.files.finish_write(later);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    /// Never ENOSYS, which would turn copies off for the mount: the statistics file is
    /// refused with EOPNOTSUPP, and the kernel copies it through reads and writes.
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _serving = self.spin.serving();
        match (route(ino_in), route(ino_out)) {
            (Node::Backing(i), Node::Backing(o)) => {
                match self.do_copy_range(i, offset_in, o, offset_out, len, flags.bits()) {
                    Ok(n) => {
                        self.background.touched(n);
                        reply.written(n as u32)
                    }
                    Err(e) => reply.error(e),
                }
            }
            _ => reply.error(Errno::EOPNOTSUPP),
        }
    }

    /// Off: the first FLUSH is answered ENOSYS, after which the kernel sends none (one
    /// round trip less per `close`, read-only ones too). The write-out it did is the last
    /// close's, at RELEASE (rule 10 in `lifecycle::state`).
    fn flush(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _lo: LockOwner, reply: ReplyEmpty) {
        let _serving = self.spin.serving();
        let _timed = self.count(ino, Kind::Flush);
        reply.error(Errno::ENOSYS)
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        _lo: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let serving = self.spin.serving();
        let _timed = self.count(ino, Kind::Release);
        let _releasing = self.files.releasing();
        match route(ino) {
            Node::Stats => {
                self.stats.release(fh.0);
                reply::empty(reply, Ok(()))
            }
            Node::Backing(ino) => reply::empty(
                reply,
                self.do_release(ino, fh.0, flags.0, serving.spinning_here()),
            ),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let serving = self.spin.serving();
        serving.will_wait();
        match route(ino) {
            Node::Stats => reply::empty(reply, Ok(())),
            Node::Backing(ino) => reply::empty(reply, self.do_fsync(ino, datasync)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _serving = self.spin.serving();
        let _timed = self.timed(Kind::Opendir);
        // The kernel keeps a large directory's listings and serves later ones from its
        // page cache until the directory changes through the mount (`readdir.rs`).
        let flags = |large: bool| match large {
            true => FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            false => FopenFlags::empty(),
        };
        reply::opened(reply, self.do_opendir(ino).map(|(fh, large)| (fh, flags(large))))
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        let _serving = self.spin.serving();
        let _timed = self.timed(Kind::Readdir);
        match self.do_readdir(ino, fh.0, offset) {
            Ok(list) => readdir::fill(&list, ino, offset, reply),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let _serving = self.spin.serving();
        let _timed = self.timed(Kind::Readdirplus);
        match self.do_readdir(ino, fh.0, offset) {
            Ok(list) => self.fill_plus(&list, ino, offset, reply),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _serving = self.spin.serving();
        self.do_releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let serving = self.spin.serving();
        serving.will_wait();
        reply::empty(reply, self.do_fsyncdir(ino, datasync))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _serving = self.spin.serving();
        match self.do_statfs() {
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
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::empty(reply, self.do_setxattr(&req.into(), ino, name, value, flags))
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _serving = self.spin.serving();
        let _timed = self.count(ino, Kind::Getxattr);
        match route(ino) {
            Node::Stats => reply::xattr(reply, Err(Errno::ENODATA)),
            Node::Backing(ino) => reply::xattr(reply, self.do_getxattr(ino, name, size)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _serving = self.spin.serving();
        match route(ino) {
            Node::Stats => reply::xattr(reply, Xattr::fitted(Vec::new(), size)),
            Node::Backing(ino) => reply::xattr(reply, self.do_listxattr(ino, size)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::empty(reply, self.do_removexattr(ino, name))
    }

    #[allow(clippy::too_many_arguments)] // fuser's signature
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let _serving = self.spin.serving();
        let r = match route(ino) {
            Node::Stats => Err(Errno::ENOTTY),
            Node::Backing(ino) => flags::Ioctl::parse(cmd, in_data).and_then(|op| self.do_ioctl(ino, op)),
        };
        reply::ioctl(reply, r)
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _serving = self.spin.serving();
        match route(ino) {
            Node::Stats => reply::empty(reply, Ok(())),
            Node::Backing(ino) => reply::empty(reply, self.do_access(ino)),
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
        let _serving = self.spin.serving();
        self.background.touched(0);
        let _timed = self.timed(Kind::Create);
        let created = |reply: ReplyCreate, r: Result<fuser::FileAttr, Errno>| match r {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                fuser::Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        };
        let who = Who::from(req);
        match self.do_create(&who, parent, name, (mode, umask, flags), false) {
            Err(e) if e == Errno::EWOULDBLOCK => {
                let name = name.to_os_string();
                self.defer(move |c| {
                    created(
                        reply,
                        c.do_create(&who, parent, &name, (mode, umask, flags), true),
                    )
                })
            }
            r => created(reply, r),
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
        let _serving = self.spin.serving();
        self.background.touched(0);
        reply::empty(reply, self.do_fallocate(&req.into(), ino, offset, length, mode))
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
        let _serving = self.spin.serving();
        match self.do_lseek(ino, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }
}

impl SqueezeFs {
    /// Serves a request on a thread of its own: one that must wait for a store into the
    /// kernel's page cache (rule 11 of `lifecycle::state`). The store may wait for a page
    /// the kernel holds for a READ still queued, and only a session thread can answer that
    /// READ: so no session thread ever waits for a store.
    fn defer(&self, work: impl FnOnce(&Core) + Send + 'static) {
        let core = self.core();
        if let Err(e) = std::thread::Builder::new()
            .name("squeezefs-wait".into())
            .spawn(move || work(&core))
        {
            // The request's reply went with the closure: the kernel gets EIO for it.
            log::error!("cannot start a thread to serve a request that waits: {e}");
        }
    }
}

impl Core {
    fn forget_one(&self, ino: INodeNo, nlookup: u64) {
        if let Node::Backing(ino) = route(ino) {
            self.inodes.forget(ino.0, nlookup);
        }
    }

    /// Counts a request on `ino` and times it while the guard lives, and keeps the spin on
    /// /dev/fuse going (`spin.rs`), unless it is on the statistics file (reading the counts
    /// must not change them).
    fn count(&self, ino: INodeNo, k: Kind) -> Option<crate::requests::Timed<'_>> {
        (!matches!(route(ino), Node::Stats)).then(|| self.timed(k))
    }

    /// Counts and times a request that names no inode that could be the statistics file
    /// (a LOOKUP's or CREATE's parent, a WRITE's open file), and keeps the spin going: the
    /// first requests of a burst (tar's LOOKUP and CREATE) start it.
    fn timed(&self, k: Kind) -> crate::requests::Timed<'_> {
        self.spin.touch();
        self.requests.timed(k)
    }
}
