//! The state of a regular file's container, as every inode carries it, and the rules that
//! govern it. Declared here, apart from the code that drives it (`lifecycle`, and
//! `readahead` for an open file's [`Stream`]), so the inode table can hold it without
//! depending on either (no module cycle).
//!
//! # The states (of [`FileState::open`])
//! - **Closed** — `None`. No container in memory; the logical size may be remembered in
//!   [`FileSlot::closed`] (this daemon is the only writer of the backing file).
//! - **Kept after a lookup** — `Some`, no handle, clean, not queued. Opened to answer a
//!   lookup's size and kept so the `open` that usually follows need not parse it again;
//!   at most `lifecycle::IDLE_MAX` are kept, the oldest clean one dropped first.
//! - **Open** — `Some`, `handles > 0`. All handles share this one container; `writers`
//!   counts the handles open for writing (while there are any, the kernel's writeback cache
//!   may hold data the container has not seen yet).
//! - **Queued** — `Some`, no handle, in the group commit's queue: written back at its last
//!   close, its superblock (or the removal of the copies it replaced) waits for the next
//!   group commit; the cache is emptied, the fd kept.
//!
//! # The rules (each implemented once, in `lifecycle`)
//! 1. **Last close** (`release`): the container is written back. If that leaves a ticket
//!    (a superblock to commit, or old copies to remove after a sync), the file is queued;
//!    otherwise its state is dropped and its size remembered. Errors reach `close`.
//! 2. **A change with no handle open** (a property set on a kept or queued file, an
//!    `lseek`, a `fallocate` through a path): written back at once like a close, and queued
//!    if a ticket is left — unless a superblock is already pending, which the queued commit
//!    will see is stale and redo.
//! 3. **Group commit** (`lifecycle::commit`): one `syncfs` makes a batch's extents
//!    durable; each file's pending superblock is then written (a file changed since its
//!    write-back is written back again and requeued); a second `syncfs` makes the
//!    superblocks durable, after which each file settles (older copies punched). A file
//!    with no handle left is dropped after its turn.
//! 4. **fsync**: everything written and synced at once, no ticket left behind.
//! 5. **Unmount**: the queue is committed, every container still in memory is fsynced,
//!    then the backing filesystem is synced.
//! 6. A kept container is dropped only when clean, unqueued and without a handle; a
//!    queued one only by the group commit.
//! 7. **Times** ([`OpenFile::times`]). A file's mtime moves when its user changes its data
//!    (write, truncate, fallocate) and a time set explicitly (`utimens`, as `tar -x` and
//!    `cp -p` do, or the kernel's own mtime sent with its writeback cache) stays until the
//!    next such change — never moved by the daemon's own write-outs. But the backing file's
//!    mtime moves at each of those (the write-back at flush or last close, the superblock or
//!    location record a group commit writes, the settle that punches replaced copies, the
//!    fsync at unmount), which may come after the `utimens`. So while the file has a state
//!    here, a time set explicitly is also remembered in it (`Files::set_times`, under the
//!    same lock as the `utimens`), put back on the backing file after any of our calls that
//!    moved its mtime (`FileStorage::take_modified`; one `utimensat`, no sync), and shown by
//!    `stat` even in between. A change of the data forgets it (`Files::change_data`,
//!    `Files::attach` with `O_TRUNC`). Without a state nothing is deferred: the `utimens`
//!    alone sticks. On a file with a writer (`tar -x` sets times before its close) the
//!    `utimens` itself waits: the times are remembered with the moment they were set
//!    (`Times::ctime`, the change time `stat` shows), and go on the backing file at the next
//!    of our calls on it, at its last close (RELEASE, which nobody waits for) or at an
//!    fsync (`OpenFile::keep_times`), so the caller does not wait for the backing
//!    filesystem. Not fsync'ed, they may be lost in a crash, like the data written with
//!    them. An owner and mode set on a file with a writer wait the same way
//!    ([`OpenFile::meta`], `Files::defer_meta`), where waiting cannot change the outcome
//!    (plain permission bits on a file without an access ACL, a chown to the owner it has);
//!    anything else first puts what waits on the backing file (`Files::apply_meta`).
//! 8. **The kernel's page cache is kept across opens** (`FOPEN_KEEP_CACHE`): this daemon is
//!    the only writer of the backing directory, and the kernel itself drops the pages its
//!    own truncates, punches and writes change; compression, rewrites (`squeezefs
//!    compress`) and pack reclaim never change a file's logical bytes. Only an error of
//!    ours can leave the cache holding bytes the file does not (a WRITE accepted, its
//!    write-out or commit failed): any error on the file (`Files::error`, the group
//!    commit's) marks it ([`FileState::suspect_cache`]), and its next open answers without
//!    `FOPEN_KEEP_CACHE`, so the kernel drops the pages then.
//! 9. **A read-only open of a file with no state opens nothing** (`Files::open_lazy`): the
//!    handle is counted in [`FileSlot::lazy`], not in a state, so a re-read the page
//!    cache serves costs no container at all. Its first READ opens the container and keeps
//!    it like a lookup's (**Kept**, bounded); its FLUSH and RELEASE do nothing. While a
//!    lazy handle exists the inode's fd stays open, so a file unlinked while open still
//!    reads. Any other open (a writer, O_TRUNC, or a file that has a state) attaches.
//!
//! 10. **`close` does not wait for the write-out** (FLUSH is answered ENOSYS once, which
//!     turns it off for the mount): the last close's write-out (rule 1) runs at RELEASE,
//!     which the kernel sends without waiting. `close` still reports the errors of the
//!     WRITEs the kernel sends for its dirty pages before it returns; what it no longer
//!     reports is a failure to write a batch of extents those WRITEs filled (compressed
//!     and written after the answer of the WRITE that filled the last of them,
//!     `container/batch.rs`), the last, partial extent, or the group commit. Those are logged with the file's name,
//!     kept ([`FileState::take_unreported`]) and returned by the file's next `fsync` — as a
//!     kernel filesystem reports a failed writeback of its page cache. So that a full
//!     backing filesystem still fails the `close` (or the `write`) of the file that did
//!     not fit, a WRITE writes its extents out at once, partial one included, while the
//!     backing filesystem has less than `LOW_SPACE` free (`space::Space`). The statistics
//!     file's open, which commits every closed file, first waits for RELEASEs under way
//!     (`Files::commit_now`).
//!
//! 11. **A READ that decoded an extent hands the kernel the rest of it** (`lifecycle::spill`,
//!     `FUSE_NOTIFY_STORE`, mount option `fill_cache`): a random reader then finds the
//!     extent's other pages cached, as on btrfs. The kernel copies a store over whatever its
//!     pages hold, so a store is only taken from a file with no handle open for writing
//!     (only a writer's handle lets the kernel hold bytes we have not seen: the writeback
//!     cache writes every dirty page back before its RELEASE), whose cache is trusted
//!     (rule 8), under the file's lock, and until it is sent no change of the data and no
//!     new writer proceeds ([`FileState::spilling`]). It is sent after the READ's reply,
//!     by a thread of its own (`pagecache.rs`), leaving out the READ's own pages (locked by
//!     the kernel until the reply), and only while memory is not short. The kernel may hold
//!     a page of the extent locked for another READ still queued, which only a session
//!     thread can answer: so a session thread never waits for a store. A request that
//!     would (an open for writing, O_TRUNC, a truncate by path) first holds further stores
//!     off ([`FileState::holds`]) and, if one is under way, is served on a thread of its
//!     own that waits for it (`ops/dispatch.rs`, `defer`).
//!
//! 12. **Write-behind** (`lifecycle::behind`): the partial extents a file with handles holds
//!     in memory (the mount's dirty budget, `max_dirty=`) are written out by the
//!     housekeeping thread once they are `dirty_expire=` old, and the file is queued for
//!     the group commit (rule 3), which leaves it open (it has handles). Like any of our
//!     write-outs it moves the backing file's mtime (rule 7: the times go back on it) and
//!     its errors wait for the next fsync (rule 10). It takes the file's lock with
//!     `try_lock` only (it never waits for a request) and queues the file once it has let
//!     the lock go, as a last close does.
//!
//! # Lock order
//! [`FileState::share`] (shared by a container of the file's own, exclusive by the
//! background pass; made of `open` and `changed`, so taken and given back without `open`
//! held) → `lifecycle::Files::idle` → the inode table (`Inodes::forget` takes it, then
//! looks at [`FileState::open`]) → [`FileState::open`], which also guards what `stat`
//! remembers of a closed file ([`FileSlot::closed`]: a `stat` of a file the pass is
//! rewriting waits for one step, as an open does). So `Inodes::forget` is never called
//! with `open` held (drop it first, as `lifecycle::commit` does). The fd
//! cache's queue and `Files::idle` look at another inode's `open` only with `try_lock`.
//! Two files' `open` at once only for a copy between them (`lifecycle/copy.rs`), in the
//! order of their inodes' addresses, nothing else held.
//! The group commit's queue lock is held alone. The read-ahead queue is sent to with `open`
//! held (never blocking: a full queue drops the plan); its workers take `open` alone, after
//! their read, and a READ waiting for one releases `open` while it waits.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, Weak};

