//! `copy_file_range` between two containers (issue 45): whole extents are copied as they
//! are stored, without decoding or encoding.
//!
//! A stored extent is a header and a payload (FORMAT.md, Extent header); the payload and
//! its checksum do not depend on where the extent lies, the header names the extent's
//! index and generation. So an extent of one file becomes an extent of another by writing
//! its payload under a new header, into the destination's free half, under the rules every
//! write-out follows (`writeout.rs`: the half that does not hold the last durable copy, a
//! generation above both halves', the superblock after the sync that covers it): a crash
//! leaves each extent of the destination old or new, as for any write.
//!
//! Extents are copied as stored when both files are containers with the same extent size
//! (a new, empty destination that has not decided its size takes the source's), the two
//! offsets lie equally far into an extent, and the destination ends past one extent (a
//! smaller one goes to a pack at its write-out). An extent is taken from the source only
//! when its current copy on disk is the whole truth: not dirty in memory, inside the file
//! (not past a truncation), not a hole, written without a dictionary (whose id the
//! destination would have to name), and holding exactly the bytes the file has there. The
//! source's last extent is copied as stored only when the destination then ends where it
//! does. Everything else — partial extents at the ends, packed and inline files, other
//! extent sizes — goes the ordinary way: read, then written.
//!
//! Where the backing filesystem shares blocks (`Storage::share_from`), a half whose header
//! stays the source's byte for byte (same index; the source's generation outranks both of
//! the destination's halves) is shared, not written. A source extent with one valid header
//! is then not read at all: were its payload damaged, the copy is damaged alike and reads
//! as such (EIO, and `check` names it), as a reflink copy on XFS or btrfs would be; where
//! the blocks cannot be shared the payload is read and checked first, and a damaged one
//! fails the copy.

use std::collections::BTreeMap;

use super::data::MAX_SIZE;
use super::state::Packed;
use super::writeout::Foreign;
use super::{Container, Mode};
use crate::format::EXTENT_FLAG_DICT;
use crate::layout::{newest_halves, read_halves, Tie};
use crate::storage::Storage;
use crate::{Error, Result};

/// Bytes the ordinary path reads and writes at a time.
const CHUNK: u64 = 1 << 20;
/// Payload bytes of stored copies held in memory before they are written.
const BATCH: usize = 32 << 20;

impl<S: Storage> Container<S> {
    /// Copies `len` bytes at `off_in` of `src` to `off_out` of this file (another file),
    /// growing it where the copy ends past its end; returns the bytes copied (fewer only
    /// where `src` ends first). Whole extents are copied as stored (see the module).
    pub fn copy_from(&mut self, src: &mut Container<S>, off_in: u64, off_out: u64, len: u64) -> Result<u64> {
        let len = len.min(src.size()?.saturating_sub(off_in));
        if len == 0 {
            return Ok(0);
        }
        if off_out.checked_add(len).is_none_or(|end| end > MAX_SIZE) {
            return Err(Error::TooLarge);
        }
        match self.stored_span(src, off_in, off_out, len)? {
            Some((a, b)) => {
                let end = off_out + len;
                self.copy_plain(src, off_in, off_out, a - off_out)?;
                self.copy_stored(src, off_in + (a - off_out), a, b.min(end) - a)?;
                if b < end {
                    self.copy_plain(src, off_in + (b - off_out), b, end - b)?;
                }
            }
            None => self.copy_plain(src, off_in, off_out, len)?,
        }
        Ok(len)
    }

