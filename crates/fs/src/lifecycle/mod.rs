//! The open-file lifecycle and the group commit, in one place: when a regular file's
//! container is opened, shared by its handles, kept after a lookup, written back, queued
//! for its superblock, committed, settled and dropped. The states and rules are written
//! once, with the lock order, where the state is declared ([`state`]); this module is the
//! only code that moves a file between them ([`Files`]), and [`commit`] is the group commit.
//!
//! The FUSE handlers never touch a container directly: they call [`Files::with_container`]
//! (run an operation on the shared container, or on a temporary one for a file nobody has
//! open), [`Files::change_data`] (the same for a change of the file's data), [`Files::attach`]
//! / [`Files::release`] (a handle comes and goes), [`Files::set_times`] (`utimens`, kept
//! over our later write-outs) and [`Files::size_and_times`] (what `stat` shows).

pub mod behind;
pub mod commit;
mod spill;
pub mod state;

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, Weak};

use fuser::Errno;
use log::{error, warn};
use squeezefs_container::{Container, FileStorage, Options, WriteBack};

use crate::inode::{Inode, Inodes};
use crate::readahead::{self, ReadAhead};
use crate::sys;
pub use behind::WriteBehind;
use commit::{keep_times, Committer, Ticketed};
pub use spill::Spill;
use state::{Closed, Meta, OpenFile, Times};

/// Most containers kept open without a handle after a lookup (fewer under a low
/// open-file limit: [`Files::fit_fd_limit`]).
pub const IDLE_MAX: usize = 128;

/// The lifecycle of every regular file's container (see [`state`] for the rules).
pub struct Files {
    inodes: Arc<Inodes>,
    committer: Arc<Committer>,
    commit_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    opts: Options,
    read_only: bool,
    /// Containers opened to answer a lookup, kept (no handle) so the `open` that usually
    /// follows need not open and parse them again; the oldest beyond [`IDLE_MAX`] close.
    idle: Arc<Kept>,
    /// RELEASEs under way ([`Files::releasing`]): [`Files::commit_now`] waits for them.
    releasing: std::sync::atomic::AtomicUsize,
    /// Loads extents ahead of sequential readers (`readahead.rs`).
    ahead: ReadAhead,
}

/// A RELEASE under way, counted while it lives.
pub struct Releasing<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The queue of kept containers (rule 6 of [`state`]).
pub struct Kept {
    inodes: Arc<Inodes>,
    queue: Mutex<VecDeque<(u64, Weak<Inode>)>>,
    /// How many are kept: [`IDLE_MAX`], or a sixteenth of the open-file limit if smaller
    /// (two fds each: the container's and its inode's).
    max: std::sync::atomic::AtomicUsize,
}

impl Kept {
    /// Closes the oldest kept containers until `keep` are left (those busy or no longer
    /// merely kept are skipped: rule 6).
    fn trim(&self, keep: usize) {
        let mut q = self.queue.lock().unwrap();
        let mut busy = VecDeque::new();
        while q.len() > keep {
            let Some((old_ino, w)) = q.pop_front() else { break };
            let Some(old) = w.upgrade() else { continue };
            let Ok(mut open) = old.file.open.try_lock() else {
                // Busy right now: look again next time.
                busy.push_back((old_ino, w));
                continue;
            };
            // Not one the group commit still has to settle (a closed file whose write-back
            // left an older copy): dropped here, it kept both copies until written again.
            if open.as_ref().is_some_and(|of| {
                of.handles == 0
                    && !of.container.commit_pending()
                    && !of.container.settle_pending()
                    && of.container.dirty_bytes() == 0
            }) {
                // What `stat` shows from now on (its kept times may have changed while
                // kept: the background pass, a change of metadata).
                if let Some(of) = open.as_ref() {
                    *old.file.size.lock().unwrap() = Closed::of(&of.container);
                }
                *open = None;
                drop(open);
                self.inodes.forget(old_ino, 0);
            } else if open.is_none() {
                // Dropped already (`Files::quiet` after a failed relayout switch).
                drop(open);
                self.inodes.forget(old_ino, 0);
            }
        }
        while let Some(b) = busy.pop_back() {
            q.push_front(b);
        }
    }

    /// Closes every kept container (a pack reclaim round: a kept container may hold a
    /// pack it has not read yet).
    pub fn close_all(&self) {
        self.trim(0);
    }
}

