//! Read-ahead (`Container::plan_ahead`, `AheadPlan::fetch`, `Container::install`): an extent
//! loaded ahead is served without loading it again, and bytes fetched before any change of
//! the file are never installed after it. The random interleavings are in `model.rs`; these
//! are the sequences a random walk rarely finds, each checked against the bytes expected.

use std::sync::Arc;

use squeezefs_container::sim::MemDisk;
use squeezefs_container::{Container, Fetched, Options, Stats, Storage, WriteBack};

const SHIFT: u8 = 12;
const EXT: u64 = 1 << SHIFT;

fn options() -> Options {
    Options {
        codec: "zstd:1".parse().unwrap(),
        extent_shift: SHIFT,
        stats: Arc::new(Stats::default()),
        ..Default::default()
    }
}

/// Extent `i` of a file whose bytes are `fill` (compressible, different per extent).
fn bytes(fill: u8, extents: u64) -> Vec<u8> {
    (0..extents * EXT)
        .map(|o| fill.wrapping_add((o / EXT) as u8))
        .collect()
}

/// A durable file of six extents, reopened (nothing cached).
fn file(disk: &MemDisk, opts: &Options) -> Container<MemDisk> {
    let mut c = Container::open(disk.clone(), opts).unwrap();
    c.write(0, &bytes(1, 6)).unwrap();
    c.fsync().unwrap();
    drop(c);
    Container::open(disk.clone(), opts).unwrap()
}

/// Plans and fetches extents 2..6 from the disk as it is now.
fn fetch_ahead(c: &Container<MemDisk>, disk: &MemDisk) -> Vec<Fetched> {
    let plans = c.plan_ahead(2 * EXT, 6 * EXT);
    assert_eq!(plans.len(), 4);
    plans
        .iter()
        .map(|p| p.fetch(disk).unwrap().expect("a copy"))
        .collect()
}

fn install_all(c: &mut Container<MemDisk>, f: Vec<Fetched>) -> usize {
    f.into_iter().map(|f| c.install(f)).filter(|&ok| ok).count()
}

/// Writes everything back and makes it durable, like a last close and its group commit.
fn close(c: &mut Container<MemDisk>) {
    match c.write_back().unwrap() {
        WriteBack::Done => {}
        WriteBack::Commit(t) => {
            if let Some(t) = c.commit(t).unwrap() {
                c.settle(t).unwrap();
            }
        }
        WriteBack::Settle(t) => c.settle(t).unwrap(),
    }
}

#[test]
fn extents_installed_ahead_are_read_without_loading_them_again() {
    let disk = MemDisk::new();
    let opts = options();
    let mut c = file(&disk, &opts);
    let f = fetch_ahead(&c, &disk);
    assert_eq!(install_all(&mut c, f), 4);
    let before = opts.stats.snapshot().extents_loaded;
    assert_eq!(
        c.read(2 * EXT, (4 * EXT) as usize).unwrap(),
        bytes(1, 6)[2 * EXT as usize..]
    );
    assert_eq!(
        opts.stats.snapshot().extents_loaded,
        before,
        "installed extents were loaded again"
    );
    // Nothing is planned twice: they are in memory now.
    assert!(c.plan_ahead(2 * EXT, 6 * EXT).is_empty());
    let s = opts.stats.snapshot();
    assert_eq!((s.ahead_installed, s.ahead_discarded), (4, 0));
}

