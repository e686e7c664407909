//! Where things are in a container: the block size, the extent sizes accepted, and the
//! offsets of superblock copies and extent slots (`Geometry`, with the extent area that
//! version 6 can move). Offsets only; no bytes are read or written here.

/// Size of one superblock copy and the alignment of extent slots.
pub const BLOCK: u64 = 4096;
/// Offset of the first extent slot: after the two superblock copies.
pub const DATA_START: u64 = 2 * BLOCK;
/// Extent sizes accepted: 4 KiB … 1 MiB, powers of two.
pub const MIN_EXTENT_SHIFT: u8 = 12;
pub const MAX_EXTENT_SHIFT: u8 = 20;
pub const DEFAULT_EXTENT_SHIFT: u8 = 17;

/// The unit of [`Superblock::area`](super::Superblock::area).
pub const AREA_UNIT: u64 = 1 << 20;

/// Bytes reserved for one half (A or B) of an extent: the header plus a raw payload fits.
pub fn slot_size(extent_shift: u8) -> u64 {
    (1u64 << extent_shift) + BLOCK
}

/// Offset of half `half` (0 = A, 1 = B) of extent `index` in a container whose extent area
/// is where it always was (area 0; see [`Geometry`] for the others).
pub fn half_offset(extent_shift: u8, index: u64, half: u8) -> u64 {
    Geometry::new(extent_shift, 0).half(index, half)
}

/// Where a container's extent slots are: their size and the start of their area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub shift: u8,
    /// Offset of the first slot: [`DATA_START`] plus the superblock's `area` MiB.
    pub start: u64,
}

impl Geometry {
    /// Extents of `1 << shift` bytes in an area `area` MiB past [`DATA_START`].
    pub fn new(shift: u8, area: u32) -> Geometry {
        Geometry {
            shift,
            start: DATA_START + area as u64 * AREA_UNIT,
        }
    }

    /// Offset of half `half` (0 = A, 1 = B) of extent `index`.
    pub fn half(&self, index: u64, half: u8) -> u64 {
        self.start + (2 * index + half as u64) * slot_size(self.shift)
    }

    /// Bytes reserved for one half.
    pub fn slot(&self) -> u64 {
        slot_size(self.shift)
    }
}

/// Offset of superblock copy `slot` (0 or 1).
pub fn sb_offset(slot: u8) -> u64 {
    slot as u64 * BLOCK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_offsets() {
        assert_eq!(half_offset(17, 0, 0), 8192);
        assert_eq!(half_offset(17, 0, 1), 8192 + 135168);
        assert_eq!(half_offset(12, 1, 0), 8192 + 2 * 8192);
        assert_eq!(slot_size(20) % BLOCK, 0);
    }
}
