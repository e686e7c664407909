//! On-disk structures of a container, versions 2, 3, 5, 6 and 7 (version 1 is read too; 4 is
//! the packs' format, `pack::format`, never a container's). docs/FORMAT.md
//! describes every field; this module is the only code that knows the byte layout. All
//! integers little-endian.

use squeezefs_codec::{Algorithm, CodecSpec};
use xxhash_rust::xxh3::xxh3_64;

/// First bytes of a container (PNG-style: a non-ASCII byte, the name, CR LF, so text tools
/// and line-ending conversions are detected).
pub const MAGIC: [u8; 8] = [0x89, b'S', b'Q', b'Z', b'F', b'S', b'\r', b'\n'];
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
/// Size of one superblock copy and the alignment of extent slots.
pub const BLOCK: u64 = 4096;
/// Offset of the first extent slot: after the two superblock copies.
pub const DATA_START: u64 = 2 * BLOCK;
/// Bytes of the fixed superblock header; the inline area follows it.
pub const SB_HEADER_LEN: usize = 64;
/// Largest inline payload.
pub const INLINE_MAX: usize = BLOCK as usize - SB_HEADER_LEN;
/// Extent sizes accepted: 4 KiB … 1 MiB, powers of two.
pub const MIN_EXTENT_SHIFT: u8 = 12;
pub const MAX_EXTENT_SHIFT: u8 = 20;
pub const DEFAULT_EXTENT_SHIFT: u8 = 17;

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
/// modification times `stat` shows for this file ([`Superblock::kept_times`]), not the
/// backing file's: background recompression rewrote the file's extents, which moved the
/// backing file's times, but changed nothing of the file. Dropped at the file's next
/// change through a mount. Never with `SB_FLAG_INLINE` (the area is the inline payload's
/// then).
pub const SB_FLAG_TIMES: u32 = 1 << 3;
/// Superblock flag (version 6): the extent area starts `area` MiB past [`DATA_START`]
/// (header bytes 52..56), not at it. Background recompression gives a cold file larger
/// extents by writing them past everything the file held, then a superblock naming the new
/// extent size and area; the old area is punched once that superblock is durable.
pub const SB_FLAG_AREA: u32 = 1 << 4;
/// The unit of [`Superblock::area`].
pub const AREA_UNIT: u64 = 1 << 20;
/// Bytes of the kept times in the area after the header: the change time's seconds (i64)
/// and nanoseconds (u32, < 10⁹), 4 reserved bytes (zero), the modification time's seconds
/// and nanoseconds, 4 reserved bytes.
pub const TIMES_LEN: usize = 32;

/// The times a superblock keeps for `stat` (`SB_FLAG_TIMES`): (seconds, nanoseconds) each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptTimes {
    pub ctime: (i64, u32),
    pub mtime: (i64, u32),
}

impl KeptTimes {
    fn encode(&self) -> Vec<u8> {
        let mut a = vec![0u8; TIMES_LEN];
        for (o, (sec, nsec)) in [(0, self.ctime), (16, self.mtime)] {
            assert!(nsec < 1_000_000_000, "nanoseconds out of range");
            a[o..o + 8].copy_from_slice(&sec.to_le_bytes());
            a[o + 8..o + 12].copy_from_slice(&nsec.to_le_bytes());
        }
        a
    }

    fn decode(a: &[u8]) -> Result<KeptTimes, FormatError> {
        let bad = FormatError::Field("kept times");
        if a.len() != TIMES_LEN {
            return Err(bad);
        }
        let time = |o: usize| {
            let nsec = u32_at(a, o + 8);
            (nsec < 1_000_000_000 && u32_at(a, o + 12) == 0).then_some((u64_at(a, o) as i64, nsec))
        };
        match (time(0), time(16)) {
            (Some(ctime), Some(mtime)) => Ok(KeptTimes { ctime, mtime }),
            _ => Err(bad),
        }
    }
}

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

