//! Group commit of superblocks. Closing a file writes its extents at once (errors reach
//! `close`), but a container's superblock may only be written once those extents are
//! durable. Instead of one `fdatasync` per closed file, closed files wait here and one
//! `syncfs` of the backing filesystem covers a whole batch; then each superblock is
//! written, and a second `syncfs` makes them durable, after which each file's older
//! superblock copy is punched (so a small file rewritten takes one block, not two). A file is
//! committed within [`INTERVAL`] of its close, or sooner when [`Committer::max_pending`]
//! files wait (each holds an open fd).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use log::{error, warn};

use squeezefs_container::pack::Packs;
use squeezefs_container::{Ticket, WriteBack};

use super::state::{Closed, OpenFile};
use crate::inode::{Inode, Inodes};

/// How long a closed file may wait for its superblock.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// A closed file waiting for the group commit, with what its write-back left to do.
type Queued = (u64, Arc<Inode>, Ticketed);

/// What a queued file's write-back left: never [`WriteBack::Done`] (such a file is not
/// queued), so the commit knows whether to commit a superblock or only settle.
#[derive(Clone, Copy)]
pub enum Ticketed {
    Commit(Ticket),
    Settle(Ticket),
}

impl Ticketed {
    /// The ticket a write-back left, or `None` when nothing is left to do.
    pub fn from(w: WriteBack) -> Option<Ticketed> {
        match w {
            WriteBack::Done => None,
            WriteBack::Commit(t) => Some(Ticketed::Commit(t)),
            WriteBack::Settle(t) => Some(Ticketed::Settle(t)),
        }
    }
}

#[derive(Default)]
struct Queue {
    items: Vec<Queued>,
    since: Option<Instant>,
    stop: bool,
    /// The commit thread is committing a batch it took (`Committer::commit_now` waits).
    committing: bool,
}

pub struct Committer {
    q: Mutex<Queue>,
    /// The mount's packs: open blocks are written before each batch's `syncfs`, which then
    /// makes them durable too.
    packs: Option<Arc<Packs>>,
    cv: Condvar,
    /// Signalled when the commit thread takes a batch: closers waiting for room go on.
    room: Condvar,
    /// Signalled when the commit thread has committed the batch it took.
    committed: Condvar,
    max_pending: AtomicUsize,
    /// Commits done and syncs issued (for tests and statistics).
    pub commits: AtomicUsize,
    pub syncs: AtomicUsize,
}

impl Committer {
    pub fn new(packs: Option<Arc<Packs>>) -> Arc<Committer> {
        Arc::new(Committer {
            q: Mutex::new(Queue::default()),
            packs,
            cv: Condvar::new(),
            room: Condvar::new(),
            committed: Condvar::new(),
            max_pending: AtomicUsize::new(1024),
            commits: AtomicUsize::new(0),
            syncs: AtomicUsize::new(0),
        })
    }

    /// Fits the batch size to the open-file limit: a waiting file holds two fds (its
    /// container's and its inode's, which the fd cache keeps while the file is in
    /// memory), and two batches may wait (one committing): a quarter of the limit.
    pub fn fit_fd_limit(&self, limit: u64) {
        self.max_pending
            .store((limit / 16).clamp(16, 1024) as usize, Ordering::Relaxed);
    }

    /// Queues a closed file whose superblock (or whose replaced copies) wait for a sync.
    /// A closer (never the commit thread) waits while a full batch is queued: every queued
    /// file holds an fd, and files closed faster than a batch commits (two `syncfs`) would
    /// otherwise pile up past the open-file limit. So at most two batches hold fds: the
    /// one being committed and the one waiting.
    pub fn push(&self, ino: u64, inode: Arc<Inode>, left: Ticketed) {
        let mut q = self.q.lock().unwrap();
        while !q.stop && q.items.len() >= self.max_pending.load(Ordering::Relaxed) {
            self.cv.notify_all();
            q = self.room.wait(q).unwrap();
        }
        q.items.push((ino, inode, left));
        q.since.get_or_insert_with(Instant::now);
        // The thread wakes to start the interval (first item) or for a full batch.
        if q.items.len() == 1 || q.items.len() >= self.max_pending.load(Ordering::Relaxed) {
            self.cv.notify_all();
        }
    }

    /// The commit thread: waits for a batch (full, old enough, or stop), commits it.
    pub fn run(&self, inodes: &Inodes) {
        loop {
            let batch = {
                let mut q = self.q.lock().unwrap();
                loop {
                    if q.stop || q.items.len() >= self.max_pending.load(Ordering::Relaxed) {
                        break;
                    }
                    match q.since {
                        Some(t) if t.elapsed() >= INTERVAL => break,
                        Some(t) => q = self.cv.wait_timeout(q, INTERVAL - t.elapsed()).unwrap().0,
                        None => q = self.cv.wait(q).unwrap(),
                    }
                }
                if q.stop && q.items.is_empty() {
                    return;
                }
                q.since = None;
                q.committing = true;
                self.room.notify_all();
                std::mem::take(&mut q.items)
            };
            // Cleared however the batch ends (a panic too), so `commit_now` never hangs.
            let _done = Committed(self);
            self.commit(inodes, batch);
        }
    }

    /// Commits everything queued now, in the calling thread (before the statistics file
    /// is rendered, so `squeezefs stats` on a mount sees every closed file as closed).
    /// A batch the commit thread took is waited for first: its files are not settled
    /// until it ends, and what it queues again is then committed here.
    pub fn commit_now(&self, inodes: &Inodes) {
        let batch = {
            let mut q = self.q.lock().unwrap();
            while q.committing {
                q = self.committed.wait(q).unwrap();
            }
            q.since = None;
            self.room.notify_all();
            std::mem::take(&mut q.items)
        };
        if !batch.is_empty() {
            self.commit(inodes, batch);
        }
    }