    /// A copy within this file (the ranges may not overlap: the kernel checks): read, then
    /// written, a chunk at a time.
    pub fn copy_within(&mut self, off_in: u64, off_out: u64, len: u64) -> Result<u64> {
        let len = len.min(self.size()?.saturating_sub(off_in));
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK) as usize;
            let data = self.read(off_in + done, n)?;
            self.write(off_out + done, &data)?;
            done += n as u64;
        }
        Ok(len)
    }

    /// The ordinary path: read from `src`, written here.
    fn copy_plain(&mut self, src: &mut Container<S>, off_in: u64, off_out: u64, len: u64) -> Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK) as usize;
            let data = src.read(off_in + done, n)?;
            self.write(off_out + done, &data)?;
            done += n as u64;
        }
        Ok(())
    }

    /// The destination's range `[a, b)` whose extents may be copied as stored (extent
    /// aligned; `b` may pass the copy's end where the source's last extent ends it), if
    /// any. A new, empty destination takes the source's extent size here.
    fn stored_span(
        &mut self,
        src: &Container<S>,
        off_in: u64,
        off_out: u64,
        len: u64,
    ) -> Result<Option<(u64, u64)>> {
        let (Mode::Packed(s), Mode::Packed(d)) = (&src.mode, &mut self.mode) else {
            return Ok(None);
        };
        if !s.in_extents() {
            return Ok(None);
        }
        if d.shift != s.shift && !d.adopt_extent_size(s.shift) {
            return Ok(None);
        }
        let e = d.extent_len() as u64;
        if off_in % e != off_out % e {
            return Ok(None);
        }
        let end = off_out + len;
        let a = off_out.next_multiple_of(e);
        // The source's last extent, partial, ends the copy: copied whole when nothing of
        // the destination lies past it.
        let to_src_end = off_in + len == s.size;
        let b = if to_src_end && end >= d.size {
            end.next_multiple_of(e)
        } else {
            end - end % e
        };
        if b <= a || end.max(d.size) <= e {
            return Ok(None);
        }
        Ok(Some((a, b)))
    }

    /// Copies the extents of `[off_in, off_in + len)` of `src` to `off_out` here (both extent
    /// aligned; `len` short of a whole last extent only at the source's end), as stored
    /// where the source's copy allows (see the module), read and written otherwise.
    fn copy_stored(&mut self, src: &mut Container<S>, off_in: u64, off_out: u64, len: u64) -> Result<()> {
        let Mode::Packed(d) = &mut self.mode else {
            unreachable!("checked by stored_span")
        };
        let shift = d.shift;
        let e = 1u64 << shift;
        let end = off_out + len;
        d.changed();
        if end > d.size {
            d.grow(&self.storage, end)?;
        }
        // The source's dirty extents in the range are written out first (as its close or
        // the budget would write them), so that they too are copied as stored: a file
        // copied right after it was written (`cp` after a write whose last extents were
        // still in memory, or being compressed after their WRITE's answer) is shared like
        // any other.
        if let Mode::Packed(s) = &mut src.mode {
            let first = off_in >> shift;
            let last = (off_in + len).div_ceil(e);
            let dirty: Vec<u64> = s
                .exts
                .range(first..last)
                .filter(|(_, x)| x.dirty)
                .map(|(i, _)| *i)
                .collect();
            if !dirty.is_empty() {
                s.write_extents(&src.storage, &dirty)?;
            }
        }
        let mut batch = BTreeMap::new();
        let mut held = 0;
        let mut plain = Vec::new();
        for k in 0..len.div_ceil(e) {
            let (i, o) = ((off_in >> shift) + k, (off_out >> shift) + k);
            let Mode::Packed(s) = &src.mode else {
                unreachable!("checked by stored_span")
            };
            match s.stored_copy(&src.storage, i)? {
                Some(f) => {
                    held += f.payload.as_ref().map_or(0, |p| p.len());
                    batch.insert(o, f);
                }
                None => plain.push(k),
            }
            if held >= BATCH {
                let Mode::Packed(d) = &mut self.mode else {
                    unreachable!()
                };
                d.write_stored(&self.storage, &src.storage, std::mem::take(&mut batch))?;
                held = 0;
            }
        }
        if !batch.is_empty() {
            let Mode::Packed(d) = &mut self.mode else {
                unreachable!()
            };
            d.write_stored(&self.storage, &src.storage, batch)?;
        }
        for k in plain {
            let n = e.min(len - k * e);
            self.copy_plain(src, off_in + k * e, off_out + k * e, n)?;
        }
        Ok(())
    }
}

impl Packed {
    /// The stored copy of extent `idx` to copy as it is, when it is the whole truth of the
    /// file there (see the module); `None`: copy it the ordinary way.
    fn stored_copy<S: Storage>(&self, st: &S, idx: u64) -> Result<Option<Foreign>> {
        if (idx << self.shift) >= self.size || self.is_stale(idx) {
            return Ok(None);
        }
        if self.exts.get(&idx).is_some_and(|e| e.dirty) {
            return Ok(None);
        }
        let geo = self.geo();
        // One valid header: its half is the extent (its payload is read, and checked, only
        // if its blocks cannot be shared; damaged, it is so in the copy too, which reads as
        // such). Two: the newer one whose payload passes, as a read finds it.
        let halves = read_halves(st, geo, idx)?;
        let (half, header, payload) = match newest_halves(&halves, Tie::First).as_slice() {
            [] => return Ok(None),
            [(half, h)] => (*half, *h, None),
            _ => {
                let (state, copy) = self.probe(st, idx)?;
                let (Some((half, _)), Some((h, payload))) = (state.cur, copy) else {
                    return Ok(None);
                };
                (half, h, Some(payload))
            }
        };
        if header.flags & EXTENT_FLAG_DICT != 0 || header.logical_len as usize != self.logical_len(idx) {
            return Ok(None);
        }
        Ok(Some(Foreign {
            header,
            payload,
            at: geo.half(idx, half),
        }))
    }
}
