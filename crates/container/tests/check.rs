//! `check` (scrub) and `repair` on containers in every state a crash or decay can leave.

use squeezefs_container::check::{check, repair, Fix, Severity};
use squeezefs_container::format::{half_offset, EXTENT_HEADER_LEN};
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
    let r = check(&disk).unwrap();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.extents_verified, 4);
    assert_eq!(r.size, 3 * E as u64 + 100);
    // Plain and empty files are fine too.
    let plain = MemDisk::new();
    plain.write_at(b"not a container", 0).unwrap();
    assert!(check(&plain).unwrap().plain);
    assert!(check(&MemDisk::new()).unwrap().findings.is_empty());
}

#[test]
fn a_damaged_only_copy_is_reported_with_extent_and_offset() {
    let disk = committed(&text_salted(3 * E, 0));
    flip(&disk, half_offset(17, 1, 0) + EXTENT_HEADER_LEN as u64 + 77);
    let r = check(&disk).unwrap();
    assert!(r.damaged());
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Damage);
    assert_eq!(f.extent, Some((1, E as u64)));
    assert!(f.detail.contains("payload checksum"), "{}", f.detail);
    // Nothing to repair: repair does not touch it.
    assert_eq!(repair(&disk, &r).unwrap(), 0);
    assert!(check(&disk).unwrap().damaged());
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
    let r = check(&disk).unwrap();
    assert!(!r.damaged());
    assert_eq!(r.leftovers(), 1);
    assert!(matches!(r.findings[0].fix, Some(Fix::PunchHalf { index: 0, .. })));
    assert!(r.findings[0].detail.contains("older copy"));
    assert_eq!(repair(&disk, &r).unwrap(), 1);
    assert!(check(&disk).unwrap().findings.is_empty());
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
    let r = check(&disk).unwrap();
    assert!(!r.damaged(), "{:?}", r.findings);
    assert!(r.findings.iter().any(|f| f.detail.contains("torn or damaged")));
    repair(&disk, &r).unwrap();
    assert!(check(&disk).unwrap().findings.is_empty());
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
    let r = check(&disk).unwrap();
    assert!(
        r.findings.iter().any(|f| f.fix == Some(Fix::Truncate(end))),
        "{:?}",
        r.findings
    );
    repair(&disk, &r).unwrap();
    assert_eq!(disk.len().unwrap(), end);
    assert!(check(&disk).unwrap().findings.is_empty());
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
    let r = check(&disk).unwrap();
    assert!(!r.damaged());
    assert_eq!(r.findings[0].severity, Severity::Warning);
    // Both damaged: the file is.
    flip(&disk, (1 - newest) * 4096 + 20);
    let r = check(&disk).unwrap();
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
    let r = check(&disk).unwrap();
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].fix, Some(Fix::Truncate(0)));
    repair(&disk, &r).unwrap();
    assert_eq!(disk.len().unwrap(), 0);
}
