//! The FUSE side of squeezefs: [`SqueezeFs`] and its request handlers, split by family so
//! any operation is one hop away:
//!
//! | file | what |
//! |---|---|
//! | `dispatch.rs` | `impl fuser::Filesystem`: routes each request (virtual file or backing inode), calls a `do_x`, sends the reply. No logic. |
//! | `reply.rs` | the reply helpers (`Result` → fuser reply) |
//! | `names.rs` | the one funnel from (parent inode, name) to (parent fd, checked name); hiding `.squeezefs-dicts`; lookup |
//! | `virtual_file.rs` | the router for the virtual statistics file and its handlers |
//! | `attrs.rs` | `stat` through the mount: type conversion, getattr, setattr, statfs, readlink, access; clearing setuid/setgid |
//! | `dir_ops.rs` | entries made and removed: mknod, mkdir, symlink, link, unlink, rmdir, rename; creation mode and ownership |
//! | `readdir.rs` | opendir, readdir, releasedir, fsyncdir |
//! | `open_create.rs` | open, create, read, write, copy_file_range, flush, release, fsync (the lifecycle itself is `crate::lifecycle`) |
//! | `allocate_seek.rs` | fallocate, lseek (SEEK_DATA/SEEK_HOLE) |
//! | `xattr.rs` | getxattr, setxattr, listxattr, removexattr; file capabilities |
//! | `properties.rs` | the `user.squeezefs.*` properties of files and directories, rewrite |
//! | `background.rs` | the background pass's walk: targets, a file's extents a chunk at a time (`crate::background` governs it) |
//!
//! Each `do_x` returns a `Result` and sends nothing, so it can be called (and tested)
//! without a kernel; policy (what to compress, how to store) lives in the container crate.

mod allocate_seek;
mod attrs;
mod background;
mod behind;
mod closer;
mod dir_ops;
mod dispatch;
mod flags;
mod names;
mod open_create;
mod properties;
mod readdir;
mod relayout;
mod reply;
mod virtual_file;
mod xattr;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fuser::{Errno, INodeNo};
use log::error;
use squeezefs_container::{dicts, Options};

use crate::inode::{Inode, Inodes, PathFd};
use crate::lifecycle::Files;
use crate::prefetch::Prefetcher;
use crate::reclaim::Reclaimer;
use crate::sys;

/// Entry and attribute timeout: long, since this daemon is the only writer of the backing
/// directory (the kernel invalidates what its own changes affect).
const TTL: Duration = Duration::from_secs(60);

/// The filesystem as fuser drives it: the request handlers run on [`Core`], shared so that
/// a request that must wait for a store into the kernel's page cache (rule 11 of
/// `lifecycle::state`) can wait on a thread of its own instead of a session thread
/// (`dispatch.rs`, `deferred`).
pub struct SqueezeFs(Arc<Core>);

impl std::ops::Deref for SqueezeFs {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.0
    }
}

/// Who sent a request (what the handlers need of fuser's `Request`, which lives only as
/// long as the request's buffer): owned, so a request can be served on another thread.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Who {
    pid: u32,
    uid: u32,
    gid: u32,
}

impl Who {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn uid(&self) -> u32 {
        self.uid
    }
    fn gid(&self) -> u32 {
        self.gid
    }
}

impl From<&fuser::Request> for Who {
    fn from(r: &fuser::Request) -> Who {
        Who {
            pid: r.pid(),
            uid: r.uid(),
            gid: r.gid(),
        }
    }
}

