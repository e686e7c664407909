//! The container state machine: one logical file over one [`Storage`] — reads, writes,
//! truncation, hole punching and the ordered, crash-safe write-out of extents and
//! superblocks. This file holds the public type, its opening and its write-back lifecycle;
//! the rest is split by role:
//!
//! * `state.rs` — the in-memory state (`Packed` and its `PendingLoc`, per-extent
//!   `Ext`/`DiskState`) and its small queries.
//! * `props.rs` — the file's settings and properties (codec, extent size, dictionary).
//! * `data.rs` — read, write, set_size, punch_hole, SEEK_DATA/SEEK_HOLE, rewrite.
//! * `cache.rs` — the extent cache: loading the current copy of an extent, trimming.
//! * `dirty.rs` — the mount's dirty budget, shared by its containers, and each one's share.
//! * `ahead.rs` — loading extents ahead of a sequential reader, off the file's lock.
//! * `policy.rs` — whether an extent is tried at all (HAMMER2 backoff) and the
//!   `encode::Policy` handed to `encode`.
//! * `lifecycle.rs` — how a change becomes durable: flush, write-back with its [`WriteBack`]
//!   ticket, commit, settle, fsync.
//! * `writeout.rs` — compressing and writing extents, inline files, superblocks, and the
//!   bookkeeping after a sync.
//!
//! Where copies are on disk and which one is current is read through [`crate::layout`],
//! shared with `check` and `usage`.
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

mod ahead;
mod batch;
mod cache;
mod copy;
mod data;
mod dirty;
mod grow;
mod halves;
mod lifecycle;
mod packing;
mod policy;
mod props;
mod recompress;
mod relayout;
mod state;
mod writeout;

use std::collections::BTreeMap;
use std::sync::Arc;

use log::warn;
use squeezefs_codec::{Algorithm, CodecSpec};

pub use ahead::{AheadPlan, Fetched};
pub use batch::{Batch, Compressed};
pub use data::WRITE_BATCH;
pub use dirty::{DirtyBudget, DEFAULT_DIRTY_BYTES, DEFAULT_DIRTY_EXPIRE};
pub use grow::{give_up_at, give_up_dense_at, grow_at};
pub use halves::StoredHalf;
pub use lifecycle::{Ticket, WriteBack};
pub use policy::{BACKOFF_AFTER, RETRY_EVERY};
pub use recompress::{Recompressed, StatTimes};
pub use relayout::{Relayout, Step as RelayoutStep};
use state::{Ext, Mode, Packed};
pub use state::{ExtentBuf, ReadBytes};

use crate::encode::decode_payload;
use crate::format::{
    ExtentHeader, FormatError, DEFAULT_EXTENT_SHIFT, EXTENT_FLAG_DICT, PROP_COMPRESSION, PROP_DICTIONARY,
    PROP_EXTENT_SIZE, PROP_FORCE, SB_FLAG_DICT, SB_FLAG_NOCOMPRESS,
};
use crate::layout::{current_superblock, read_head, superblock_copies, Head, Tie};
use crate::pack::record::{newest_superblock_gen, record_wins};
use crate::pack::{Location, Packs};
use crate::stats::Stats;
use crate::storage::Storage;
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
    /// The backing directory's packs (format 4): packed files are read from them, and
    /// files of at most one extent are written to them when they are writable. `None`:
    /// files are containers only, and a packed file is refused.
    pub packs: Option<Arc<Packs>>,
    /// Dirty bytes every container of the mount may hold together before a writer writes
    /// its own out (`dirty.rs`); the default is a budget of [`DEFAULT_DIRTY_BYTES`] of
    /// its own.
    pub dirty: Arc<DirtyBudget>,
    /// `compress=zstd:adapt`: the level files without a compression property of their own
    /// are written at follows this controller (`adapt.rs`); `codec` is then zstd at its
    /// starting level.
    pub adapt: Option<Arc<crate::adapt::Adaptive>>,
    /// The extent size (log2) a new file written whole from its start past one extent of
    /// it takes ([`grow_at`], `grow.rs`); `None`: every new file keeps `extent_shift` (a
    /// mount whose `extent_size=` was given).
    pub grow_extent_shift: Option<u8>,
    /// Before a write-out writes halves past the backing file's end, the file is made as
    /// long as they need (`writeout.rs`): on XFS, whose speculative preallocation past the
    /// end of a file otherwise strands allocated, never written blocks inside it (3 % of
    /// the stored bytes). A file with no durable superblock is extended only by a write-out
    /// of a batch of extents or more, and synced first (once): a longer file of zeros must
    /// never outlive a crash without the superblock that makes it a container (it would
    /// read as a plain file of zeros).
    pub extend_first: bool,
}