impl Files {
    pub fn new(inodes: Arc<Inodes>, opts: Options, read_only: bool) -> Files {
        let inodes_for_kept = inodes.clone();
        Files {
            inodes,
            committer: Committer::new(opts.packs.clone()),
            commit_thread: Mutex::new(None),
            opts,
            read_only,
            idle: Arc::new(Kept {
                inodes: inodes_for_kept,
                queue: Mutex::new(VecDeque::new()),
                max: std::sync::atomic::AtomicUsize::new(IDLE_MAX),
            }),
            releasing: Default::default(),
            ahead: ReadAhead::default(),
        }
    }

    /// The kept containers (for pack reclaim rounds, which close them first).
    pub fn kept(&self) -> Arc<Kept> {
        self.idle.clone()
    }

    /// The statistics file's `commit` object: superblocks the group commit wrote, and the
    /// syncs it issued.
    pub fn commit_json(&self) -> serde_json::Value {
        use std::sync::atomic::Ordering::Relaxed;
        serde_json::json!({
            "commits": self.committer.commits.load(Relaxed),
            "syncs": self.committer.syncs.load(Relaxed),
        })
    }

    /// The write-behind of dirty extents held too long, for the housekeeping thread.
    pub fn write_behind(&self) -> WriteBehind {
        WriteBehind {
            inodes: self.inodes.clone(),
            budget: self.opts.dirty.clone(),
            committer: self.committer.clone(),
        }
    }

    /// The container options this mount writes with.
    pub fn opts(&self) -> &Options {
        &self.opts
    }

    /// Starts the group commit's thread.
    pub fn start(&self) -> io::Result<()> {
        let (c, i) = (self.committer.clone(), self.inodes.clone());
        let t = std::thread::Builder::new()
            .name("squeezefs-commit".into())
            .spawn(move || c.run(&i))?;
        *self.commit_thread.lock().unwrap() = Some(t);
        self.ahead.start()
    }

    /// Sizes the commit batch to the open-file limit (a queued file holds one fd).
    /// Also the kept containers: each holds two fds too. Under a limit of 256: 64 cached
    /// inode fds (`Inodes::fit_fd_cache`), two commit batches of 16 files (64 fds) and 16
    /// kept containers (32 fds) leave room for packs, the log, `/dev/fuse` and the
    /// read-ahead (one fd per file whose extents are being loaded ahead).
    pub fn fit_fd_limit(&self, limit: u64) {
        self.committer.fit_fd_limit(limit);
        self.idle.max.store(
            ((limit / 16) as usize).clamp(8, IDLE_MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// A container error as an errno, logged with the backing file's path (corruption as
    /// an error, anything else as a warning).
    pub fn error(&self, inode: &Arc<Inode>, what: &str, e: squeezefs_container::Error) -> Errno {
        // Whatever failed, the kernel's cache of the file is no longer trusted (rule 8).
        inode.file.suspect_cache();
        if e.is_corruption() {
            error!("{}: {what}: {e}", self.inodes.describe(inode));
        } else {
            warn!("{}: {what}: {e}", self.inodes.describe(inode));
        }
        Errno::from_i32(e.errno())
    }

    /// Opens the file's container (read-write unless the mount or the file forbids it).
    pub fn open_container(&self, inode: &Arc<Inode>) -> Result<Container<FileStorage>, Errno> {
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
        }?;
        Container::open(FileStorage::new(file), &self.opts).map_err(|e| self.error(inode, "open", e))
    }

    /// Runs `f` on the file's container: the shared one in memory (rule 2 of [`state`]
    /// when nobody has it open), or a temporary one flushed and closed afterwards. `f` must
    /// not change the file's data (that is [`Files::change_data`]): times set explicitly
    /// are put back if it writes (rule 7).
    pub fn with_container<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        self.run(inode, Change::None, f, what)
    }

    /// [`Files::with_container`] for a change of the file's data (a write, a truncate, an
    /// fallocate): times set explicitly before it are forgotten (rule 7).
    pub fn change_data<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        self.run(inode, Change::Data, f, what)
    }

