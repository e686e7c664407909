//! The floor a FUSE filesystem stands on: an in-memory filesystem that does no work at all,
//! to measure what the kernel's requests alone cost on a machine (`scripts/bench-floor`).
//!
//! A `tar xf` through any FUSE filesystem waits for about nine requests a file (LOOKUP,
//! CREATE, the parent's GETATTR, two GETXATTRs, the WRITE the page cache flushes, three or
//! four SETATTRs: docs/BENCHMARKS.md says why the kernel sends each). What each costs is the
//! machine's: on a virtual machine whose idle vCPUs halt, every reply wakes a halted vCPU.
//! This filesystem answers every request from a hash map under one lock, so the time a tree
//! takes through it is what the transport costs, and squeezefs's time beyond it is its own.
//! It negotiates what squeezefs negotiates for the per-file path (writeback cache, parallel
//! dirops, `HANDLE_KILLPRIV_V2`, readdirplus, `default_permissions`) and, like squeezefs,
//! answers FLUSH with ENOSYS (the kernel stops sending it).
//!
//! Usage (as root): `fuse_floor MOUNTPOINT [spin]`. With `spin`, the session's descriptor is
//! made non-blocking, so its one thread spins in `read` (what squeezefs's `spin=` does while
//! requests come) and never sleeps: a CPU stays busy until the unmount. Everything is lost at
//! the unmount (`umount MOUNTPOINT` ends the process). Not a filesystem to keep data in.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};

const TTL: Duration = Duration::from_secs(60);

struct Node {
    attr: FileAttr,
    children: HashMap<OsString, u64>,
    data: Vec<u8>,
}

#[derive(Default)]
struct Tree {
    next: u64,
    nodes: HashMap<u64, Node>,
}

struct Floor {
    tree: Mutex<Tree>,
}

fn attr(ino: u64, kind: FileType, perm: u16, uid: u32, gid: u32) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Floor {
    fn new() -> Self {
        let mut tree = Tree {
            next: 2,
            ..Tree::default()
        };
        let root = Node {
            attr: attr(1, FileType::Directory, 0o755, 0, 0),
            children: HashMap::new(),
            data: Vec::new(),
        };
        tree.nodes.insert(1, root);
        Floor {
            tree: Mutex::new(tree),
        }
    }

    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
        data: &[u8],
    ) -> Result<FileAttr, Errno> {
        let mut tree = self.tree.lock().unwrap();
        let ino = tree.next;
        let dir = tree.nodes.get_mut(&parent.0).ok_or(Errno::ENOENT)?;
        if dir.children.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        dir.children.insert(name.to_owned(), ino);
        dir.attr.mtime = SystemTime::now();
        dir.attr.ctime = dir.attr.mtime;
        tree.next += 1;
        let mut a = attr(ino, kind, (mode & 0o7777) as u16, req.uid(), req.gid());
        a.size = data.len() as u64;
        tree.nodes.insert(
            ino,
            Node {
                attr: a,
                children: HashMap::new(),
                data: data.to_vec(),
            },
        );
        Ok(a)
    }

    fn remove(&self, parent: INodeNo, name: &OsStr) -> Result<(), Errno> {
        let mut tree = self.tree.lock().unwrap();
        let dir = tree.nodes.get_mut(&parent.0).ok_or(Errno::ENOENT)?;
        let ino = dir.children.remove(name).ok_or(Errno::ENOENT)?;
        let node = tree.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        node.attr.nlink = node.attr.nlink.saturating_sub(1);
        Ok(())
    }
}

