//! Read-ahead in the daemon, for sequential readers of large files.
//!
//! Why: the kernel reads a FUSE file ahead by 128 KiB (a FUSE mount's device gets the
//! default read-ahead; `max_readahead` can only lower it, and raising the device's
//! `read_ahead_kb` as root gained 10 %), so a `cat` of a large file arrives as one READ of
//! one extent at a time. Served alone, each READ waits for the backing file — the two halves
//! of an extent slot put its copies 264 KiB apart, so the backing filesystem's own
//! read-ahead never sees a stream — and then decompresses, under the file's lock, while the
//! other core idles. docs/BENCHMARKS.md ("Large files") has the profile and the figures.
//!
//! What: each open file keeps a [`Stream`] (where its last read ended). When a READ
//! continues the previous one, the extents of the next [`ahead_bytes`] not in memory are
//! planned under the file's lock ([`Container::plan_ahead`]) and handed to [`AHEAD_WORKERS`]
//! threads, which read and decode them without that lock, on a descriptor of the backing
//! file shared by the jobs of one plan (closed with the last of them), and cache them if the
//! file did not change meanwhile ([`Container::install`]). A READ that finds its extent
//! cached only copies it; one whose extent is in a worker's hands waits for it.
//!
//! A read-ahead is a hint: when the queue is full the rest of a plan is dropped, and any
//! failure leaves the extent to the READ, which reports it. The statistics file counts
//! extents loaded by their reader and ahead (`reads`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use squeezefs_container::{AheadPlan, FileStorage};

use crate::inode::Inode;
use crate::lifecycle::state::{OpenFile, Stream};

/// How far ahead of a sequential reader extents are loaded at least: eight 128 KiB extents
/// (the file's extent cache grows by as much while it is read ahead).
pub const AHEAD_BYTES: u64 = 1 << 20;

/// How far ahead a sequential reader of a file with `extent`-byte extents is read:
/// [`AHEAD_BYTES`], and at least one extent per worker, so that files of large extents
/// (1 MiB: files written whole, `container/grow.rs`) are decoded on every core too, not one
/// extent at a time.
pub fn ahead_bytes(extent: u64) -> u64 {
    AHEAD_BYTES.max(extent.saturating_mul(AHEAD_WORKERS as u64))
}
/// Threads that load extents ahead. Most of a load is waiting for the backing file, so more
/// threads than cores pay (docs/BENCHMARKS.md has the table this was chosen from).
pub const AHEAD_WORKERS: usize = 4;
/// Extents waiting for a worker, beyond which plans are dropped.
const QUEUE: usize = 64;
/// Extents one READ plans at most (with small extents, 1 MiB would be up to 256 of them:
/// one file must not fill the queue all others share).
const PLAN_MAX: usize = QUEUE / AHEAD_WORKERS;
/// The longest a READ waits for extents loaded ahead before loading them itself.
const WAIT_MAX: Duration = Duration::from_secs(5);

impl Stream {
    /// Records a READ of `len` bytes at `off`. When it continues the stream (the kernel may
    /// answer two READs of one stream out of order: a gap of up to two READs counts),
    /// returns the byte range whose extents to plan; a jump starts a new stream (what is
    /// in flight stays marked: a READ still waits for it rather than loading it twice).
    fn advance(&mut self, off: u64, len: u64, ahead: u64) -> Option<(u64, u64)> {
        let end = off.saturating_add(len);
        if !self.continues(off, len) {
            self.next = end;
            self.planned_to = 0;
            return None;
        }
        self.next = self.next.max(end);
        let to = self.next.saturating_add(ahead);
        let from = self.next.max(self.planned_to);
        (from < to).then_some((from, to))
    }

    /// Whether a READ of `len` bytes at `off` would continue this stream (the rule of
    /// [`Stream::advance`]), before it is recorded.
    pub fn continues(&self, off: u64, len: u64) -> bool {
        len > 0 && off.abs_diff(self.next) <= 2 * len.max(128 << 10)
    }

    /// Whether an extent holding some of `[off, end)` is being loaded ahead.
    fn in_flight(&self, off: u64, end: u64) -> bool {
        self.in_flight.iter().any(|&(_, a, b)| a < end && off < b)
    }
}

/// A reader closed its handle: the file's extent cache goes back to its usual budget (a
/// kept file holds no more than any other).
pub fn finish(of: &mut OpenFile) {
    if std::mem::take(&mut of.stream.reserved) {
        of.container.reserve_ahead(0);
    }
    of.stream.next = 0;
    of.stream.planned_to = 0;
}

/// Numbers the jobs, so a worker only ever clears its own mark (the file's state may have
/// been closed and opened again meanwhile).
static JOBS: AtomicU64 = AtomicU64::new(1);

/// One extent to load ahead. However it ends — installed, failed, dropped with the queue,
/// or its worker panicking — its mark is cleared and waiting READs are woken (`Drop`).
struct Job {
    id: u64,
    inode: Arc<Inode>,
    reader: Arc<FileStorage>,
    plan: AheadPlan,
    /// Its mark is to be cleared at drop (false while the caller of `after_read`, holding
    /// the file's lock, still has it).
    armed: bool,
}

