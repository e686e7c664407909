//! The file operations on bytes: read, write, truncate/extend, punch a hole, SEEK_DATA and
//! SEEK_HOLE, and the in-place recompression `rewrite`, with the changes they make to the
//! extent cache (growing, shrinking, zeroing, punching whole extents). Writes only mark
//! extents dirty, except extents writes have covered completely, which go out
//! [`WRITE_BATCH`] at a time (and all of a file's dirty extents once the mount's dirty
//! budget is spent, `dirty.rs`), through `writeout.rs`.

use std::ops::Range;

use super::batch::{Batch, Compressed};
use super::recompress::Recompressed;
use super::state::{ExtentBuf, Mode, Packed, ReadBytes};
use super::Container;
use crate::layout::{read_half, Half};
use crate::pack::Pin;
use crate::storage::{read_full, Storage};
use crate::{Error, Result};

/// Extents covered entirely by writes wait until this many of them do, then go out
/// together: `writeout.rs` compresses a batch on every core at once. Why: a sequential
/// writer (`cp`) sends one 1 MiB WRITE per 1 MiB extent, and the file's WRITEs are served
/// one after the other under its lock; an extent sent out alone was compressed alone, on
/// one core, while the other idled (issue 45: a 386 MB copy kept one of two cores busy;
/// docs/BENCHMARKS.md, "Writes compressed on every core"). Four keeps two cores busy with
/// two extents each, and holds at most three extents more in memory per file than before
/// (still counted in the dirty budget). A fixed number, not the machine's, so that what a
/// write sends out does not depend on the machine. The daemon compresses a batch without
/// the file's lock (`batch.rs`), sharing its extents' buffers (one batch per session
/// thread at most: the thread that answered the WRITE compresses it).
pub const WRITE_BATCH: usize = 4;

/// Reads at least this long (or half an extent, if less) inside one cached extent share its
/// buffer instead of copying ([`Container::read_bytes`]): a sequential reader's READs (128
/// KiB, the kernel's read-ahead). Shorter ones copy, so that a random reader's 4 KiB READs
/// never make a write to the same extent meanwhile copy the whole extent (`ExtentBuf`).
pub const SHARE_MIN: usize = 64 << 10;
/// Bytes `rewrite` and `recompress` rewrite between two flushes.
const REWRITE_FLUSH_BYTES: u64 = 8 << 20;
/// Largest logical size: extent offsets must fit in 63 bits.
pub(super) const MAX_SIZE: u64 = 1 << 50;