#[test]
fn bytes_fetched_before_a_change_are_not_installed_after_it() {
    // Each change happens between the fetch and the install; the file must read as changed.
    type Change = fn(&mut Container<MemDisk>, &MemDisk, &Options) -> Vec<u8>;
    let changes: [(&str, Change); 5] = [
        (
            "a write, written back and its extent dropped from the cache",
            |c, _, _| {
                c.write(3 * EXT, &vec![9u8; EXT as usize]).unwrap();
                close(c);
                c.drop_cache();
                let mut want = bytes(1, 6);
                want[3 * EXT as usize..4 * EXT as usize].fill(9);
                want
            },
        ),
        ("a truncate and a grow back to the same size", |c, _, _| {
            c.set_size(EXT).unwrap();
            c.set_size(6 * EXT).unwrap();
            close(c);
            c.drop_cache();
            let mut want = bytes(1, 6);
            want[EXT as usize..].fill(0);
            want
        }),
        ("a punched hole", |c, _, _| {
            c.punch_hole(2 * EXT, 2 * EXT).unwrap();
            close(c);
            c.drop_cache();
            let mut want = bytes(1, 6);
            want[2 * EXT as usize..4 * EXT as usize].fill(0);
            want
        }),
        (
            "a close and reopen after a rewrite (another container)",
            |c, disk, opts| {
                c.write(2 * EXT, &vec![7u8; 4 * EXT as usize]).unwrap();
                c.fsync().unwrap();
                *c = Container::open(disk.clone(), opts).unwrap();
                let mut want = bytes(1, 6);
                want[2 * EXT as usize..].fill(7);
                want
            },
        ),
        (
            "a new codec for the file's later writes, then a rewrite",
            |c, _, _| {
                c.set_compression_property(Some("lz4".parse().unwrap())).unwrap();
                c.write(5 * EXT, &vec![3u8; EXT as usize]).unwrap();
                close(c);
                c.drop_cache();
                let mut want = bytes(1, 6);
                want[5 * EXT as usize..].fill(3);
                want
            },
        ),
    ];
    for (what, change) in changes {
        let disk = MemDisk::new();
        let opts = options();
        let mut c = file(&disk, &opts);
        let f = fetch_ahead(&c, &disk);
        let want = change(&mut c, &disk, &opts);
        assert_eq!(install_all(&mut c, f), 0, "{what}: stale bytes installed");
        assert_eq!(opts.stats.snapshot().ahead_discarded, 4, "{what}");
        assert!(
            c.read(0, want.len() + 1).unwrap() == want,
            "{what}: wrong bytes read"
        );
    }
}

#[test]
fn a_damaged_copy_is_left_to_the_reader_and_small_or_plain_files_plan_nothing() {
    let disk = MemDisk::new();
    let opts = options();
    let c = file(&disk, &opts);
    // The payload of extent 2's only copy (half A) damaged.
    let a2 = squeezefs_container::format::half_offset(SHIFT, 2, 0)
        + squeezefs_container::format::EXTENT_HEADER_LEN as u64;
    let mut b = [0u8; 1];
    disk.read_at(&mut b, a2 + 2).unwrap();
    disk.write_at(&[b[0] ^ 0x40], a2 + 2).unwrap();
    let plans = c.plan_ahead(2 * EXT, 3 * EXT);
    assert_eq!(plans.len(), 1);
    assert!(
        plans[0].fetch(&disk).unwrap().is_none(),
        "a damaged copy was fetched"
    );
    assert_eq!(
        opts.stats.snapshot().checksum_errors,
        0,
        "counted by the read-ahead"
    );
    let mut c = c;
    assert!(c.read(2 * EXT, 10).is_err(), "the reader reports the damage");
    assert!(opts.stats.snapshot().checksum_errors > 0);

    // A small (inline) file and a plain one (no container magic): nothing to plan.
    let small = MemDisk::new();
    let mut c = Container::open(small.clone(), &opts).unwrap();
    c.write(0, b"hello").unwrap();
    c.fsync().unwrap();
    let c = Container::open(small, &opts).unwrap();
    assert!(c.plan_ahead(0, 1 << 20).is_empty());
    let plain = MemDisk::new();
    plain.write_at(&bytes(5, 3), 0).unwrap();
    let c = Container::open(plain, &opts).unwrap();
    assert!(c.is_plain());
    assert!(c.plan_ahead(0, 1 << 20).is_empty());
}

