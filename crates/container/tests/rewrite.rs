//! `squeezefs compress` at the container level: rewriting in place to another codec, and
//! copying into a new container, including crashes at every step of a rewrite.

use squeezefs_codec::{Algorithm, CodecSpec};
use squeezefs_container::convert::copy_into;
use squeezefs_container::format::KeptTimes;
use squeezefs_container::sim::MemDisk;
use squeezefs_container::usage::{usage, Kind};
use squeezefs_container::{Container, Options, Storage};
use squeezefs_testdata::{log_lines, random};

fn opts(codec: &str) -> Options {
    Options {
        codec: codec.parse::<CodecSpec>().unwrap(),
        ..Options::default()
    }
}

fn contents(disk: &MemDisk) -> Vec<u8> {
    let mut c = Container::open(disk.clone(), &opts("lz4")).unwrap();
    let n = c.size().unwrap() as usize;
    c.read(0, n).unwrap()
}

fn kinds(disk: &MemDisk) -> Vec<Kind> {
    usage(disk, None).unwrap().parts.keys().copied().collect()
}

/// A file written with lz4 and with a hole in the middle.
fn lz4_file() -> (MemDisk, Vec<u8>) {
    let disk = MemDisk::new();
    let mut data = log_lines(1 << 20);
    data[300_000..700_000].fill(0);
    let mut c = Container::open(disk.clone(), &opts("lz4")).unwrap();
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    (disk, data)
}

#[test]
fn rewrite_recompresses_every_extent_and_keeps_bytes_and_holes() {
    let (disk, data) = lz4_file();
    assert_eq!(kinds(&disk), vec![Kind::Extent(Algorithm::Lz4, 1)]);
    let before = usage(&disk, None).unwrap().parts[&Kind::Extent(Algorithm::Lz4, 1)].extents;
    let mut c = Container::open(disk.clone(), &opts("lz4")).unwrap();
    c.set_compression_property(Some("zstd:9".parse().unwrap()))
        .unwrap();
    let n = c.rewrite(0..u64::MAX).unwrap();
    assert!(n < data.len() as u64, "holes are not rewritten");
    drop(c);
    assert_eq!(kinds(&disk), vec![Kind::Extent(Algorithm::Zstd, 9)]);
    assert_eq!(
        usage(&disk, None).unwrap().parts[&Kind::Extent(Algorithm::Zstd, 9)].extents,
        before
    );
    assert_eq!(contents(&disk), data);
}

#[test]
fn a_crash_anywhere_in_a_rewrite_leaves_the_same_bytes() {
    let (disk, data) = lz4_file();
    let mut seen_mixed = false;
    for n in 0..60u64 {
        let d = disk.reboot(|| 0);
        let trial = d.clone();
        trial.crash_after(n);
        let mut c = Container::open(trial.clone(), &opts("lz4")).unwrap();
        c.set_compression_property(Some("zstd:5".parse().unwrap()))
            .unwrap();
        let finished = c.rewrite(0..u64::MAX).is_ok();
        drop(c);
        let after = trial.reboot_seeded(n);
        assert_eq!(contents(&after), data, "crash after {n} operations");
        let k = kinds(&after);
        seen_mixed |= k.len() > 1;
        if finished && !trial.has_crashed() {
            assert_eq!(k, vec![Kind::Extent(Algorithm::Zstd, 5)]);
            break;
        }
    }
    assert!(seen_mixed, "some crash should land between extents");
}

#[test]
fn copy_into_turns_a_plain_file_into_a_container_with_another_extent_size() {
    let src_disk = MemDisk::new();
    let mut data = log_lines(3 << 20);
    data[1 << 20..2 << 20].fill(0);
    src_disk.write_at(&data, 0).unwrap();
    let mut src = Container::open(src_disk.clone(), &opts("zstd:3")).unwrap();
    assert!(src.is_plain());
    let dst_disk = MemDisk::new();
    let mut o = opts("zstd:3");
    o.extent_shift = 20;
    let mut dst = Container::open(dst_disk.clone(), &o).unwrap();
    dst.set_extent_size_property(Some(20)).unwrap();
    let mut progress = 0;
    let size = copy_into(&mut src, &mut dst, |n| progress += n).unwrap();
    dst.flush().unwrap();
    assert_eq!(size, data.len() as u64);
    // Written zeros in a plain file are data to read, but never stored in a container.
    assert_eq!(progress, 3 << 20);
    drop(dst);
    let u = usage(&dst_disk, None).unwrap();
    assert_eq!(u.extent_size, 1 << 20);
    assert_eq!(u.parts[&Kind::Extent(Algorithm::Zstd, 3)].extents, 2);
    assert_eq!(contents(&dst_disk), data);
}

