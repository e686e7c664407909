use super::*;
use crate::sim::Crash;

/// zstd:1, the codec the pack tests write with.
pub(crate) fn zstd1() -> CodecSpec {
    CodecSpec::new(Algorithm::Zstd, 1).unwrap()
}

/// Source-like text, different for each seed (shared with `audit_tests`).
pub(super) fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "fn ", "let ", "struct ", "impl ", "pub ", "match ", "{\n", "}\n", "x", "y", "42",
    ];
    let mut s = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.extend_from_slice(words[(s % words.len() as u64) as usize].as_bytes());
    }
    v.truncate(len);
    v
}

/// The record naming `slot`, placed at `p` (zstd:1, 128 KiB extents, generation 1; shared
/// with `audit_tests` and `usage`'s tests).
pub(crate) fn loc(slot: &Slot, p: Placed) -> Location {
    Location {
        props: 0,
        codec: zstd1(),
        extent_shift: 17,
        pack: p.pack,
        block: p.block,
        offset: p.offset,
        len: slot.len,
        generation: 1,
        content_sum: slot.sum,
        dict_id: 0,
        kept_ctime: None,
    }
}

#[test]
fn files_share_solid_blocks_and_read_back() {
    let dir = MemPackDir::new(&Crash::new());
    let packs = Packs::new(Box::new(dir.clone()), true, DEFAULT_CACHE).unwrap();
    let files: Vec<Vec<u8>> = (0..100)
        .map(|i| text(i, 500 + (i as usize * 37) % 9000))
        .collect();
    let slots: Vec<_> = files
        .iter()
        .map(|f| packs.append(zstd1(), 17, f).unwrap())
        .collect();
    // Every slot gives its bytes back from memory, in an open block or a written one.
    for (f, s) in files.iter().zip(&slots) {
        assert!(&packs.read_slot(s).unwrap() == f, "slot bytes before durable");
    }
    let placed: Vec<_> = slots.iter().map(|s| packs.durable(s).unwrap()).collect();
    for (f, s) in files.iter().zip(&slots) {
        assert!(&packs.read_slot(s).unwrap() == f, "slot bytes after durable");
    }
    let total: usize = files.iter().map(Vec::len).sum();
    let blocks: std::collections::BTreeSet<_> = placed.iter().map(|p| (p.pack, p.block)).collect();
    assert!(
        blocks.len() <= total.div_ceil(128 << 10) + 1,
        "{} blocks for {total} bytes",
        blocks.len()
    );
    let stored = dir.disk(1).unwrap().contents().len();
    assert!(stored * 3 < total, "solid blocks compress: {stored} of {total}");
    // A fresh reader (no cache) finds every file.
    let fresh = Packs::new(Box::new(dir), false, DEFAULT_CACHE).unwrap();
    for ((f, s), p) in files.iter().zip(&slots).zip(&placed) {
        assert_eq!(&fresh.read(&loc(s, *p)).unwrap(), f);
    }
    // One block read per block, the rest from the cache.
    assert_eq!(
        fresh.counters.blocks_read.load(Ordering::Relaxed),
        blocks.len() as u64
    );
}

