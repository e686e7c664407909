//! Write-out: compressing dirty extents (in parallel) into the half that does not hold the
//! last durable copy, deciding inline storage, writing the superblock after the sync that
//! covers the extents it describes, and the bookkeeping once a sync has made writes durable
//! (punching replaced halves, the older superblock copy, extents past the end). The
//! crash-safety invariants listed in `mod.rs` are kept here.

use rayon::prelude::*;
use squeezefs_codec::{Algorithm, CodecSpec};

use std::collections::BTreeMap;

use super::batch::Precompressed;
use super::policy::SNIFF_LEN;
use super::state::{DiskState, Packed};
use crate::encode::{encode_extent, encode_inline, Outcome, Policy};
use crate::format::{
    sb_offset, ExtentHeader, Superblock, BLOCK, DATA_START, EXTENT_HEADER_LEN, INLINE_MAX, PROP_COMPRESSION,
    PROP_DICTIONARY, PROP_EXTENT_SIZE, PROP_FORCE, SB_FLAG_DICT, SB_FLAG_INLINE, SB_FLAG_NOCOMPRESS,
};
use crate::layout::read_payload_at;
use crate::storage::Storage;
use crate::{Error, Result};

/// How a half is written when no older copy of its extent can be fallen back on.
///
/// A write the daemon is killed in the middle of (SIGKILL, the OOM killer) stops at a page
/// boundary: the kernel copies a `pwrite` page by page and gives up at a fatal signal. One
/// `pwrite` of header and payload can then leave the header (the first page) without its
/// payload, which reads as a damaged extent. When the other half holds the last durable
/// copy that is harmless (the reader falls back on it); otherwise the payload goes first
/// and the 48-byte header, which never crosses a page, last: a killed write leaves a hole
/// (or the older copy), never a damaged extent. (A power failure can still reorder the two
/// writes; that case stays the one documented in FORMAT.md, Crash safety.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Careful {
    /// Header and payload in one write: the other half holds the last durable copy.
    No,
    /// The half is a hole: payload first, then the header.
    HeaderLast,
    /// The half holds a copy (or garbage): its header is zeroed first, so the half is a
    /// hole until the new header lands.
    ClearFirst,
}

fn write_half<S: Storage>(st: &S, half: &[u8], off: u64, careful: Careful) -> std::io::Result<()> {
    let h = EXTENT_HEADER_LEN;
    match careful {
        Careful::No => st.write_at(half, off),
        Careful::HeaderLast | Careful::ClearFirst => {
            if careful == Careful::ClearFirst {
                st.write_at(&[0u8; EXTENT_HEADER_LEN], off)?;
            }
            st.write_at(&half[h..], off + h as u64)?;
            st.write_at(&half[..h], off)
        }
    }
}

/// A stored extent of another file to write as it is (`copy.rs`): its header, where its half
/// lies in that file's storage (whose blocks are shared where the storage can:
/// [`Storage::share_from`]), and its payload when already read (else read, and checked,
/// only where the blocks cannot be shared).
pub(super) struct Foreign {
    pub(super) header: ExtentHeader,
    pub(super) payload: Option<Vec<u8>>,
    pub(super) at: u64,
}

/// Shares a whole half of another file (`len` bytes, header and payload, at `at` in `from`)
/// into `off`: its blocks after the first, then the first (the header's) where no older
/// copy can be fallen back on (`careful`), as `write_half` puts the header last. The last
/// block is shared whole (bytes past a copy's end in its slot are no part of it, FORMAT.md),
/// or to the source's end: what followed the source's payload there (older bytes of the
/// source) then lies in the destination's backing file too, as unread as in the source's. `Ok(false)`: the storage cannot share them (the caller writes
/// the half, over whatever part was shared).
fn share_half<S: Storage>(
    st: &S,
    from: &S,
    at: u64,
    len: u64,
    off: u64,
    careful: Careful,
) -> std::io::Result<bool> {
    let n = len.next_multiple_of(BLOCK).min(from.len()?.saturating_sub(at));
    if n < len {
        return Ok(false);
    }
    match careful {
        Careful::No => st.share_from(from, at, n, off),
        Careful::HeaderLast | Careful::ClearFirst => {
            if careful == Careful::ClearFirst {
                st.write_at(&[0u8; EXTENT_HEADER_LEN], off)?;
            }
            if n > BLOCK && !st.share_from(from, at + BLOCK, n - BLOCK, off + BLOCK)? {
                return Ok(false);
            }
            st.share_from(from, at, n.min(BLOCK), off)
        }
    }
}

