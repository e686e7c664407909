//! Format versions and the superblock flag and property bits each one brought: the version
//! numbers, and which bits each version understands (anything else is refused as written by
//! a newer squeezefs). Kept apart from the superblock's byte layout because `pack::format`
//! gates its location records on the same property bits.

/// The newest format version this code reads and writes. A superblock is written as version
/// 7 only when the file has the force property (`PROP_FORCE`), as version 6 when its extent
/// area was moved (`SB_FLAG_AREA`), as version 5 when it keeps a change time
/// (`SB_FLAG_TIMES`), as version 3 when the file uses a dictionary (`SB_FLAG_DICT` or
/// `PROP_DICTIONARY`), else as version 2, so files that use none of these stay readable by
/// squeezefs versions before them.
pub const FORMAT_VERSION: u16 = 7;
/// The version written for files whose extent area moved and that have no force property.
pub const FORMAT_VERSION_AREA: u16 = 6;
/// The version written for files that keep times and whose extent area is where it always
/// was.
pub const FORMAT_VERSION_TIMES: u16 = 5;
/// The version written for files that use a dictionary and keep no change time.
pub const FORMAT_VERSION_DICT: u16 = 3;
/// The version written for files that use no dictionary.
pub const FORMAT_VERSION_NO_DICT: u16 = 2;
/// Oldest format version this code reads.
pub const MIN_FORMAT_VERSION: u16 = 1;

/// Superblock flag: the whole file content is in the inline area.
pub const SB_FLAG_INLINE: u32 = 1 << 0;
/// Superblock flag (version 2): the file's extents keep failing to compress, so writes skip
/// compression except for a periodic retry (btrfs NOCOMPRESS, HAMMER2's backoff).
pub const SB_FLAG_NOCOMPRESS: u32 = 1 << 1;
/// Superblock flag (version 3): payloads of this file (extents, or the inline payload) may be
/// zstd frames compressed with a dictionary, whose id is in each frame's header. Set when
/// the first such payload is written and kept, so the file stays version 3 (older
/// squeezefs then refuse it as newer instead of reporting its extents as damaged).
pub const SB_FLAG_DICT: u32 = 1 << 2;
/// Superblock flag (version 5): the area after the header holds the change and
/// modification times `stat` shows for this file
/// ([`Superblock::kept_times`](super::Superblock::kept_times)), not the backing file's:
/// background recompression rewrote the file's extents, which moved the backing file's
/// times, but changed nothing of the file. Dropped at the file's next change through a
/// mount. Never with `SB_FLAG_INLINE` (the area is the inline payload's then).
pub const SB_FLAG_TIMES: u32 = 1 << 3;
/// Superblock flag (version 6): the extent area starts `area` MiB past
/// [`DATA_START`](super::DATA_START) (header bytes 52..56), not at it. Background recompression gives a cold file larger
/// extents by writing them past everything the file held, then a superblock naming the new
/// extent size and area; the old area is punched once that superblock is durable.
pub const SB_FLAG_AREA: u32 = 1 << 4;

/// Superblock flag bits each version understands; a container with any other bit set is
/// refused (it was written by a newer squeezefs).
pub fn sb_known_flags(version: u16) -> u32 {
    match version {
        1 => SB_FLAG_INLINE,
        2 => SB_FLAG_INLINE | SB_FLAG_NOCOMPRESS,
        3 => SB_FLAG_INLINE | SB_FLAG_NOCOMPRESS | SB_FLAG_DICT,
        5 => SB_FLAG_INLINE | SB_FLAG_NOCOMPRESS | SB_FLAG_DICT | SB_FLAG_TIMES,
        // 6 and 7.
        _ => SB_FLAG_INLINE | SB_FLAG_NOCOMPRESS | SB_FLAG_DICT | SB_FLAG_TIMES | SB_FLAG_AREA,
    }
}

/// Whether a superblock of `version` is one this code reads: 1, 2, 3, 5, 6 and 7 (4
/// numbers the packs' format, never a container's).
pub fn is_container_version(version: u16) -> bool {
    matches!(
        version,
        MIN_FORMAT_VERSION..=FORMAT_VERSION_DICT | FORMAT_VERSION_TIMES..=FORMAT_VERSION
    )
}

/// Superblock `props` bit (version 2): `codec` is the file's own compression property
/// (`user.squeezefs.compression`), not just the codec last used.
pub const PROP_COMPRESSION: u8 = 1 << 0;
/// Superblock `props` bit (version 2): `extent_shift` was chosen as the file's property
/// (`user.squeezefs.extent_size`).
pub const PROP_EXTENT_SIZE: u8 = 1 << 1;
/// Superblock `props` bit (version 3): `dict_id` is the file's dictionary property
/// (`user.squeezefs.dictionary`): its small zstd extents and inline data use it.
pub const PROP_DICTIONARY: u8 = 1 << 2;
/// Superblock `props` bit (version 7): the file's own force property
/// (`user.squeezefs.compression_force`): every extent is compressed with its codec, without
/// the heuristic, the incompressible-file backoff, the early abort or the content-type
/// check, as the mount option `compress-force=` does for every file.
pub const PROP_FORCE: u8 = 1 << 3;
/// Property bits each version understands.
pub fn props_known(version: u16) -> u8 {
    match version {
        1 => 0,
        2 => PROP_COMPRESSION | PROP_EXTENT_SIZE,
        3..=FORMAT_VERSION_AREA => PROP_COMPRESSION | PROP_EXTENT_SIZE | PROP_DICTIONARY,
        _ => PROP_COMPRESSION | PROP_EXTENT_SIZE | PROP_DICTIONARY | PROP_FORCE,
    }
}
