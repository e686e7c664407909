//! The lifecycle rules of `state.rs`, checked without a mount: a backing directory in the
//! temporary directory, an inode table over it, and `Files` driven as the FUSE handlers
//! drive it.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use squeezefs_container::{Container, FileStorage, Options};
use squeezefs_testdata::text;

use super::{Deferred, Files, IDLE_MAX};
use crate::inode::{Inode, Inodes};
use crate::sys;

pub(super) struct Backing {
    dir: PathBuf,
    inodes: Arc<Inodes>,
    pub(super) files: Files,
}

impl Drop for Backing {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn backing(name: &str) -> Backing {
    let dir = std::env::temp_dir().join(format!("squeezefs-lifecycle-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let inodes = Arc::new(Inodes::open(&dir).unwrap().0);
    let files = Files::new(inodes.clone(), Options::default(), false);
    Backing { dir, inodes, files }
}

impl Backing {
    /// A new, empty file registered in the inode table (as a lookup would).
    pub(super) fn file(&self, name: &str) -> (u64, Arc<Inode>) {
        let c = CString::new(name).unwrap();
        let root = self.inodes.get(1).unwrap();
        let dir = self.inodes.fd(&root).unwrap();
        drop(sys::create_rw(&dir, &c, 0o644).unwrap());
        let fd = sys::open_path(&dir, &c).unwrap();
        let st = sys::fstat(&fd).unwrap();
        self.inodes.insert(fd, &st, &root, &c)
    }

    /// A packed file's content as a fresh reader of the backing file sees it.
    fn on_disk_packed(&self, packs: &Arc<squeezefs_container::pack::Packs>, name: &str) -> Vec<u8> {
        let f = std::fs::File::open(self.dir.join(name)).unwrap();
        let opts = Options {
            packs: Some(packs.clone()),
            ..Options::default()
        };
        let mut c = Container::open(FileStorage::new(f), &opts).unwrap();
        let n = c.size().unwrap();
        c.read(0, n as usize).unwrap()
    }

    /// The file's content as a fresh reader of the backing file sees it.
    pub(super) fn on_disk(&self, name: &str) -> Vec<u8> {
        let f = std::fs::File::open(self.dir.join(name)).unwrap();
        let mut c = Container::open(FileStorage::new(f), &Options::default()).unwrap();
        let n = c.size().unwrap();
        c.read(0, n as usize).unwrap()
    }
}

/// (in memory, handles, superblock pending) of a file's state.
fn state(inode: &Inode) -> Option<(u32, bool)> {
    let open = inode.file.open.lock().unwrap();
    open.as_ref()
        .map(|of| (of.handles, of.container.commit_pending()))
}

#[test]
fn last_close_queues_the_file_until_the_group_commit() {
    let b = backing("close");
    let (ino, inode) = b.file("f");
    let data = text(300_000);
    b.files.attach(&inode, false, true).unwrap();
    b.files
        .with_container(&inode, |c| c.write(0, &data), "write")
        .unwrap();
    b.files.release(ino, &inode, true).unwrap();
    // Rule 1: written back, its superblock waits — the state is kept, with no handle.
    assert_eq!(state(&inode), Some((0, true)));
    assert!(
        b.on_disk("f").is_empty(),
        "the superblock is written only after a sync"
    );
    b.files.commit_now();
    // Rule 3: committed and settled, then dropped (nobody has it open); size remembered.
    assert_eq!(state(&inode), None);
    assert_eq!(
        inode.file.open.lock().unwrap().closed.as_ref().map(|c| c.size()),
        Some(data.len() as u64)
    );
    assert_eq!(b.on_disk("f"), data);
    assert_eq!(b.files.committer.commits.load(Ordering::Relaxed), 1);
    assert_eq!(b.files.committer.syncs.load(Ordering::Relaxed), 2);
}

#[test]
fn a_close_that_changed_nothing_drops_the_state_at_once() {
    let b = backing("readonly");
    let (ino, inode) = b.file("f");
    let data = text(100_000);
    b.files.attach(&inode, false, true).unwrap();
    b.files
        .with_container(&inode, |c| c.write(0, &data), "write")
        .unwrap();
    b.files.release(ino, &inode, true).unwrap();
    b.files.commit_now();
    let commits = b.files.committer.commits.load(Ordering::Relaxed);
    b.files.attach(&inode, false, false).unwrap();
    assert_eq!(
        b.files.with_container(&inode, |c| c.read(0, 10), "read").unwrap(),
        &data[..10]
    );
    b.files.release(ino, &inode, false).unwrap();
    assert_eq!(state(&inode), None);
    assert_eq!(b.files.committer.commits.load(Ordering::Relaxed), commits);
}

#[test]
fn a_change_with_no_handle_is_written_back_and_queued() {
    let b = backing("nohandle");
    let (ino, inode) = b.file("f");
    // A lookup's size keeps the container (no handle)...
    assert_eq!(b.files.size_and_times(ino, &inode).unwrap().0, 0);
    assert_eq!(state(&inode), Some((0, false)));
    // ...and a change to it (rule 2) is written back at once and queued.
    let data = text(200_000);
    b.files
        .with_container(&inode, |c| c.write(0, &data), "write")
        .unwrap();
    assert_eq!(state(&inode), Some((0, true)));
    b.files.commit_now();
    assert_eq!(state(&inode), None);
    assert_eq!(b.on_disk("f"), data);
}

#[test]
fn a_file_reopened_and_changed_while_queued_is_committed_as_last_written() {
    let b = backing("reopen");
    let (ino, inode) = b.file("f");
    let first = text(150_000);
    b.files.attach(&inode, false, true).unwrap();
    b.files
        .with_container(&inode, |c| c.write(0, &first), "write")
        .unwrap();
    b.files.release(ino, &inode, true).unwrap();
    // Opened again and changed before the commit: the commit finds the file changed since
    // its write-back and, since a handle is open, leaves it to its next close.
    b.files.attach(&inode, false, true).unwrap();
    b.files
        .with_container(&inode, |c| c.write(0, b"CHANGED"), "write")
        .unwrap();
    b.files.commit_now();
    assert!(state(&inode).is_some_and(|(handles, _)| handles == 1));
    b.files.release(ino, &inode, true).unwrap();
    b.files.commit_now();
    assert_eq!(state(&inode), None);
    let mut want = first.clone();
    want[..7].copy_from_slice(b"CHANGED");
    assert_eq!(b.on_disk("f"), want);
}

#[test]
fn kept_containers_are_bounded_and_queued_ones_are_never_dropped() {
    let b = backing("idle");
    let (qino, queued) = b.file("queued");
    b.files.size_and_times(qino, &queued).unwrap();
    let waits = text(300_000);
    b.files
        .with_container(&queued, |c| c.write(0, &waits), "write")
        .unwrap();
    assert_eq!(state(&queued), Some((0, true)));
    let files: Vec<_> = (0..IDLE_MAX + 20).map(|i| b.file(&format!("f{i}"))).collect();
    for (ino, inode) in &files {
        b.files.size_and_times(*ino, inode).unwrap();
    }
    let kept = files.iter().filter(|(_, i)| state(i).is_some()).count();
    assert!(kept <= IDLE_MAX, "{kept} containers kept");
    // Rule 6: the queued one (the oldest) is still there, its superblock pending.
    assert_eq!(state(&queued), Some((0, true)));
    b.files.commit_now();
    assert_eq!(b.on_disk("queued"), waits);
}

/// A small file rewritten and closed leaves its older superblock copy for the group commit
/// to punch once the new one is durable. Closing the kept containers meanwhile (the oldest
/// beyond the bound, or a pack round's `close_all`) dropped its state, and the commit then
/// found nothing to settle: the file kept two blocks until written again (CI caught it as
/// `small_files_rewritten_through_the_mount_take_one_block`, now and then).
#[test]
fn closing_kept_containers_leaves_a_file_waiting_to_settle_alone() {
    use std::os::unix::fs::MetadataExt;
    let b = backing("settle");
    let (ino, inode) = b.file("small");
    for round in 0..2 {
        // A lookup of an inode the kernel had forgotten: nothing remembered, so its
        // container is opened and kept (rule 6), and the kept queue names the inode.
        inode.file.open.lock().unwrap().closed = None;
        b.files.size_and_times(ino, &inode).unwrap();
        b.files.attach(&inode, true, true).unwrap();
        let data = format!("round {round}\n").repeat(60).into_bytes();
        b.files
            .with_container(&inode, |c| c.write(0, &data), "write")
            .unwrap();
        b.files.release(ino, &inode, true).unwrap();
        b.files.kept().close_all();
        b.files.commit_now();
        assert_eq!(b.on_disk("small"), data);
    }
    let blocks = std::fs::metadata(b.dir.join("small")).unwrap().blocks() * 512;
    assert_eq!(blocks, 4096, "the older superblock copy is still there");
}

#[test]
fn unmount_writes_out_files_still_open() {
    let b = backing("unmount");
    let (_, inode) = b.file("f");
    let data = text(100_000);
    b.files.attach(&inode, false, true).unwrap();
    b.files
        .with_container(&inode, |c| c.write(0, &data), "write")
        .unwrap();
    b.files.flush_all();
    assert_eq!(b.on_disk("f"), data);
}

/// The backing file's (atime, mtime).
fn times_on_disk(b: &Backing, name: &str) -> ((i64, i64), (i64, i64)) {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(b.dir.join(name)).unwrap();
    ((md.atime(), md.atime_nsec()), (md.mtime(), md.mtime_nsec()))
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

#[test]
fn times_set_explicitly_outlive_the_write_back_and_the_group_commit() {
    let b = backing("times");
    let (ino, inode) = b.file("f");
    let data = text(300_000);
    b.files.attach(&inode, false, true).unwrap();
    b.files
        .change_data(&inode, |c| c.write(0, &data), "write")
        .unwrap();
    // As `cp -p` does: times set before the close, on a file with unwritten data.
    let (atime, mtime) = ((1_000_000_500, 1), (1_000_000_000, 2));
    b.files
        .set_times(&inode, ts(atime.0, atime.1), ts(mtime.0, mtime.1))
        .unwrap();
    b.files.release(ino, &inode, true).unwrap();
    assert_eq!(state(&inode), Some((0, true)));
    // Rule 7: shown by `stat` while queued, and on the backing file after every write-out.
    let (_, set, _) = b.files.size_and_times(ino, &inode).unwrap();
    assert_eq!((set.atime, set.mtime), (Some(atime), Some(mtime)));
    assert_eq!(times_on_disk(&b, "f"), (atime, mtime));
    b.files.commit_now();
    assert_eq!(state(&inode), None);
    assert_eq!(times_on_disk(&b, "f"), (atime, mtime));
    assert_eq!(b.on_disk("f"), data);

    // Set again (mtime only), then the data changes: the write forgets them, and its
    // write-out moves mtime.
    b.files.attach(&inode, false, true).unwrap();
    let omit = ts(0, libc::UTIME_OMIT);
    b.files.set_times(&inode, omit, ts(mtime.0, mtime.1)).unwrap();
    b.files
        .change_data(&inode, |c| c.write(0, b"changed"), "write")
        .unwrap();
    b.files.release(ino, &inode, true).unwrap();
    b.files.commit_now();
    // (atime is not looked at: reading the backing file, as `on_disk` did, moves it.)
    let (_, m) = times_on_disk(&b, "f");
    assert!(m.0 > mtime.0 + 1_000_000, "mtime of the write-out, not {m:?}");
}

/// A file of `len` bytes of text, committed and closed.
fn written(b: &Backing, name: &str, len: usize) -> (u64, Arc<Inode>, Vec<u8>) {
    let (ino, inode) = b.file(name);
    let data = text(len);
    b.files.attach(&inode, false, true).unwrap();
    if let Some(later) = b.files.write(&inode, 0, &data, false).unwrap() {
        b.files.finish_write(later);
    }
    b.files.release(ino, &inode, true).unwrap();
    b.files.commit_now();
    (ino, inode, data)
}

/// [`written`], then with no container kept in memory either (only what `stat`
/// remembers of it).
fn written_closed(b: &Backing, name: &str, len: usize) -> (u64, Arc<Inode>, Vec<u8>) {
    let w = written(b, name, len);
    b.files.idle.close_all();
    assert_eq!(state(&w.1), None);
    w
}

/// Rule 11: a READ that does not continue a stream hands back the rest of its extent —
/// never from a file with a writer or while a request holds stores off, never past the
/// size, and nothing for a READ that continues a stream.
#[test]
fn a_spill_is_the_rest_of_the_extent_and_only_without_writers_or_holds() {
    let b = backing("spill");
    let (ino, inode, data) = written(&b, "f", 1_000_000);
    let ext = 128 << 10;
    let at = 3 * ext + 8192;
    let (got, spill) = b.files.read(ino, &inode, at, 4096, || true).unwrap();
    assert_eq!(&got[..], &data[at as usize..][..4096]);
    let spill = spill.expect("a random READ spills its extent");
    let pieces: Vec<(u64, Vec<u8>)> = spill.pieces().map(|(o, b)| (o, b.to_vec())).collect();
    assert_eq!(
        pieces.iter().map(|(o, b)| (*o, b.len())).collect::<Vec<_>>(),
        vec![(3 * ext, 8192), (at + 4096, ext as usize - 8192 - 4096)]
    );
    for (o, b) in &pieces {
        assert_eq!(b, &data[*o as usize..][..b.len()], "piece at {o}");
    }
    // While it lives, a request that would change the data is told to wait elsewhere.
    assert_eq!(
        b.files.hold_spills(&inode, false).err(),
        Some(fuser::Errno::EWOULDBLOCK)
    );
    drop(spill);
    // The last extent ends at the size; memory short: nothing.
    let last = (data.len() as u64 / ext) * ext;
    let (_, s) = b.files.read(ino, &inode, last + 4096, 4096, || true).unwrap();
    let s = s.expect("spill of the last extent");
    let end = s.pieces().map(|(o, b)| o + b.len() as u64).max().unwrap();
    assert_eq!(end, data.len() as u64);
    drop(s);
    assert!(b
        .files
        .read(ino, &inode, ext + 4096, 4096, || false)
        .unwrap()
        .1
        .is_none());
    // A READ continuing the last one (a stream) spills nothing.
    let (_, s) = b.files.read(ino, &inode, ext + 8192, 4096, || true).unwrap();
    assert!(s.is_none(), "a sequential READ spilled");
    // A writer: nothing.
    b.files.attach(&inode, false, true).unwrap();
    assert!(b
        .files
        .read(ino, &inode, 5 * ext, 4096, || true)
        .unwrap()
        .1
        .is_none());
    b.files.release(ino, &inode, true).unwrap();
    // A hold: nothing, until it goes.
    let hold = b.files.hold_spills(&inode, false).unwrap();
    assert!(b
        .files
        .read(ino, &inode, 6 * ext + 4096, 4096, || true)
        .unwrap()
        .1
        .is_none());
    drop(hold);
    assert!(b
        .files
        .read(ino, &inode, 2 * ext + 4096, 4096, || true)
        .unwrap()
        .1
        .is_some());
}

/// A request that waits for a spill (on a thread of its own) proceeds once the spill is
/// dropped, and no spill starts while it holds.
#[test]
fn a_hold_waits_for_the_spill_under_way() {
    let b = backing("hold");
    let (ino, inode, _) = written(&b, "f", 600_000);
    let (_, spill) = b
        .files
        .read(ino, &inode, 400_000 / 4096 * 4096, 4096, || true)
        .unwrap();
    let spill = spill.unwrap();
    let held = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let h = b.files.hold_spills(&inode, true).unwrap();
            held.store(true, Ordering::SeqCst);
            h
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !held.load(Ordering::SeqCst),
            "the hold did not wait for the spill"
        );
        drop(spill);
        let hold = waiter.join().unwrap();
        assert!(held.load(Ordering::SeqCst));
        assert!(b
            .files
            .read(ino, &inode, 16 * 4096, 4096, || true)
            .unwrap()
            .1
            .is_none());
        drop(hold);
    });
}

/// Rule 7 for owner and mode: on a file with a writer a plain mode and a chown to the
/// owner it has wait in memory (shown by `size_and_times`), a data change does not drop
/// them, and the last close puts them on the backing file; what could change the outcome
/// (setuid bits, another owner, a possible ACL, no writer) is refused and left to the
/// caller, with what waits put on the backing file first by `apply_meta`.
#[test]
fn owner_and_mode_wait_only_where_waiting_cannot_change_the_outcome() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let b = backing("meta");
    let (ino, inode) = b.file("f");
    let mode_on_disk = || std::fs::metadata(b.dir.join("f")).unwrap().permissions().mode() & 0o7777;
    let md = std::fs::metadata(b.dir.join("f")).unwrap();
    let me = (Some(md.uid()), Some(md.gid()));
    // No writer: done by the caller.
    assert!(!b
        .files
        .defer_meta(&inode, Some(0o600), me, true, false)
        .unwrap()
        .waits());
    b.files.attach(&inode, false, true).unwrap();
    // A possible ACL, setuid/setgid bits, another owner: done by the caller.
    assert!(!b
        .files
        .defer_meta(&inode, Some(0o600), (None, None), false, false)
        .unwrap()
        .waits());
    assert!(!b
        .files
        .defer_meta(&inode, Some(0o4755), (None, None), true, false)
        .unwrap()
        .waits());
    assert!(!b
        .files
        .defer_meta(&inode, None, (Some(md.uid() + 1), None), true, false)
        .unwrap()
        .waits());
    // The owner it has, then a plain mode: they wait, and the attributes read for the
    // decision come back for the reply (no second call on the backing file).
    match b.files.defer_meta(&inode, None, me, true, false).unwrap() {
        Deferred::Waits(Some(st)) => {
            assert_eq!(
                (st.st_ino, st.st_mode, st.st_uid),
                (md.ino(), md.mode(), md.uid())
            );
            assert_eq!(
                (st.st_size, st.st_mtime, st.st_mtime_nsec),
                (md.size() as i64, md.mtime(), md.mtime_nsec())
            );
            assert_eq!(st.st_dev, md.dev());
        }
        _ => panic!("a chown to the owner it has waits, with the attributes read"),
    }
    assert!(b
        .files
        .defer_meta(&inode, Some(0o751), (None, None), true, false)
        .unwrap()
        .waits());
    let (_, times, meta) = b.files.size_and_times(ino, &inode).unwrap();
    assert_eq!(meta.mode, Some(0o751));
    assert_eq!(meta.owner, Some((md.uid(), md.gid())));
    assert!(times.ctime.is_some(), "the change time shown meanwhile");
    assert_eq!(mode_on_disk(), 0o644, "not on the backing file yet");
    // A change of the data keeps them (unlike times set explicitly).
    b.files
        .change_data(&inode, |c| c.write(0, b"data"), "write")
        .unwrap();
    assert_eq!(mode_on_disk(), 0o751, "our next call on the file put them there");
    assert!(b
        .files
        .defer_meta(&inode, Some(0o640), me, true, false)
        .unwrap()
        .waits());
    b.files.apply_meta(&inode);
    assert_eq!(mode_on_disk(), 0o640, "apply_meta puts them there at once");
    assert!(b
        .files
        .defer_meta(&inode, Some(0o600), (None, None), true, false)
        .unwrap()
        .waits());
    b.files.release(ino, &inode, true).unwrap();
    assert_eq!(mode_on_disk(), 0o600, "the last close puts them there");
    b.files.commit_now();
    assert_eq!(b.on_disk("f"), b"data");
}