/// A half compressed beforehand (`batch.rs`, generation 0) with generation `gen`; `None`
/// if its header does not decode (then the extent is compressed again).
fn with_generation(c: &Precompressed, shift: u8, gen: u64) -> Option<(Vec<u8>, Outcome)> {
    let h = ExtentHeader::decode(&c.half, c.idx, shift).ok()?;
    let h = ExtentHeader { generation: gen, ..h };
    let mut half = Vec::with_capacity(c.half.len());
    half.extend_from_slice(&h.encode());
    half.extend_from_slice(&c.half[EXTENT_HEADER_LEN..]);
    Some((half, c.outcome))
}

impl Packed {
    /// Compresses and writes extents `idxs` (dirty ones), in parallel. Whatever the
    /// outcome, the dirty share and the clean count are exact afterwards (one recount on
    /// every exit, early errors included).
    pub(super) fn write_extents<S: Storage>(&mut self, st: &S, idxs: &[u64]) -> Result<()> {
        let r = self.write_extents_counted_after(st, idxs, &BTreeMap::new(), None, None);
        self.recount();
        r
    }

    /// [`Packed::write_extents`] with copies compressed beforehand under `policy`
    /// (`batch.rs`): each used where its extent's plan compresses under that same policy
    /// (the caller checked the bytes), given the generation planned.
    pub(super) fn write_extents_precompressed<S: Storage>(
        &mut self,
        st: &S,
        idxs: &[u64],
        pre: &BTreeMap<u64, Precompressed>,
        policy: Policy,
    ) -> Result<()> {
        let r = self.write_extents_counted_after(st, idxs, &BTreeMap::new(), None, Some((pre, policy)));
        self.recount();
        r
    }

    /// Writes stored copies of another file's extents (in storage `from`) as they are
    /// (`copy.rs`): each `(index, copy)` goes into the extent's free half under the same
    /// rules as a compressed one, its payload untouched, its header renumbered where its
    /// index or generation must change, its blocks shared with `from` where the storage can
    /// and the header stays. Whatever the extents held in memory is replaced.
    pub(super) fn write_stored<S: Storage>(
        &mut self,
        st: &S,
        from: &S,
        copies: BTreeMap<u64, Foreign>,
    ) -> Result<()> {
        let idxs: Vec<u64> = copies.keys().copied().collect();
        for &idx in &idxs {
            self.exts.entry(idx).or_default();
        }
        let r = self.write_extents_counted_after(st, &idxs, &copies, Some(from), None);
        self.recount();
        r
    }

