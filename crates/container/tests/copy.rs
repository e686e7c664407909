//! `Container::copy_from` (`copy_file_range`, issue 45): whole extents copied as they are
//! stored (counted in `Stats::extents_copied`), the rest read and written; the copy reads
//! back after a reopen, and a crash at any storage operation leaves each extent of the
//! destination old or new, and everything after the fsync new.

use std::sync::Arc;

use squeezefs_container::format::MAX_EXTENT_SHIFT;
use squeezefs_container::sim::MemDisk;
use squeezefs_container::{Container, Options, Stats};
use squeezefs_testdata::{random, text};

const MIB: usize = 1 << 20;

/// A mount's options: 128 KiB extents, files written whole grow to 1 MiB ones.
fn opts() -> Options {
    Options {
        codec: "zstd:1".parse().unwrap(),
        stats: Arc::new(Stats::default()),
        grow_extent_shift: Some(MAX_EXTENT_SHIFT),
        ..Options::default()
    }
}

/// A durable source file holding `data`, written whole (1 MiB extents when past 1 MiB).
fn source(o: &Options, data: &[u8]) -> Container<MemDisk> {
    let mut c = Container::create(MemDisk::new(), o);
    for (i, chunk) in data.chunks(256 << 10).enumerate() {
        c.write((i * (256 << 10)) as u64, chunk).unwrap();
    }
    c.writer_closed();
    c.fsync().unwrap();
    c
}

fn copied(o: &Options) -> u64 {
    o.stats.snapshot().extents_copied
}

fn reopened(disk: &MemDisk, o: &Options) -> Vec<u8> {
    let mut c = Container::open(disk.clone(), o).unwrap();
    let size = c.size().unwrap() as usize;
    c.read(0, size + 1).unwrap()
}

#[test]
fn whole_extents_are_copied_as_stored_the_rest_read_and_written() {
    let o = opts();
    // Text and noise: compressed and raw extents.
    let mut data = text(3 * MIB);
    data.extend_from_slice(&random(2 * MIB + 1234, 5));
    let mut src = source(&o, &data);
    assert_eq!(src.extent_size(), Some(MIB as u64));

    // Into a new file: it takes the source's extent size, every extent copied as stored,
    // the short last one too (the copy ends where the source does).
    let disk = MemDisk::new();
    let mut dst = Container::create(disk.clone(), &o);
    let n = copied(&o);
    assert_eq!(dst.copy_from(&mut src, 0, 0, 1 << 40).unwrap(), data.len() as u64);
    assert_eq!(copied(&o) - n, 6);
    assert_eq!(dst.read(0, data.len() + 1).unwrap(), data, "before the fsync");
    dst.fsync().unwrap();
    drop(dst);
    assert!(reopened(&disk, &o) == data, "after a reopen");
    let stored = o.stats.snapshot();
    assert!(stored.copied_logical == data.len() as u64 && stored.copied_stored < stored.copied_logical);
    // Same places, generations above the new file's: every half's blocks shared (as a
    // backing filesystem with reflinks does), header and payload as they are.
    assert_eq!(stored.copied_shared, stored.copied_stored + 6 * 48);
    assert!(disk.shared_bytes() >= stored.copied_shared);

    // Offsets that do not lie equally far into an extent: read and written.
    let disk = MemDisk::new();
    let mut dst = Container::create(disk.clone(), &o);
    let n = copied(&o);
    dst.copy_from(&mut src, 100, 0, 4 * MIB as u64).unwrap();
    assert_eq!(copied(&o), n, "nothing copied as stored");
    dst.fsync().unwrap();
    assert!(reopened(&disk, &o) == data[100..100 + 4 * MIB]);

    // Partial extents at both ends, into a file with data around the range: the two
    // whole extents between them copied as stored; the destination's own bytes stay.
    let disk = source(&o, &text(8 * MIB)).storage().clone();
    let mut dst = Container::open(disk, &o).unwrap();
    let mut want = text(8 * MIB);
    let (from, at, len) = (MIB / 2, MIB + MIB / 2, 2 * MIB + MIB / 2 + 4096);
    let n = copied(&o);
    dst.copy_from(&mut src, from as u64, at as u64, len as u64)
        .unwrap();
    want[at..at + len].copy_from_slice(&data[from..from + len]);
    assert_eq!(copied(&o) - n, 2);
    dst.fsync().unwrap();
    let d = dst.storage().clone();
    drop(dst);
    assert!(reopened(&d, &o) == want);

    // A copy past the destination's end leaves zeros between.
    let mut dst = Container::create(MemDisk::new(), &o);
    dst.write(0, b"head").unwrap();
    dst.copy_from(&mut src, 0, 3 * MIB as u64, 2 * MIB as u64)
        .unwrap();
    let mut want = b"head".to_vec();
    want.resize(3 * MIB, 0);
    want.extend_from_slice(&data[..2 * MIB]);
    dst.fsync().unwrap();
    let d = dst.storage().clone();
    drop(dst);
    assert!(reopened(&d, &o) == want);

    // Nothing past the source's end: short, or nothing.
    let mut dst = Container::create(MemDisk::new(), &o);
    assert_eq!(
        dst.copy_from(&mut src, data.len() as u64 - 10, 0, 100).unwrap(),
        10
    );
    assert_eq!(dst.copy_from(&mut src, data.len() as u64, 0, 100).unwrap(), 0);
}