/// Gives `b` packs that keep change times in 64-byte records (as a mount on a backing
/// filesystem that has room for them), its `Files` using them.
fn with_packs(b: &mut Backing) -> Arc<squeezefs_container::pack::Packs> {
    use squeezefs_container::pack::{FsPackDir, Packs};
    let packs = Arc::new(Packs::new(Box::new(FsPackDir::new(&b.dir, true)), true, 1 << 20).unwrap());
    packs.set_keep_ctime(true);
    b.files = Files::new(
        b.inodes.clone(),
        Options {
            packs: Some(packs.clone()),
            ..Options::default()
        },
        false,
    );
    packs
}

/// A reclaim round moving the closed packed file `name` of `b` (every pack retired first,
/// as the background pass does): its record is replaced, keeping the change time it showed.
fn reclaim_moves(b: &Backing, packs: &Arc<squeezefs_container::pack::Packs>, name: &str) {
    packs.retire_any(&packs.dir().list().unwrap().into_iter().collect());
    reclaim_moves_retired(b, packs, name);
}

/// A reclaim round of the packs retired so far (those holding `name` among them), moving
/// the closed packed file `name` only.
fn reclaim_moves_retired(b: &Backing, packs: &Arc<squeezefs_container::pack::Packs>, name: &str) {
    use squeezefs_container::pack::reclaim::{reclaim, Garbage, LiveFile, Settle};
    use squeezefs_container::pack::record::read_record;
    use squeezefs_container::Storage;
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(b.dir.join(name))
    };
    let loc = read_record(&FileStorage::new(open().unwrap())).unwrap().unwrap();
    let live = [LiveFile {
        name: name.into(),
        loc,
        id: FileStorage::new(open().unwrap()).identity().unwrap(),
        target: None,
    }];
    let r = reclaim(
        packs,
        &packs.reclaimable().unwrap(),
        &live,
        &mut Garbage,
        |_| Ok(FileStorage::new(open()?)),
        |ds: &[FileStorage]| ds.iter().try_for_each(|d| Ok(d.sync_all()?)),
        Settle::default,
    )
    .unwrap();
    assert_eq!(r.files_moved, 1);
}