use squeezefs_container::StatTimes;
use squeezefs_container::{Container, FileStorage};

use crate::sys;

/// The state all handles of one open (or kept, or queued) regular file share.
pub struct OpenFile {
    pub container: Container<FileStorage>,
    pub handles: u32,
    /// Handles open for writing. While there are any, the kernel's page cache may hold
    /// written data the container has not seen yet (writeback cache).
    pub writers: u32,
    /// Times set explicitly since the last change of the data, kept over our write-outs
    /// (rule 7).
    pub times: Times,
    /// Owner and mode set on the file while it has a writer, not on the backing file yet
    /// (rule 7).
    pub meta: Meta,
    /// Where its sequential reader is, for the read-ahead (`readahead.rs`).
    pub stream: Stream,
    /// Batches of its extents being compressed after their WRITE was answered
    /// (`lifecycle/read_write.rs`); the last close waits for them (`handles.rs`).
    pub batches: u32,
}

impl OpenFile {
    /// Rule 7 for a change the kernel made (a WRITE, a copy): the kernel's mtime stays what
    /// it was until it sends another, so the backing file's is pinned before our write-out
    /// can move it.
    pub fn pin_kernel_mtime(&mut self) {
        if self.times.mtime.is_none() {
            if let Ok(st) = crate::sys::fstat(self.container.storage().file()) {
                self.times.mtime = Some((st.st_mtime, st.st_mtime_nsec));
            }
        }
    }
}

