//! Whether an extent is worth trying to compress, per file: HAMMER2's backoff. After
//! [`BACKOFF_AFTER`] extents in a row resisted compression the file is flagged `NOCOMPRESS`
//! (recorded in its superblock) and only every [`RETRY_EVERY`]th extent write tries; one
//! success clears the flag. This is the container's part of the compression decision; what
//! follows for each extent tried (the btrfs heuristic, the ZFS early abort, the "must save
//! 12.5 %" rule) is in [`crate::encode`], given the [`Policy`] built here.
//!
//! It lives apart from the write-out so the decision and its state can be read in one place:
//! `writeout.rs` asks [`Packed::backoff_skips`] before compressing and tells
//! [`Packed::learn`] what came out.

use squeezefs_codec::{Algorithm, CodecSpec};

use crate::encode::{Outcome, Policy};

use super::state::Packed;

/// Consecutive extents that resist compression before a file is flagged incompressible
/// (HAMMER2's `comp_heuristic` threshold).
pub const BACKOFF_AFTER: u32 = 8;
/// Bytes of a file's start that [`Packed::sniff`] looks at (the magic numbers of the
/// formats it knows, ZIP's subtypes included, lie within them).
pub(super) const SNIFF_LEN: usize = 8192;
/// A flagged file still tries one extent write in this many (HAMMER2 retries every 8th).
pub const RETRY_EVERY: u32 = 8;

impl Packed {
    /// What [`crate::encode::encode_extent`] needs to know of the file: its codec (the
    /// file's property, else the mount's, at the adaptive level now if the mount has one),
    /// whether it is forced (the mount's `compress-force`, or its own property), and its
    /// dictionary.
    pub(super) fn policy(&self) -> Policy {
        if let Some(codec) = self.rewrite_codec {
            // Background recompression: extents that compressed before, at a target level.
            return Policy {
                codec,
                force: true,
                dict: self.dict,
                compressed_content: false,
            };
        }
        let codec = match self.adaptive() {
            Some(a) => CodecSpec {
                alg: Algorithm::Zstd,
                level: a.level(),
            },
            None => self.codec,
        };
        Policy {
            codec,
            force: self.forced(),
            dict: self.dict,
            compressed_content: self.compressed_content.is_some(),
        }
    }

    /// Looks at the file's first bytes whenever extent 0 is written out (or the file goes
    /// to a pack): an already-compressed format (`squeezefs_codec::content`) has this
    /// container's extents stored raw untried from then on, unless compression is forced
    /// or the file has a compression property of its own (a rule, its directory's or its
    /// own: someone chose its codec). The file is also flagged `NOCOMPRESS` (kept in its
    /// superblock): opened again later, it is tried only every `RETRY_EVERY`th extent, and
    /// the background pass does not rewrite it.
    pub(super) fn sniff(&mut self, head: &[u8]) {
        self.compressed_content = if self.forced() || self.codec_prop {
            None
        } else {
            squeezefs_codec::content::already_compressed(head)
        };
        if self.compressed_content.is_some() && !self.nocompress {
            self.nocompress = true;
            self.sb_dirty = true;
            self.stats.flagged(true);
        }
    }

    /// [`Packed::sniff`] on the first [`SNIFF_LEN`] bytes of extent 0 in memory (the
    /// write-out's look at a file's start, and a batch's before it: `batch.rs`).
    pub(super) fn sniff_first_extent(&mut self) {
        let n = self.logical_len(0).min(SNIFF_LEN);
        let head = self
            .exts
            .get(&0)
            .and_then(|e| e.data.as_deref())
            .map(|d| d[..n.min(d.len())].to_vec());
        if let Some(head) = head {
            self.sniff(&head);
        }
    }

    /// Whether every extent is compressed, untried by the heuristic, the backoff, the early
    /// abort and the content type: the mount's `compress-force=`, or the file's own force
    /// property.
    pub(super) fn forced(&self) -> bool {
        self.force || self.force_prop
    }

    /// The mount's adaptive level, when it decides this file's (no property of its own).
    pub(super) fn adaptive(&self) -> Option<&std::sync::Arc<crate::adapt::Adaptive>> {
        self.adapt
            .as_ref()
            .filter(|_| !self.codec_prop && self.rewrite_codec.is_none())
    }

    /// HAMMER2's backoff: once `BACKOFF_AFTER` extents in a row resisted compression, only
    /// every `RETRY_EVERY`th extent write tries; the others are stored raw untouched.
    pub(super) fn backoff_skips(&mut self) -> bool {
        if self.forced() || self.fails < BACKOFF_AFTER {
            return false;
        }
        self.backoff_writes = self.backoff_writes.wrapping_add(1);
        !self.backoff_writes.is_multiple_of(RETRY_EVERY)
    }

    /// Updates the backoff with what one extent taught: a success clears the flag, the
    /// `BACKOFF_AFTER`th failure in a row sets it (recorded in the superblock).
    pub(super) fn learn(&mut self, outcome: &Outcome) {
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
                if self.fails >= BACKOFF_AFTER && !self.nocompress && !self.forced() {
                    self.nocompress = true;
                    self.sb_dirty = true;
                    self.stats.flagged(true);
                }
            }
            None => {}
        }
    }
}
