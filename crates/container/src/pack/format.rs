//! The byte layout of format 4's packs: the pack file header, the solid block header and the
//! location record a packed file carries as the xattr [`LOCATION_XATTR`]. docs/FORMAT.md
//! ("Packs") describes every field; this module is the only code that knows the bytes. All
//! integers little-endian, checksums XXH3-64.

use squeezefs_codec::{Algorithm, CodecSpec};
use xxhash_rust::xxh3::xxh3_64;

use crate::format::{
    decode_codec_shift, u16_at, u32_at, u64_at, FormatError, MAX_EXTENT_SHIFT, PROP_COMPRESSION,
    PROP_DICTIONARY, PROP_EXTENT_SIZE, PROP_FORCE,
};

/// The format a mount writes when it packs small files: containers as in
/// [`crate::format::FORMAT_VERSION`], plus packs and location records (docs/FORMAT.md,
/// "Packs (format 4)").
pub const PACKS_FORMAT_VERSION: u16 = 4;

/// The xattr holding a packed file's location (on the backing file). Short on purpose: ext4
/// keeps xattrs inside a 256-byte inode only while name and value fit in ~88 bytes.
pub const LOCATION_XATTR: &str = "user.sqzfs";
/// Bytes of a location record of version 1 or 2, and of a version 4 one that keeps no
/// change time.
pub const LOCATION_LEN: usize = 56;
/// Bytes of a version 3 record (one that keeps the file's change time), and of a version 4
/// one that does.
pub const LOCATION_LEN_V3: usize = 64;
/// The location record version that carries a dictionary property (`PROP_DICTIONARY`, its
/// id in bytes 28..32); written only for a file with one and no kept change time, so every
/// other record stays version 1, which squeezefs since format 4 reads.
pub const LOCATION_VERSION: u8 = 2;
/// A location record of 64 bytes, the change time `stat` shows for the file kept in bytes
/// 48..56 (the background pass or a reclaim moved the record, and so the backing file's
/// ctime). Written only then, for a file without the force property.
pub const LOCATION_VERSION_3: u8 = 3;
/// The newest location record version this code reads and writes: as version 3, or of 56
/// bytes when it keeps no change time (the length says which), and its `props` may carry
/// `PROP_FORCE`. Written only for a file with the force property, so every other record
/// stays readable by squeezefs before it.
pub const LOCATION_VERSION_4: u8 = 4;
/// The first location record version (no dictionary property); still written and read.
pub const LOCATION_VERSION_1: u8 = 1;
/// Property bits a version 1 location record may carry.
pub const LOCATION_PROPS_V1: u8 = PROP_COMPRESSION | PROP_EXTENT_SIZE;
/// Property bits a version 2 or 3 location record may carry.
pub const LOCATION_PROPS: u8 = LOCATION_PROPS_V1 | PROP_DICTIONARY;
/// Property bits a version 4 location record may carry.
pub const LOCATION_PROPS_V4: u8 = LOCATION_PROPS | PROP_FORCE;

/// A change time in nanoseconds since the epoch (a version 3 record's `kept_ctime`) as
/// seconds and nanoseconds.
pub fn ctime_parts(ns: u64) -> (i64, u32) {
    ((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as u32)
}

/// Seconds and nanoseconds as a version 3 record keeps them; `None` before the epoch or
/// with nanoseconds out of range (such a time is not kept: the backing file's shows).
pub fn ctime_ns(sec: i64, nsec: i64) -> Option<u64> {
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return None;
    }
    (sec as u64).checked_mul(1_000_000_000)?.checked_add(nsec as u64)
}

/// First bytes of a pack file.
pub const PACK_MAGIC: [u8; 8] = [0x89, b'S', b'Q', b'Z', b'P', b'A', b'C', b'K'];
pub const PACK_VERSION: u16 = 1;
/// Bytes of the pack header; the first block follows it.
pub const PACK_HEADER_LEN: usize = 64;
/// Block header magic.
pub const BLOCK_MAGIC: [u8; 4] = *b"SQZB";
pub const BLOCK_HEADER_LEN: usize = 48;
/// Most input bytes one block holds: the largest extent (a packed file fits one extent,
/// and files never straddle blocks).
pub const BLOCK_MAX: usize = 1 << MAX_EXTENT_SHIFT;