impl Filesystem for Floor {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_WRITEBACK_CACHE
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO;
        let have = config.capabilities();
        let _ = config.add_capabilities(want & have);
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let tree = self.tree.lock().unwrap();
        let found = tree
            .nodes
            .get(&parent.0)
            .and_then(|d| d.children.get(name))
            .and_then(|i| tree.nodes.get(i));
        match found {
            Some(n) => reply.entry(&TTL, &n.attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.lock().unwrap().nodes.get(&ino.0) {
            Some(n) => reply.attr(&TTL, &n.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
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
        let mut tree = self.tree.lock().unwrap();
        let Some(n) = tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(m) = mode {
            n.attr.perm = (m & 0o7777) as u16;
        }
        n.attr.uid = uid.unwrap_or(n.attr.uid);
        n.attr.gid = gid.unwrap_or(n.attr.gid);
        if let Some(s) = size {
            n.data.resize(s as usize, 0);
            n.attr.size = s;
        }
        n.attr.atime = atime.map_or(n.attr.atime, time);
        n.attr.mtime = mtime.map_or(n.attr.mtime, time);
        n.attr.ctime = SystemTime::now();
        reply.attr(&TTL, &n.attr);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.tree.lock().unwrap().nodes.get(&ino.0) {
            Some(n) => reply.data(&n.data),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        match self.make(req, parent, name, FileType::Directory, mode, b"") {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, name: &OsStr, link: &Path, reply: ReplyEntry) {
        match self.make(
            req,
            parent,
            name,
            FileType::Symlink,
            0o777,
            link.as_os_str().as_bytes(),
        ) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut tree = self.tree.lock().unwrap();
        let Some(dir) = tree.nodes.get_mut(&parent.0) else {
            return reply.error(Errno::ENOENT);
        };
        if dir.children.contains_key(name) {
            return reply.error(Errno::EEXIST);
        }
        dir.children.insert(name.to_owned(), ino.0);
        let Some(n) = tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        n.attr.nlink += 1;
        reply.entry(&TTL, &n.attr, Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut tree = self.tree.lock().unwrap();
        let Some(ino) = tree
            .nodes
            .get_mut(&parent.0)
            .and_then(|d| d.children.remove(name))
        else {
            return reply.error(Errno::ENOENT);
        };
        match tree.nodes.get_mut(&newparent.0) {
            Some(d) => {
                d.children.insert(newname.to_owned(), ino);
                reply.ok();
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.make(req, parent, name, FileType::RegularFile, mode, b"") {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let tree = self.tree.lock().unwrap();
        let Some(n) = tree.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let start = (offset as usize).min(n.data.len());
        let end = (start + size as usize).min(n.data.len());
        reply.data(&n.data[start..end]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut tree = self.tree.lock().unwrap();
        let Some(n) = tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let end = offset as usize + data.len();
        if n.data.len() < end {
            n.data.resize(end, 0);
        }
        n.data[offset as usize..end].copy_from_slice(data);
        n.attr.size = n.data.len() as u64;
        n.attr.blocks = n.attr.size.div_ceil(512);
        reply.written(data.len() as u32);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENODATA);
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let tree = self.tree.lock().unwrap();
        let Some(dir) = tree.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let mut entries = vec![
            (ino.0, FileType::Directory, OsString::from(".")),
            (1, FileType::Directory, "..".into()),
        ];
        for (name, i) in &dir.children {
            entries.push((*i, tree.nodes[i].attr.kind, name.clone()));
        }
        for (at, (i, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(i), at as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let Some(mountpoint) = args.next() else {
        eprintln!("usage: fuse_floor MOUNTPOINT [spin]");
        std::process::exit(2);
    };
    let spin = args.next().is_some_and(|a| a == "spin");
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("fuse-floor".into()),
        MountOption::DefaultPermissions,
    ];
    cfg.n_threads = Some(1);
    let session = fuser::Session::new(Floor::new(), Path::new(&mountpoint), &cfg)?;
    if spin {
        use std::os::fd::{AsFd, AsRawFd};
        let fd = session.as_fd().as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL on a descriptor the session owns and keeps open for the
        // whole run; only the status flags change (fuser's read loop retries EAGAIN).
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    session.run()
}