/// Access and modification times set explicitly (`None`: not set, left as they are).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Times {
    pub atime: Option<(i64, i64)>,
    pub mtime: Option<(i64, i64)>,
    /// `Some` while the times above are not on the backing file yet: set on a file with a
    /// writer, they wait for the next of our calls on it, its last close or an fsync
    /// (rule 7). The change time `stat` shows meanwhile (the moment they were set).
    pub ctime: Option<(i64, i64)>,
}

impl Times {
    pub fn is_set(&self) -> bool {
        self.atime.is_some() || self.mtime.is_some()
    }

    /// After a change of the data: the times set are forgotten, but the change time shown
    /// stays while an owner or mode still waits (`keep_meta`).
    pub fn forgotten(&self, keep_meta: bool) -> Times {
        Times {
            ctime: self.ctime.filter(|_| keep_meta),
            ..Times::default()
        }
    }

    /// As `utimensat` takes them (`UTIME_OMIT` for a time not set).
    pub fn timespecs(&self) -> [libc::timespec; 2] {
        let ts = |t: Option<(i64, i64)>| match t {
            Some((sec, nsec)) => libc::timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            },
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        };
        [ts(self.atime), ts(self.mtime)]
    }
}

/// An owner and a mode set through the mount on a file with a writer, waiting in memory
/// like its times (rule 7): applied to the backing file chown first, then chmod, whatever
/// order they came in (the same result: the chown that waits names the owner the file has,
/// on a file without setuid or setgid bits, and the mode has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The owner and group to give (only ever the ones the file already has: the chown
    /// waits only for what it does besides, the change time).
    pub owner: Option<(u32, u32)>,
    /// The permission bits to set (never setuid or setgid).
    pub mode: Option<u32>,
    /// The backing file's permission bits as read when the last change was deferred. A
    /// waiting mode equal to them changes only the change time. Nothing makes them stale
    /// that matters: a chmod or chown made at once, an xattr or ACL change, put what waits
    /// on the backing file first; the one change that does not (`ops/attrs.rs`
    /// `clear_mode_bits`: setuid/setgid dropped after a write, truncate or ACL change) only
    /// takes bits away that a waiting mode never has, so a `backing_mode` read before it
    /// still differs from any waiting mode where the file differs.
    pub backing_mode: Option<u32>,
}