/// zstd:1 text, then noise (stored raw), then a hole, then text again.
fn mixed_file() -> (MemDisk, Vec<u8>) {
    let disk = MemDisk::new();
    let e = 128 << 10;
    let mut data = log_lines(12 * e);
    data[4 * e..6 * e].copy_from_slice(&random(2 * e, 0x2545_f491_4f6c_dd1d));
    data[7 * e..8 * e].fill(0);
    let mut c = Container::open(disk.clone(), &opts("zstd:1")).unwrap();
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    (disk, data)
}

fn extents_of(disk: &MemDisk, k: Kind) -> u64 {
    usage(disk, None).unwrap().parts.get(&k).map_or(0, |p| p.extents)
}

/// Background recompression's step on one file: only extents compressed at another level
/// are rewritten; raw extents and holes stay as they are; the file's own codec for new
/// writes does not change; a second pass finds nothing.
#[test]
fn recompress_rewrites_only_what_differs_from_the_target() {
    let (disk, data) = mixed_file();
    let zstd1 = extents_of(&disk, Kind::Extent(Algorithm::Zstd, 1));
    let raw = extents_of(&disk, Kind::Extent(Algorithm::None, 0));
    assert_eq!((zstd1, raw), (9, 2), "{:?}", kinds(&disk));
    let target: CodecSpec = "zstd:9".parse().unwrap();
    let mut c = Container::open(disk.clone(), &opts("zstd:1")).unwrap();
    assert_eq!(c.pending_for(target).unwrap().len(), 9);
    let done = c.recompress(target).unwrap();
    assert_eq!(done.extents, 9);
    assert_eq!(done.bytes, 9 * (128 << 10));
    assert_eq!(c.recompress(target).unwrap(), Default::default(), "nothing left");
    // New writes still get the file's codec.
    c.write(20 << 17, &log_lines(128 << 10)).unwrap();
    c.fsync().unwrap();
    drop(c);
    assert_eq!(extents_of(&disk, Kind::Extent(Algorithm::Zstd, 9)), 9);
    assert_eq!(
        extents_of(&disk, Kind::Extent(Algorithm::None, 0)),
        2,
        "raw ones are left"
    );
    assert_eq!(
        extents_of(&disk, Kind::Extent(Algorithm::Zstd, 1)),
        1,
        "the new write"
    );
    assert_eq!(&contents(&disk)[..data.len()], &data[..]);
}

/// A file with bytes waiting in memory is left for later (a user's write wins), and one
/// flagged incompressible is never retried.
#[test]
fn recompress_leaves_dirty_and_incompressible_files() {
    let (disk, _) = mixed_file();
    let target: CodecSpec = "zstd:5".parse().unwrap();
    let mut c = Container::open(disk.clone(), &opts("zstd:1")).unwrap();
    c.write(100, b"a partial write").unwrap();
    assert_eq!(c.recompress(target).unwrap(), Default::default());
    c.fsync().unwrap();
    assert_eq!(c.recompress(target).unwrap().extents, 9);

    // Noise only: the backoff flags the file; nothing is pending, ever.
    let disk = MemDisk::new();
    let noise = random(20 << 17, 7);
    let mut c = Container::open(disk.clone(), &opts("zstd:1")).unwrap();
    c.write(0, &noise).unwrap();
    c.fsync().unwrap();
    assert!(c.pending_for(target).unwrap().is_empty());
    assert_eq!(c.recompress(target).unwrap(), Default::default());
}

