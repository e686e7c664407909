//! Loading extents ahead of a sequential reader, off the file's lock.
//!
//! A read of a large file spends its time waiting for the backing file and decompressing,
//! one extent after the other, under the lock the FUSE layer holds on the file. Read-ahead
//! splits a load in three so that work happens on another thread, without that lock:
//!
//! 1. [`Container::plan_ahead`] (under the lock) names extents worth loading: inside the
//!    file, nothing known about them in memory (so nothing of them is dirty or being
//!    written out), and an [`AheadPlan`] remembers the container instance and its change
//!    counter (`epoch`).
//! 2. [`AheadPlan::fetch`] (no lock, any [`Storage`] open on the same backing file) reads
//!    both halves, verifies and decodes the current copy: [`Fetched`].
//! 3. [`Container::install`] (under the lock) caches it only when the container is the
//!    same instance, its epoch has not moved, and the extent may still be loaded ahead
//!    (`Packed::wants_ahead`, the test the plan passed). Every change of an extent's bytes
//!    (a write, a truncate, a punch, a property change) moves the epoch or gives the extent
//!    an entry first; a write-out changes only extents with entries, and the one that moves
//!    a file into a pack (no change of epoch) makes `wants_ahead` false. So bytes fetched
//!    before a change are never installed after it.
//!
//! A read-ahead is only a hint: a hole, a damaged copy or an I/O error installs nothing,
//! and the reader then loads the extent itself, with the checksum errors counted and logged
//! by the one request that answers for them.

use std::sync::atomic::{AtomicU64, Ordering};

use super::cache::{probe_halves, Probed};
use super::state::{DiskState, Mode, Packed};
use super::Container;
use crate::encode::decode_payload_padded;
use crate::format::Geometry;
use crate::storage::Storage;
use crate::Result;

/// Gives each container in memory its own number, so a plan made on one is never installed
/// into another opened later on the same file (their epochs both start at 0).
static INSTANCES: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_instance() -> u64 {
    INSTANCES.fetch_add(1, Ordering::Relaxed)
}

/// An extent to load ahead, and the state of the container it was planned on.
#[derive(Clone, Debug)]
pub struct AheadPlan {
    instance: u64,
    epoch: u64,
    geo: Geometry,
    idx: u64,
    /// Bytes of the extent inside the file (the rest reads as zeros).
    valid: usize,
}

/// A verified, decoded copy, ready for [`Container::install`].
#[derive(Debug)]
pub struct Fetched {
    plan: AheadPlan,
    state: DiskState,
    data: Box<[u8]>,
}

impl AheadPlan {
    /// The bytes of the file the extent holds: `[start, end)`.
    pub fn range(&self) -> (u64, u64) {
        (self.idx << self.geo.shift, (self.idx + 1) << self.geo.shift)
    }

    /// Reads, verifies and decodes the extent's current copy from `st` (the same backing
    /// file as the container's). `None`: a hole, or a half that is damaged (left to the
    /// reader, which reports it).
    pub fn fetch<S: Storage>(&self, st: &S) -> Result<Option<Fetched>> {
        let Probed { state, copy, damage } = probe_halves(st, self.geo, self.idx)?;
        let Some((h, payload)) = copy.filter(|_| damage.is_empty()) else {
            return Ok(None);
        };
        let Ok(mut data) = decode_payload_padded(&h, &payload, 1 << self.geo.shift) else {
            return Ok(None);
        };
        data[self.valid..].fill(0);
        Ok(Some(Fetched {
            plan: self.clone(),
            state,
            data,
        }))
    }
}

impl Packed {
    /// Whether extent `idx` may be loaded ahead now — when planned, and again when
    /// installed: inside the file, held by the backing file's own halves (not a pack, an
    /// inline superblock or a stale range: `flush_packed` moves a file into a pack without
    /// a change of epoch), and nothing of it in memory (nothing dirty, nothing being written
    /// out, not loaded by a READ meanwhile).
    fn wants_ahead(&self, idx: u64) -> bool {
        let own_halves =
            !self.sb_inline && self.loc.is_none() && !self.loc_unloaded && self.loc_pending.is_none();
        own_halves && idx < self.extent_count() && !self.exts.contains_key(&idx) && !self.is_stale(idx)
    }
}

impl<S: Storage> Container<S> {
    /// The extents starting in `[from, to)` (bytes) that a sequential reader will want
    /// next and that are not in memory (see the module's documentation). Empty for a plain
    /// file, a packed or inline one (its one extent comes with its superblock or pack), and
    /// past the end.
    pub fn plan_ahead(&self, from: u64, to: u64) -> Vec<AheadPlan> {
        let Mode::Packed(p) = &self.mode else {
            return Vec::new();
        };
        let first = from.div_ceil(1 << p.shift);
        let end = to.div_ceil(1 << p.shift).min(p.extent_count());
        (first..end)
            .filter(|&idx| p.wants_ahead(idx))
            .map(|idx| AheadPlan {
                instance: p.instance,
                epoch: p.epoch,
                geo: p.geo(),
                idx,
                valid: p.logical_len(idx),
            })
            .collect()
    }

    /// Lets the extent cache hold `bytes` more, for the extents a reader is read ahead by
    /// (they must not push out each other before the reader gets to them); 0 goes back to
    /// the usual budget, trimming now.
    pub fn reserve_ahead(&mut self, bytes: u64) {
        if let Mode::Packed(p) = &mut self.mode {
            p.cache_extents = super::cache::CACHE_EXTENTS + bytes.div_ceil(1 << p.shift) as usize;
            p.trim_cache_to(p.cache_extents);
        }
    }

    /// Caches an extent fetched ahead, if nothing changed since it was planned; true when
    /// it was installed. The cache keeps its budget (the least recently used clean extent
    /// goes).
    pub fn install(&mut self, f: Fetched) -> bool {
        let Mode::Packed(p) = &mut self.mode else {
            return false;
        };
        let plan = &f.plan;
        let current = plan.instance == p.instance
            && plan.epoch == p.epoch
            && plan.geo == p.geo()
            && plan.valid == p.logical_len(plan.idx)
            && p.wants_ahead(plan.idx);
        p.stats.ahead(current);
        if !current {
            return false;
        }
        let clock = p.tick();
        let e = p.exts.entry(plan.idx).or_default();
        if e.data.is_none() {
            p.cached_clean += 1;
        }
        e.data = Some(f.data.into());
        e.disk = Some(f.state);
        e.last_use = clock;
        p.trim_cache();
        true
    }
}