impl Meta {
    pub fn is_set(&self) -> bool {
        self.owner.is_some() || self.mode.is_some()
    }

    /// `st`'s mode, owner and group as they are once this is applied.
    pub fn over(&self, st: &libc::stat) -> (u32, u32, u32) {
        self.over_parts(st.st_mode, st.st_uid, st.st_gid)
    }

    /// [`Meta::over`] for a mode, owner and group read some other way (`statx`).
    pub fn over_parts(&self, st_mode: u32, uid: u32, gid: u32) -> (u32, u32, u32) {
        let mode = match self.mode {
            Some(m) => (st_mode & libc::S_IFMT) | m,
            None => st_mode,
        };
        let (uid, gid) = self.owner.unwrap_or((uid, gid));
        (mode, uid, gid)
    }
}

impl OpenFile {
    /// Whether an owner, mode or change time waits in memory to go on the backing file.
    pub fn meta_waits(&self) -> bool {
        self.times.ctime.is_some() || self.meta.is_set()
    }

    /// A new state, with no time set (boxed: see [`FileState::open`]).
    pub fn new(container: Container<FileStorage>, handles: u32, writers: u32) -> Box<OpenFile> {
        Box::new(OpenFile {
            container,
            handles,
            writers,
            times: Times::default(),
            meta: Meta::default(),
            stream: Stream::default(),
            batches: 0,
        })
    }

    /// Rule 7, after each of our calls on the container: an owner and mode waiting go on
    /// the backing file; if the call moved the backing file's mtime, or times set
    /// meanwhile wait to go on it, the times set explicitly go on the file.
    pub fn keep_times(&mut self) -> io::Result<()> {
        let moved = self.container.storage().take_modified();
        let waiting = self.times.ctime.is_some();
        // A change of metadata waiting here is one of the file's: a change time a pack
        // reclaim kept in the record since it was made (the record was current, the
        // change only in memory) is no longer the file's. Dropped before the change goes
        // on the backing file and again after it (a round may replace the record in
        // between, keeping the ctime from before).
        let mut forgot = if waiting {
            self.container.forget_kept_times()
        } else {
            Ok(())
        };
        let meta = self.apply_meta();
        let file = self.container.storage().file();
        if (moved || waiting) && self.times.is_set() {
            let [a, m] = self.times.timespecs();
            sys::utimens(file, a, m)?;
        }
        if waiting {
            forgot = forgot.and(self.container.forget_kept_times());
        }
        self.times.ctime = None;
        meta.and(forgot.map_err(|e| io::Error::from_raw_os_error(e.errno())))
    }
}

impl OpenFile {
    /// The owner and mode waiting in memory (rule 7) go on the backing file: chown, then
    /// chmod.
    /// Both are tried whatever the first did; the first error is returned.
    ///
    /// A call whose only effect is the change time is left out when times set through
    /// the mount wait too: both callers ([`OpenFile::keep_times`], a last close) put them
    /// on the backing file right after, which moves its change time the same. That is the
    /// waiting chown (it only ever names the owner the file has) and a chmod to the mode
    /// the file has — `tar -x`'s fchown and fchmod of every file, one setattr each on the
    /// backing: on a network backing each a round trip (on GlusterFS replica 2, a
    /// transaction with locks on both bricks). (On the last close the write-out comes in
    /// between; should the `utimensat` fail, the change time it would have moved is what is
    /// lost, logged and kept for the next fsync as the times are.)
    pub fn apply_meta(&mut self) -> io::Result<()> {
        let meta = std::mem::take(&mut self.meta);
        let times_follow = self.times.ctime.is_some() && self.times.is_set();
        let file = self.container.storage().file();
        let owned = match meta.owner {
            Some((uid, gid)) if !times_follow => sys::chown(file, Some(uid), Some(gid)),
            _ => Ok(()),
        };
        let moded = match meta.mode {
            Some(mode) if !(times_follow && meta.backing_mode == Some(mode)) => sys::fchmod(file, mode),
            _ => Ok(()),
        };
        owned.and(moded)
    }
}

