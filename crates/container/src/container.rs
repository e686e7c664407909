//! The container state machine: reads, writes, truncation, hole punching and the ordered,
//! crash-safe write-out of extents and superblocks.
//!
//! Invariants (see docs/FORMAT.md, "Crash safety"):
//! * A half is only ever written where it cannot destroy the last durable copy: the other
//!   half when the current one is durable, in place when the current one is not yet.
//! * A superblock never becomes durable before the extents it describes: every superblock
//!   write is preceded by a `sync_data` that covers all extent writes before it.
//! * Old halves, and extents beyond the end of the file, are removed only after what
//!   replaces them is durable.
//! * Bytes on disk beyond the logical size are never read: an extent is masked at the size
//!   when loaded, and extents from `stale_from` on are treated as holes until rewritten.

use std::collections::BTreeMap;
use std::ops::Range;

use log::warn;
use rayon::prelude::*;
use squeezefs_codec::{Algorithm, CodecSpec};

use std::sync::Arc;

use crate::encode::{decode_payload, encode_extent, encode_inline, payload_ok, Outcome, Policy};
use crate::format::{
    half_offset, is_superblock, sb_offset, slot_size, ExtentHeader, FormatError, Superblock, BLOCK,
    DATA_START, DEFAULT_EXTENT_SHIFT, EXTENT_FLAG_DICT, EXTENT_HEADER_LEN, INLINE_MAX, MAX_EXTENT_SHIFT,
    MIN_EXTENT_SHIFT, PROP_COMPRESSION, PROP_DICTIONARY, PROP_EXTENT_SIZE, SB_FLAG_DICT, SB_FLAG_INLINE,
    SB_FLAG_NOCOMPRESS,
};
use crate::stats::Stats;
use crate::storage::{read_full, Storage};
use crate::{Error, Result};

/// Settings from the mount: the codec for files without their own compression property, the
/// extent size of new containers, and whether compression is forced.
#[derive(Clone, Debug)]
pub struct Options {
    /// Codec for extents written from now on (unless the file has its own property).
    pub codec: CodecSpec,
    /// log2 of the extent size for new containers (12 = 4 KiB … 20 = 1 MiB).
    pub extent_shift: u8,
    /// `compress-force=`: no heuristic, no backoff, no early abort.
    pub force: bool,
    /// Where decisions are counted (shared by all containers of a mount).
    pub stats: Arc<Stats>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            codec: CodecSpec::DEFAULT,
            extent_shift: DEFAULT_EXTENT_SHIFT,
            force: false,
            stats: Arc::default(),
        }
    }
}

/// Consecutive extents that resist compression before a file is flagged incompressible
/// (HAMMER2's `comp_heuristic` threshold).
pub const BACKOFF_AFTER: u32 = 8;
/// A flagged file still tries one extent write in this many (HAMMER2 retries every 8th).
pub const RETRY_EVERY: u32 = 8;

/// Clean decompressed extents kept per open file.
const CACHE_EXTENTS: usize = 8;
/// Dirty bytes per file before extents are written out regardless of write pattern.
const MAX_DIRTY_BYTES: usize = 8 << 20;
/// Largest logical size: extent offsets must fit in 63 bits.
const MAX_SIZE: u64 = 1 << 50;

/// A verified copy of an extent: its header and payload.
type Copy = (ExtentHeader, Vec<u8>);

/// What is known about an extent's two halves on disk.
#[derive(Clone, Copy, Debug, Default)]
struct DiskState {
    /// The half holding the current copy, and its generation (`None`: a hole).
    cur: Option<(u8, u64)>,
    /// Highest generation seen in either half; new copies are written above it.
    max_gen: u64,
    /// `cur` is known to be durable.
    durable: bool,
    /// The other half holds an older copy or garbage, to punch once `cur` is durable.
    other_dirty: bool,
    /// Both halves hold valid copies and we cannot tell which one reached the disk (found
    /// after a crash or a reopen): a writer syncs before choosing a half.
    ambiguous: bool,
}

impl DiskState {
    /// Nothing pending: the state can be forgotten and found again by reading the halves.
    fn settled(&self) -> bool {
        self.durable && !self.other_dirty && !self.ambiguous
    }
}

#[derive(Debug, Default)]
struct Ext {
    /// Decompressed bytes, one extent long; zero beyond the logical size.
    data: Option<Box<[u8]>>,
    dirty: bool,
    /// `None` until the halves have been read.
    disk: Option<DiskState>,
    /// This instance wrote the extent's current disk state (a copy or a hole), so it is
    /// part of the file even inside the stale range.
    written: bool,
    last_use: u64,
    /// Byte ranges written since the extent became dirty (merged, sorted): it goes out early
    /// only once writes covered all of it, so writes arriving out of order (several FUSE
    /// threads) do not compress and store it twice.
    covered: Vec<(u32, u32)>,
}

