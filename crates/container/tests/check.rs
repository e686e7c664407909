//! `check` (scrub) and `repair` on containers in every state a crash or decay can leave.

use squeezefs_container::check::{check, repair, Fix, Severity};
use squeezefs_container::format::{half_offset, DATA_START, EXTENT_HEADER_LEN};
use squeezefs_container::sim::MemDisk;
use squeezefs_container::{Container, Options, Storage, WriteBack};
use squeezefs_testdata::text_salted;

const E: usize = 1 << 17;

fn flip(disk: &MemDisk, off: u64) {
    let mut b = [0u8; 1];
    disk.read_at(&mut b, off).unwrap();
    disk.write_at(&[b[0] ^ 0x5a], off).unwrap();
}

fn committed(data: &[u8]) -> MemDisk {
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    c.write(0, data).unwrap();
    c.fsync().unwrap();
    disk
}

fn read_all(disk: &MemDisk) -> Vec<u8> {
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    let n = c.size().unwrap() as usize;
    c.read(0, n).unwrap()
}

#[test]
fn a_clean_container_verifies_every_extent() {
    let disk = committed(&text_salted(3 * E + 100, 0));
    let r = check(&disk, None).unwrap();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.extents_verified, 4);
    assert_eq!(r.size, 3 * E as u64 + 100);
    // Plain and empty files are fine too.
    let plain = MemDisk::new();
    plain.write_at(b"not a container", 0).unwrap();
    assert!(check(&plain, None).unwrap().plain);
    assert!(check(&MemDisk::new(), None).unwrap().findings.is_empty());
}

#[test]
fn a_damaged_only_copy_is_reported_with_extent_and_offset() {
    let disk = committed(&text_salted(3 * E, 0));
    flip(&disk, half_offset(17, 1, 0) + EXTENT_HEADER_LEN as u64 + 77);
    let r = check(&disk, None).unwrap();
    assert!(r.damaged());
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Damage);
    assert_eq!(f.extent, Some((1, E as u64)));
    assert!(f.detail.contains("payload checksum"), "{}", f.detail);
    // Nothing to repair: repair does not touch it.
    assert_eq!(repair(&disk, &r).unwrap(), 0);
    assert!(check(&disk, None).unwrap().damaged());
}

#[test]
fn stale_and_torn_copies_are_leftovers_that_repair_removes() {
    let disk = committed(&text_salted(2 * E, 0));
    // A rewrite written back but never committed: both halves of extent 0 hold valid copies.
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    c.write(0, &text_salted(E, 1)).unwrap();
    let _ = c.write_back().unwrap();
    drop(c);
    let before = read_all(&disk);
    let r = check(&disk, None).unwrap();
    assert!(!r.damaged());
    assert_eq!(r.leftovers(), 1);
    assert!(matches!(r.findings[0].fix, Some(Fix::PunchHalf { index: 0, .. })));
    assert!(r.findings[0].detail.contains("older copy"));
    assert_eq!(repair(&disk, &r).unwrap(), 1);
    assert!(check(&disk, None).unwrap().findings.is_empty());
    assert!(read_all(&disk) == before, "repair changed no byte of the file");

    // A torn newer half beside a valid older one: the older is in use; the torn one goes.
    let disk = committed(&text_salted(2 * E, 0));
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    c.write(E as u64, &text_salted(E, 2)).unwrap();
    let _ = c.write_back().unwrap();
    drop(c);
    // Extent 1's new copy went to half B; tear it.
    flip(&disk, half_offset(17, 1, 1) + EXTENT_HEADER_LEN as u64 + 5);
    let before = read_all(&disk);
    let r = check(&disk, None).unwrap();
    assert!(!r.damaged(), "{:?}", r.findings);
    assert!(r.findings.iter().any(|f| f.detail.contains("torn or damaged")));
    repair(&disk, &r).unwrap();
    assert!(check(&disk, None).unwrap().findings.is_empty());
    assert!(read_all(&disk) == before);
    assert!(
        before[E..] == text_salted(2 * E, 0)[E..],
        "the old (valid) copy is what reads"
    );
}

#[test]
fn superblock_copies_and_leftovers_past_the_end() {
    let disk = committed(&text_salted(2 * E, 0));
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    c.set_size(E as u64 + 10).unwrap();
    c.fsync().unwrap();
    drop(c);
    // Junk past the last extent, as an interrupted truncation leaves.
    let end = half_offset(17, 2, 0);
    disk.write_at(&[7u8; 100], end + 5000).unwrap();
    let r = check(&disk, None).unwrap();
    assert!(
        r.findings.iter().any(|f| f.fix == Some(Fix::Truncate(end))),
        "{:?}",
        r.findings
    );
    repair(&disk, &r).unwrap();
    assert_eq!(disk.len().unwrap(), end);
    assert!(check(&disk, None).unwrap().findings.is_empty());
    // Once a superblock is durable the older copy is punched: a rewritten file keeps one.
    let zeros = |slot: u64| {
        let mut b = [0u8; 4096];
        disk.read_at(&mut b, slot * 4096).unwrap();
        b.iter().all(|&x| x == 0)
    };
    assert!(zeros(0) != zeros(1), "exactly one superblock copy after fsync");
    // A newer copy written but not yet synced (as a crash leaves it) keeps the older one.
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    c.write(E as u64 + 10, b"grown").unwrap();
    c.flush().unwrap();
    drop(c);
    assert!(!zeros(0) && !zeros(1));
    // The newer superblock copy damaged: a warning (the older is used), not damage.
    let newest = (0..2u64)
        .max_by_key(|s| {
            let mut g = [0u8; 8];
            disk.read_at(&mut g, s * 4096 + 16).unwrap();
            u64::from_le_bytes(g)
        })
        .unwrap();
    flip(&disk, newest * 4096 + 20);
    let r = check(&disk, None).unwrap();
    assert!(!r.damaged());
    assert_eq!(r.findings[0].severity, Severity::Warning);
    // Both damaged: the file is.
    flip(&disk, (1 - newest) * 4096 + 20);
    let r = check(&disk, None).unwrap();
    assert!(r.damaged());
    assert!(r.findings[0].detail.contains("no valid superblock"));
}

