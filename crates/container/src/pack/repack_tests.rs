//! `tree::repack_tree` over a real directory: the background pass's rewrite of cold packs.
//! A file written while a round walks never loses its pack, repacked blocks are 1 MiB,
//! equal contents are stored once and stay readable when one of them is rewritten.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use squeezefs_codec::{Algorithm, CodecSpec};

use super::audit::LiveMap;
use super::reclaim::Settle;
use super::record::read_record;
use super::tests::{loc, zstd1};
use super::tree::{repack_tree, Repacked, Targets, TreeRepack, REPACK_BUDGET};
use super::*;
use crate::storage::{FileStorage, Storage};

/// Every file's target is zstd:9; each directory entered may run `during` (a mount's write
/// while the walk goes on).
struct All<'a> {
    during: &'a dyn Fn(),
}

fn zstd9() -> CodecSpec {
    CodecSpec::new(Algorithm::Zstd, 9).unwrap()
}

impl Targets for All<'_> {
    fn dir(&self, _dir: &File, inherited: Option<CodecSpec>) -> Option<CodecSpec> {
        (self.during)();
        inherited.or(Some(zstd9()))
    }

    fn file(&self, _file: &File, inherited: Option<CodecSpec>) -> Option<CodecSpec> {
        inherited
    }
}

