//! The state of one container in memory: per extent, its cached bytes and what is known about
//! its two halves on disk ([`DiskState`]); per file, the superblock's bookkeeping, the
//! compression settings and the change counter ([`Packed`]), with the bytes a write-back
//! handed to the packs while their location record waits ([`PendingLoc`]). Every other file
//! of this module is behaviour over these types; they live apart so the fields and their
//! invariants can be read in one place.

use std::collections::BTreeMap;
use std::sync::Arc;

use squeezefs_codec::CodecSpec;

use super::dirty::DirtyShare;
use crate::format::{ExtentHeader, Geometry, KeptTimes};
use crate::pack::{Location, Packs, Slot};
use crate::stats::Stats;

/// A verified copy of an extent: its header and payload.
pub(super) type Copy = (ExtentHeader, Vec<u8>);

/// What is known about an extent's two halves on disk.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DiskState {
    /// The half holding the current copy, and its generation (`None`: a hole).
    pub(super) cur: Option<(u8, u64)>,
    /// Highest generation seen in either half; new copies are written above it.
    pub(super) max_gen: u64,
    /// `cur` is known to be durable.
    pub(super) durable: bool,
    /// The other half holds an older copy or garbage, to punch once `cur` is durable.
    pub(super) other_dirty: bool,
    /// Both halves hold valid copies and we cannot tell which one reached the disk (found
    /// after a crash or a reopen): a writer syncs before choosing a half.
    pub(super) ambiguous: bool,
}

impl DiskState {
    /// Nothing pending: the state can be forgotten and found again by reading the halves.
    pub(super) fn settled(&self) -> bool {
        self.durable && !self.other_dirty && !self.ambiguous
    }
}

/// An extent's decoded bytes, shared copy-on-write: a READ's answer ([`ReadBytes`]) and a
/// batch being compressed (`batch.rs`) hold the buffer the cache holds instead of a copy of
/// it, and a change to an extent someone else still holds copies it first
/// ([`ExtentBuf::make_mut`]), so what they hold never changes under them. Two holders of
/// one buffer (`same_buffer`) therefore hold the same bytes.
#[derive(Clone, Debug)]
pub struct ExtentBuf(Arc<Box<[u8]>>);

impl ExtentBuf {
    /// The bytes to change: this buffer's own when nobody else holds it, else a copy
    /// that replaces it here.
    pub(super) fn make_mut(&mut self) -> &mut Box<[u8]> {
        Arc::make_mut(&mut self.0)
    }

    /// Whether nobody else holds this buffer (a change would not copy it).
    pub(super) fn unique(&self) -> bool {
        // No `Weak` of it is ever made, and a count of 1 cannot rise under us: a clone
        // needs a holder, and the only one is this (a buffer the packs' cache also holds,
        // `pack::Shared`, counts 2 or more, which may rise).
        Arc::strong_count(&self.0) == 1
    }

    /// Whether `a` and `b` are one buffer (and so hold the same bytes).
    pub(super) fn same_buffer(a: &ExtentBuf, b: &ExtentBuf) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl From<Box<[u8]>> for ExtentBuf {
    fn from(b: Box<[u8]>) -> ExtentBuf {
        ExtentBuf(Arc::new(b))
    }
}

/// A buffer held elsewhere too (a pack block in the packs' cache, `pack::Shared`): a change
/// copies it first, like any buffer a READ or a batch still holds.
impl From<Arc<Box<[u8]>>> for ExtentBuf {
    fn from(b: Arc<Box<[u8]>>) -> ExtentBuf {
        ExtentBuf(b)
    }
}

impl std::ops::Deref for ExtentBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// The bytes a read returns: its own buffer, or a range of an extent's cached buffer,
/// shared rather than copied (a sequential reader's READs each take 128 KiB of one cached
/// extent; the FUSE layer hands them to the kernel from there).
#[derive(Debug)]
pub enum ReadBytes {
    Owned(Vec<u8>),
    Shared(ExtentBuf, std::ops::Range<usize>),
}

impl ReadBytes {
    /// The bytes in a buffer of their own (a copy when shared).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            ReadBytes::Owned(v) => v,
            ReadBytes::Shared(b, r) => b[r].to_vec(),
        }
    }
}