impl Ext {
    /// Records `[a, b)` as written; true when the extent (length `len`) is now covered.
    fn cover(&mut self, a: u32, b: u32, len: u32) -> bool {
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
    fn punched(&mut self) {
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
struct Packed {
    shift: u8,
    /// Effective codec: the file's property, or the mount's.
    codec: CodecSpec,
    /// `codec` is the file's own property (`PROP_COMPRESSION`).
    codec_prop: bool,
    /// The extent size was chosen as the file's property (`PROP_EXTENT_SIZE`).
    shift_prop: bool,
    /// The mount's codec, used again when the file's property is removed.
    mount_codec: CodecSpec,
    /// The file's dictionary property (`PROP_DICTIONARY`): small zstd data uses it.
    dict: Option<u32>,
    /// `SB_FLAG_DICT`: some payload of the file was written with a dictionary (sticky).
    dict_used: bool,
    force: bool,
    /// `SB_FLAG_NOCOMPRESS`: writes skip compression except every `RETRY_EVERY`th.
    nocompress: bool,
    /// Consecutive extents that resisted compression.
    fails: u32,
    /// Extent writes skipped or retried while flagged (decides which one retries).
    backoff_writes: u32,
    stats: Arc<Stats>,
    size: u64,
    /// Superblock copy that is current on disk, its generation, and whether it is durable.
    sb_slot: Option<u8>,
    sb_gen: u64,
    sb_durable: bool,
    /// Both copies were valid at open, so we cannot tell whether the newer one reached the
    /// disk: the first superblock write syncs first.
    sb_unknown: bool,
    /// The other superblock slot holds an older copy: punched once the current one is
    /// durable, so a small file rewritten takes one block again, not two.
    sb_other_dirty: bool,
    sb_inline: bool,
    /// Size, inline content or codec changed since the superblock was written.
    sb_dirty: bool,
    /// Extents at or after this index hold nothing of the file on disk.
    stale_from: Option<u64>,
    exts: BTreeMap<u64, Ext>,
    clock: u64,
    /// Extent writes or punches not yet covered by a sync.
    unsynced: bool,
    /// Counts changes (writes, size changes, punches), so a deferred superblock is only
    /// committed for exactly the state that was written back.
    epoch: u64,
    /// `write_back` left the superblock to write after a sync, at this epoch.
    pending: Option<u64>,
}

#[derive(Debug)]
enum Mode {
    /// A backing file without the magic: served as it is.
    Plain,
    Packed(Box<Packed>),
}

/// One logical file over one [`Storage`].
#[derive(Debug)]
pub struct Container<S: Storage> {
    storage: S,
    mode: Mode,
}

fn corrupt_sb(reasons: &[String]) -> Error {
    Error::CorruptSuperblock(reasons.join("; "))
}

impl<S: Storage> Container<S> {
    /// Opens the container in `storage`. An empty file becomes an empty container (its
    /// superblock is written at the first flush); a file without the magic is plain.
    pub fn open(storage: S, opts: &Options) -> Result<Container<S>> {
        let blocks = match read_head(&storage)? {
            Head::Empty => {
                let p = Packed::new(opts.extent_shift, opts, 0);
                return Ok(Container {
                    storage,
                    mode: Mode::Packed(Box::new(p)),
                });
            }
            Head::Uncommitted => {
                // Its extents go at the first flush.
                warn!("container without a superblock (never committed before a crash): empty");
                let mut p = Packed::new(opts.extent_shift, opts, 0);
                p.stale_from = Some(0);
                return Ok(Container {
                    storage,
                    mode: Mode::Packed(Box::new(p)),
                });
            }
            Head::Plain => {
                return Ok(Container {
                    storage,
                    mode: Mode::Plain,
                })
            }
            Head::Container(b) => b,
        };
        let n = blocks.len();
        let mut best: Option<(u8, Superblock)> = None;
        let mut valid_copies = 0;
        let mut reasons = Vec::new();
        let mut newer = None;
        for slot in 0..2u8 {
            let start = sb_offset(slot) as usize;
            let block = &blocks[start.min(n)..(start + BLOCK as usize).min(n)];
            match Superblock::decode(block) {
                Ok(sb) => {
                    valid_copies += 1;
                    if best.as_ref().is_none_or(|(_, b)| sb.generation > b.generation) {
                        best = Some((slot, sb));
                    }
                }
                Err(e @ (FormatError::Version(_) | FormatError::Flags(_) | FormatError::Props(_))) => {
                    newer = Some(e.to_string());
                }
                Err(FormatError::Magic) if block.iter().all(|&b| b == 0) => {
                    reasons.push(format!("copy {slot}: not written"))
                }
                Err(e) => {
                    opts.stats.checksum_error();
                    reasons.push(format!("copy {slot}: {e}"))
                }
            }
        }
        let Some((slot, sb)) = best else {
            return Err(match newer {
                Some(why) => Error::Unsupported(why),
                None => corrupt_sb(&reasons),
            });
        };
        let mut p = Packed::new(sb.extent_shift, opts, sb.size);
        if sb.props & PROP_COMPRESSION != 0 {
            p.codec = sb.codec;
            p.codec_prop = true;
        }
        p.shift_prop = sb.props & PROP_EXTENT_SIZE != 0;
        if sb.props & PROP_DICTIONARY != 0 {
            p.dict = Some(sb.dict_id);
        }
        p.dict_used = sb.flags & SB_FLAG_DICT != 0;
        if sb.flags & SB_FLAG_NOCOMPRESS != 0 {
            p.nocompress = true;
            p.fails = BACKOFF_AFTER;
        }
        p.sb_slot = Some(slot);
        p.sb_gen = sb.generation;
        p.sb_inline = sb.is_inline();
        // A lone valid copy is the one to keep whatever happened. With two, the newer may
        // not have reached the disk yet (written earlier in this boot): the first
        // superblock write syncs before overwriting either.
        p.sb_durable = valid_copies == 1;
        p.sb_unknown = valid_copies > 1;
        p.sb_dirty = false;
        if sb.is_inline() {
            let mut buf = vec![0u8; p.extent_len()].into_boxed_slice();
            // The inline payload has no extent header: with `SB_FLAG_DICT`, its frame says
            // whether it used a dictionary; without, it must not name one.
            let named = squeezefs_codec::dict::frame_dict_id(&sb.inline).is_some();
            let h = ExtentHeader {
                codec: sb.inline_codec,
                flags: if p.dict_used && named && sb.inline_codec == Algorithm::Zstd {
                    EXTENT_FLAG_DICT
                } else {
                    0
                },
                level: 0,
                index: 0,
                generation: 0,
                stored_len: sb.inline.len() as u32,
                logical_len: sb.size as u32,
                payload_sum: 0,
            };
            if sb.size > 0 {
                decode_payload(&h, &sb.inline, &mut buf)
                    .map_err(|d| Error::CorruptSuperblock(format!("inline data: {d}")))?;
            }
            p.stale_from = Some(0);
            let clock = p.tick();
            p.exts.insert(
                0,
                Ext {
                    data: Some(buf),
                    dirty: false,
                    disk: None,
                    written: false,
                    last_use: clock,
                    covered: Vec::new(),
                },
            );
        } else {
            p.stale_from = Some(p.extent_count());
        }
        Ok(Container {
            storage,
            mode: Mode::Packed(Box::new(p)),
        })
    }

    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// True for a backing file served as it is (no container magic).
    pub fn is_plain(&self) -> bool {
        matches!(self.mode, Mode::Plain)
    }

    /// Extent size in bytes (`None` for plain files).
    pub fn extent_size(&self) -> Option<u64> {
        match &self.mode {
            Mode::Plain => None,
            Mode::Packed(p) => Some(1 << p.shift),
        }
    }

    /// The file's own compression property (`None`: it follows the mount option).
    pub fn compression_property(&self) -> Option<CodecSpec> {
        match &self.mode {
            Mode::Packed(p) if p.codec_prop => Some(p.codec),
            _ => None,
        }
    }

    /// The codec extents written now get: the file's property, else the mount's.
    pub fn effective_codec(&self) -> Option<CodecSpec> {
        match &self.mode {
            Mode::Packed(p) => Some(p.codec),
            Mode::Plain => None,
        }
    }

    /// Sets (or with `None` removes) the file's compression property. Extents written from
    /// now on use it; extents already written keep their codec. Recorded in the superblock
    /// at the next flush. Plain files have no properties.
    pub fn set_compression_property(&mut self, codec: Option<CodecSpec>) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain (unconverted) file has no properties".into(),
            ));
        };
        p.codec = codec.unwrap_or(p.mount_codec);
        p.codec_prop = codec.is_some();
        // A new codec deserves a new chance.
        p.fails = 0;
        p.nocompress = false;
        p.sb_dirty = true;
        p.epoch += 1;
        Ok(())
    }

    /// The file's own extent-size property in bytes (`None`: it got the mount's).
    pub fn extent_size_property(&self) -> Option<u64> {
        match &self.mode {
            Mode::Packed(p) if p.shift_prop => Some(1 << p.shift),
            _ => None,
        }
    }

    /// Sets the file's extent size (log2), or with `None` marks it as not chosen. Only an
    /// empty file can change its extent size: every extent's place depends on it.
    pub fn set_extent_size_property(&mut self, shift: Option<u8>) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain (unconverted) file has no properties".into(),
            ));
        };
        if let Some(s) = shift {
            if !(MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT).contains(&s) {
                return Err(Error::Invalid(format!("extent size 2^{s} is outside 4K … 1M")));
            }
            if s != p.shift {
                if p.size != 0 {
                    return Err(Error::Invalid(
                        "the extent size of a file that holds data is fixed (set it on the directory, \
                         or on the file while it is empty)"
                            .into(),
                    ));
                }
                // Anything left on disk was laid out for the old size: never read it.
                p.exts.clear();
                p.shift = s;
                p.stale_from = Some(0);
            }
        }
        p.shift_prop = shift.is_some();
        p.sb_dirty = true;
        p.epoch += 1;
        Ok(())
    }

    /// The file's dictionary property (a zstd dictionary id).
    pub fn dictionary_property(&self) -> Option<u32> {
        match &self.mode {
            Mode::Packed(p) => p.dict,
            Mode::Plain => None,
        }
    }

    /// Sets (or with `None` removes) the file's dictionary: small zstd extents and inline
    /// data written from now on use it (when it is loaded, see `squeezefs_codec::dict`);
    /// what is written keeps what it used. Recorded in the superblock at the next flush.
    pub fn set_dictionary_property(&mut self, dict: Option<u32>) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain (unconverted) file has no properties".into(),
            ));
        };
        if dict == Some(0) {
            return Err(Error::Invalid("dictionary id 0 is not a dictionary".into()));
        }
        p.dict = dict;
        p.sb_dirty = true;
        p.epoch += 1;
        Ok(())
    }

    /// Whether some payload of the file was written with a dictionary.
    pub fn uses_dictionary(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.dict_used)
    }

    /// Whether the file is flagged incompressible (its extents kept failing).
    pub fn is_nocompress(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.nocompress)
    }

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
        let mut idx = range.start >> shift;
        let (mut done, mut since_flush) = (0u64, 0u64);
        while (idx << shift) < end {
            let Mode::Packed(p) = &mut self.mode else {
                unreachable!()
            };
            if p.extent_is_data(&self.storage, idx)? {
                let data = self.read(idx << shift, 1 << shift)?;
                self.write(idx << shift, &data)?;
                done += data.len() as u64;
                since_flush += data.len() as u64;
                if since_flush >= MAX_DIRTY_BYTES as u64 {
                    self.flush()?;
                    since_flush = 0;
                }
            }
            idx += 1;
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
        match &mut self.mode {
            Mode::Plain => {
                let mut buf = vec![0u8; len];
                let n = read_full(&self.storage, &mut buf, off)?;
                buf.truncate(n);
                Ok(buf)
            }
            Mode::Packed(p) => {
                if off >= p.size {
                    return Ok(Vec::new());
                }
                let end = p.size.min(off.saturating_add(len as u64));
                let mut out = Vec::with_capacity((end - off) as usize);
                let mut pos = off;
                while pos < end {
                    let idx = pos >> p.shift;
                    let within = (pos - (idx << p.shift)) as usize;
                    let take = ((end - pos) as usize).min(p.extent_len() - within);
                    match p.extent_data(&self.storage, idx)? {
                        Some(d) => out.extend_from_slice(&d[within..within + take]),
                        None => out.resize(out.len() + take, 0),
                    }
                    pos += take as u64;
                }
                p.trim_cache();
                Ok(out)
            }
        }
    }

    /// Writes `data` at `off`, growing the file when it ends past the end.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        let end = off.checked_add(data.len() as u64).ok_or(Error::TooLarge)?;
        match &mut self.mode {
            Mode::Plain => Ok(self.storage.write_at(data, off)?),
            Mode::Packed(p) => {
                if end > MAX_SIZE {
                    return Err(Error::TooLarge);
                }
                if data.is_empty() {
                    return Ok(());
                }
                p.epoch += 1;
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
                    let buf = p.extent_mut(&self.storage, idx, !whole)?;
                    buf[within..within + take].copy_from_slice(&data[done..done + take]);
                    let len = p.extent_len() as u32;
                    let e = p.exts.get_mut(&idx).expect("just written");
                    let full = e.cover(within as u32, (within + take) as u32, len);
                    touched.push((idx, full));
                    pos += take as u64;
                    done += take;
                }
                // Extents that writes have now covered entirely go out now, in parallel;
                // partial ones stay in memory until covered or the file is flushed.
                let mut out: Vec<u64> = touched.iter().filter(|t| t.1).map(|t| t.0).collect();
                if p.dirty_bytes() > MAX_DIRTY_BYTES {
                    out = p.exts.iter().filter(|(_, e)| e.dirty).map(|(i, _)| *i).collect();
                }
                if !out.is_empty() {
                    p.write_extents(&self.storage, &out)?;
                }
                p.trim_cache();
                Ok(())
            }
        }
    }

    /// Sets the logical size (truncate or extend with zeros).
    pub fn set_size(&mut self, size: u64) -> Result<()> {
        match &mut self.mode {
            Mode::Plain => Ok(self.storage.set_len(size)?),
            Mode::Packed(p) => {
                if size > MAX_SIZE {
                    return Err(Error::TooLarge);
                }
                p.epoch += 1;
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
                p.epoch += 1;
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
        let span = 2 * slot_size(p.shift);
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
                    .next_data(half_offset(p.shift, idx, 0))?
                    .map(|at| at.saturating_sub(DATA_START) / span);
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

    /// Writes everything dirty and the superblock, in crash-safe order. Not a durability
    /// promise by itself (see [`Container::fsync`]): after a crash the file is either as
    /// before or as written, never a mix of a new size with missing data.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.mode {
            Mode::Plain => Ok(()),
            Mode::Packed(p) => {
                p.flush(&self.storage, false)?;
                p.pending = None;
                Ok(())
            }
        }
    }

    /// [`Container::flush`] without waiting for the disk: everything dirty is written, but
    /// a superblock that must follow a sync is left pending. Returns true when one is:
    /// the caller makes the writes durable (`sync_data`, or one `syncfs` for many files —
    /// a group commit) and then calls [`Container::commit_after_sync`]. Until then the file
    /// on disk is still the previous version (or empty, for a new one).
    pub fn write_back(&mut self) -> Result<bool> {
        match &mut self.mode {
            Mode::Plain => Ok(false),
            Mode::Packed(p) => {
                let pending = p.flush(&self.storage, true)?;
                p.pending = pending.then_some(p.epoch);
                Ok(pending)
            }
        }
    }

    /// Writes the superblock `write_back` left pending. Call only once every write made
    /// before it is durable. Returns false, doing nothing, when nothing is pending or the
    /// file changed since (then `write_back` again).
    pub fn commit_after_sync(&mut self) -> Result<bool> {
        match &mut self.mode {
            Mode::Packed(p) if p.pending.is_some() && p.pending == Some(p.epoch) => {
                p.pending = None;
                p.synced(&self.storage)?;
                p.write_superblock(&self.storage, None, true)?;
                p.stale_from = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// A token for the state written so far: it changes with every change to the file.
    pub fn epoch(&self) -> u64 {
        match &self.mode {
            Mode::Packed(p) => p.epoch,
            Mode::Plain => 0,
        }
    }

    /// After a sync that covers everything this container wrote up to [`Container::epoch`]
    /// `epoch` (a group commit's second `syncfs`): that is durable now, so what it replaced
    /// goes — the older superblock copy and old extent halves. Does nothing when the file
    /// changed since `epoch` (what was written since may not be durable).
    pub fn settle(&mut self, epoch: u64) -> Result<()> {
        match &mut self.mode {
            Mode::Packed(p)
                if p.epoch == epoch && p.pending.is_none() && !p.exts.values().any(|e| e.dirty) =>
            {
                p.synced(&self.storage)
            }
            _ => Ok(()),
        }
    }

    /// Whether copies replaced by what was written (the older superblock copy, old extent
    /// halves) wait for a sync before they can be removed ([`Container::settle`]).
    pub fn needs_settle(&self) -> bool {
        match &self.mode {
            Mode::Packed(p) => {
                p.sb_other_dirty || p.exts.values().any(|e| e.disk.is_some_and(|d| d.other_dirty))
            }
            Mode::Plain => false,
        }
    }

    /// Whether a superblock is waiting for [`Container::commit_after_sync`].
    pub fn commit_pending(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.pending.is_some())
    }

    /// Drops every clean cached extent (memory of a file nobody has open).
    pub fn drop_cache(&mut self) {
        if let Mode::Packed(p) = &mut self.mode {
            p.trim_cache_to(0);
        }
    }

    /// [`Container::flush`], then makes everything durable.
    pub fn fsync(&mut self) -> Result<()> {
        self.flush()?;
        self.storage.sync_data()?;
        if let Mode::Packed(p) = &mut self.mode {
            p.synced(&self.storage)?;
        }
        Ok(())
    }

    /// Bytes of logical data held dirty in memory.
    pub fn dirty_bytes(&self) -> usize {
        match &self.mode {
            Mode::Plain => 0,
            Mode::Packed(p) => p.dirty_bytes(),
        }
    }
}

impl Packed {
    fn new(shift: u8, opts: &Options, size: u64) -> Packed {
        Packed {
            shift,
            codec: opts.codec,
            codec_prop: false,
            shift_prop: false,
            mount_codec: opts.codec,
            dict: None,
            dict_used: false,
            force: opts.force,
            nocompress: false,
            fails: 0,
            backoff_writes: 0,
            stats: opts.stats.clone(),
            size,
            sb_slot: None,
            sb_gen: 0,
            sb_durable: false,
            sb_unknown: false,
            sb_other_dirty: false,
            sb_inline: false,
            sb_dirty: true,
            stale_from: None,
            exts: BTreeMap::new(),
            clock: 0,
            unsynced: false,
            epoch: 0,
            pending: None,
        }
    }

    fn extent_len(&self) -> usize {
        1 << self.shift
    }

    /// HAMMER2's backoff: once `BACKOFF_AFTER` extents in a row resisted compression, only
    /// every `RETRY_EVERY`th extent write tries; the others are stored raw untouched.
    fn backoff_skips(&mut self) -> bool {
        if self.force || self.fails < BACKOFF_AFTER {
            return false;
        }
        self.backoff_writes = self.backoff_writes.wrapping_add(1);
        !self.backoff_writes.is_multiple_of(RETRY_EVERY)
    }

    /// Updates the backoff with what one extent taught: a success clears the flag, the
    /// `BACKOFF_AFTER`th failure in a row sets it (recorded in the superblock).
    fn learn(&mut self, outcome: &Outcome) {
        match outcome.failed() {
            Some(false) => {
                self.fails = 0;
                if self.nocompress {
                    self.nocompress = false;
                    self.sb_dirty = true;
                    self.stats.flagged(false);
                }
            }
            Some(true) => {
                self.fails = self.fails.saturating_add(1);
                if self.fails >= BACKOFF_AFTER && !self.nocompress && !self.force {
                    self.nocompress = true;
                    self.sb_dirty = true;
                    self.stats.flagged(true);
                }
            }
            None => {}
        }
    }

    fn extent_count(&self) -> u64 {
        self.size.div_ceil(1 << self.shift)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Logical bytes of extent `idx` at the current size.
    fn logical_len(&self, idx: u64) -> usize {
        let start = idx << self.shift;
        (self.size.saturating_sub(start)).min(self.extent_len() as u64) as usize
    }

    fn is_stale(&self, idx: u64) -> bool {
        self.stale_from.is_some_and(|s| idx >= s) && !self.exts.get(&idx).is_some_and(|e| e.written)
    }

    fn is_known(&self, idx: u64) -> bool {
        self.exts.get(&idx).is_some_and(|e| e.data.is_some())
    }

    fn dirty_bytes(&self) -> usize {
        self.exts.values().filter(|e| e.dirty).count() << self.shift
    }

    /// Reads both halves of extent `idx` and picks the newest fully valid copy.
    /// Returns the disk state and, when there is a copy, its header and payload.
    fn probe<S: Storage>(&self, st: &S, idx: u64) -> Result<(DiskState, Option<Copy>)> {
        let mut candidates = Vec::new();
        let mut state = DiskState::default();
        let mut damage = Vec::new();
        let mut present = [false; 2];
        let mut valid = [false; 2];
        for half in 0..2u8 {
            let off = half_offset(self.shift, idx, half);
            let mut hb = [0u8; EXTENT_HEADER_LEN];
            let n = read_full(st, &mut hb, off)?;
            if hb[..n].iter().all(|&b| b == 0) {
                continue; // a hole: never written, or punched
            }
            present[half as usize] = true;
            match ExtentHeader::decode(&hb[..n], idx, self.shift) {
                Ok(h) => {
                    state.max_gen = state.max_gen.max(h.generation);
                    valid[half as usize] = true;
                    candidates.push((half, h));
                }
                Err(e) => damage.push(format!("half {}: header {e}", half_name(half))),
            }
        }
        candidates.sort_by_key(|(_, h)| std::cmp::Reverse(h.generation));
        let mut chosen = None;
        for (half, h) in candidates.iter() {
            let mut payload = vec![0u8; h.stored_len as usize];
            let n = read_full(
                st,
                &mut payload,
                half_offset(self.shift, idx, *half) + EXTENT_HEADER_LEN as u64,
            )?;
            if n == payload.len() && payload_ok(h, &payload) {
                chosen = Some((*half, *h, payload));
                break;
            }
            damage.push(format!("half {}: payload checksum mismatch", half_name(*half)));
        }
        for _ in 0..damage.len() {
            self.stats.checksum_error();
        }
        match chosen {
            Some((half, h, payload)) => {
                state.cur = Some((half, h.generation));
                // Whether the other half still holds something that must go once this
                // copy is durable.
                state.other_dirty = present[1 - half as usize];
                state.ambiguous = valid[1 - half as usize];
                // A lone valid copy is the one to keep whatever happened: treat it as
                // durable (the writer then never overwrites it).
                state.durable = !state.ambiguous;
                if !damage.is_empty() && candidates.len() > 1 {
                    warn!("extent {idx}: using the older copy ({})", damage.join("; "));
                }
                Ok((state, Some((h, payload))))
            }
            None if damage.is_empty() => Ok((state, None)),
            None => Err(Error::CorruptExtent {
                index: idx,
                offset: idx << self.shift,
                detail: damage.join("; "),
            }),
        }
    }

    /// The bytes of extent `idx` (`None`: all zeros, not cached).
    fn extent_data<S: Storage>(&mut self, st: &S, idx: u64) -> Result<Option<&[u8]>> {
        if !self.is_known(idx) && !self.load(st, idx)? {
            return Ok(None);
        }
        let clock = self.tick();
        let e = self.exts.get_mut(&idx).expect("loaded");
        e.last_use = clock;
        Ok(e.data.as_deref())
    }

    /// Loads extent `idx` into the cache; false when it is a hole (nothing cached).
    fn load<S: Storage>(&mut self, st: &S, idx: u64) -> Result<bool> {
        if (idx << self.shift) >= self.size || self.is_stale(idx) {
            return Ok(false);
        }
        let (state, copy) = self.probe(st, idx)?;
        let Some((h, payload)) = copy else {
            self.exts.entry(idx).or_default().disk = Some(state);
            return Ok(false);
        };
        let mut buf = vec![0u8; self.extent_len()].into_boxed_slice();
        decode_payload(&h, &payload, &mut buf).map_err(|d| Error::CorruptExtent {
            index: idx,
            offset: idx << self.shift,
            detail: format!("{} payload passed its checksum but does not decode: {d}", h.codec),
        })?;
        // Bytes past the end of the file are never part of it.
        let valid = self.logical_len(idx);
        buf[valid..].fill(0);
        let clock = self.tick();
        let e = self.exts.entry(idx).or_default();
        e.data = Some(buf);
        e.disk = Some(state);
        e.last_use = clock;
        Ok(true)
    }

    /// The buffer of extent `idx` for writing; `need_old` loads the current bytes first
    /// (a partial overwrite), otherwise a whole-extent overwrite starts from zeros.
    fn extent_mut<S: Storage>(&mut self, st: &S, idx: u64, need_old: bool) -> Result<&mut [u8]> {
        if need_old && !self.is_known(idx) {
            self.load(st, idx)?;
        }
        let len = self.extent_len();
        let clock = self.tick();
        let e = self.exts.entry(idx).or_default();
        e.dirty = true;
        e.last_use = clock;
        Ok(e.data.get_or_insert_with(|| vec![0u8; len].into_boxed_slice()))
    }

    /// Grows to `new_size`: the bytes between the old end and the new one read as zeros.
    fn grow<S: Storage>(&mut self, st: &S, new_size: u64) -> Result<()> {
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

    fn shrink(&mut self, new_size: u64) {
        let e = self.extent_len() as u64;
        let keep = new_size.div_ceil(e);
        // Forget everything about extents past the end: their disk copies are stale.
        let dropped: Vec<u64> = self.exts.range(keep..).map(|(i, _)| *i).collect();
        for i in dropped {
            self.exts.remove(&i);
        }
        if keep < self.stale_from.unwrap_or(u64::MAX) {
            self.stale_from = Some(keep);
        }
        if !new_size.is_multiple_of(e) {
            if let Some(ext) = self.exts.get_mut(&(new_size / e)) {
                if let Some(d) = ext.data.as_mut() {
                    d[(new_size % e) as usize..].fill(0);
                }
            }
        }
        self.size = new_size;
        self.sb_dirty = true;
    }

    /// Zeroes `range` (inside the file) through the cache; the extents become dirty.
    fn zero_range<S: Storage>(&mut self, st: &S, range: Range<u64>) -> Result<()> {
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
    fn extent_is_data<S: Storage>(&mut self, st: &S, idx: u64) -> Result<bool> {
        if (idx << self.shift) >= self.size {
            return Ok(false);
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
            let mut hb = [0u8; EXTENT_HEADER_LEN];
            let n = read_full(st, &mut hb, half_offset(self.shift, idx, half))?;
            if hb[..n].iter().any(|&b| b != 0) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Turns whole extents `range` into holes now (zeros are their new content: losing
    /// the punch in a crash brings back the old bytes, never others).
    fn punch_extents<S: Storage>(&mut self, st: &S, range: Range<u64>) -> Result<()> {
        let start = half_offset(self.shift, range.start, 0);
        let end = half_offset(self.shift, range.end, 0);
        st.punch(start, end - start)?;
        self.unsynced = true;
        let gone: Vec<u64> = self.exts.range(range).map(|(i, _)| *i).collect();
        for i in gone {
            let e = self.exts.get_mut(&i).expect("listed");
            e.data = None;
            e.punched();
        }
        Ok(())
    }

    /// Compresses and writes extents `idxs` (dirty ones), in parallel.
    fn write_extents<S: Storage>(&mut self, st: &S, idxs: &[u64]) -> Result<()> {
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
                    self.exts.get_mut(&idx).expect("dirty extent").disk = Some(s);
                    s
                }
            };
            if state.ambiguous {
                need_sync = true;
            }
        }
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
                self.sb_unknown = false;
            }
        }
        // 2. Plan: target half and generation per extent.
        struct Job<'a> {
            idx: u64,
            half: u8,
            gen: u64,
            data: &'a [u8],
        }
        let mut plans = Vec::new();
        let mut holes = Vec::new();
        for &idx in idxs {
            let logical = self.logical_len(idx);
            let e = &self.exts[&idx];
            let data = e.data.as_deref().expect("dirty extent has data");
            if logical == 0 || data[..logical].iter().all(|&b| b == 0) {
                holes.push(idx);
                continue;
            }
            let d = e.disk.expect("probed");
            let (half, other_dirty) = match d.cur {
                Some((h, _)) if !d.durable => (h, d.other_dirty),
                Some((h, _)) => (1 - h, true),
                None => (0, d.other_dirty),
            };
            let gen = d.max_gen + 1;
            plans.push((idx, half, gen, other_dirty));
        }
        let policy = Policy {
            codec: self.codec,
            force: self.force,
            dict: self.dict,
        };
        let shift = self.shift;
        // The backoff decides, in order, which extents are not even tried.
        let skips: Vec<bool> = plans.iter().map(|_| self.backoff_skips()).collect();
        let jobs: Vec<Job<'_>> = plans
            .iter()
            .map(|&(idx, half, gen, _)| Job {
                idx,
                half,
                gen,
                data: &self.exts[&idx].data.as_deref().expect("data")[..self.logical_len(idx)],
            })
            .collect();
        // 3. Compress and write in parallel; each job writes its own half.
        let run = |(j, skip): (&Job<'_>, &bool)| {
            let (half, outcome) = encode_extent(policy, *skip, j.idx, j.gen, j.data);
            self.stats
                .extent(&outcome, j.data.len(), half.len() - EXTENT_HEADER_LEN);
            st.write_at(&half, half_offset(shift, j.idx, j.half))
                .map(|()| outcome)
        };
        // One extent (most closes of small files): no thread hand-off.
        let results: Vec<std::io::Result<Outcome>> = if jobs.len() == 1 {
            jobs.iter().zip(&skips).map(run).collect()
        } else {
            jobs.par_iter().zip(&skips).map(run).collect()
        };
        drop(jobs);
        self.unsynced = true;
        let mut first_err = None;
        for ((idx, half, gen, other_dirty), res) in plans.into_iter().zip(results) {
            match res {
                Ok(outcome) => {
                    self.learn(&outcome);
                    if matches!(outcome, Outcome::Compressed { dict: true, .. }) && !self.dict_used {
                        // The superblock must say so (version 3) at the next flush.
                        self.dict_used = true;
                        self.sb_dirty = true;
                    }
                    let e = self.exts.get_mut(&idx).expect("planned");
                    e.dirty = false;
                    e.covered.clear();
                    e.written = true;
                    let d = e.disk.as_mut().expect("probed");
                    d.cur = Some((half, gen));
                    d.max_gen = gen;
                    d.durable = false;
                    d.other_dirty = other_dirty;
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
        for idx in holes {
            let start = half_offset(self.shift, idx, 0);
            st.punch(start, 2 * slot_size(self.shift))?;
            let e = self.exts.get_mut(&idx).expect("hole");
            e.punched();
            e.written = true;
            self.stats.hole();
        }
        Ok(())
    }

    /// Drops clean cached extents beyond the cache budget, least recently used first.
    fn trim_cache(&mut self) {
        self.trim_cache_to(CACHE_EXTENTS);
    }

    fn trim_cache_to(&mut self, keep: usize) {
        // Extents at or past `stale_from` exist only in memory (an inline file's content):
        // they are never evicted.
        let clean: Vec<(u64, u64)> = self
            .exts
            .iter()
            .filter(|(i, e)| !e.dirty && e.data.is_some() && !self.is_stale(**i))
            .map(|(i, e)| (e.last_use, *i))
            .collect();
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

    /// Writes everything out; with `defer`, stops before a superblock that needs a sync
    /// first and returns true.
    fn flush<S: Storage>(&mut self, st: &S, defer: bool) -> Result<bool> {
        let e = self.extent_len() as u64;
        let count = self.extent_count();
        if !self.sb_dirty && !self.exts.values().any(|x| x.dirty) {
            return Ok(false);
        }
        // Decide inline: the whole file in the superblock.
        let mut inline = None;
        if self.size <= e {
            let len = self.size as usize;
            let data: Vec<u8> = match self.extent_data(st, 0)? {
                Some(d) => d[..len].to_vec(),
                None => vec![0u8; len],
            };
            inline = encode_inline(self.codec, self.dict, &data, INLINE_MAX);
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
            let dict = alg == Algorithm::Zstd && squeezefs_codec::dict::frame_dict_id(&payload).is_some();
            self.dict_used |= dict;
            self.write_superblock(st, Some((alg, payload)), false)?;
            self.stats.inline_file(dict);
            return Ok(false);
        }
        // 1. Dirty extents. Extents in the stale range that hold data only in memory (the
        //    content of a file that was inline) are written too.
        if let Some(from) = self.stale_from {
            for (_, x) in self.exts.range_mut(from..count) {
                // (Extents this instance wrote are on disk already: not again.)
                if x.data.is_some() && !x.written {
                    x.dirty = true;
                }
            }
        }
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
                    let a = half_offset(self.shift, run_start, 0);
                    let b = half_offset(self.shift, i, 0);
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
            // halves go at the next sync. Leftovers past the last extent (from a truncation
            // a crash interrupted) go once the superblock is known durable.
            let needed = half_offset(self.shift, count, 0);
            if st.len()? > needed {
                if !self.sb_durable || self.sb_unknown {
                    st.sync_data()?;
                    self.synced(st)?;
                }
                st.set_len(needed)?;
            }
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

    /// Writes the superblock to the half that does not hold the last durable copy, then
    /// removes extents past what it describes once it is durable.
    fn write_superblock<S: Storage>(
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
        let mut flags = if is_inline { SB_FLAG_INLINE } else { 0 };
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
        // Extents past the end (or all of them, for an inline file) go once the
        // superblock that no longer needs them is durable.
        let needed = if is_inline {
            DATA_START
        } else {
            half_offset(self.shift, self.extent_count(), 0)
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
    fn synced<S: Storage>(&mut self, st: &S) -> Result<()> {
        self.unsynced = false;
        if let Some(s) = self.sb_slot {
            self.sb_durable = true;
            self.sb_unknown = false;
            if self.sb_other_dirty {
                // The current copy is durable: the older one is no longer a fallback.
                st.punch(sb_offset(1 - s), BLOCK)?;
                self.sb_other_dirty = false;
            }
        }
        let shift = self.shift;
        for (idx, e) in self.exts.iter_mut() {
            if let Some(d) = e.disk.as_mut() {
                if let Some((h, _)) = d.cur {
                    d.durable = true;
                    d.ambiguous = false;
                    if d.other_dirty {
                        st.punch(half_offset(shift, *idx, 1 - h), slot_size(shift))?;
                        d.other_dirty = false;
                    }
                }
            }
        }
        Ok(())
    }
}

/// What the start of a backing file says it is (shared by open, check and usage).
pub(crate) enum Head {
    /// An empty file: an empty container.
    Empty,
    /// Not a container: served as it is.
    Plain,
    /// A new container whose first superblock never landed (a crash between writing its
    /// extents and its first commit): nothing of it was ever durable, so it is empty.
    Uncommitted,
    /// A container, with its first two blocks (short if the file is).
    Container(Vec<u8>),
}

pub(crate) fn read_head<S: Storage>(st: &S) -> Result<Head> {
    if st.len()? == 0 {
        return Ok(Head::Empty);
    }
    let mut blocks = vec![0u8; 2 * BLOCK as usize];
    let n = read_full(st, &mut blocks, 0)?;
    blocks.truncate(n);
    if is_container(&blocks) {
        return Ok(Head::Container(blocks));
    }
    if blocks.iter().all(|&b| b == 0) && has_extent_header(st)? {
        return Ok(Head::Uncommitted);
    }
    Ok(Head::Plain)
}

/// Whether the first two blocks of a backing file (`blocks`, possibly short) are a
/// container's: either superblock copy carries the magic, or one whose magic alone decayed.
fn is_container(blocks: &[u8]) -> bool {
    (0..2u8).any(|slot| {
        let start = (sb_offset(slot) as usize).min(blocks.len());
        is_superblock(&blocks[start..(start + BLOCK as usize).min(blocks.len())])
    })
}

/// Whether the first data past the superblocks is a valid extent header (of any extent
/// size): what a container looks like before its first superblock lands. A plain file
/// cannot pass by chance: the header carries a magic, its index and an XXH3 of itself.
fn has_extent_header<S: Storage>(st: &S) -> Result<bool> {
    let Some(at) = st.next_data(DATA_START)? else {
        return Ok(false);
    };
    let mut hb = [0u8; EXTENT_HEADER_LEN];
    // SEEK_DATA answers at block granularity: the header is at the start of a slot.
    for shift in MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT {
        let slot = slot_size(shift);
        let rel = at - DATA_START;
        // The first slot at or after `at` that could hold a half.
        let k = rel.div_ceil(slot);
        let off = DATA_START + k * slot;
        if read_full(st, &mut hb, off)? < EXTENT_HEADER_LEN {
            continue;
        }
        if ExtentHeader::decode(&hb, k / 2, shift).is_ok() {
            return Ok(true);
        }
    }
    Ok(false)
}

fn half_name(h: u8) -> &'static str {
    if h == 0 {
        "A"
    } else {
        "B"
    }
}