impl Job {
    /// Loads the extent without the file's lock, then installs it under the lock.
    fn run(&self) {
        let fetched = self.plan.fetch(&*self.reader);
        if let Ok(Some(f)) = fetched {
            let mut open = self.inode.file.open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(of) = open.as_mut() {
                of.container.install(f);
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut open = self.inode.file.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(of) = open.as_mut() {
            of.stream.in_flight.retain(|&(id, _, _)| id != self.id);
        }
        drop(open);
        self.inode.file.changed.notify_all();
    }
}

/// The read-ahead workers and their queue.
pub struct ReadAhead {
    tx: SyncSender<Job>,
    rx: Mutex<Option<Receiver<Job>>>,
    /// The workers run: until then (unit tests without a mount) nothing is planned.
    started: AtomicBool,
}

impl Default for ReadAhead {
    fn default() -> ReadAhead {
        let (tx, rx) = sync_channel(QUEUE);
        ReadAhead {
            tx,
            rx: Mutex::new(Some(rx)),
            started: AtomicBool::new(false),
        }
    }
}

impl ReadAhead {
    /// Starts the workers (once; they end with the daemon). Until then nothing is planned.
    pub fn start(&self) -> std::io::Result<()> {
        let Some(rx) = self.rx.lock().unwrap().take() else {
            return Ok(());
        };
        // A panic (a decoder's) ends its job only: the job's mark is cleared by its drop
        // either way.
        crate::workers::spawn("squeezefs-ahead", AHEAD_WORKERS, rx, |job: Job| {
            job.run();
            true
        })?;
        self.started.store(true, Ordering::Release);
        Ok(())
    }

    /// After a READ of `len` bytes at `off` on `inode` (whose state is `of`, locked by the
    /// caller): plans and queues the extents a sequential reader wants next.
    pub fn after_read(&self, inode: &Arc<Inode>, of: &mut OpenFile, off: u64, len: usize) {
        if !self.started.load(Ordering::Acquire) {
            return;
        }
        let ahead = ahead_bytes(of.container.extent_size().unwrap_or(0));
        let Some((from, to)) = of.stream.advance(off, len as u64, ahead) else {
            return;
        };
        self.queue(inode, of, from, to, Some(ahead));
    }

    /// Loads the extents of `[from, to)` (at most the extent cache's usual budget) of a file
    /// no reader has asked for yet (`crate::siblings`), on the workers: a READ of them
    /// meanwhile waits for them, as for any read-ahead ([`ReadAhead::wait_for`]). False when
    /// not all of them could be queued (the workers are behind, or not started).
    pub fn load(&self, inode: &Arc<Inode>, of: &mut OpenFile, from: u64, to: u64) -> bool {
        self.started.load(Ordering::Acquire) && self.queue(inode, of, from, to, None)
    }

    /// Plans the extents of `[from, to)` not in memory and queues them; `reserve`: the bytes
    /// the file's extent cache is grown by for a reader's stream. Whether every extent
    /// planned was queued.
    fn queue(&self, inode: &Arc<Inode>, of: &mut OpenFile, from: u64, to: u64, reserve: Option<u64>) -> bool {
        let mut plans = of.container.plan_ahead(from, to);
        plans.truncate(PLAN_MAX);
        of.stream.planned_to = match plans.last() {
            Some(p) if plans.len() == PLAN_MAX => p.range().1,
            _ => to,
        };
        if plans.is_empty() {
            return true;
        }
        // One descriptor for the jobs in flight of a file, closed with the last of them:
        // none is kept for a file not being read ahead. None to be had (the open-file
        // limit): no read-ahead.
        let reader = match of.stream.reader.upgrade() {
            Some(r) => r,
            None => {
                let Ok(file) = of.container.storage().file().try_clone() else {
                    return false;
                };
                let r = Arc::new(FileStorage::new(file));
                of.stream.reader = Arc::downgrade(&r);
                r
            }
        };
        if let Some(ahead) = reserve.filter(|_| !of.stream.reserved) {
            of.container.reserve_ahead(ahead);
            of.stream.reserved = true;
        }
        for plan in plans {
            let id = JOBS.fetch_add(1, Ordering::Relaxed);
            let (a, b) = plan.range();
            of.stream.in_flight.push((id, a, b));
            let job = Job {
                id,
                inode: inode.clone(),
                reader: reader.clone(),
                plan,
                armed: true,
            };
            if let Err(e) = self.tx.try_send(job) {
                // Busy: the READs load the rest themselves. The caller holds the file's
                // lock, which an armed job's drop takes: its mark is cleared here instead.
                let (TrySendError::Full(mut job) | TrySendError::Disconnected(mut job)) = e;
                job.armed = false;
                of.stream.in_flight.retain(|&(i, _, _)| i != id);
                return false;
            }
        }
        true
    }

    /// Before a READ of `[off, off + len)`: waits, with the file's lock `open` released
    /// meanwhile, until no extent it needs is being loaded ahead (so the READ copies it
    /// rather than loading it a second time), [`WAIT_MAX`] at most.
    pub fn wait_for<'a>(
        &self,
        inode: &'a Inode,
        mut open: crate::lifecycle::state::OpenGuard<'a>,
        off: u64,
        len: usize,
    ) -> crate::lifecycle::state::OpenGuard<'a> {
        let end = off.saturating_add(len as u64);
        let deadline = Instant::now() + WAIT_MAX;
        while open.as_ref().is_some_and(|of| of.stream.in_flight(off, end)) {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            open = inode.file.changed.wait_timeout(open, left).unwrap().0;
        }
        open
    }
}
