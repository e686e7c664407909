//! New regular files named behind the caller (issue 44, step 1 of the namespace's
//! write-behind; docs/ARCHITECTURE.md, `ns/`).
//!
//! `dirops=behind` (opt-in). A CREATE otherwise makes its backing file where the caller
//! asked, inside the request (`openat(O_CREAT)` in the parent, `fstat`, an `O_PATH` open,
//! the file handle). Here the backing file is made *ahead*, by the applier thread, in
//! squeezefs's private directory (`.squeezefs-packs/.new-PID-SEQ`, [`pool`]), and a CREATE
//! takes one: the inode's number is that file's `st_ino` from the first moment (so `stat`,
//! `readdir`'s `d_ino`, `ls -i` agree before and after, and after a remount), its data,
//! attributes and xattrs go to that
//! real file through its fd as for any file, and only the *name* waits: a [`Place`] in a
//! FIFO queue, which the applier turns into one `renameat2(RENAME_NOREPLACE)` into the
//! parent, in the order the creates were answered.
//!
//! Until then the mount shows the name from memory: LOOKUP finds it here
//! ([`Namespace::pending`]), a directory's `stat` shows the time of its newest pending
//! entry as its mtime/ctime ([`Namespace::changed`]), and everything that would look at the
//! backing directory's names first waits for the queue to empty ([`Namespace::drain`]):
//! a listing of a directory with pending entries, every other change of names (mkdir,
//! unlink, rename, link, symlink, mknod, a CREATE that does not qualify), a SETATTR of a
//! directory with pending entries, the statistics file's open (a `sync` stand-in), pack
//! reclaim's rounds and the unmount. So the backing directory, at any moment, holds what
//! the mount showed at some earlier moment: the queue is a prefix of what the mount shows
//! since, and a kill -9 leaves a prefix of the creates (the rest are objects in the pool,
//! removed at the next mount: [`pool::recover`]).
//!
//! A CREATE is taken this way only where nothing can tell the difference
//! (`ops/behind.rs`, `create_pending`): the name is known absent — the parent's names are
//! all known and lack it (`inode::known`), or a LOOKUP just found it absent on the backing
//! ([`Namespace::absent`]: the kernel holds the directory's lock from that LOOKUP through
//! its CREATE, and BACKING is this daemon's alone) — so the rename cannot meet an existing
//! name; the parent is on
//! the backing root's device, has no default ACL and is not setgid (a pool file would not
//! inherit them) nor project-inheriting or encrypted (the rename would be refused), the mode has no setuid/setgid bit, the backing filesystem is not nearly
//! full. A CREATE that finds the pool empty makes its file itself; one that finds the queue
//! full waits for room.
//!
//! Why it is not the default: measured slower where we could measure it (docs/BENCHMARKS.md,
//! session 22). The backing create is a small part of a CREATE's time, the applier's rename
//! costs more than the create it replaces, and on two CPUs (or over a network, one call at
//! a time) nothing hides that work.
//!
//! Durability: `fsync` of a file waits for its name to be applied and syncs its parent
//! directory; `fsyncdir` waits for every pending name; unmount applies everything before
//! the final `syncfs`. An error that happens behind (ENOSPC growing the directory, EIO) is
//! logged with the path, the kernel's entry invalidated, and the errno returned by the
//! file's next `fsync` and the directory's next `fsyncdir`.
//!
//! Lock order: no lock of the caller's is held while it waits here; the applier takes
//! pack reclaim's namespace guard, then the inode table's namespace lock (path mode), never
//! [`Namespace`]'s own lock across a backing call.

pub mod pool;

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::inode::Inode;
use pool::Ready;

/// Most names pending at once; a CREATE beyond it takes the synchronous path (which waits
/// for the queue first). Each pending file keeps two fds (its data and its `O_PATH`).
pub const MAX_PENDING: usize = 4096;

/// Files the pool keeps ready (refilled as they are taken).
pub const POOL_TARGET: usize = 64;

/// LOOKUP misses remembered for the CREATE that follows, and for how long.
const ABSENT_KEPT: usize = 16;
const ABSENT_FRESH: Duration = Duration::from_secs(5);