    /// [`Packed::write_extents`] without the recount; the extents in `stored` are written
    /// from those copies instead of their bytes.
    fn write_extents_counted_after<S: Storage>(
        &mut self,
        st: &S,
        idxs: &[u64],
        stored: &BTreeMap<u64, Foreign>,
        from: Option<&S>,
        pre: Option<(&BTreeMap<u64, Precompressed>, Policy)>,
    ) -> Result<()> {
        // `idxs` are extents of the size the file has now: it keeps it (the callers that
        // may let it grow decide before they pick them).
        self.keep_extent_size();
        // Nothing goes to the backing file of a packed file before it leaves its pack.
        self.leave_pack(st)?;
        // An inline file's superblock holds its bytes, and readers look nowhere else: one
        // describing the extents (or inline again, with the new bytes) must replace it,
        // or a whole extent written early (`Container::write`) is never seen.
        if self.sb_inline {
            self.sb_dirty = true;
        }
        // 1. Learn each target's halves where unknown (stale extents included: their
        //    generations must be exceeded).
        let mut need_sync = false;
        for &idx in idxs {
            let known = self.exts.get(&idx).and_then(|e| e.disk);
            let state = match known {
                Some(s) => s,
                None => {
                    let s = match self.probe(st, idx) {
                        Ok((s, _)) => s,
                        // Both halves damaged: the new copy replaces them; give it a
                        // generation no garbage can be mistaken to beat, and punch later.
                        Err(Error::CorruptExtent { .. }) => DiskState {
                            other_dirty: true,
                            ..DiskState::default()
                        },
                        Err(e) => return Err(e),
                    };
                    self.exts.get_mut(&idx).expect("an extent to write").disk = Some(s);
                    s
                }
            };
            if state.ambiguous {
                need_sync = true;
            }
        }
        // The careful ways of writing a half (`Careful`) leave a payload without its header
        // for a moment. They are needed only where a superblock on disk describes the
        // extent (else a torn copy is past the file's size), and only safe where that
        // superblock survives a power failure: without one, the first data past the
        // superblocks must be a header (FORMAT.md, A container whose first superblock never
        // landed). So headers go first until a superblock describing data is written, and
        // one written but not yet durable is made durable first (rare: a write-out between
        // a commit and its sync).
        // A new container (no superblock, no location record) gets its first, empty one
        // now, before any extent.
        if self.sb_slot.is_none() && self.loc.is_none() {
            self.write_first_superblock(st)?;
        }
        // `Options::extend_first` (XFS): the backing file is made as long as the extents
        // written now need before any half is written: a half written past its end makes
        // XFS allocate blocks past it (speculative preallocation), which the next half
        // written further out strands inside the file, allocated and never written
        // (measured: 3 % of a file's stored bytes). Written inside the file's length, a
        // half takes only its own blocks. The hole reads as no copy; a length up to the end
        // of the last extent's pair is what `cut_past_last_extent` keeps. A new length can
        // reach the disk before the bytes written with it (a journalled size, data written
        // back later): where no superblock is durable, a crash would leave a file of zeros,
        // which reads as a plain file, so the first superblock is made durable first (a
        // packed file leaving its pack is its record until then: nothing to sync). That
        // sync is paid only by a large write-out (a batch of extents or more: a file
        // written past 4 MiB, once); a smaller one writes past the end as before. Here,
        // before the plan, which then knows what that sync made durable.
        let end = idxs.iter().max().map(|&last| self.geo().half(last + 1, 0));
        if let Some(end) = end.filter(|_| self.extend_first) {
            let len = st.len()?;
            let anchored = self.sb_anchored || self.sb_slot.is_none();
            let large = end.saturating_sub(len) >= super::data::WRITE_BATCH as u64 * 2 * self.geo().slot();
            if len < end && (anchored || large) {
                if !anchored {
                    st.sync_data()?;
                    self.synced(st)?;
                }
                st.set_len(end)?;
            }
        }
        let careful = match self.sb_slot {
            Some(_) if self.sb_covers => {
                need_sync |= !self.sb_anchored;
                true
            }
            // No superblock (a packed file leaving its pack: the record is the file until
            // the new superblock is durable), or one of size 0 (a torn copy is past it).
            _ => false,
        };
        // Both halves hold copies and we cannot tell which reached the disk: make both
        // durable, then the newer one is the one to keep.
        if need_sync {
            st.sync_data()?;
            for &idx in idxs {
                if let Some(d) = self.exts.get_mut(&idx).and_then(|e| e.disk.as_mut()) {
                    if d.cur.is_some() {
                        d.durable = true;
                        d.ambiguous = false;
                    }
                }
            }
            if self.sb_slot.is_some() {
                self.sb_durable = true;
                self.sb_anchored = true;
                self.sb_unknown = false;
            }
        }
        // 2. Plan: target half and generation per extent.
        struct Job<'a> {
            idx: u64,
            half: u8,
            gen: u64,
            careful: Careful,
            data: Src<'a>,
        }
        /// What a job writes: bytes to compress, or a stored copy as it is.
        enum Src<'a> {
            Bytes(&'a [u8]),
            Stored(&'a Foreign),
        }
        let mut plans = Vec::new();
        let mut holes = Vec::new();
        for &idx in idxs {
            let logical = self.logical_len(idx);
            let e = &self.exts[&idx];
            if !stored.contains_key(&idx) {
                let data = e.data.as_deref().expect("dirty extent has data");
                if logical == 0 || data[..logical].iter().all(|&b| b == 0) {
                    holes.push(idx);
                    continue;
                }
            }
            let d = e.disk.expect("probed");
            let (half, other_dirty, how) = match d.cur {
                // In place: the half may be the extent's only copy.
                Some((h, _)) if !d.durable => (h, d.other_dirty, Careful::ClearFirst),
                // The durable copy stays in the other half whatever happens to this one.
                Some((h, _)) => (1 - h, true, Careful::No),
                // The first copy: half A is a hole, or garbage when both halves were
                // found damaged.
                None if d.other_dirty => (0, true, Careful::ClearFirst),
                None => (0, false, Careful::HeaderLast),
            };
            // A stored copy keeps its generation where that outranks both halves here (its
            // header then stays byte for byte the source's, whose blocks can be shared).
            let gen = match stored.get(&idx) {
                Some(f) if f.header.index == idx && f.header.generation > d.max_gen => f.header.generation,
                _ => d.max_gen + 1,
            };
            let how = if careful { how } else { Careful::No };
            plans.push((idx, half, gen, other_dirty, how));
        }
        if plans
            .first()
            .is_some_and(|p| p.0 == 0 && !stored.contains_key(&0))
        {
            self.sniff_first_extent();
        }
        let policy = self.policy();
        let geo = self.geo();
        // The backoff decides, in order, which extents are not even tried.
        let skips: Vec<bool> = plans.iter().map(|_| self.backoff_skips()).collect();
        let jobs: Vec<Job<'_>> = plans
            .iter()
            .map(|&(idx, half, gen, _, careful)| Job {
                idx,
                half,
                gen,
                careful,
                data: match stored.get(&idx) {
                    Some(copy) => Src::Stored(copy),
                    None => {
                        Src::Bytes(&self.exts[&idx].data.as_deref().expect("data")[..self.logical_len(idx)])
                    }
                },
            })
            .collect();
        // 3. Compress and write in parallel; each job writes its own half.
        // The adaptive level learns how long the writer waits for compression (extents
        // the backoff skips are not compressed, and teach it nothing).
        let adapt = self.adaptive();
        let run = |(j, skip): (&Job<'_>, &bool)| {
            let mut used = false;
            let (half, outcome) = match j.data {
                Src::Bytes(data) => {
                    // Compressed beforehand, without the file's lock, under this policy.
                    let ready = pre
                        .filter(|(_, p)| !*skip && *p == policy)
                        .and_then(|(m, _)| m.get(&j.idx))
                        .and_then(|c| with_generation(c, geo.shift, j.gen));
                    let (half, outcome) = match ready {
                        Some(ready) => {
                            used = true;
                            ready
                        }
                        None => {
                            // (Nor extents stored raw for their content type: not compressed
                            // either.)
                            let timed = adapt
                                .filter(|_| !*skip && !policy.compressed_content)
                                .map(|a| a.compressing());
                            let r = encode_extent(policy, *skip, j.idx, j.gen, data);
                            drop(timed);
                            r
                        }
                    };
                    self.stats
                        .extent(&outcome, data.len(), half.len() - EXTENT_HEADER_LEN);
                    (half, Some(outcome))
                }
                Src::Stored(f) => {
                    let h = &f.header;
                    self.stats
                        .extent_copied(h.logical_len as usize, h.stored_len as usize);
                    let off = geo.half(j.idx, j.half);
                    let len = (EXTENT_HEADER_LEN + h.stored_len as usize) as u64;
                    // The same header (index, generation): the source's blocks as they are.
                    if let Some(from) = from.filter(|_| h.index == j.idx && h.generation == j.gen) {
                        if share_half(st, from, f.at, len, off, j.careful)? {
                            self.stats.extent_shared(len);
                            return Ok(None);
                        }
                    }
                    let read;
                    let payload = match (&f.payload, from) {
                        (Some(p), _) => p,
                        (None, Some(from)) => {
                            read = read_payload_at(from, f.at, h)
                                .map_err(std::io::Error::other)?
                                .ok_or_else(|| {
                                    std::io::Error::other(format!(
                                        "the source's copy of extent {} is damaged",
                                        h.index
                                    ))
                                })?;
                            &read
                        }
                        (None, None) => unreachable!("a stored copy without its source"),
                    };
                    let h = ExtentHeader {
                        index: j.idx,
                        generation: j.gen,
                        ..*h
                    };
                    let mut half = Vec::with_capacity(len as usize);
                    half.extend_from_slice(&h.encode());
                    half.extend_from_slice(payload);
                    (half, None)
                }
            };
            write_half(st, &half, geo.half(j.idx, j.half), j.careful)?;
            if used {
                self.stats.batch_copy_used();
            }
            Ok(outcome)
        };
        // One extent (most closes of small files): no thread hand-off.
        let results: Vec<std::io::Result<Option<Outcome>>> = if jobs.len() == 1 {
            jobs.iter().zip(&skips).map(run).collect()
        } else {
            jobs.par_iter().zip(&skips).map(run).collect()
        };
        drop(jobs);
        self.unsynced = true;
        let mut first_err = None;
        for ((idx, half, gen, other_dirty, _), res) in plans.into_iter().zip(results) {
            match res {
                Ok(outcome) => {
                    // (A stored copy teaches the backoff nothing; one with a dictionary
                    // is never copied as it is.)
                    if let Some(outcome) = &outcome {
                        self.learn(outcome);
                    }
                    if matches!(outcome, Some(Outcome::Compressed { dict: true, .. })) && !self.dict_used {
                        // The superblock must say so (version 3) at the next flush.
                        self.dict_used = true;
                        self.sb_dirty = true;
                    }
                    let e = self.exts.get_mut(&idx).expect("planned");
                    e.dirty = false;
                    e.covered.clear();
                    e.written = true;
                    // (A batch still compressing it finds it clean; the next batch may
                    // take it again once it is dirty again.)
                    e.in_flight = false;
                    if stored.contains_key(&idx) {
                        // Replaced whole by the copy: what memory held is stale.
                        e.data = None;
                    }
                    let d = e.disk.as_mut().expect("probed");
                    d.cur = Some((half, gen));
                    d.max_gen = gen;
                    d.durable = false;
                    d.other_dirty = other_dirty;
                }
                Err(err) if stored.contains_key(&idx) => {
                    // A stored copy that failed may have cleared the header of the half it
                    // was written into, and nothing is dirty to write there again: what is
                    // on disk is learnt anew (the older copy, or a hole).
                    let e = self.exts.get_mut(&idx).expect("planned");
                    if !e.dirty {
                        e.disk = None;
                        e.data = None;
                    }
                    first_err.get_or_insert(err);
                }
                Err(err) => {
                    // The half may be torn: the copy we meant to keep is still the other
                    // one, so nothing else changes; the extent stays dirty.
                    first_err.get_or_insert(err);
                }
            }
        }
        if let Some(err) = first_err {
            return Err(err.into());
        }
        // 4. All-zero extents become holes.
        self.unsynced |= !holes.is_empty();
        let mut punched = Ok(());
        for idx in holes {
            let start = self.geo().half(idx, 0);
            if let Err(e) = st.punch(start, 2 * self.geo().slot()) {
                punched = Err(e);
                break;
            }
            let e = self.exts.get_mut(&idx).expect("hole");
            e.punched();
            e.written = true;
            e.in_flight = false;
            self.stats.hole();
        }
        Ok(punched?)
    }

