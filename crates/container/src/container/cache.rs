//! The extent cache: the decompressed bytes of the extents a file is using, loaded on demand
//! from the current copy on disk, and what was learnt about each extent's halves. Reads and
//! partial writes go through it; clean extents beyond its budget ([`CACHE_EXTENTS`]) are dropped, least
//! recently used first. Dirty extents stay until the write-out (`writeout.rs`) takes them.

use log::warn;

use super::state::{Copy, DiskState, Ext, ExtentBuf, Packed};
use crate::encode::decode_payload_padded;
use crate::format::Geometry;
use crate::layout::{half_name, newest_halves, read_halves, read_payload, Half, Tie};
use crate::storage::Storage;
use crate::{Error, Result};

/// Clean decompressed extents kept per open file (more while a reader is read ahead:
/// [`Container::reserve_ahead`], until its handle closes).
pub(super) const CACHE_EXTENTS: usize = 8;

/// What reading both halves of an extent found: its disk state, the verified copy to use
/// (none: a hole), and what was wrong with the halves passed over.
pub(super) struct Probed {
    pub(super) state: DiskState,
    pub(super) copy: Option<Copy>,
    pub(super) damage: Vec<String>,
}

/// Reads both halves of extent `idx` and picks the newest copy whose payload checksum
/// passes ([`crate::layout`]; of equal generations, half A). Pure: counting and logging
/// what was damaged is the caller's (the reader's, not a read-ahead's).
pub(super) fn probe_halves<S: Storage>(st: &S, geo: Geometry, idx: u64) -> Result<Probed> {
    let mut state = DiskState::default();
    let mut damage = Vec::new();
    let halves = read_halves(st, geo, idx)?;
    let present = [0, 1].map(|h| !matches!(halves[h], Half::Hole));
    let valid = [0, 1].map(|h| matches!(halves[h], Half::Header(_)));
    for (half, h) in [0u8, 1].into_iter().zip(&halves) {
        match h {
            Half::Header(h) => state.max_gen = state.max_gen.max(h.generation),
            Half::Invalid(e) => damage.push(format!("half {}: header {e}", half_name(half))),
            Half::Hole => {} // never written, or punched
        }
    }
    let candidates = newest_halves(&halves, Tie::First);
    let mut copy = None;
    for &(half, h) in &candidates {
        if let Some(payload) = read_payload(st, geo, idx, half, &h)? {
            state.cur = Some((half, h.generation));
            // Whether the other half still holds something that must go once this copy
            // is durable.
            state.other_dirty = present[1 - half as usize];
            state.ambiguous = valid[1 - half as usize];
            // A lone valid copy is the one to keep whatever happened: treat it as durable
            // (the writer then never overwrites it).
            state.durable = !state.ambiguous;
            copy = Some((h, payload));
            break;
        }
        damage.push(format!("half {}: payload checksum mismatch", half_name(half)));
    }
    Ok(Probed { state, copy, damage })
}

impl Packed {
    /// [`probe_halves`], with what was damaged counted and logged: returns the disk state
    /// and, when there is a copy, its header and payload; no usable copy of data that was
    /// there is an error.
    pub(super) fn probe<S: Storage>(&self, st: &S, idx: u64) -> Result<(DiskState, Option<Copy>)> {
        let Probed { state, copy, damage } = probe_halves(st, self.geo(), idx)?;
        for _ in 0..damage.len() {
            self.stats.checksum_error();
        }
        match copy {
            Some(copy) => {
                // Both halves had valid headers and the newer one's payload failed.
                if !damage.is_empty() && state.ambiguous {
                    warn!("extent {idx}: using the older copy ({})", damage.join("; "));
                }
                Ok((state, Some(copy)))
            }
            None if damage.is_empty() => Ok((state, None)),
            None => Err(Error::CorruptExtent {
                index: idx,
                offset: idx << self.shift,
                detail: damage.join("; "),
            }),
        }
    }

    /// The bytes of extent `idx` (`None`: all zeros, not cached; a short buffer: zeros past
    /// its end, see `Ext::data`).
    pub(super) fn extent_data<S: Storage>(&mut self, st: &S, idx: u64) -> Result<Option<&[u8]>> {
        Ok(self.extent_buf(st, idx)?.map(|d| &**d))
    }

    /// [`Packed::extent_data`], as the buffer the cache holds (to share).
    pub(super) fn extent_buf<S: Storage>(&mut self, st: &S, idx: u64) -> Result<Option<&ExtentBuf>> {
        if !self.is_known(idx) && !self.load(st, idx)? {
            return Ok(None);
        }
        let clock = self.tick();
        let e = self.exts.get_mut(&idx).expect("loaded");
        e.last_use = clock;
        Ok(e.data.as_ref())
    }

    /// Appends `n` bytes of extent `idx` from `from` to `out`: cached bytes, zeros past a
    /// short buffer's end or for an extent that holds none.
    pub(super) fn append_bytes<S: Storage>(
        &mut self,
        st: &S,
        idx: u64,
        from: usize,
        n: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        match self.extent_data(st, idx)? {
            Some(d) => Ext::bytes(d, from, n, out),
            None => out.resize(out.len() + n, 0),
        }
        Ok(())
    }

