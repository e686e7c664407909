//! `audit` and `reclaim` on simulated disks: garbage is measured, damage and leftovers are
//! told apart, and a reclaim crashed at every step loses no file.

use std::collections::{BTreeMap, BTreeSet};

use super::audit::{check_pack, repair_pack, LiveMap, PackFix, PackIssue, GARBAGE_MAX};
use super::reclaim::{reclaim, victims, LiveFile};
use super::record::read_record;
use super::tests::{loc, text, zstd1};
use super::*;
use crate::sim::{Crash, MemDisk};

/// Packs `bytes` as one file on a new disk with a durable record.
fn pack_file(packs: &Packs, crash: &Crash, bytes: &[u8]) -> MemDisk {
    let d = MemDisk::with_crash(crash);
    set_file(packs, &d, bytes);
    d
}

fn set_file(packs: &Packs, d: &MemDisk, bytes: &[u8]) {
    let s = packs.append(zstd1(), 17, bytes).unwrap();
    let p = packs.durable(&s).unwrap();
    d.set_xattr(LOCATION_XATTR, &loc(&s, p).encode()).unwrap();
    d.sync_all().unwrap();
}

struct World {
    dir: MemPackDir,
    /// Live files: disk and content.
    files: Vec<(MemDisk, Vec<u8>)>,
}

/// 60 files in two packs' worth of blocks, then half deleted and some rewritten: garbage.
fn world(crash: &Crash) -> World {
    let dir = MemPackDir::new(crash);
    let packs = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
    let mut files: Vec<(MemDisk, Vec<u8>)> = (0..60)
        .map(|i| {
            let b = text(i, 3000 + (i as usize * 997) % 9000);
            (pack_file(&packs, crash, &b), b)
        })
        .collect();
    packs.sync().unwrap();
    // Deleted: their records go with their inodes.
    let mut i = 0;
    files.retain(|_| {
        i += 1;
        i % 2 == 0
    });
    // Rewritten: a new record names new bytes; the old ones are garbage.
    for (n, (d, b)) in files.iter_mut().enumerate().take(5) {
        *b = text(1000 + n as u64, 4000);
        set_file(&packs, d, b);
    }
    packs.sync().unwrap();
    World { dir, files }
}

fn audit(packs: &Packs, files: &[(MemDisk, Vec<u8>)]) -> BTreeMap<u32, super::audit::PackReport> {
    let mut live = LiveMap::default();
    for (d, _) in files {
        live.add(&read_record(d).unwrap().unwrap());
    }
    packs
        .dir()
        .list()
        .unwrap()
        .into_iter()
        .map(|id| (id, check_pack(packs, id, &live, true).unwrap()))
        .collect()
}

fn live_files(files: &[(MemDisk, Vec<u8>)]) -> Vec<LiveFile> {
    files
        .iter()
        .enumerate()
        .map(|(i, (d, _))| LiveFile {
            name: i.to_string(),
            loc: read_record(d).unwrap().unwrap(),
            id: d.identity().unwrap(),
            target: None,
        })
        .collect()
}

/// Reclaims `v` with the files' disks, an `fsync` per file for their records.
fn run_reclaim(
    packs: &Packs,
    v: &BTreeSet<u32>,
    files: &[(MemDisk, Vec<u8>)],
) -> crate::Result<super::reclaim::Reclaimed> {
    reclaim(
        packs,
        v,
        &live_files(files),
        &mut super::reclaim::Garbage,
        |f| Ok(files[f.name.parse::<usize>().unwrap()].0.clone()),
        |ds: &[MemDisk]| ds.iter().try_for_each(|d| Ok(d.sync_all()?)),
        super::reclaim::Settle::default,
    )
}

fn read_all(packs: &Packs, files: &[(MemDisk, Vec<u8>)], why: &str) {
    for (i, (d, b)) in files.iter().enumerate() {
        let loc = read_record(d).unwrap().expect("record");
        assert_eq!(&packs.read(&loc).unwrap(), b, "file {i} {why}");
    }
}

