//! Counters of what the write and read paths decided, shared by every container of a mount
//! (the daemon exposes them live; see `squeezefs stats --live`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use squeezefs_codec::{Algorithm, CodecSpec};

use crate::encode::{Outcome, Probe, RawWhy};

/// Bytes in and out of one codec at one level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodecCounts {
    pub extents: u64,
    /// Logical bytes of the extents it compressed.
    pub bytes_in: u64,
    /// Their stored (compressed) payload bytes.
    pub bytes_out: u64,
}

#[derive(Default)]
pub struct Stats {
    extents_compressed: AtomicU64,
    extents_raw: AtomicU64,
    extents_hole: AtomicU64,
    raw_bytes: AtomicU64,
    raw_no_gain: AtomicU64,
    raw_heuristic: AtomicU64,
    raw_backoff: AtomicU64,
    raw_early_abort: AtomicU64,
    raw_content_type: AtomicU64,
    raw_by_choice: AtomicU64,
    probe_lz4_pass: AtomicU64,
    probe_zstd1_pass: AtomicU64,
    heuristic_overruled: AtomicU64,
    inline_files: AtomicU64,
    packed_files: AtomicU64,
    files_grown: AtomicU64,
    extents_copied: AtomicU64,
    batch_copies_used: AtomicU64,
    copied_logical: AtomicU64,
    copied_stored: AtomicU64,
    copied_shared: AtomicU64,
    files_flagged: AtomicU64,
    files_unflagged: AtomicU64,
    checksum_errors: AtomicU64,
    dict_extents: AtomicU64,
    dict_bytes_in: AtomicU64,
    dict_bytes_out: AtomicU64,
    dict_inline_files: AtomicU64,
    extents_loaded: AtomicU64,
    ahead_installed: AtomicU64,
    ahead_discarded: AtomicU64,
    codecs: Mutex<BTreeMap<(Algorithm, i32), CodecCounts>>,
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub extents_compressed: u64,
    pub extents_raw: u64,
    pub extents_hole: u64,
    /// Logical (= stored) bytes of raw extents.
    pub raw_bytes: u64,
    /// Raw because the compressed result did not save 12.5 % and one block.
    pub raw_no_gain: u64,
    /// Raw because the heuristic judged the extent incompressible and lz4 agreed.
    pub raw_heuristic: u64,
    /// Raw because the file is flagged incompressible and this was not a retry.
    pub raw_backoff: u64,
    /// Raw because both early-abort probes (lz4, zstd-1) failed.
    pub raw_early_abort: u64,
    /// Raw, untried, because the file's first bytes named an already-compressed format.
    pub raw_content_type: u64,
    /// Raw because the codec is `none` or the extent is too small to save a block.
    pub raw_by_choice: u64,
    /// Early abort: lz4 saved enough, so the requested zstd level ran.
    pub probe_lz4_pass: u64,
    /// Early abort: lz4 did not, zstd-1 did, so the requested level ran.
    pub probe_zstd1_pass: u64,
    /// The heuristic said incompressible, a fast lz4 pass showed otherwise: compressed.
    pub heuristic_overruled: u64,
    /// Files written whole into their superblock's inline area.
    pub inline_files: u64,
    /// Files written to a pack (each write-out of a packed file counts).
    pub packed_files: u64,
    /// Files written whole from their start that took the largest extent size before their
    /// first write-out (`container/grow.rs`).
    pub files_grown: u64,
    /// Stored extents copied as they are by `copy_file_range` (`container/copy.rs`), the
    /// bytes they hold and their payloads' bytes.
    pub extents_copied: u64,
    /// Extents written with the copy a batch compressed without the file's lock
    /// (`container/batch.rs`); the others of a batch were written again or out meanwhile.
    pub batch_copies_used: u64,
    pub copied_logical: u64,
    pub copied_stored: u64,
    /// Bytes of copied extents whose blocks the backing filesystem shares (reflinks).
    pub copied_shared: u64,
    /// Files flagged incompressible / unflagged after a successful retry.
    pub files_flagged: u64,
    pub files_unflagged: u64,
    /// Extent copies or superblocks that failed their checksum when read.
    pub checksum_errors: u64,
    /// Extents compressed with a dictionary, their logical and stored bytes (also counted
    /// in `codecs`).
    pub dict_extents: u64,
    pub dict_bytes_in: u64,
    pub dict_bytes_out: u64,
    /// Inline files whose payload was compressed with a dictionary.
    pub dict_inline_files: u64,
    /// Extents a reader loaded (read and decoded) itself, on its request's time.
    pub extents_loaded: u64,
    /// Extents loaded ahead of a sequential reader and cached for it.
    pub ahead_installed: u64,
    /// Extents loaded ahead and thrown away: the file changed, or the reader got there
    /// first.
    pub ahead_discarded: u64,
    /// Compressed extents per codec and level.
    pub codecs: Vec<(CodecSpec, CodecCounts)>,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    /// Counts one extent written with `outcome`: `logical` bytes stored as `stored`.
    pub fn extent(&self, outcome: &Outcome, logical: usize, stored: usize) {
        match outcome {
            Outcome::Compressed { codec, probe, dict } => {
                add(&self.extents_compressed, 1);
                if *dict {
                    add(&self.dict_extents, 1);
                    add(&self.dict_bytes_in, logical as u64);
                    add(&self.dict_bytes_out, stored as u64);
                }
                let mut m = self.codecs.lock().unwrap();
                let e = m.entry((codec.alg, codec.level)).or_default();
                e.extents += 1;
                e.bytes_in += logical as u64;
                e.bytes_out += stored as u64;
                drop(m);
                self.probe(*probe);
            }
            Outcome::Raw { why, probe } => {
                add(&self.extents_raw, 1);
                add(&self.raw_bytes, logical as u64);
                add(
                    match why {
                        RawWhy::NoGain => &self.raw_no_gain,
                        RawWhy::Heuristic => &self.raw_heuristic,
                        RawWhy::Backoff => &self.raw_backoff,
                        RawWhy::EarlyAbort => &self.raw_early_abort,
                        RawWhy::ContentType => &self.raw_content_type,
                        RawWhy::NoCodec | RawWhy::TooSmall => &self.raw_by_choice,
                    },
                    1,
                );
                self.probe(*probe);
            }
        }
    }

