//! Filling the kernel's page cache with whole extents (issue 29): after a READ decoded an
//! extent, the rest of it is handed to the kernel (`FUSE_NOTIFY_STORE`), as btrfs keeps
//! every page of an extent it decompressed. A random reader then finds the neighbouring
//! pages cached instead of making the daemon decode the same extent again for each.
//!
//! This module holds the policy that does not depend on the file: whether memory allows it
//! (never while the system is short of memory: the pages are clean and reclaimable, but
//! allocating them under pressure would only push out pages someone uses), and the
//! counters the statistics file shows. Which bytes may be stored, and the rule that keeps
//! a store from ever overwriting newer data, are the file lifecycle's (rule 11 of
//! `lifecycle::state`, `lifecycle::spill`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier};
use serde_json::{json, Value};

use crate::lifecycle::Spill;

/// Stores waiting for the store thread; beyond this many, new ones are dropped (at most
/// this many extents' bytes wait in memory).
const QUEUE: usize = 16;

/// How long one look at `/proc/meminfo` is trusted.
const RECHECK: Duration = Duration::from_secs(1);
/// Stores stop while less than this share of memory (`MemAvailable / MemTotal`) is free…
const MIN_AVAILABLE_FRACTION: u64 = 8;
/// …or less than this many bytes.
const MIN_AVAILABLE_BYTES: u64 = 256 << 20;

/// The counters and the memory gauge of one mount, and the queue of its store thread.
pub struct PageCache {
    enabled: bool,
    queue: Option<SyncSender<(INodeNo, Spill)>>,
    counts: Arc<Counts>,
    plenty: AtomicBool,
    checked: Mutex<Option<Instant>>,
}

/// What the store thread and the READs count.
#[derive(Default)]
pub struct Counts {
    /// Notifications sent, and the bytes they carried.
    pub stores: AtomicU64,
    pub bytes: AtomicU64,
    /// Extents not stored because memory was short.
    pub skipped_low_memory: AtomicU64,
    /// Stores the kernel refused (the inode was gone from its cache, or memory ran out).
    pub refused: AtomicU64,
    /// Extents not stored because the store thread was behind.
    pub skipped_busy: AtomicU64,
    /// Files whose first bytes were stored ahead of a reader walking their directory
    /// (`crate::siblings`), and those bytes (also counted in `stores` and `bytes`).
    pub ahead_files: AtomicU64,
    pub ahead_bytes: AtomicU64,
}

impl PageCache {
    /// `enabled: false` (mount option `nofill_cache`) never stores. The store thread sends
    /// through `notifier` once the session has set it.
    pub fn new(enabled: bool, notifier: Arc<OnceLock<Notifier>>) -> std::io::Result<PageCache> {
        let counts = Arc::new(Counts::default());
        let queue = if enabled {
            let (tx, rx) = sync_channel(QUEUE);
            let c = counts.clone();
            std::thread::Builder::new()
                .name("squeezefs-store".into())
                .spawn(move || store_thread(rx, notifier, c))?;
            Some(tx)
        } else {
            None
        };
        Ok(PageCache {
            enabled,
            queue,
            counts,
            plenty: AtomicBool::new(true),
            checked: Mutex::new(None),
        })
    }

    /// Whether stores are on (`fill_cache`, the default).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Hands `spill` to the store thread (dropped, which lets the file change again, when
    /// the thread is behind).
    pub fn send(&self, ino: INodeNo, spill: Spill) {
        let Some(q) = &self.queue else { return };
        match q.try_send((ino, spill)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts.skipped_busy.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether an extent may be stored now: enabled, and memory not short (looked up at
    /// most once a second; a failed look counts as short).
    pub fn may_store(&self) -> bool {
        if !self.enabled {
            return false;
        }
        if let Ok(mut at) = self.checked.try_lock() {
            if at.is_none_or(|t| t.elapsed() >= RECHECK) {
                *at = Some(Instant::now());
                let plenty = std::fs::read_to_string("/proc/meminfo")
                    .ok()
                    .and_then(|m| memory_plenty(&m))
                    .unwrap_or(false);
                self.plenty.store(plenty, Ordering::Relaxed);
            }
        }
        let plenty = self.plenty.load(Ordering::Relaxed);
        if !plenty {
            self.counts.skipped_low_memory.fetch_add(1, Ordering::Relaxed);
        }
        plenty
    }

    /// The statistics file's `page_cache` object.
    pub fn to_json(&self) -> Value {
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        json!({
            "enabled": self.enabled,
            "stores": get(&c.stores),
            "bytes": get(&c.bytes),
            "skipped_low_memory": get(&c.skipped_low_memory),
            "skipped_busy": get(&c.skipped_busy),
            "refused": get(&c.refused),
            "ahead_files": get(&c.ahead_files),
            "ahead_bytes": get(&c.ahead_bytes),
        })
    }
}

/// The store thread: sends each spill's pieces (`FUSE_NOTIFY_STORE`), then drops it, which
/// lets its file change again. It may wait for a page the kernel holds locked for a READ
/// still queued; the session threads answer that READ meanwhile, since none of them ever
/// waits for this thread (rule 11 of `lifecycle::state`).
fn store_thread(rx: Receiver<(INodeNo, Spill)>, notifier: Arc<OnceLock<Notifier>>, c: Arc<Counts>) {
    for (ino, spill) in rx {
        let Some(n) = notifier.get() else { continue };
        let mut sent = 0;
        for (off, bytes) in spill.pieces() {
            if n.store(ino, off, bytes).is_err() {
                c.refused.fetch_add(1, Ordering::Relaxed);
                break;
            }
            c.stores.fetch_add(1, Ordering::Relaxed);
            c.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            sent += bytes.len() as u64;
        }
        if spill.ahead() && sent > 0 {
            c.ahead_files.fetch_add(1, Ordering::Relaxed);
            c.ahead_bytes.fetch_add(sent, Ordering::Relaxed);
        }
    }
}

/// From `/proc/meminfo`: whether `MemAvailable` is at least an eighth of `MemTotal` and at
/// least 256 MiB (`None` when either line is missing).
fn memory_plenty(meminfo: &str) -> Option<bool> {
    let field = |name: &str| crate::sys::meminfo_bytes(meminfo, name);
    let total = field("MemTotal:")?;
    let avail = field("MemAvailable:")?;
    Some(avail >= total / MIN_AVAILABLE_FRACTION && avail >= MIN_AVAILABLE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_plenty_above_an_eighth_and_256_mib() {
        let info = |total_kb: u64, avail_kb: u64| {
            format!("MemTotal:       {total_kb} kB\nMemFree:        1 kB\nMemAvailable:   {avail_kb} kB\n")
        };
        assert_eq!(memory_plenty(&info(24 << 20, 20 << 20)), Some(true));
        assert_eq!(
            memory_plenty(&info(24 << 20, 2 << 20)),
            Some(false),
            "under an eighth"
        );
        assert_eq!(
            memory_plenty(&info(1 << 20, 200 << 10)),
            Some(false),
            "under 256 MiB"
        );
        assert_eq!(memory_plenty(&info(1 << 20, 300 << 10)), Some(true));
        assert_eq!(memory_plenty("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn disabled_never_stores() {
        let p = PageCache::new(false, Default::default()).unwrap();
        assert!(!p.may_store());
        assert_eq!(p.to_json()["enabled"], false);
    }
}