/// Everything the handlers use (see [`SqueezeFs`]).
pub struct Core {
    inodes: Arc<Inodes>,
    /// Every regular file's container: opened, shared, written back, committed.
    files: Files,
    read_only: bool,
    /// Open directories (`readdir.rs`).
    dirs: Mutex<std::collections::HashMap<u64, readdir::DirHandle>>,
    prefetch: Prefetcher,
    next_fh: AtomicU64,
    /// The kernel opens files without asking (`FUSE_NO_OPEN_SUPPORT`, on read-only mounts:
    /// `dispatch.rs` `init`): no OPEN or RELEASE comes, READs carry no handle, and the
    /// statistics file is read through the page cache (`virtual_file.rs`).
    no_open: AtomicBool,
    /// LOOKUP misses answered from a directory's known names (`inode::known`).
    known_misses: AtomicU64,
    /// The backing filesystem's device, where its type matches names exactly (see
    /// [`Core::names_exact`]); `None`: no directory's names are ever learnt.
    exact_names_dev: Option<u64>,
    /// Whether a whole listing teaches a directory's names too (not only its MKDIR): not on
    /// GlusterFS, whose listing leaves out without an error the entries of a brick it cannot
    /// reach (they would then be missed from memory once the brick is back).
    names_from_listings: bool,
    /// Running as root: new files are given to the caller with chown.
    as_root: bool,
    /// The backing directory, for the statistics file.
    backing: String,
    /// `BACKING/.squeezefs-dicts`: the dictionaries (hidden from the mount).
    dict_dir: std::path::PathBuf,
    /// The virtual statistics file's open handles.
    stats: virtual_file::StatsFile,
    /// FUSE requests answered, by kind (the statistics file's `requests`).
    requests: crate::requests::Requests,
    /// Whether the backing filesystem is nearly full (a WRITE then defers nothing).
    space: crate::space::Space,
    /// Asks the kernel to write back or forget its caches, or to take pages (set once the
    /// session exists).
    notifier: Arc<OnceLock<fuser::Notifier>>,
    /// Whether extents a READ decoded go whole into the kernel's page cache, and counts.
    page_cache: crate::pagecache::PageCache,
    /// Kernel cache write-backs under way (`allocate_seek.rs`).
    kernel_flushes: AtomicUsize,
    /// Background pack reclaim (`reclaim.rs`), when this mount writes packs, and its thread.
    reclaimer: Option<Arc<Reclaimer>>,
    reclaim_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Spins on the session's channel while requests are coming (`spin.rs`; attached by
    /// the mount once the session exists).
    spin: Arc<crate::spin::Spin>,
    /// The background pass (`crate::background`): told of every change through the mount,
    /// and its thread (read-write mounts).
    background: Arc<crate::background::Pass>,
    /// Equal extents of large files made to share blocks by the pass's walk.
    dedupe: crate::dedupe::Dedupe,
    /// The mount's `rules=` (where no directory has rules of its own).
    rules: Option<Arc<crate::rules::Rules>>,
    background_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// New files named behind the caller (`crate::ns`; read-write mounts with
    /// `dirops=behind`), and its applier thread.
    ns: Option<Arc<crate::ns::Namespace>>,
    ns_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Last closes the spinning session thread hands on (`closer.rs`; read-write mounts).
    closer: closer::Closer,
    /// Files stored ahead of a reader walking a directory (`crate::siblings`; with
    /// `fill_cache`).
    siblings: crate::siblings::Siblings,
}