#[test]
fn a_crash_anywhere_in_a_recompression_leaves_the_same_bytes() {
    let (disk, data) = mixed_file();
    let target: CodecSpec = "zstd:7".parse().unwrap();
    let mut seen_mixed = false;
    for n in 0..80u64 {
        let d = disk.reboot(|| 0);
        let trial = d.clone();
        trial.crash_after(n);
        let mut c = Container::open(trial.clone(), &opts("zstd:1")).unwrap();
        let todo = c.pending_for(target).unwrap();
        let finished = c.recompress_extents(target, &todo, Some(CTIME)).is_ok();
        drop(c);
        let after = trial.reboot_seeded(n);
        assert_eq!(contents(&after), data, "crash after {n} operations");
        let (old, new) = (
            extents_of(&after, Kind::Extent(Algorithm::Zstd, 1)),
            extents_of(&after, Kind::Extent(Algorithm::Zstd, 7)),
        );
        assert_eq!(old + new, 9, "every extent old or new: crash after {n}");
        // The change time is kept durably before the first extent is rewritten.
        let kept = Container::open(after.clone(), &opts("zstd:1"))
            .unwrap()
            .kept_times();
        assert!(
            new == 0 || kept == Some(CTIME.into()),
            "crash after {n}: {new} rewritten, kept {kept:?}"
        );
        seen_mixed |= old > 0 && new > 0;
        if finished && !trial.has_crashed() {
            assert_eq!((old, new), (0, 9));
            break;
        }
    }
    assert!(seen_mixed, "some crash should land between extents");
}

const CTIME: KeptTimes = KeptTimes {
    ctime: (1_650_000_000, 42),
    mtime: (1_640_000_000, 7),
};

/// The change time the pass hands over is kept in the superblock (version 5) until the
/// file's next change, which drops it; a file with nothing to rewrite gets none.
#[test]
fn a_recompressed_file_keeps_its_change_time_until_it_changes() {
    let (disk, data) = mixed_file();
    let target: CodecSpec = "zstd:9".parse().unwrap();
    let mut c = Container::open(disk.clone(), &opts("zstd:1")).unwrap();
    assert_eq!(c.kept_times(), None);
    let todo = c.pending_for(target).unwrap();
    // A few extents at a time, as the daemon's pass hands them over.
    let (first, rest) = todo.split_at(3);
    assert_eq!(
        c.recompress_extents(target, first, Some(CTIME)).unwrap().extents,
        3
    );
    assert_eq!(c.kept_times(), Some(CTIME.into()));
    // A later part with another time (the backing file's, moved by the first part) keeps
    // the first one.
    let later = KeptTimes {
        ctime: (CTIME.ctime.0 + 100, 0),
        mtime: CTIME.mtime,
    };
    assert_eq!(
        c.recompress_extents(target, rest, Some(later)).unwrap().extents,
        6
    );
    assert_eq!(
        c.recompress_extents(target, &todo, Some(later)).unwrap().extents,
        0
    );
    drop(c);
    let mut c = Container::open(disk.clone(), &opts("zstd:1")).unwrap();
    assert_eq!(c.kept_times(), Some(CTIME.into()), "kept across a reopen");
    assert_eq!(c.read(0, data.len()).unwrap(), data);
    let sb = &disk.contents()[..8192];
    assert_eq!(
        u16::from_le_bytes([sb[8], sb[9]]) | u16::from_le_bytes([sb[4096 + 8], sb[4096 + 9]]),
        5,
        "a version 5 superblock"
    );
    // An overwrite with the same bytes is still a change.
    c.write(0, &data[..10]).unwrap();
    assert_eq!(c.kept_times(), None);
    c.fsync().unwrap();
    drop(c);
    assert_eq!(
        Container::open(disk.clone(), &opts("zstd:1"))
            .unwrap()
            .kept_times(),
        None
    );

    // Nothing pending among the extents handed over: nothing rewritten, no time kept.
    let mut c = Container::open(disk.clone(), &opts("zstd:1")).unwrap();
    assert_eq!(
        c.pending_for(target).unwrap(),
        vec![0],
        "only the extent just written"
    );
    assert_eq!(
        c.recompress_extents(target, &[3, 4], Some(CTIME))
            .unwrap()
            .extents,
        0
    );
    assert_eq!(c.kept_times(), None);
    assert_eq!(
        c.recompress_extents(target, &[0], Some(later)).unwrap().extents,
        1
    );
    assert_eq!(c.kept_times(), Some(later.into()));
    // A truncate drops it too.
    c.set_size(data.len() as u64).unwrap();
    assert_eq!(c.kept_times(), None);
    assert_eq!(c.read(0, data.len()).unwrap(), data);
}