    /// Loads extent `idx` into the cache; false when it is a hole (nothing cached).
    pub(super) fn load<S: Storage>(&mut self, st: &S, idx: u64) -> Result<bool> {
        if idx == 0 && self.loc_unloaded {
            self.load_packed(st)?;
            return Ok(true);
        }
        if (idx << self.shift) >= self.size || self.is_stale(idx) {
            return Ok(false);
        }
        let (state, copy) = self.probe(st, idx)?;
        let Some((h, payload)) = copy else {
            self.exts.entry(idx).or_default().disk = Some(state);
            return Ok(false);
        };
        self.stats.extent_loaded();
        let mut buf =
            decode_payload_padded(&h, &payload, self.extent_len()).map_err(|d| Error::CorruptExtent {
                index: idx,
                offset: idx << self.shift,
                detail: format!("{} payload passed its checksum but does not decode: {d}", h.codec),
            })?;
        // Bytes past the end of the file are never part of it.
        let valid = self.logical_len(idx);
        buf[valid..].fill(0);
        let clock = self.tick();
        let e = self.exts.entry(idx).or_default();
        if e.data.is_none() {
            self.cached_clean += 1;
        }
        e.data = Some(buf.into());
        e.disk = Some(state);
        e.last_use = clock;
        Ok(true)
    }

    /// The buffer of extent `idx` for writing; `need_old` loads the current bytes first
    /// (a partial overwrite), otherwise a whole-extent overwrite starts from zeros.
    pub(super) fn extent_mut<S: Storage>(&mut self, st: &S, idx: u64, need_old: bool) -> Result<&mut [u8]> {
        let len = self.extent_len();
        Ok(self.dirty_entry(st, idx, need_old)?.whole(len))
    }

    /// Extent `idx` overwritten whole by `bytes` (one extent long), dirty: as
    /// [`Packed::extent_mut`] with no old bytes, without zeroing a new buffer first (1 MiB a
    /// written extent, a memset the write then overwrote).
    pub(super) fn overwrite_extent<S: Storage>(&mut self, st: &S, idx: u64, bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(bytes.len(), self.extent_len());
        let e = self.dirty_entry(st, idx, false)?;
        match &mut e.data {
            // (A buffer someone else holds is replaced, not copied and then overwritten.)
            Some(d) if d.len() == bytes.len() && d.unique() => d.make_mut().copy_from_slice(bytes),
            d => *d = Some(Box::<[u8]>::from(bytes).into()),
        }
        Ok(())
    }

    /// Extent `idx`'s entry, made dirty (its old bytes loaded first when `need_old`).
    fn dirty_entry<S: Storage>(&mut self, st: &S, idx: u64, need_old: bool) -> Result<&mut Ext> {
        if need_old && !self.is_known(idx) {
            self.load(st, idx)?;
        }
        if idx == 0 && !need_old {
            // A whole-extent overwrite: a packed file's old bytes are never loaded over it.
            self.loc_unloaded = false;
            self.pin = None;
        }
        let len = self.extent_len();
        let clock = self.tick();
        let stale = self.is_stale(idx);
        let e = self.exts.entry(idx).or_default();
        if !e.dirty {
            self.share.add(len);
            if e.data.is_some() && !stale {
                self.cached_clean = self.cached_clean.saturating_sub(1);
            }
        }
        e.dirty = true;
        e.last_use = clock;
        Ok(e)
    }

    /// Drops clean cached extents beyond the cache budget, least recently used first.
    ///
    /// Called at every read and write, so it must not scan every entry each time (a random
    /// writer of a large file holds one dirty extent per extent it touched; a sequential
    /// writer leaves one entry per extent written until a sync settles it): it scans only
    /// once the clean cached extents ([`Packed::cached_clean`]) reach twice the budget, and
    /// then trims them to the budget. So a file holds at most twice its budget of clean
    /// extents, and a writer pays one scan per budget's worth of extents written out.
    pub(super) fn trim_cache(&mut self) {
        if self.cached_clean > 2 * self.cache_extents {
            self.trim_cache_to(self.cache_extents);
        }
    }

    pub(super) fn trim_cache_to(&mut self, keep: usize) {
        // Extents at or past `stale_from` exist only in memory (an inline file's content):
        // they are never evicted.
        let clean: Vec<(u64, u64)> = self
            .exts
            .iter()
            .filter(|(i, e)| !e.dirty && e.data.is_some() && !self.is_stale(**i))
            .map(|(i, e)| (e.last_use, *i))
            .collect();
        self.cached_clean = clean.len().min(keep);
        if clean.len() <= keep {
            return;
        }
        let mut clean = clean;
        clean.sort_unstable();
        let stale_from = self.stale_from.unwrap_or(u64::MAX);
        for (_, i) in &clean[..clean.len() - keep] {
            let e = self.exts.get_mut(i).expect("listed");
            e.data = None;
            // Entries in the stale range remember that they were written; others can be
            // found again on disk once nothing is pending for them.
            if *i < stale_from && e.disk.is_none_or(|d| d.settled()) {
                self.exts.remove(i);
            }
        }
    }
}