impl SqueezeFs {
    /// The filesystem over `backing` with container options `opts`, as `cfg` asks:
    /// `pack_gc`, how often background pack reclaim looks for work (0: never; a
    /// `user.squeezefs.reclaim` request on the root still runs a round); `fill_cache`, the
    /// rest of an extent a READ decoded goes to the kernel's page cache (rule 11 of
    /// `lifecycle::state`); `background`, the background pass's settings (it runs on
    /// read-write mounts where a target may be set: `crate::background`); `rules`;
    /// `dirops_behind` (`crate::ns`, sized to the open-file limit `fd_limit`).
    pub fn new(
        backing: &Path,
        opts: Options,
        cfg: &crate::MountConfig,
        fd_limit: u64,
    ) -> std::io::Result<SqueezeFs> {
        let read_only = cfg.read_only;
        let pack_gc = (cfg.pack_gc > 0).then(|| Duration::from_secs(cfg.pack_gc));
        let (fill_cache, rules) = (cfg.fill_cache, cfg.rules.clone());
        let dirops_behind = cfg.dirops_behind.then_some(fd_limit / 8);
        // Modes arrive already masked with the caller's umask; ours must not mask again.
        sys::set_umask(0);
        let (inodes, st) = Inodes::open(backing)?;
        let inodes = Arc::new(inodes);
        // Dictionaries: every file that used one needs it to be read.
        let (ids, refused) = dicts::load_all(&backing.join(dicts::DIR_NAME));
        if !ids.is_empty() {
            log::info!("{} zstd dictionaries loaded: {ids:?}", ids.len());
        }
        for why in refused {
            error!("dictionary refused (files compressed with it will read as EIO): {why}");
        }
        let root_type = sys::fs_type(&inodes.root_dir).ok();
        // XFS: write-outs make the backing file long enough first (its speculative
        // preallocation would strand blocks inside it: `Options::extend_first`).
        let mut opts = opts;
        opts.extend_first = root_type == Some(libc::XFS_SUPER_MAGIC);
        let files = Files::new(inodes.clone(), opts, read_only);
        let reclaimer = match &files.opts().packs {
            Some(p) if p.writable() && !read_only => Some(Arc::new(Reclaimer::new(
                p.clone(),
                std::fs::File::open(backing)?,
                files.kept(),
            ))),
            _ => None,
        };
        let reclaim_thread = match (&reclaimer, pack_gc) {
            (Some(r), Some(every)) => Some(r.start(every)?),
            _ => None,
        };
        let notifier: Arc<OnceLock<fuser::Notifier>> = Default::default();
        // A background property set through an earlier mount (`props::BACKGROUND_SEEN`).
        let seen = !read_only
            && sys::xattr_size(
                inodes.fd(&inodes.get(1).expect("the root"))?,
                &std::ffi::CString::new(crate::props::BACKGROUND_SEEN).expect("no NUL"),
            )
            .is_ok();
        let root_dev = inodes.get(1).map(|r| r.key.0);
        // Block sharing where the backing can (`crate::dedupe`): the pass then walks too.
        let dedupe_on = cfg.background.dedupe
            && !read_only
            && root_type.is_some_and(|t| crate::dedupe::SHARING_FILESYSTEMS.contains(&t));
        let background = Arc::new(crate::background::Pass::new(
            cfg.background.clone(),
            seen,
            dedupe_on,
        ));
        let local_exact = root_type.is_some_and(|t| names::EXACT_NAME_FILESYSTEMS.contains(&t));
        let fuse_exact = root_type == Some(names::FUSE_MAGIC)
            && root_dev.is_some_and(|dev| {
                let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
                crate::mountinfo::fstype_of_dev(&info, dev)
                    .is_some_and(|f| names::EXACT_NAME_FUSE.contains(&f.as_str()))
            });
        let exact_names_dev = root_dev.filter(|_| local_exact || fuse_exact);
        let names_from_listings = local_exact;
        // (Files an earlier daemon made ahead and never named are removed at every
        // read-write mount, whatever this one's `dirops=`.)
        let ns = match (read_only, dirops_behind) {
            (true, _) => None,
            (false, Some(fds)) => Some(Arc::new(crate::ns::Namespace::open(&inodes.root_dir, fds)?)),
            (false, None) => {
                crate::ns::pool::Pool::open(&inodes.root_dir)?;
                None
            }
        };
        let core = Arc::new(Core {
            files,
            inodes,
            read_only,
            dirs: Mutex::new(Default::default()),
            prefetch: Prefetcher::start()?,
            next_fh: AtomicU64::new(1),
            no_open: AtomicBool::new(false),
            known_misses: AtomicU64::new(0),
            exact_names_dev,
            names_from_listings,
            as_root: sys::euid() == 0,
            backing: backing.display().to_string(),
            dict_dir: backing.join(dicts::DIR_NAME),
            stats: virtual_file::StatsFile::new((st.st_uid, st.st_gid)),
            requests: Default::default(),
            space: Default::default(),
            page_cache: crate::pagecache::PageCache::new(fill_cache, notifier.clone())?,
            notifier,
            kernel_flushes: Default::default(),
            reclaimer,
            reclaim_thread: Mutex::new(reclaim_thread),
            spin: Default::default(),
            background: background.clone(),
            dedupe: crate::dedupe::Dedupe::new(dedupe_on),
            rules,
            background_thread: Mutex::new(None),
            ns,
            ns_thread: Mutex::new(None),
            closer: Default::default(),
            siblings: Default::default(),
        });
        if core.page_cache.enabled() {
            let load: std::sync::Weak<dyn crate::siblings::Load> = Arc::downgrade(&core) as _;
            core.siblings.start(load)?;
        }
        if !read_only {
            let serve: std::sync::Weak<dyn closer::Serve> = Arc::downgrade(&core) as _;
            core.closer.start(serve, closer::queue_for(fd_limit))?;
        }
        if let Some(ns) = &core.ns {
            let target: std::sync::Weak<dyn crate::ns::Target> = Arc::downgrade(&core) as _;
            *core.ns_thread.lock().unwrap() = Some(ns.start(target)?);
            if let Some(r) = &core.reclaimer {
                let ns = Arc::downgrade(ns);
                r.set_before_round(Box::new(move || {
                    if let Some(ns) = ns.upgrade() {
                        ns.drain();
                    }
                }));
            }
        }
        if !read_only {
            let walk: std::sync::Weak<dyn crate::background::Walk> = Arc::downgrade(&core) as _;
            *core.background_thread.lock().unwrap() = Some(background.start(walk)?);
        }
        Ok(SqueezeFs(core))
    }