/// Where an open file's reader is (per [`OpenFile`]). Declared here with the rest of the
/// file's state; the read-ahead (`readahead.rs`) is the only code that reads or moves it.
#[derive(Debug, Default)]
pub struct Stream {
    /// Where the last READ ended.
    pub(crate) next: u64,
    /// Byte offset up to which extents were planned.
    pub(crate) planned_to: u64,
    /// The extent cache was grown for this stream ([`Container::reserve_ahead`]).
    pub(crate) reserved: bool,
    /// The descriptor its jobs in flight share (gone with the last of them).
    pub(crate) reader: Weak<FileStorage>,
    /// Extents queued or being loaded: the job's number and the bytes the extent holds.
    pub(crate) in_flight: Vec<(u64, u64, u64)>,
}

/// A regular file's lifecycle state, in its inode. Every inode the kernel remembers has
/// one, so it holds one lock (`open`, which guards a [`FileSlot`]) and a few counters: 72
/// bytes (`inode::node::tests::an_inode_stays_small`).
#[derive(Default)]
pub struct FileState {
    /// The file's lock: its open state, what a closed container said of itself, its lazy
    /// handles, and the counts of [`FileState::share`] and [`FileState::exclusive`].
    pub open: Mutex<FileSlot>,
    /// Two things an error of ours leaves, in one word ([`FileState::lost_write`]):
    /// * the errno no caller has been told of (rule 10; the low bits, 0 for none): a
    ///   write-out at the last close or a group commit failed after `close` had returned.
    ///   The next `fsync` reports it and forgets it ([`FileState::take_unreported`]);
    /// * [`SUSPECT`]: the kernel's page cache may hold bytes the file does not (data
    ///   accepted by a WRITE whose write-out or commit then failed): the next open lets the
    ///   kernel drop the cache instead of keeping it (FOPEN_KEEP_CACHE, rule 8).
    errors: std::sync::atomic::AtomicU32,
    /// Notified (with `open`'s lock) when an extent loaded ahead is cached or given up (a
    /// READ that wants it waits for it rather than loading it a second time:
    /// `readahead.rs`), when a store into the page cache ends (`spilling`), when a
    /// [`Private`] ends, and when a batch compressed after its WRITE's answer ends
    /// (`read_write.rs`, `WriteLater`). One for all (each waiter checks what it waits for).
    pub changed: std::sync::Condvar,
    /// Stores of this file's bytes into the kernel's page cache under way (rule 11): a
    /// change of its data and a new writer wait (on `changed`, with `open`'s lock) until
    /// none is left.
    pub spilling: std::sync::atomic::AtomicU32,
    /// Requests about to change the data or open a writer (`Files::hold_spills`): while
    /// any holds, no store starts (rule 11).
    pub holds: std::sync::atomic::AtomicU32,
}

/// What the file's lock guards. It derefs to the open state (`None`: no container in
/// memory), as the lock guarded that alone before.
#[derive(Default)]
pub struct FileSlot {
    /// Boxed: few remembered files are open.
    pub state: Option<Box<OpenFile>>,
    /// What a closed container said of itself, remembered (we are the only writer).
    pub closed: Option<Closed>,
    /// Read-only handles opened without a container (rule 9): they hold no state, only
    /// the inode's fd (the fd cache keeps it while any exists).
    pub lazy: u32,
    /// Its first bytes were stored in the kernel's page cache ahead of a reader walking
    /// its directory (`crate::siblings`), and no writer opened it since: not stored again
    /// (a hint only: the kernel may have dropped them since).
    pub stored_ahead: bool,
    /// [`FileState::share`]s held.
    shared: u16,
    /// A [`FileState::exclusive`] is held, or waits for the shares to end (no new one
    /// starts meanwhile).
    exclusive: bool,
}