/// A reclaim moves a closed packed file (its record replaced, which moves the backing
/// file's ctime): `stat` goes on showing the change time it showed, also where what it
/// remembered of the closed file predates the move; a change of metadata then drops the
/// kept time (a 56-byte record again) and shows the backing file's.
#[test]
fn a_closed_packed_file_moved_by_a_reclaim_shows_the_change_time_it_showed() {
    use squeezefs_container::pack::LOCATION_XATTR;
    use squeezefs_container::Storage;
    let mut b = backing("reclaim-ctime");
    let packs = with_packs(&mut b);
    let (ino, inode) = b.file("f");
    let data = text(3000);
    b.files
        .with_container(&inode, |c| c.write(0, &data), "write")
        .unwrap();
    b.files.commit_now();
    let backing = || FileStorage::new(std::fs::File::open(b.dir.join("f")).unwrap());
    let ctime = |st: &FileStorage| st.change_time().unwrap().unwrap();
    let shown = |b: &Backing| {
        let (size, t, _) = b.files.size_and_times(ino, &inode).unwrap();
        assert_eq!(size, data.len() as u64);
        t.ctime.map(|(s, n)| s as u64 * 1_000_000_000 + n as u64)
    };
    // Stat'ed (its container kept, then closed as a reclaim round does first): what the
    // file's `Closed` remembers has no kept time.
    assert_eq!(shown(&b), None);
    b.files.idle.close_all();
    assert_eq!(state(&inode), None);
    assert_eq!(shown(&b), None);
    // A reclaim round moving the file (every pack retired first, as the background pass
    // does).
    let round = |b: &Backing| reclaim_moves(b, &packs, "f");
    let before = ctime(&backing());
    std::thread::sleep(std::time::Duration::from_millis(20));
    // The round (its pack is retired first, as the background pass does).
    round(&b);
    assert_ne!(
        ctime(&backing()),
        before,
        "the record's replacement moved the backing ctime"
    );
    assert_eq!(
        shown(&b),
        Some(before),
        "stat shows the change time the file showed"
    );
    assert_eq!(backing().get_xattr(LOCATION_XATTR).unwrap().unwrap().len(), 64);
    // A change of metadata drops it.
    b.files.drop_kept_times(&inode).unwrap();
    assert_eq!(backing().get_xattr(LOCATION_XATTR).unwrap().unwrap().len(), 56);
    assert_eq!(shown(&b), None);
    b.files.idle.close_all();
    assert_eq!(shown(&b), None);
    assert_eq!(b.on_disk_packed(&packs, "f"), data);

    // A chmod waiting in memory (a file open for writing) while a round moves the record
    // (which keeps the ctime from before the chmod): once the chmod goes on the backing
    // file, the kept time goes too, and stat shows the chmod's change time.
    b.files.attach(&inode, false, true).unwrap();
    b.files
        .with_container(&inode, |c| c.read(0, 10).map(|_| ()), "read")
        .unwrap();
    assert!(b
        .files
        .defer_meta(&inode, Some(0o600), (None, None), true, false)
        .unwrap()
        .waits());
    std::thread::sleep(std::time::Duration::from_millis(20));
    round(&b);
    assert_eq!(backing().get_xattr(LOCATION_XATTR).unwrap().unwrap().len(), 64);
    b.files.apply_meta(&inode);
    b.files.release(ino, &inode, true).unwrap();
    b.files.commit_now();
    b.files.idle.close_all();
    assert_eq!(shown(&b), None, "the chmod's ctime, not one kept from before it");
    assert_eq!(backing().get_xattr(LOCATION_XATTR).unwrap().unwrap().len(), 56);
    assert_eq!(b.on_disk_packed(&packs, "f"), data);
}