    /// Leftovers past the last extent (from a truncation a crash interrupted, or extents a
    /// relayout plan wrote) go, once the superblock that describes the extents is known
    /// durable.
    pub(super) fn cut_past_last_extent<S: Storage>(&mut self, st: &S) -> Result<()> {
        let needed = self.geo().half(self.extent_count(), 0);
        if st.len()? > needed {
            if !self.sb_durable || self.sb_unknown {
                st.sync_data()?;
                self.synced(st)?;
            }
            st.set_len(needed)?;
        }
        Ok(())
    }

    /// Writes everything out; with `defer`, stops before a superblock that needs a sync
    /// first and returns true.
    pub(super) fn flush<S: Storage>(&mut self, st: &S, defer: bool) -> Result<bool> {
        // The first write-out of a new file decides its extent size (`grow.rs`).
        self.decide_extent_size(true);
        let e = self.extent_len() as u64;
        let count = self.extent_count();
        if !self.sb_dirty && !self.exts.values().any(|x| x.dirty) {
            // Bytes handed to a pack by an earlier write-back still wait for their record.
            return Ok(defer && self.loc_pending.is_some());
        }
        if self.packs_it() {
            return self.flush_packed(st, defer);
        }
        // A container (again): a packed file's bytes come out of the pack first.
        self.leave_pack(st)?;
        // Decide inline: the whole file in the superblock.
        let mut inline = None;
        if self.size <= e {
            let len = self.size as usize;
            let mut data = Vec::with_capacity(len);
            self.append_bytes(st, 0, 0, len, &mut data)?;
            self.sniff(&data[..data.len().min(SNIFF_LEN)]);
            let codec = match self.compressed_content {
                Some(_) => CodecSpec::NONE,
                None => self.codec,
            };
            inline = encode_inline(codec, self.dict, &data, INLINE_MAX);
        }
        let mut wrote = false;
        if let Some((alg, payload)) = inline {
            // Extent slots are not used by an inline file: they go after the superblock
            // is durable (step "cut" below).
            if let Some(x) = self.exts.get_mut(&0) {
                x.dirty = false;
                x.covered.clear();
            }
            self.exts.retain(|i, x| *i == 0 && x.data.is_some());
            if let Some(x) = self.exts.get_mut(&0) {
                x.disk = None;
                x.written = false;
            }
            self.stale_from = Some(0);
            self.recount();
            let dict = alg == Algorithm::Zstd && squeezefs_codec::dict::frame_dict_id(&payload).is_some();
            self.dict_used |= dict;
            self.write_superblock(st, Some((alg, payload)), false)?;
            self.stats.inline_file(dict);
            return Ok(false);
        }
        // 1. Dirty extents. Extents in the stale range that hold data only in memory (the
        //    content of a file that was inline) are written too.
        if let Some(from) = self.stale_from {
            let len = self.extent_len();
            for (_, x) in self.exts.range_mut(from..count) {
                // (Extents this instance wrote are on disk already: not again.)
                if x.data.is_some() && !x.written {
                    x.dirty = true;
                    x.whole(len);
                }
            }
        }
        // (`write_extents` recounts the share these may have joined.)
        let dirty: Vec<u64> = self
            .exts
            .iter()
            .filter(|(_, x)| x.dirty)
            .map(|(i, _)| *i)
            .collect();
        if !dirty.is_empty() {
            self.write_extents(st, &dirty)?;
            wrote = true;
        }
        // 2. Stale extents inside the file that were not rewritten read as zeros: punch.
        if let Some(from) = self.stale_from {
            let mut run_start = from;
            let rewritten: Vec<u64> = self
                .exts
                .range(from..count)
                .filter(|(_, x)| x.written)
                .map(|(i, _)| *i)
                .collect();
            for i in rewritten.into_iter().chain(std::iter::once(count)) {
                if i > run_start {
                    let a = self.geo().half(run_start, 0);
                    let b = self.geo().half(i, 0);
                    if a < st.len()? {
                        st.punch(a, b - a)?;
                        wrote = true;
                        self.unsynced = true;
                    }
                }
                run_start = i + 1;
            }
        }
        if !self.sb_dirty && !self.sb_inline {
            // Extents changed in place and the superblock still describes them; their old
            // halves go at the next sync.
            self.cut_past_last_extent(st)?;
            self.stale_from = None;
            return Ok(false);
        }
        // 3. The superblock must not reach the disk before the extents it describes (also
        //    those an earlier deferred write-back left unsynced).
        debug_assert!(!wrote || self.unsynced);
        if self.unsynced || self.sb_unknown {
            if defer {
                return Ok(true);
            }
            st.sync_data()?;
            self.synced(st)?;
        }
        self.write_superblock(st, None, true)?;
        self.stale_from = None;
        Ok(false)
    }

