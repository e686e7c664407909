//! Compression policy inside a container: the backoff and its on-disk flag, forced
//! compression, per-file properties, and reading format version 1.

use std::sync::Arc;

use squeezefs_codec::CodecSpec;
use squeezefs_container::format::{sb_offset, Superblock, BLOCK, SB_FLAG_NOCOMPRESS};
use squeezefs_container::sim::MemDisk;
use squeezefs_container::{
    Container, Options, ReadBytes, Stats, Storage, BACKOFF_AFTER, RETRY_EVERY, WRITE_BATCH,
};
use squeezefs_testdata::{random, text};
use xxhash_rust::xxh3::xxh3_64;

const E: usize = 1 << 17;

fn opts(codec: &str, force: bool) -> Options {
    Options {
        codec: codec.parse().unwrap(),
        force,
        stats: Arc::new(Stats::default()),
        ..Options::default()
    }
}

/// The superblock copy with the higher generation.
fn current_sb(disk: &MemDisk) -> Superblock {
    let c = disk.contents();
    (0..2u8)
        .filter_map(|s| {
            let o = sb_offset(s) as usize;
            Superblock::decode(&c[o..(o + BLOCK as usize).min(c.len())]).ok()
        })
        .max_by_key(|sb| sb.generation)
        .expect("a valid superblock")
}