/// The world after a crash at step `n` (what reached its disks, torn as `n` picks), its
/// packs opened again; every file reads back as it was.
fn reboot(w: &World, n: u64) -> (Packs, Vec<(MemDisk, Vec<u8>)>) {
    let after = Crash::new();
    let mut rand = rand_from(n);
    let dir = w.dir.reboot_into(&after, &mut rand);
    let disks: Vec<(MemDisk, Vec<u8>)> = w
        .files
        .iter()
        .map(|(d, b)| (d.reboot_into(&after, &mut rand), b.clone()))
        .collect();
    let packs = Packs::new(Box::new(dir), true, 0).unwrap();
    read_all(&packs, &disks, &format!("after a crash at step {n}"));
    (packs, disks)
}

fn rand_from(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    }
}

#[test]
fn garbage_is_measured_and_reclaim_brings_it_under_the_limit() {
    let w = world(&Crash::new());
    let packs = Packs::new(Box::new(w.dir.clone()), true, 0).unwrap();
    let before = audit(&packs, &w.files);
    let total_garbage: u64 = before.values().map(|r| r.garbage).sum();
    let total_live: u64 = before.values().map(|r| r.live_stored).sum();
    assert!(
        total_garbage > total_live / 2,
        "half the files deleted: {total_garbage} garbage, {total_live} live"
    );
    for r in before.values() {
        assert!(r.issues.is_empty(), "{:?}", r.issues);
        assert_eq!(r.blocks, r.blocks_verified);
        assert_eq!(r.live_stored + r.garbage + PACK_HEADER_LEN as u64, r.len);
    }
    let v = victims(&before, GARBAGE_MAX);
    assert!(!v.is_empty());
    let done = run_reclaim(&packs, &v, &w.files).unwrap();
    assert!(done.left.is_empty());
    assert_eq!(done.packs_removed, v.iter().copied().collect::<Vec<_>>());
    assert!(done.bytes_freed > 0);
    read_all(&packs, &w.files, "after reclaim");
    let after = audit(&packs, &w.files);
    for r in after.values() {
        assert!(
            r.garbage_fraction() <= GARBAGE_MAX || !v.is_empty() && r.id > *v.last().unwrap(),
            "pack {} still {:.0} % garbage",
            r.id,
            r.garbage_fraction() * 100.0
        );
    }
    let disk_before: u64 = before.values().map(|r| r.len).sum();
    let disk_after: u64 = after.values().map(|r| r.len).sum();
    assert!(disk_after * 3 < disk_before * 2, "{disk_before} → {disk_after}");
}

#[test]
fn a_reclaim_crashed_at_any_step_loses_no_file_and_can_be_run_again() {
    let mut n = 0;
    loop {
        let crash = Crash::new();
        let w = world(&crash);
        let packs = Packs::new(Box::new(w.dir.clone()), true, 0).unwrap();
        packs.set_keep_ctime(true);
        let shown: Vec<u64> = w.files.iter().map(|(d, _)| shown_ctime(d)).collect();
        let v = victims(&audit(&packs, &w.files), GARBAGE_MAX);
        crash.after(n);
        let r = run_reclaim(&packs, &v, &w.files);
        let crashed = crash.has_crashed();
        assert!(crashed || r.is_ok(), "{r:?}");
        let (packs, disks) = reboot(&w, n);
        packs.set_keep_ctime(true);
        // A record that keeps a change time keeps the one the file showed.
        for (i, (d, _)) in disks.iter().enumerate() {
            if let Some(t) = read_record(d).unwrap().unwrap().kept_ctime {
                assert_eq!(t, shown[i], "crash at {n}: file {i}");
            }
        }
        let shown: Vec<u64> = disks.iter().map(|(d, _)| shown_ctime(d)).collect();
        // Reclaim again (what `check --repair` does after the crash): nothing is lost and
        // garbage ends under the limit.
        let reports = audit(&packs, &disks);
        for r in reports.values() {
            for i in &r.issues {
                assert!(!matches!(i, PackIssue::Damage(_)), "crash at {n}: {i:?}");
            }
            repair_pack(&packs, r).unwrap();
        }
        let reports = audit(&packs, &disks);
        let v = victims(&reports, GARBAGE_MAX);
        run_reclaim(&packs, &v, &disks).unwrap();
        read_all(
            &packs,
            &disks,
            &format!("after a crash at step {n} and a second reclaim"),
        );
        for (i, (d, _)) in disks.iter().enumerate() {
            assert_eq!(
                shown_ctime(d),
                shown[i],
                "crash at {n}: file {i} after a second reclaim"
            );
        }
        let newest = packs.dir().list().unwrap().last().copied();
        for r in audit(&packs, &disks).values() {
            assert!(r.issues.is_empty(), "crash at {n}: {:?}", r.issues);
            if Some(r.id) != newest {
                assert!(r.garbage_fraction() <= GARBAGE_MAX, "crash at {n}: pack {}", r.id);
            }
        }
        if !crashed {
            assert!(n > 20, "the reclaim took only {n} steps");
            break;
        }
        n += 1;
    }
}