impl<S: Storage> Container<S> {
    /// Rewrites the extents overlapping `range` with the codec in force now (`squeezefs
    /// compress`). Each new copy goes to the extent's other half and the old one stays
    /// valid until the new one is durable, so an interruption leaves every extent old or
    /// new, with the same bytes either way. Holes stay holes. The incompressible flag is
    /// cleared first: the file gets a fresh chance with the new codec. Returns the bytes
    /// rewritten. The rewritten extents are durable when this returns.
    pub fn rewrite(&mut self, range: Range<u64>) -> Result<u64> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain file has no extents to rewrite; it must be converted into a new container".into(),
            ));
        };
        if p.nocompress {
            p.nocompress = false;
            p.fails = 0;
            p.sb_dirty = true;
            p.stats.flagged(false);
        }
        let (shift, end) = (p.shift, range.end.min(p.size));
        let mut todo = Vec::new();
        let mut idx = range.start >> shift;
        while (idx << shift) < end {
            if p.extent_is_data(&self.storage, idx)? {
                todo.push(idx);
            }
            idx += 1;
        }
        Ok(self.rewrite_extents(&todo)?.bytes)
    }

    /// Reads extents `idxs` and writes them back (the policy in force now decides how they
    /// are stored), flushing every [`REWRITE_FLUSH_BYTES`], then makes them durable: the
    /// loop behind [`Container::rewrite`] and [`Container::recompress`].
    pub(super) fn rewrite_extents(&mut self, idxs: &[u64]) -> Result<Recompressed> {
        let Mode::Packed(p) = &self.mode else {
            return Ok(Recompressed::default());
        };
        let shift = p.shift;
        let mut done = Recompressed::default();
        let mut since_flush = 0u64;
        for &idx in idxs {
            let data = self.read(idx << shift, 1 << shift)?;
            self.write(idx << shift, &data)?;
            done.extents += 1;
            done.bytes += data.len() as u64;
            since_flush += data.len() as u64;
            if since_flush >= REWRITE_FLUSH_BYTES {
                self.flush()?;
                since_flush = 0;
            }
        }
        self.fsync()?;
        Ok(done)
    }

    /// Logical size.
    pub fn size(&self) -> Result<u64> {
        match &self.mode {
            Mode::Plain => Ok(self.storage.len()?),
            Mode::Packed(p) => Ok(p.size),
        }
    }

    /// Reads up to `len` bytes at `off` (short at the end of the file).
    pub fn read(&mut self, off: u64, len: usize) -> Result<Vec<u8>> {
        self.read_bytes(off, len).map(ReadBytes::into_vec)
    }

    /// [`Container::read`], with a read of at least [`SHARE_MIN`] bytes (or half an extent)
    /// inside one cached extent answered by that extent's buffer, shared, not copied
    /// ([`ReadBytes`]): what it holds never changes, whatever the file does meanwhile.
    pub fn read_bytes(&mut self, off: u64, len: usize) -> Result<ReadBytes> {
        match &mut self.mode {
            Mode::Plain => {
                let mut buf = vec![0u8; len];
                let n = read_full(&self.storage, &mut buf, off)?;
                buf.truncate(n);
                Ok(ReadBytes::Owned(buf))
            }
            Mode::Packed(p) => {
                if off >= p.size {
                    return Ok(ReadBytes::Owned(Vec::new()));
                }
                let end = p.size.min(off.saturating_add(len as u64));
                let n = (end - off) as usize;
                let idx = off >> p.shift;
                let within = (off - (idx << p.shift)) as usize;
                let mut out = None;
                if n >= SHARE_MIN.min(p.extent_len() / 2) && within + n <= p.extent_len() {
                    out = match p.extent_buf(&self.storage, idx)? {
                        // A hole: zeros (not probed a second time below).
                        None => Some(ReadBytes::Owned(vec![0; n])),
                        Some(d) if d.len() >= within + n => {
                            Some(ReadBytes::Shared(d.clone(), within..within + n))
                        }
                        // A short buffer (a small file's bytes): zeros past it, below.
                        Some(_) => None,
                    };
                }
                let out = match out {
                    Some(shared) => shared,
                    None => {
                        let mut out = Vec::with_capacity(n);
                        let mut pos = off;
                        while pos < end {
                            let idx = pos >> p.shift;
                            let within = (pos - (idx << p.shift)) as usize;
                            let take = ((end - pos) as usize).min(p.extent_len() - within);
                            p.append_bytes(&self.storage, idx, within, take, &mut out)?;
                            pos += take as u64;
                        }
                        ReadBytes::Owned(out)
                    }
                };
                p.trim_cache();
                if (p.loc.is_some() && !p.loc_stale) || p.loc_pending.is_some() {
                    // A packed file's bytes come from its pack (or memory, while its record
                    // waits), so its backing file is read too, one byte at 0: the backing
                    // filesystem then keeps its atime by its own rules (relatime, noatime),
                    // as for any other file's read.
                    self.storage.read_at(&mut [0u8; 1], 0)?;
                }
                Ok(out)
            }
        }
    }

    /// The pack block holding the file's bytes, when they are in a pack and not loaded yet,
    /// with a pin on the pack: a caller may read it into the packs' cache first
    /// ([`Packs::prefetch_block`]), without the file's lock (blocks never change, and the
    /// load then finds it there).
    pub fn unloaded_pack_block(&self) -> Option<(Pin, u32, u64)> {
        let Mode::Packed(p) = &self.mode else {
            return None;
        };
        if !p.loc_unloaded || p.loc_pending.is_some() {
            return None;
        }
        let loc = p.loc?;
        Some((p.packs.as_ref()?.pin(loc.pack), loc.pack, loc.block))
    }

    /// The extent holding byte `off`, as a range of the file (ending at its size), when its
    /// decoded bytes are in memory; `None` for a plain file, a hole, an extent not cached,
    /// or an offset at or past the end. The FUSE layer uses it to hand the kernel the rest
    /// of an extent a READ has just decoded (the kernel asks only for the pages it misses).
    pub fn cached_extent(&self, off: u64) -> Option<Range<u64>> {
        let Mode::Packed(p) = &self.mode else {
            return None;
        };
        if off >= p.size {
            return None;
        }
        let idx = off >> p.shift;
        p.exts.get(&idx)?.data.as_ref()?;
        let start = idx << p.shift;
        Some(start..p.size.min(start + p.extent_len() as u64))
    }

    /// Writes `data` at `off`, growing the file when it ends past the end.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        match self.write_deferring(off, data)? {
            Some(batch) => self.finish_batch(batch.compress()),
            None => Ok(()),
        }
    }

    /// [`Container::write`], except that a batch of covered extents due to go out is
    /// returned instead, for the caller to compress without the file's lock
    /// ([`Batch::compress`]) and hand back to [`Container::finish_batch`] (`batch.rs`).
    pub fn write_deferring(&mut self, off: u64, data: &[u8]) -> Result<Option<Batch>> {
        let end = off.checked_add(data.len() as u64).ok_or(Error::TooLarge)?;
        match &mut self.mode {
            Mode::Plain => {
                self.storage.write_at(data, off)?;
                Ok(None)
            }
            Mode::Packed(p) => {
                if end > MAX_SIZE {
                    return Err(Error::TooLarge);
                }
                if data.is_empty() {
                    return Ok(None);
                }
                p.changed();
                if end > p.size {
                    p.grow(&self.storage, end)?;
                }
                let mut pos = off;
                let mut done = 0usize;
                let mut touched = Vec::new();
                while done < data.len() {
                    let idx = pos >> p.shift;
                    let within = (pos - (idx << p.shift)) as usize;
                    let take = (data.len() - done).min(p.extent_len() - within);
                    let whole = within == 0 && take == p.extent_len();
                    if whole {
                        p.overwrite_extent(&self.storage, idx, &data[done..done + take])?;
                    } else {
                        let buf = p.extent_mut(&self.storage, idx, true)?;
                        buf[within..within + take].copy_from_slice(&data[done..done + take]);
                    }
                    let len = p.extent_len() as u32;
                    let e = p.exts.get_mut(&idx).expect("just written");
                    let full = e.cover(within as u32, (within + take) as u32, len);
                    touched.push((idx, full));
                    pos += take as u64;
                    done += take;
                }
                // Extents that writes have covered entirely go out [`WRITE_BATCH`] at a
                // time, in parallel; partial ones stay in memory until covered, the file
                // is written back, or the mount's dirty budget is spent (`dirty.rs`). A
                // new file that may still take larger extents writes nothing early
                // (`grow.rs`); once it took them, every extent its writes covered goes.
                let spent = p.share.must_write_out();
                let undecided = p.grow_to.is_some();
                p.decide_extent_size(spent);
                let held_back = std::mem::take(&mut p.held_back);
                let mut batch = false;
                let mut out: Vec<u64> = if (undecided && p.grow_to.is_none()) || held_back {
                    // Decided now (or since the last write, by another change): what
                    // earlier writes covered goes too.
                    p.covered_dirty()
                } else if p.grow_to.is_some() {
                    Vec::new()
                } else if touched.iter().any(|t| t.1) {
                    // Covered extents go out together once WRITE_BATCH of them wait.
                    let waiting = p.covered_dirty();
                    batch = waiting.len() >= WRITE_BATCH;
                    if batch {
                        waiting
                    } else {
                        Vec::new()
                    }
                } else {
                    Vec::new()
                };
                if spent {
                    batch = false;
                    out = p.exts.iter().filter(|(_, e)| e.dirty).map(|(i, _)| *i).collect();
                }
                // (A file that goes to a pack at its write-out has nothing to write early.)
                let mut deferred = None;
                if !out.is_empty() && !p.packs_it() {
                    deferred = if batch { p.take_batch(&out) } else { None };
                    if deferred.is_none() {
                        p.write_extents(&self.storage, &out)?;
                    }
                }
                p.trim_cache();
                Ok(deferred)
            }
        }
    }

    /// Writes out the extents of a batch [`Batch::compress`] compressed: those still dirty
    /// with the same bytes, through the write-out path, with their compressed copies where
    /// the policy is still the same (`batch.rs`). Errors are the write-out's.
    pub fn finish_batch(&mut self, done: Compressed) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Ok(());
        };
        if p.instance != done.instance || p.shift != done.shift {
            return Ok(());
        }
        let len = p.extent_len();
        let mut pre = std::collections::BTreeMap::new();
        for item in done.items {
            let logical = p.logical_len(item.idx);
            let Some(e) = p.exts.get_mut(&item.idx) else {
                continue;
            };
            e.in_flight = false;
            // One buffer is the same bytes: a change to the extent since the batch was
            // taken copied it (`ExtentBuf`), or replaced it.
            let same = e.dirty
                && logical == item.logical
                && e.data
                    .as_ref()
                    .is_some_and(|d| d.len() == len && ExtentBuf::same_buffer(d, &item.buf));
            if same {
                pre.insert(item.idx, item);
            }
        }
        if pre.is_empty() || p.packs_it() {
            return Ok(());
        }
        let idxs: Vec<u64> = pre.keys().copied().collect();
        let r = p.write_extents_precompressed(&self.storage, &idxs, &pre, done.policy);
        p.trim_cache();
        r
    }

    /// Sets the logical size (truncate or extend with zeros).
    pub fn set_size(&mut self, size: u64) -> Result<()> {
        match &mut self.mode {
            Mode::Plain => Ok(self.storage.set_len(size)?),
            Mode::Packed(p) => {
                if size > MAX_SIZE {
                    return Err(Error::TooLarge);
                }
                p.changed();
                // (Only an empty file truncated to empty, as `O_TRUNC` on a new file does,
                // stays undecided.)
                if size != p.size || size != 0 {
                    p.keep_extent_size();
                }
                if size > p.size {
                    p.grow(&self.storage, size)
                } else {
                    p.shrink(size);
                    Ok(())
                }
            }
        }
    }

    /// Makes `[off, off+len)` read as zeros without changing the size; whole extents in the
    /// range become holes.
    pub fn punch_hole(&mut self, off: u64, len: u64) -> Result<()> {
        match &mut self.mode {
            Mode::Plain => Ok(self.storage.punch(off, len)?),
            Mode::Packed(p) => {
                let end = off.saturating_add(len).min(p.size);
                if off >= end {
                    return Ok(());
                }
                p.changed();
                p.keep_extent_size();
                let e = p.extent_len() as u64;
                let first_whole = off.div_ceil(e);
                let end_whole = end / e;
                if first_whole < end_whole {
                    // Partial extents at either end are zeroed through the write path;
                    // whole extents become holes at once.
                    p.zero_range(&self.storage, off..first_whole * e)?;
                    p.punch_extents(&self.storage, first_whole..end_whole)?;
                    p.zero_range(&self.storage, end_whole * e..end)
                } else {
                    p.zero_range(&self.storage, off..end)
                }
            }
        }
    }

    /// First offset ≥ `off` holding data (`None` past the last data: ENXIO).
    pub fn seek_data(&mut self, off: u64) -> Result<Option<u64>> {
        self.seek(off, true)
    }

    /// First offset ≥ `off` in a hole; the end of the file counts as a hole.
    pub fn seek_hole(&mut self, off: u64) -> Result<Option<u64>> {
        self.seek(off, false)
    }

    fn seek(&mut self, off: u64, want_data: bool) -> Result<Option<u64>> {
        let size = self.size()?;
        if off >= size {
            return Ok(None);
        }
        let p = match &mut self.mode {
            Mode::Plain => {
                // SEEK_HOLE on a plain file: holes are not tracked; report the end.
                return Ok(Some(if want_data { off } else { size }));
            }
            Mode::Packed(p) => p,
        };
        let mut idx = off >> p.shift;
        let last = (size - 1) >> p.shift;
        let geo = p.geo();
        let span = 2 * geo.slot();
        while idx <= last {
            if want_data && !p.is_known(idx) && !p.is_stale(idx) {
                // Let the host skip its holes: the next extent with anything on disk, or
                // the next one in memory, whichever comes first.
                let in_memory = p
                    .exts
                    .range(idx..)
                    .find(|(_, e)| e.data.is_some())
                    .map(|(i, _)| *i);
                let on_disk = self
                    .storage
                    .next_data(geo.half(idx, 0))?
                    .map(|at| at.saturating_sub(geo.start) / span);
                let next = match (in_memory, on_disk) {
                    (None, None) => return Ok(None),
                    (a, b) => a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)).max(idx),
                };
                if next > idx {
                    idx = next;
                    continue;
                }
            }
            if p.extent_is_data(&self.storage, idx)? == want_data {
                return Ok(Some(off.max(idx << p.shift)));
            }
            idx += 1;
        }
        Ok(if want_data { None } else { Some(size) })
    }
}

