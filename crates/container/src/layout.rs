//! Reading the on-disk layout: what a backing file is, which superblock copy is current, and
//! what each half of an extent slot holds. The reader ([`crate::Container`]), the scrubber
//! ([`crate::check`]) and the space accounting ([`crate::usage`]) all find copies through
//! this module, so they cannot drift apart on where a copy is, when it is a hole, or which
//! of two copies is the newer one.
//!
//! How much of a copy is verified is the caller's choice, because it is what each of them is
//! for: `usage` reads extent headers only (it must count a tree at the speed of its
//! metadata), the reader also checks the payload checksum of the copy it takes
//! ([`read_payload`]) and decodes it only when the bytes are wanted, and `check` decodes
//! every copy. A copy whose checksum passes but that does not decode is therefore "current"
//! for the reader (which then answers EIO for the extent) but "damaged" for `check` (which
//! then takes the older valid copy as current, if there is one).
//!
//! Pure reads: nothing here writes, and nothing here keeps state.

use crate::encode::payload_ok;
use crate::format::{
    is_superblock, sb_offset, slot_size, ExtentHeader, FormatError, Geometry, Superblock, BLOCK, DATA_START,
    EXTENT_HEADER_LEN, MAX_EXTENT_SHIFT, MIN_EXTENT_SHIFT,
};
use crate::storage::{read_full, Storage};
use crate::Result;

/// What the start of a backing file says it is.
pub(crate) enum Head {
    /// An empty file: an empty container.
    Empty,
    /// Not a container: served as it is.
    Plain,
    /// A new container whose first superblock never landed (a crash between writing its
    /// extents and its first commit): nothing of it was ever durable, so it is empty.
    Uncommitted,
    /// A container, with its first two blocks (short if the file is).
    Container(Vec<u8>),
}

/// Reads the first two blocks of a backing file and tells what the file is.
pub(crate) fn read_head<S: Storage>(st: &S) -> Result<Head> {
    if st.len()? == 0 {
        return Ok(Head::Empty);
    }
    let mut blocks = vec![0u8; 2 * BLOCK as usize];
    let n = read_full(st, &mut blocks, 0)?;
    blocks.truncate(n);
    if is_container(&blocks) {
        return Ok(Head::Container(blocks));
    }
    if blocks.iter().all(|&b| b == 0) && has_extent_header(st)? {
        return Ok(Head::Uncommitted);
    }
    Ok(Head::Plain)
}

/// Superblock copy `slot`'s block within the head (`blocks`, possibly short: then the
/// block is short or empty).
fn sb_block(blocks: &[u8], slot: u8) -> &[u8] {
    let n = blocks.len();
    let start = (sb_offset(slot) as usize).min(n);
    &blocks[start..(start + BLOCK as usize).min(n)]
}

/// Whether the first two blocks of a backing file (`blocks`, possibly short) are a
/// container's: either superblock copy carries the magic, or one whose magic alone decayed.
fn is_container(blocks: &[u8]) -> bool {
    (0..2u8).any(|slot| is_superblock(sb_block(blocks, slot)))
}