    /// The superblock's flags (but `INLINE`) and property bits, from the file's state (a
    /// location record carries the same property bits).
    pub(super) fn sb_flags_and_props(&self) -> (u32, u8) {
        let mut flags = 0;
        if self.nocompress {
            flags |= SB_FLAG_NOCOMPRESS;
        }
        if self.dict_used {
            flags |= SB_FLAG_DICT;
        }
        let mut props = 0;
        if self.dict.is_some() {
            props |= PROP_DICTIONARY;
        }
        if self.codec_prop {
            props |= PROP_COMPRESSION;
        }
        if self.shift_prop {
            props |= PROP_EXTENT_SIZE;
        }
        if self.force_prop {
            props |= PROP_FORCE;
        }
        (flags, props)
    }

    /// A new container's first superblock, written before its first extent: size 0, so it
    /// describes nothing and needs no sync before it, and from then on the file is known
    /// as a container by its magic. Without it, a new file whose extents were all punched
    /// again (zeros written, a hole punched) before its first commit would be, after a
    /// kill, a backing file of zeros with no header anywhere: a plain file of zeros, of a
    /// size it never had. The real superblock overwrites it in place at the commit.
    fn write_first_superblock<S: Storage>(&mut self, st: &S) -> Result<()> {
        let (flags, props) = self.sb_flags_and_props();
        let sb = Superblock {
            flags,
            generation: self.sb_gen + 1,
            size: 0,
            extent_shift: self.shift,
            codec: self.codec,
            props,
            dict_id: self.dict.unwrap_or(0),
            inline_codec: Algorithm::None,
            inline: Vec::new(),
            kept_times: None,
            area: self.area,
        };
        st.write_at(&sb.encode(), sb_offset(0))?;
        self.sb_slot = Some(0);
        self.sb_gen += 1;
        self.sb_durable = false;
        self.sb_inline = false;
        self.sb_covers = false;
        self.unsynced = true;
        Ok(())
    }