impl std::ops::Deref for ReadBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadBytes::Owned(v) => v,
            ReadBytes::Shared(b, r) => &b[r.clone()],
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Ext {
    /// Decompressed bytes; zero beyond the logical size. One extent long, except a clean
    /// extent loaded from a pack or an inline superblock, which holds only the file's bytes
    /// (a small file's read then allocates and zeroes a few KiB, not a whole extent): bytes
    /// past its end are zeros ([`Ext::bytes`]), and it is made whole ([`Ext::whole`])
    /// before it is written to or written out.
    pub(super) data: Option<ExtentBuf>,
    pub(super) dirty: bool,
    /// `None` until the halves have been read.
    pub(super) disk: Option<DiskState>,
    /// This instance wrote the extent's current disk state (a copy or a hole), so it is
    /// part of the file even inside the stale range.
    pub(super) written: bool,
    pub(super) last_use: u64,
    /// Byte ranges written since the extent became dirty (merged, sorted): it goes out early
    /// only once writes covered all of it, so writes arriving out of order (several FUSE
    /// threads) do not compress and store it twice.
    pub(super) covered: Vec<(u32, u32)>,
    /// Taken by a batch being compressed without the file's lock (`batch.rs`): no other
    /// batch takes it; any other write-out still writes it.
    pub(super) in_flight: bool,
}

impl Ext {
    /// The buffer, one extent (`len`) long: zeros if there was none, grown with zeros if
    /// it was short.
    pub(super) fn whole(&mut self, len: usize) -> &mut [u8] {
        let d = self
            .data
            .get_or_insert_with(|| vec![0u8; len].into_boxed_slice().into());
        if d.len() < len {
            let mut v = d.to_vec();
            v.resize(len, 0);
            *d = v.into_boxed_slice().into();
        }
        d.make_mut()
    }

    /// Appends `n` bytes of cached data `d` from `from` to `out`, zeros past `d`'s end.
    pub(super) fn bytes(d: &[u8], from: usize, n: usize, out: &mut Vec<u8>) {
        let have = d.len().saturating_sub(from).min(n);
        if have > 0 {
            out.extend_from_slice(&d[from..from + have]);
        }
        out.resize(out.len() + (n - have), 0);
    }

    /// Records `[a, b)` as written; true when the extent (length `len`) is now covered.
    pub(super) fn cover(&mut self, a: u32, b: u32, len: u32) -> bool {
        let (mut a, mut b) = (a, b);
        let mut kept = Vec::with_capacity(self.covered.len() + 1);
        for &(x, y) in &self.covered {
            if y < a || x > b {
                kept.push((x, y));
            } else {
                a = a.min(x);
                b = b.max(y);
            }
        }
        kept.push((a, b));
        kept.sort_unstable();
        self.covered = kept;
        self.covered == [(0, len)]
    }
}

impl Ext {
    /// Both halves were just punched: clean, a hole on disk, and later copies must still
    /// outrank the generations seen before.
    pub(super) fn punched(&mut self) {
        self.dirty = false;
        self.covered.clear();
        let max_gen = self.disk.map_or(0, |d| d.max_gen);
        self.disk = Some(DiskState {
            max_gen,
            ..DiskState::default()
        });
    }
}

