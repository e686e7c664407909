//! Format 4's pack layout on hostile bytes: the pack header, block header and location record
//! decoders, with the invariants a reader relies on checked whenever one accepts, and a
//! backing file whose `user.sqzfs` location record is hostile, opened as a container (with
//! and without packs) and read.
//!
//! Input: bytes 0 and 1 choose modes, bytes 2…5 / 6…13 the pack id / offset a block header
//! is asked for, the rest is the bytes under test. Random bytes almost never carry a valid
//! XXH3-64, so each decoder also gets the bytes with the right checksum (and magic) written
//! in: that is what lets the fuzzer reach the field checks behind the checksum.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use squeezefs_codec::{Algorithm, CodecSpec};
use squeezefs_container::check::check;
use squeezefs_container::format::{
    FormatError, MAX_EXTENT_SHIFT, MIN_EXTENT_SHIFT, PROP_DICTIONARY, PROP_FORCE,
};
use squeezefs_container::pack::format::{
    BLOCK_MAGIC, BLOCK_MAX, LOCATION_LEN, LOCATION_LEN_V3, LOCATION_PROPS, LOCATION_PROPS_V1,
    LOCATION_PROPS_V4, LOCATION_VERSION, LOCATION_VERSION_1, LOCATION_VERSION_3, LOCATION_VERSION_4,
    PACK_MAGIC, PACK_VERSION,
};
use squeezefs_container::pack::{
    BlockHeader, Location, MemPackDir, PackHeader, Packs, BLOCK_HEADER_LEN, LOCATION_XATTR, PACK_HEADER_LEN,
};
use squeezefs_container::sim::{Crash, MemDisk};
use squeezefs_container::{Container, Options, Storage};
use xxhash_rust::xxh3::xxh3_64;