/// A pack file's header (bytes 0 … 63).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackHeader {
    pub id: u32,
}

impl PackHeader {
    pub fn encode(&self) -> [u8; PACK_HEADER_LEN] {
        let mut b = [0u8; PACK_HEADER_LEN];
        b[0..8].copy_from_slice(&PACK_MAGIC);
        b[8..10].copy_from_slice(&PACK_VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&(PACK_HEADER_LEN as u16).to_le_bytes());
        // 12..16 flags, 0
        b[16..20].copy_from_slice(&self.id.to_le_bytes());
        // 20..56 reserved, 0
        let sum = xxh3_64(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<PackHeader, FormatError> {
        if b.len() < PACK_HEADER_LEN || b[0..8] != PACK_MAGIC {
            return Err(FormatError::Magic);
        }
        if u64_at(b, 56) != xxh3_64(&b[..56]) {
            return Err(FormatError::Checksum);
        }
        let version = u16_at(b, 8);
        if version != PACK_VERSION {
            return Err(FormatError::Version(version));
        }
        if u16_at(b, 10) as usize != PACK_HEADER_LEN {
            return Err(FormatError::Field("pack header length"));
        }
        let flags = u32_at(b, 12);
        if flags != 0 {
            return Err(FormatError::Flags(flags));
        }
        Ok(PackHeader { id: u32_at(b, 16) })
    }
}

/// One solid block's header: `BLOCK_HEADER_LEN` bytes, then `stored_len` payload bytes that
/// decode to `logical_len` bytes (whole files, back to back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Codec of the payload (`None`: stored raw).
    pub codec: Algorithm,
    /// Level used (informational).
    pub level: i32,
    /// The pack the block belongs to.
    pub pack: u32,
    /// Files placed in the block when it was written (informational, for `check`).
    pub files: u32,
    /// The block's own offset in its pack (a header read from the wrong place is refused).
    pub offset: u64,
    pub stored_len: u32,
    pub logical_len: u32,
    pub payload_sum: u64,
}

impl BlockHeader {
    pub fn encode(&self) -> [u8; BLOCK_HEADER_LEN] {
        let mut b = [0u8; BLOCK_HEADER_LEN];
        b[0..4].copy_from_slice(&BLOCK_MAGIC);
        b[4] = self.codec.id();
        // 5: flags, 0
        b[6..8].copy_from_slice(&(self.level as i16).to_le_bytes());
        b[8..12].copy_from_slice(&self.pack.to_le_bytes());
        b[12..16].copy_from_slice(&self.files.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..28].copy_from_slice(&self.stored_len.to_le_bytes());
        b[28..32].copy_from_slice(&self.logical_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.payload_sum.to_le_bytes());
        let sum = xxh3_64(&b[..40]);
        b[40..48].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses and validates a block header read at `offset` of pack `pack`; lengths are
    /// checked before the caller allocates anything for the payload.
    pub fn decode(b: &[u8], pack: u32, offset: u64) -> Result<BlockHeader, FormatError> {
        if b.len() < BLOCK_HEADER_LEN || b[0..4] != BLOCK_MAGIC {
            return Err(FormatError::Magic);
        }
        if u64_at(b, 40) != xxh3_64(&b[..40]) {
            return Err(FormatError::Checksum);
        }
        if b[5] != 0 {
            return Err(FormatError::Flags(b[5] as u32));
        }
        let codec = Algorithm::from_id(b[4]).ok_or(FormatError::Field("codec"))?;
        let h = BlockHeader {
            codec,
            level: i16::from_le_bytes([b[6], b[7]]) as i32,
            pack: u32_at(b, 8),
            files: u32_at(b, 12),
            offset: u64_at(b, 16),
            stored_len: u32_at(b, 24),
            logical_len: u32_at(b, 28),
            payload_sum: u64_at(b, 32),
        };
        if h.pack != pack || h.offset != offset {
            return Err(FormatError::Field("block is not the one the location names"));
        }
        if h.logical_len as usize > BLOCK_MAX || h.logical_len == 0 {
            return Err(FormatError::Field("block logical length"));
        }
        if h.stored_len as usize > BLOCK_MAX || h.stored_len == 0 {
            return Err(FormatError::Field("block stored length"));
        }
        if h.codec == Algorithm::None && h.stored_len != h.logical_len {
            return Err(FormatError::Field("raw block lengths differ"));
        }
        Ok(h)
    }
}

/// Where a packed file's bytes are, and the file's own settings: the value of the xattr
/// [`LOCATION_XATTR`] on its backing file. An empty file has `len == 0` and `pack == 0`
/// (no bytes anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// `PROP_COMPRESSION` / `PROP_EXTENT_SIZE` / `PROP_DICTIONARY`: which of `codec` /
    /// `extent_shift` / `dict_id` are the file's own properties (as in a superblock);
    /// `PROP_FORCE` (version 4): the file's own force property.
    pub props: u8,
    /// The file's codec (its property, or the mount's when last written).
    pub codec: CodecSpec,
    pub extent_shift: u8,
    pub pack: u32,
    /// Offset of the block's header in the pack file.
    pub block: u64,
    /// Offset of the file's first byte in the block's decoded bytes.
    pub offset: u32,
    /// The file's logical size, ≤ its extent size.
    pub len: u32,
    /// Orders this record against the file's container superblocks: the higher wins.
    pub generation: u64,
    /// XXH3-64 of the file's bytes.
    pub content_sum: u64,
    /// The file's dictionary property when `props` has `PROP_DICTIONARY`, else 0. Only kept
    /// for when the file leaves its pack: a packed file's bytes are compressed with its
    /// block, which is its own dictionary.
    pub dict_id: u32,
    /// The change time `stat` shows for the file instead of the backing file's, in
    /// nanoseconds since the epoch (version 3): set when the record was replaced by a
    /// move of the file's bytes (reclaim, the background pass), which moved the backing
    /// file's ctime but changed nothing of the file.
    pub kept_ctime: Option<u64>,
}

impl Location {
    /// The record's bytes: 64 with a kept change time (version 3, or 4 with force), else
    /// 56.
    pub fn encode(&self) -> Vec<u8> {
        let long = self.kept_ctime.is_some();
        let mut b = vec![0u8; if long { LOCATION_LEN_V3 } else { LOCATION_LEN }];
        b[0] = if self.props & PROP_FORCE != 0 {
            LOCATION_VERSION_4
        } else if long {
            LOCATION_VERSION_3
        } else if self.props & PROP_DICTIONARY != 0 {
            LOCATION_VERSION
        } else {
            LOCATION_VERSION_1
        };
        b[1] = self.props;
        b[2] = self.codec.alg.id();
        b[3] = self.extent_shift;
        b[4..6].copy_from_slice(&(self.codec.level as i16).to_le_bytes());
        // 6..8 flags, 0
        b[8..12].copy_from_slice(&self.pack.to_le_bytes());
        b[12..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.block.to_le_bytes());
        b[24..28].copy_from_slice(&self.len.to_le_bytes());
        // 28..32 the dictionary (versions 2 … 4); reserved, 0, in version 1
        debug_assert_eq!(self.props & PROP_DICTIONARY != 0, self.dict_id != 0);
        if b[0] != LOCATION_VERSION_1 {
            b[28..32].copy_from_slice(&self.dict_id.to_le_bytes());
        }
        b[32..40].copy_from_slice(&self.generation.to_le_bytes());
        b[40..48].copy_from_slice(&self.content_sum.to_le_bytes());
        let end = b.len() - 8;
        if let Some(ns) = self.kept_ctime {
            b[48..56].copy_from_slice(&ns.to_le_bytes());
        }
        let sum = xxh3_64(&b[..end]);
        b[end..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The kept change time as `stat` has it: seconds and nanoseconds.
    pub fn kept_ctime_parts(&self) -> Option<(i64, u32)> {
        self.kept_ctime.map(ctime_parts)
    }

    /// Parses a record. An unknown version or flag is [`FormatError::Version`] /
    /// [`FormatError::Flags`] (a newer squeezefs wrote it), anything else malformed is
    /// damage.
    pub fn decode(b: &[u8]) -> Result<Location, FormatError> {
        if b.is_empty() {
            return Err(FormatError::Field("empty location record"));
        }
        let version = b[0];
        if !(LOCATION_VERSION_1..=LOCATION_VERSION_4).contains(&version) {
            return Err(FormatError::Version(version as u16));
        }
        let len = match version {
            LOCATION_VERSION_3 => LOCATION_LEN_V3,
            // Either length: the long one keeps a change time.
            LOCATION_VERSION_4 if b.len() == LOCATION_LEN_V3 => LOCATION_LEN_V3,
            _ => LOCATION_LEN,
        };
        if b.len() != len {
            return Err(FormatError::Field("location record length"));
        }
        if u64_at(b, len - 8) != xxh3_64(&b[..len - 8]) {
            return Err(FormatError::Checksum);
        }
        let flags = u16_at(b, 6);
        if flags != 0 {
            return Err(FormatError::Flags(flags as u32));
        }
        let props = b[1];
        let allowed = match version {
            LOCATION_VERSION_1 => LOCATION_PROPS_V1,
            LOCATION_VERSION_4 => LOCATION_PROPS_V4,
            _ => LOCATION_PROPS,
        };
        if props & !allowed != 0 {
            return Err(FormatError::Props(props & !allowed));
        }
        // Version 4 is written for the force property and only then (encode's rule).
        if version == LOCATION_VERSION_4 && props & PROP_FORCE == 0 {
            return Err(FormatError::Field("version 4 location record without force"));
        }
        // Version 1 leaves bytes 28..32 reserved and unchecked (beyond the record's sum).
        let dict_id = if version == LOCATION_VERSION_1 {
            0
        } else {
            u32_at(b, 28)
        };
        if (props & PROP_DICTIONARY != 0) != (dict_id != 0) {
            return Err(FormatError::Field(
                "dictionary id without its property, or the reverse",
            ));
        }
        // Version 2 is written for a dictionary and only then (encode's rule).
        if version == LOCATION_VERSION && props & PROP_DICTIONARY == 0 {
            return Err(FormatError::Field(
                "version 2 location record without a dictionary",
            ));
        }
        let (codec, extent_shift) = decode_codec_shift(b[3], b[2], [b[4], b[5]])?;
        let l = Location {
            props,
            codec,
            extent_shift,
            pack: u32_at(b, 8),
            offset: u32_at(b, 12),
            block: u64_at(b, 16),
            len: u32_at(b, 24),
            generation: u64_at(b, 32),
            content_sum: u64_at(b, 40),
            dict_id,
            kept_ctime: (len == LOCATION_LEN_V3).then(|| u64_at(b, 48)),
        };
        if l.len as u64 > 1u64 << extent_shift {
            return Err(FormatError::Field("packed file longer than its extent"));
        }
        if l.offset as usize + l.len as usize > BLOCK_MAX {
            return Err(FormatError::Field("file range beyond a block"));
        }
        if l.len == 0 && (l.pack != 0 || l.block != 0 || l.offset != 0) {
            return Err(FormatError::Field("empty file with a place"));
        }
        if l.len > 0 && (l.pack == 0 || l.block < PACK_HEADER_LEN as u64) {
            return Err(FormatError::Field("pack or block"));
        }
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> Location {
        Location {
            props: PROP_COMPRESSION,
            codec: CodecSpec::new(Algorithm::Zstd, 3).unwrap(),
            extent_shift: 17,
            pack: 7,
            block: 64,
            offset: 100,
            len: 5000,
            generation: 9,
            content_sum: 0xdead_beef,
            dict_id: 0,
            kept_ctime: None,
        }
    }

    /// A record resealed as a writer would, to reach the checks behind the checksum.
    fn seal(mut c: Vec<u8>) -> Vec<u8> {
        let end = c.len() - 8;
        let sum = xxh3_64(&c[..end]);
        c[end..].copy_from_slice(&sum.to_le_bytes());
        c
    }

    #[test]
    fn the_force_property_makes_a_version_4_record_of_either_length() {
        for (dict, kept) in [
            (0, None),
            (0x1234_5678, None),
            (0, Some(17_640_000_005)),
            (9, Some(1)),
        ] {
            let l = Location {
                props: PROP_FORCE | PROP_COMPRESSION | if dict != 0 { PROP_DICTIONARY } else { 0 },
                dict_id: dict,
                kept_ctime: kept,
                ..loc()
            };
            let b = l.encode();
            let len = if kept.is_some() {
                LOCATION_LEN_V3
            } else {
                LOCATION_LEN
            };
            assert_eq!((b.len(), b[0]), (len, LOCATION_VERSION_4));
            assert_eq!(Location::decode(&b).unwrap(), l);
            for i in 0..len * 8 {
                let mut c = b.clone();
                c[i / 8] ^= 1 << (i % 8);
                assert!(Location::decode(&c).is_err(), "flip of bit {i} accepted");
            }
            // What a reader of versions 1 … 3 sees: a property bit it does not know
            // (refused as newer), never a record without force.
            for v in [2, 3] {
                let mut older = b.clone();
                older[0] = v;
                let e = Location::decode(&seal(older)).unwrap_err();
                assert!(
                    e == FormatError::Props(PROP_FORCE) || matches!(e, FormatError::Field(_)),
                    "version {v}: {e:?}"
                );
            }
            // Version 4 without force is never written: damage.
            let mut no_force = b.clone();
            no_force[1] &= !PROP_FORCE;
            assert!(matches!(
                Location::decode(&seal(no_force)),
                Err(FormatError::Field(_))
            ));
            // Neither length but the two.
            for n in [48, 60, 72] {
                let mut odd = b.clone();
                odd.resize(n, 0);
                assert!(Location::decode(&seal(odd)).is_err(), "{n} bytes");
            }
            // Without force, the version the rest needs.
            let without = Location {
                props: l.props & !PROP_FORCE,
                ..l
            };
            assert!(without.encode()[0] < LOCATION_VERSION_4);
        }
        let v1 = Location {
            props: PROP_FORCE,
            ..loc()
        };
        let mut b = v1.encode();
        b[0] = 1;
        assert_eq!(Location::decode(&seal(b)), Err(FormatError::Props(PROP_FORCE)));
    }

    #[test]
    fn location_round_trips_and_every_bit_flip_is_caught() {
        let b = loc().encode();
        assert_eq!(Location::decode(&b).unwrap(), loc());
        for i in 0..LOCATION_LEN * 8 {
            let mut c = b.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(Location::decode(&c).is_err(), "flip of bit {i} accepted");
        }
        assert!(Location::decode(&b[..40]).is_err());
        assert_eq!(b[0], 1, "a record without a dictionary stays version 1");
        let mut newer = b;
        newer[0] = 5;
        assert_eq!(Location::decode(&newer), Err(FormatError::Version(5)));
    }

    #[test]
    fn a_dictionary_makes_a_version_2_record_that_round_trips() {
        let d = Location {
            props: PROP_COMPRESSION | PROP_DICTIONARY,
            dict_id: 0x1234_5678,
            ..loc()
        };
        let b = d.encode();
        assert_eq!(b[0], 2);
        assert_eq!(Location::decode(&b).unwrap(), d);
        for i in 0..LOCATION_LEN * 8 {
            let mut c = b.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(Location::decode(&c).is_err(), "flip of bit {i} accepted");
        }
        // Version 1 knows no dictionary: a newer squeezefs's record, not damage.
        let mut v1 = b.clone();
        v1[0] = 1;
        assert_eq!(
            Location::decode(&seal(v1)),
            Err(FormatError::Props(PROP_DICTIONARY))
        );
        // Version 1 ignores its reserved bytes, version 2 checks them against the property.
        let mut v1 = loc().encode();
        v1[28] = 7;
        assert_eq!(Location::decode(&seal(v1)).unwrap(), loc());
        let mut no_id = b.clone();
        no_id[28..32].fill(0);
        assert!(matches!(
            Location::decode(&seal(no_id)),
            Err(FormatError::Field(_))
        ));
        let mut no_prop = b.clone();
        no_prop[1] = PROP_COMPRESSION;
        assert!(matches!(
            Location::decode(&seal(no_prop.clone())),
            Err(FormatError::Field(_))
        ));
        // Version 2 without a dictionary at all: never written, so damage.
        let mut none = no_prop.clone();
        none[28..32].fill(0);
        assert!(matches!(
            Location::decode(&seal(none)),
            Err(FormatError::Field(_))
        ));
    }

    #[test]
    fn a_kept_change_time_makes_a_64_byte_version_3_record() {
        for dict in [0, 0x1234_5678] {
            let l = Location {
                props: PROP_COMPRESSION | if dict != 0 { PROP_DICTIONARY } else { 0 },
                dict_id: dict,
                kept_ctime: Some(1_764_000_000_123_456_789),
                ..loc()
            };
            let b = l.encode();
            assert_eq!((b.len(), b[0]), (LOCATION_LEN_V3, 3));
            assert_eq!(Location::decode(&b).unwrap(), l);
            assert_eq!(l.kept_ctime_parts(), Some((1_764_000_000, 123_456_789)));
            for i in 0..LOCATION_LEN_V3 * 8 {
                let mut c = b.clone();
                c[i / 8] ^= 1 << (i % 8);
                assert!(Location::decode(&c).is_err(), "flip of bit {i} accepted");
            }
            // A version 3 record of 56 bytes, or a version 1 or 2 one of 64: damage.
            assert!(matches!(
                Location::decode(&seal(b[..LOCATION_LEN].to_vec())),
                Err(FormatError::Field(_))
            ));
            let mut short = b.clone();
            short[0] = if dict != 0 { 2 } else { 1 };
            assert!(matches!(
                Location::decode(&seal(short)),
                Err(FormatError::Field(_))
            ));
            // The dictionary rule holds in version 3 too.
            let mut odd = b.clone();
            odd[28..32].copy_from_slice(&(if dict != 0 { 0u32 } else { 9 }).to_le_bytes());
            assert!(matches!(Location::decode(&seal(odd)), Err(FormatError::Field(_))));
            // Dropping the kept time gives the record it was.
            let plain = Location {
                kept_ctime: None,
                ..l
            };
            assert_eq!(plain.encode().len(), LOCATION_LEN);
            assert_eq!(plain.encode()[0], if dict != 0 { 2 } else { 1 });
        }
        assert_eq!(ctime_ns(5, 7), Some(5_000_000_007));
        assert_eq!(ctime_parts(5_000_000_007), (5, 7));
        assert_eq!(ctime_ns(-1, 0), None);
        assert_eq!(ctime_ns(1, 1_000_000_000), None);
    }

    #[test]
    fn block_header_round_trips_and_names_its_place() {
        let h = BlockHeader {
            codec: Algorithm::Zstd,
            level: 1,
            pack: 3,
            files: 12,
            offset: 4096,
            stored_len: 1000,
            logical_len: 131072,
            payload_sum: 42,
        };
        let b = h.encode();
        assert_eq!(BlockHeader::decode(&b, 3, 4096).unwrap(), h);
        assert!(BlockHeader::decode(&b, 4, 4096).is_err());
        assert!(BlockHeader::decode(&b, 3, 64).is_err());
        for i in 0..BLOCK_HEADER_LEN * 8 {
            let mut c = b;
            c[i / 8] ^= 1 << (i % 8);
            assert!(
                BlockHeader::decode(&c, 3, 4096).is_err(),
                "flip of bit {i} accepted"
            );
        }
    }

    #[test]
    fn pack_header_round_trips() {
        let b = PackHeader { id: 77 }.encode();
        assert_eq!(PackHeader::decode(&b).unwrap().id, 77);
        let mut c = b;
        c[17] ^= 1;
        assert!(PackHeader::decode(&c).is_err());
    }
}
