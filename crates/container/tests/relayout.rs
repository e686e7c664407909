//! Background relayout (issue 30, point 5): a cold file's extents made larger in a new
//! extent area (format version 6), with changes between steps, reopens, and crashes or
//! kills at every storage operation.

use proptest::prelude::*;
use squeezefs_codec::{Algorithm, CodecSpec};
use squeezefs_container::check::{check, repair, Severity};
use squeezefs_container::format::{KeptTimes, DATA_START};
use squeezefs_container::sim::{Crash, MemDisk};
use squeezefs_container::usage::{usage, Kind};
use squeezefs_container::{Container, Options, Relayout, RelayoutStep, Storage};
use squeezefs_testdata::{log_lines, random};

const TIMES: KeptTimes = KeptTimes {
    ctime: (1_650_000_000, 42),
    mtime: (1_640_000_000, 7),
};

fn opts() -> Options {
    Options {
        codec: "zstd:1".parse::<CodecSpec>().unwrap(),
        ..Options::default()
    }
}

fn target() -> CodecSpec {
    "zstd:9".parse().unwrap()
}

fn contents(disk: &MemDisk) -> Vec<u8> {
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    let n = c.size().unwrap() as usize;
    c.read(0, n).unwrap()
}

/// A file of 3.5 MiB in 128 KiB extents at zstd:1: text, noise, and a hole.
fn cold_file() -> (MemDisk, Vec<u8>) {
    let disk = MemDisk::new();
    let mut data = log_lines(3 << 20);
    data.extend_from_slice(&random(512 << 10, 5));
    data[1 << 20..(1 << 20) + (300 << 10)].fill(0);
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    (disk, data)
}

/// Runs a whole relayout to 1 MiB extents, `per_step` extents at a time, the container
/// opened afresh before every step when `reopen` (as the pass does for a file nobody has
/// open).
fn relayout(disk: &MemDisk, per_step: u64, reopen: bool) -> squeezefs_container::Result<RelayoutStep> {
    let mut c = Container::open(disk.clone(), &opts())?;
    let Some(mut plan) = c.plan_relayout(target(), 20, TIMES)? else {
        return Ok(RelayoutStep::Changed);
    };
    loop {
        if reopen {
            c = Container::open(disk.clone(), &opts())?;
        }
        match c.relayout_step(&mut plan, per_step)? {
            RelayoutStep::Progress => continue,
            done => return Ok(done),
        }
    }
}

fn no_damage(disk: &MemDisk) -> squeezefs_container::check::Report {
    let r = check(disk, None).unwrap();
    assert!(!r.damaged(), "{:?}", r.findings);
    r
}

#[test]
fn relayout_gives_larger_extents_the_same_bytes_and_frees_the_old_area() {
    let (disk, data) = cold_file();
    let before = usage(&disk, None).unwrap();
    assert_eq!(before.extent_size, 128 << 10);
    let done = relayout(&disk, 1, true).unwrap();
    assert_eq!(
        done,
        RelayoutStep::Done(squeezefs_container::Recompressed {
            extents: 4,
            bytes: data.len() as u64
        })
    );
    assert_eq!(contents(&disk), data);
    let after = usage(&disk, None).unwrap();
    assert_eq!(after.extent_size, 1 << 20);
    // Text at zstd:9, the noise raw; the hole stays a hole (no extent of zeros).
    let kinds: Vec<Kind> = after.parts.keys().copied().collect();
    assert_eq!(
        kinds,
        vec![Kind::Extent(Algorithm::None, 0), Kind::Extent(Algorithm::Zstd, 9)]
    );
    let disk_of = |u: &squeezefs_container::usage::Usage| u.parts.values().map(|p| p.disk).sum::<u64>();
    assert!(
        disk_of(&after) < disk_of(&before),
        "{} -> {}",
        disk_of(&before),
        disk_of(&after)
    );
    // The old area is punched: the first data past the superblocks is the new area's.
    let first = disk.next_data(DATA_START).unwrap().unwrap();
    assert!(first >= DATA_START + (1 << 20), "old area left at {first}");
    // Version 6, keeping the times; `check` finds nothing.
    let mut head = [0u8; 10];
    disk.read_at(&mut head, 0).unwrap();
    let v0 = u16::from_le_bytes([head[8], head[9]]);
    disk.read_at(&mut head, 4096).unwrap();
    let v1 = u16::from_le_bytes([head[8], head[9]]);
    assert!(v0 == 6 || v1 == 6, "versions {v0} {v1}");
    let c = Container::open(disk.clone(), &opts()).unwrap();
    assert_eq!(c.kept_times(), Some(TIMES.into()));
    assert_eq!(c.relayout_shift(20), None, "done: not a candidate again");
    let r = no_damage(&disk);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    // 28 extents of 128 KiB, each with two slots of 132 KiB: the old slots reach 7.2 MiB
    // past the superblocks, so the new area starts 8 MiB past them.
    assert_eq!(r.area, 8);
}

