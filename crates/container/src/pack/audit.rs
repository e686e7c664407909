//! Packs as a whole, at rest (`squeezefs check`, `stats`, reclaim): which bytes of each pack
//! live files still use, which are garbage, and whether every block is intact.
//!
//! A pack cannot say by itself which of its bytes are live: only the location records on
//! the backing files point into it. So the caller first walks the tree and adds every
//! current record to a [`LiveMap`]; then [`check_pack`] walks each pack's blocks.
//! A pack no record points into is an orphan; a block no record points into is garbage.
//! Both are judged only when the map is [complete](LiveMap::complete): a record that could
//! not be read might point anywhere.

use std::collections::{BTreeMap, HashMap};

use squeezefs_codec::decompress;

use super::format::{BlockHeader, Location, PackHeader, BLOCK_HEADER_LEN, PACK_HEADER_LEN};
use super::Packs;
use crate::format::codec_label;
use crate::storage::read_full;
use crate::{Error, Result};

/// Live bytes of one block.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LiveBlock {
    pub files: u64,
    /// Logical bytes of the live files in it (bytes several files name count once).
    pub bytes: u64,
}

/// Every block current records point into.
#[derive(Debug, Clone)]
pub struct LiveMap {
    blocks: BTreeMap<(u32, u64), LiveBlock>,
    /// Every range a record names (pack, block, offset, length), with the checksum the
    /// first record naming it gave: files with equal contents may share one range
    /// (the background pass's deduplication).
    ranges: HashMap<(u32, u64, u32, u32), u64>,
    shared: Shared,
    complete: bool,
}

/// Files sharing their bytes with others ([`LiveMap::shared`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// Records naming a range another record names too.
    pub files: u64,
    /// Their logical bytes: what storing each once saves before compression.
    pub bytes: u64,
    /// Of those, records whose checksum differs from the first one's for the same range:
    /// one of them is damaged (its file reads as EIO).
    pub mismatched: u64,
}

impl Default for LiveMap {
    fn default() -> LiveMap {
        LiveMap {
            blocks: BTreeMap::new(),
            ranges: HashMap::new(),
            shared: Shared::default(),
            complete: true,
        }
    }
}

impl LiveMap {
    /// A current record (an empty file's names no block). False when another record named
    /// the same bytes before it (they are shared).
    pub fn add(&mut self, loc: &Location) -> bool {
        if loc.len == 0 {
            return true;
        }
        let b = self.blocks.entry((loc.pack, loc.block)).or_default();
        b.files += 1;
        match self.ranges.entry((loc.pack, loc.block, loc.offset, loc.len)) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(loc.content_sum);
                b.bytes += loc.len as u64;
                true
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                self.shared.files += 1;
                self.shared.bytes += loc.len as u64;
                if *o.get() != loc.content_sum {
                    self.shared.mismatched += 1;
                }
                false
            }
        }
    }

    /// What sharing saves: files whose bytes another file's record names too.
    pub fn shared(&self) -> Shared {
        self.shared
    }

    /// A record could not be read: nothing may be judged unused.
    pub fn mark_incomplete(&mut self) {
        self.complete = false;
    }

    /// Whether every record was read.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Live blocks of pack `id`, by offset.
    pub fn blocks_of(&self, id: u32) -> impl Iterator<Item = (u64, LiveBlock)> + '_ {
        self.blocks
            .range((id, 0)..=(id, u64::MAX))
            .map(|(&(_, off), b)| (off, *b))
    }

    /// Packs some record points into.
    pub fn packs(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.blocks.keys().map(|k| k.0).collect();
        v.dedup();
        v
    }
}

/// The stored bytes of a block (its header and payload) that `bytes` of its decoded bytes
/// account for: `(48 + stored_len) × bytes / logical_len`, rounded down (`bytes` beyond the
/// block's count as the whole block). A packed file's disk share in `stats`, and a block's
/// live bytes in [`check_pack`]: one rule for both.
pub fn stored_share(h: &BlockHeader, bytes: u64) -> u64 {
    let stored = BLOCK_HEADER_LEN as u64 + h.stored_len as u64;
    let logical = (h.logical_len as u64).max(1);
    (stored as u128 * bytes.min(logical) as u128 / logical as u128) as u64
}