#[test]
fn check_tells_damage_from_leftovers() {
    let crash = Crash::new();
    let w = world(&crash);
    let packs = Packs::new(Box::new(w.dir.clone()), true, 0).unwrap();
    // A torn block at the end of the last pack: a leftover, cut by repair.
    let last = *packs.dir().list().unwrap().last().unwrap();
    let disk = w.dir.disk(last).unwrap();
    let end = disk.contents().len() as u64;
    disk.write_at(b"SQZB torn", end).unwrap();
    let r = audit(&packs, &w.files)[&last].clone();
    assert!(
        r.issues
            .iter()
            .any(|i| matches!(i, PackIssue::Leftover(PackFix::Truncate(x), _) if *x == end)),
        "{:?}",
        r.issues
    );
    assert!(!r.damaged());
    repair_pack(&packs, &r).unwrap();
    assert_eq!(disk.contents().len() as u64, end);
    // A flipped byte in a block live files use: damage.
    let loc = read_record(&w.files[0].0).unwrap().unwrap();
    let d = w.dir.disk(loc.pack).unwrap();
    let at = loc.block + BLOCK_HEADER_LEN as u64 + 3;
    let orig = d.contents()[at as usize];
    d.write_at(&[orig ^ 1], at).unwrap();
    let r = audit(&packs, &w.files)[&loc.pack].clone();
    assert!(r.damaged(), "{:?}", r.issues);
    assert!(victims(&BTreeMap::from([(r.id, r.clone())]), 0.0).is_empty());
    d.write_at(&[orig], at).unwrap();
    // A pack no record points into: an orphan, removed by repair — unless a record could
    // not be read.
    let mut live = LiveMap::default();
    for (d, _) in &w.files {
        let l = read_record(d).unwrap().unwrap();
        if l.pack != 1 {
            live.add(&l);
        }
    }
    let r = check_pack(&packs, 1, &live, true).unwrap();
    assert_eq!(r.issues.len(), 1);
    assert!(matches!(r.issues[0], PackIssue::Leftover(PackFix::Remove, _)));
    live.mark_incomplete();
    assert!(check_pack(&packs, 1, &live, true).unwrap().issues.is_empty());
    let ids: BTreeSet<u32> = packs.dir().list().unwrap().into_iter().collect();
    assert!(ids.contains(&1));
}