#[test]
fn a_container_never_committed_is_a_leftover_cut_to_empty() {
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    c.write(0, &text_salted(2 * E, 3)).unwrap();
    assert!(
        matches!(c.write_back().unwrap(), WriteBack::Commit(_)),
        "superblock pending"
    );
    drop(c);
    // Its first superblock (size 0, written before its first extent) is all that was
    // committed: the extents are a leftover past it, cut to the empty container.
    let r = check(&disk, None).unwrap();
    assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    assert_eq!(r.findings[0].fix, Some(Fix::Truncate(DATA_START)));
    repair(&disk, &r).unwrap();
    assert_eq!(disk.len().unwrap(), DATA_START);
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert_eq!(c.size().unwrap(), 0);
    assert!(c.read(0, 10).unwrap().is_empty());
}

mod packed {
    use std::sync::Arc;

    use super::*;
    use squeezefs_container::pack::{MemPackDir, Packs, LOCATION_XATTR};
    use squeezefs_container::sim::Crash;

    fn options(dir: &MemPackDir) -> Options {
        Options {
            packs: Some(Arc::new(Packs::new(Box::new(dir.clone()), true, 0).unwrap())),
            ..Options::default()
        }
    }

    /// A container file rewritten small: packed, its record durable, its old container
    /// bytes still there (as a crash before they are cut leaves them).
    fn packed_over_container(data: &[u8]) -> (MemDisk, MemPackDir, Options) {
        let crash = Crash::new();
        let disk = MemDisk::with_crash(&crash);
        let dir = MemPackDir::new(&crash);
        let plain = Options::default();
        let mut c = Container::open(disk.clone(), &plain).unwrap();
        c.write(0, &text_salted(3 * E, 1)).unwrap();
        c.fsync().unwrap();
        drop(c);
        let opts = options(&dir);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        c.set_size(0).unwrap();
        c.write(0, data).unwrap();
        // Flushed, not fsynced: the record is set, the old bytes stay until a sync.
        c.flush().unwrap();
        disk.sync_all().unwrap();
        std::mem::forget(c);
        (disk, dir, opts)
    }

    #[test]
    fn a_packed_file_is_read_from_its_pack_and_its_leftovers_repaired() {
        let data = text_salted(5000, 2);
        let (disk, _dir, opts) = packed_over_container(&data);
        assert!(disk.xattr(LOCATION_XATTR).is_some());
        let packs = opts.packs.as_deref();
        let r = check(&disk, packs).unwrap();
        assert_eq!(r.packed.map(|l| l.len), Some(5000));
        assert_eq!(r.extents_verified, 1);
        assert!(!r.damaged(), "{:?}", r.findings);
        assert!(disk.len().unwrap() > 0);
        assert_eq!(r.leftovers(), 1, "{:?}", r.findings);
        assert_eq!(r.findings[0].fix, Some(Fix::Truncate(0)));
        repair(&disk, &r).unwrap();
        assert_eq!(disk.len().unwrap(), 0);
        let r = check(&disk, packs).unwrap();
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        assert_eq!(c.read(0, 5000).unwrap(), data);
        // Without the packs, a packed file is damage (never a silently empty file).
        assert!(check(&disk, None).unwrap().damaged());
    }

    #[test]
    fn a_record_a_superblock_outranks_is_a_leftover_and_a_damaged_one_is_damage() {
        let (disk, dir, opts) = packed_over_container(&text_salted(5000, 3));
        let record = disk.xattr(LOCATION_XATTR).unwrap();
        // The file grows out of its pack: a superblock newer than the record.
        let big = text_salted(2 * E, 4);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        c.write(0, &big).unwrap();
        c.fsync().unwrap();
        drop(c);
        // Put the old record back, as a crash before its removal leaves it.
        disk.set_xattr(LOCATION_XATTR, &record).unwrap();
        let r = check(&disk, opts.packs.as_deref()).unwrap();
        assert!(r.packed.is_none());
        assert_eq!(r.extents_verified, 2);
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        assert_eq!(r.findings[0].fix, Some(Fix::RemoveRecord));
        repair(&disk, &r).unwrap();
        assert!(disk.xattr(LOCATION_XATTR).is_none());
        assert_eq!(read_all(&disk), big);
        // A damaged record: damage, and the record's pack is unknown.
        let mut bad = record.clone();
        bad[20] ^= 1;
        disk.set_xattr(LOCATION_XATTR, &bad).unwrap();
        let r = check(&disk, opts.packs.as_deref()).unwrap();
        assert!(r.damaged() && r.record_unknown, "{:?}", r.findings);
        // A record from a newer squeezefs: a warning, not checked, pack unknown.
        let mut newer = record;
        newer[0] = 9;
        disk.set_xattr(LOCATION_XATTR, &newer).unwrap();
        let r = check(&disk, opts.packs.as_deref()).unwrap();
        assert!(!r.damaged() && r.record_unknown, "{:?}", r.findings);
        assert_eq!(r.findings[0].severity, Severity::Warning);
        let _ = dir;
    }
}
