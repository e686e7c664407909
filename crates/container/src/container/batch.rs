//! A batch of covered extents compressed without the file's lock (issue 45).
//!
//! Why: extents that writes covered whole go out [`super::WRITE_BATCH`] at a time
//! (`data.rs`), compressed on every core. Compressed inside `Container::write`, they held
//! the file's lock (the FUSE layer's) for the whole compression: the file's next WRITEs
//! waited, so the writer (`cp`, one core) and the compressors (both cores) took turns, and
//! a copy of big files left a quarter of the machine idle (docs/BENCHMARKS.md, session 30).
//! Worse, the kernel ends a page's writeback only when its WRITE is answered, and a
//! writer's `close` waits for that: each file's close waited for its last batch.
//!
//! What: [`Container::write_deferring`] takes the batch out as a [`Batch`] — each extent's
//! buffer, shared with the cache ([`ExtentBuf`]: a write meanwhile copies it rather than
//! change what the batch compresses), and the policy they are to be compressed with — and
//! marks its extents in flight (no later batch takes them again). The caller lets go of the file, runs
//! [`Batch::compress`] (pure: no storage, no file state), takes the file again and hands
//! the result to [`Container::finish_batch`], which writes the extents through the one
//! write-out path there is (`writeout.rs`: halves, generations, the backoff, crash safety
//! all as for any write-out), using a compressed copy only where the extent still holds
//! the buffer compressed (so exactly those bytes), under the same policy, and the backoff does not skip it.
//! Anything else — the extent written again, written out by an fsync or a close meanwhile,
//! cut off, the file's codec changed, another container instance — is left as it is now:
//! dirty extents are compressed again when they next go out, clean ones are done. A batch
//! never finished (dropped) leaves its extents dirty and in flight until a write-out of the
//! file writes them (which clears the mark).
//!
//! `Container::write` is both steps at once (the property tests' writes), so the deferred
//! path is the only path. The daemon answers the WRITE before compressing
//! (`fs/src/lifecycle/read_write.rs`): an error of the write-out then waits for the file's
//! next `fsync`. `finish_batch` moves no epoch: any write-out between the two steps cleans
//! the batch's extents (it finds them clean), and dirtying them again is a change.

use std::sync::Arc;

use rayon::prelude::*;

use super::state::ExtentBuf;
use crate::adapt::Adaptive;
use crate::encode::{encode_extent, Outcome, Policy};

/// Extents to compress: their bytes as they were when the batch was taken.
#[derive(Debug)]
pub struct Batch {
    pub(super) instance: u64,
    pub(super) shift: u8,
    pub(super) policy: Policy,
    pub(super) adapt: Option<Arc<Adaptive>>,
    /// (extent index, its buffer, its logical length)
    pub(super) items: Vec<(u64, ExtentBuf, usize)>,
}

/// A compressed batch, for [`crate::Container::finish_batch`].
#[derive(Debug)]
pub struct Compressed {
    pub(super) instance: u64,
    pub(super) shift: u8,
    pub(super) policy: Policy,
    pub(super) items: Vec<Precompressed>,
}

/// One extent of a compressed batch.
#[derive(Debug)]
pub(super) struct Precompressed {
    pub(super) idx: u64,
    /// The buffer compressed (the extent's still, when the batch is finished, or this copy
    /// is not used) and its logical length.
    pub(super) buf: ExtentBuf,
    pub(super) logical: usize,
    /// The half as `encode_extent` made it, with generation 0 (the write-out gives it the
    /// generation it plans).
    pub(super) half: Vec<u8>,
    pub(super) outcome: Outcome,
}

impl Batch {
    /// How many extents.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds no extent.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Compresses every extent, in parallel (rayon's pool), as the write-out would.
    pub fn compress(self) -> Compressed {
        let Batch {
            instance,
            shift,
            policy,
            adapt,
            items,
        } = self;
        let items = items
            .into_par_iter()
            .map(|(idx, buf, logical)| {
                // The adaptive level learns how long the writer waits for compression.
                let timed = adapt.as_ref().map(|a| a.compressing());
                let (half, outcome) = encode_extent(policy, false, idx, 0, &buf[..logical]);
                drop(timed);
                Precompressed {
                    idx,
                    buf,
                    logical,
                    half,
                    outcome,
                }
            })
            .collect();
        Compressed {
            instance,
            shift,
            policy,
            items,
        }
    }
}

impl super::state::Packed {
    /// The batch of extents `idxs` (covered, dirty, sorted) to compress without the lock,
    /// their extents marked in flight; `None` when they are better written out here and
    /// now: a background rewrite, a file whose backoff skips extents, or content stored raw
    /// untried (nothing to compress).
    pub(super) fn take_batch(&mut self, idxs: &[u64]) -> Option<Batch> {
        if self.rewrite_codec.is_some() || !(self.forced() || self.fails < super::BACKOFF_AFTER) {
            return None;
        }
        if idxs.first() == Some(&0) {
            // As the write-out does: the file's first bytes may name a compressed format
            // (unless extent 0 is all zeros: then it becomes a hole, and is not looked at).
            let d = self.exts.get(&0)?.data.as_deref()?.get(..self.logical_len(0))?;
            if d.iter().any(|&b| b != 0) {
                self.sniff_first_extent();
            }
        }
        let policy = self.policy();
        if policy.compressed_content {
            return None;
        }
        let mut items = Vec::with_capacity(idxs.len());
        for &idx in idxs {
            let logical = self.logical_len(idx);
            if logical == 0 {
                return None;
            }
            let e = self.exts.get_mut(&idx)?;
            let buf = e.data.as_ref().filter(|d| d.len() >= logical)?.clone();
            items.push((idx, buf, logical));
        }
        for &(idx, _, _) in &items {
            if let Some(e) = self.exts.get_mut(&idx) {
                e.in_flight = true;
            }
        }
        Some(Batch {
            instance: self.instance,
            shift: self.shift,
            policy,
            adapt: self.adaptive().cloned(),
            items,
        })
    }
}