/// `stat` of a closed file opens a container and keeps it (`with_kept`), while a change of
/// metadata of the same file drops the change time its record keeps: the change must be
/// made on the container `stat` keeps, never on a second one beside it, or `stat` goes on
/// showing the dropped time (issue 43, review E of issue 30: the two were both opened
/// while `with_kept` held only the pass's exclusion).
#[test]
fn a_change_racing_a_stat_that_opens_the_file_is_not_lost() {
    use squeezefs_container::pack::LOCATION_XATTR;
    use squeezefs_container::Storage;
    let mut b = backing("kept-race");
    let packs = with_packs(&mut b);
    let (ino, inode) = b.file("f");
    let data = text(3000);
    b.files
        .with_container(&inode, |c| c.write(0, &data), "write")
        .unwrap();
    b.files.commit_now();
    b.files.idle.close_all();
    let backing = || FileStorage::new(std::fs::File::open(b.dir.join("f")).unwrap());
    // A reclaim round moves the closed file: its record keeps the change time it showed,
    // and what `stat` remembered of it is no longer current.
    std::thread::sleep(std::time::Duration::from_millis(20));
    reclaim_moves(&b, &packs, "f");
    assert_eq!(backing().get_xattr(LOCATION_XATTR).unwrap().unwrap().len(), 64);
    assert_eq!(state(&inode), None);
    let shown = |b: &Backing| b.files.size_and_times(ino, &inode).unwrap().1.ctime;

    // `stat` opens the file; while its container is open, a chmod's first step drops the
    // kept change time.
    let paused = super::access::tests_pause::arm(&inode);
    std::thread::scope(|s| {
        let stat = s.spawn(|| shown(&b));
        paused
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("stat opened the file");
        b.files.drop_kept_times(&inode).unwrap();
        stat.join().unwrap();
    });
    assert_eq!(backing().get_xattr(LOCATION_XATTR).unwrap().unwrap().len(), 56);
    assert_eq!(shown(&b), None, "the dropped change time is not shown");
    b.files.idle.close_all();
    assert_eq!(
        shown(&b),
        None,
        "nor remembered once the kept container is closed"
    );
    assert_eq!(b.on_disk_packed(&packs, "f"), data);
}