/// What a pack-level finding is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackIssue {
    /// Live files' bytes are lost (their own reads fail; `check` names each file too).
    Damage(String),
    /// A crash's leftover; [`repair_pack`] fixes it.
    Leftover(PackFix, String),
    /// Worth knowing, fixed by reclaiming the pack.
    Warning(String),
}

/// What [`repair_pack`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackFix {
    /// No record points into the pack: remove it.
    Remove,
    /// Cut a block torn by a crash (no record points at or past it).
    Truncate(u64),
}

/// One pack, checked.
#[derive(Debug, Clone, Default)]
pub struct PackReport {
    pub id: u32,
    /// Length of the pack file.
    pub len: u64,
    /// Blocks found walking the pack, and of them verified (checksum and decoded).
    pub blocks: u64,
    pub blocks_verified: u64,
    /// Live files and their logical bytes.
    pub live_files: u64,
    pub live_bytes: u64,
    /// Stored bytes (headers included) that live files account for: each block's stored
    /// size shared out by the fraction of its logical bytes still live.
    pub live_stored: u64,
    /// Stored bytes of blocks and of their dead files: what reclaiming the pack frees
    /// (besides whole packs, `len - PACK_HEADER_LEN - live_stored`).
    pub garbage: u64,
    /// Stored bytes per codec label of the blocks, and logical bytes in them.
    pub codecs: BTreeMap<String, (u64, u64)>,
    pub issues: Vec<PackIssue>,
}

impl PackReport {
    /// Garbage as a fraction of the pack's blocks.
    pub fn garbage_fraction(&self) -> f64 {
        let body = self.len.saturating_sub(PACK_HEADER_LEN as u64);
        if body == 0 {
            return 1.0;
        }
        self.garbage as f64 / body as f64
    }

    pub fn damaged(&self) -> bool {
        self.issues.iter().any(|i| matches!(i, PackIssue::Damage(_)))
    }
}

/// Packs whose garbage is above this fraction are rewritten by reclaim.
pub const GARBAGE_MAX: f64 = 0.25;