/// Whether the first data past the superblocks is a valid extent header (of any extent
/// size): what a container looks like before its first superblock lands. A plain file
/// cannot pass by chance: the header carries a magic, its index and an XXH3 of itself.
fn has_extent_header<S: Storage>(st: &S) -> Result<bool> {
    let Some(at) = st.next_data(DATA_START)? else {
        return Ok(false);
    };
    let mut hb = [0u8; EXTENT_HEADER_LEN];
    // SEEK_DATA answers at block granularity: the header is at the start of a slot.
    for shift in MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT {
        let slot = slot_size(shift);
        let rel = at - DATA_START;
        // The first slot at or after `at` that could hold a half.
        let k = rel.div_ceil(slot);
        let off = DATA_START + k * slot;
        if read_full(st, &mut hb, off)? < EXTENT_HEADER_LEN {
            continue;
        }
        if ExtentHeader::decode(&hb, k / 2, shift).is_ok() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Which of two valid copies with the same generation counts as the newer. The writer never
/// makes such a pair (every copy is written above every generation seen in either place), so
/// only a file put together by hand has one. The three readers this module replaced
/// disagreed here; each keeps its answer: the reader takes the first (superblock copy 0, half
/// A), `check` the last (copy 1, half B) for both, `usage` the last superblock copy but the
/// first half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tie {
    First,
    Last,
}

/// The two places of a copy (superblock copies 0 and 1, or halves A and B) that hold a valid
/// copy, newest (highest generation) first. `gens[i]` is place `i`'s generation, `None` when
/// it holds no valid copy.
pub(crate) fn newest_first(gens: [Option<u64>; 2], tie: Tie) -> Vec<u8> {
    match gens {
        [None, None] => vec![],
        [Some(_), None] => vec![0],
        [None, Some(_)] => vec![1],
        [Some(a), Some(b)] if a > b || (a == b && tie == Tie::First) => vec![0, 1],
        [Some(_), Some(_)] => vec![1, 0],
    }
}

/// One superblock copy as found in the head.
pub(crate) struct SbCopy {
    pub slot: u8,
    /// Its block holds a non-zero byte (an all-zero or missing block was never written, or
    /// was punched).
    pub written: bool,
    pub decoded: std::result::Result<Superblock, FormatError>,
}

/// Both superblock copies of a container's head, decoded, copy 0 first.
pub(crate) fn superblock_copies(blocks: &[u8]) -> [SbCopy; 2] {
    [0u8, 1].map(|slot| {
        let block = sb_block(blocks, slot);
        SbCopy {
            slot,
            written: block.iter().any(|&b| b != 0),
            decoded: Superblock::decode(block),
        }
    })
}

/// The current superblock: the valid copy with the higher generation (`None`: neither is
/// valid).
pub(crate) fn current_superblock(copies: &[SbCopy; 2], tie: Tie) -> Option<(u8, &Superblock)> {
    let gens = [0, 1].map(|i| copies[i].decoded.as_ref().ok().map(|sb| sb.generation));
    let slot = *newest_first(gens, tie).first()?;
    let sb = copies[slot as usize].decoded.as_ref().ok()?;
    Some((slot, sb))
}

/// One half of an extent slot, judged by its header alone.
pub(crate) enum Half {
    /// The header bytes are all zero (or past the end of the file): never written, or
    /// punched.
    Hole,
    /// A header that validates (magic, index, lengths, checksum); the payload is unchecked.
    Header(ExtentHeader),
    /// Something is there, but not a valid header: torn or damaged.
    Invalid(FormatError),
}

impl Half {
    /// The generation of a valid header.
    pub(crate) fn generation(&self) -> Option<u64> {
        match self {
            Half::Header(h) => Some(h.generation),
            _ => None,
        }
    }
}

/// Reads and judges the header of half `half` of extent `idx`.
pub(crate) fn read_half<S: Storage>(st: &S, geo: Geometry, idx: u64, half: u8) -> Result<Half> {
    let mut hb = [0u8; EXTENT_HEADER_LEN];
    let n = read_full(st, &mut hb, geo.half(idx, half))?;
    if hb[..n].iter().all(|&b| b == 0) {
        return Ok(Half::Hole);
    }
    Ok(match ExtentHeader::decode(&hb[..n], idx, geo.shift) {
        Ok(h) => Half::Header(h),
        Err(e) => Half::Invalid(e),
    })
}

/// Both halves of extent `idx`, A first.
pub(crate) fn read_halves<S: Storage>(st: &S, geo: Geometry, idx: u64) -> Result<[Half; 2]> {
    Ok([read_half(st, geo, idx, 0)?, read_half(st, geo, idx, 1)?])
}

/// Halves holding a valid header, and their headers, newest first.
pub(crate) fn newest_halves(halves: &[Half; 2], tie: Tie) -> Vec<(u8, ExtentHeader)> {
    newest_first([halves[0].generation(), halves[1].generation()], tie)
        .into_iter()
        .filter_map(|h| match &halves[h as usize] {
            Half::Header(x) => Some((h, *x)),
            _ => None,
        })
        .collect()
}

/// The payload of half `half` (whose valid header is `h`) when it is all there and its
/// checksum matches; `None` otherwise (torn or damaged).
pub(crate) fn read_payload<S: Storage>(
    st: &S,
    geo: Geometry,
    idx: u64,
    half: u8,
    h: &ExtentHeader,
) -> Result<Option<Vec<u8>>> {
    read_payload_at(st, geo.half(idx, half), h)
}

/// [`read_payload`] of the half at byte `at` of the file.
pub(crate) fn read_payload_at<S: Storage>(st: &S, at: u64, h: &ExtentHeader) -> Result<Option<Vec<u8>>> {
    let payload = st.read_vec(h.stored_len as usize, at + EXTENT_HEADER_LEN as u64)?;
    Ok((payload.len() == h.stored_len as usize && payload_ok(h, &payload)).then_some(payload))
}

/// Up to `buf.len()` first bytes of the payload of half `half` (whose valid header is `h`),
/// unverified (no payload checksum: a header-only reader's peek, e.g. at a zstd frame
/// header). Returns how many were read.
pub(crate) fn read_payload_start<S: Storage>(
    st: &S,
    geo: Geometry,
    idx: u64,
    half: u8,
    h: &ExtentHeader,
    buf: &mut [u8],
) -> Result<usize> {
    let len = (h.stored_len as usize).min(buf.len());
    let at = geo.half(idx, half) + EXTENT_HEADER_LEN as u64;
    Ok(read_full(st, &mut buf[..len], at)?)
}

/// The name of a half in messages: `A` or `B`.
pub(crate) fn half_name(h: u8) -> char {
    if h == 0 {
        'A'
    } else {
        'B'
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_first_orders_by_generation_and_breaks_ties_as_asked() {
        assert_eq!(newest_first([None, None], Tie::First), Vec::<u8>::new());
        assert_eq!(newest_first([Some(3), None], Tie::Last), vec![0]);
        assert_eq!(newest_first([None, Some(3)], Tie::First), vec![1]);
        assert_eq!(newest_first([Some(2), Some(5)], Tie::First), vec![1, 0]);
        assert_eq!(newest_first([Some(5), Some(2)], Tie::Last), vec![0, 1]);
        assert_eq!(newest_first([Some(4), Some(4)], Tie::First), vec![0, 1]);
        assert_eq!(newest_first([Some(4), Some(4)], Tie::Last), vec![1, 0]);
    }
}