/// `b` cut or zero-padded to `len` bytes, with XXH3-64 of bytes `0…sum_at` written at
/// `sum_at` (and `magic` at 0 when given).
fn fixed(b: &[u8], len: usize, sum_at: usize, magic: Option<&[u8]>) -> Vec<u8> {
    let mut v = b[..b.len().min(len)].to_vec();
    v.resize(len, 0);
    if let Some(m) = magic {
        v[..m.len()].copy_from_slice(m);
    }
    let sum = xxh3_64(&v[..sum_at]);
    v[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
    v
}

/// `b` with bytes `zero` cleared and its checksum (at `sum_at`, over `0…sum_at`) recomputed:
/// what encoding the decoded value gives back when `zero` are fields decode ignores.
fn canonical(b: &[u8], zero: std::ops::Range<usize>, sum_at: usize) -> Vec<u8> {
    let mut v = b[..sum_at + 8].to_vec();
    v[zero].fill(0);
    let sum = xxh3_64(&v[..sum_at]);
    v[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
    v
}

fn pack_header(b: &[u8]) {
    let Ok(h) = PackHeader::decode(b) else {
        return;
    };
    assert!(b.len() >= PACK_HEADER_LEN);
    // Bytes 20…55 are reserved and not among what docs/FORMAT.md checks: the header
    // round-trips except for them. Trailing bytes past the header are not the header's.
    let enc = h.encode();
    assert_eq!(enc[..], canonical(b, 20..56, 56)[..], "pack header re-encodes");
    if b[20..56].iter().all(|&x| x == 0) {
        assert_eq!(
            enc[..],
            b[..PACK_HEADER_LEN],
            "pack header with zero reserved round-trips"
        );
    }
    assert_eq!(PackHeader::decode(&enc), Ok(h));
    assert_eq!(PackHeader::decode(&b[..PACK_HEADER_LEN]), Ok(h));
}

fn block_header(b: &[u8], pack: u32, offset: u64) {
    let Ok(h) = BlockHeader::decode(b, pack, offset) else {
        return;
    };
    assert!(b.len() >= BLOCK_HEADER_LEN);
    assert_eq!(
        (h.pack, h.offset),
        (pack, offset),
        "block header names the place asked for"
    );
    assert!(
        h.logical_len > 0 && h.logical_len as usize <= BLOCK_MAX,
        "logical_len {}",
        h.logical_len
    );
    assert!(
        h.stored_len > 0 && h.stored_len as usize <= BLOCK_MAX,
        "stored_len {}",
        h.stored_len
    );
    if h.codec == Algorithm::None {
        assert_eq!(h.stored_len, h.logical_len, "raw block");
    }
    assert!(i16::try_from(h.level).is_ok());
    // Every one of the 48 bytes is a checked or carried field: exact round trip.
    let enc = h.encode();
    assert_eq!(enc[..], b[..BLOCK_HEADER_LEN], "block header round-trips");
    assert_eq!(BlockHeader::decode(&enc, pack, offset), Ok(h));
    // Refused at any other place.
    assert!(BlockHeader::decode(b, pack.wrapping_add(1), offset).is_err());
    assert!(BlockHeader::decode(b, pack, offset.wrapping_add(1)).is_err());
}

fn location(b: &[u8]) {
    let r = Location::decode(b);
    // The version byte is checked first, whatever the length (a newer record may be longer).
    if let Some(&v) = b.first() {
        if !(LOCATION_VERSION_1..=LOCATION_VERSION_4).contains(&v) {
            assert_eq!(r, Err(FormatError::Version(v as u16)));
        }
    }
    let Ok(l) = r else {
        return;
    };
    let v1 = b[0] == LOCATION_VERSION_1;
    let v3 = b[0] == LOCATION_VERSION_3;
    let v4 = b[0] == LOCATION_VERSION_4;
    // 64 bytes exactly in version 3, 56 or 64 in version 4; the long ones exactly keep a
    // change time; else 56.
    if v4 {
        assert!(b.len() == LOCATION_LEN || b.len() == LOCATION_LEN_V3);
    } else {
        assert_eq!(b.len(), if v3 { LOCATION_LEN_V3 } else { LOCATION_LEN });
    }
    assert_eq!(l.kept_ctime.is_some(), b.len() == LOCATION_LEN_V3);
    assert!((MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT).contains(&l.extent_shift));
    let allowed = match b[0] {
        LOCATION_VERSION_1 => LOCATION_PROPS_V1,
        LOCATION_VERSION_4 => LOCATION_PROPS_V4,
        _ => LOCATION_PROPS,
    };
    assert_eq!(l.props & !allowed, 0);
    // Force exactly in version 4.
    assert_eq!(l.props & PROP_FORCE != 0, v4);
    // A dictionary id exactly with its property, which version 1 never has and version 2
    // always has.
    assert_eq!(l.props & PROP_DICTIONARY != 0, l.dict_id != 0);
    if !v3 && !v4 {
        assert_eq!(l.props & PROP_DICTIONARY != 0, !v1);
    }
    assert!(CodecSpec::new(l.codec.alg, l.codec.level).is_ok());
    assert!(
        u64::from(l.len) <= 1u64 << l.extent_shift,
        "len {} shift {}",
        l.len,
        l.extent_shift
    );
    assert!(
        u64::from(l.offset) + u64::from(l.len) <= BLOCK_MAX as u64,
        "offset {} len {}",
        l.offset,
        l.len
    );
    assert_eq!(l.len == 0, l.pack == 0, "pack 0 exactly when empty");
    if l.len == 0 {
        assert_eq!((l.block, l.offset), (0, 0), "an empty file has no place");
    } else {
        assert!(l.block >= PACK_HEADER_LEN as u64, "block {}", l.block);
    }
    // Version 1: bytes 28…31 are reserved, "not checked beyond record_sum": round trip
    // except them. Version 2 carries the dictionary there: exact round trip.
    let enc = l.encode();
    if v1 {
        assert_eq!(enc[..], canonical(b, 28..32, 48)[..], "location re-encodes");
        if b[28..32] == [0; 4] {
            assert_eq!(enc[..], b[..], "location with zero reserved round-trips");
        }
    } else {
        assert_eq!(enc[..], b[..], "a version 2, 3 or 4 location round-trips");
    }
    assert_eq!(Location::decode(&enc), Ok(l));
}

/// Real packs (read-only, no block cache: every read decodes from the pack), the records of
/// files packed in them, and a committed container image.
struct Fixture {
    packs: Arc<Packs>,
    records: Vec<Vec<u8>>,
    container: Vec<u8>,
}

fn text(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b"fn let pub struct impl {}\n"[(i * 7 + seed as usize) % 26])
        .collect()
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = MemPackDir::new(&Crash::new());
        let writer = Arc::new(Packs::new(Box::new(dir.clone()), true, 0).expect("packs"));
        let files: [(Algorithm, i32, u8, usize); 6] = [
            (Algorithm::Zstd, 3, 17, 5000),
            (Algorithm::Zstd, 3, 17, 700),
            (Algorithm::None, 0, 12, 4096),
            (Algorithm::Lz4, 1, 14, 9000),
            (Algorithm::Zlib, 6, 16, 1),
            (Algorithm::Zstd, 3, 17, 0),
        ];
        let mut records = Vec::new();
        for (i, (alg, level, shift, len)) in files.into_iter().enumerate() {
            let opts = Options {
                codec: CodecSpec::new(alg, level).expect("level"),
                extent_shift: shift,
                packs: Some(writer.clone()),
                ..Options::default()
            };
            let disk = MemDisk::new();
            let mut c = Container::open(disk.clone(), &opts).expect("empty disk");
            c.write(0, &text(i as u8, len)).expect("write");
            c.fsync().expect("fsync");
            records.push(disk.xattr(LOCATION_XATTR).expect("a packed file has a record"));
        }
        writer.sync().expect("sync packs");
        let disk = MemDisk::new();
        let mut c = Container::open(disk.clone(), &Options::default()).expect("empty disk");
        c.write(0, &text(9, 300_000)).expect("write");
        c.fsync().expect("fsync");
        Fixture {
            packs: Arc::new(Packs::new(Box::new(dir), false, 0).expect("packs")),
            records,
            container: disk.contents(),
        }
    })
}