    fn probe(&self, p: Option<Probe>) {
        match p {
            Some(Probe::Lz4) => add(&self.probe_lz4_pass, 1),
            Some(Probe::Zstd1) => add(&self.probe_zstd1_pass, 1),
            Some(Probe::Overruled) => add(&self.heuristic_overruled, 1),
            None => {}
        }
    }

    pub fn hole(&self) {
        add(&self.extents_hole, 1);
    }

    /// One file written inline; `dict`: its payload used a dictionary.
    pub fn inline_file(&self, dict: bool) {
        add(&self.inline_files, 1);
        if dict {
            add(&self.dict_inline_files, 1);
        }
    }

    pub fn packed_file(&self) {
        add(&self.packed_files, 1);
    }

    pub fn extents_grown(&self) {
        add(&self.files_grown, 1);
    }

    /// A copied extent's `bytes` shared with its source by the backing filesystem.
    pub fn extent_shared(&self, bytes: u64) {
        add(&self.copied_shared, bytes);
    }

    /// An extent written with its batch's compressed copy (`container/batch.rs`).
    pub fn batch_copy_used(&self) {
        add(&self.batch_copies_used, 1);
    }

    /// A stored extent copied as it is (`container/copy.rs`).
    pub fn extent_copied(&self, logical: usize, stored: usize) {
        add(&self.extents_copied, 1);
        add(&self.copied_logical, logical as u64);
        add(&self.copied_stored, stored as u64);
    }

    pub fn flagged(&self, on: bool) {
        add(
            if on {
                &self.files_flagged
            } else {
                &self.files_unflagged
            },
            1,
        );
    }

    pub fn checksum_error(&self) {
        add(&self.checksum_errors, 1);
    }

    /// One extent loaded by its reader.
    pub fn extent_loaded(&self) {
        add(&self.extents_loaded, 1);
    }

    /// One extent loaded ahead: cached (`installed`) or thrown away.
    pub fn ahead(&self, installed: bool) {
        add(
            if installed {
                &self.ahead_installed
            } else {
                &self.ahead_discarded
            },
            1,
        );
    }

    pub fn snapshot(&self) -> Snapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            extents_compressed: g(&self.extents_compressed),
            extents_raw: g(&self.extents_raw),
            extents_hole: g(&self.extents_hole),
            raw_bytes: g(&self.raw_bytes),
            raw_no_gain: g(&self.raw_no_gain),
            raw_heuristic: g(&self.raw_heuristic),
            raw_backoff: g(&self.raw_backoff),
            raw_early_abort: g(&self.raw_early_abort),
            raw_content_type: g(&self.raw_content_type),
            raw_by_choice: g(&self.raw_by_choice),
            probe_lz4_pass: g(&self.probe_lz4_pass),
            probe_zstd1_pass: g(&self.probe_zstd1_pass),
            heuristic_overruled: g(&self.heuristic_overruled),
            inline_files: g(&self.inline_files),
            packed_files: g(&self.packed_files),
            files_grown: g(&self.files_grown),
            extents_copied: g(&self.extents_copied),
            batch_copies_used: g(&self.batch_copies_used),
            copied_logical: g(&self.copied_logical),
            copied_stored: g(&self.copied_stored),
            copied_shared: g(&self.copied_shared),
            files_flagged: g(&self.files_flagged),
            files_unflagged: g(&self.files_unflagged),
            checksum_errors: g(&self.checksum_errors),
            dict_extents: g(&self.dict_extents),
            dict_bytes_in: g(&self.dict_bytes_in),
            dict_bytes_out: g(&self.dict_bytes_out),
            dict_inline_files: g(&self.dict_inline_files),
            extents_loaded: g(&self.extents_loaded),
            ahead_installed: g(&self.ahead_installed),
            ahead_discarded: g(&self.ahead_discarded),
            codecs: self
                .codecs
                .lock()
                .unwrap()
                .iter()
                .filter_map(|((a, l), c)| Some((CodecSpec::new(*a, *l).ok()?, *c)))
                .collect(),
        }
    }
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").finish_non_exhaustive()
    }
}