    fn run<T>(
        &self,
        inode: &Arc<Inode>,
        change: Change,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        let changes_data = !matches!(change, Change::None);
        let mut open = inode.file.open.lock().unwrap();
        if changes_data {
            // Rule 11. Returns at once: a writer's WRITE finds no store (none is taken while
            // a writer exists), and a truncate came through `hold_spills` first.
            open = self.wait_spills(inode, open);
        }
        if let Some(of) = open.as_mut() {
            if matches!(change, Change::Data) {
                of.times = of.times.forgotten(of.meta.is_set());
            } else if matches!(change, Change::KernelWrite) {
                // The kernel's mtime stays what it was until it sends another (rule 7):
                // the backing file's, pinned before our write-out can move it.
                if of.times.mtime.is_none() {
                    if let Ok(st) = sys::fstat(of.container.storage().file()) {
                        of.times.mtime = Some((st.st_mtime, st.st_mtime_nsec));
                    }
                }
            } else if of.meta_waits() {
                // Times, owner and mode waiting to go on the backing file go first: an
                // fsync then makes them durable with the rest (rule 7).
                self.keep_times(inode, of);
            }
            let r = f(&mut of.container).map_err(|e| self.error(inode, what, e));
            let mut queue = None;
            let mut flushed = Ok(());
            if r.is_ok() && of.handles == 0 && !of.container.commit_pending() {
                match of.container.write_back() {
                    Ok(WriteBack::Commit(t)) => {
                        of.container.drop_cache();
                        queue = Some(Ticketed::Commit(t));
                    }
                    // Replaced copies to remove after a sync: the group commit does it
                    // (kept containers are not closed while they wait: `Kept::trim`).
                    Ok(WriteBack::Settle(t)) => queue = Some(Ticketed::Settle(t)),
                    Ok(WriteBack::Done) => {}
                    Err(e) => flushed = Err(self.error(inode, "flush", e)),
                }
            }
            self.keep_times(inode, of);
            drop(open);
            if let (Some(t), Some(ino)) = (queue, self.inodes.number(inode)) {
                self.committer.push(ino, inode.clone(), t);
            }
            let r = r?;
            flushed?;
            return Ok(r);
        }
        drop(open);
        let _private = inode.file.private.read().unwrap();
        self.stateless(inode, f, what)
    }