/// Reclaim beside a mount: a container that read its record before the move reads the
/// moved bytes once the old pack is gone; a record a container replaced meanwhile is not
/// overwritten; and a `settle` that aborts removes no pack.
#[test]
fn reclaim_beside_open_containers_and_an_aborting_settle() {
    use super::reclaim::Settle;
    use std::sync::Arc;
    let crash = Crash::new();
    let w = world(&crash);
    let packs = Arc::new(Packs::new(Box::new(w.dir.clone()), true, 0).unwrap());
    let opts = crate::Options {
        codec: zstd1(),
        extent_shift: 17,
        packs: Some(packs.clone()),
        ..Default::default()
    };
    let v = victims(&audit(&packs, &w.files), GARBAGE_MAX);
    assert!(!v.is_empty());
    let live = live_files(&w.files);
    let open = |f: &LiveFile| Ok(w.files[f.name.parse::<usize>().unwrap()].0.clone());
    let sync = |ds: &[MemDisk]| ds.iter().try_for_each(|d| Ok(d.sync_all()?));

    // Aborted: the files are moved, every pack stays, every file reads back.
    let before = packs.dir().list().unwrap();
    let r = reclaim(
        &packs,
        &v,
        &live,
        &mut super::reclaim::Garbage,
        open,
        sync,
        || Settle::Abort("a rename".into()),
    )
    .unwrap();
    assert!(r.files_moved > 0 && r.packs_removed.is_empty() && r.aborted.is_some());
    for id in &before {
        assert!(
            packs.dir().list().unwrap().contains(id),
            "pack {id} removed by an aborted round"
        );
    }
    read_all(&packs, &w.files, "after an aborted reclaim");

    // Containers opened now hold the records the aborted round set; file 0 is rewritten
    // by its container (a new record in the current pack) before the next round.
    let old0 = live_files(&w.files)[0].clone();
    let mut opened: Vec<crate::Container<MemDisk>> = w
        .files
        .iter()
        .map(|(d, _)| crate::Container::open(d.clone(), &opts).unwrap())
        .collect();
    opened[0].write(0, b"rewritten").unwrap();
    opened[0].fsync().unwrap();
    let mut want: Vec<Vec<u8>> = w.files.iter().map(|(_, b)| b.clone()).collect();
    want[0][..9].copy_from_slice(b"rewritten");
    // The next round sees the old record of file 0 (as a walk before the rewrite would).
    let mut stale = live_files(&w.files);
    assert!(stale[0].loc != old0.loc);
    stale[0] = old0;
    let all: BTreeSet<u32> = packs.reclaimable().unwrap();
    let v: BTreeSet<u32> = v.union(&all).copied().collect();
    let r = reclaim(
        &packs,
        &v,
        &stale,
        &mut super::reclaim::Garbage,
        open,
        sync,
        Settle::default,
    )
    .unwrap();
    assert!(!r.packs_removed.is_empty(), "{r:?}");
    for id in &r.packs_removed {
        assert!(!packs.dir().list().unwrap().contains(id));
    }
    // Every container, opened before the move, reads its own bytes.
    for (i, c) in opened.iter_mut().enumerate() {
        let got = c.read(0, want[i].len() + 1).unwrap();
        assert!(
            got == want[i],
            "file {i} after its pack was reclaimed under its container"
        );
    }
    let c0 = crate::Container::open(w.files[0].0.clone(), &opts);
    assert!(c0.unwrap().read(0, 9).unwrap() == b"rewritten");
}

/// file X has two names; the walk lists it once, by name "a". While the round runs,
/// "a" is replaced (rm a + create, or an editor's rename over it) by a new file Y, whose
/// record names no victim (or which has none yet). X still lives under its other name,
/// its record naming the victim: its pack must stay.
#[test]
fn a_name_replaced_during_the_round_does_not_free_the_other_links_pack() {
    let crash = Crash::new();
    let dir = MemPackDir::new(&crash);
    let packs = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
    let x_bytes = text(7, 5000);
    let x = pack_file(&packs, &crash, &x_bytes);
    packs.sync().unwrap();
    let victim = read_record(&x).unwrap().unwrap().pack;
    // The walk saw X as "a" (its other link "b" deduplicated by inode).
    let files = vec![LiveFile {
        name: "a".into(),
        loc: read_record(&x).unwrap().unwrap(),
        id: x.identity().unwrap(),
        target: None,
    }];
    // ... and by the time reclaim opens "a", that name is a new, not yet packed file.
    let y = MemDisk::with_crash(&crash);
    let r = reclaim(
        &packs,
        &BTreeSet::from([victim]),
        &files,
        &mut super::reclaim::Garbage,
        |_f| Ok(y.clone()),
        |ds: &[MemDisk]| ds.iter().try_for_each(|d| Ok(d.sync_all()?)),
        super::reclaim::Settle::default,
    )
    .unwrap();
    let loc = read_record(&x).unwrap().unwrap();
    assert!(
        packs.read(&loc).ok().as_deref() == Some(&x_bytes[..]),
        "X (still linked as \"b\") lost its bytes: {r:?}"
    );
}

/// The background pass's kind of move (`tree::repack_tree` uses its own): every file to the
/// repacked lane, in 1 MiB blocks at zstd:9, in reverse name order; `stop_at` batches
/// allowed, then `pace` says stop.
struct ToLevel {
    batches: usize,
    stop_at: usize,
}

fn zstd9() -> CodecSpec {
    CodecSpec::new(squeezefs_codec::Algorithm::Zstd, 9).unwrap()
}