#[derive(Debug)]
pub(super) struct Packed {
    pub(super) shift: u8,
    /// Where the extent area starts: MiB past `DATA_START` (`SB_FLAG_AREA`; 0 for every
    /// file whose extent size the background pass never changed).
    pub(super) area: u32,
    /// A relayout's switch failed half way: memory may not say what the disk does
    /// (`Container::needs_reopen`).
    pub(super) needs_reopen: bool,
    /// Effective codec: the file's property, or the mount's.
    pub(super) codec: CodecSpec,
    /// `codec` is the file's own property (`PROP_COMPRESSION`).
    pub(super) codec_prop: bool,
    /// The extent size was chosen as the file's property (`PROP_EXTENT_SIZE`).
    pub(super) shift_prop: bool,
    /// Undecided: a new file with nothing on disk yet, which takes this (larger) extent
    /// size if it is written whole from its start past one extent of it (`grow.rs`). While
    /// set, its covered extents are not written out early.
    pub(super) grow_to: Option<u8>,
    /// [`crate::Options::extend_first`].
    pub(super) extend_first: bool,
    /// The file was undecided until a change other than a write decided it: the next write
    /// sends every extent covered whole, not only those it touched (`grow.rs`).
    pub(super) held_back: bool,
    /// The mount's codec, used again when the file's property is removed.
    pub(super) mount_codec: CodecSpec,
    /// The mount's adaptive zstd level (`compress=zstd:adapt`), followed while the file has
    /// no compression property of its own.
    pub(super) adapt: Option<std::sync::Arc<crate::adapt::Adaptive>>,
    /// While `recompress` runs: the codec its rewrites get (forced), not the file's.
    pub(super) rewrite_codec: Option<CodecSpec>,
    /// The change and modification times `stat` shows instead of the backing file's
    /// (`SB_FLAG_TIMES`): set by background recompression, whose rewrites move the backing
    /// file's times but change nothing of the file; dropped by the file's next change
    /// ([`Packed::changed`]).
    pub(super) kept_times: Option<KeptTimes>,
    /// The file's dictionary property (`PROP_DICTIONARY`): small zstd data uses it.
    pub(super) dict: Option<u32>,
    /// `SB_FLAG_DICT`: some payload of the file was written with a dictionary (sticky).
    pub(super) dict_used: bool,
    /// The mount's `compress-force=`.
    pub(super) force: bool,
    /// The file's own force property (`PROP_FORCE`): compressed as with `compress-force=`
    /// whatever the mount says ([`Packed::forced`]).
    pub(super) force_prop: bool,
    /// What [`Packed::sniff`] found the file's first bytes to be, when an already-compressed
    /// format (`image/jpeg`, …).
    pub(super) compressed_content: Option<&'static str>,
    /// `SB_FLAG_NOCOMPRESS`: writes skip compression except every `RETRY_EVERY`th.
    pub(super) nocompress: bool,
    /// Consecutive extents that resisted compression.
    pub(super) fails: u32,
    /// Extent writes skipped or retried while flagged (decides which one retries).
    pub(super) backoff_writes: u32,
    pub(super) stats: Arc<Stats>,
    pub(super) size: u64,
    /// Superblock copy that is current on disk, its generation, and whether it is durable.
    pub(super) sb_slot: Option<u8>,
    pub(super) sb_gen: u64,
    pub(super) sb_durable: bool,
    /// Both copies were valid at open, so we cannot tell whether the newer one reached the
    /// disk: the first superblock write syncs first.
    pub(super) sb_unknown: bool,
    /// The other superblock slot holds an older copy: punched once the current one is
    /// durable, so a small file rewritten takes one block again, not two.
    pub(super) sb_other_dirty: bool,
    /// A superblock of this file is durable (found at open, or synced since), so a crash
    /// leaves one: the file is known as a container by its magic, not by its first extent
    /// header (the rule for a container whose first superblock never landed). Decides how
    /// extents are written (`writeout::Careful`).
    pub(super) sb_anchored: bool,
    /// The superblock on disk describes data (size > 0): extents inside it are written
    /// carefully (`writeout::Careful`). A new container's first superblock (size 0) does not.
    pub(super) sb_covers: bool,
    pub(super) sb_inline: bool,
    /// Size, inline content or codec changed since the superblock was written.
    pub(super) sb_dirty: bool,
    /// Extents at or after this index hold nothing of the file on disk.
    pub(super) stale_from: Option<u64>,
    pub(super) exts: BTreeMap<u64, Ext>,
    /// The dirty extents' bytes, counted in the mount's budget ([`super::dirty`]).
    pub(super) share: DirtyShare,
    pub(super) clock: u64,
    /// Extent writes or punches not yet covered by a sync.
    pub(super) unsynced: bool,
    /// Counts changes (writes, size changes, punches), so a deferred superblock is only
    /// committed for exactly the state that was written back, and an extent fetched ahead
    /// is only installed into the state it was planned on (`ahead.rs`).
    pub(super) epoch: u64,
    /// This container's number among all opened by the process (`ahead.rs`).
    pub(super) instance: u64,
    /// Clean extents the cache keeps (`cache.rs`).
    pub(super) cache_extents: usize,
    /// Clean extents holding decompressed bytes that the cache may drop (not in the stale
    /// range): exact after every [`Packed::recount`] and trim, counted up as extents are
    /// loaded and down as clean ones become dirty, so `trim_cache` scans only when there
    /// is something to drop (`cache.rs`).
    pub(super) cached_clean: usize,
    /// `write_back` left the superblock to write after a sync, at this epoch.
    pub(super) pending: Option<u64>,
    /// The mount's packs: where a packed file's bytes are, and (when writable) where a file
    /// of at most one extent goes (`packing.rs`).
    pub(super) packs: Option<Arc<Packs>>,
    /// The file's location record on the backing file (it outranks the superblock, or
    /// `loc_stale`).
    pub(super) loc: Option<Location>,
    /// `loc` is known durable.
    pub(super) loc_durable: bool,
    /// The file's bytes are in its pack and not loaded yet (extent 0 is not in memory).
    pub(super) loc_unloaded: bool,
    /// Bytes handed to the packs by a write-back, their record waiting for the commit.
    pub(super) loc_pending: Option<PendingLoc>,
    /// The backing file holds bytes the record replaced: cut once the record is durable.
    pub(super) backing_stale: bool,
    /// A newer superblock replaces `loc`: the record is removed once it is durable.
    pub(super) loc_stale: bool,
    /// While the bytes are not loaded (`loc_unloaded`), a claim on the pack `loc` names: a
    /// reclaim round leaves that pack alone (the file may have no name the walk could find:
    /// open, then unlinked).
    pub(super) pin: Option<crate::pack::Pin>,
    /// [`crate::pack::Packs::moves`] when `loc` was read or written: once it moved on, a
    /// reclaim may have replaced the record on disk (same bytes elsewhere, and the change
    /// time it keeps), so what `stat` needs of it is read again.
    pub(super) loc_moves: u64,
    /// [`Packed::epoch`] when `loc` was read or written: a change of the file since drops
    /// the change time the record keeps (as [`Packed::changed`] drops a superblock's), for
    /// the record written next, which keeps none.
    pub(super) loc_epoch: u64,
}