/// `readers` threads reading `loc` from `packs` at the same moment (from a barrier), as a
/// walk's workers and its reader load the files of one block together: each one's result.
fn read_at_once(packs: &Packs, loc: &Location, readers: usize) -> Vec<Result<Vec<u8>>> {
    let start = std::sync::Barrier::new(readers);
    std::thread::scope(|t| {
        let each: Vec<_> = (0..readers)
            .map(|_| {
                t.spawn(|| {
                    start.wait();
                    packs.read(loc)
                })
            })
            .collect();
        each.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_block_several_callers_want_at_once_is_read_once() {
    let dir = MemPackDir::new(&Crash::new());
    let packs = Packs::new(Box::new(dir.clone()), true, DEFAULT_CACHE).unwrap();
    let f = text(7, 900 << 10);
    let s = packs.append(zstd1(), 20, &f).unwrap();
    let p = packs.durable(&s).unwrap();
    for round in 0..20 {
        // A later mount each round (its cache empty); four readers of the one block at once,
        // as a walk's workers and its reader load the files of one block together.
        let fresh = Packs::new(Box::new(dir.clone()), false, DEFAULT_CACHE).unwrap();
        for r in read_at_once(&fresh, &loc(&s, p), 4) {
            assert!(r.unwrap() == f);
        }
        let read = fresh.counters.blocks_read.load(Ordering::Relaxed);
        assert_eq!(read, 1, "round {round}: the block was read {read} times");
    }
}

#[test]
fn callers_waiting_for_a_block_get_its_bytes_even_when_the_cache_cannot_keep_it() {
    let dir = MemPackDir::new(&Crash::new());
    let packs = Packs::new(Box::new(dir.clone()), true, DEFAULT_CACHE).unwrap();
    let f = text(8, 900 << 10);
    let s = packs.append(zstd1(), 20, &f).unwrap();
    let p = packs.durable(&s).unwrap();
    let (rounds, readers) = (20, 4);
    let mut read = 0;
    for _ in 0..rounds {
        // No cache (`pack_cache=0`): waiting for the one read, then reading again, would
        // read the block once per reader, one after the other.
        let fresh = Packs::new(Box::new(dir.clone()), false, 0).unwrap();
        for r in read_at_once(&fresh, &loc(&s, p), readers) {
            assert!(r.unwrap() == f);
        }
        read += fresh.counters.blocks_read.load(Ordering::Relaxed);
    }
    // (A reader that comes after a read ended reads again: no cache. Most join one.)
    assert!(
        read < rounds * readers as u64 / 2,
        "{read} reads in {rounds} rounds of {readers}"
    );
}

#[test]
fn callers_waiting_for_a_block_that_fails_to_read_get_the_error_and_do_not_hang() {
    let dir = MemPackDir::new(&Crash::new());
    let packs = Packs::new(Box::new(dir.clone()), true, DEFAULT_CACHE).unwrap();
    let s = packs.append(zstd1(), 20, &text(9, 300 << 10)).unwrap();
    let p = packs.durable(&s).unwrap();
    // A byte of the payload flipped: every read fails its checksum.
    let disk = dir.disk(p.pack).unwrap();
    let at = p.block + BLOCK_HEADER_LEN as u64 + 100;
    let mut b = [0u8; 1];
    disk.read_at(&mut b, at).unwrap();
    disk.write_at(&[b[0] ^ 0x40], at).unwrap();
    let fresh = Packs::new(Box::new(dir), false, DEFAULT_CACHE).unwrap();
    for r in read_at_once(&fresh, &loc(&s, p), 8) {
        assert!(matches!(r, Err(Error::CorruptPack { .. })));
    }
}

#[test]
fn a_damaged_block_or_a_wrong_record_is_an_error_never_wrong_bytes() {
    let dir = MemPackDir::new(&Crash::new());
    let packs = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
    let a = packs.append(zstd1(), 17, &text(1, 3000)).unwrap();
    let b = packs.append(zstd1(), 17, &text(2, 3000)).unwrap();
    let pa = packs.durable(&a).unwrap();
    let pb = packs.durable(&b).unwrap();
    // A record naming another file's bytes (or a stale record) fails its content checksum.
    let mut wrong = loc(&a, pb);
    wrong.len = a.len;
    assert!(matches!(packs.read(&wrong), Err(Error::CorruptPack { .. })));
    // A record into a missing pack.
    let mut missing = loc(&a, pa);
    missing.pack = 9;
    assert!(matches!(packs.read(&missing), Err(Error::CorruptPack { .. })));
    // Every flipped byte of the pack's block is caught (cache is 0 bytes: always read).
    let disk = dir.disk(1).unwrap();
    let len = disk.contents().len();
    for at in (PACK_HEADER_LEN..len).step_by(7) {
        let orig = disk.contents()[at];
        disk.write_at(&[orig ^ 0x5a], at as u64).unwrap();
        assert!(packs.read(&loc(&a, pa)).is_err(), "flip at {at} not caught");
        disk.write_at(&[orig], at as u64).unwrap();
    }
    assert!(packs.read(&loc(&a, pa)).is_ok());
}

#[test]
fn durable_means_synced_and_a_crash_keeps_durable_blocks() {
    for n in 0..40 {
        let crash = Crash::new();
        let dir = MemPackDir::new(&crash);
        let packs = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
        let files: Vec<Vec<u8>> = (0..30).map(|i| text(i + n, 7000)).collect();
        crash.after(n);
        let mut durable = Vec::new();
        for f in &files {
            let Ok(s) = packs.append(zstd1(), 17, f) else {
                break;
            };
            match packs.durable(&s) {
                Ok(p) => durable.push((f.clone(), loc(&s, p))),
                Err(_) => break,
            }
        }
        let mut x = n + 7;
        let after = dir.reboot_into(&Crash::new(), || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            x >> 33
        });
        let fresh = Packs::new(Box::new(after), true, 0).unwrap();
        for (f, l) in &durable {
            assert_eq!(&fresh.read(l).unwrap(), f, "crash at op {n}");
        }
        // New files after the crash go to a new pack and read back too.
        let s = fresh.append(zstd1(), 17, b"after").unwrap();
        let p = fresh.durable(&s).unwrap();
        assert_eq!(fresh.read(&loc(&s, p)).unwrap(), b"after");
    }
}

/// A pack's directory entry is not synced when the pack is made (that cost a forced journal
/// commit while every append waited): a crash before any sync takes the pack away, and
/// whatever may be named by a record first makes the name durable — `durable` (a file's own
/// fsync), a whole-filesystem sync handed to `synced` (the group commit), `sync`.
#[test]
fn a_new_packs_name_is_made_durable_before_anything_names_it() {
    let reboot = |d: &MemPackDir| d.reboot_into(&Crash::new(), || 1);
    let dir = MemPackDir::new(&Crash::new());
    let packs = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
    // The group commit: the block written by `seal_all`, then a sync of the backing.
    let a = packs.append(zstd1(), 17, &text(1, 5000)).unwrap();
    let mark = packs.seal_all().unwrap();
    assert_eq!(dir.list().unwrap(), vec![1]);
    assert!(!dir.is_named(1), "no directory sync on the append path");
    assert!(
        reboot(&dir).list().unwrap().is_empty(),
        "a crash takes an unnamed pack"
    );
    // (The whole-filesystem sync: the pack's bytes; `synced` records its name.)
    dir.disk(1).unwrap().sync_data().unwrap();
    packs.synced(mark);
    assert!(dir.is_named(1));
    let pa = packs.durable(&a).unwrap();
    assert_eq!(reboot(&dir).list().unwrap(), vec![1]);
    // A file's own fsync: its block's new pack (another lane's) is named by `durable`.
    let b = packs
        .append_in(Lane::Repacked, zstd1(), 17, &text(2, 5000))
        .unwrap();
    let pb = packs.durable(&b).unwrap();
    assert_eq!(pb.pack, 2);
    assert!(dir.is_named(2));
    let after = Packs::new(Box::new(reboot(&dir)), true, 0).unwrap();
    assert_eq!(after.read(&loc(&a, pa)).unwrap(), text(1, 5000));
    assert_eq!(after.read(&loc(&b, pb)).unwrap(), text(2, 5000));
    // `sync` (unmount): a third pack, named with the data.
    let dir3 = MemPackDir::new(&Crash::new());
    let p3 = Packs::new(Box::new(dir3.clone()), true, 0).unwrap();
    p3.append(zstd1(), 17, &text(3, 5000)).unwrap();
    p3.sync().unwrap();
    assert!(dir3.is_named(1));
    assert_eq!(reboot(&dir3).list().unwrap(), vec![1]);
}

#[test]
fn incompressible_blocks_are_stored_raw_and_groups_do_not_mix() {
    let dir = MemPackDir::new(&Crash::new());
    let packs = Packs::new(Box::new(dir), true, DEFAULT_CACHE).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..5000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let a = packs.append(zstd1(), 17, &noise).unwrap();
    let lz4 = CodecSpec::new(Algorithm::Lz4, 1).unwrap();
    let b = packs.append(lz4, 17, &text(3, 4000)).unwrap();
    let pa = packs.durable(&a).unwrap();
    let pb = packs.durable(&b).unwrap();
    assert_ne!((pa.pack, pa.block), (pb.pack, pb.block));
    let (ha, _) = packs.read_block(pa.pack, pa.block).unwrap();
    let (hb, _) = packs.read_block(pb.pack, pb.block).unwrap();
    assert_eq!(ha.codec, Algorithm::None);
    assert_eq!(hb.codec, Algorithm::Lz4);
    assert_eq!(packs.read(&loc(&a, pa)).unwrap(), noise);
}