impl Options {
    /// The mount's codec as `compress=` spells it (`zstd:adapt:1-9` for an adaptive one).
    pub fn compress_name(&self) -> String {
        match &self.adapt {
            Some(a) => {
                let (min, max) = a.range();
                format!("zstd:adapt:{min}-{max}")
            }
            None => self.codec.to_string(),
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            codec: CodecSpec::DEFAULT,
            extent_shift: DEFAULT_EXTENT_SHIFT,
            force: false,
            stats: Arc::default(),
            packs: None,
            dirty: Arc::default(),
            adapt: None,
            grow_extent_shift: None,
            extend_first: false,
        }
    }
}

/// One logical file over one [`Storage`].
///
/// How a change becomes durable — write-back, commit, settle, and the typed tickets that
/// drive them — is described once, in `lifecycle.rs` ([`WriteBack`]).
#[derive(Debug)]
pub struct Container<S: Storage> {
    storage: S,
    mode: Mode,
}

impl Packed {
    /// A new, empty file (nothing of it on disk): undecided between the mount's extent size
    /// and `opts.grow_extent_shift` (`grow.rs`).
    fn new_undecided(opts: &Options) -> Packed {
        let mut p = Packed::new(opts.extent_shift, opts, 0);
        p.grow_to = opts.grow_extent_shift.filter(|g| *g > opts.extent_shift);
        p
    }

    /// The state of a file opened with `opts`: nothing known about its disk yet.
    fn new(shift: u8, opts: &Options, size: u64) -> Packed {
        Packed {
            shift,
            area: 0,
            needs_reopen: false,
            codec: opts.codec,
            codec_prop: false,
            shift_prop: false,
            grow_to: None,
            held_back: false,
            extend_first: opts.extend_first,
            mount_codec: opts.codec,
            adapt: opts.adapt.clone(),
            rewrite_codec: None,
            kept_times: None,
            dict: None,
            dict_used: false,
            force: opts.force,
            force_prop: false,
            compressed_content: None,
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
            sb_anchored: false,
            sb_covers: false,
            sb_inline: false,
            sb_dirty: true,
            stale_from: None,
            exts: BTreeMap::new(),
            share: dirty::DirtyShare::new(opts.dirty.clone()),
            clock: 0,
            unsynced: false,
            epoch: 0,
            instance: ahead::next_instance(),
            cache_extents: cache::CACHE_EXTENTS,
            cached_clean: 0,
            pending: None,
            packs: opts.packs.clone(),
            loc: None,
            loc_durable: false,
            loc_unloaded: false,
            loc_pending: None,
            backing_stale: false,
            loc_stale: false,
            pin: None,
            loc_moves: 0,
            loc_epoch: 0,
        }
    }
}

fn corrupt_sb(reasons: &[String]) -> Error {
    Error::CorruptSuperblock(reasons.join("; "))
}

impl<S: Storage> Container<S> {
    /// A new, empty container for a file just made (`O_EXCL`): nothing is read from
    /// `storage` (whose mode may not even let its owner read it: `tar` makes placeholders
    /// with mode 0). Its superblock is written at the first flush.
    pub fn create(storage: S, opts: &Options) -> Container<S> {
        Container {
            storage,
            mode: Mode::Packed(Box::new(Packed::new_undecided(opts))),
        }
    }