#[test]
fn the_relaid_file_is_written_read_and_truncated_like_any_other() {
    let (disk, mut data) = cold_file();
    relayout(&disk, 4, false).unwrap();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    // A write drops the kept times; it lands in a 1 MiB extent of the new area.
    let patch = vec![7u8; 5000];
    c.write(1_500_000, &patch).unwrap();
    data[1_500_000..1_505_000].copy_from_slice(&patch);
    // Grown past the end, then cut inside an extent.
    c.write(5 << 20, b"tail").unwrap();
    data.resize(5 << 20, 0);
    data.extend_from_slice(b"tail");
    c.fsync().unwrap();
    assert_eq!(c.kept_times(), None);
    c.set_size(2_000_000).unwrap();
    data.truncate(2_000_000);
    c.fsync().unwrap();
    drop(c);
    assert_eq!(contents(&disk), data);
    let r = no_damage(&disk);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    // Cut to one extent: written back, the file goes inline? No: 2 MB stays in extents;
    // cut to a few bytes it becomes inline and keeps its area (still version 6).
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    c.set_size(100).unwrap();
    c.fsync().unwrap();
    drop(c);
    assert_eq!(contents(&disk), data[..100].to_vec());
    no_damage(&disk);
}

#[test]
fn a_change_between_steps_drops_the_plan_and_what_it_wrote() {
    for change in 0..4 {
        let (disk, mut data) = cold_file();
        let mut c = Container::open(disk.clone(), &opts()).unwrap();
        let mut plan: Relayout = c.plan_relayout(target(), 20, TIMES).unwrap().unwrap();
        assert_eq!(c.relayout_step(&mut plan, 2).unwrap(), RelayoutStep::Progress);
        drop(c);
        let mut c = Container::open(disk.clone(), &opts()).unwrap();
        match change {
            // In place: same size, and the superblock would have stayed as it was but for
            // the kept times the change drops.
            0 => {
                c.write(10, b"changed").unwrap();
                data[10..17].copy_from_slice(b"changed");
            }
            // Grown into the area the plan writes.
            1 => {
                c.write(6 << 20, b"far").unwrap();
                data.resize(6 << 20, 0);
                data.extend_from_slice(b"far");
            }
            2 => {
                c.set_size(1 << 20).unwrap();
                data.truncate(1 << 20);
            }
            // Only in memory, not written back yet.
            _ => {
                c.write(0, b"dirty").unwrap();
                data[..5].copy_from_slice(b"dirty");
            }
        }
        if change < 3 {
            c.fsync().unwrap();
        }
        assert_eq!(
            c.relayout_step(&mut plan, 8).unwrap(),
            RelayoutStep::Changed,
            "change {change}"
        );
        c.fsync().unwrap();
        drop(c);
        assert_eq!(contents(&disk), data, "change {change}");
        let r = no_damage(&disk);
        assert!(r.findings.is_empty(), "change {change}: {:?}", r.findings);
        assert_eq!(usage(&disk, None).unwrap().extent_size, 128 << 10);
    }
}