impl std::ops::Deref for FileSlot {
    type Target = Option<Box<OpenFile>>;
    fn deref(&self) -> &Self::Target {
        &self.state
    }
}

impl std::ops::DerefMut for FileSlot {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.state
    }
}

/// The file's lock held.
pub type OpenGuard<'a> = MutexGuard<'a, FileSlot>;

/// The exclusion of containers of the file's own from the background pass (see
/// [`FileState::share`]), held until dropped.
pub struct Private<'a> {
    file: &'a FileState,
    exclusive: bool,
}

impl Drop for Private<'_> {
    fn drop(&mut self) {
        let mut slot = self.file.open.lock().unwrap_or_else(|e| e.into_inner());
        if self.exclusive {
            slot.exclusive = false;
        } else {
            slot.shared -= 1;
        }
        drop(slot);
        self.file.changed.notify_all();
    }
}

/// A closed file's logical size, and what it takes in its pack if it is packed, kept for
/// `stat` once its container is gone. Every remembered regular file has one, so it is
/// kept small (32 bytes, `None` included): the rare kept times boxed, the stored size in
/// 32 bits (a file's share of a pack block; a state that does not fit is not remembered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    size: u64,
    /// See [`Closed::moves`] (meaningful when `packed`).
    moves: u64,
    /// The times its superblock or location record keeps for `stat`
    /// ([`Container::kept_times`]).
    kept: Option<Box<StatTimes>>,
    /// See [`Container::packed_stored`]; `u32::MAX`: none.
    stored: u32,
    /// A packed file (`moves` is set).
    packed: bool,
}

impl Times {
    /// These times, with those `kept` (a superblock's, `SB_FLAG_TIMES`) where none is set:
    /// what `stat` shows.
    pub fn over_kept(self, kept: Option<StatTimes>) -> Times {
        let wide = |(sec, nsec): (i64, u32)| (sec, i64::from(nsec));
        Times {
            atime: self.atime,
            mtime: self.mtime.or(kept.and_then(|k| k.mtime).map(wide)),
            ctime: self.ctime.or(kept.map(|k| wide(k.ctime))),
        }
    }
}

impl Closed {
    /// What `c` says now (`None` when its size cannot be read: asked again next time).
    pub fn of<S: squeezefs_container::Storage>(c: &Container<S>) -> Option<Closed> {
        let moves = c.packs_moves();
        let stored = match c.packed_stored() {
            Some(n) => u32::try_from(n).ok().filter(|&n| n != u32::MAX)?,
            None => u32::MAX,
        };
        Some(Closed {
            size: c.size().ok()?,
            moves: moves.unwrap_or(0),
            kept: c.kept_times().map(Box::new),
            stored,
            packed: moves.is_some(),
        })
    }

    /// The file's logical size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// See [`Container::packed_stored`].
    pub fn stored(&self) -> Option<u64> {
        (self.stored != u32::MAX).then_some(u64::from(self.stored))
    }

    /// See [`Container::kept_times`].
    pub fn kept(&self) -> Option<StatTimes> {
        self.kept.as_deref().copied()
    }

    /// For a packed file, [`squeezefs_container::pack::Packs::moves`] before `kept` was
    /// read: once that moved on, a reclaim may have replaced the record (and what it
    /// keeps), and this is stale if it moved this file
    /// ([`squeezefs_container::pack::Packs::unmoved_since`]).
    pub fn moves(&self) -> Option<u64> {
        self.packed.then_some(self.moves)
    }

    /// Known true up to reclaim's count `n` ([`Closed::moves`]).
    pub fn set_moves(&mut self, n: u64) {
        self.moves = n;
    }
}

/// The bit of `FileState::errors` saying the kernel's cached pages are not trusted.
const SUSPECT: u32 = 1 << 31;