#[test]
fn an_extent_the_reader_loaded_first_is_not_installed_again() {
    let disk = MemDisk::new();
    let opts = options();
    let mut c = file(&disk, &opts);
    let f = fetch_ahead(&c, &disk);
    // The READ got to extent 3 before the worker's install, and wrote to extent 4.
    assert_eq!(
        c.read(3 * EXT, 10).unwrap(),
        bytes(1, 6)[3 * EXT as usize..][..10]
    );
    c.write(4 * EXT, b"new").unwrap();
    assert_eq!(install_all(&mut c, f), 0, "the write moved the epoch");
    let mut want = bytes(1, 6);
    want[4 * EXT as usize..][..3].copy_from_slice(b"new");
    assert!(c.read(0, want.len()).unwrap() == want);
    // Without a write, only the extent already loaded is refused.
    let disk = MemDisk::new();
    let mut c = file(&disk, &opts);
    let f = fetch_ahead(&c, &disk);
    c.read(3 * EXT, 10).unwrap();
    assert_eq!(install_all(&mut c, f), 3);
}

/// A write-out that moves a file into a pack changes no epoch; an extent fetched from its
/// backing file before must not come back over the packed file (a later partial write would
/// then be lost when its bytes are loaded from the pack).
#[test]
fn a_file_moved_into_a_pack_meanwhile_gets_nothing_installed() {
    use squeezefs_container::pack::{MemPackDir, Packs, DEFAULT_CACHE};
    let disk = MemDisk::new();
    let dir = MemPackDir::new(disk.crash());
    let opts = Options {
        packs: Some(Arc::new(Packs::new(Box::new(dir), true, DEFAULT_CACHE).unwrap())),
        ..options()
    };
    // Two extents stay a container.
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, &bytes(1, 2)).unwrap();
    c.fsync().unwrap();
    drop(c);
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    // Cut to one extent: the next write-back moves it into a pack.
    c.set_size(EXT).unwrap();
    let plans = c.plan_ahead(0, EXT);
    assert_eq!(plans.len(), 1);
    let fetched: Vec<Fetched> = plans.iter().filter_map(|p| p.fetch(&disk).unwrap()).collect();
    assert_eq!(fetched.len(), 1);
    close(&mut c);
    assert!(c.plan_ahead(0, EXT).is_empty(), "the file was not packed");
    assert_eq!(install_all(&mut c, fetched), 0, "installed over a packed file");
    c.write(20, b"xyz").unwrap();
    close(&mut c);
    let mut want = bytes(1, 1);
    want[20..23].copy_from_slice(b"xyz");
    assert!(c.read(0, want.len() + 1).unwrap() == want);
    let mut c = Container::open(disk, &opts).unwrap();
    assert!(c.read(0, want.len() + 1).unwrap() == want, "after a reopen");
}

/// `cached_extent`: which extent a READ has in memory, ending at the file's size; nothing for
/// an extent not loaded, past the end, or after the cache was dropped.
#[test]
fn cached_extent_names_the_decoded_extent_up_to_the_size() {
    let disk = MemDisk::new();
    let opts = options();
    let mut c = file(&disk, &opts);
    assert_eq!(c.cached_extent(2 * EXT + 5), None, "nothing read yet");
    assert_eq!(
        c.read(2 * EXT + 5, 10).unwrap(),
        bytes(1, 6)[(2 * EXT + 5) as usize..][..10]
    );
    assert_eq!(c.cached_extent(2 * EXT), Some(2 * EXT..3 * EXT));
    assert_eq!(c.cached_extent(3 * EXT), None, "the next extent was not read");
    assert_eq!(c.cached_extent(6 * EXT), None, "past the end");
    // A short last extent ends at the size.
    c.set_size(5 * EXT + 100).unwrap();
    c.read(5 * EXT, 10).unwrap();
    assert_eq!(c.cached_extent(5 * EXT + 99), Some(5 * EXT..5 * EXT + 100));
    assert_eq!(c.cached_extent(5 * EXT + 100), None);
    c.fsync().unwrap();
    c.drop_cache();
    assert_eq!(c.cached_extent(2 * EXT), None, "dropped");
}
