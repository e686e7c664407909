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
//! * damaged extents (`check` reports them; rewriting could only copy the damage);
//! * a packed file (its bytes are in a pack block; rewriting packs is the pass's other
//!   step) and a file with bytes waiting in memory (a user's write wins: the caller comes
//!   back to it later).

use squeezefs_codec::{Algorithm, CodecSpec};

use super::cache::probe_halves;
use super::state::Mode;
use super::Container;
use crate::format::EXTENT_FLAG_DICT;
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
        let Mode::Packed(p) = &mut self.mode else {
            return Ok(Vec::new());
        };
        if p.nocompress || p.share.bytes() > 0 || p.loc.is_some() || p.loc_pending.is_some() {
            return Ok(Vec::new());
        }
        let mut todo = Vec::new();
        for idx in 0..p.extent_count() {
            if p.is_stale(idx) {
                continue;
            }
            let Ok(probed) = probe_halves(&self.storage, p.shift, idx) else {
                continue; // unreadable now: `check` says more
            };
            let Some((h, _)) = probed.copy else { continue };
            let at_target = h.codec == target.alg && i32::from(h.level) == target.level;
            if h.codec != Algorithm::None && h.flags & EXTENT_FLAG_DICT == 0 && !at_target {
                todo.push(idx);
            }
        }
        Ok(todo)
    }

    /// Rewrites at `target` the extents [`Container::pending_for`] names. Durable when this
    /// returns; on an error, each extent is old or new, with the same bytes either way.
    pub fn recompress(&mut self, target: CodecSpec) -> Result<Recompressed> {
        let todo = self.pending_for(target)?;
        if todo.is_empty() {
            return Ok(Recompressed::default());
        }
        self.set_rewrite_codec(Some(target));
        let r = self.rewrite_extents(&todo);
        self.set_rewrite_codec(None);
        r
    }

    fn set_rewrite_codec(&mut self, codec: Option<CodecSpec>) {
        if let Mode::Packed(p) = &mut self.mode {
            p.rewrite_codec = codec;
        }
    }
}