/// Extent header magic.
pub const EXTENT_MAGIC: [u8; 4] = *b"SQZE";
pub const EXTENT_HEADER_LEN: usize = 48;
/// Extent flag (files of version 3): the payload is a zstd frame compressed with a
/// dictionary; the dictionary's id is in the frame header.
pub const EXTENT_FLAG_DICT: u8 = 1 << 0;
/// Extent flag bits this code understands.
pub const EXTENT_KNOWN_FLAGS: u8 = EXTENT_FLAG_DICT;

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

/// Why a structure was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("bad magic")]
    Magic,
    #[error("header checksum mismatch")]
    Checksum,
    #[error("format version {0} is not one this squeezefs understands (1 … 3, 5 … 7)")]
    Version(u16),
    #[error("unknown flag bits {0:#x} (written by a newer squeezefs?)")]
    Flags(u32),
    #[error("unknown property bits {0:#x} (written by a newer squeezefs?)")]
    Props(u8),
    #[error("invalid field: {0}")]
    Field(&'static str),
}

pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"))
}
pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// The extent shift and codec stored as bytes `shift`, codec id `alg` and little-endian
/// level `level` (a superblock's and a location record's shared fields), validated.
pub(crate) fn decode_codec_shift(shift: u8, alg: u8, level: [u8; 2]) -> Result<(CodecSpec, u8), FormatError> {
    if !(MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT).contains(&shift) {
        return Err(FormatError::Field("extent size"));
    }
    let alg = Algorithm::from_id(alg).ok_or(FormatError::Field("codec"))?;
    let level = i16::from_le_bytes(level) as i32;
    let codec = CodecSpec::new(alg, level).map_err(|_| FormatError::Field("codec level"))?;
    Ok((codec, shift))
}

/// One superblock copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub flags: u32,
    pub generation: u64,
    pub size: u64,
    pub extent_shift: u8,
    /// Codec new extents of this file are written with.
    pub codec: CodecSpec,
    /// `PROP_*` bits: which fields are the file's own properties (0 in version 1).
    pub props: u8,
    /// The file's dictionary (zstd dictionary id) when `props` has `PROP_DICTIONARY`, else 0.
    pub dict_id: u32,
    /// Codec of the inline payload (when `SB_FLAG_INLINE`).
    pub inline_codec: Algorithm,
    /// Stored inline payload (empty unless inline).
    pub inline: Vec<u8>,
    /// The times `stat` shows (`SB_FLAG_TIMES`, version 5; never on an inline superblock).
    pub kept_times: Option<KeptTimes>,
    /// MiB past [`DATA_START`] where the extent area starts (`SB_FLAG_AREA`, version 6,
    /// when not 0).
    pub area: u32,
}

impl Superblock {
    pub fn is_inline(&self) -> bool {
        self.flags & SB_FLAG_INLINE != 0
    }

    /// Where its extents are.
    pub fn geometry(&self) -> Geometry {
        Geometry::new(self.extent_shift, self.area)
    }

    /// The version this superblock is written as: 7 only when the file has the force
    /// property, 6 when its extent area moved, 5 when it keeps a change time, 3 when it
    /// uses a dictionary, else 2.
    pub fn version(&self) -> u16 {
        if self.props & PROP_FORCE != 0 {
            FORMAT_VERSION
        } else if self.area != 0 {
            FORMAT_VERSION_AREA
        } else if self.kept_times.is_some() {
            FORMAT_VERSION_TIMES
        } else if self.flags & SB_FLAG_DICT != 0 || self.props & PROP_DICTIONARY != 0 {
            FORMAT_VERSION_DICT
        } else {
            FORMAT_VERSION_NO_DICT
        }
    }