impl super::reclaim::Mover for ToLevel {
    fn destination(&self, _f: &LiveFile, _was: Option<&BlockHeader>) -> super::reclaim::Destination {
        super::reclaim::Destination {
            lane: Lane::Repacked,
            codec: zstd9(),
            shift: super::tree::REPACK_SHIFT,
        }
    }

    fn order(&self, files: &mut [&LiveFile]) {
        files.sort_by(|a, b| b.name.cmp(&a.name));
    }

    fn pace(&mut self, _bytes: u64) -> bool {
        self.batches += 1;
        self.batches <= self.stop_at
    }

    fn dedup(&self) -> bool {
        true
    }
}

fn run_repack(
    packs: &Packs,
    v: &BTreeSet<u32>,
    files: &[(MemDisk, Vec<u8>)],
    stop_at: usize,
) -> crate::Result<super::reclaim::Reclaimed> {
    reclaim(
        packs,
        v,
        &live_files(files),
        &mut ToLevel { batches: 0, stop_at },
        |f| Ok(files[f.name.parse::<usize>().unwrap()].0.clone()),
        |ds: &[MemDisk]| ds.iter().try_for_each(|d| Ok(d.sync_all()?)),
        super::reclaim::Settle::default,
    )
}

/// Every file's block is at zstd:9, holds more than one 128 KiB group's worth, and lies in
/// a pack holding no block at another level.
fn all_repacked(packs: &Packs, files: &[(MemDisk, Vec<u8>)], why: &str) {
    let mut packs_seen = BTreeSet::new();
    let mut biggest = 0;
    for (d, _) in files {
        let l = read_record(d).unwrap().unwrap();
        let h = packs.block_header(l.pack, l.block).unwrap();
        assert_eq!((h.codec, h.level), (squeezefs_codec::Algorithm::Zstd, 9), "{why}");
        biggest = biggest.max(h.logical_len);
        packs_seen.insert(l.pack);
    }
    assert!(biggest > 1 << 17, "{why}: blocks of 1 MiB, the biggest {biggest}");
    let live = {
        let mut m = LiveMap::default();
        for (d, _) in files {
            m.add(&read_record(d).unwrap().unwrap());
        }
        m
    };
    for id in packs_seen {
        let r = check_pack(packs, id, &live, true).unwrap();
        assert!(r.issues.is_empty(), "{why}: {:?}", r.issues);
    }
}

#[test]
fn a_repack_moves_every_file_to_its_level_in_big_blocks_of_its_own_lane() {
    let crash = Crash::new();
    let dir = MemPackDir::new(&crash);
    let packs = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
    let files: Vec<(MemDisk, Vec<u8>)> = (0..200)
        .map(|i| {
            let b = text(i, 2000 + (i as usize * 997) % 9000);
            (pack_file(&packs, &crash, &b), b)
        })
        .collect();
    packs.sync().unwrap();
    let before: u64 = packs
        .dir()
        .list()
        .unwrap()
        .iter()
        .map(|&id| packs.handle(id).unwrap().len().unwrap())
        .sum();
    packs.retire(Lane::Written);
    let v = packs.reclaimable().unwrap();
    assert!(!v.is_empty());
    // Pace says stop before the first batch: nothing moves, every pack stays.
    let r = run_repack(&packs, &v, &files, 0).unwrap();
    assert!(r.stopped && r.files_moved == 0 && r.packs_removed.is_empty());
    read_all(&packs, &files, "after a stopped repack");
    // The mount writes on meanwhile, into its own lane's packs.
    let written = pack_file(&packs, &crash, &text(9999, 5000));
    let r = run_repack(&packs, &v, &files, usize::MAX).unwrap();
    assert!(r.left.is_empty() && !r.stopped);
    assert_eq!(r.files_moved, 200);
    assert_eq!(r.packs_removed, v.iter().copied().collect::<Vec<_>>());
    read_all(&packs, &files, "after the repack");
    all_repacked(&packs, &files, "after the repack");
    let w = read_record(&written).unwrap().unwrap();
    for (d, _) in &files {
        assert_ne!(
            read_record(d).unwrap().unwrap().pack,
            w.pack,
            "lanes share no pack"
        );
    }
    let after: u64 = packs
        .dir()
        .list()
        .unwrap()
        .iter()
        .filter(|&&id| id != w.pack)
        .map(|&id| packs.handle(id).unwrap().len().unwrap())
        .sum();
    assert!(
        after < before,
        "zstd:9 in 1 MiB blocks is smaller: {before} → {after}"
    );
    // A garbage reclaim keeps the level the repack gave.
    let all: BTreeSet<u32> = packs
        .dir()
        .list()
        .unwrap()
        .into_iter()
        .filter(|&id| id != w.pack)
        .collect();
    packs.retire(Lane::Repacked);
    run_reclaim(&packs, &all, &files).unwrap();
    read_all(&packs, &files, "after a reclaim of the repacked packs");
    for (d, _) in &files {
        let l = read_record(d).unwrap().unwrap();
        assert_eq!(packs.block_header(l.pack, l.block).unwrap().level, 9);
    }
}

