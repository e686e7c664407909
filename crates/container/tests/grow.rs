//! A new file written whole from its start takes the largest extent size before its first
//! write-out (`container/grow.rs`); every other file keeps the mount's.

use std::sync::Arc;

use squeezefs_container::format::{sb_offset, Superblock, BLOCK, MAX_EXTENT_SHIFT};
use squeezefs_container::pack::record::{record_state, RecordState};
use squeezefs_container::pack::{MemPackDir, Packs, DEFAULT_CACHE};
use squeezefs_container::sim::MemDisk;
use squeezefs_container::{
    give_up_at, give_up_dense_at, grow_at, Container, DirtyBudget, Options, Stats, WRITE_BATCH,
};
use squeezefs_testdata::{random, text};

const MIB: usize = 1 << 20;
const E: u64 = 1 << 17;

fn opts(grow: bool) -> Options {
    Options {
        codec: "zstd:1".parse().unwrap(),
        stats: Arc::new(Stats::default()),
        grow_extent_shift: grow.then_some(MAX_EXTENT_SHIFT),
        ..Options::default()
    }
}

/// The extent size the superblock on disk names (the copy with the higher generation).
fn shift_on_disk(disk: &MemDisk) -> u8 {
    let c = disk.contents();
    (0..2u8)
        .filter_map(|s| {
            let o = sb_offset(s) as usize;
            Superblock::decode(&c[o..(o + BLOCK as usize).min(c.len())]).ok()
        })
        .max_by_key(|sb| sb.generation)
        .expect("a valid superblock")
        .extent_shift
}

/// Writes `data` at `off` in pieces of `piece` bytes.
fn write_in(c: &mut Container<MemDisk>, off: usize, data: &[u8], piece: usize) {
    for (i, chunk) in data.chunks(piece).enumerate() {
        c.write((off + i * piece) as u64, chunk).unwrap();
    }
}

/// Reopens the file and checks it reads `want`, and names `shift` on disk.
fn reads_back(disk: &MemDisk, o: &Options, want: &[u8], shift: u8) {
    assert_eq!(shift_on_disk(disk), shift);
    let mut c = Container::open(disk.clone(), o).unwrap();
    assert_eq!(c.extent_size(), Some(1 << shift));
    assert_eq!(c.read(0, want.len() + 1).unwrap(), want);
}

#[test]
fn a_file_written_whole_past_one_large_extent_takes_the_large_extents_before_anything_is_written() {
    let disk = MemDisk::new();
    let o = opts(true);
    let mut c = Container::create(disk.clone(), &o);
    let data = text((WRITE_BATCH + 2) * MIB + 1234);
    // Up to one large extent nothing goes out, though 128 KiB extents are covered whole.
    write_in(&mut c, 0, &data[..MIB], 256 << 10);
    assert_eq!(
        disk.contents().len(),
        0,
        "nothing written while the file is undecided"
    );
    assert_eq!(c.extent_size(), Some(E));
    write_in(&mut c, MIB, &data[MIB..], 256 << 10);
    assert_eq!(c.extent_size(), Some(1 << MAX_EXTENT_SHIFT));
    // The first at once (the decision sends what was covered), then a batch.
    assert!(
        disk.contents().len() > (WRITE_BATCH + 1) * MIB,
        "the covered 1 MiB extents went out"
    );
    c.fsync().unwrap();
    assert_eq!(o.stats.snapshot().files_grown, 1);
    reads_back(&disk, &o, &data, MAX_EXTENT_SHIFT);
}

#[test]
fn writes_that_arrive_out_of_order_still_make_a_whole_file() {
    let disk = MemDisk::new();
    let o = opts(true);
    let mut c = Container::create(disk.clone(), &o);
    let data = text(2 * MIB + 99);
    // As several FUSE threads may hand over the kernel's write-back: the second MiB first.
    c.write(MIB as u64, &data[MIB..]).unwrap();
    assert_eq!(c.extent_size(), Some(E), "a gap at the start: still undecided");
    c.write(0, &data[..MIB]).unwrap();
    assert_eq!(c.extent_size(), Some(1 << MAX_EXTENT_SHIFT));
    c.fsync().unwrap();
    reads_back(&disk, &o, &data, MAX_EXTENT_SHIFT);
}

