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
//! is the same call on the same inode, which the job holds (a FORGET meanwhile cannot lose
//! it). The statistics file's commit (`Files::commit_now`) waits for handed-on RELEASEs as
//! for any under way; unmount finishes them before the final write-out
//! ([`super::Core::flush_all`]). The queue is bounded: with it full, the RELEASE is served
//! where it is. Session threads that do not spin serve their RELEASEs themselves (a hand-on
//! costs a wake-up, which only the spinner's stream is worth).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use crate::inode::Inode;

/// RELEASEs waiting for the closer at most; one more is served by the session thread.
const QUEUE: usize = 256;

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
    pub fn start(&self, to: Weak<dyn Serve>) -> std::io::Result<()> {
        let (tx, rx): (SyncSender<Job>, Receiver<Job>) = sync_channel(QUEUE);
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