    /// The 4096-byte block for this superblock.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.inline.len() <= INLINE_MAX, "inline payload too large");
        let mut flags = self.flags & !(SB_FLAG_TIMES | SB_FLAG_AREA);
        if self.area != 0 {
            flags |= SB_FLAG_AREA;
        }
        // The area after the header: the inline payload, or the kept change time.
        let area = match self.kept_times {
            Some(t) => {
                assert!(!self.is_inline(), "kept times on an inline superblock");
                flags |= SB_FLAG_TIMES;
                t.encode()
            }
            None => self.inline.clone(),
        };
        let mut b = vec![0u8; SB_HEADER_LEN + area.len()];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&self.version().to_le_bytes());
        b[10..12].copy_from_slice(&(SB_HEADER_LEN as u16).to_le_bytes());
        b[12..16].copy_from_slice(&flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b[32] = self.extent_shift;
        b[33] = self.codec.alg.id();
        b[34..36].copy_from_slice(&(self.codec.level as i16).to_le_bytes());
        b[36] = self.inline_codec.id();
        b[37] = self.props;
        b[38..40].copy_from_slice(&(area.len() as u16).to_le_bytes());
        b[40..48].copy_from_slice(&xxh3_64(&area).to_le_bytes());
        b[48..52].copy_from_slice(&self.dict_id.to_le_bytes());
        // 52..56: the extent area (version 6), else reserved, zero.
        b[52..56].copy_from_slice(&self.area.to_le_bytes());
        let sum = xxh3_64(&b[0..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b[SB_HEADER_LEN..].copy_from_slice(&area);
        b
    }

    /// Parses one copy from the first bytes of its block (`block` may be shorter than 4096
    /// when the file ends early). Every field is validated before anything is trusted.
    pub fn decode(block: &[u8]) -> Result<Superblock, FormatError> {
        if block.len() < SB_HEADER_LEN || block[0..8] != MAGIC {
            return Err(FormatError::Magic);
        }
        if u64_at(block, 56) != xxh3_64(&block[0..56]) {
            return Err(FormatError::Checksum);
        }
        let version = u16_at(block, 8);
        if !is_container_version(version) {
            return Err(FormatError::Version(version));
        }
        if u16_at(block, 10) as usize != SB_HEADER_LEN {
            return Err(FormatError::Field("header length"));
        }
        let flags = u32_at(block, 12);
        let known = sb_known_flags(version);
        if flags & !known != 0 {
            return Err(FormatError::Flags(flags & !known));
        }
        // Version 1 reserved byte 37 (written as zero, never checked): no properties.
        let props = if version >= 2 { block[37] } else { 0 };
        if props & !props_known(version) != 0 {
            return Err(FormatError::Props(props & !props_known(version)));
        }
        // Bytes 48..56 were reserved before version 3 (written as zero, never checked).
        let dict_id = if version >= 3 { u32_at(block, 48) } else { 0 };
        if (props & PROP_DICTIONARY != 0) != (dict_id != 0) {
            return Err(FormatError::Field("dictionary id"));
        }
        let (codec, extent_shift) = decode_codec_shift(block[32], block[33], [block[34], block[35]])?;
        // Bytes 52..56 were reserved before version 6 (written as zero, never checked).
        let area = if flags & SB_FLAG_AREA != 0 {
            match u32_at(block, 52) {
                0 => return Err(FormatError::Field("extent area")),
                a => a,
            }
        } else {
            0
        };
        let inline_codec = Algorithm::from_id(block[36]).ok_or(FormatError::Field("inline codec"))?;
        let inline_len = u16_at(block, 38) as usize;
        if inline_len > INLINE_MAX || block.len() < SB_HEADER_LEN + inline_len {
            return Err(FormatError::Field("inline length"));
        }
        let inline = block[SB_HEADER_LEN..SB_HEADER_LEN + inline_len].to_vec();
        if u64_at(block, 40) != xxh3_64(&inline) {
            return Err(FormatError::Checksum);
        }
        let size = u64_at(block, 24);
        if flags & SB_FLAG_INLINE != 0 && size > 1u64 << extent_shift {
            return Err(FormatError::Field("inline file larger than one extent"));
        }
        let kept_times = if flags & SB_FLAG_TIMES != 0 {
            if flags & SB_FLAG_INLINE != 0 {
                return Err(FormatError::Field("kept times on an inline file"));
            }
            Some(KeptTimes::decode(&inline)?)
        } else {
            None
        };
        if flags & SB_FLAG_INLINE == 0 && kept_times.is_none() && inline_len != 0 {
            return Err(FormatError::Field("inline payload without inline flag"));
        }
        Ok(Superblock {
            flags: flags & !(SB_FLAG_TIMES | SB_FLAG_AREA),
            area,
            generation: u64_at(block, 16),
            size,
            extent_shift,
            codec,
            props,
            dict_id,
            inline_codec,
            inline: if kept_times.is_some() { Vec::new() } else { inline },
            kept_times,
        })
    }
}

/// Whether `block` (one superblock copy) was written by squeezefs: it has the magic, or only
/// its magic is damaged (the header checksum matches with the magic restored). A container
/// whose magic decayed is then reported as damaged instead of being served as a plain file
/// of its raw bytes; a plain file passes this test with probability 2⁻⁶⁴.
pub fn is_superblock(block: &[u8]) -> bool {
    if block.len() < SB_HEADER_LEN {
        return false;
    }
    if block[0..8] == MAGIC {
        return true;
    }
    let mut head = [0u8; 56];
    head.copy_from_slice(&block[0..56]);
    head[0..8].copy_from_slice(&MAGIC);
    xxh3_64(&head) == u64_at(block, 56)
}

/// The header in front of one extent half's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentHeader {
    pub codec: Algorithm,
    pub flags: u8,
    pub level: i16,
    pub index: u64,
    pub generation: u64,
    pub stored_len: u32,
    pub logical_len: u32,
    pub payload_sum: u64,
}