#[test]
fn a_repack_crashed_at_any_step_loses_no_file_and_can_be_run_again() {
    let mut n = 0;
    loop {
        let crash = Crash::new();
        let mut w = world(&crash);
        let packs = Packs::new(Box::new(w.dir.clone()), true, 0).unwrap();
        // Copies of one file: stored once by the repack.
        let copy = text(4242, 6000);
        for _ in 0..6 {
            w.files.push((pack_file(&packs, &crash, &copy), copy.clone()));
        }
        packs.sync().unwrap();
        packs.retire(Lane::Written);
        let v = packs.reclaimable().unwrap();
        crash.after(n);
        let r = run_repack(&packs, &v, &w.files, usize::MAX);
        if let Ok(r) = &r {
            let distinct: std::collections::HashSet<&Vec<u8>> = w.files.iter().map(|(_, b)| b).collect();
            assert_eq!(
                r.files_shared as usize,
                w.files.len() - distinct.len(),
                "equal contents share one place"
            );
        }
        let crashed = crash.has_crashed();
        assert!(crashed || r.is_ok(), "{r:?}");
        let (packs, disks) = reboot(&w, n);
        for r in audit(&packs, &disks).values() {
            for i in &r.issues {
                assert!(!matches!(i, PackIssue::Damage(_)), "crash at {n}: {i:?}");
            }
            repair_pack(&packs, r).unwrap();
        }
        // The pass's next round: every pack not yet at the level.
        let pending: BTreeSet<u32> = disks
            .iter()
            .map(|(d, _)| read_record(d).unwrap().unwrap())
            .filter(|l| packs.block_header(l.pack, l.block).unwrap().level != 9)
            .map(|l| l.pack)
            .collect();
        run_repack(&packs, &pending, &disks, usize::MAX).unwrap();
        read_all(
            &packs,
            &disks,
            &format!("after a crash at step {n} and a second repack"),
        );
        all_repacked(
            &packs,
            &disks,
            &format!("after a crash at step {n} and a second repack"),
        );
        if !crashed {
            assert!(n > 20, "the repack took only {n} steps");
            break;
        }
        n += 1;
    }
}

/// The change time `stat` shows for a packed file: its record's kept one, else its
/// backing file's.
fn shown_ctime(d: &MemDisk) -> u64 {
    read_record(d)
        .unwrap()
        .and_then(|l| l.kept_ctime)
        .unwrap_or_else(|| d.change_time().unwrap().unwrap())
}