    /// The shared core, for work handed to another thread.
    fn core(&self) -> Arc<Core> {
        self.0.clone()
    }
}

impl closer::Serve for Core {
    fn serve(&self, job: closer::Job) {
        // Counted done even should the release panic (the statistics file's commit would
        // otherwise wait its 2 s at every open).
        struct Done<'a>(&'a crate::lifecycle::Files);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.handed_release_done();
            }
        }
        let _done = Done(&self.files);
        // An error is logged and kept for the file's next fsync there (rule 10).
        let _ = self.files.release(job.ino, &job.inode, job.writable);
    }
}

impl crate::siblings::Load for Core {
    fn load_ahead(&self, key: crate::siblings::Key) {
        let Some((ino, inode)) = self.inodes.known_numbered(key) else {
            return;
        };
        if !inode.is_reg {
            return;
        }
        let spill = self
            .files
            .spill_ahead(ino, &inode, crate::siblings::FILE_BYTES, || {
                self.page_cache.may_store()
            });
        if let Some(spill) = spill {
            self.page_cache.send(INodeNo(ino), spill);
        }
    }
}

impl Core {
    /// Where the mount puts the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }

    /// The spin the mount attaches to the session's channel (`spin.rs`).
    pub fn spin_handle(&self) -> Arc<crate::spin::Spin> {
        self.spin.clone()
    }

    /// Whether inode fds are cached and reopened by handle (see `inode.rs`).
    pub fn uses_handles(&self) -> bool {
        self.inodes.uses_handles()
    }

    /// Sizes caches that hold fds to the open-file limit.
    pub fn fit_fd_limit(&self, limit: u64) {
        self.inodes.fit_fd_cache(limit);
        self.files.fit_fd_limit(limit);
    }

    /// Commits what waits, then writes out every file still open and makes it all durable
    /// (unmount).
    pub fn flush_all(&self) {
        // No more files stored ahead of a walk (a worker could open a container after the
        // final write-out).
        self.siblings.stop();
        // The last closes handed on first: they write files out.
        self.closer.finish();
        self.background.stop();
        if let Some(t) = self.background_thread.lock().unwrap().take() {
            let _ = t.join();
        }
        if let Some(r) = &self.reclaimer {
            r.stop();
        }
        if let Some(t) = self.reclaim_thread.lock().unwrap().take() {
            let _ = t.join();
        }
        // Every name applied before the files' final write-out and `syncfs`.
        if let Some(ns) = &self.ns {
            ns.shutdown(self.ns_thread.lock().unwrap().take());
        }
        self.files.flush_all();
    }

    fn opts(&self) -> &Options {
        self.files.opts()
    }

    fn inode(&self, ino: INodeNo) -> Result<Arc<Inode>, Errno> {
        self.inodes.get(ino.0).ok_or(Errno::ESTALE)
    }

    fn fd(&self, inode: &Arc<Inode>) -> Result<PathFd, Errno> {
        self.inodes.fd(inode).map_err(Errno::from)
    }

    /// A path for log lines: where the inode lives in the backing directory.
    fn describe(&self, inode: &Arc<Inode>) -> String {
        self.inodes.describe(inode)
    }

    fn check_writable(&self) -> Result<(), Errno> {
        if self.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }
}