/// A backing key: (device, inode).
type Key = (u64, u64);

/// What the applier asks of the filesystem it serves (`ops` implements it): the backing
/// calls, with the locks a rename through the mount takes.
pub trait Target: Send + Sync {
    /// Renames `pool` (a name in the private directory) to `name` in `parent`, never
    /// replacing an entry, and records `obj`'s new place.
    fn place(
        &self,
        from: (BorrowedFd, &CStr),
        obj: &Arc<Inode>,
        parent: &Arc<Inode>,
        name: &CString,
    ) -> io::Result<()>;
    /// A place that failed: logged with the path, reported at fsync, the kernel's entry
    /// dropped (the pool file is removed by the caller).
    fn failed(&self, pool: &PoolName, obj: &Arc<Inode>, parent: &Arc<Inode>, name: &CString, e: &io::Error);
    /// Syncs directory `dir` (its entries durable).
    fn sync_dir(&self, dir: &Arc<Inode>) -> io::Result<()>;
    /// Syncs the backing filesystem.
    fn syncfs(&self) -> io::Result<()>;
}

/// A pool file's name in the private directory, once its fds went to an inode.
pub struct PoolName {
    pub name: CString,
}

/// A name waiting to be made: pool file `pool` becomes `name` in `parent`.
struct Place {
    seq: u64,
    obj: Arc<Inode>,
    pool: PoolName,
    parent: Arc<Inode>,
    name: CString,
    at: Instant,
}

#[derive(Default)]
struct Ns {
    queue: VecDeque<Place>,
    /// Sequence number of the next place (the first is 1).
    next_seq: u64,
    /// Every place up to this one is applied (or failed).
    applied_seq: u64,
    /// Pending names: (parent, name) → the file.
    names: HashMap<(Key, CString), Arc<Inode>>,
    /// Per parent: pending names, and the time shown as its mtime/ctime meanwhile.
    dirs: HashMap<Key, (u32, libc::timespec)>,
    /// Pending files: their place's sequence number.
    objs: HashMap<Key, u64>,
    /// Files placed whose name no fsync has made durable yet, with their parent.
    placed_in: HashMap<Key, Arc<Inode>>,
    pool: Vec<Ready>,
    stop: bool,
}

/// Why a CREATE was not named behind (the statistics file's `not_behind`).
#[derive(Clone, Copy)]
pub enum Why {
    /// Setuid/setgid mode, or a reserved name.
    Mode,
    /// The name was not known absent (neither all the directory's names known, nor a
    /// LOOKUP just before that found it absent).
    Unknown,
    /// The directory: on another device, a default ACL (or not known to have none), setgid.
    Directory,
    /// The backing filesystem nearly full.
    Space,
    /// No file could be made ahead.
    NoFile,
}

const WHY_NAMES: [&str; 5] = ["mode", "unknown", "directory", "space", "no_file"];

/// Counters for the statistics file.
#[derive(Default)]
pub struct Stats {
    pub not_behind: [AtomicU64; 5],
    pub behind: AtomicU64,
    pub applied: AtomicU64,
    pub fallbacks: AtomicU64,
    /// CREATEs that made their file themselves (the pool was empty).
    pub made_inline: AtomicU64,
    /// Times a CREATE waited for room in the queue.
    pub full: AtomicU64,
    pub drains: AtomicU64,
    pub errors: AtomicU64,
}

pub struct Namespace {
    m: Mutex<Ns>,
    /// A place was applied (barriers wait on it).
    applied: Condvar,
    /// Work for the applier: a place queued, the pool below its target, the stop.
    work: Condvar,
    /// Names pending (read without the lock on every LOOKUP).
    pending: AtomicUsize,
    pool: pool::Pool,
    max_pending: usize,
    /// For tests ([`DELAY_ENV`]): how long the applier waits before each name.
    delay: Duration,
    /// The last names a LOOKUP found absent on the backing (parent, name, when), for
    /// directories whose names are not all known ([`Namespace::absent`]).
    absent: Mutex<VecDeque<(Key, CString, Instant)>>,
    pub stats: Stats,
}

