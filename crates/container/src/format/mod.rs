//! On-disk structures of a container, versions 2, 3, 5, 6 and 7 (version 1 is read too; 4 is
//! the packs' format, `pack::format`, never a container's). docs/FORMAT.md
//! describes every field; this module is the only code that knows the byte layout. All
//! integers little-endian.
//!
//! One concept a file: `version.rs` (format versions, and the superblock flag and property
//! bits each understands), `geometry.rs` (block and extent sizes, where superblock copies and
//! extent slots are), `fields.rs` (`FormatError`, the integer readers, a header's codec and
//! level), `superblock.rs` (the superblock and its kept times), `extent.rs` (the extent
//! header). Everything is re-exported here: callers name `format::X`.

mod extent;
mod fields;
mod geometry;
mod superblock;
mod version;

pub use extent::{ExtentHeader, EXTENT_FLAG_DICT, EXTENT_HEADER_LEN, EXTENT_KNOWN_FLAGS, EXTENT_MAGIC};
pub use fields::{codec_label, FormatError};
pub(crate) use fields::{decode_codec_shift, u16_at, u32_at, u64_at};
pub use geometry::{
    half_offset, sb_offset, slot_size, Geometry, AREA_UNIT, BLOCK, DATA_START, DEFAULT_EXTENT_SHIFT,
    MAX_EXTENT_SHIFT, MIN_EXTENT_SHIFT,
};
pub use superblock::{is_superblock, KeptTimes, Superblock, INLINE_MAX, MAGIC, SB_HEADER_LEN, TIMES_LEN};
pub use version::{
    is_container_version, props_known, sb_known_flags, FORMAT_VERSION, FORMAT_VERSION_AREA,
    FORMAT_VERSION_DICT, FORMAT_VERSION_NO_DICT, FORMAT_VERSION_TIMES, MIN_FORMAT_VERSION, PROP_COMPRESSION,
    PROP_DICTIONARY, PROP_EXTENT_SIZE, PROP_FORCE, SB_FLAG_AREA, SB_FLAG_DICT, SB_FLAG_INLINE,
    SB_FLAG_NOCOMPRESS, SB_FLAG_TIMES,
};

#[cfg(test)]
mod superblock_tests;