impl Packed {
    /// Dirty extents that writes have covered entirely (written out early, `Container::write`).
    fn covered_dirty(&self) -> Vec<u64> {
        let len = self.extent_len() as u32;
        self.exts
            .iter()
            .filter(|(_, e)| e.dirty && !e.in_flight && e.covered == [(0, len)])
            .map(|(i, _)| *i)
            .collect()
    }

    /// Grows to `new_size`: the bytes between the old end and the new one read as zeros.
    pub(super) fn grow<S: Storage>(&mut self, st: &S, new_size: u64) -> Result<()> {
        let old = self.size;
        let e = self.extent_len() as u64;
        if !old.is_multiple_of(e) {
            // The old tail extent may hold garbage past the old end on disk: load it
            // (masked at the old size) and rewrite it.
            let idx = old / e;
            self.extent_mut(st, idx, true)?;
        }
        self.size = new_size;
        self.sb_dirty = true;
        Ok(())
    }

    pub(super) fn shrink(&mut self, new_size: u64) {
        let e = self.extent_len() as u64;
        let keep = new_size.div_ceil(e);
        // Forget everything about extents past the end: their disk copies are stale.
        let dropped: Vec<u64> = self.exts.range(keep..).map(|(i, _)| *i).collect();
        for i in dropped {
            self.exts.remove(&i);
        }
        self.recount();
        if keep < self.stale_from.unwrap_or(u64::MAX) {
            self.stale_from = Some(keep);
        }
        if !new_size.is_multiple_of(e) {
            if let Some(ext) = self.exts.get_mut(&(new_size / e)) {
                // (A buffer ending before the new size has no tail to zero: not copied, as
                // a shared one would be by `make_mut`.)
                let from = (new_size % e) as usize;
                if let Some(tail) = ext
                    .data
                    .as_mut()
                    .filter(|d| d.len() > from)
                    .and_then(|d| d.make_mut().get_mut(from..))
                {
                    tail.fill(0);
                }
            }
        }
        if new_size == 0 {
            // Nothing of a packed file's bytes is part of it any more: a later grow reads
            // zeros, never what the pack holds.
            self.loc_unloaded = false;
            self.pin = None;
        }
        self.size = new_size;
        self.sb_dirty = true;
    }