#[test]
fn regrouped_extents_hold_zeros_between_and_after_the_pieces_written() {
    let disk = MemDisk::new();
    let o = opts(true);
    let mut c = Container::create(disk.clone(), &o);
    let data = text(MIB + 2 * E as usize);
    let mut want = vec![0u8; MIB + 3 * E as usize];
    // A piece of the second large extent first, with a gap before it and nothing after.
    let (a, b) = (MIB + 2 * E as usize, MIB + 3 * E as usize);
    c.write(a as u64, &data[MIB..MIB + E as usize]).unwrap();
    want[a..b].copy_from_slice(&data[MIB..MIB + E as usize]);
    // Then the start, past one large extent: the file regroups.
    c.write(0, &data[..MIB + E as usize]).unwrap();
    want[..MIB + E as usize].copy_from_slice(&data[..MIB + E as usize]);
    assert_eq!(c.extent_size(), Some(1 << MAX_EXTENT_SHIFT));
    assert_eq!(c.read(0, want.len() + 1).unwrap(), want, "in memory");
    // Past the end of the file, up to the extent's end: zeros when it grows.
    c.set_size(2 * MIB as u64).unwrap();
    want.resize(2 * MIB, 0);
    assert_eq!(c.read(0, want.len() + 1).unwrap(), want, "grown");
    c.fsync().unwrap();
    reads_back(&disk, &o, &want, MAX_EXTENT_SHIFT);
}

#[test]
fn files_with_a_gap_or_synced_at_one_large_extent_keep_the_mounts_extents() {
    // A gap (a sparse file, or a database's scattered pages) left when the file is written out.
    let disk = MemDisk::new();
    let o = opts(true);
    let mut c = Container::create(disk.clone(), &o);
    let mut want = vec![0u8; 3 * MIB];
    want[..MIB / 2].copy_from_slice(&text(MIB / 2));
    want[MIB..].copy_from_slice(&text(2 * MIB));
    c.write(0, &want[..MIB / 2]).unwrap();
    c.write(MIB as u64, &want[MIB..]).unwrap();
    c.fsync().unwrap();
    reads_back(&disk, &o, &want, 17);

    // Exactly one large extent, synced before its close: not past it while written.
    let disk = MemDisk::new();
    let mut c = Container::create(disk.clone(), &o);
    let data = random(MIB, 5);
    write_in(&mut c, 0, &data, 64 << 10);
    c.fsync().unwrap();
    reads_back(&disk, &o, &data, 17);
    assert_eq!(o.stats.snapshot().files_grown, 0);
}

#[test]
fn a_file_written_out_or_changed_otherwise_first_keeps_the_mounts_extents() {
    let o = opts(true);
    let data = text(3 * MIB);
    type Step = fn(&mut Container<MemDisk>);
    let first: [(&str, Step); 4] = [
        ("fsync", |c| c.fsync().unwrap()),
        ("truncate", |c| c.set_size(100 << 10).unwrap()),
        ("punch", |c| c.punch_hole(0, 4096).unwrap()),
        ("property", |c| c.set_extent_size_property(Some(17)).unwrap()),
    ];
    for (what, step) in first {
        let disk = MemDisk::new();
        let mut c = Container::create(disk.clone(), &o);
        if what == "property" {
            step(&mut c);
        }
        c.write(0, &data[..300 << 10]).unwrap();
        if what != "property" {
            step(&mut c);
        }
        c.write(300 << 10, &data[300 << 10..]).unwrap();
        c.fsync().unwrap();
        let mut want = data.clone();
        match what {
            "punch" => want[..4096].fill(0),
            "truncate" => want[100 << 10..300 << 10].fill(0),
            _ => {}
        }
        assert_eq!(shift_on_disk(&disk), 17, "after {what}");
        let mut c = Container::open(disk.clone(), &o).unwrap();
        assert_eq!(c.read(0, want.len()).unwrap(), want, "after {what}");
    }
    assert_eq!(o.stats.snapshot().files_grown, 0);
}

