//! Whether the backing filesystem is nearly full — asked by every WRITE, answered from a
//! `statvfs` at most every [`RECHECK`].
//!
//! Why: `close` does not wait for a file's last write-out (FLUSH is off, rule 10 in
//! `lifecycle::state`), so the last, partial extent of a file is compressed and written
//! after `close` has returned, and a failure there reaches only the log and the next
//! `fsync`. A kernel filesystem reserves space at `write` to fail there instead; we cannot
//! reserve space on someone else's filesystem, but we can stop deferring once it runs low:
//! below [`LOW_SPACE`] free, every WRITE writes its extents out at once, so a file that
//! does not fit fails its `write` or `close`, as it did when FLUSH did the write-out. "Free"
//! leaves out what the partial extents waiting in memory (the mount's dirty budget, up to
//! gigabytes for a random writer) may take once written.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Free space on the backing filesystem under which nothing is deferred. Well above what
/// the files closing at one moment leave to write (a partial extent each, at most 1 MiB).
pub const LOW_SPACE: u64 = 256 << 20;

/// How stale the answer may be. At the write speeds of this machine (~300 MB/s) that is
/// well under [`LOW_SPACE`] of data.
pub const RECHECK: Duration = Duration::from_millis(100);

/// The cached answer.
pub struct Space {
    start: Instant,
    /// Milliseconds since `start` of the last check, plus one (0: never checked).
    checked: AtomicU64,
    low: AtomicBool,
}

impl Default for Space {
    fn default() -> Self {
        Space {
            start: Instant::now(),
            checked: AtomicU64::new(0),
            low: AtomicBool::new(false),
        }
    }
}

impl Space {
    /// Whether fewer than [`LOW_SPACE`] bytes are free for us, `free` asked when the last
    /// answer is older than [`RECHECK`]. A failing `free` counts as low (nothing deferred
    /// when in doubt).
    pub fn low(&self, free: impl FnOnce() -> io::Result<u64>) -> bool {
        let now = self.start.elapsed().as_millis() as u64 + 1;
        let last = self.checked.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < RECHECK.as_millis() as u64 {
            return self.low.load(Ordering::Relaxed);
        }
        // One thread re-checks; the others keep the last answer meanwhile.
        if self
            .checked
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return self.low.load(Ordering::Relaxed);
        }
        let low = free().map_or(true, |f| f < LOW_SPACE);
        self.low.store(low, Ordering::Relaxed);
        low
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_follows_free_space_and_is_cached_between_checks() {
        let s = Space::default();
        assert!(!s.low(|| Ok(LOW_SPACE)));
        // Within RECHECK the cached answer stands, whatever the filesystem says.
        assert!(!s.low(|| Ok(0)));
        std::thread::sleep(RECHECK + Duration::from_millis(10));
        assert!(s.low(|| Ok(LOW_SPACE - 1)));
        std::thread::sleep(RECHECK + Duration::from_millis(10));
        assert!(
            s.low(|| Err(io::Error::from_raw_os_error(libc::EIO))),
            "in doubt: low"
        );
    }
}
