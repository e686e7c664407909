//! The containers kept after a lookup (rule 6 of [`state`](super::state)): the queue, its
//! size, and closing the oldest. Filled by `Files::with_kept` (`access.rs`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use super::state::Closed;
use crate::inode::{Inode, Inodes};

/// Most containers kept open without a handle after a lookup (fewer under a low
/// open-file limit: [`Files::fit_fd_limit`](super::Files::fit_fd_limit)).
pub const IDLE_MAX: usize = 128;

/// The queue of kept containers (rule 6 of [`state`](super::state)).
pub struct Kept {
    pub(super) inodes: Arc<Inodes>,
    pub(super) queue: Mutex<VecDeque<(u64, Weak<Inode>)>>,
    /// How many are kept: [`IDLE_MAX`], or a sixteenth of the open-file limit if smaller
    /// (two fds each: the container's and its inode's).
    pub(super) max: std::sync::atomic::AtomicUsize,
}

impl Kept {
    /// Closes the oldest kept containers until `keep` are left (those busy or no longer
    /// merely kept are skipped: rule 6).
    pub(super) fn trim(&self, keep: usize) {
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
                    open.closed = Closed::of(&of.container);
                }
                **open = None;
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
