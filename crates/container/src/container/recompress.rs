//! One file's part of background recompression (issue 30, `background_compression=`):
//! extents stored with another codec or level than a target are rewritten at the target,
//! in place and crash-safely as [`Container::rewrite`] does (each new copy goes to the
//! extent's other half; the old one stays valid until the new one is durable), while the
//! codec the file's new writes get stays what it was.
//!
//! What is left alone, so that a pass over a tree converges and never loops:
//! * raw extents: compression already failed on them (bcachefs#48, #1186 retried such
//!   data forever), and so a file flagged incompressible;
//! * extents compressed with a dictionary (the file's own choice, for small data);
//! * extents with no valid header (`check` reports them; rewriting could only copy the
//!   damage);
//! * a packed file (its bytes are in a pack block; rewriting packs is the pass's other
//!   step), a file of one extent (written back it could become inline or packed), and a
//!   file with bytes waiting in memory (a user's write wins: the caller comes back to it
//!   later).

use squeezefs_codec::{Algorithm, CodecSpec};

use super::state::{Mode, Packed};
use super::Container;
use crate::format::{KeptTimes, EXTENT_FLAG_DICT};

/// The change and modification times `stat` shows for a file instead of its backing
/// file's ([`Container::kept_times`]). A location record keeps no modification time (a
/// reclaim moves none): `mtime` is then `None`, the backing file's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatTimes {
    pub ctime: (i64, u32),
    pub mtime: Option<(i64, u32)>,
}

impl From<KeptTimes> for StatTimes {
    fn from(k: KeptTimes) -> StatTimes {
        StatTimes {
            ctime: k.ctime,
            mtime: Some(k.mtime),
        }
    }
}
use crate::layout::{newest_halves, read_halves, Tie};
use crate::storage::Storage;
use crate::Result;

/// What [`Container::recompress`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recompressed {
    /// Extents rewritten at the target.
    pub extents: u64,
    /// Their logical bytes.
    pub bytes: u64,
}

impl<S: Storage> Container<S> {
    /// The extents whose current copy is compressed with another codec or level than
    /// `target` (see the module's documentation for what is left alone).
    pub fn pending_for(&mut self, target: CodecSpec) -> Result<Vec<u64>> {
        Ok(self.pending_in(target, 0..u64::MAX).0)
    }

    /// [`Container::pending_for`] among extents `range` only (a pass scans a large file a
    /// slice at a time), and the file's extent count (0 when it may not be recompressed at
    /// all).
    pub fn pending_in(&self, target: CodecSpec, range: std::ops::Range<u64>) -> (Vec<u64>, u64) {
        let count = match &self.mode {
            Mode::Packed(p) if Self::may_recompress(p) => p.extent_count(),
            _ => return (Vec::new(), 0),
        };
        let todo = (range.start..range.end.min(count))
            .filter(|&idx| self.extent_pending(idx, target))
            .collect();
        (todo, count)
    }

    /// Rewrites at `target` the extents [`Container::pending_for`] names. Durable when this
    /// returns; on an error, each extent is old or new, with the same bytes either way.
    pub fn recompress(&mut self, target: CodecSpec) -> Result<Recompressed> {
        let todo = self.pending_for(target)?;
        self.recompress_extents(target, &todo, None)
    }

