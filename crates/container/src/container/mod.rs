//! The container state machine: one logical file over one [`Storage`] — reads, writes,
//! truncation, hole punching and the ordered, crash-safe write-out of extents and
//! superblocks. This file holds the public type, its opening and its write-back lifecycle;
//! the rest is split by role:
//!
//! * `state.rs` — the in-memory state (`Packed`, per-extent
//!   `Ext`/`DiskState`) and its small queries.
//! * `props.rs` — the file's settings and properties (codec, extent size, dictionary).
//! * `data.rs` — read, write, set_size, punch_hole, SEEK_DATA/SEEK_HOLE, rewrite.
//! * `cache.rs` — the extent cache: loading the current copy of an extent, trimming.
//! * `policy.rs` — whether an extent is tried at all (HAMMER2 backoff) and the
//!   `encode::Policy` handed to `encode`.
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

mod cache;
mod data;
mod policy;
mod props;
mod state;
mod writeout;

use std::collections::BTreeMap;
use std::sync::Arc;

use log::warn;
use squeezefs_codec::{Algorithm, CodecSpec};

pub use policy::{BACKOFF_AFTER, RETRY_EVERY};
use state::{Ext, Mode, Packed};

use crate::encode::decode_payload;
use crate::format::{
    ExtentHeader, FormatError, DEFAULT_EXTENT_SHIFT, EXTENT_FLAG_DICT, PROP_COMPRESSION, PROP_DICTIONARY,
    PROP_EXTENT_SIZE, SB_FLAG_DICT, SB_FLAG_NOCOMPRESS,
};
use crate::layout::{current_superblock, read_head, superblock_copies, Head, Tie};
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

/// One logical file over one [`Storage`].
///
/// # Lifecycle of a change (as implemented today)
///
/// A backing file without the container magic is *plain*: every operation goes straight to
/// the storage, and the lifecycle calls below do nothing (`write_back`,
/// `commit_after_sync` → `false`, `epoch` → 0, `needs_settle`, `commit_pending` → `false`).
/// For a container:
///
/// 1. **Dirty.** `write`, `set_size`, `punch_hole` (of a non-empty range) and the property
///    setters change the file in memory and increment the [`epoch`](Container::epoch), a
///    token for "the state so far". Partial extents stay dirty in memory
///    ([`dirty_bytes`](Container::dirty_bytes)); an extent a write covered entirely, and
///    every dirty extent once more than 8 MiB are dirty, is compressed and written at once
///    (to the half that does not hold the last durable copy) — written, not durable, and
///    not yet described by a superblock.
/// 2. **Written back.** [`write_back`](Container::write_back) writes every dirty extent (and
///    punches what the file no longer uses). An inline file's data is in its superblock,
///    which is written at once; so is the superblock of a file that wrote nothing since its
///    last sync. Otherwise the new superblock must wait until the extents are durable: it is
///    left *pending* for this epoch and `write_back` returns `true`
///    ([`commit_pending`](Container::commit_pending)). Until it is written the file on disk
///    is its previous version (or empty, for a new file).
/// 3. **Committed.** Once every write made so far is durable (the caller's `fdatasync`, or
///    one `syncfs` for many files), [`commit_after_sync`](Container::commit_after_sync)
///    writes the pending superblock — only if the epoch is still the one written back;
///    otherwise it returns `false`, the superblock stays pending (for the old epoch) and the
///    caller must `write_back` again. Committing first does the post-sync bookkeeping (the
///    extents are durable, the halves they replaced are punched).
/// 4. **Settled.** The new superblock copy is written but not known durable; the older copy
///    (and any replaced halves) must stay until it is. [`needs_settle`](Container::needs_settle)
///    is true while such copies wait: the other superblock copy holds an older one, or some
///    extent's other half holds a replaced copy. After a sync covering everything up to
///    epoch `e`, [`settle(e)`](Container::settle) punches them — only when the epoch is
///    still `e`, nothing is pending and nothing is dirty; otherwise it does nothing.
///
/// [`flush`](Container::flush) does 2 and 3 with its own `sync_data` in between (and drops
/// any pending state); it is ordering, not durability. [`fsync`](Container::fsync) is
/// `flush`, `sync_data`, then 4: afterwards everything is durable and settled.
/// [`drop_cache`](Container::drop_cache) only forgets clean cached extents.
#[derive(Debug)]
pub struct Container<S: Storage> {
    storage: S,
    mode: Mode,
}

impl Packed {
    /// The state of a file opened with `opts`: nothing known about its disk yet.
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