#[test]
fn what_is_left_alone() {
    // One extent at the new size would be all of it: at most 256 KiB extents for 300 KiB.
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    c.write(0, &log_lines(300 << 10)).unwrap();
    c.fsync().unwrap();
    assert_eq!(c.relayout_shift(20), Some(18));
    // 200 KiB: two 128 KiB extents already.
    c.set_size(200 << 10).unwrap();
    c.fsync().unwrap();
    assert_eq!(c.relayout_shift(20), None);
    // An extent size of the file's own.
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    c.set_extent_size_property(Some(14)).unwrap();
    c.write(0, &log_lines(1 << 20)).unwrap();
    c.fsync().unwrap();
    assert_eq!(c.relayout_shift(20), None);
    // Bytes not written out yet.
    let (disk, _) = cold_file();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    assert_eq!(c.relayout_shift(20), Some(20));
    c.write(0, b"x").unwrap();
    assert_eq!(c.relayout_shift(20), None);
    assert!(c.plan_relayout(target(), 20, TIMES).unwrap().is_none());
}

/// A crash at every storage operation of a relayout: the file reads the same bytes, has no
/// damage, and `check --repair` leaves nothing behind; once one finishes, the file is
/// relaid.
#[test]
fn a_crash_anywhere_in_a_relayout_leaves_the_same_bytes() {
    let (disk, data) = cold_file();
    let mut seen = [false; 2];
    for n in 0..200u64 {
        for killed in [false, true] {
            let trial = disk.reboot(|| 0);
            trial.crash_after(n);
            let finished = relayout(&trial, 1, n % 2 == 0).is_ok() && !trial.has_crashed();
            let after = if killed {
                trial.reboot_killed_into(&Crash::new(), || n)
            } else {
                trial.reboot_seeded(n)
            };
            assert_eq!(contents(&after), data, "crash after {n} (killed: {killed})");
            let r = no_damage(&after);
            if r.leftovers() > 0 {
                repair(&after, &r).unwrap();
                // (A torn superblock copy stays a warning until the next one is written.)
                let r = no_damage(&after);
                assert!(
                    r.findings.iter().all(|f| f.severity == Severity::Warning),
                    "after repair: {:?}",
                    r.findings
                );
                assert_eq!(contents(&after), data);
            }
            let relaid = usage(&after, None).unwrap().extent_size == 1 << 20;
            seen[relaid as usize] = true;
            // A crash once the new superblock is durable leaves the old area: the pass
            // punches it on its next visit.
            if relaid {
                let mut c = Container::open(after.clone(), &opts()).unwrap();
                // (Punched already by the repair above, if `check` found it.)
                c.punch_old_area(None).unwrap();
                assert!(!c.old_area_left().unwrap());
            }
            if finished {
                assert!(relaid);
                assert!(seen[0] && seen[1]);
                return;
            }
        }
    }
    panic!("the relayout never finished within 200 operations");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Random sizes, extent sizes and step lengths, a write between two steps or not:
    /// the bytes are always the model's.
    #[test]
    fn relayout_keeps_any_file(
        len in 1usize..(3 << 20),
        shift in 12u8..18,
        want in 13u8..=20,
        per_step in 1u64..5,
        write_at in proptest::option::of(0usize..(3 << 20)),
        seed in any::<u64>(),
    ) {
        let disk = MemDisk::new();
        let o = Options { extent_shift: shift, ..opts() };
        let mut data = log_lines(len);
        let noise = random(len / 3, seed);
        data[len / 3..len / 3 + noise.len()].copy_from_slice(&noise);
        let mut c = Container::open(disk.clone(), &o).unwrap();
        c.write(0, &data).unwrap();
        c.fsync().unwrap();
        let plan = c.plan_relayout(target(), want, TIMES).unwrap();
        let expect = {
            let size = len as u64;
            let fits = 63 - (size - 1).leading_zeros() as u8;
            let s = want.min(fits);
            (len > 1 && s > shift && size > 1 << s).then_some(s)
        };
        prop_assert_eq!(plan.map(|p| p.shift()), expect);
        if let Some(mut plan) = plan {
            let mut first = true;
            loop {
                let step = c.relayout_step(&mut plan, per_step).unwrap();
                if step != RelayoutStep::Progress { break; }
                if let (true, Some(at)) = (first, write_at) {
                    let at = at.min(len - 1);
                    c.write(at as u64, b"w").unwrap();
                    data[at] = b'w';
                    c.flush().unwrap();
                }
                first = false;
                c = Container::open(disk.clone(), &o).unwrap();
            }
        }
        c.fsync().unwrap();
        drop(c);
        let mut c = Container::open(disk.clone(), &o).unwrap();
        prop_assert_eq!(c.read(0, len + 1).unwrap(), data);
        let r = check(&disk, None).unwrap();
        prop_assert!(r.findings.is_empty(), "{:?}", r.findings);
    }
}