/// Walks pack `id` block by block, verifying each (with `verify`, payload checksums and
/// decoding; otherwise headers only, as `stats` does), and accounts its live and dead bytes
/// against `live`.
pub fn check_pack(packs: &Packs, id: u32, live: &LiveMap, verify: bool) -> Result<PackReport> {
    let mut r = PackReport {
        id,
        ..PackReport::default()
    };
    let st = packs.handle(id)?;
    r.len = st.len()?;
    let live_blocks: BTreeMap<u64, LiveBlock> = live.blocks_of(id).collect();
    r.live_files = live_blocks.values().map(|b| b.files).sum();
    r.live_bytes = live_blocks.values().map(|b| b.bytes).sum();
    let lost = |what: &str| {
        format!(
            "{}: {what}; {} live files in it",
            packs.describe(id),
            r.live_files
        )
    };
    let mut hb = [0u8; PACK_HEADER_LEN];
    let n = read_full(&*st, &mut hb, 0)?;
    if let Err(e) = PackHeader::decode(&hb[..n]).and_then(|h| {
        if h.id == id {
            Ok(h)
        } else {
            Err(crate::format::FormatError::Field("pack id differs from its name"))
        }
    }) {
        let what = format!("pack header: {e}");
        r.issues.push(if r.live_files == 0 && live.complete() {
            PackIssue::Leftover(
                PackFix::Remove,
                format!("{}: {what}; no file uses it", packs.describe(id)),
            )
        } else {
            PackIssue::Damage(lost(&what))
        });
        return Ok(r);
    }
    let mut off = PACK_HEADER_LEN as u64;
    let mut seen = std::collections::BTreeSet::new();
    while off < r.len {
        let mut b = [0u8; BLOCK_HEADER_LEN];
        let got = read_full(&*st, &mut b, off)?;
        let h = match BlockHeader::decode(&b[..got], id, off) {
            Ok(h) if off + (BLOCK_HEADER_LEN as u64) + h.stored_len as u64 <= r.len => h,
            bad => {
                let why = match bad {
                    Ok(_) => "its payload runs past the end of the pack".to_string(),
                    Err(e) => format!("block header: {e}"),
                };
                if live_blocks.range(off..).next().is_none() {
                    r.issues.push(PackIssue::Leftover(
                        PackFix::Truncate(off),
                        format!(
                            "{}: {} bytes at {off} are a block torn by a crash ({why}); no file uses them",
                            packs.describe(id),
                            r.len - off
                        ),
                    ));
                } else {
                    r.issues.push(PackIssue::Damage(format!(
                        "{}: block at {off}: {why}; the pack cannot be walked past it",
                        packs.describe(id)
                    )));
                }
                break;
            }
        };
        seen.insert(off);
        r.blocks += 1;
        let stored = BLOCK_HEADER_LEN as u64 + h.stored_len as u64;
        let lb = live_blocks.get(&off).copied().unwrap_or_default();
        let live_stored = stored_share(&h, lb.bytes);
        r.live_stored += live_stored;
        r.garbage += stored - live_stored;
        let label = if h.codec == squeezefs_codec::Algorithm::None {
            "none".to_string()
        } else {
            codec_label(h.codec, h.level as i16)
        };
        let c = r.codecs.entry(label).or_default();
        c.0 += stored;
        c.1 += h.logical_len as u64;
        if verify {
            match verify_block(packs, id, off) {
                Ok(()) => r.blocks_verified += 1,
                Err(e) if lb.files > 0 => r.issues.push(PackIssue::Damage(format!(
                    "{}: block at {off}: {e}; {} live files in it",
                    packs.describe(id),
                    lb.files
                ))),
                Err(e) => r.issues.push(PackIssue::Warning(format!(
                    "{}: block at {off}: {e}; no file uses it (reclaim drops it)",
                    packs.describe(id)
                ))),
            }
        }
        off += stored;
    }
    // Live blocks the walk did not reach (past a damaged block) are still read directly.
    for (&off, lb) in &live_blocks {
        if seen.contains(&off) {
            continue;
        }
        if verify {
            match verify_block(packs, id, off) {
                Ok(()) => r.blocks_verified += 1,
                Err(e) => r.issues.push(PackIssue::Damage(format!(
                    "{}: block at {off}: {e}; {} live files in it",
                    packs.describe(id),
                    lb.files
                ))),
            }
        }
    }
    if r.live_files == 0 && live.complete() {
        r.issues
            .retain(|i| !matches!(i, PackIssue::Leftover(..) | PackIssue::Warning(_)));
        r.issues.push(PackIssue::Leftover(
            PackFix::Remove,
            format!(
                "{}: no file uses it (all {} bytes are garbage)",
                packs.describe(id),
                r.len
            ),
        ));
    }
    if !live.complete() {
        // Unknown records may point anywhere: nothing here is known to be unused.
        r.issues.retain(|i| !matches!(i, PackIssue::Leftover(..)));
    }
    Ok(r)
}

/// Reads a block from disk (not the cache), checks its payload and decodes it.
fn verify_block(packs: &Packs, id: u32, off: u64) -> Result<()> {
    let (h, payload) = packs.read_block(id, off)?;
    let mut out = vec![0u8; h.logical_len as usize];
    decompress(h.codec, &payload, &mut out).map_err(|e| Error::CorruptPack {
        pack: id,
        block: off,
        detail: format!("payload passes its checksum but does not decode: {e}"),
    })?;
    Ok(())
}

/// Applies a pack's leftover fixes (only ever judged on a complete [`LiveMap`]).
pub fn repair_pack(packs: &Packs, r: &PackReport) -> Result<usize> {
    let mut n = 0;
    for i in &r.issues {
        match i {
            PackIssue::Leftover(PackFix::Remove, _) => {
                packs.forget(r.id);
                packs.dir().remove(r.id)?;
                return Ok(n + 1);
            }
            PackIssue::Leftover(PackFix::Truncate(len), _) => {
                let st = packs.handle(r.id)?;
                st.set_len(*len)?;
                st.sync_data()?;
                n += 1;
            }
            _ => {}
        }
    }
    Ok(n)
}
