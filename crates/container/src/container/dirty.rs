//! The dirty budget: how many decompressed bytes written but not yet compressed all
//! containers of a mount may hold in memory together ([`DirtyBudget`]), and each
//! container's share of it ([`DirtyShare`]).
//!
//! Extents writes covered whole go out a batch at a time (`data.rs`, `WRITE_BATCH`); a
//! partial write only marks its extent dirty. Extents stay dirty until the file is written back (last close,
//! fsync, the group commit) or the budget runs out, when the writer that finds it over the
//! limit writes out its own dirty extents. A random writer of a large file thus has each
//! extent compressed once per write-back rather than once per page (as btrfs compresses
//! its dirty page cache at writeback), and what a crash can lose is bounded as the kernel's
//! dirty page cache bounds it: by the budget, and by the write-back at last close and fsync.
//!
//! The budget is shared, and counted with atomics so containers never lock each other.
//! A container's own count is incremental (an extent becoming dirty adds one) and counted
//! again after everything that cleans or drops dirty extents: a write-out, a truncate, a
//! punch, a hand-off to a pack (`Packed::recount`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The default budget of a container opened without one ([`super::Options::dirty`]): what
/// one file held before budgets were shared (offline tools, tests).
pub const DEFAULT_DIRTY_BYTES: usize = 8 << 20;

/// How long dirty bytes may wait in memory before a write-behind takes them (the mount's
/// housekeeping does it; the containers only keep the clock), as the kernel writes its
/// dirty pages back after `vm.dirty_expire_centisecs` (30 s).
pub const DEFAULT_DIRTY_EXPIRE: Duration = Duration::from_secs(30);

/// Dirty bytes all containers sharing it may hold before a writer writes its own out, and
/// how long they may wait before a write-behind.
#[derive(Debug)]
pub struct DirtyBudget {
    limit: usize,
    expire: Duration,
    used: AtomicUsize,
}

impl DirtyBudget {
    pub fn new(limit: usize) -> Arc<DirtyBudget> {
        DirtyBudget::with_expire(limit, DEFAULT_DIRTY_EXPIRE)
    }

    pub fn with_expire(limit: usize, expire: Duration) -> Arc<DirtyBudget> {
        Arc::new(DirtyBudget::unshared(limit, expire))
    }

    fn unshared(limit: usize, expire: Duration) -> DirtyBudget {
        DirtyBudget {
            limit,
            expire,
            used: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn expire(&self) -> Duration {
        self.expire
    }

    /// Dirty bytes held now by all containers sharing the budget.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn over(&self) -> bool {
        self.used() > self.limit
    }
}

impl Default for DirtyBudget {
    fn default() -> DirtyBudget {
        DirtyBudget::unshared(DEFAULT_DIRTY_BYTES, DEFAULT_DIRTY_EXPIRE)
    }
}

/// One container's dirty bytes, counted in its budget; given back when dropped.
#[derive(Debug)]
pub(super) struct DirtyShare {
    budget: Arc<DirtyBudget>,
    bytes: usize,
    /// Since when some of them have been dirty (the write-behind's clock).
    since: Option<Instant>,
}

impl DirtyShare {
    pub(super) fn new(budget: Arc<DirtyBudget>) -> DirtyShare {
        DirtyShare {
            budget,
            bytes: 0,
            since: None,
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Sets this container's count to `bytes` (a recount).
    pub(super) fn set(&mut self, bytes: usize) {
        if bytes >= self.bytes {
            self.budget.used.fetch_add(bytes - self.bytes, Ordering::Relaxed);
        } else {
            self.budget.used.fetch_sub(self.bytes - bytes, Ordering::Relaxed);
        }
        self.bytes = bytes;
        if bytes == 0 {
            self.since = None;
        } else if self.since.is_none() {
            self.since = Some(Instant::now());
        }
    }

    /// Since when the container has held dirty bytes (none: it holds none).
    pub(super) fn since(&self) -> Option<Instant> {
        self.since
    }

    /// One more extent of `len` bytes became dirty.
    pub(super) fn add(&mut self, len: usize) {
        self.set(self.bytes + len);
    }

    /// Whether this container should write its dirty extents out now: the budget is spent.
    pub(super) fn must_write_out(&self) -> bool {
        self.bytes > 0 && self.budget.over()
    }
}

impl Drop for DirtyShare {
    fn drop(&mut self) {
        self.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_give_back_when_dropped() {
        let b = DirtyBudget::new(100);
        let mut x = DirtyShare::new(b.clone());
        let mut y = DirtyShare::new(b.clone());
        assert!(x.since().is_none());
        x.add(60);
        let t = x.since().expect("dirty");
        x.add(1);
        x.set(60);
        assert_eq!(x.since(), Some(t), "dirty since its first dirty byte");
        y.add(30);
        assert_eq!(b.used(), 90);
        assert!(!x.must_write_out());
        y.add(30);
        assert!(x.must_write_out() && y.must_write_out());
        x.set(0);
        assert!(x.since().is_none());
        assert_eq!(b.used(), 60);
        assert!(!x.must_write_out(), "nothing of its own to write out");
        drop(y);
        assert_eq!(b.used(), 0);
    }
}