#[test]
fn without_the_option_a_spent_budget_or_a_gap_kept_too_long_nothing_grows() {
    let data = text(3 * MIB);
    // The mount gave `extent_size=`.
    let disk = MemDisk::new();
    let o = opts(false);
    let mut c = Container::create(disk.clone(), &o);
    write_in(&mut c, 0, &data, 256 << 10);
    c.fsync().unwrap();
    reads_back(&disk, &o, &data, 17);

    // The mount's dirty budget is spent before the file reaches 1 MiB: it is written out then.
    let disk = MemDisk::new();
    let o = Options {
        dirty: DirtyBudget::new(256 << 10),
        ..opts(true)
    };
    let mut c = Container::create(disk.clone(), &o);
    write_in(&mut c, 0, &data, 256 << 10);
    c.fsync().unwrap();
    reads_back(&disk, &o, &data, 17);

    // Scattered extents (a database's pages, each a whole 128 KiB extent here, one in four)
    // covering 8 MiB: decided then, and written as usual.
    // (A budget that holds them all: a spent one decides at once, tested above.)
    let roomy = || Options {
        dirty: DirtyBudget::new(1 << 30),
        ..opts(true)
    };
    let disk = MemDisk::new();
    let o = roomy();
    let mut c = Container::create(disk.clone(), &o);
    let to = MAX_EXTENT_SHIFT;
    assert_eq!((grow_at(to), give_up_at(to)), (1 << 20, 8 << 20));
    let page = text(E as usize);
    let pages = give_up_at(to) / E;
    let stride = 4 * E;
    let mut want = vec![0u8; (pages * stride) as usize];
    for i in 1..pages {
        c.write(i * stride, &page).unwrap();
        want[(i * stride) as usize..][..E as usize].copy_from_slice(&page);
    }
    assert!(
        disk.contents().is_empty(),
        "8 MiB less an extent covered: still undecided"
    );
    c.write(pages * stride, &page).unwrap();
    want.extend_from_slice(&page);
    assert!(
        !disk.contents().is_empty(),
        "decided at 8 MiB: covered extents went out"
    );
    c.write(0, &page).unwrap();
    want[..E as usize].copy_from_slice(&page);
    c.fsync().unwrap();
    reads_back(&disk, &o, &want, 17);
    assert_eq!(o.stats.snapshot().files_grown, 0);

    // A sequential writer whose first WRITE comes late (a session thread not scheduled):
    // all but its start covered densely past 8 MiB, it waits, and grows once the start
    // comes.
    let disk = MemDisk::new();
    let mut c = Container::create(disk.clone(), &o);
    let tail = text(2 * give_up_at(to) as usize);
    write_in(&mut c, MIB, &tail[MIB..], MIB);
    assert!(disk.contents().is_empty(), "dense past 8 MiB: still undecided");
    c.write(0, &tail[..MIB]).unwrap();
    c.fsync().unwrap();
    reads_back(&disk, &o, &tail, to);
    assert_eq!(o.stats.snapshot().files_grown, 1);

    // …but not beyond 64 MiB.
    let disk = MemDisk::new();
    let o = roomy();
    let mut c = Container::create(disk.clone(), &o);
    assert_eq!(give_up_dense_at(to), 64 << 20);
    let tail = text(give_up_dense_at(to) as usize + MIB);
    write_in(&mut c, MIB, &tail[MIB..tail.len() - MIB], MIB);
    assert!(
        disk.contents().is_empty(),
        "64 MiB less one covered: still undecided"
    );
    c.write((tail.len() - MIB) as u64, &tail[tail.len() - MIB..])
        .unwrap();
    assert!(!disk.contents().is_empty(), "decided at 64 MiB");
    c.write(0, &tail[..MIB]).unwrap();
    c.fsync().unwrap();
    reads_back(&disk, &o, &tail, 17);
    assert_eq!(o.stats.snapshot().files_grown, 0);
}