/// Noise first (stored raw, so the new extents are long and cover offsets where the old
/// layout's last slots would be), then text.
fn noisy_cold_file() -> (MemDisk, Vec<u8>) {
    let disk = MemDisk::new();
    let mut data = random(3 << 20, 9);
    data.extend_from_slice(&log_lines(512 << 10));
    data[1 << 20..(1 << 20) + (300 << 10)].fill(0);
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    (disk, data)
}

/// The daemon keeps a closed file's container, and the pass's steps use it; a user then
/// grows the file through that same container (found by review: the extents a step wrote
/// past the end were read as the grown file's, and made its damage durable).
#[test]
fn a_file_grown_between_steps_in_the_same_container_reads_zeros_there() {
    for how in 0..2 {
        let (disk, mut data) = noisy_cold_file();
        let mut c = Container::open(disk.clone(), &opts()).unwrap();
        let mut plan = c.plan_relayout(target(), 20, TIMES).unwrap().unwrap();
        assert_eq!(c.relayout_step(&mut plan, 2).unwrap(), RelayoutStep::Progress);
        if how == 0 {
            c.set_size(12 << 20).unwrap();
            data.resize(12 << 20, 0);
        } else {
            c.write(12 << 20, b"far").unwrap();
            data.resize(12 << 20, 0);
            data.extend_from_slice(b"far");
        }
        assert_eq!(c.read(0, data.len()).unwrap(), data, "how {how}");
        c.fsync().unwrap();
        assert_eq!(c.relayout_step(&mut plan, 8).unwrap(), RelayoutStep::Changed);
        drop(c);
        let r = no_damage(&disk);
        assert!(r.findings.is_empty(), "how {how}: {:?}", r.findings);
        assert_eq!(contents(&disk), data, "how {how}");
    }
}