struct Tree {
    root: PathBuf,
    packs: Packs,
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn tree(name: &str) -> Tree {
    let root = std::env::temp_dir().join(format!("sqzfs-repack-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("d")).unwrap();
    let dir = FsPackDir::new(&root, true);
    dir.ensure().unwrap();
    let packs = Packs::new(Box::new(dir), true, 8 << 20).unwrap();
    Tree { root, packs }
}

/// A packed file as a mount writes it: bytes durable in the mount's lane, then its record.
fn write(root: &Path, packs: &Packs, name: &str, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .read(true)
        .open(root.join(name))
        .unwrap();
    let st = FileStorage::new(f);
    let s = packs.append(zstd1(), 17, bytes).unwrap();
    let p = packs.durable(&s).unwrap();
    let _records = packs.records().read().unwrap();
    st.set_xattr(LOCATION_XATTR, &loc(&s, p).encode()).unwrap();
    st.sync_all().unwrap();
}

fn record(root: &Path, name: &str) -> Location {
    read_record(&FileStorage::new(File::open(root.join(name)).unwrap()))
        .unwrap()
        .unwrap()
}

fn read(t: &Tree, name: &str) -> Vec<u8> {
    t.packs.read(&record(&t.root, name)).unwrap()
}

fn data(i: u64, len: usize) -> Vec<u8> {
    format!("file {i} says hello; ").repeat(len / 10 + 1).into_bytes()[..len].to_vec()
}

/// One round with every target zstd:9, `during` run at each directory of its walk.
fn round(t: &Tree, during: &dyn Fn()) -> Repacked {
    round_with(t, &All { during })
}

/// One round, the packs it may take asked before its walk (as a mount does).
fn round_with(t: &Tree, targets: &dyn Targets) -> Repacked {
    let free = t.packs.reclaimable().unwrap();
    let mut pace = |_: u64| true;
    let mut settle = || Settle::Remove;
    repack_tree(
        &t.root,
        &t.packs,
        TreeRepack {
            targets,
            mount_target: None,
            free,
            budget: REPACK_BUDGET,
            pace: &mut pace,
            settle: &mut settle,
        },
    )
    .unwrap()
    .unwrap()
}

#[test]
fn a_file_written_while_a_round_walks_keeps_its_pack() {
    let t = tree("late");
    for i in 0..10 {
        write(&t.root, &t.packs, &format!("d/a{i}"), &data(i, 3000));
    }
    // The files are in the pack the mount appends to: not free, so the round takes
    // nothing, and says which packs kept it back.
    let late = || {
        if !t.root.join("d/late").exists() {
            write(&t.root, &t.packs, "d/late", &data(99, 3000));
        }
    };
    let r = round(&t, &late);
    assert_eq!(r.done_bytes, 0);
    assert!(r.busy_bytes > 0 && !r.busy_packs.is_empty(), "{r:?}");
    assert_eq!(read(&t, "d/late"), data(99, 3000));
    // The mount retires them; the next round takes them, and a file written during that
    // walk (into the mount's next pack, not free when the round began) survives it.
    t.packs.retire_any(&r.busy_packs);
    let later = || {
        if !t.root.join("d/later").exists() {
            write(&t.root, &t.packs, "d/later", &data(98, 3000));
        }
    };
    let r = round(&t, &later);
    // (The file written meanwhile is in the mount's next pack: busy until it is retired.)
    assert!(r.done_bytes >= 33_000, "{r:?}");
    assert!(!r.moved.unwrap().packs_removed.is_empty());
    for i in 0..10 {
        assert_eq!(read(&t, &format!("d/a{i}")), data(i, 3000));
    }
    assert_eq!(read(&t, "d/late"), data(99, 3000));
    assert_eq!(read(&t, "d/later"), data(98, 3000), "written during the walk");
}

#[test]
fn small_files_are_repacked_into_blocks_of_a_mebibyte() {
    let t = tree("blocks");
    for i in 0..3000 {
        write(&t.root, &t.packs, &format!("d/f{i:05}.txt"), &data(i, 1000));
    }
    t.packs.retire(Lane::Written);
    let r = round(&t, &|| {});
    assert_eq!(r.done_bytes, r.pending_bytes);
    let mut blocks = BTreeSet::new();
    for i in 0..3000 {
        let l = record(&t.root, &format!("d/f{i:05}.txt"));
        let h = t.packs.block_header(l.pack, l.block).unwrap();
        assert_eq!((h.codec, h.level), (Algorithm::Zstd, 9));
        blocks.insert((l.pack, l.block, h.logical_len));
        assert_eq!(t.packs.read(&l).unwrap(), data(i, 1000));
    }
    // 3 MB of files: blocks of about 1 MB (a batch ends every 2,048 files), not a block
    // per batch of 256 files.
    let full = blocks.iter().filter(|b| b.2 >= 900_000).count();
    assert!(blocks.len() <= 4 && full >= 3, "{blocks:?}");
    // Converged: nothing is pending any more.
    let again = round(&t, &|| {});
    assert_eq!((again.pending_bytes, again.done_bytes), (0, 0), "{again:?}");
}

#[test]
fn equal_contents_are_stored_once_and_a_write_to_one_leaves_the_other() {
    let t = tree("dedup");
    // 40 copies of one licence, 40 of another, 40 different files.
    for i in 0..120u64 {
        let bytes = match i % 3 {
            0 => data(1000, 5000),
            1 => data(2000, 7000),
            _ => data(i, 6000),
        };
        write(&t.root, &t.packs, &format!("d/f{i}"), &bytes);
    }
    // A file that stays where it is, already at the target: a copy of it moved later
    // shares its place.
    let s = t
        .packs
        .append_in(Lane::Repacked, zstd9(), 20, &data(3000, 4000))
        .unwrap();
    let p = t.packs.durable(&s).unwrap();
    let f = FileStorage::new(File::create(t.root.join("d/kept")).unwrap());
    f.set_xattr(LOCATION_XATTR, &loc(&s, p).encode()).unwrap();
    drop(s);
    write(&t.root, &t.packs, "d/copy-of-kept", &data(3000, 4000));
    t.packs.retire(Lane::Written);
    t.packs.retire(Lane::Repacked);
    let r = round(&t, &|| {});
    assert_eq!(r.done_bytes, r.pending_bytes, "{r:?}");
    assert_eq!(r.moved.as_ref().unwrap().files_shared, 39 + 39 + 1);
    let mut live = LiveMap::default();
    for i in 0..120u64 {
        live.add(&record(&t.root, &format!("d/f{i}")));
    }
    live.add(&record(&t.root, "d/kept"));
    live.add(&record(&t.root, "d/copy-of-kept"));
    let shared = live.shared();
    assert_eq!(shared.files, 79);
    assert_eq!(shared.bytes, 39 * 5000 + 39 * 7000 + 4000);
    assert_eq!(shared.mismatched, 0);
    assert_eq!(record(&t.root, "d/copy-of-kept").pack, p.pack);
    for i in 0..120u64 {
        let want = match i % 3 {
            0 => data(1000, 5000),
            1 => data(2000, 7000),
            _ => data(i, 6000),
        };
        assert_eq!(read(&t, &format!("d/f{i}")), want);
    }
    // A write to one copy gives it a record of its own; the others keep the shared bytes,
    // through a garbage reclaim too (which keeps sharing what is shared).
    write(&t.root, &t.packs, "d/f0", b"changed");
    assert_eq!(read(&t, "d/f0"), b"changed");
    assert_eq!(read(&t, "d/f3"), data(1000, 5000));
    t.packs.retire(Lane::Written);
    let all: BTreeSet<u32> = t.packs.reclaimable().unwrap();
    let w = super::tree::walk_records(&t.root).unwrap().unwrap();
    super::tree::reclaim_files(
        &t.root,
        &t.packs,
        &all,
        &w.files,
        &mut super::reclaim::Garbage,
        &mut Settle::default,
    )
    .unwrap();
    let mut live = LiveMap::default();
    for i in 0..120u64 {
        live.add(&record(&t.root, &format!("d/f{i}")));
    }
    assert_eq!(live.shared().files, 38 + 39, "sharing kept through a reclaim");
    assert_eq!(read(&t, "d/f3"), data(1000, 5000));
    assert_eq!(read(&t, "d/f4"), data(2000, 7000));
}

/// Directory `d19` (by inode) has target zstd:19, everything else zstd:9.
struct ByDir {
    nineteen: u64,
}

impl Targets for ByDir {
    fn dir(&self, dir: &File, inherited: Option<CodecSpec>) -> Option<CodecSpec> {
        use std::os::unix::fs::MetadataExt;
        if dir.metadata().unwrap().ino() == self.nineteen {
            return Some(CodecSpec::new(Algorithm::Zstd, 19).unwrap());
        }
        inherited.or(Some(zstd9()))
    }

    fn file(&self, _file: &File, inherited: Option<CodecSpec>) -> Option<CodecSpec> {
        inherited
    }
}

#[test]
fn equal_files_with_different_targets_each_reach_theirs_and_the_pass_converges() {
    use std::os::unix::fs::MetadataExt;
    let t = tree("targets");
    std::fs::create_dir(t.root.join("d19")).unwrap();
    // The same bytes named by one record each in both directories, and two records naming
    // one range (as a previous round that shared them left it).
    write(&t.root, &t.packs, "d/x", &data(7, 9000));
    write(&t.root, &t.packs, "d19/x", &data(7, 9000));
    let x = record(&t.root, "d/x");
    let f = FileStorage::new(File::create(t.root.join("d19/y")).unwrap());
    f.set_xattr(LOCATION_XATTR, &x.encode()).unwrap();
    t.packs.retire(Lane::Written);
    let targets = ByDir {
        nineteen: std::fs::metadata(t.root.join("d19")).unwrap().ino(),
    };
    let run = || round_with(&t, &targets);
    let r = run();
    assert_eq!(r.done_bytes, r.pending_bytes, "{r:?}");
    let level = |name: &str| {
        let l = record(&t.root, name);
        t.packs.block_header(l.pack, l.block).unwrap().level
    };
    assert_eq!((level("d/x"), level("d19/x"), level("d19/y")), (9, 19, 19));
    assert_eq!(record(&t.root, "d19/x").pack, record(&t.root, "d19/y").pack);
    for n in ["d/x", "d19/x", "d19/y"] {
        assert_eq!(read(&t, n), data(7, 9000));
    }
    let again = run();
    assert_eq!(
        (again.pending_bytes, again.done_bytes),
        (0, 0),
        "converged: {again:?}"
    );
}
