//! Containers whose small data is compressed with a zstd dictionary: what they store, what
//! they read back, and what happens when the dictionary is missing.

use squeezefs_codec::{dict, CodecSpec};
use squeezefs_container::format::{BLOCK, EXTENT_HEADER_LEN};
use squeezefs_container::sim::MemDisk;
use squeezefs_container::usage::{usage, Kind};
use squeezefs_container::{Container, Error, Options, Storage};

/// Small JSON-ish records with shared structure.
fn record(i: u32, n: usize) -> Vec<u8> {
    let mut s = String::new();
    let mut k = i;
    while s.len() < n {
        k = k.wrapping_mul(2_654_435_761).wrapping_add(12345);
        let r = (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        s += &format!(
            "{{\"host\": \"web-{}\", \"service\": \"checkout\", \"level\": \"{}\", \"latency_ms\": {}, \
             \"trace\": \"{r:016x}\", \"message\": \"request completed for customer account\"}}\n",
            k % 40,
            ["info", "warn", "debug"][(k % 3) as usize],
            k % 900
        );
    }
    s.truncate(n);
    s.into_bytes()
}

fn trained() -> u32 {
    let samples: Vec<Vec<u8>> = (0..500).map(|i| record(i, 1500)).collect();
    let refs: Vec<&[u8]> = samples.iter().map(|v| v.as_slice()).collect();
    dict::register(&dict::train(&refs, 8192).unwrap()).unwrap()
}

fn opts() -> Options {
    Options {
        codec: "zstd:3".parse::<CodecSpec>().unwrap(),
        ..Options::default()
    }
}

fn write(data: &[u8], dict: Option<u32>) -> MemDisk {
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    c.set_dictionary_property(dict).unwrap();
    c.write(0, data).unwrap();
    c.fsync().unwrap();
    disk
}

fn version(disk: &MemDisk) -> u16 {
    let live = (0..2u64)
        .map(|s| {
            let mut b = [0u8; 24];
            disk.read_at(&mut b, s * BLOCK).unwrap();
            (
                u64::from_le_bytes(b[16..24].try_into().unwrap()),
                u16::from_le_bytes([b[8], b[9]]),
            )
        })
        .max()
        .unwrap();
    live.1
}

#[test]
fn small_files_and_extents_use_the_dictionary_and_read_back() {
    let id = trained();
    for n in [300, 3000, 9000, 60_000, 200_000] {
        let data = record(10_000 + n as u32, n);
        let with = write(&data, Some(id));
        let without = write(&data, None);
        let mut c = Container::open(with.clone(), &opts()).unwrap();
        assert_eq!(c.read(0, n).unwrap(), data, "{n} bytes");
        assert_eq!(c.dictionary_property(), Some(id));
        assert!(c.uses_dictionary(), "{n} bytes");
        assert_eq!(version(&with), 3);
        assert_eq!(version(&without), 2, "files without a dictionary stay version 2");
        let u = usage(&with, None).unwrap();
        let kinds: Vec<Kind> = u.parts.keys().copied().collect();
        // Inline data and extents of at most 128 KiB use it (all of them here).
        assert!(kinds.iter().all(|k| k.uses_dict()), "{n}: {kinds:?}");
        if n >= 60_000 {
            assert!(kinds.iter().all(|k| *k == Kind::DictExtent(3)), "{n}: {kinds:?}");
        }
        // And it never costs disk.
        let disk = |d: &MemDisk| {
            d.contents()
                .chunks(BLOCK as usize)
                .filter(|b| b.iter().any(|&x| x != 0))
                .count()
        };
        assert!(disk(&with) <= disk(&without), "{n} bytes");
    }
}

#[test]
fn removing_the_property_keeps_old_payloads_readable_and_the_file_version_3() {
    let id = trained();
    let data = record(77, 262_144);
    let disk = write(&data, Some(id));
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    c.set_dictionary_property(None).unwrap();
    c.write(300_000, &record(78, 20_000)).unwrap();
    c.fsync().unwrap();
    drop(c);
    // Extents 0 and 1 still use it, extent 2 does not; the superblock stays version 3 (flagged).
    let kinds: Vec<Kind> = usage(&disk, None).unwrap().parts.keys().copied().collect();
    assert!(
        kinds.contains(&Kind::DictExtent(3))
            && kinds.contains(&Kind::Extent(squeezefs_codec::Algorithm::Zstd, 3)),
        "{kinds:?}"
    );
    assert_eq!(version(&disk), 3);
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    assert_eq!(c.dictionary_property(), None);
    assert_eq!(c.read(0, 262_144).unwrap(), data);
}

#[test]
fn a_payload_whose_dictionary_is_missing_is_an_error_naming_it_not_a_panic() {
    let id = trained();
    let data = record(5, 60_000);
    let disk = write(&data, Some(id));
    // Make the stored frame name another dictionary (as a file copied to a squeezefs that
    // lacks the dictionary would): the checksums are recomputed so only the id differs.
    let other = id ^ 0x0101_0101;
    assert!(dict::get(other).is_none());
    let mut half = vec![0u8; BLOCK as usize * 20];
    let at = squeezefs_container::format::half_offset(17, 0, 0);
    let got = squeezefs_container::read_full(&disk, &mut half, at).unwrap();
    half.truncate(got);
    let h = squeezefs_container::format::ExtentHeader::decode(&half, 0, 17).unwrap();
    let mut payload = half[EXTENT_HEADER_LEN..EXTENT_HEADER_LEN + h.stored_len as usize].to_vec();
    assert_eq!(dict::frame_dict_id(&payload), Some(id));
    let fhd = payload[4];
    let pos = 5 + usize::from(fhd & 0x20 == 0);
    assert_eq!(fhd & 3, 3);
    payload[pos..pos + 4].copy_from_slice(&other.to_le_bytes());
    let h2 = squeezefs_container::format::ExtentHeader {
        payload_sum: xxhash_rust::xxh3::xxh3_64(&payload),
        ..h
    };
    disk.write_at(&h2.encode(), at).unwrap();
    disk.write_at(&payload, at + EXTENT_HEADER_LEN as u64).unwrap();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    let e = c.read(0, 100).unwrap_err();
    assert!(matches!(e, Error::CorruptExtent { .. }), "{e}");
    assert_eq!(e.errno(), libc::EIO);
    let msg = e.to_string();
    assert!(
        msg.contains(&other.to_string()) && msg.contains("extent 0"),
        "{msg}"
    );
}