/// A kill between the superblock naming the new area and the punch of the old one leaves
/// both superblock copies valid; whatever punches the old area later (the pass, `check
/// --repair`) must punch the older copy first, so that decay of the newer copy makes the
/// file unreadable rather than zeros (found by review).
#[test]
fn the_older_superblock_copy_never_outlives_the_old_area() {
    use squeezefs_container::format::{sb_offset, Superblock};
    let copies = |d: &MemDisk| {
        [0u8, 1].map(|s| {
            let mut b = vec![0u8; 4096];
            d.read_at(&mut b, sb_offset(s)).unwrap();
            Superblock::decode(&b).ok()
        })
    };
    let (disk, data) = noisy_cold_file();
    for n in 0..400u64 {
        let trial = disk.reboot(|| 0);
        trial.crash_after(n);
        let _ = relayout(&trial, 8, false);
        assert!(
            trial.has_crashed(),
            "no kill point left both copies and the old area"
        );
        let after = trial.reboot_killed_into(&Crash::new(), || n);
        let both = copies(&after);
        let Some(newer) = both.iter().flatten().max_by_key(|s| s.generation).cloned() else {
            continue;
        };
        let left = Container::open(after.clone(), &opts())
            .unwrap()
            .old_area_left()
            .unwrap();
        if !(both.iter().all(|c| c.is_some()) && newer.area != 0 && left) {
            continue;
        }
        let slot = both.iter().position(|c| c.as_ref() == Some(&newer)).unwrap() as u64;
        for via_check in [false, true] {
            let d = after.reboot(|| 1);
            if via_check {
                let r = check(&d, None).unwrap();
                assert_eq!(r.leftovers(), 2, "{:?}", r.findings);
                repair(&d, &r).unwrap();
            } else {
                assert!(Container::open(d.clone(), &opts())
                    .unwrap()
                    .punch_old_area(None)
                    .unwrap());
            }
            assert_eq!(contents(&d), data);
            assert!(check(&d, None).unwrap().findings.is_empty());
            // Decay of the newer copy: one bit of its header.
            let mut b = [0u8; 1];
            d.read_at(&mut b, slot * 4096 + 20).unwrap();
            b[0] ^= 1;
            d.write_at(&b, slot * 4096 + 20).unwrap();
            let got = Container::open(d.clone(), &opts()).and_then(|mut c| c.read(0, data.len()));
            assert!(
                got.is_err(),
                "kill after {n}, via check {via_check}: read {:?} bytes",
                got.map(|b| b.len())
            );
            assert!(check(&d, None).unwrap().damaged());
        }
        return;
    }
    panic!("no kill point between the superblock and the punch");
}

/// A damaged extent: a header that does not validate stops the relayout in its first
/// steps, before anything is written (`Damaged`: the pass then recompresses the file's
/// extents where they are, leaving that one); a payload that does not match makes a step
/// fail and take back what it wrote (found by review: every walk redid the work).
#[test]
fn a_damaged_extent_keeps_a_file_out_or_stops_its_relayout_cleanly() {
    let (disk, _) = noisy_cold_file();
    let mut b = [0u8; 1];
    let at = squeezefs_container::format::half_offset(17, 26, 0) + 9;
    disk.read_at(&mut b, at).unwrap();
    disk.write_at(&[b[0] ^ 0x40], at).unwrap();
    let len = disk.len().unwrap();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    assert_eq!(c.relayout_shift(20), Some(20));
    let mut plan = c.plan_relayout(target(), 20, TIMES).unwrap().unwrap();
    assert_eq!(c.relayout_step(&mut plan, 1).unwrap(), RelayoutStep::Damaged);
    assert_eq!(disk.len().unwrap(), len, "nothing written");
    // The payload of another extent damaged instead.
    let (disk, _) = noisy_cold_file();
    let at = squeezefs_container::format::half_offset(17, 26, 0) + 48 + 100;
    disk.read_at(&mut b, at).unwrap();
    disk.write_at(&[b[0] ^ 0x40], at).unwrap();
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    let mut plan = c.plan_relayout(target(), 20, TIMES).unwrap().unwrap();
    let r = loop {
        match c.relayout_step(&mut plan, 1) {
            Ok(RelayoutStep::Progress) => {}
            other => break other,
        }
    };
    assert!(matches!(&r, Err(e) if e.is_corruption()), "{r:?}");
    drop(c);
    let r = check(&disk, None).unwrap();
    assert_eq!(r.leftovers(), 0, "what the step wrote is cut: {:?}", r.findings);
    assert_eq!(usage(&disk, None).unwrap().extent_size, 128 << 10);
}

