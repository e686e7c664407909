//! Where each extent's current copy lies in the backing file, for the background pass's
//! block sharing (issue 45: identical large files stored once, `FIDEDUPERANGE`).
//!
//! A half starts on a block boundary (FORMAT.md, Layout) and holds a 48-byte header and the
//! payload right after it. Two files written with the same bytes in the same extent sizes
//! hold equal halves: equal payloads (the payload checksum and lengths nominate them), and
//! equal headers too when the index and generation agree (files written alike). The backing
//! compares the bytes itself before it shares any block (`Storage::dedupe_from`), so what
//! this reports is a nomination, never trusted: a half rewritten since, or torn, simply
//! fails the comparison.

use std::ops::Range;

use super::{Container, Mode};
use crate::format::{ExtentHeader, EXTENT_HEADER_LEN};
use crate::layout::{newest_halves, read_halves, Tie};
use crate::storage::Storage;
use crate::Result;

/// One extent's newest stored copy: where it is in the backing file and what its header
/// says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredHalf {
    /// Byte offset of the half in the backing file (block aligned).
    pub at: u64,
    /// Its header and payload bytes.
    pub len: u64,
    /// The bytes reserved for it (FORMAT.md, Layout: `S`); what lies after `len` in them is
    /// part of no copy.
    pub slot: u64,
    /// Where the extent's two slots start (its half A): `2 · slot` bytes. Besides this copy
    /// they hold an older copy of the extent in the other half, or nothing: a caller shares
    /// them only where the backing finds them byte-equal too.
    pub pair: u64,
    pub header: ExtentHeader,
}

impl<S: Storage> Container<S> {
    /// The newest stored copy of each extent in `range` (extent indexes) whose copy on disk
    /// is all there is of it: not dirty in memory, inside the file, not a hole. Files whose
    /// data lives in a pack or in the superblock have none. Also returns the file's extent
    /// count, for the caller's next range.
    pub fn stored_halves(&self, range: Range<u64>) -> Result<(Vec<StoredHalf>, u64)> {
        let Mode::Packed(p) = &self.mode else {
            return Ok((Vec::new(), 0));
        };
        if !p.in_extents() {
            return Ok((Vec::new(), 0));
        }
        let count = p.extent_count();
        let geo = p.geo();
        let mut out = Vec::new();
        for idx in range.start..range.end.min(count) {
            if p.is_stale(idx) || p.exts.get(&idx).is_some_and(|e| e.dirty) {
                continue;
            }
            let halves = read_halves(&self.storage, geo, idx)?;
            if let Some((half, header)) = newest_halves(&halves, Tie::First).first() {
                out.push(StoredHalf {
                    at: geo.half(idx, *half),
                    len: (EXTENT_HEADER_LEN + header.stored_len as usize) as u64,
                    slot: geo.slot(),
                    pair: geo.half(idx, 0),
                    header: *header,
                });
            }
        }
        Ok((out, count))
    }
}
