//! The extent header: the 48 bytes in front of each extent half's payload, its flags, and
//! its encoding and validating decoder (`ExtentHeader`).

use squeezefs_codec::Algorithm;
use xxhash_rust::xxh3::xxh3_64;

use super::{u32_at, u64_at, FormatError};

/// Extent header magic.
pub const EXTENT_MAGIC: [u8; 4] = *b"SQZE";
pub const EXTENT_HEADER_LEN: usize = 48;
/// Extent flag (files of version 3): the payload is a zstd frame compressed with a
/// dictionary; the dictionary's id is in the frame header.
pub const EXTENT_FLAG_DICT: u8 = 1 << 0;
/// Extent flag bits this code understands.
pub const EXTENT_KNOWN_FLAGS: u8 = EXTENT_FLAG_DICT;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