/// A disk whose `n`th write from now fails once with ENOSPC (a full disk), and whose
/// later operations succeed.
#[derive(Clone)]
struct FullOnce {
    disk: MemDisk,
    writes_left: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Storage for FullOnce {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        self.disk.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        if self.writes_left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.disk.write_at(buf, off)
    }
    fn punch(&self, off: u64, len: u64) -> std::io::Result<()> {
        self.disk.punch(off, len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.disk.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.disk.set_len(len)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.disk.len()
    }
    fn next_data(&self, off: u64) -> std::io::Result<Option<u64>> {
        self.disk.next_data(off)
    }
}

/// A full disk at the superblock write that switches layouts (found by review: the
/// container went on believing the new layout current while the disk's superblock named
/// the old one, and a later punch of the "old" area punched the file's only extents).
/// Now the container says it must be opened again, refuses to punch, and a container
/// opened again reads the file and finishes or redoes the relayout.
#[test]
fn a_full_disk_at_the_switch_loses_nothing() {
    let (disk, data) = cold_file();
    let st = FullOnce {
        disk: disk.clone(),
        writes_left: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX)),
    };
    let mut c = Container::open(st.clone(), &opts()).unwrap();
    let mut plan = c.plan_relayout(target(), 20, TIMES).unwrap().unwrap();
    // (The first step checks the old extents; each later one writes one new extent.)
    while plan.remaining() > 1 << 20 {
        assert_eq!(c.relayout_step(&mut plan, 1).unwrap(), RelayoutStep::Progress);
    }
    // The last step: its extent is written, then the superblock write fails.
    st.writes_left.store(1, std::sync::atomic::Ordering::SeqCst);
    let r = c.relayout_step(&mut plan, 1);
    assert!(r.is_err(), "{r:?}");
    assert!(c.needs_reopen());
    assert_eq!(c.relayout_shift(20), None);
    assert!(
        !c.punch_old_area(None).unwrap(),
        "no punch from a container apart from its disk"
    );
    drop(c);
    assert_eq!(contents(&disk), data);
    let r = no_damage(&disk);
    if r.leftovers() > 0 {
        repair(&disk, &r).unwrap();
    }
    assert_eq!(contents(&disk), data);
    // Opened again: the pass relays it out (again) or punches what is left.
    let mut c = Container::open(disk.clone(), &opts()).unwrap();
    if c.relayout_shift(20).is_some() {
        drop(c);
        assert!(matches!(relayout(&disk, 2, true).unwrap(), RelayoutStep::Done(_)));
    } else {
        c.punch_old_area(None).unwrap();
    }
    assert_eq!(contents(&disk), data);
    assert!(no_damage(&disk).findings.is_empty());
}

/// The pass punching an old area a crash left keeps the file's times first, as for any of
/// its rewrites (found by review: the punch moved the times `stat` shows).
#[test]
fn punching_a_left_old_area_keeps_the_times() {
    let (disk, data) = cold_file();
    for n in 0..400u64 {
        let trial = disk.reboot(|| 0);
        trial.crash_after(n);
        let _ = relayout(&trial, 8, false);
        let after = trial.reboot_killed_into(&Crash::new(), || n);
        let mut c = Container::open(after.clone(), &opts()).unwrap();
        if !c.old_area_left().unwrap() {
            continue;
        }
        // A change of the file after the crash dropped the kept times.
        c.forget_kept_times().unwrap();
        c.fsync().unwrap();
        assert_eq!(c.kept_times(), None);
        let later = KeptTimes {
            ctime: (1_700_000_000, 1),
            mtime: (1_690_000_000, 2),
        };
        assert!(c.punch_old_area(Some(later)).unwrap());
        assert_eq!(c.kept_times(), Some(later.into()));
        drop(c);
        assert_eq!(
            Container::open(after.clone(), &opts()).unwrap().kept_times(),
            Some(later.into())
        );
        assert_eq!(contents(&after), data);
        return;
    }
    panic!("no kill point left the old area");
}