impl FileState {
    /// Held by every use of a container of the file's own, outside its state
    /// (`Files::with_kept`, a no-state `Files::run`), for its whole life; several at once.
    /// [`FileState::exclusive`] is held by the background pass (`Files::quiet`), so no
    /// such container reads halves the pass is replacing, or writes beside it. (A
    /// read-write lock made of the file's lock and `changed`: one lock for every
    /// remembered file.) Taken without the file's lock held; lock order: this, then
    /// `open`.
    pub fn share(&self) -> Private<'_> {
        let mut slot = self.open.lock().unwrap();
        // (A count that would overflow waits too: far more than requests in flight.)
        while slot.exclusive || slot.shared == u16::MAX {
            slot = self.changed.wait(slot).unwrap();
        }
        slot.shared += 1;
        Private {
            file: self,
            exclusive: false,
        }
    }

    /// See [`FileState::share`]: waits until no share is held, and none can start
    /// meanwhile.
    pub fn exclusive(&self) -> Private<'_> {
        let mut slot = self.open.lock().unwrap();
        while slot.exclusive {
            slot = self.changed.wait(slot).unwrap();
        }
        slot.exclusive = true;
        while slot.shared > 0 {
            slot = self.changed.wait(slot).unwrap();
        }
        Private {
            file: self,
            exclusive: true,
        }
    }

    /// Notes that the kernel's cached pages of this file may be wrong (rule 8).
    pub fn suspect_cache(&self) {
        self.errors.fetch_or(SUSPECT, Ordering::Relaxed);
    }

    /// Whether the kernel's cached pages of this file may be wrong (rule 8).
    pub fn cache_suspect(&self) -> bool {
        self.errors.load(Ordering::Relaxed) & SUSPECT != 0
    }

    /// A write-out or commit failed where no caller waits for its answer (rule 10): kept
    /// for the next `fsync`, and the kernel's cached pages are no longer trusted (rule 8).
    pub fn lost_write(&self, errno: i32) {
        // (An errno is a small positive number; a nonsense one is kept as EIO.)
        let e = u32::try_from(errno)
            .ok()
            .filter(|&e| e != 0 && e < SUSPECT)
            .unwrap_or(libc::EIO as u32);
        self.errors.store(SUSPECT | e, Ordering::Relaxed);
    }

    /// Whether an error waits for the next `fsync` ([`FileState::take_unreported`]).
    pub fn has_unreported(&self) -> bool {
        self.errors.load(Ordering::Relaxed) & !SUSPECT != 0
    }

    /// The error [`FileState::lost_write`] kept, once.
    pub fn take_unreported(&self) -> Option<i32> {
        match self.errors.fetch_and(SUSPECT, Ordering::Relaxed) & !SUSPECT {
            0 => None,
            e => Some(e as i32),
        }
    }

    /// Whether an open may keep the kernel's cached pages (and forgets the suspicion: the
    /// open that answers no drops them).
    pub fn keep_cache(&self) -> bool {
        self.errors.fetch_and(!SUSPECT, Ordering::Relaxed) & SUSPECT == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;

    /// The pass's exclusion made of the file's lock: shares go together; an exclusive
    /// waits for them to end and keeps new ones out until it ends; the file's lock is free
    /// meanwhile.
    #[test]
    fn shares_go_together_and_an_exclusive_waits_for_them() {
        let f = FileState::default();
        let a = f.share();
        let b = f.share();
        let got = AtomicBool::new(false);
        std::thread::scope(|s| {
            let pass = s.spawn(|| {
                let x = f.exclusive();
                got.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
                drop(x);
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!got.load(Ordering::SeqCst), "the exclusive waits for the shares");
            // The file's lock is not held meanwhile.
            drop(f.open.lock().unwrap());
            drop(a);
            std::thread::sleep(Duration::from_millis(50));
            assert!(!got.load(Ordering::SeqCst), "one share left");
            drop(b);
            while !got.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            // A new share waits for the exclusive to end.
            let t = std::time::Instant::now();
            let c = f.share();
            assert!(t.elapsed() >= Duration::from_millis(50), "{:?}", t.elapsed());
            drop(c);
            pass.join().unwrap();
        });
        let slot = f.open.lock().unwrap();
        assert_eq!((slot.shared, slot.exclusive), (0, false));
    }
}