    /// Commits everything queued now (unmount), and stops the thread.
    pub fn stop(&self) {
        self.q.lock().unwrap().stop = true;
        self.cv.notify_all();
        self.room.notify_all();
    }

    fn commit(&self, inodes: &Inodes, batch: Vec<Queued>) {
        // Blocks still open go out first, so this one sync covers them; a file whose block
        // failed finds out at its commit (`Packs::durable`).
        let mark = self.packs.as_ref().map(|p| p.seal_all());
        if let Some(Err(e)) = &mark {
            error!("writing pack blocks failed: {e}");
        }
        let synced = inodes.syncfs();
        if let (Ok(()), Some(p), Some(Ok(m))) = (&synced, &self.packs, mark) {
            p.synced(m);
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &synced {
            error!("syncfs of the backing filesystem failed: {e}; syncing files one by one");
        }
        let mut again = Vec::new();
        // Files to settle after a second `syncfs` (their new superblocks durable then),
        // when each older copy is punched (a small file takes one block).
        let mut to_settle = Vec::new();
        for (ino, inode, left) in batch {
            let mut open = inode.file.open.lock().unwrap();
            let Some(of) = open.as_mut() else { continue };
            let r = match (&synced, left) {
                (Ok(()), Ticketed::Commit(t)) => of.container.commit(t),
                (Ok(()), Ticketed::Settle(t)) => Ok(Some(t)),
                (Err(_), _) => of.container.fsync().map(|()| Some(of.container.ticket())),
            };
            // A superblock or location record written: the times set on the file go back.
            keep_times(inodes, &inode, of);
            match r {
                Ok(Some(t)) => {
                    if matches!(left, Ticketed::Commit(_)) {
                        self.commits.fetch_add(1, Ordering::Relaxed);
                    }
                    to_settle.push((ino, inode.clone(), t));
                    continue;
                }
                Ok(None) => {
                    // Changed since its write-back (or committed by an fsync meanwhile):
                    // a closed file is written back again and waits for the next batch.
                    if of.handles == 0 {
                        let written = of.container.write_back();
                        keep_times(inodes, &inode, of);
                        match written {
                            Ok(w) => match Ticketed::from(w) {
                                Some(Ticketed::Commit(t)) => {
                                    again.push((ino, inode.clone(), Ticketed::Commit(t)));
                                    continue;
                                }
                                // Written out whole (its superblock too): settled after
                                // the second sync like the others.
                                Some(Ticketed::Settle(t)) => {
                                    to_settle.push((ino, inode.clone(), t));
                                    continue;
                                }
                                None => {}
                            },
                            Err(e) => {
                                inode.file.lost_write(e.errno());
                                error!("{}: write-back failed: {e}", inodes.describe(&inode))
                            }
                        }
                    }
                }
                Err(e) => {
                    inode.file.lost_write(e.errno());
                    error!(
                        "{}: committing the superblock failed: {e}",
                        inodes.describe(&inode)
                    )
                }
            }
            drop_if_closed(inodes, ino, open);
        }
        if !to_settle.is_empty() {
            let second = inodes.syncfs();
            self.syncs.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = &second {
                error!("syncfs of the backing filesystem failed: {e}; superblocks stay in pairs");
            }
            for (ino, inode, ticket) in to_settle {
                let mut open = inode.file.open.lock().unwrap();
                let Some(of) = open.as_mut() else { continue };
                if second.is_ok() {
                    if let Err(e) = of.container.settle(ticket) {
                        error!(
                            "{}: removing the older superblock copy failed: {e}",
                            inodes.describe(&inode)
                        );
                    }
                }
                // Whatever waits goes on the file before its state may go.
                keep_times(inodes, &inode, of);
                drop_if_closed(inodes, ino, open);
            }
        }
        if !again.is_empty() {
            // The commit thread itself: no waiting for room it alone makes.
            let mut q = self.q.lock().unwrap();
            q.since.get_or_insert_with(Instant::now);
            q.items.extend(again);
        }
    }
}

/// Marks the commit thread's batch as ended when dropped.
struct Committed<'a>(&'a Committer);

impl Drop for Committed<'_> {
    fn drop(&mut self) {
        let mut q = self.0.q.lock().unwrap_or_else(|e| e.into_inner());
        q.committing = false;
        self.0.committed.notify_all();
    }
}

/// A file nobody has open any more: its state (and its fd) goes, its size is remembered.
fn drop_if_closed(inodes: &Inodes, ino: u64, mut open: crate::lifecycle::state::OpenGuard<'_>) {
    let Some(of) = open.as_ref() else { return };
    if of.handles == 0 {
        open.closed = Closed::of(&of.container);
        **open = None;
        drop(open);
        inodes.forget(ino, 0);
    }
}

/// [`Files::keep_times`](super::Files::keep_times) (rule 7 of [`state`](super::state), a
/// failure logged with the file's name), callable without `Files`: the group commit puts
/// the times back after its own calls.
pub fn keep_times(inodes: &Inodes, inode: &Arc<Inode>, of: &mut OpenFile) {
    if let Err(e) = of.keep_times() {
        lost_meta(inodes, inode, &e);
    }
}

/// Times, owner or mode set on a file, whose caller was answered before they went on the
/// backing file, could not be put there: logged with the file's name and kept for its
/// next fsync, as a lost write is (rule 10).
pub fn lost_meta(inodes: &Inodes, inode: &Arc<Inode>, e: &std::io::Error) {
    warn!(
        "{}: cannot put the times, owner or mode set on it on the backing file: {e}",
        inodes.describe(inode)
    );
    inode.file.lost_write(e.raw_os_error().unwrap_or(libc::EIO));
}
