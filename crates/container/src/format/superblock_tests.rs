//! Unit tests of the superblock (`superblock.rs`): round trips, every byte protected, and
//! what each version is written as and what older readers make of it.

use squeezefs_codec::{Algorithm, CodecSpec};
use xxhash_rust::xxh3::xxh3_64;

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