/// A backing file with `record` as its `user.sqzfs`, beside `image`: opened with no packs
/// and with the fixture's, then read, sought and scrubbed. Errors are fine; panics are not.
fn open_with_record(record: &[u8], image: &[u8]) {
    let disk = MemDisk::new();
    if !image.is_empty() {
        disk.write_at(image, 0).unwrap();
    }
    disk.set_xattr(LOCATION_XATTR, record).unwrap();
    let _ = check(&disk, None);
    let _ = check(&disk, Some(&fixture().packs));
    for packs in [None, Some(fixture().packs.clone())] {
        let opts = Options {
            packs,
            ..Options::default()
        };
        let Ok(mut c) = Container::open(disk.clone(), &opts) else {
            continue;
        };
        let size = c.size().unwrap_or(0).min(4 << 20);
        let mut off = 0;
        while off < size {
            let _ = c.read(off, 65536);
            off += 65536;
        }
        let _ = c.read(0, 1);
        let _ = c.seek_data(0);
        let _ = c.seek_hole(0);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 14 {
        return;
    }
    let (mode, fix) = (data[0], data[1]);
    let pack = u32::from_le_bytes(data[2..6].try_into().unwrap());
    let offset = u64::from_le_bytes(data[6..14].try_into().unwrap());
    let body = &data[14..];

    // The decoders on the bytes as they are…
    pack_header(body);
    block_header(body, pack, offset);
    location(body);

    // …and with the checksum made right (and the magic, and with bits of `fix` the fields
    // that are constants in valid bytes), so the checks behind the checksum are reached.
    let mut ph = fixed(body, PACK_HEADER_LEN.max(body.len()), 56, Some(&PACK_MAGIC));
    if fix & 1 != 0 {
        ph[8..10].copy_from_slice(&PACK_VERSION.to_le_bytes());
        ph[10..12].copy_from_slice(&(PACK_HEADER_LEN as u16).to_le_bytes());
        ph[12..16].fill(0);
        ph = fixed(&ph, ph.len(), 56, None);
    }
    pack_header(&ph);
    let mut bh = fixed(body, BLOCK_HEADER_LEN, 40, Some(&BLOCK_MAGIC));
    if fix & 2 != 0 {
        bh[4] %= Algorithm::ALL.len() as u8;
        bh[5] = 0;
        bh[8..12].copy_from_slice(&pack.to_le_bytes());
        bh[16..24].copy_from_slice(&offset.to_le_bytes());
        bh = fixed(&bh, BLOCK_HEADER_LEN, 40, None);
    }
    block_header(&bh, pack, offset);
    // (Bit 4 of `fix`: a 64-byte version 3 record, which keeps a change time; bit 5: a
    // version 4 record, of 64 bytes with bit 4 too.)
    let v3 = fix & 16 != 0;
    let v4 = fix & 32 != 0;
    let (len, sum_at) = if v3 {
        (LOCATION_LEN_V3, 56)
    } else {
        (LOCATION_LEN, 48)
    };
    let mut lb = fixed(body, len, sum_at, None);
    if fix & 4 != 0 {
        // A version 1 record, or a version 2 one whose dictionary id agrees with its
        // property, or a version 3 or 4 one whose dictionary id agrees with its property
        // (and a version 4 one with force).
        if v3 || v4 {
            (lb[0], lb[1]) = if v4 {
                (LOCATION_VERSION_4, lb[1] & LOCATION_PROPS_V4 | PROP_FORCE)
            } else {
                (LOCATION_VERSION_3, lb[1] & LOCATION_PROPS)
            };
            if lb[1] & PROP_DICTIONARY == 0 {
                lb[28..32].fill(0);
            } else if lb[28..32] == [0; 4] {
                lb[28] = 1;
            }
        } else if fix & 8 != 0 {
            lb[0] = LOCATION_VERSION;
            lb[1] = lb[1] & LOCATION_PROPS | PROP_DICTIONARY;
            if lb[28..32] == [0; 4] {
                lb[28] = 1;
            }
        } else {
            lb[0] = LOCATION_VERSION_1;
            lb[1] &= LOCATION_PROPS_V1;
        }
        lb[6..8].fill(0);
        lb = fixed(&lb, len, sum_at, None);
    }
    location(&lb);

    // A backing file with a hostile record: the input as it is, the record just decoded, or
    // a real record of a packed file with the input XORed in (checksum made right unless
    // `mode` bit 2), which reaches the pack reads with wrong places, lengths and sums.
    let f = fixture();
    let record = match mode & 3 {
        0 => body.to_vec(),
        1 => lb,
        _ => {
            let mut r = f.records[(mode as usize >> 3) % f.records.len()].clone();
            for (x, y) in r.iter_mut().zip(body) {
                *x ^= y;
            }
            if mode & 4 == 0 {
                r = fixed(&r, LOCATION_LEN, 48, None);
            }
            r
        }
    };
    // Beside it: nothing, a committed container (its generation against the record's), or
    // the input's bytes past the record.
    let image: &[u8] = match fix >> 6 {
        0 | 1 => &[],
        2 => &f.container,
        _ => body.get(LOCATION_LEN..).unwrap_or(&[]),
    };
    location(&record);
    open_with_record(&record, image);
});
