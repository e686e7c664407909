//! Read-ahead in the daemon, for sequential readers of large files.
//!
//! Why: the kernel reads a FUSE file ahead by at most 128 KiB (the read-ahead of a FUSE
//! mount's device, whatever `max_readahead` the daemon asks), so a `cat` of a large file
//! arrives as one READ of one extent at a time. Served alone, each READ waits for the backing
//! file — the two halves of an extent slot put its copies 264 KiB apart, so the backing
//! filesystem's own read-ahead never sees a sequential stream — and then decompresses, under
//! the file's lock, while the other core idles. Profiled on a cold 1.36 GB file: the daemon
//! spent 1.6 s of 3.1 s waiting for the disk.
//!
//! What: each open file keeps a [`Stream`] (where its last read ended). When a READ
//! continues the previous one, the extents of the next [`AHEAD_BYTES`] not in memory are
//! planned under the file's lock ([`Container::plan_ahead`]) and handed to [`AHEAD_WORKERS`]
//! threads, which read and decode them without that lock, on a file descriptor of their own,
//! and cache them if the file did not change meanwhile ([`Container::install`]). A READ
//! that finds its extent cached only copies it.
//!
//! A read-ahead is a hint: when the queue is full the plan is dropped, and any failure
//! leaves the extent to the READ, which reports it. The statistics file counts extents
//! loaded by their reader and ahead (`reads`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use squeezefs_container::{AheadPlan, Container, FileStorage};

use crate::inode::Inode;
use crate::lifecycle::state::OpenFile;

/// How far ahead of a sequential reader extents are loaded: eight 128 KiB extents (the
/// file's extent cache grows by as much while it is read ahead). Cold read of a 1.36 GB
/// file, 4 workers: 512 KiB 1.60 s, 1 MiB 1.41 s, 2 MiB 1.45 s.
pub const AHEAD_BYTES: u64 = 1 << 20;
/// Threads that load extents ahead. Most of a load is waiting for the backing file, so more
/// threads than cores pay: cold read of a 1.36 GB file on 2 cores, 1 MiB ahead: 2 workers
/// 2.15 s, 4 1.41 s, 6 1.35 s, 8 1.39 s (no read-ahead: 3.35 s).
pub const AHEAD_WORKERS: usize = 4;
/// Extents waiting for a worker, beyond which plans are dropped.
const QUEUE: usize = 64;

/// Where an open file's reader is (per [`OpenFile`]).
#[derive(Debug, Default)]
pub struct Stream {
    /// Where the last READ ended.
    next: u64,
    /// Byte offset up to which extents were planned.
    planned_to: u64,
    /// A descriptor of the backing file for the workers (made at the first plan).
    reader: Option<Arc<FileStorage>>,
    /// Extents queued or being loaded: the job's number and the bytes the extent holds.
    in_flight: Vec<(u64, u64, u64)>,
}

impl Stream {
    /// Records a READ of `len` bytes at `off`. When it continues the stream (the kernel may
    /// answer two READs of one stream out of order: a gap of up to two READs counts),
    /// returns the byte range whose extents to plan; a jump resets the stream.
    pub fn advance(&mut self, off: u64, len: u64) -> Option<(u64, u64)> {
        let end = off.saturating_add(len);
        let slack = 2 * len.max(128 << 10);
        if off.abs_diff(self.next) > slack || len == 0 {
            self.next = end;
            self.planned_to = 0;
            return None;
        }
        self.next = self.next.max(end);
        let to = self.next.saturating_add(AHEAD_BYTES);
        let from = self.next.max(self.planned_to);
        if from >= to {
            return None;
        }
        self.planned_to = to;
        Some((from, to))
    }

    /// Whether an extent holding some of `[off, end)` is being loaded ahead.
    fn in_flight(&self, off: u64, end: u64) -> bool {
        self.in_flight.iter().any(|&(_, a, b)| a < end && off < b)
    }