/// A reclaim round moves one closed packed file: what `stat` remembers of another, which
/// the round left where it was, stays true and is used (no container opened for its next
/// `stat`), and so does an open container's record of it; the moved file's is read again
/// (issue 43: every remembered state of a packed file was dropped by any move).
#[test]
fn a_reclaim_round_forgets_only_what_it_moved() {
    let mut b = backing("reclaim-others");
    let packs = with_packs(&mut b);
    // `f` in a pack retired before `g` and `h` go to the next one, which stays in use:
    // the round moves `f` alone.
    let (_, f, _) = written_closed(&b, "f", 3000);
    packs.retire_any(&packs.dir().list().unwrap().into_iter().collect());
    let (g_ino, g, _) = written_closed(&b, "g", 2000);
    let (h_ino, h, _) = written_closed(&b, "h", 1000);
    // `h` open, its container's record read before the round.
    b.files.attach(&h, false, false).unwrap();
    b.files
        .with_container(&h, |c| c.read(0, 10).map(|_| ()), "read")
        .unwrap();
    assert!(b.files.closed(&f).is_some() && b.files.closed(&g).is_some());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let moves = packs.moves();
    reclaim_moves_retired(&b, &packs, "f");
    assert!(packs.moves() > moves);
    assert!(
        b.files.closed(&f).is_none(),
        "the moved file's record is read again"
    );
    assert!(
        b.files.closed(&g).is_some(),
        "what stat remembers of a file the round did not move stays"
    );
    assert_eq!(b.files.closed(&g).unwrap().moves(), Some(packs.moves()));
    // Its `stat` opens no container (none is kept after it).
    let (size, t, _) = b.files.size_and_times(g_ino, &g).unwrap();
    assert_eq!((size, t.ctime), (2000, None));
    assert_eq!(state(&g), None);
    // The open file's record is not read again either, and says the same.
    assert_eq!(b.files.size_and_times(h_ino, &h).unwrap().0, 1000);
    assert!(
        packs.unmoved_since(h.key, moves).is_some(),
        "the log knows the round left h"
    );
    assert!(packs.unmoved_since(f.key, moves).is_none());
    b.files.release(h_ino, &h, false).unwrap();
}

/// A call on a file with no state runs on a container of its own and says what `stat`
/// shows from then on, unless a state came and went meanwhile (an open, a write, a
/// close): then the newer word stays, or the file is read again, never the older one
/// (the review of issue 43's one lock a file: the old word was stored after the new).
#[test]
fn a_call_without_state_does_not_replace_what_a_newer_state_said() {
    let b = backing("stateless-race");
    let (ino, inode, data) = written_closed(&b, "f", 3000);
    let paused = super::access::tests_pause::arm(&inode);
    std::thread::scope(|s| {
        // Its size, on a container of its own, with the old word.
        let look = s.spawn(|| b.files.with_container(&inode, |c| c.size(), "size").unwrap());
        paused
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the call ran");
        // Meanwhile: opened, written, closed and committed (the state goes, and says the
        // new size).
        b.files.attach(&inode, false, true).unwrap();
        b.files
            .with_container(&inode, |c| c.write(3000, &data), "write")
            .unwrap();
        b.files.release(ino, &inode, true).unwrap();
        b.files.commit_now();
        assert_eq!(state(&inode), None);
        assert_eq!(look.join().unwrap(), 3000);
    });
    assert_eq!(b.files.size_and_times(ino, &inode).unwrap().0, 6000);
}