    /// `f` on a container opened for it alone (the file has no state), flushed and dropped
    /// afterwards; what its superblock says then is remembered for `stat`, even after an
    /// error (the superblock may keep times by then). The caller holds
    /// `FileState::private`, shared or exclusive (the background pass also holds the
    /// file's lock, `open`, which this never takes).
    fn stateless<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        let mut c = self.open_container(inode)?;
        let r = f(&mut c)
            .and_then(|r| c.flush().map(|()| r))
            .map_err(|e| self.error(inode, what, e));
        *inode.file.size.lock().unwrap() = Closed::of(&c);
        r
    }

    /// The background pass's look at a file (`crate::background`): `f` on its container,
    /// read only, with the pass's exclusion (`FileState::private`) and the file's lock held,
    /// whether or not the file is in use. A file with no state gets a container for `f`
    /// alone.
    pub fn scan<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&Container<FileStorage>) -> T,
    ) -> Result<T, Errno> {
        let _private = inode.file.private.write().unwrap();
        let open = inode.file.open.lock().unwrap();
        if let Some(of) = open.as_ref() {
            return Ok(f(&of.container));
        }
        // (`open` stays held: no state appears beside this container.)
        self.stateless(inode, |c| Ok(f(c)), "look")
    }

    /// The background pass's access to a file (`crate::background`): `f` on its
    /// container while nobody else can use it, or `None`, doing nothing, when the file is
    /// in use: open (a writer, a reader, a lazy handle), holding bytes not written out, or
    /// with a commit or settle queued. No handle can come while `f` runs (attaching takes
    /// the file's lock), and no container of its own either (`FileState::private`). A file
    /// with no state gets a container for `f` alone, dropped after it.
    pub fn quiet<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<Option<T>, Errno> {
        let _private = inode.file.private.write().unwrap();
        let mut open = inode.file.open.lock().unwrap();
        if inode.file.lazy.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            return Ok(None);
        }
        if let Some(of) = open.as_mut() {
            let c = &of.container;
            if of.handles > 0 || c.dirty_bytes() > 0 || c.commit_pending() || c.settle_pending() {
                return Ok(None);
            }
            let r = f(&mut of.container).map_err(|e| self.error(inode, what, e));
            self.keep_times(inode, of);
            if of.container.needs_reopen() {
                // A relayout's switch failed half way: only the disk says which layout is
                // current. Nothing is held (no handle, nothing dirty or queued), so the
                // state goes and the next use opens the file again. What `stat` remembers
                // of the closed file goes too: it came from memory, or from before.
                *inode.file.size.lock().unwrap() = None;
                *open = None;
            }
            return r.map(Some);
        }
        // (`open` stays held: no state appears beside this container.)
        self.stateless(inode, f, what).map(Some)
    }

    /// A WRITE; with `write_out`, an open file's extents are written out at once, partial
    /// last one included, so that an error reaches this WRITE rather than the write-out at
    /// the last close, which nobody waits for (rule 10). A file with no handle is written
    /// back by [`Files::change_data`] anyway (rule 2).
    pub fn write(&self, inode: &Arc<Inode>, offset: u64, data: &[u8], write_out: bool) -> Result<(), Errno> {
        let change = if self.read_only {
            Change::Data
        } else {
            Change::KernelWrite
        };
        self.run(inode, change, |c| c.write(offset, data), "write")?;
        if !write_out {
            return Ok(());
        }
        let mut open = inode.file.open.lock().unwrap();
        let Some(of) = open.as_mut().filter(|of| of.handles > 0) else {
            return Ok(());
        };
        // A superblock this leaves pending is committed after the last close's write-back
        // (rule 1), which finds it.
        let written = of.container.write_back().map(|_| ());
        self.keep_times(inode, of);
        written.map_err(|e| self.error(inode, "write-out", e))
    }

    /// The file's logical size: from its container in memory, the remembered size, or a
    /// container opened now (and kept for the `open` that usually follows a lookup); and the
    /// times set explicitly that `stat` shows rather than the backing file's (rule 7: a
    /// write-out may have moved them a moment ago, and they go back on it right after).
    ///
    /// Also the owner and mode set on it that wait in memory (rule 7), which `stat` shows.
    ///
    /// The change and modification times are those the superblock keeps when it keeps
    /// some (background recompression moved the backing file's, `SB_FLAG_TIMES`).
    pub fn size_and_times(&self, ino: u64, inode: &Arc<Inode>) -> Result<(u64, Times, Meta), Errno> {
        if let Some(of) = inode.file.open.lock().unwrap().as_ref() {
            let s = of.container.size().map_err(|e| self.error(inode, "size", e))?;
            return Ok((s, of.times.over_kept(of.container.kept_times()), of.meta));
        }
        if let Some(c) = self.closed(inode) {
            return Ok((c.size, Times::default().over_kept(c.kept), Meta::default()));
        }
        let (s, kept) = self.with_kept(ino, inode, |c| Ok((c.size()?, c.kept_times())), "size")?;
        Ok((s, Times::default().over_kept(kept), Meta::default()))
    }

    /// Before a change through the mount that moves the backing file's ctime but not its
    /// data (an owner, mode, time, xattr or link count): times the superblock keeps go,
    /// so `stat` shows the backing file's again, with the kept modification time put on
    /// it. Costs nothing when the file is
    /// known to keep none (the usual case: a lookup came first).
    pub fn drop_kept_times(&self, inode: &Arc<Inode>) -> Result<(), Errno> {
        if !inode.is_reg {
            return Ok(());
        }
        // Looked at with the pass kept out (`FileState::private`): a chunk under way has
        // put what it kept in the state or the remembered `Closed` by then. (The pass
        // starts no chunk after the change that brings us here: `Pass::still`.)
        let known = {
            let _private = inode.file.private.read().unwrap();
            match inode.file.open.lock().unwrap().as_ref() {
                Some(of) => Some(of.container.kept_times().is_some()),
                None => self.closed(inode).map(|c| c.kept.is_some()),
            }
        };
        if known == Some(false) {
            return Ok(());
        }
        let mut opened = false;
        let r = self.with_container(
            inode,
            |c| {
                opened = true;
                let Some(kept) = c.kept_times() else { return Ok(()) };
                // The superblock (or location record) without them goes now, durably,
                // before the change the caller makes (a crash in between shows the
                // backing file's times, never kept ones beside the new metadata), and
                // nothing of ours moves the backing file's ctime after that change. The
                // modification time a superblock kept goes on the backing file: a change
                // of metadata is not one of data (a record keeps none).
                c.forget_kept_times()?;
                c.fsync()?;
                let Some((sec, nsec)) = kept.mtime else {
                    return Ok(());
                };
                let [omit, mtime] = Times {
                    mtime: Some((sec, i64::from(nsec))),
                    ..Times::default()
                }
                .timespecs();
                sys::utimens(c.storage().file(), omit, mtime)?;
                Ok(())
            },
            "kept times",
        );
        // A file whose container cannot be opened (damaged) keeps no times: its rename or
        // chmod must still work. Failing to drop times it does keep is an error.
        match r {
            Err(_) if known.is_none() && !opened => Ok(()),
            r => r,
        }
    }

    /// [`Files::drop_kept_times`] again after the change of metadata is made: a chunk of
    /// the background pass whose turn came between the first call and the change may have
    /// kept times from before it. Costs nothing when the file keeps none; an error is
    /// logged (the change itself is done).
    pub fn drop_kept_times_after(&self, inode: &Arc<Inode>) {
        let _ = self.drop_kept_times(inode);
    }

    /// What `stat` remembers of a closed file, unless a reclaim may have replaced its
    /// location record since ([`Closed::current`]).
    fn closed(&self, inode: &Inode) -> Option<Closed> {
        let moves = self.opts.packs.as_ref().map(|p| p.moves());
        Closed::current(*inode.file.size.lock().unwrap(), moves)
    }

    /// What a packed file takes on disk (`Container::packed_stored`), from its container
    /// in memory or what its closed one said; `None` when it is not packed.
    pub fn packed_stored(&self, ino: u64, inode: &Arc<Inode>) -> Result<Option<u64>, Errno> {
        if let Some(of) = inode.file.open.lock().unwrap().as_ref() {
            return Ok(of.container.packed_stored());
        }
        if let Some(c) = self.closed(inode) {
            return Ok(c.stored);
        }
        self.with_kept(ino, inode, |c| Ok(c.packed_stored()), "stored size")
    }

    /// `f` on a container opened now for a file with no state; its size is remembered and
    /// the container kept like a lookup's (rule 6) for the `open` or READ that follows.
    fn with_kept<T>(
        &self,
        ino: u64,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        // Until the container is a state (or dropped): what it knows of the halves must
        // not go stale under a background pass.
        let _private = inode.file.private.read().unwrap();
        let mut c = self.open_container(inode)?;
        let r = f(&mut c).map_err(|e| self.error(inode, what, e))?;
        *inode.file.size.lock().unwrap() = Closed::of(&c);
        self.keep_idle(ino, inode, c);
        Ok(r)
    }

    /// `utimens` on a regular file (`UTIME_OMIT`, `UTIME_NOW` or a time for each), and, if
    /// it has a state, the times it set remembered there to be kept over our write-outs
    /// (rule 7). Both under the file's lock, so no write-out comes in between.
    pub fn set_times(
        &self,
        inode: &Arc<Inode>,
        atime: libc::timespec,
        mtime: libc::timespec,
    ) -> Result<(), Errno> {
        {
            let mut open = inode.file.open.lock().unwrap();
            if let Some(of) = open.as_mut().filter(|of| of.writers > 0) {
                // A file being written (`tar` sets times, owner and mode before its close):
                // the times wait in memory, shown by `stat`, and go on the backing file at
                // the next of our calls on it, its last close or an fsync (rule 7), so the
                // caller does not wait for the backing filesystem.
                let now = wall_clock();
                let set = |t: libc::timespec| match t.tv_nsec {
                    libc::UTIME_OMIT => None,
                    libc::UTIME_NOW => Some(now),
                    _ => Some((t.tv_sec, t.tv_nsec)),
                };
                let (a, m) = (set(atime), set(mtime));
                if a.is_some() || m.is_some() {
                    of.times.atime = a.or(of.times.atime);
                    of.times.mtime = m.or(of.times.mtime);
                    of.times.ctime = Some(now);
                }
                return Ok(());
            }
        }
        let fd = self.inodes.fd(inode)?;
        let mut open = inode.file.open.lock().unwrap();
        sys::utimens(&fd, atime, mtime)?;
        let Some(of) = open.as_mut() else {
            return Ok(());
        };
        let now = [atime, mtime].iter().any(|t| t.tv_nsec == libc::UTIME_NOW);
        let st = if now { Some(sys::fstat(&fd)?) } else { None };
        let set = |t: libc::timespec, (sec, nsec): (i64, i64)| match t.tv_nsec {
            libc::UTIME_OMIT => None,
            libc::UTIME_NOW => Some((sec, nsec)),
            _ => Some((t.tv_sec, t.tv_nsec)),
        };
        let (a, m) = st.map_or(((0, 0), (0, 0)), |st| {
            ((st.st_atime, st.st_atime_nsec), (st.st_mtime, st.st_mtime_nsec))
        });
        of.times.atime = set(atime, a).or(of.times.atime);
        of.times.mtime = set(mtime, m).or(of.times.mtime);
        Ok(())
    }

    /// chmod and chown of a file being written (`tar -x` sets owner and mode before its
    /// close, `cp -p` too): they wait in memory with its times, shown by `stat`, and go on
    /// the backing file at the next of our calls on it, its last close (or its last
    /// writer's) or an fsync (rule 7), so the caller does not wait for the backing
    /// filesystem. Returns false, having done nothing, for what must be done now: a file
    /// with no writer, one that may have an access ACL (`no_acl` false: a chmod rewrites
    /// it), setuid or setgid bits to set, a chown that changes the owner or group (it may
    /// be refused, and clears those bits), a backing file the daemon may not change (not
    /// its own, without root) or that refuses changes (append-only, immutable), or one
    /// whose attributes cannot be read. What is left to wait for is only ever a chown to
    /// the owner the file has (whose effect is the change time) and plain permission bits.
    pub fn defer_meta(
        &self,
        inode: &Arc<Inode>,
        mode: Option<u32>,
        owner: (Option<u32>, Option<u32>),
        no_acl: bool,
        as_root: bool,
    ) -> Result<bool, Errno> {
        if !no_acl || mode.is_some_and(|m| m & (libc::S_ISUID | libc::S_ISGID) != 0) {
            return Ok(false);
        }
        let mut open = inode.file.open.lock().unwrap();
        let Some(of) = open.as_mut().filter(|of| of.writers > 0) else {
            return Ok(false);
        };
        let Ok((st_mode, st_uid, st_gid, fixed)) = sys::mode_owner_fixed(of.container.storage().file())
        else {
            return Ok(false);
        };
        if fixed || !(as_root || st_uid == sys::euid()) {
            return Ok(false);
        }
        let (now_mode, uid, gid) = of.meta.over_parts(st_mode, st_uid, st_gid);
        let chown = owner.0.is_some() || owner.1.is_some();
        if chown {
            let same = owner.0.is_none_or(|u| u == uid) && owner.1.is_none_or(|g| g == gid);
            if !same || now_mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
                return Ok(false);
            }
        }
        // Times kept for `stat` are no longer the file's (its next superblock has none; a
        // location record is written again without its change time now); the
        // modification time a superblock kept stays, put on the backing file with the
        // rest (rule 7).
        let kept = of.container.kept_times();
        if kept.is_some() && of.container.forget_kept_times().is_err() {
            // (A record that cannot be written again now: the change is made at once
            // instead, and `drop_kept_times` says why.)
            return Ok(false);
        }
        if chown {
            of.meta.owner = Some((uid, gid));
        }
        if let Some(m) = mode {
            of.meta.mode = Some(m & 0o7777);
        }
        of.times.ctime = Some(wall_clock());
        if let Some(mtime) = kept.and_then(|k| k.mtime) {
            of.times.mtime = of.times.mtime.or(Some((mtime.0, i64::from(mtime.1))));
        }
        Ok(true)
    }

    /// The owner, mode and times waiting in memory for `inode` go on the backing file now
    /// (before a change that must see them there: an xattr, an owner or mode done at once).
    pub fn apply_meta(&self, inode: &Arc<Inode>) {
        let mut open = inode.file.open.lock().unwrap();
        if let Some(of) = open.as_mut().filter(|of| of.meta_waits()) {
            self.keep_times(inode, of);
        }
    }

    /// Rule 7 after one of our calls on a file's container: an owner and mode waiting go on
    /// the backing file, and the times set explicitly go back on it if that call moved them
    /// (a failure is logged and kept for the next fsync: `commit::lost_meta`).
    pub fn keep_times(&self, inode: &Arc<Inode>, of: &mut OpenFile) {
        keep_times(&self.inodes, inode, of);
    }

    /// The extent size of a file whose container is in memory.
    pub fn extent_size(&self, inode: &Arc<Inode>) -> Option<u64> {
        let open = inode.file.open.lock().unwrap();
        open.as_ref().and_then(|of| of.container.extent_size())
    }

    /// Whether a handle open for writing exists (the kernel may hold unwritten data).
    pub fn has_writers(&self, inode: &Arc<Inode>) -> bool {
        let open = inode.file.open.lock().unwrap();
        open.as_ref().is_some_and(|of| of.writers > 0)
    }

    /// Keeps a container opened for a lookup, closing the oldest kept one beyond
    /// [`IDLE_MAX`] (unless it was opened or queued meanwhile: rule 6).
    fn keep_idle(&self, ino: u64, inode: &Arc<Inode>, c: Container<FileStorage>) {
        {
            let mut open = inode.file.open.lock().unwrap();
            if open.is_some() {
                return;
            }
            *open = Some(OpenFile::new(c, 0, 0));
        }
        self.idle
            .queue
            .lock()
            .unwrap()
            .push_back((ino, Arc::downgrade(inode)));
        self.idle
            .trim(self.idle.max.load(std::sync::atomic::Ordering::Relaxed));
    }

    /// A new handle on a regular file: shares the container in memory (opening it for the
    /// first handle), and truncates it for O_TRUNC.
    pub fn attach(&self, inode: &Arc<Inode>, truncate: bool, writable: bool) -> Result<(), Errno> {
        let mut open = inode.file.open.lock().unwrap();
        if writable || truncate {
            // A writer may change the kernel's pages: no store may be under way (rule 11).
            // Returns at once for the FUSE handlers, which came through `hold_spills`.
            open = self.wait_spills(inode, open);
        }
        let of = match open.as_mut() {
            Some(of) => {
                of.handles += 1;
                of
            }
            None => open.insert(OpenFile::new(self.open_container(inode)?, 1, 0)),
        };
        of.writers += u32::from(writable);
        if truncate {
            // A change of the data (rule 7).
            of.times = of.times.forgotten(of.meta.is_set());
            of.container
                .set_size(0)
                .map_err(|e| self.error(inode, "truncate", e))?;
        }
        Ok(())
    }

    /// A read-only handle on a file with no state: counted, nothing opened (rule 9).
    /// Returns false when the file has a state (the caller attaches instead).
    pub fn open_lazy(&self, inode: &Arc<Inode>) -> bool {
        let open = inode.file.open.lock().unwrap();
        if open.is_some() {
            return false;
        }
        inode.file.lazy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// The close of a handle [`Files::open_lazy`] made.
    pub fn release_lazy(&self, inode: &Arc<Inode>) {
        inode.file.lazy.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(of) = inode.file.open.lock().unwrap().as_mut() {
            readahead::finish(of);
        }
    }

    /// A READ on a mount with no OPEN (and so no RELEASE) ended at `end`: at the end of the
    /// file, its reader is taken as done, as a close would ([`Files::release_lazy`]): the
    /// extent cache the read-ahead grew goes back to its usual budget.
    pub fn read_to(&self, inode: &Arc<Inode>, end: u64) {
        if let Some(of) = inode.file.open.lock().unwrap().as_mut() {
            if of.container.size().is_ok_and(|size| end >= size) {
                readahead::finish(of);
            }
        }
    }

    /// A read: through the file's state, or, with none (a lazy handle's first READ, rule
    /// 9), through a container opened now and kept like a lookup's for the READs that
    /// follow. With the bytes, for a READ that does not continue a sequential stream (whose
    /// next extents the kernel asks for whole, and the read-ahead decodes ahead), the rest
    /// of its extent to hand the kernel (rule 11), when `may_spill` (memory) allows.
    pub fn read(
        &self,
        ino: u64,
        inode: &Arc<Inode>,
        offset: u64,
        size: usize,
        may_spill: impl FnOnce() -> bool,
    ) -> Result<(Vec<u8>, Option<Spill>), Errno> {
        let open = inode.file.open.lock().unwrap();
        let (data, streamed) = if open.is_some() {
            let open = self.ahead.wait_for(inode, open, offset, size);
            drop(open);
            let data = self.with_container(inode, |c| c.read(offset, size), "read")?;
            (data, true)
        } else {
            drop(open);
            let data = self.with_kept(ino, inode, |c| c.read(offset, size), "read")?;
            (data, false)
        };
        let mut open = inode.file.open.lock().unwrap();
        let spill = open.as_mut().and_then(|of| {
            let sequential = of.stream.continues(offset, data.len() as u64);
            if streamed {
                self.ahead.after_read(inode, of, offset, data.len());
            }
            (!sequential).then(|| self.spill(inode, of, offset, data.len(), may_spill))?
        });
        Ok((data, spill))
    }

    /// The first handle of a file just created, with the container made for it (nothing
    /// read back); a handle racing in meanwhile keeps the container it opened.
    pub fn attach_new(&self, inode: &Arc<Inode>, container: Container<FileStorage>) {
        let mut open = inode.file.open.lock().unwrap();
        match open.as_mut() {
            Some(of) => {
                of.handles += 1;
                of.writers += 1;
            }
            None => *open = Some(OpenFile::new(container, 1, 1)),
        }
    }

    /// A handle goes (rule 1 of [`state`] for the last one).
    pub fn release(&self, ino: u64, inode: &Arc<Inode>, writable: bool) -> Result<(), Errno> {
        let mut open = inode.file.open.lock().unwrap();
        let Some(of) = open.as_mut() else {
            return Ok(());
        };
        of.handles -= 1;
        if writable {
            of.writers = of.writers.saturating_sub(1);
        }
        if of.handles > 0 {
            // Owner and mode wait only while the file has a writer (rule 7).
            if of.writers == 0 && of.meta.is_set() {
                self.keep_times(inode, of);
            }
            return Ok(());
        }
        // Owner and mode waiting (rule 7) first, before the write-back: measured, a
        // `tar -x` then sends no SETATTR of the kernel's own mtime for the next file, which it
        // sent for nearly every file when they went on after the write-back (the backing
        // changes of this RELEASE, which nobody waits for, then overlap that file's create
        // and first write, and its write finds the clock moved: docs/BENCHMARKS.md).
        if let Err(e) = of.apply_meta() {
            commit::lost_meta(&self.inodes, inode, &e);
        }
        let written = of.container.write_back().map(Ticketed::from);
        self.keep_times(inode, of);
        match written {
            // A superblock to commit, or old copies to remove once a sync covers what
            // replaced them (a rewritten small file's older superblock copy): the group
            // commit does both.
            Ok(Some(left)) => {
                of.container.drop_cache();
                drop(open);
                self.committer.push(ino, inode.clone(), left);
                Ok(())
            }
            res => {
                *inode.file.size.lock().unwrap() = Closed::of(&of.container);
                *open = None;
                // RELEASE's answer reaches nobody: the error waits for the next fsync
                // (rule 10).
                res.map(|_| ()).map_err(|e| {
                    let errno = self.error(inode, "write-out at the last close", e);
                    inode.file.lost_write(errno.code());
                    errno
                })
            }
        }
    }

    /// Counts a RELEASE from the moment its request is dispatched until it is answered.
    pub fn releasing(&self) -> Releasing<'_> {
        self.releasing.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Releasing(&self.releasing)
    }

    /// Commits every queued file now, in the calling thread (before the statistics file
    /// is rendered, so it sees every closed file as closed). The kernel sends RELEASE
    /// without waiting (rule 10), so a file closed just before may still be in its
    /// write-out on another thread: a RELEASE read from the queue before this request is
    /// waited for (at most 2 s) so it is committed with the rest. RELEASE is a background
    /// request, so one the kernel still holds (its background queue full) can arrive after
    /// this request: that file is committed by the next batch, within [`commit::INTERVAL`].
    pub fn commit_now(&self) {
        let start = std::time::Instant::now();
        while self.releasing.load(std::sync::atomic::Ordering::Acquire) > 0
            && start.elapsed() < std::time::Duration::from_secs(2)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.committer.commit_now(&self.inodes);
    }

    /// Unmount (rule 5): commits what waits, then writes out every file still in memory
    /// and makes it all durable.
    pub fn flush_all(&self) {
        self.committer.stop();
        if let Some(t) = self.commit_thread.lock().unwrap().take() {
            let _ = t.join();
        }
        for inode in self.inodes.all() {
            if let Some(of) = inode.file.open.lock().unwrap().as_mut() {
                if let Err(e) = of.container.fsync() {
                    error!("{}: flush at unmount failed: {e}", self.inodes.describe(&inode));
                }
                self.keep_times(&inode, of);
            }
        }
        if let Err(e) = self.inodes.syncfs() {
            error!("syncfs of the backing filesystem at unmount failed: {e}");
        }
    }
}

/// What a call on a file's container changes, for its times (rule 7).
#[derive(Clone, Copy)]
enum Change {
    /// Nothing: times set and not on the backing file yet go on it first.
    None,
    /// The data (a truncate, an fallocate): times set explicitly are forgotten.
    Data,
    /// The data, by a WRITE of the kernel's writeback cache: the kernel keeps the file's
    /// mtime and sends a new one (SETATTR) whenever its own moved, so the times are kept,
    /// the backing file's mtime pinned when none is set.
    KernelWrite,
}

/// Now, as the backing filesystem's times are: seconds and nanoseconds since the epoch.
fn wall_clock() -> (i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, i64::from(d.subsec_nanos()))
}

#[cfg(test)]
mod tests;