    /// The workers' descriptor of `c`'s backing file (`None`: none could be made, e.g. at
    /// the open-file limit; then there is no read-ahead).
    fn reader(&mut self, c: &mut Container<FileStorage>) -> Option<Arc<FileStorage>> {
        if self.reader.is_none() {
            let file = c.storage().file().try_clone().ok()?;
            c.reserve_ahead(AHEAD_BYTES);
            self.reader = Some(Arc::new(FileStorage::new(file)));
        }
        self.reader.clone()
    }
}

/// Numbers the jobs, so a worker only ever clears its own mark (the file's state may have
/// been closed and opened again meanwhile).
static JOBS: AtomicU64 = AtomicU64::new(1);

struct Job {
    id: u64,
    inode: Arc<Inode>,
    reader: Arc<FileStorage>,
    plan: AheadPlan,
}

/// The read-ahead workers and their queue.
pub struct ReadAhead {
    tx: SyncSender<Job>,
    rx: Mutex<Option<Receiver<Job>>>,
}

impl Default for ReadAhead {
    fn default() -> ReadAhead {
        let (tx, rx) = sync_channel(QUEUE);
        ReadAhead {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl ReadAhead {
    /// Starts the workers (once; they end with the daemon).
    pub fn start(&self) -> std::io::Result<()> {
        let Some(rx) = self.rx.lock().unwrap().take() else {
            return Ok(());
        };
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..AHEAD_WORKERS {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("squeezefs-ahead-{i}"))
                .spawn(move || loop {
                    // The queue's lock is held only to take a job.
                    let job = rx.lock().unwrap().recv();
                    match job {
                        Ok(job) => run(job),
                        Err(_) => return,
                    }
                })?;
        }
        Ok(())
    }

    /// After a READ of `len` bytes at `off` on `inode` (whose state is `open`, locked by
    /// the caller): plans and queues the extents a sequential reader wants next.
    pub fn after_read(&self, inode: &Arc<Inode>, of: &mut OpenFile, off: u64, len: usize) {
        let Some((from, to)) = of.stream.advance(off, len as u64) else {
            return;
        };
        let plans = of.container.plan_ahead(from, to);
        if plans.is_empty() {
            return;
        }
        let Some(reader) = of.stream.reader(&mut of.container) else {
            return;
        };
        for plan in plans {
            let id = JOBS.fetch_add(1, Ordering::Relaxed);
            let (a, b) = plan.range();
            let job = Job {
                id,
                inode: inode.clone(),
                reader: reader.clone(),
                plan,
            };
            match self.tx.try_send(job) {
                Ok(()) => of.stream.in_flight.push((id, a, b)),
                // Busy: the READ loads the extent itself. Workers gone (never started, as in
                // unit tests): the same.
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }

    /// Before a READ of `[off, off + len)`: waits, with the file's lock `open` released
    /// meanwhile, until no extent it needs is being loaded ahead (so the READ copies it
    /// rather than loading it a second time). A worker always clears its mark; the bound
    /// only caps a wait on a backing file that stopped answering.
    pub fn wait_for<'a>(
        &self,
        inode: &'a Inode,
        mut open: MutexGuard<'a, Option<OpenFile>>,
        off: u64,
        len: usize,
    ) -> MutexGuard<'a, Option<OpenFile>> {
        let end = off.saturating_add(len as u64);
        while open.as_ref().is_some_and(|of| of.stream.in_flight(off, end)) {
            let (guard, timeout) = inode.file.fetched.wait_timeout(open, WAIT_MAX).unwrap();
            open = guard;
            if timeout.timed_out() {
                break;
            }
        }
        open
    }
}

/// The longest a READ waits for an extent loaded ahead before loading it itself.
const WAIT_MAX: Duration = Duration::from_secs(5);

/// Loads one planned extent without the file's lock, then, under it, installs it and clears
/// its mark (whatever happened), and wakes the READs waiting for it.
fn run(job: Job) {
    let fetched = job.plan.fetch(&*job.reader);
    let mut open = job.inode.file.open.lock().unwrap();
    if let Some(of) = open.as_mut() {
        of.stream.in_flight.retain(|&(id, _, _)| id != job.id);
        if let Ok(Some(f)) = fetched {
            of.container.install(f);
        }
    }
    drop(open);
    job.inode.file.fetched.notify_all();
}