#[test]
fn a_copy_of_a_file_with_other_extent_sizes_or_bytes_in_memory_reads_right() {
    let o = opts();
    let mut data = text(3 * MIB + 77);
    // A source of 128 KiB extents (written with a gap first, then synced) whose first
    // extent has bytes in memory only (a partial overwrite, not written out yet).
    let mut src = Container::create(MemDisk::new(), &o);
    src.write(MIB as u64, &data[MIB..]).unwrap();
    src.fsync().unwrap();
    src.write(0, &data[..MIB]).unwrap();
    data[10..1000].fill(b'X');
    src.write(10, &data[10..1000]).unwrap();
    assert_eq!(src.extent_size(), Some(128 << 10));
    // Into a new file (undecided at 128 KiB, it takes nothing larger): the extent in
    // memory is written out first, then all 25 are copied as stored.
    let mut dst = Container::create(MemDisk::new(), &o);
    let n = copied(&o);
    dst.copy_from(&mut src, 0, 0, data.len() as u64).unwrap();
    assert_eq!(copied(&o) - n, 25);
    assert!(
        src.read(0, data.len()).unwrap() == data,
        "the source still reads right"
    );
    dst.fsync().unwrap();
    let d = dst.storage().clone();
    drop(dst);
    assert!(reopened(&d, &o) == data);

    // A destination of 1 MiB extents from a 128 KiB source: read and written.
    let big = source(&o, &text(4 * MIB));
    let d = big.storage().clone();
    drop(big);
    let mut dst = Container::open(d.clone(), &o).unwrap();
    let n = copied(&o);
    dst.copy_from(&mut src, 0, 0, data.len() as u64).unwrap();
    assert_eq!(copied(&o), n);
    dst.fsync().unwrap();
    drop(dst);
    let mut want = data.clone();
    want.extend_from_slice(&text(4 * MIB)[data.len()..]);
    assert!(reopened(&d, &o) == want);
}

#[test]
fn a_crash_during_a_copy_leaves_each_extent_old_or_new() {
    let o = opts();
    let old = text(4 * MIB);
    let mid = random(4 * MIB, 4);
    let noise = random(4 * MIB, 9);
    // The source written three times: generation 3 outranks the destination's extents
    // (1, or 2 where rewritten), so its halves are shared as they are.
    let mut src = source(&o, &noise);
    for _ in 0..2 {
        src.write(0, &noise).unwrap();
        src.fsync().unwrap();
    }
    let mut new = old.clone();
    new[MIB..3 * MIB].copy_from_slice(&noise[MIB..3 * MIB]);
    // Over durable extents (a copy into the other half), and over extents rewritten but not
    // synced (in place: the header cleared first, the header's block shared last).
    for rewritten in [false, true] {
        for crash_at in 0..32u64 {
            let dst = source(&o, &old);
            let disk = dst.storage().clone();
            drop(dst);
            let mut dst = Container::open(disk.clone(), &o).unwrap();
            if rewritten {
                dst.write(MIB as u64, &mid[MIB..3 * MIB]).unwrap();
            }
            let shared = disk.shared_bytes();
            disk.crash_after(crash_at);
            let done = dst
                .copy_from(&mut src, MIB as u64, MIB as u64, 2 * MIB as u64)
                .and_then(|_| dst.fsync());
            if done.is_ok() && !disk.has_crashed() {
                assert!(
                    disk.shared_bytes() > shared,
                    "rewritten {rewritten}: nothing shared"
                );
            }
            for seed in 1..8u64 {
                let mut r = seed;
                let d2 = disk.reboot(|| {
                    r ^= r << 13;
                    r ^= r >> 7;
                    r ^= r << 17;
                    r
                });
                let got = reopened(&d2, &o);
                assert_eq!(got.len(), old.len(), "crash_at {crash_at}");
                for (k, chunk) in got.chunks(MIB).enumerate() {
                    let at = |v: &Vec<u8>| v[k * MIB..][..chunk.len()].to_vec();
                    let ok = chunk == at(&old) || chunk == at(&new) || (rewritten && chunk == at(&mid));
                    assert!(
                        ok,
                        "rewritten {rewritten} crash_at {crash_at} seed {seed}: extent {k} torn"
                    );
                }
                if done.is_ok() && !disk.has_crashed() {
                    assert!(got == new, "crash_at {crash_at}: the fsynced copy lost");
                }
            }
        }
    }
}