    /// Zeroes `range` (inside the file) through the cache; the extents become dirty.
    pub(super) fn zero_range<S: Storage>(&mut self, st: &S, range: Range<u64>) -> Result<()> {
        let mut pos = range.start;
        while pos < range.end {
            let idx = pos >> self.shift;
            let base = idx << self.shift;
            let stop = range.end.min(base + self.extent_len() as u64);
            let buf = self.extent_mut(st, idx, true)?;
            buf[(pos - base) as usize..(stop - base) as usize].fill(0);
            pos = stop;
        }
        Ok(())
    }

    /// True when extent `idx` may hold non-zero bytes. Extents not in memory are judged by
    /// their headers alone (all-zero extents are never stored, so a header means data).
    pub(super) fn extent_is_data<S: Storage>(&mut self, st: &S, idx: u64) -> Result<bool> {
        if (idx << self.shift) >= self.size {
            return Ok(false);
        }
        if idx == 0 && self.loc_unloaded {
            self.load_packed(st)?;
        }
        if let Some(e) = self.exts.get(&idx) {
            if let Some(d) = e.data.as_deref() {
                return Ok(d.iter().any(|&b| b != 0));
            }
        }
        if self.is_stale(idx) {
            return Ok(false);
        }
        if let Some(d) = self.exts.get(&idx).and_then(|e| e.disk) {
            return Ok(d.cur.is_some());
        }
        for half in 0..2u8 {
            if !matches!(read_half(st, self.geo(), idx, half)?, Half::Hole) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Turns whole extents `range` into holes now (zeros are their new content: losing
    /// the punch in a crash brings back the old bytes, never others).
    pub(super) fn punch_extents<S: Storage>(&mut self, st: &S, range: Range<u64>) -> Result<()> {
        // The backing file is a packed file's fallback until its record is durable.
        self.leave_pack(st)?;
        let start = self.geo().half(range.start, 0);
        let end = self.geo().half(range.end, 0);
        st.punch(start, end - start)?;
        self.unsynced = true;
        if range.start == 0 {
            // A packed file's bytes are zeros now, whatever its pack holds.
            self.loc_unloaded = false;
            self.pin = None;
        }
        let gone: Vec<u64> = self.exts.range(range).map(|(i, _)| *i).collect();
        for i in gone {
            let e = self.exts.get_mut(&i).expect("listed");
            e.data = None;
            e.punched();
        }
        self.recount();
        Ok(())
    }
}
