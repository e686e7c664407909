//! The superblock: its magic and header layout, the times it can keep (`KeptTimes`), its
//! encoding and validating decoder (`Superblock`), and the test that tells a damaged one
//! from a plain file (`is_superblock`). Its unit tests are in `superblock_tests.rs`.

use squeezefs_codec::{Algorithm, CodecSpec};
use xxhash_rust::xxh3::xxh3_64;

use super::{
    decode_codec_shift, is_container_version, props_known, sb_known_flags, u16_at, u32_at, u64_at,
    FormatError, Geometry, BLOCK, FORMAT_VERSION, FORMAT_VERSION_AREA, FORMAT_VERSION_DICT,
    FORMAT_VERSION_NO_DICT, FORMAT_VERSION_TIMES, PROP_DICTIONARY, PROP_FORCE, SB_FLAG_AREA, SB_FLAG_DICT,
    SB_FLAG_INLINE, SB_FLAG_TIMES,
};

/// First bytes of a container (PNG-style: a non-ASCII byte, the name, CR LF, so text tools
/// and line-ending conversions are detected).
pub const MAGIC: [u8; 8] = [0x89, b'S', b'Q', b'Z', b'F', b'S', b'\r', b'\n'];
/// Bytes of the fixed superblock header; the inline area follows it.
pub const SB_HEADER_LEN: usize = 64;
/// Largest inline payload.
pub const INLINE_MAX: usize = BLOCK as usize - SB_HEADER_LEN;

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
    /// MiB past [`DATA_START`](super::DATA_START) where the extent area starts (`SB_FLAG_AREA`, version 6,
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