    /// Writes the superblock to the half that does not hold the last durable copy, then
    /// removes extents past what it describes once it is durable.
    pub(super) fn write_superblock<S: Storage>(
        &mut self,
        st: &S,
        inline: Option<(Algorithm, Vec<u8>)>,
        synced: bool,
    ) -> Result<()> {
        if !synced && self.sb_unknown {
            st.sync_data()?;
            self.synced(st)?;
        }
        let slot = match self.sb_slot {
            None => 0,
            Some(s) if self.sb_durable => 1 - s,
            Some(s) => s,
        };
        let is_inline = inline.is_some();
        let (inline_codec, payload) = inline.unwrap_or((Algorithm::None, Vec::new()));
        let (mut flags, props) = self.sb_flags_and_props();
        if is_inline {
            flags |= SB_FLAG_INLINE;
        }
        let sb = Superblock {
            flags,
            generation: self.sb_gen + 1,
            size: self.size,
            extent_shift: self.shift,
            codec: self.codec,
            props,
            dict_id: self.dict.unwrap_or(0),
            inline_codec,
            inline: payload,
            // An inline file keeps none: its area holds the payload (a file that became
            // inline was changed anyway).
            kept_times: self.kept_times.filter(|_| !is_inline),
            area: self.area,
        };
        st.write_at(&sb.encode(), sb_offset(slot))?;
        // The other slot may hold an older copy (always, once a file had a superblock
        // before this one): it goes once this one is durable. Only a writer gets here, so
        // a read-only open never punches.
        if self.sb_slot.is_some() {
            self.sb_other_dirty = true;
        }
        self.sb_slot = Some(slot);
        self.sb_gen += 1;
        self.sb_durable = false;
        self.sb_dirty = false;
        self.sb_inline = is_inline;
        self.sb_covers = self.size > 0;
        // Extents past the end (or all of them, for an inline file) go once the
        // superblock that no longer needs them is durable.
        let needed = if is_inline {
            DATA_START
        } else {
            self.geo().half(self.extent_count(), 0)
        };
        if st.len()? > needed {
            st.sync_data()?;
            self.synced(st)?;
            st.set_len(needed)?;
        }
        Ok(())
    }

    /// Bookkeeping after a successful `sync_data`: everything written is durable, so old
    /// halves can go.
    pub(super) fn synced<S: Storage>(&mut self, st: &S) -> Result<()> {
        self.unsynced = false;
        if let Some(s) = self.sb_slot {
            self.sb_durable = true;
            self.sb_anchored = true;
            self.sb_unknown = false;
            if self.sb_other_dirty {
                // The current copy is durable: the older one is no longer a fallback.
                st.punch(sb_offset(1 - s), BLOCK)?;
                self.sb_other_dirty = false;
            }
            self.drop_stale_location(st)?;
        }
        let geo = self.geo();
        for (idx, e) in self.exts.iter_mut() {
            if let Some(d) = e.disk.as_mut() {
                if let Some((h, _)) = d.cur {
                    d.durable = true;
                    d.ambiguous = false;
                    if d.other_dirty {
                        st.punch(geo.half(*idx, 1 - h), geo.slot())?;
                        d.other_dirty = false;
                    }
                }
            }
        }
        Ok(())
    }
}