    /// [`Container::recompress`] for those of extents `idxs` that are still pending (the
    /// background pass hands a file's extents over a few at a time, so a user's write is
    /// never kept waiting long). With `keep_times` (the backing file's change and
    /// modification times before the first rewrite), the superblock keeps them first, made
    /// durable before any extent is rewritten, so `stat` shows them however the rewrites
    /// move the backing file's (`SB_FLAG_TIMES`); a file that keeps some already keeps
    /// those.
    pub fn recompress_extents(
        &mut self,
        target: CodecSpec,
        idxs: &[u64],
        keep_times: Option<KeptTimes>,
    ) -> Result<Recompressed> {
        match &self.mode {
            Mode::Packed(p) if Self::may_recompress(p) => {}
            _ => return Ok(Recompressed::default()),
        }
        let todo: Vec<u64> = idxs
            .iter()
            .copied()
            .filter(|&i| self.extent_pending(i, target))
            .collect();
        if todo.is_empty() {
            return Ok(Recompressed::default());
        }
        if let (Some(c), Mode::Packed(p)) = (keep_times, &mut self.mode) {
            if p.kept_times.is_none() {
                p.kept_times = Some(c);
                p.sb_dirty = true;
                self.fsync()?;
            }
        }
        self.set_rewrite_codec(Some(target));
        let r = self.rewrite_extents(&todo);
        self.set_rewrite_codec(None);
        r
    }

    /// The times `stat` shows for this file instead of its backing file's: those its
    /// superblock keeps (`SB_FLAG_TIMES`: the backing file's before background
    /// recompression or relayout moved them), or the change time its location record
    /// keeps (version 3: a reclaim or repack of its pack moved the record). `None` when
    /// the file changed since, or was never moved so.
    pub fn kept_times(&self) -> Option<StatTimes> {
        match &self.mode {
            Mode::Packed(p) if p.loc.is_some() && !p.loc_stale => p
                .record_ctime(&self.storage)
                .map(|ctime| StatTimes { ctime, mtime: None }),
            Mode::Packed(p) => p.kept_times.map(StatTimes::from),
            Mode::Plain => None,
        }
    }

    /// Drops the kept times: the caller is about to change the file in a way the
    /// container does not see (an owner, mode, time, xattr or link count on the backing
    /// file), which moves the backing file's ctime. A superblock's go with the superblock
    /// written next; a location record's now (the record is written again without it,
    /// made durable by the next `fsync`).
    pub fn forget_kept_times(&mut self) -> Result<()> {
        if let Mode::Packed(p) = &mut self.mode {
            if p.loc.is_some() && !p.loc_stale {
                return p.forget_record_ctime(&self.storage);
            }
            if p.kept_times.take().is_some() {
                p.sb_dirty = true;
            }
        }
        Ok(())
    }

    /// Whether a file's extents may be recompressed at all (the module's documentation).
    /// A file of one extent is left too: written back, it could become inline or go to a
    /// pack (a change of form the pass must not make, and one its kept times cannot
    /// follow).
    fn may_recompress(p: &Packed) -> bool {
        !p.nocompress
            && p.share.bytes() == 0
            && p.loc.is_none()
            && p.loc_pending.is_none()
            && p.extent_count() >= 2
    }

    /// Whether extent `idx`'s current copy is compressed, without a dictionary, at another
    /// codec or level than `target`. Only the headers are read (a walk over a tree already
    /// at its target reads a few bytes per extent, not the data): the newest valid header
    /// names the copy a read uses unless its payload is damaged, and then the rewrite reads
    /// what a read would (the older copy, or an error the pass logs). An extent whose
    /// headers cannot be read now is not pending (`check` says more).
    fn extent_pending(&self, idx: u64, target: CodecSpec) -> bool {
        let Mode::Packed(p) = &self.mode else { return false };
        if idx >= p.extent_count() || p.is_stale(idx) {
            return false;
        }
        let Ok(halves) = read_halves(&self.storage, p.geo(), idx) else {
            return false;
        };
        let Some(&(_, h)) = newest_halves(&halves, Tie::First).first() else {
            return false; // a hole, or nothing valid
        };
        let at_target = h.codec == target.alg && i32::from(h.level) == target.level;
        h.codec != Algorithm::None && h.flags & EXTENT_FLAG_DICT == 0 && !at_target
    }

    fn set_rewrite_codec(&mut self, codec: Option<CodecSpec>) {
        if let Mode::Packed(p) = &mut self.mode {
            p.rewrite_codec = codec;
        }
    }
}