/// For tests: the environment variable that holds each name pending this many ms longer
/// (so a test can see the mount while names are pending, or kill the daemon then).
pub const DELAY_ENV: &str = "SQUEEZEFS_TEST_APPLY_DELAY_MS";

impl Namespace {
    /// The namespace of the backing directory whose root is `root`: leftovers of an
    /// earlier daemon removed from the private directory ([`pool::recover`]), the pool
    /// opened. `max_fds`: the fds it may keep (two per pending or ready file).
    pub fn open(root: &std::fs::File, max_fds: u64) -> io::Result<Namespace> {
        let pool = pool::Pool::open(root)?;
        let max_pending = ((max_fds / 2) as usize).clamp(16, MAX_PENDING);
        Ok(Namespace {
            m: Mutex::new(Ns {
                next_seq: 1,
                ..Default::default()
            }),
            applied: Condvar::new(),
            work: Condvar::new(),
            pending: AtomicUsize::new(0),
            pool,
            max_pending,
            delay: std::env::var(DELAY_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(Duration::ZERO, Duration::from_millis),
            stats: Stats::default(),
            absent: Mutex::new(VecDeque::with_capacity(ABSENT_KEPT)),
        })
    }

    /// A LOOKUP found `name` absent from `parent` on the backing. The CREATE the kernel
    /// sends next for it (it holds the directory's lock from that LOOKUP through its
    /// CREATE, and BACKING is this daemon's alone) may then name its file behind even where
    /// the directory's names are not all known (a network backing's).
    pub fn note_absent(&self, parent: &Inode, name: &[u8]) {
        let Ok(name) = CString::new(name) else { return };
        let mut a = self.absent.lock().unwrap();
        if a.len() == ABSENT_KEPT {
            a.pop_front();
        }
        a.push_back((parent.key, name, Instant::now()));
    }

    /// Whether a LOOKUP found `name` absent from `parent` on the backing within
    /// [`ABSENT_FRESH`], with no change of `parent`'s names since; the note is used up.
    pub fn absent(&self, parent: &Inode, name: &[u8]) -> bool {
        let mut a = self.absent.lock().unwrap();
        let Some(i) = a
            .iter()
            .position(|(k, n, at)| *k == parent.key && n.as_bytes() == name && at.elapsed() < ABSENT_FRESH)
        else {
            return false;
        };
        a.remove(i);
        true
    }

    /// `dir`'s names changed through the mount: what LOOKUPs found absent there is
    /// forgotten.
    pub fn names_changed(&self, dir: &Inode) {
        let mut a = self.absent.lock().unwrap();
        if !a.is_empty() {
            a.retain(|(k, _, _)| *k != dir.key);
        }
    }

    /// Starts the applier thread, which serves `target` until [`Namespace::shutdown`].
    pub fn start(self: &Arc<Self>, target: Weak<dyn Target>) -> io::Result<std::thread::JoinHandle<()>> {
        let ns = self.clone();
        std::thread::Builder::new()
            .name("squeezefs-apply".into())
            .spawn(move || ns.run(target))
    }

    /// A file made ahead for a CREATE: one from the pool, or one made now when the pool is
    /// empty (the applier refills it between names, and a slow backing may empty it).
    /// Waits while the queue is full (the pending work is bounded). `None` only while the
    /// namespace stops or when no file can be made (the CREATE then takes the synchronous
    /// path).
    pub fn take(&self) -> Option<Ready> {
        let mut m = self.m.lock().unwrap();
        while !m.stop && m.queue.len() >= self.max_pending {
            self.stats.full.fetch_add(1, Ordering::Relaxed);
            m = self.applied.wait(m).unwrap();
        }
        if m.stop {
            return None;
        }
        let r = m.pool.pop();
        self.work.notify_one();
        drop(m);
        r.or_else(|| {
            self.stats.made_inline.fetch_add(1, Ordering::Relaxed);
            self.pool
                .make()
                .inspect_err(|e| log::warn!("could not make a file in the private directory: {e}"))
                .ok()
        })
    }

    /// A pool file taken but not used (the CREATE failed before queueing it): removed.
    pub fn discard(&self, name: &PoolName) {
        self.pool.remove(&name.name);
    }

    /// Queues the naming of `obj` (made from pool file `pool`) as `name` in `parent`, and
    /// shows it from now on. The kernel holds `parent`'s lock through the CREATE, so no
    /// LOOKUP of the name comes before this.
    pub fn queue(&self, pool: PoolName, obj: Arc<Inode>, parent: Arc<Inode>, name: CString) {
        let mut m = self.m.lock().unwrap();
        let seq = m.next_seq;
        m.next_seq += 1;
        m.names.insert((parent.key, name.clone()), obj.clone());
        let d = m.dirs.entry(parent.key).or_insert((0, now()));
        d.0 += 1;
        d.1 = now();
        m.objs.insert(obj.key, seq);
        m.queue.push_back(Place {
            seq,
            obj,
            pool,
            parent,
            name,
            at: Instant::now(),
        });
        self.pending.fetch_add(1, Ordering::Release);
        self.stats.behind.fetch_add(1, Ordering::Relaxed);
        self.work.notify_one();
    }

    /// Whether any name is pending (one atomic load).
    pub fn any_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// The file pending as `name` in directory `parent`, if any.
    pub fn pending(&self, parent: &Inode, name: &[u8]) -> Option<Arc<Inode>> {
        if !self.any_pending() {
            return None;
        }
        let name = CString::new(name).ok()?;
        self.m.lock().unwrap().names.get(&(parent.key, name)).cloned()
    }

    /// Whether directory `dir` has pending entries.
    pub fn pending_in(&self, dir: &Inode) -> bool {
        self.any_pending() && self.m.lock().unwrap().dirs.contains_key(&dir.key)
    }

    /// The time directory `dir` changed last, while it has pending entries (its backing
    /// mtime and ctime do not show them yet).
    pub fn changed(&self, dir: &Inode) -> Option<libc::timespec> {
        if !self.any_pending() {
            return None;
        }
        self.m.lock().unwrap().dirs.get(&dir.key).map(|d| d.1)
    }

    /// Waits until every name pending now is applied (or failed). Call with no lock held.
    pub fn drain(&self) {
        if !self.any_pending() {
            return;
        }
        let mut m = self.m.lock().unwrap();
        let upto = m.next_seq - 1;
        if m.applied_seq >= upto {
            return;
        }
        self.stats.drains.fetch_add(1, Ordering::Relaxed);
        while m.applied_seq < upto {
            m = self.applied.wait(m).unwrap();
        }
    }

    /// fsync of `obj`: waits until its name (if pending) is applied, then syncs the
    /// directory it was placed in (its name durable); the record goes only once that
    /// sync succeeded, so a concurrent or retried fsync syncs too.
    pub fn settle_for(&self, obj: &Inode, target: &dyn Target) -> io::Result<()> {
        let mut m = self.m.lock().unwrap();
        if let Some(&seq) = m.objs.get(&obj.key) {
            while m.applied_seq < seq {
                m = self.applied.wait(m).unwrap();
            }
        }
        let Some(parent) = m.placed_in.get(&obj.key).cloned() else {
            return Ok(());
        };
        drop(m);
        target.sync_dir(&parent)?;
        let mut m = self.m.lock().unwrap();
        if m.placed_in.get(&obj.key).is_some_and(|p| Arc::ptr_eq(p, &parent)) {
            m.placed_in.remove(&obj.key);
        }
        Ok(())
    }

    /// Unmount: applies everything, stops the applier, removes the unused pool files.
    pub fn shutdown(&self, thread: Option<std::thread::JoinHandle<()>>) {
        self.drain();
        self.m.lock().unwrap().stop = true;
        self.work.notify_all();
        if let Some(t) = thread {
            let _ = t.join();
        }
        let left = std::mem::take(&mut self.m.lock().unwrap().pool);
        for r in left {
            self.pool.remove(&r.name);
        }
    }

    /// For the statistics file: the names pending now, the oldest's age, the files ready
    /// in the pool, and the counters.
    pub fn to_json(&self) -> serde_json::Value {
        let m = self.m.lock().unwrap();
        let oldest = m.queue.front().map_or(0, |p| p.at.elapsed().as_millis() as u64);
        let (pending, ready) = (m.queue.len(), m.pool.len());
        drop(m);
        let s = &self.stats;
        serde_json::json!({
            "mode": "behind",
            "pending": pending,
            "oldest_ms": oldest,
            "pool": ready,
            "behind": s.behind.load(Ordering::Relaxed),
            "applied": s.applied.load(Ordering::Relaxed),
            "fallbacks": s.fallbacks.load(Ordering::Relaxed),
            "not_behind": WHY_NAMES
                .iter()
                .zip(&s.not_behind)
                .map(|(n, c)| (n.to_string(), serde_json::json!(c.load(Ordering::Relaxed))))
                .collect::<serde_json::Map<_, _>>(),
            "made_inline": s.made_inline.load(Ordering::Relaxed),
            "full": s.full.load(Ordering::Relaxed),
            "drains": s.drains.load(Ordering::Relaxed),
            "errors": s.errors.load(Ordering::Relaxed),
        })
    }

    /// The applier: places in order, one at a time; between them, the pool refilled.
    fn run(&self, target: Weak<dyn Target>) {
        loop {
            let mut m = self.m.lock().unwrap();
            while !m.stop && m.queue.is_empty() && m.pool.len() >= POOL_TARGET {
                m = self.work.wait(m).unwrap();
            }
            if m.stop && m.queue.is_empty() {
                return;
            }
            let next = m.queue.front().map(|p| {
                (
                    PoolName {
                        name: p.pool.name.clone(),
                    },
                    p.obj.clone(),
                    p.parent.clone(),
                    p.name.clone(),
                    p.seq,
                )
            });
            let refill = !m.stop && m.pool.len() < POOL_TARGET;
            drop(m);
            if let Some((pool, obj, parent, name, seq)) = next {
                if !self.delay.is_zero() {
                    std::thread::sleep(self.delay);
                }
                let Some(t) = target.upgrade() else { return };
                let r = t.place((self.pool.dir.as_fd(), &pool.name), &obj, &parent, &name);
                if let Err(e) = &r {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    t.failed(&pool, &obj, &parent, &name, e);
                    self.pool.remove(&pool.name);
                }
                if self.applied_one(seq, &obj, &parent, &name, r.is_ok()) {
                    // Many placed files wait for their directories' sync: one `syncfs`
                    // covers them all (only this thread adds to the record).
                    match t.syncfs() {
                        Ok(()) => {
                            let mut m = self.m.lock().unwrap();
                            m.placed_in.clear();
                        }
                        Err(e) => log::warn!("syncfs of the backing filesystem failed: {e}"),
                    }
                }
            }
            if refill {
                match self.pool.make() {
                    Ok(r) => self.m.lock().unwrap().pool.push(r),
                    Err(e) => {
                        log::warn!("could not make a file ahead in the private directory: {e}");
                        // (CREATEs take the synchronous path meanwhile.)
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        }
    }

    /// The place `seq` is done (`ok`: the name exists now). Returns whether the record of
    /// placed files waiting for their directory's sync grew past its bound.
    fn applied_one(&self, seq: u64, obj: &Arc<Inode>, parent: &Arc<Inode>, name: &CString, ok: bool) -> bool {
        let mut m = self.m.lock().unwrap();
        let p = m.queue.pop_front();
        debug_assert!(p.is_some_and(|p| p.seq == seq));
        m.applied_seq = seq;
        let key = (parent.key, name.clone());
        if m.names.get(&key).is_some_and(|o| Arc::ptr_eq(o, obj)) {
            m.names.remove(&key);
        }
        if let Some(d) = m.dirs.get_mut(&parent.key) {
            d.0 -= 1;
            if d.0 == 0 {
                m.dirs.remove(&parent.key);
            }
        }
        if m.objs.get(&obj.key) == Some(&seq) {
            m.objs.remove(&obj.key);
        }
        if ok {
            m.placed_in.insert(obj.key, parent.clone());
        }
        let over = m.placed_in.len() > 4 * MAX_PENDING;
        self.pending.fetch_sub(1, Ordering::Release);
        self.stats.applied.fetch_add(1, Ordering::Relaxed);
        drop(m);
        self.applied.notify_all();
        over
    }
}

fn now() -> libc::timespec {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

#[cfg(test)]
mod tests;