    /// Opens the container in `storage`. An empty file becomes an empty container (its
    /// superblock is written at the first flush); a file without the magic is plain.
    pub fn open(storage: S, opts: &Options) -> Result<Container<S>> {
        // The record is read and its pack pinned as one step against a reclaim round
        // (`Packs::records`): a round cannot remove the pack in between.
        let packs = opts.packs.clone();
        let _records = packs.as_ref().map(|p| p.records().read().unwrap());
        let loc = packing::read_location(&storage)?;
        if loc.is_some() && opts.packs.is_none() {
            return Err(Error::Unsupported(
                "a packed file (format 4), but this backing directory's packs are not available".into(),
            ));
        }
        let head = read_head(&storage)?;
        let blocks = match (head, loc) {
            // The record is newer (or beside a first superblock a crash tore, or a plain
            // file's bytes it replaced).
            (head, Some(l)) if record_wins(&head, &l) => {
                let g = match &head {
                    Head::Container(b) => newest_superblock_gen(b),
                    _ => None,
                };
                return Ok(Self::open_packed(storage, opts, l, g));
            }
            (head, _) => head,
        };
        let blocks = match blocks {
            Head::Empty => {
                let p = Packed::new_undecided(opts);
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
        let copies = superblock_copies(&blocks);
        let mut valid_copies = 0;
        let mut reasons = Vec::new();
        let mut newer = None;
        for c in &copies {
            let slot = c.slot;
            match &c.decoded {
                Ok(_) => valid_copies += 1,
                Err(e @ (FormatError::Version(_) | FormatError::Flags(_) | FormatError::Props(_))) => {
                    newer = Some(e.to_string());
                }
                // (An all-zero block always fails on its magic.)
                Err(FormatError::Magic) if !c.written => reasons.push(format!("copy {slot}: not written")),
                Err(e) => {
                    opts.stats.checksum_error();
                    reasons.push(format!("copy {slot}: {e}"))
                }
            }
        }
        // Of two valid copies with equal generations, the reader has always taken copy 0.
        let Some((slot, sb)) = current_superblock(&copies, Tie::First) else {
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
        p.force_prop = sb.props & PROP_FORCE != 0;
        if sb.props & PROP_DICTIONARY != 0 {
            p.dict = Some(sb.dict_id);
        }
        p.dict_used = sb.flags & SB_FLAG_DICT != 0;
        if sb.flags & SB_FLAG_NOCOMPRESS != 0 {
            p.nocompress = true;
            p.fails = BACKOFF_AFTER;
        }
        p.sb_slot = Some(slot);
        p.sb_anchored = true;
        p.sb_covers = sb.size > 0;
        p.sb_gen = sb.generation;
        p.area = sb.area;
        if loc.is_some() {
            // An older record the superblock replaced: it goes once that is durable.
            p.loc = loc;
            p.loc_stale = true;
        }
        p.sb_inline = sb.is_inline();
        p.kept_times = sb.kept_times;
        // A lone valid copy is the one to keep whatever happened. With two, the newer may
        // not have reached the disk yet (written earlier in this boot): the first
        // superblock write syncs before overwriting either.
        p.sb_durable = valid_copies == 1;
        p.sb_unknown = valid_copies > 1;
        p.sb_dirty = false;
        if sb.is_inline() {
            // Only the file's bytes: a short clean buffer (`Ext::data`).
            let mut buf = vec![0u8; (sb.size as usize).min(p.extent_len())].into_boxed_slice();
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
                    data: Some(buf.into()),
                    dirty: false,
                    disk: None,
                    written: false,
                    last_use: clock,
                    ..Ext::default()
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

    /// A file whose location record is current: its bytes are in a pack (loaded at first
    /// use), its settings in the record; whatever the backing file holds besides is cut once
    /// the record is known durable.
    fn open_packed(storage: S, opts: &Options, l: Location, sb_gen: Option<u64>) -> Container<S> {
        let mut p = Packed::new(l.extent_shift, opts, l.len as u64);
        if l.props & PROP_COMPRESSION != 0 {
            p.codec = l.codec;
            p.codec_prop = true;
        }
        p.shift_prop = l.props & PROP_EXTENT_SIZE != 0;
        p.force_prop = l.props & PROP_FORCE != 0;
        if l.props & PROP_DICTIONARY != 0 {
            p.dict = Some(l.dict_id);
        }
        p.sb_gen = l.generation.max(sb_gen.unwrap_or(0));
        p.sb_dirty = false;
        p.stale_from = Some(0);
        p.loc = Some(l);
        // (`open` holds the records lock: no reclaim moves records meanwhile.)
        p.loc_moves = p.packs.as_ref().map_or(0, |packs| packs.moves());
        p.loc_epoch = p.epoch;
        p.loc_unloaded = l.len > 0;
        if p.loc_unloaded {
            p.pin = p.packs.as_ref().map(|packs| packs.pin(l.pack));
        }
        p.backing_stale = storage.len().map(|n| n > 0).unwrap_or(true);
        Container {
            storage,
            mode: Mode::Packed(Box::new(p)),
        }
    }

    /// For a packed file, [`Packs::moves`] now (what [`Container::kept_times`] says is
    /// stale once that moved on); `None` for any other file.
    pub fn packs_moves(&self) -> Option<u64> {
        match &self.mode {
            Mode::Packed(p) if p.loc.is_some() && !p.loc_stale => p.packs.as_ref().map(|x| x.moves()),
            _ => None,
        }
    }

    /// Whether the file's bytes are in a pack now (its record is current).
    pub fn is_packed(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.loc.is_some() && !p.loc_stale)
    }

    /// The file's current location record, if it is packed.
    pub fn location(&self) -> Option<Location> {
        match &self.mode {
            Mode::Packed(p) if !p.loc_stale => p.loc,
            _ => None,
        }
    }

    /// The bytes a packed file takes on disk: its share of its pack block, by the rule
    /// `stats` counts it by ([`crate::pack::audit::stored_share`]). While its bytes wait in
    /// an open block for the group commit (no block header yet), an estimate at the ratio
    /// the mount's packs have stored so far ([`Packs::estimate_stored`]). `None` for a file
    /// that is not packed: its backing file's blocks are what it takes.
    pub fn packed_stored(&self) -> Option<u64> {
        let Mode::Packed(p) = &self.mode else {
            return None;
        };
        let packs = p.packs.as_ref()?;
        match &p.loc_pending {
            Some(state::PendingLoc::Bytes(slot)) => return Some(packs.estimate_stored(slot.len as u64)),
            Some(state::PendingLoc::Empty) => return Some(0),
            None => {}
        }
        let loc = self.location()?;
        if loc.len == 0 {
            return Some(0);
        }
        let h = packs.block_header(loc.pack, loc.block).ok()?;
        Some(crate::pack::audit::stored_share(&h, loc.len as u64))
    }

    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// True for a backing file served as it is (no container magic).
    pub fn is_plain(&self) -> bool {
        matches!(self.mode, Mode::Plain)
    }
}
