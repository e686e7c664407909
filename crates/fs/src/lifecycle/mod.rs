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
//!
//! One concept a file: this one holds [`Files`] itself and its mount-wide calls (start,
//! limits, errors, opening a container, the commit on demand, unmount); `kept.rs` the
//! containers kept after a lookup; `access.rs` how an operation reaches a file's
//! container; `read_write.rs` READ and WRITE; `handles.rs` handles coming and going;
//! `attrs.rs` what `stat` shows; `meta.rs` times, owner and mode set through the mount.

mod access;
mod attrs;
pub mod behind;
pub mod commit;
mod copy;
mod handles;
mod kept;
mod meta;
mod read_write;
mod spill;
pub mod state;

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

use fuser::Errno;
use log::{error, warn};
use squeezefs_container::{Container, FileStorage, Options};

use crate::inode::{Inode, Inodes};
use crate::readahead::ReadAhead;
pub use behind::WriteBehind;
use commit::Committer;
pub use kept::{Kept, IDLE_MAX};
pub use meta::Deferred;
pub use read_write::WriteLater;
pub use spill::Spill;

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
    /// Batches being compressed after their WRITE's answer, on the whole mount
    /// (`read_write.rs`): at most one per core, each holding its extents' buffers.
    batches: Arc<std::sync::atomic::AtomicUsize>,
}

/// A RELEASE under way, counted while it lives.
pub struct Releasing<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
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
            batches: Default::default(),
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
    ///
    /// A file whose mode keeps a daemon without root from writing (0444: git objects,
    /// `cp -p`) is opened read-only, and for writing only when something is written
    /// ([`FileStorage::writable_later`]): opening it for writing takes a chmod and back,
    /// and a `stat` or a read must not move its ctime.
    pub fn open_container(&self, inode: &Arc<Inode>) -> Result<Container<FileStorage>, Errno> {
        let storage = if self.read_only {
            FileStorage::new(self.inodes.reopen(inode, libc::O_RDONLY)?)
        } else {
            match self.inodes.reopen_with(inode, libc::O_RDWR, false) {
                Ok(f) => FileStorage::new(f),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM)) => {
                    let s = FileStorage::new(self.inodes.reopen(inode, libc::O_RDONLY)?);
                    // Only the mode refused: the owner may write it later.
                    match e.raw_os_error() {
                        Some(libc::EACCES) => s.writable_later(),
                        _ => s,
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        Container::open(storage.with_identity(inode.key), &self.opts)
            .map_err(|e| self.error(inode, "open", e))
    }

    /// Counts a RELEASE from the moment its request is dispatched until it is answered.
    pub fn releasing(&self) -> Releasing<'_> {
        self.releasing.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Releasing(&self.releasing)
    }

    /// A RELEASE handed to another thread (`ops/closer.rs`): under way, for
    /// [`Files::commit_now`], until [`Files::handed_release_done`].
    pub fn handed_release(&self) {
        self.releasing.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// The other thread served a RELEASE [`Files::handed_release`] counted.
    pub fn handed_release_done(&self) {
        self.releasing.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
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
                    // (Records may not be durable: the unmount walks, not the counters.)
                    self.note_pack_garbage();
                }
                self.keep_times(&inode, of);
            }
        }
        if let Err(e) = self.inodes.syncfs() {
            error!("syncfs of the backing filesystem at unmount failed: {e}");
            self.note_pack_garbage();
        }
    }

    /// Something may have left bytes in a pack that no record names (a file removed, a
    /// name behind that could not be applied, a write-out or sync at unmount that failed):
    /// the unmount walks the tree for garbage rather than trusting the counters
    /// (`Packs::note_garbage`, `pack::clean`).
    pub(crate) fn note_pack_garbage(&self) {
        if let Some(p) = &self.opts.packs {
            p.note_garbage();
        }
    }
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod tests;