/// A reclaim replaces each moved file's record, which moves its backing file's ctime: where
/// the packs keep change times, the new record (version 3) keeps the one the file showed,
/// through a second move too; where they do not, records stay version 1 and the ctime
/// moves. A container that read its record before the move sees the kept time, and
/// forgetting it (a change of metadata) writes the record again without it.
#[test]
fn a_moved_record_keeps_the_change_time_the_file_showed() {
    use std::sync::Arc;
    // Not kept: the records stay 56 bytes, and the ctime moves.
    let w = world(&Crash::new());
    let packs = Packs::new(Box::new(w.dir.clone()), true, 0).unwrap();
    let before: Vec<u64> = w.files.iter().map(|(d, _)| shown_ctime(d)).collect();
    let v = victims(&audit(&packs, &w.files), GARBAGE_MAX);
    let moved = run_reclaim(&packs, &v, &w.files).unwrap().files_moved;
    assert!(moved > 0);
    let mut moved_seen = 0;
    for (i, (d, _)) in w.files.iter().enumerate() {
        assert_eq!(d.xattr(LOCATION_XATTR).unwrap().len(), format::LOCATION_LEN);
        moved_seen += u64::from(shown_ctime(d) != before[i]);
    }
    assert_eq!(moved_seen, moved);

    // Kept.
    let w = world(&Crash::new());
    let packs = Arc::new(Packs::new(Box::new(w.dir.clone()), true, 0).unwrap());
    packs.set_keep_ctime(true);
    let opts = crate::Options {
        codec: zstd1(),
        extent_shift: 17,
        packs: Some(packs.clone()),
        ..Default::default()
    };
    let mut opened: Vec<crate::Container<MemDisk>> = w
        .files
        .iter()
        .map(|(d, _)| crate::Container::open(d.clone(), &opts).unwrap())
        .collect();
    for c in &mut opened {
        assert_eq!(c.kept_times(), None);
        c.read(0, 1).unwrap(); // (loaded: its pack is not pinned)
    }
    let before: Vec<u64> = w.files.iter().map(|(d, _)| shown_ctime(d)).collect();
    let moves = packs.moves();
    let v = victims(&audit(&packs, &w.files), GARBAGE_MAX);
    let r = run_reclaim(&packs, &v, &w.files).unwrap();
    assert!(r.files_moved > 0 && packs.moves() > moves);
    let mut kept = 0;
    for (i, (d, b)) in w.files.iter().enumerate() {
        assert_eq!(shown_ctime(d), before[i], "file {i}");
        let l = read_record(d).unwrap().unwrap();
        if let Some(t) = l.kept_ctime {
            kept += 1;
            assert_ne!(
                d.change_time().unwrap().unwrap(),
                t,
                "file {i}: the backing ctime moved"
            );
            assert_eq!(d.xattr(LOCATION_XATTR).unwrap()[0], format::LOCATION_VERSION_3);
            let want = Some(format::ctime_parts(t));
            assert_eq!(
                opened[i].kept_times().map(|k| k.ctime),
                want,
                "file {i}, opened before"
            );
            assert_eq!(opened[i].kept_times().unwrap().mtime, None);
            let c = crate::Container::open(d.clone(), &opts).unwrap();
            assert_eq!(c.kept_times().map(|k| k.ctime), want, "file {i}, opened after");
        } else {
            assert_eq!(opened[i].kept_times(), None);
        }
        assert_eq!(&opened[i].read(0, b.len()).unwrap(), b);
    }
    assert_eq!(kept, r.files_moved);
    // A second move keeps the first kept time (not the ctime the first move made).
    let ids: BTreeSet<u32> = packs.dir().list().unwrap().into_iter().collect();
    packs.retire_any(&ids);
    let all: BTreeSet<u32> = packs.reclaimable().unwrap();
    let r = run_reclaim(&packs, &all, &w.files).unwrap();
    assert!(r.files_moved > 0);
    for (i, (d, b)) in w.files.iter().enumerate() {
        assert_eq!(shown_ctime(d), before[i], "file {i} after a second move");
        assert!(read_record(d).unwrap().unwrap().kept_ctime.is_some(), "file {i}");
        assert_eq!(&packs.read(&read_record(d).unwrap().unwrap()).unwrap(), b);
    }
    // A change of metadata: the container drops the kept time, durably, and the record is
    // what it was before any move (version 1, 56 bytes), naming the moved bytes.
    let (d0, b0) = &w.files[0];
    opened[0].forget_kept_times().unwrap();
    opened[0].fsync().unwrap();
    assert_eq!(opened[0].kept_times(), None);
    assert_eq!(d0.xattr(LOCATION_XATTR).unwrap().len(), format::LOCATION_LEN);
    let mut c = crate::Container::open(d0.clone(), &opts).unwrap();
    assert_eq!(c.kept_times(), None);
    assert_eq!(&c.read(0, b0.len()).unwrap(), b0);
    // A write gives a record of its own, keeping nothing.
    let (d1, _) = &w.files[1];
    opened[1].write(0, b"changed").unwrap();
    opened[1].fsync().unwrap();
    assert_eq!(read_record(d1).unwrap().unwrap().kept_ctime, None);
    assert_eq!(opened[1].kept_times(), None);
}
