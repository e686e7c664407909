//! Last closes the spinning session thread hands on (issue 44).
//!
//! A RELEASE is a request nobody waits for: the kernel sends it in the background once
//! `close` has returned. But serving the last one of a file is work — the owner, mode and
//! times waiting in memory set on the backing file (rule 7 of `lifecycle::state`), the dirty
//! extents compressed and written, a small file appended to a pack (whose block is compressed
//! when it fills): ~80 µs a file in a tree extract here. While the channel spins, the spinning
//! thread serves every request alone (`spin/park.rs`), so the caller's next request (tar's
//! LOOKUP of the next file) waited behind that work. So the spinner answers a RELEASE at once
//! and hands its work to the closer thread, which runs on the CPU the caller leaves idle
//! while it waits for its replies.
//!
//! Nothing else changes: a RELEASE was already served concurrently with the requests after
//! it (any session thread could take it, and the kernel does not wait for it), and the work
//! is the same call on the same inode, which the job holds. One thing the kernel did
//! order: it holds the inode until RELEASE is answered, so its FORGET used to come after
//! the write-out; now it may come before, and the write-out lets the inode go itself when
//! the kernel forgot it meanwhile (`Files::release`). The statistics file's commit (`Files::commit_now`) waits for handed-on RELEASEs as
//! for any under way; unmount finishes them before the final write-out
//! ([`super::Core::flush_all`]). The queue is bounded ([`queue_for`]): with it full, the
//! RELEASE is served where it is. Session threads that do not spin serve their RELEASEs themselves (a hand-on
//! costs a wake-up, which only the spinner's stream is worth).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use crate::inode::Inode;

/// RELEASEs waiting for the closer at most, for a process that may open `fd_limit`
/// files: each job keeps its file's fds open, so a sixteenth of the limit, as the group
/// commit's queue (`lifecycle::commit`), within 16..=256. One more is served in place.
pub(super) fn queue_for(fd_limit: u64) -> usize {
    (fd_limit / 16).clamp(16, 256) as usize
}

/// One last-close's work: [`crate::lifecycle::Files::release`] of `inode`.
pub(super) struct Job {
    pub ino: u64,
    pub inode: Arc<Inode>,
    pub writable: bool,
}

/// What serves the jobs (the mount's core; the tests' own).
pub(super) trait Serve: Send + Sync {
    fn serve(&self, job: Job);
}

/// The closer thread and its queue.
#[derive(Default)]
pub(super) struct Closer {
    /// Lock order: taken alone.
    tx: Mutex<Option<SyncSender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// RELEASEs handed on, and those served in place for a full queue.
    handed: AtomicU64,
    full: AtomicU64,
}

impl Closer {
    /// Starts the thread; it holds `to` weakly (the core holds the closer).
    pub fn start(&self, to: Weak<dyn Serve>, queue: usize) -> std::io::Result<()> {
        let (tx, rx): (SyncSender<Job>, Receiver<Job>) = sync_channel(queue);
        let t = std::thread::Builder::new()
            .name("squeezefs-close".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    match to.upgrade() {
                        Some(s) => s.serve(job),
                        None => return,
                    }
                }
            })?;
        *self.tx.lock().unwrap() = Some(tx);
        *self.thread.lock().unwrap() = Some(t);
        Ok(())
    }

    /// Queues `job`; gives it back when the closer is not running or its queue is full.
    pub fn hand_on(&self, job: Job) -> Result<(), Job> {
        let tx = self.tx.lock().unwrap();
        let Some(tx) = tx.as_ref() else { return Err(job) };
        match tx.try_send(job) {
            Ok(()) => {
                self.handed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(TrySendError::Full(job)) => {
                self.full.fetch_add(1, Ordering::Relaxed);
                Err(job)
            }
            Err(TrySendError::Disconnected(job)) => Err(job),
        }
    }

    /// The statistics file's `closer`: `{"handed_on", "queue_full"}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "handed_on": self.handed.load(Ordering::Relaxed),
            "queue_full": self.full.load(Ordering::Relaxed),
        })
    }

    /// Serves every job queued, then ends the thread (unmount; no RELEASE comes after).
    pub fn finish(&self) {
        drop(self.tx.lock().unwrap().take());
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Slow {
        served: AtomicUsize,
        gate: Mutex<()>,
    }
    impl Serve for Slow {
        fn serve(&self, _job: Job) {
            let _g = self.gate.lock().unwrap();
            self.served.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn job() -> Job {
        Job {
            ino: 2,
            inode: Arc::new(Inode::for_tests()),
            writable: true,
        }
    }

    /// A full queue gives the job back; `finish` serves every job queued before it ends
    /// the thread; a closer not started, or finished, takes nothing.
    #[test]
    fn a_full_queue_gives_the_job_back_and_finish_serves_every_job_queued() {
        assert_eq!(queue_for(1024), 64);
        assert_eq!(queue_for(100), 16);
        assert_eq!(queue_for(1 << 20), 256);
        let c = Closer::default();
        assert!(c.hand_on(job()).is_err(), "not started");
        let slow = Arc::new(Slow {
            served: AtomicUsize::new(0),
            gate: Mutex::new(()),
        });
        let gate = slow.gate.lock().unwrap();
        let to: Weak<dyn Serve> = Arc::downgrade(&slow) as _;
        c.start(to, 4).unwrap();
        // The thread takes one and waits at the gate; four more fill the queue.
        let mut queued = 0;
        let mut refused = 0;
        for _ in 0..20 {
            match c.hand_on(job()) {
                Ok(()) => queued += 1,
                Err(_) => refused += 1,
            }
        }
        assert!((4..=5).contains(&queued), "{queued} queued");
        assert_eq!(refused, 20 - queued);
        assert_eq!(c.to_json()["queue_full"], refused);
        drop(gate);
        c.finish();
        assert_eq!(slow.served.load(Ordering::SeqCst), queued);
        assert!(c.hand_on(job()).is_err(), "finished");
    }
}