impl ExtentHeader {
    pub fn encode(&self) -> [u8; EXTENT_HEADER_LEN] {
        let mut b = [0u8; EXTENT_HEADER_LEN];
        b[0..4].copy_from_slice(&EXTENT_MAGIC);
        b[4] = self.codec.id();
        b[5] = self.flags;
        b[6..8].copy_from_slice(&self.level.to_le_bytes());
        b[8..16].copy_from_slice(&self.index.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..28].copy_from_slice(&self.stored_len.to_le_bytes());
        b[28..32].copy_from_slice(&self.logical_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.payload_sum.to_le_bytes());
        let sum = xxh3_64(&b[0..40]);
        b[40..48].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses and validates a header read from the slot of extent `index` in a container
    /// with extents of `1 << extent_shift` bytes. Lengths are bounded by the extent size
    /// before anything is allocated from them.
    pub fn decode(b: &[u8], index: u64, extent_shift: u8) -> Result<ExtentHeader, FormatError> {
        if b.len() < EXTENT_HEADER_LEN || b[0..4] != EXTENT_MAGIC {
            return Err(FormatError::Magic);
        }
        if u64_at(b, 40) != xxh3_64(&b[0..40]) {
            return Err(FormatError::Checksum);
        }
        let codec = Algorithm::from_id(b[4]).ok_or(FormatError::Field("codec"))?;
        let flags = b[5];
        if flags & !EXTENT_KNOWN_FLAGS != 0 {
            return Err(FormatError::Flags(flags as u32));
        }
        if flags & EXTENT_FLAG_DICT != 0 && codec != Algorithm::Zstd {
            return Err(FormatError::Field(
                "dictionary flag on a payload that is not zstd",
            ));
        }
        let h = ExtentHeader {
            codec,
            flags,
            level: i16::from_le_bytes([b[6], b[7]]),
            index: u64_at(b, 8),
            generation: u64_at(b, 16),
            stored_len: u32_at(b, 24),
            logical_len: u32_at(b, 28),
            payload_sum: u64_at(b, 32),
        };
        let extent = 1u64 << extent_shift;
        if h.index != index {
            return Err(FormatError::Field("extent index"));
        }
        if h.logical_len as u64 > extent || h.logical_len == 0 {
            return Err(FormatError::Field("logical length"));
        }
        if h.stored_len as u64 > extent {
            return Err(FormatError::Field("stored length"));
        }
        if codec == Algorithm::None && h.stored_len != h.logical_len {
            return Err(FormatError::Field("raw extent with stored != logical length"));
        }
        Ok(h)
    }
}

/// How reports spell the codec and level a header records (an [`ExtentHeader`], a pack's
/// block header): `zstd:3`, `zstd-fast:5`, `lz4:1`, `lzo`, `zlib:6`, `none` (level 0, or a
/// codec without levels, is the codec's name alone). `stats` labels its kinds with it
/// (`usage::Kind::label`), `check` its packs' blocks (`pack::audit`).
pub fn codec_label(alg: Algorithm, level: i16) -> String {
    match (alg, level) {
        (Algorithm::None | Algorithm::Lzo, _) | (_, 0) => alg.name().into(),
        (Algorithm::Zstd, l) if l < 0 => format!("zstd-fast:{}", -(l as i32)),
        (a, l) => format!("{}:{l}", a.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            flags: SB_FLAG_INLINE,
            generation: 7,
            size: 100,
            extent_shift: 17,
            codec: CodecSpec::DEFAULT,
            props: PROP_COMPRESSION,
            dict_id: 0,
            inline_codec: Algorithm::Zstd,
            inline: vec![1, 2, 3],
            kept_times: None,
            area: 0,
        }
    }

    /// A file stored in extents whose superblock keeps a change time.
    fn kept() -> Superblock {
        Superblock {
            flags: SB_FLAG_NOCOMPRESS,
            inline_codec: Algorithm::None,
            inline: Vec::new(),
            kept_times: Some(KeptTimes {
                ctime: (1_700_000_000, 123_456_789),
                mtime: (1_600_000_000, 999_999_999),
            }),
            ..sb()
        }
    }

    #[test]
    fn a_moved_extent_area_is_version_6_and_older_readers_refuse_it() {
        let s = Superblock { area: 3, ..kept() };
        let b = s.encode();
        assert_eq!(u16_at(&b, 8), 6);
        assert_eq!(u32_at(&b, 52), 3);
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        assert_eq!(s.geometry().half(0, 0), DATA_START + 3 * AREA_UNIT);
        assert_eq!(
            s.geometry().half(2, 1),
            DATA_START + 3 * AREA_UNIT + 5 * slot_size(17)
        );
        for i in 0..SB_HEADER_LEN {
            let mut bad = b.clone();
            bad[i] ^= 0x01;
            assert!(Superblock::decode(&bad).is_err(), "flip at byte {i} accepted");
        }
        // Without kept times it is version 6 too; with area 0, what it was.
        let plain = Superblock {
            kept_times: None,
            ..s.clone()
        };
        assert_eq!(u16_at(&plain.encode(), 8), 6);
        assert_eq!(Superblock::decode(&plain.encode()).unwrap(), plain);
        assert_eq!(u16_at(&Superblock { area: 0, ..s.clone() }.encode(), 8), 5);
        // What a version 5 reader sees: the flag it does not know, so refused as newer.
        assert_eq!(
            Superblock::decode(&with_version(s.encode(), 5)),
            Err(FormatError::Flags(SB_FLAG_AREA))
        );
        // A zero area with the flag is invalid; a version 2 superblock's reserved bytes
        // are not read as an area.
        let mut zero = s.encode();
        zero[52..56].copy_from_slice(&0u32.to_le_bytes());
        let sum = xxh3_64(&zero[0..56]);
        zero[56..64].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(Superblock::decode(&zero), Err(FormatError::Field("extent area")));
        let mut v2 = sb().encode();
        v2[52] = 9;
        let sum = xxh3_64(&v2[0..56]);
        v2[56..64].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(Superblock::decode(&v2).unwrap().area, 0);
        assert_eq!(half_offset(17, 4, 1), Geometry::new(17, 0).half(4, 1));
    }

    #[test]
    fn the_force_property_is_version_7_and_older_readers_refuse_it() {
        // With every other feature (kept times, a moved area, a dictionary), and alone.
        let all = Superblock {
            props: PROP_COMPRESSION | PROP_FORCE | PROP_DICTIONARY,
            dict_id: 77,
            area: 2,
            ..kept()
        };
        let alone = Superblock {
            props: PROP_FORCE,
            ..sb()
        };
        for s in [all, alone] {
            let b = s.encode();
            assert_eq!(u16_at(&b, 8), 7);
            assert_eq!(Superblock::decode(&b).unwrap(), s);
            for i in 0..b.len() {
                let mut bad = b.clone();
                bad[i] ^= 0x01;
                assert!(Superblock::decode(&bad).is_err(), "flip at byte {i} accepted");
            }
            // What a reader of versions 2 … 6 sees: a property bit it does not know, so
            // refused as newer, never read as a file without force.
            for v in [2, 3, 5, 6] {
                let e = Superblock::decode(&with_version(s.encode(), v)).unwrap_err();
                assert!(
                    e == FormatError::Props(PROP_FORCE) || matches!(e, FormatError::Flags(_)),
                    "version {v}: {e:?}"
                );
            }
            // Dropping the property writes the version the rest needs, as before.
            let without = Superblock {
                props: s.props & !PROP_FORCE,
                ..s.clone()
            };
            assert!(u16_at(&without.encode(), 8) < 7);
            assert_eq!(Superblock::decode(&without.encode()).unwrap(), without);
        }
        assert_eq!(
            Superblock::decode(&with_version(
                Superblock {
                    props: PROP_FORCE,
                    ..sb()
                }
                .encode(),
                6
            )),
            Err(FormatError::Props(PROP_FORCE))
        );
    }

    /// Rewrites the version field (and the header checksum) of an encoded superblock.
    fn with_version(mut b: Vec<u8>, version: u16) -> Vec<u8> {
        b[8..10].copy_from_slice(&version.to_le_bytes());
        let sum = xxh3_64(&b[0..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    #[test]
    fn version_1_superblocks_are_read_without_properties_or_nocompress() {
        // Exactly what squeezefs 0.1 (format 1) wrote: byte 37 zero.
        let v1 = Superblock { props: 0, ..sb() };
        let b = with_version(v1.encode(), 1);
        assert_eq!(Superblock::decode(&b).unwrap(), v1);
        // Version 1 had no NOCOMPRESS flag: a version 1 block carrying it is refused.
        let flagged = Superblock {
            props: 0,
            flags: SB_FLAG_INLINE | SB_FLAG_NOCOMPRESS,
            ..sb()
        };
        let b = with_version(flagged.encode(), 1);
        assert_eq!(
            Superblock::decode(&b),
            Err(FormatError::Flags(SB_FLAG_NOCOMPRESS))
        );
        // …and version 2 knows it.
        let b = flagged.encode();
        assert!(Superblock::decode(&b).unwrap().flags & SB_FLAG_NOCOMPRESS != 0);
        // Byte 37 of a version 1 block is ignored whatever it holds.
        let mut b = with_version(v1.encode(), 1);
        b[37] = 0xff;
        let b = with_version(b, 1);
        assert_eq!(Superblock::decode(&b).unwrap().props, 0);
    }

    #[test]
    fn superblock_round_trips_and_every_byte_is_protected() {
        let s = sb();
        let b = s.encode();
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x01;
            assert!(Superblock::decode(&bad).is_err(), "flip at byte {i} accepted");
        }
        assert!(Superblock::decode(&b[..30]).is_err());
    }

    #[test]
    fn a_superblock_with_a_decayed_magic_is_still_recognised() {
        let b = sb().encode();
        assert!(is_superblock(&b));
        for i in 0..8 {
            let mut bad = b.clone();
            bad[i] ^= 0x10;
            assert!(is_superblock(&bad), "magic byte {i}");
            assert!(Superblock::decode(&bad).is_err());
        }
        assert!(!is_superblock(
            b"plain text that merely happens to be long enough to test..."
        ));
        assert!(!is_superblock(&[0u8; 64]));
    }

    #[test]
    fn newer_versions_and_flags_are_refused() {
        let mut s = sb();
        s.flags |= 1 << 7;
        assert_eq!(Superblock::decode(&s.encode()), Err(FormatError::Flags(1 << 7)));
        // 4 numbers the packs' format, never a container's; 8 is newer than this code.
        let b = with_version(sb().encode(), 4);
        assert_eq!(Superblock::decode(&b), Err(FormatError::Version(4)));
        let b = with_version(kept().encode(), 8);
        assert_eq!(Superblock::decode(&b), Err(FormatError::Version(8)));
        let b = with_version(sb().encode(), 0);
        assert_eq!(Superblock::decode(&b), Err(FormatError::Version(0)));
        let s = Superblock {
            props: 1 << 5,
            ..sb()
        };
        assert_eq!(Superblock::decode(&s.encode()), Err(FormatError::Props(1 << 5)));
    }

    #[test]
    fn extent_header_round_trips_and_bounds_lengths() {
        let h = ExtentHeader {
            codec: Algorithm::Lz4,
            flags: 0,
            level: 1,
            index: 42,
            generation: 9,
            stored_len: 1000,
            logical_len: 131072,
            payload_sum: 0xdead_beef,
        };
        let b = h.encode();
        assert_eq!(ExtentHeader::decode(&b, 42, 17).unwrap(), h);
        assert_eq!(
            ExtentHeader::decode(&b, 43, 17),
            Err(FormatError::Field("extent index"))
        );
        // A header claiming a 4 GiB extent is refused before any allocation.
        let huge = ExtentHeader {
            logical_len: u32::MAX,
            ..h
        }
        .encode();
        assert!(ExtentHeader::decode(&huge, 42, 17).is_err());
        let huge = ExtentHeader {
            stored_len: u32::MAX,
            ..h
        }
        .encode();
        assert!(ExtentHeader::decode(&huge, 42, 17).is_err());
        for i in 0..b.len() {
            let mut bad = b;
            bad[i] ^= 0x80;
            assert!(ExtentHeader::decode(&bad, 42, 17).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn kept_times_are_version_5_and_every_byte_of_them_is_protected() {
        let s = kept();
        let b = s.encode();
        assert_eq!(u16_at(&b, 8), 5);
        assert_eq!(b.len(), SB_HEADER_LEN + TIMES_LEN);
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x01;
            assert!(Superblock::decode(&bad).is_err(), "flip at byte {i} accepted");
        }
        // Negative seconds (before 1970) round-trip too.
        let old = Superblock {
            kept_times: Some(KeptTimes {
                ctime: (-5, 7),
                mtime: (-1, 0),
            }),
            ..kept()
        };
        assert_eq!(Superblock::decode(&old.encode()).unwrap(), old);
        // What a version 2 or 3 reader sees: refused as newer, never misread.
        for v in [2, 3] {
            assert_eq!(
                Superblock::decode(&with_version(s.encode(), v)),
                Err(FormatError::Flags(SB_FLAG_TIMES))
            );
        }
        // Without the flag the same bytes are an inline payload without its flag.
        let mut b = s.encode();
        b[12..16].copy_from_slice(&SB_FLAG_NOCOMPRESS.to_le_bytes());
        let b = with_version(b, 5);
        assert_eq!(
            Superblock::decode(&b),
            Err(FormatError::Field("inline payload without inline flag"))
        );
        // The flag with an inline payload, a short area, or nanoseconds out of range.
        let mut b = sb().encode();
        b[12..16].copy_from_slice(&(SB_FLAG_INLINE | SB_FLAG_TIMES).to_le_bytes());
        assert_eq!(
            Superblock::decode(&with_version(b, 5)),
            Err(FormatError::Field("kept times on an inline file"))
        );
        let mut b = s.encode();
        let area = [0u8; 8];
        b.truncate(SB_HEADER_LEN);
        b.extend_from_slice(&area);
        b[38..40].copy_from_slice(&8u16.to_le_bytes());
        b[40..48].copy_from_slice(&xxh3_64(&area).to_le_bytes());
        assert_eq!(
            Superblock::decode(&with_version(b, 5)),
            Err(FormatError::Field("kept times"))
        );
        let mut b = s.encode();
        let mut area = [0u8; TIMES_LEN];
        area[8..12].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        b[SB_HEADER_LEN..].copy_from_slice(&area);
        b[40..48].copy_from_slice(&xxh3_64(&area).to_le_bytes());
        assert_eq!(
            Superblock::decode(&with_version(b, 5)),
            Err(FormatError::Field("kept times"))
        );
        // The modification time's nanoseconds, and either reserved field, are checked too.
        for (at, v) in [(24, 1_000_000_000u32), (12, 1), (28, 1)] {
            let mut b = s.encode();
            let mut area = b[SB_HEADER_LEN..].to_vec();
            area[at..at + 4].copy_from_slice(&v.to_le_bytes());
            b[SB_HEADER_LEN..].copy_from_slice(&area);
            b[40..48].copy_from_slice(&xxh3_64(&area).to_le_bytes());
            assert_eq!(
                Superblock::decode(&with_version(b, 5)),
                Err(FormatError::Field("kept times")),
                "byte {at}"
            );
        }
        // A file that keeps none is written as before: version 2.
        let none = Superblock {
            kept_times: None,
            ..kept()
        };
        assert_eq!(u16_at(&none.encode(), 8), 2);
    }

    #[test]
    fn only_files_using_a_dictionary_are_written_as_version_3() {
        // No dictionary: version 2, readable by squeezefs before dictionaries.
        assert_eq!(u16_at(&sb().encode(), 8), 2);
        let with_prop = Superblock {
            props: PROP_COMPRESSION | PROP_DICTIONARY,
            dict_id: 0x1234_5678,
            ..sb()
        };
        let b = with_prop.encode();
        assert_eq!(u16_at(&b, 8), 3);
        assert_eq!(Superblock::decode(&b).unwrap(), with_prop);
        let used = Superblock {
            flags: SB_FLAG_INLINE | SB_FLAG_DICT,
            ..sb()
        };
        let b = used.encode();
        assert_eq!(u16_at(&b, 8), 3);
        assert_eq!(Superblock::decode(&b).unwrap(), used);
        // What a version 2 reader sees in them: refused as newer, never misread.
        assert_eq!(
            Superblock::decode(&with_version(used.encode(), 2)),
            Err(FormatError::Flags(SB_FLAG_DICT))
        );
        assert_eq!(
            Superblock::decode(&with_version(with_prop.encode(), 2)),
            Err(FormatError::Props(PROP_DICTIONARY))
        );
        // A dictionary id without the property bit (or the reverse) is refused.
        let odd = Superblock {
            dict_id: 9,
            ..used.clone()
        };
        assert_eq!(
            Superblock::decode(&odd.encode()),
            Err(FormatError::Field("dictionary id"))
        );
        let odd = Superblock {
            props: PROP_DICTIONARY,
            dict_id: 0,
            ..sb()
        };
        assert_eq!(
            Superblock::decode(&odd.encode()),
            Err(FormatError::Field("dictionary id"))
        );
        // Version 2 never used bytes 48..56: whatever they hold is ignored there.
        let mut b = sb().encode();
        b[48] = 0x77;
        let b = with_version(b, 2);
        assert_eq!(Superblock::decode(&b).unwrap().dict_id, 0);
    }

    #[test]
    fn the_extent_dictionary_flag_is_only_valid_on_zstd() {
        let h = ExtentHeader {
            codec: Algorithm::Zstd,
            flags: EXTENT_FLAG_DICT,
            level: 3,
            index: 1,
            generation: 2,
            stored_len: 100,
            logical_len: 5000,
            payload_sum: 1,
        };
        assert_eq!(ExtentHeader::decode(&h.encode(), 1, 17).unwrap(), h);
        let lz4 = ExtentHeader {
            codec: Algorithm::Lz4,
            ..h
        };
        assert!(ExtentHeader::decode(&lz4.encode(), 1, 17).is_err());
        let unknown = ExtentHeader { flags: 1 << 1, ..h };
        assert_eq!(
            ExtentHeader::decode(&unknown.encode(), 1, 17),
            Err(FormatError::Flags(2))
        );
    }

    #[test]
    fn layout_offsets() {
        assert_eq!(half_offset(17, 0, 0), 8192);
        assert_eq!(half_offset(17, 0, 1), 8192 + 135168);
        assert_eq!(half_offset(12, 1, 0), 8192 + 2 * 8192);
        assert_eq!(slot_size(20) % BLOCK, 0);
    }
}