#[test]
fn a_file_closed_whole_by_its_writer_takes_one_large_extent_unless_synced_before() {
    let o = opts(true);
    let data = random(300 << 10, 11);
    // Closed whole: one 1 MiB extent (on a mount that packs, a packed file).
    let disk = MemDisk::new();
    let mut c = Container::create(disk.clone(), &o);
    write_in(&mut c, 0, &data, 64 << 10);
    c.writer_closed();
    c.fsync().unwrap();
    reads_back(&disk, &o, &data, MAX_EXTENT_SHIFT);
    // No larger than one of the mount's extents: nothing to gain.
    let disk = MemDisk::new();
    let mut c = Container::create(disk.clone(), &o);
    c.write(0, &data[..E as usize]).unwrap();
    c.writer_closed();
    c.fsync().unwrap();
    reads_back(&disk, &o, &data[..E as usize], 17);
    // Synced while open (a log that grows): keeps extents it can rewrite cheaply.
    let disk = MemDisk::new();
    let mut c = Container::create(disk.clone(), &o);
    c.write(0, &data[..200 << 10]).unwrap();
    c.fsync().unwrap();
    c.write(200 << 10, &data[200 << 10..]).unwrap();
    c.writer_closed();
    c.fsync().unwrap();
    reads_back(&disk, &o, &data, 17);
    // With a gap.
    let disk = MemDisk::new();
    let mut c = Container::create(disk.clone(), &o);
    c.write(E, &data[E as usize..]).unwrap();
    c.writer_closed();
    c.fsync().unwrap();
    let mut want = data.clone();
    want[..E as usize].fill(0);
    reads_back(&disk, &o, &want, 17);
    assert_eq!(o.stats.snapshot().files_grown, 1);
}

#[test]
fn a_file_closed_whole_goes_to_a_pack_as_one_large_extent_and_leaves_it_when_it_grows() {
    let disk = MemDisk::new();
    let dir = MemPackDir::new(disk.crash());
    let o = Options {
        packs: Some(Arc::new(
            Packs::new(Box::new(dir.clone()), true, DEFAULT_CACHE).unwrap(),
        )),
        ..opts(true)
    };
    // An empty file written out first (a record naming no bytes), then written whole.
    let mut c = Container::create(disk.clone(), &o);
    c.fsync().unwrap();
    let data = text(600 << 10);
    write_in(&mut c, 0, &data, 128 << 10);
    c.writer_closed();
    c.fsync().unwrap();
    assert_eq!(o.stats.snapshot().files_grown, 1);
    assert!(
        matches!(record_state(&disk).unwrap(), RecordState::Current { loc, .. } if loc.extent_shift == MAX_EXTENT_SHIFT),
        "packed, as one 1 MiB extent"
    );
    assert!(disk.contents().is_empty(), "no container bytes beside the record");
    drop(c);
    // Reopened, appended past 1 MiB: it leaves its pack as a container of 1 MiB extents.
    let mut c = Container::open(disk.clone(), &o).unwrap();
    assert_eq!(c.read(0, data.len() + 1).unwrap(), data);
    let more = text(900 << 10);
    c.write(data.len() as u64, &more).unwrap();
    c.fsync().unwrap();
    drop(c);
    let mut want = data.clone();
    want.extend_from_slice(&more);
    reads_back(&disk, &o, &want, MAX_EXTENT_SHIFT);
}