#[test]
fn a_file_that_keeps_failing_is_flagged_and_backs_off_and_a_success_clears_it() {
    let disk = MemDisk::new();
    let o = opts("zstd:3", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    // Eight extents of noise, one at a time: each is judged and fails.
    for i in 0..BACKOFF_AFTER as usize {
        c.write((i * E) as u64, &random(E, i as u64 + 1)).unwrap();
        assert_eq!(c.is_nocompress(), i + 1 == BACKOFF_AFTER as usize);
    }
    let s = o.stats.snapshot();
    assert_eq!(s.raw_heuristic, BACKOFF_AFTER as u64);
    assert_eq!(s.files_flagged, 1);
    c.fsync().unwrap();
    assert!(
        current_sb(&disk).flags & SB_FLAG_NOCOMPRESS != 0,
        "flag is on disk"
    );

    // Reopened, the file is still flagged: of the next RETRY_EVERY writes, all but one are
    // stored raw without a look.
    let o = opts("zstd:3", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert!(c.is_nocompress());
    let base = BACKOFF_AFTER as usize;
    for i in 0..RETRY_EVERY as usize {
        c.write(((base + i) * E) as u64, &random(E, 100 + i as u64))
            .unwrap();
    }
    let s = o.stats.snapshot();
    assert_eq!(s.raw_backoff, RETRY_EVERY as u64 - 1);
    assert_eq!(s.raw_heuristic, 1, "the retry was judged");
    assert!(c.is_nocompress());

    // Compressible data: the skipped writes stay raw until the next retry compresses,
    // which clears the flag; from then on everything is compressed.
    let base = base + RETRY_EVERY as usize;
    for i in 0..2 * RETRY_EVERY as usize {
        c.write(((base + i) * E) as u64, &text(E)).unwrap();
    }
    assert!(!c.is_nocompress());
    let s = o.stats.snapshot();
    assert_eq!(s.files_unflagged, 1);
    assert_eq!(
        s.raw_backoff,
        2 * (RETRY_EVERY as u64 - 1),
        "one more round of skips"
    );
    assert_eq!(s.extents_compressed, RETRY_EVERY as u64 + 1);
    c.fsync().unwrap();
    assert_eq!(
        current_sb(&disk).flags & SB_FLAG_NOCOMPRESS,
        0,
        "flag cleared on disk"
    );
    // Whatever was decided, every byte reads back.
    let mut c = Container::open(disk.clone(), &opts("zstd:3", false)).unwrap();
    assert!(c.read(0, E).unwrap() == random(E, 1));
    assert!(c.read((base * E) as u64, E).unwrap() == text(E));
}

#[test]
fn compress_force_tries_every_extent_and_never_flags() {
    let disk = MemDisk::new();
    let o = opts("zstd:3", true);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    for i in 0..2 * BACKOFF_AFTER as usize {
        c.write((i * E) as u64, &random(E, i as u64 + 1)).unwrap();
    }
    assert!(!c.is_nocompress());
    let s = o.stats.snapshot();
    assert_eq!(s.raw_no_gain, 2 * BACKOFF_AFTER as u64);
    assert_eq!(s.raw_heuristic + s.raw_backoff + s.raw_early_abort, 0);
}

#[test]
fn a_files_compression_property_outlives_reopening_and_beats_the_mount_option() {
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &opts("lz4", false)).unwrap();
    assert_eq!(c.compression_property(), None);
    let z9: CodecSpec = "zstd:9".parse().unwrap();
    c.set_compression_property(Some(z9)).unwrap();
    c.write(0, &text(3 * E)).unwrap();
    c.fsync().unwrap();
    // Mounted again with another codec: the file keeps its own.
    let o = opts("zlib:1", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert_eq!(c.compression_property(), Some(z9));
    c.write(3 * E as u64, &text(E)).unwrap();
    c.flush().unwrap();
    let s = o.stats.snapshot();
    assert_eq!(s.codecs.len(), 1);
    assert_eq!(s.codecs[0].0, z9);
    // Removed, the mount option applies again; old extents still read.
    c.set_compression_property(None).unwrap();
    assert_eq!(c.effective_codec(), Some("zlib:1".parse().unwrap()));
    c.write(4 * E as u64, &text(E)).unwrap();
    c.fsync().unwrap();
    assert!(o
        .stats
        .snapshot()
        .codecs
        .iter()
        .any(|(k, _)| k.to_string() == "zlib:1"));
    let mut c = Container::open(disk.clone(), &opts("lz4", false)).unwrap();
    assert_eq!(c.compression_property(), None);
    let mut want = text(3 * E);
    want.extend(text(E));
    want.extend(text(E));
    assert!(c.read(0, 5 * E).unwrap() == want);
}

#[test]
fn the_extent_size_property_changes_only_while_the_file_is_empty() {
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    c.set_extent_size_property(Some(12)).unwrap();
    assert_eq!(c.extent_size(), Some(4096));
    let data = text(40_000);
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    let e = c.set_extent_size_property(Some(20)).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(c.set_extent_size_property(Some(30)).is_err());
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert_eq!(c.extent_size_property(), Some(4096));
    assert!(c.read(0, 50_000).unwrap() == data);
    // Emptied, it may change again, and nothing of the old layout shows through.
    c.set_size(0).unwrap();
    c.set_extent_size_property(Some(20)).unwrap();
    c.write(0, &data[..5000]).unwrap();
    c.set_size(300_000).unwrap();
    c.fsync().unwrap();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert_eq!(c.extent_size(), Some(1 << 20));
    let back = c.read(0, 300_000).unwrap();
    assert!(back[..5000] == data[..5000]);
    assert!(back[5000..].iter().all(|&b| b == 0));
}

#[test]
fn containers_written_in_format_version_1_still_read_and_are_upgraded_on_write() {
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    let data = text(3 * E + 1000);
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    drop(c);
    // Turn both superblock copies into what format 1 wrote: version 1, byte 37 zero.
    let mut sbs = disk.contents()[..2 * BLOCK as usize].to_vec();
    for slot in 0..2 {
        let b = &mut sbs[slot * BLOCK as usize..][..64];
        if b[..8] != squeezefs_container::format::MAGIC {
            continue;
        }
        b[8..10].copy_from_slice(&1u16.to_le_bytes());
        b[37] = 0;
        let sum = xxh3_64(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
    }
    disk.write_at(&sbs, 0).unwrap();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert!(c.read(0, data.len() + 10).unwrap() == data);
    c.write(10, b"v2").unwrap();
    c.set_size(data.len() as u64 + 5).unwrap();
    c.fsync().unwrap();
    let sb = current_sb(&disk);
    assert_eq!(sb.size, data.len() as u64 + 5);
    // The copy just written (the higher generation) is version 2.
    let c = disk.contents();
    let version =
        |slot: u8| u16::from_le_bytes([c[sb_offset(slot) as usize + 8], c[sb_offset(slot) as usize + 9]]);
    let generation =
        |slot: u8| u64::from_le_bytes(c[sb_offset(slot) as usize + 16..][..8].try_into().unwrap());
    let newest = if generation(0) > generation(1) { 0 } else { 1 };
    assert_eq!(version(newest), 2);
}

#[test]
fn covered_extents_go_out_a_batch_at_a_time() {
    // A sequential writer covers one extent per write: each waits until WRITE_BATCH do, so
    // that the write-out compresses them on every core at once; the rest goes at the fsync.
    let disk = MemDisk::new();
    let o = opts("zstd:1", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    let n = 2 * WRITE_BATCH + 2;
    let data = text(n * E);
    let compressed = || o.stats.snapshot().extents_compressed as usize;
    for i in 0..n {
        c.write((i * E) as u64, &data[i * E..(i + 1) * E]).unwrap();
        let went = (i + 1) / WRITE_BATCH * WRITE_BATCH;
        assert_eq!(compressed(), went, "after extent {i}");
        assert_eq!(c.dirty_bytes(), (i + 1 - went) * E, "after extent {i}");
        assert!(c.read((i * E) as u64, E).unwrap() == data[i * E..(i + 1) * E]);
    }
    c.fsync().unwrap();
    assert_eq!(compressed(), n);
    assert_eq!(c.dirty_bytes(), 0);
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert!(c.read(0, n * E).unwrap() == data);
}

#[test]
fn extents_written_out_of_order_are_compressed_once() {
    // Several FUSE threads deliver the halves of an extent in any order: an extent goes out
    // once writes covered all of it, not when one reached its end.
    let disk = MemDisk::new();
    let o = opts("zstd:1", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    let data = text(8 * E);
    for i in 0..8 {
        let (a, m, b) = (i * E, i * E + E / 2, (i + 1) * E);
        c.write(m as u64, &data[m..b]).unwrap();
        c.write(a as u64 + 1000, &data[a + 1000..m + 10]).unwrap();
        c.write(a as u64, &data[a..a + 1000]).unwrap();
    }
    let s = o.stats.snapshot();
    assert_eq!(
        s.extents_compressed + s.extents_raw,
        8,
        "each extent compressed exactly once"
    );
    c.fsync().unwrap();
    assert_eq!(o.stats.snapshot().extents_compressed, 8);
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert!(c.read(0, 8 * E).unwrap() == data);
}

#[test]
fn a_write_back_does_not_rewrite_extents_already_written() {
    // A new file is written back empty (inline) at its first close, then grows: its extents
    // are written once, not again at every later write-back before the commit.
    let disk = MemDisk::new();
    let o = opts("zstd:3", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    let _ = c.write_back().unwrap();
    let data = text(8 << 20);
    for i in [1usize, 2, 3, 0, 4, 5, 6, 7] {
        c.write((i << 20) as u64, &data[i << 20..(i + 1) << 20]).unwrap();
    }
    let _ = c.write_back().unwrap();
    let _ = c.write_back().unwrap();
    let s = o.stats.snapshot();
    assert_eq!(s.extents_compressed + s.extents_raw, 64);
    c.fsync().unwrap();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert!(c.read(0, 8 << 20).unwrap() == data);
}

/// A file whose first bytes name an already-compressed format (here a JPEG signature in
/// front of text that would compress well) is stored raw without a trial: every extent
/// `raw_because.content_type`, none judged or tried, the file flagged `NOCOMPRESS`. The
/// same bytes behind no signature compress; `compress-force` and a compression property of
/// the file's own compress them anyway.
#[test]
fn a_file_that_starts_like_a_compressed_format_is_stored_raw_untried() {
    let mut png = b"\xFF\xD8\xFF\xE0\0\x10JFIF\0".to_vec();
    png.extend(text(4 * E - png.len()));
    let write = |o: &Options, data: &[u8]| {
        let disk = MemDisk::new();
        let mut c = Container::open(disk.clone(), o).unwrap();
        c.write(0, data).unwrap();
        c.fsync().unwrap();
        let mut c = Container::open(disk.clone(), o).unwrap();
        assert!(c.read(0, data.len()).unwrap() == data);
        o.stats.snapshot().extents_compressed
    };
    let o = opts("zstd:3", false);
    assert_eq!(write(&o, &png), 0);
    let s = o.stats.snapshot();
    assert_eq!((s.raw_content_type, s.extents_compressed), (4, 0), "{s:?}");
    assert_eq!(
        (
            s.raw_heuristic,
            s.raw_no_gain,
            s.raw_early_abort,
            s.probe_lz4_pass
        ),
        (0, 0, 0, 0),
        "no trial: {s:?}"
    );
    assert_eq!(
        s.files_flagged, 1,
        "flagged NOCOMPRESS (kept for a later open, and the pass)"
    );
    // Flagged on disk too.
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &o).unwrap();
    c.write(0, &png).unwrap();
    c.fsync().unwrap();
    assert!(current_sb(&disk).flags & SB_FLAG_NOCOMPRESS != 0);
    // A file whose codec someone chose (a property, a rule, its directory's) is tried.
    let o = opts("zstd:3", false);
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &o).unwrap();
    c.set_compression_property(Some("zstd:9".parse().unwrap()))
        .unwrap();
    c.write(0, &png).unwrap();
    c.fsync().unwrap();
    let s = o.stats.snapshot();
    assert_eq!((s.raw_content_type, s.extents_compressed), (0, 4), "{s:?}");
    // Without the signature the same text compresses.
    let o = opts("zstd:3", false);
    let mut plain = png.clone();
    plain[..8].copy_from_slice(b"PLAINTXT");
    assert_eq!(write(&o, &plain), 4);
    assert_eq!(o.stats.snapshot().raw_content_type, 0);
    // Forced, it is tried and compressed.
    let o = opts("zstd:3", true);
    assert_eq!(write(&o, &png), 4);
    assert_eq!(o.stats.snapshot().raw_content_type, 0);
    // A file that stops looking like one when its start is rewritten is compressed again.
    let o = opts("zstd:3", false);
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &o).unwrap();
    c.write(0, &png).unwrap();
    c.fsync().unwrap();
    c.write(0, &plain[..E]).unwrap();
    c.fsync().unwrap();
    assert_eq!(o.stats.snapshot().extents_compressed, 1);
    assert_eq!(o.stats.snapshot().files_unflagged, 1, "a success clears the flag");
}

/// A small already-compressed file stays in a compressed pack block: the block is
/// compressed once for many files, and small compressed files compress well together.
#[test]
fn a_small_compressed_file_is_packed_like_any_other() {
    use squeezefs_container::pack::{MemPackDir, Packs};
    let disk = MemDisk::new();
    let packs = Arc::new(Packs::new(Box::new(MemPackDir::new(disk.crash())), true, 1 << 20).unwrap());
    let o = Options {
        packs: Some(packs.clone()),
        ..opts("zstd:3", false)
    };
    let mut gz = b"\x1f\x8b\x08\0\0\0\0\0\0\x03".to_vec();
    gz.extend(text(20_000));
    let mut c = Container::open(disk.clone(), &o).unwrap();
    c.write(0, &gz).unwrap();
    c.fsync().unwrap();
    let loc = c.location().expect("packed");
    let h = packs.block_header(loc.pack, loc.block).unwrap();
    assert_eq!(h.codec, squeezefs_codec::Algorithm::Zstd, "a compressed block");
    assert_eq!(loc.codec, "zstd:3".parse::<CodecSpec>().unwrap());
    assert_eq!(o.stats.snapshot().raw_content_type, 0);
    let mut c = Container::open(disk, &o).unwrap();
    assert!(c.read(0, gz.len()).unwrap() == gz);
}

/// The force property: on a mount without `compress-force`, a file with it compresses every
/// extent (no heuristic, no backoff, no content-type check), like a forced mount; it is
/// kept in the superblock (format version 7) and, for a packed file, in its location
/// record (version 4), and outlives reopening; removed, the file is judged again and its
/// superblock goes back to the version the rest of it needs.
#[test]
fn a_files_force_property_compresses_every_extent_and_is_kept_on_disk() {
    use squeezefs_container::format::PROP_FORCE;
    use squeezefs_container::pack::format::LOCATION_VERSION_4;
    use squeezefs_container::pack::{MemPackDir, Packs};
    let disk = MemDisk::new();
    let o = opts("zstd:3", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert!(!c.force_property());
    c.set_force_property(true).unwrap();
    // Noise that the heuristic would judge, twice the backoff's count, then a JPEG.
    for i in 0..2 * BACKOFF_AFTER as usize {
        c.write((i * E) as u64, &random(E, i as u64 + 1)).unwrap();
    }
    c.fsync().unwrap();
    assert!(!c.is_nocompress());
    let s = o.stats.snapshot();
    assert_eq!(
        s.raw_no_gain,
        2 * BACKOFF_AFTER as u64,
        "every extent tried: {s:?}"
    );
    assert_eq!(s.raw_heuristic + s.raw_backoff + s.raw_early_abort, 0, "{s:?}");
    let sb = current_sb(&disk);
    assert_eq!(sb.props & PROP_FORCE, PROP_FORCE);
    assert_eq!(sb.version(), 7);
    // Removed within the same open, the next noise is judged by the heuristic: no failure
    // counted while forced starts a backoff.
    c.set_force_property(false).unwrap();
    c.write((2 * BACKOFF_AFTER as usize * E) as u64, &random(E, 77))
        .unwrap();
    c.flush().unwrap();
    let s = o.stats.snapshot();
    assert_eq!((s.raw_heuristic, s.raw_backoff), (1, 0), "{s:?}");
    c.set_force_property(true).unwrap();
    c.fsync().unwrap();
    assert_eq!(current_sb(&disk).props & PROP_FORCE, PROP_FORCE);
    // Reopened on a mount without force: still forced, and a compressed format is tried.
    let o = opts("zstd:3", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert!(c.force_property());
    let mut jpeg = b"\xFF\xD8\xFF\xE0\0\x10JFIF\0".to_vec();
    jpeg.extend(text(E - jpeg.len()));
    c.write(0, &jpeg).unwrap();
    c.fsync().unwrap();
    let s = o.stats.snapshot();
    assert_eq!((s.raw_content_type, s.extents_compressed), (0, 1), "{s:?}");
    // Removed: the next noise is judged by the heuristic again, and the superblock is the
    // version 2 it was.
    c.set_force_property(false).unwrap();
    c.write((2 * BACKOFF_AFTER as usize * E) as u64, &random(E, 99))
        .unwrap();
    c.fsync().unwrap();
    assert_eq!(o.stats.snapshot().raw_heuristic, 1);
    assert_eq!(current_sb(&disk).props & PROP_FORCE, 0);
    assert_eq!(current_sb(&disk).version(), 2);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert!(!c.force_property());
    assert!(c.read(0, E).unwrap() == jpeg);

    // A packed file keeps it in a version 4 record, and as a container again when it grows.
    let disk = MemDisk::new();
    let packs = Arc::new(Packs::new(Box::new(MemPackDir::new(disk.crash())), true, 1 << 20).unwrap());
    let o = Options {
        packs: Some(packs),
        ..opts("zstd:3", false)
    };
    let mut c = Container::open(disk.clone(), &o).unwrap();
    c.set_force_property(true).unwrap();
    c.write(0, &text(5000)).unwrap();
    c.fsync().unwrap();
    let loc = c.location().expect("packed");
    assert_eq!(loc.props & PROP_FORCE, PROP_FORCE);
    let rec = disk
        .xattr(squeezefs_container::pack::format::LOCATION_XATTR)
        .unwrap();
    assert_eq!((rec[0], rec.len()), (LOCATION_VERSION_4, 56));
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert!(c.force_property());
    c.write(5000, &random(3 * E, 5)).unwrap();
    c.fsync().unwrap();
    assert!(c.location().is_none(), "a container now");
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert!(c.force_property());
    assert_eq!(current_sb(&disk).props & PROP_FORCE, PROP_FORCE);
    let mut want = text(5000);
    want.extend(random(3 * E, 5));
    assert!(c.read(0, want.len()).unwrap() == want);
}

#[test]
fn a_batch_compressed_without_the_lock_is_written_once_and_never_stale() {
    // The daemon's WRITEs (`write_deferring`): a batch taken out is compressed while the
    // file's next writes are served. Those writes take the next extents, not the batch's
    // again; an extent written again meanwhile is not written with the copy compressed
    // before (it stays dirty, and goes out with its new bytes).
    let disk = MemDisk::new();
    let o = opts("zstd:1", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    let n = 2 * WRITE_BATCH;
    let mut data = text(n * E);
    let compressed = || o.stats.snapshot().extents_compressed as usize;
    let mut batches = Vec::new();
    for i in 0..n {
        if let Some(b) = c
            .write_deferring((i * E) as u64, &data[i * E..(i + 1) * E])
            .unwrap()
        {
            batches.push(b);
        }
    }
    assert_eq!(batches.len(), 2, "two batches of {WRITE_BATCH}");
    assert!(batches.iter().all(|b| b.len() == WRITE_BATCH));
    assert_eq!(compressed(), 0, "nothing compressed under the lock");
    assert_eq!(c.dirty_bytes(), n * E);
    // Extent 1 changes while the first batch is being compressed.
    let new: Vec<u8> = data[E..2 * E].iter().map(|b| b.wrapping_add(1)).collect();
    c.write(E as u64, &new).unwrap();
    data[E..2 * E].copy_from_slice(&new);
    // And a few bytes of extent 2 (the batch shares its buffer: this write copies it).
    c.write(2 * E as u64 + 10, b"xyz").unwrap();
    data[2 * E + 10..2 * E + 13].copy_from_slice(b"xyz");
    for b in batches {
        c.finish_batch(b.compress()).unwrap();
    }
    // Six written, with the copies compressed without the lock; extents 1 and 2 wait
    // with their new bytes.
    assert_eq!(compressed(), n - 2);
    assert_eq!(o.stats.snapshot().batch_copies_used as usize, n - 2);
    assert_eq!(c.dirty_bytes(), 2 * E);
    c.fsync().unwrap();
    assert_eq!(compressed(), n);
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert!(c.read(0, n * E).unwrap() == data);
}

#[test]
fn a_read_shares_the_cached_extent_and_keeps_its_bytes_through_changes() {
    // A sequential reader's READ (128 KiB of a cached extent) is answered by the extent's
    // buffer, not a copy of it; the file changing afterwards (a partial write, a whole
    // overwrite, a truncate) never changes what that READ holds. A short READ copies.
    let disk = MemDisk::new();
    let o = opts("zstd:1", false);
    let mut c = Container::open(disk.clone(), &o).unwrap();
    let data = text(2 * E);
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    let mut c = Container::open(disk.clone(), &o).unwrap();
    let whole = c.read_bytes(0, E).unwrap();
    assert!(matches!(whole, ReadBytes::Shared(..)), "a whole extent is shared");
    let half = c.read_bytes(E as u64 / 2, E / 2).unwrap();
    assert!(matches!(half, ReadBytes::Shared(..)));
    let short = c.read_bytes(4096, 4096).unwrap();
    assert!(matches!(short, ReadBytes::Owned(_)), "a 4 KiB read copies");
    c.write(100, b"changed").unwrap();
    assert_eq!(&whole[..], &data[..E]);
    assert_eq!(&c.read(100, 7).unwrap()[..], b"changed");
    let again = c.read_bytes(0, E).unwrap();
    let second = c.read_bytes(E as u64, E).unwrap();
    assert!(matches!(second, ReadBytes::Shared(..)));
    c.write(E as u64 / 2, &vec![7u8; E / 2]).unwrap();
    c.write(E as u64, &vec![9u8; E]).unwrap();
    assert_eq!(c.read(E as u64, E).unwrap(), vec![9u8; E]);
    c.set_size(10).unwrap();
    assert_eq!(&whole[..], &data[..E]);
    assert_eq!(&half[..], &data[E / 2..E]);
    assert_eq!(
        &second[..],
        &data[E..2 * E],
        "a whole overwrite replaces, never changes it"
    );
    assert_eq!(&again[..100], &data[..100]);
    assert_eq!(&again[100..107], b"changed");
    assert_eq!(&again[107..], &data[107..E]);
    assert_eq!(c.read(0, E).unwrap().len(), 10);
}