/// What a write-back handed to the packs, waiting for its record.
#[derive(Debug, Clone)]
pub(super) enum PendingLoc {
    /// The file is empty: its record names no pack.
    Empty,
    Bytes(Arc<Slot>),
}

#[derive(Debug)]
pub(super) enum Mode {
    /// A backing file without the magic: served as it is.
    Plain,
    Packed(Box<Packed>),
}

impl Packed {
    /// A change of the file (its data, size or properties): counted ([`Packed::epoch`]),
    /// and kept times go (the superblock written next has none), since this change moves
    /// the backing file's times, which `stat` shows again. Not while
    /// `recompress` rewrites extents: those change nothing of the file.
    pub(super) fn changed(&mut self) {
        self.epoch += 1;
        if self.rewrite_codec.is_none() && self.kept_times.take().is_some() {
            self.sb_dirty = true;
        }
    }

    /// Where the extents are on disk.
    pub(super) fn geo(&self) -> Geometry {
        Geometry::new(self.shift, self.area)
    }

    pub(super) fn extent_len(&self) -> usize {
        1 << self.shift
    }

    pub(super) fn extent_count(&self) -> u64 {
        self.size.div_ceil(1 << self.shift)
    }

    pub(super) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Logical bytes of extent `idx` at the current size.
    pub(super) fn logical_len(&self, idx: u64) -> usize {
        let start = idx << self.shift;
        (self.size.saturating_sub(start)).min(self.extent_len() as u64) as usize
    }

    /// Whether the file's data lives in its extents (not in a pack, not inline in the
    /// superblock, not a pack record not loaded yet).
    pub(super) fn in_extents(&self) -> bool {
        self.loc.is_none() && !self.sb_inline && !self.loc_unloaded
    }

    pub(super) fn is_stale(&self, idx: u64) -> bool {
        self.stale_from.is_some_and(|s| idx >= s) && !self.exts.get(&idx).is_some_and(|e| e.written)
    }

    pub(super) fn is_known(&self, idx: u64) -> bool {
        self.exts.get(&idx).is_some_and(|e| e.data.is_some())
    }

    /// Decompressed bytes in memory that no write-out has taken yet.
    pub(super) fn dirty_bytes(&self) -> usize {
        self.share.bytes()
    }

    /// Counts the dirty extents and the clean cached ones again (after a write-out, a
    /// truncate or a punch, which clean or drop them): the share of the budget and
    /// [`Packed::cached_clean`] are exact again ([`super::dirty`], `cache.rs`).
    pub(super) fn recount(&mut self) {
        let dirty = self.exts.values().filter(|e| e.dirty).count();
        self.share.set(dirty << self.shift);
        self.cached_clean = self
            .exts
            .iter()
            .filter(|(i, e)| !e.dirty && e.data.is_some() && !self.is_stale(**i))
            .count();
    }
}
