//! The per-file path (issue 15): what the kernel asks the daemon for, per file, on a real
//! mount. The statistics file counts the requests that reach the daemon (`requests`). Mounts
//! that write name `extent_size=128K`: these tests count 128 KiB extents and containers, and
//! files written whole would otherwise take 1 MiB extents or go to a pack
//! (`container/grow.rs`).

#![deny(unsafe_code)]

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};

use common::{scratch, Mount};
use serde_json::Value;

/// `drop_caches` empties every file's page cache, other tests' mounts included: a test that
/// drops it and a test that counts what the cache serves take turns (the tests of one
/// binary run in parallel).
static PAGE_CACHE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// (DAMON's proactive reclaim is paused meanwhile: `common::DamonPaused`. The tuple drops
/// its fields in order: DAMON back on, then the turn handed on.)
fn page_cache_turn() -> (common::DamonPaused, std::sync::MutexGuard<'static, ()>) {
    let turn = PAGE_CACHE.lock().unwrap_or_else(|e| e.into_inner());
    (common::DamonPaused::new(), turn)
}

/// The mount's statistics document.
fn stats_doc(m: &Mount) -> Value {
    serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap()
}

fn requests(m: &Mount) -> Value {
    stats_doc(m)["requests"].clone()
}

fn reads(m: &Mount) -> u64 {
    requests(m)["read"].as_u64().expect("requests.read")
}

/// A file read once is read again from the kernel's page cache, in a new open: no READ
/// reaches the daemon (FOPEN_KEEP_CACHE). Changes made through the mount — a write by
/// another handle, a truncate by path, a rename over it — are seen at once all the same,
/// packed or not.
#[test]
fn a_re_read_is_served_by_the_page_cache_and_never_stale() {
    let _turn = page_cache_turn();
    for opts in [
        "compress=zstd:1,extent_size=128K",
        "compress=zstd:1,extent_size=128K,nopack",
    ] {
        let dir = scratch("keep-cache");
        let m = Mount::new(&dir, opts);
        let p = m.path("f");
        let data: Vec<u8> = (0..300_000u32)
            .flat_map(|i| format!("{i} ").into_bytes())
            .collect();
        fs::write(&p, &data).unwrap();
        let small = m.path("small");
        fs::write(&small, b"a small file").unwrap();
        // Remount: nothing cached, everything committed.
        m.unmount();
        let m = Mount::new(&dir, opts);
        assert_eq!(fs::read(&p).unwrap(), data);
        assert_eq!(fs::read(&small).unwrap(), b"a small file");
        let before = reads(&m);
        assert!(before > 0, "{opts}: the first read reached the daemon");
        for _ in 0..3 {
            assert_eq!(fs::read(&p).unwrap(), data);
            assert_eq!(fs::read(&small).unwrap(), b"a small file");
        }
        assert_eq!(reads(&m), before, "{opts}: re-reads sent READ: {}", requests(&m));

        // Written through another handle: the cache follows.
        let mut f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.seek(SeekFrom::Start(1000)).unwrap();
        f.write_all(b"CHANGED").unwrap();
        drop(f);
        let mut want = data.clone();
        want[1000..1007].copy_from_slice(b"CHANGED");
        assert_eq!(fs::read(&p).unwrap(), want, "{opts}");
        // Truncated by path, then grown: zeros, not the old bytes.
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(10)
            .unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(20_000)
            .unwrap();
        let mut want = want[..10].to_vec();
        want.resize(20_000, 0);
        assert_eq!(fs::read(&p).unwrap(), want, "{opts}");
        // Replaced by a rename: the new file's bytes.
        fs::write(m.path("other"), b"the other file").unwrap();
        fs::rename(m.path("other"), &small).unwrap();
        assert_eq!(fs::read(&small).unwrap(), b"the other file", "{opts}");
        // And all of it after a remount (the daemon's copy, not the kernel's).
        m.unmount();
        let m = Mount::new(&dir, opts);
        assert_eq!(fs::read(&p).unwrap(), want, "{opts}");
        assert_eq!(fs::read(&small).unwrap(), b"the other file", "{opts}");
        m.unmount();
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// A name that does not exist is looked up once, not at every `stat` (a negative entry
/// with a timeout); made through the mount it is there at once, and gone again at once.
#[test]
fn a_missing_name_is_asked_for_once_and_appears_when_made() {
    let dir = scratch("negative");
    let m = Mount::new(&dir, "");
    let p = m.path("not-yet");
    let lookups = |m: &Mount| requests(m)["lookup"].as_u64().unwrap();
    assert!(fs::metadata(&p).is_err());
    let before = lookups(&m);
    for _ in 0..100 {
        assert_eq!(fs::metadata(&p).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }
    assert_eq!(lookups(&m), before, "a cached miss sends no LOOKUP");
    // Made through the mount, by each way a name appears.
    fs::write(&p, b"here").unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"here");
    fs::remove_file(&p).unwrap();
    assert!(fs::metadata(&p).is_err());
    fs::create_dir(&p).unwrap();
    assert!(fs::metadata(&p).unwrap().is_dir());
    fs::remove_dir(&p).unwrap();
    fs::write(m.path("elsewhere"), b"moved").unwrap();
    assert!(fs::metadata(&p).is_err());
    fs::rename(m.path("elsewhere"), &p).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"moved");
    assert!(fs::metadata(m.path("elsewhere")).is_err());
    fs::hard_link(&p, m.path("elsewhere")).unwrap();
    assert_eq!(fs::read(m.path("elsewhere")).unwrap(), b"moved");
    std::os::unix::fs::symlink("not-yet", m.path("link")).unwrap();
    assert_eq!(fs::read(m.path("link")).unwrap(), b"moved");
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// A read-only open of a file nobody has open opens nothing until its first READ (rule 9
/// of `lifecycle::state`); such a handle still reads everything, from the page cache or
/// not, also after the file is unlinked, and while another handle writes.
#[test]
fn a_lazy_read_only_handle_reads_after_unlink_and_beside_a_writer() {
    let _turn = page_cache_turn();
    common::require_root("this test needs root to drop the page cache (CI runs as root)");
    for opts in [
        "compress=zstd:1,extent_size=128K",
        "compress=zstd:1,extent_size=128K,nopack",
    ] {
        let dir = scratch("lazy-open");
        let m = Mount::new(&dir, opts);
        let data: Vec<u8> = (0..400_000u32)
            .flat_map(|i| format!("{i},").into_bytes())
            .collect();
        let small = b"small and packed".to_vec();
        fs::write(m.path("big"), &data).unwrap();
        fs::write(m.path("small"), &small).unwrap();
        m.unmount();
        let m = Mount::new(&dir, opts);
        // Read once and closed: no state left; then the kernel forgets the pages.
        assert_eq!(fs::read(m.path("big")).unwrap(), data);
        assert_eq!(fs::read(m.path("small")).unwrap(), small);
        nix::unistd::sync();
        fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
        let opens = requests(&m)["open"].as_u64().unwrap();
        let big = fs::File::open(m.path("big")).unwrap();
        let sm = fs::File::open(m.path("small")).unwrap();
        assert_eq!(requests(&m)["open"].as_u64().unwrap(), opens + 2);
        fs::remove_file(m.path("big")).unwrap();
        fs::remove_file(m.path("small")).unwrap();
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &big, &mut got).unwrap();
        assert!(got == data, "{opts}: an unlinked file read through a lazy handle");
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &sm, &mut got).unwrap();
        assert_eq!(got, small, "{opts}");
        drop((big, sm));

        // Beside a writer: the reader sees what the writer wrote.
        fs::write(m.path("shared"), &data).unwrap();
        m.unmount();
        let m = Mount::new(&dir, opts);
        assert_eq!(fs::read(m.path("shared")).unwrap(), data);
        let reader = fs::File::open(m.path("shared")).unwrap();
        let mut writer = fs::OpenOptions::new().write(true).open(m.path("shared")).unwrap();
        writer.seek(SeekFrom::Start(500_000)).unwrap();
        writer.write_all(b"WRITTEN").unwrap();
        writer.sync_all().unwrap();
        drop(writer);
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &reader, &mut got).unwrap();
        assert_eq!(&got[500_000..500_007], b"WRITTEN", "{opts}");
        drop(reader);
        m.unmount();
        let m = Mount::new(&dir, opts);
        assert_eq!(&fs::read(m.path("shared")).unwrap()[500_000..500_007], b"WRITTEN");
        m.unmount();
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// `chattr` on a backing file (root; the backing directory must be on a filesystem with
/// the immutable flag, as ext4, xfs and btrfs have).
fn chattr(flag: &str, p: &std::path::Path) {
    let st = std::process::Command::new("chattr")
        .arg(flag)
        .arg(p)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "chattr {flag} {}: needs root and ext4/xfs/btrfs",
        p.display()
    );
}

/// `close` does not wait for the daemon's write-out: FLUSH is answered ENOSYS once and
/// never sent again (one round trip less per close, read-only ones too). A write-out that
/// then fails — after `close` returned 0 — is not lost in silence: the file's next `fsync`
/// reports it, once (rule 10 in `lifecycle::state`). The failure is made by marking the
/// backing file immutable before the close.
#[test]
fn close_sends_no_flush_and_a_later_write_out_error_reaches_fsync() {
    for opts in [
        "compress=zstd:1,extent_size=128K",
        "compress=zstd:1,extent_size=128K,nopack",
    ] {
        let dir = scratch("noflush");
        let m = Mount::new(&dir, opts);
        for i in 0..20 {
            let p = m.path(&format!("f{i}"));
            fs::write(&p, format!("file {i}")).unwrap();
            assert_eq!(fs::read(&p).unwrap(), format!("file {i}").as_bytes());
        }
        let flushes = requests(&m)["flush"].as_u64().expect("requests.flush");
        assert!(flushes <= 1, "{opts}: 40 closes sent {flushes} FLUSH");

        let p = m.path("doomed");
        let mut f = fs::File::create(&p).unwrap();
        f.write_all(&[7u8; 3000]).unwrap();
        let released = requests(&m)["release"].as_u64().unwrap();
        let backing = dir.join("backing/doomed");
        chattr("+i", &backing);
        assert_eq!(
            common::sys::close(f),
            0,
            "{opts}: close does not wait for the write-out"
        );
        // RELEASE comes after close returns; reading the statistics file also runs the
        // group commit of whatever that queued.
        let start = std::time::Instant::now();
        while requests(&m)["release"].as_u64().unwrap() == released {
            assert!(start.elapsed().as_secs() < 10, "{opts}: no RELEASE");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = requests(&m);
        chattr("-i", &backing);
        let f = fs::File::open(&p).unwrap();
        let err = f
            .sync_all()
            .expect_err("the failed write-out reaches the next fsync");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{opts}: {err}");
        f.sync_all().expect("and is reported once");
        drop(f);
        m.unmount();
        let _ = fs::remove_dir_all(&dir);
    }
}

/// A walk of a directory (`ls -l`, `find`, `du`) after a remount sends no LOOKUP per file:
/// the listing comes with each entry's attributes (READDIRPLUS), logical sizes included,
/// packed or not. A file whose superblock is damaged is still listed, and its `stat` gets
/// EIO rather than a size.
#[test]
fn a_walk_sends_no_lookup_per_file_and_lists_damaged_files() {
    use squeezefs_container::format::{sb_offset, MAGIC};
    for opts in [
        "compress=zstd:1,extent_size=128K",
        "compress=zstd:1,extent_size=128K,nopack",
    ] {
        let dir = scratch("readdirplus");
        let m = Mount::new(&dir, opts);
        fs::create_dir(m.path("d")).unwrap();
        let mut want = std::collections::BTreeMap::new();
        for i in 0..120u64 {
            let data = format!("file {i} ").repeat(1 + i as usize * 37).into_bytes();
            fs::write(m.path(&format!("d/f{i:03}")), &data).unwrap();
            want.insert(format!("f{i:03}"), data.len() as u64);
        }
        // Three extents: a container with its own superblock, packed or not.
        let big = vec![b'x'; 3 << 17];
        fs::write(m.path("d/damaged"), &big).unwrap();
        m.unmount();
        // Both superblock copies damaged past their magic: the checksum fails.
        let backing = dir.join("backing/d/damaged");
        let mut raw = fs::read(&backing).unwrap();
        for slot in 0..2u8 {
            let o = sb_offset(slot) as usize;
            if raw[o..o + 8] == MAGIC {
                raw[o + 40] ^= 0x55;
            }
        }
        fs::write(&backing, &raw).unwrap();

        let m = Mount::new(&dir, opts);
        let mut seen = std::collections::BTreeMap::new();
        let mut damaged = None;
        for e in fs::read_dir(m.path("d")).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if name == "damaged" {
                damaged = Some(e.metadata().map(|_| ()));
                continue;
            }
            seen.insert(name, e.metadata().unwrap().len());
        }
        assert_eq!(seen, want, "{opts}: names and logical sizes");
        let err = damaged
            .expect("the damaged file is listed")
            .expect_err("its stat fails");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{opts}: {err}");
        let r = requests(&m);
        let lookups = r["lookup"].as_u64().unwrap();
        assert!(r["readdirplus"].as_u64().unwrap() > 0, "{opts}: {r}");
        // The mount root's `d` and the damaged file (asked again: no timeout) only.
        assert!(
            lookups <= 3,
            "{opts}: a walk of 121 files sent {lookups} LOOKUP: {r}"
        );
        // What the walk learned is what a later open reads.
        for (name, len) in &want {
            assert_eq!(fs::read(m.path(&format!("d/{name}"))).unwrap().len() as u64, *len);
        }
        m.unmount();
        let _ = fs::remove_dir_all(&dir);
    }
}

/// The `reads` counters of the statistics file: extents loaded by their READ, and ahead.
fn loads(m: &Mount) -> (u64, u64, u64) {
    let doc = stats_doc(m);
    let r = &doc["reads"];
    let get = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("reads.{k} in {r}"));
    (
        get("extents_loaded"),
        get("ahead_installed"),
        get("ahead_discarded"),
    )
}

/// A large file read from start to end is decoded ahead of its reader (the daemon's
/// read-ahead): its READs find their extents loaded. And a writer beside the reader is
/// never undone by bytes loaded ahead before its writes: after both, the file holds exactly
/// what was written, read through the daemon's own cache (the writer keeps the file's state
/// open) after the kernel's is dropped.
#[test]
fn a_sequential_read_is_loaded_ahead_and_a_writer_beside_it_is_never_undone() {
    common::require_root("drops the page cache");
    let _turn = page_cache_turn();
    let dir = scratch("read-ahead");
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    let p = m.path("big");
    const EXTENTS: usize = 128;
    let data: Vec<u8> = (0..)
        .flat_map(|i: u32| format!("line {i} of a large file\n").into_bytes())
        .take(EXTENTS << 17)
        .collect();
    fs::write(&p, &data).unwrap();
    m.unmount();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    assert_eq!(fs::read(&p).unwrap(), data);
    let (loaded, ahead, _) = loads(&m);
    assert!(
        ahead >= EXTENTS as u64 / 2 && loaded <= EXTENTS as u64 / 4,
        "a sequential read was not loaded ahead: {loaded} extents loaded by READs, {ahead} ahead"
    );

    // A writer rewrites pieces while a reader streams the file again and again.
    let mut want = data.clone();
    let mut w = fs::OpenOptions::new().write(true).open(&p).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut passes = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || passes < 3 {
                fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
                assert_eq!(fs::read(&p).unwrap().len(), EXTENTS << 17);
                passes += 1;
            }
            passes
        })
    };
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..60u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % (want.len() as u64 - 200_000)) as usize;
        let len = 1 + (x >> 40) as usize % 150_000;
        let piece: Vec<u8> = (0..len).map(|i| b'a' + ((i as u32 + round) % 26) as u8).collect();
        std::os::unix::fs::FileExt::write_all_at(&w, &piece, off as u64).unwrap();
        want[off..off + len].copy_from_slice(&piece);
        if round % 10 == 9 {
            w.sync_all().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    w.flush().unwrap();
    w.sync_all().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let passes = reader.join().unwrap();
    fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
    let got = fs::read(&p).unwrap();
    let first_bad = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        first_bad.is_none(),
        "wrong bytes from offset {first_bad:?} after {passes} passes"
    );
    assert_eq!(got.len(), want.len());
    drop(w);
    m.unmount();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    assert!(fs::read(&p).unwrap() == want, "wrong bytes after a remount");
    m.unmount();
    common::check_clean(&dir.join("backing"), "after the read-ahead test");
    fs::remove_dir_all(&dir).unwrap();
}

/// `page_cache` of the statistics file: stores sent and bytes they carried.
fn stored(m: &Mount) -> (u64, u64) {
    let doc = stats_doc(m);
    let p = &doc["page_cache"];
    (p["stores"].as_u64().unwrap(), p["bytes"].as_u64().unwrap())
}

/// The bytes the store thread has handed the kernel, once they reach `want` (the store
/// follows the READ's reply: it is given up to a second), or as they are then.
fn stored_bytes_once(m: &Mount, want: u64) -> u64 {
    let mut bytes = stored(m).1;
    for _ in 0..200 {
        if bytes == want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        bytes = stored(m).1;
    }
    bytes
}

/// Lines of text, 16 extents of 128 KiB.
fn sixteen_extents() -> Vec<u8> {
    (0..)
        .flat_map(|i: u32| format!("line {i} of a file read at random\n").into_bytes())
        .take(16 << 17)
        .collect()
}

/// A random 4 KiB read decodes its extent; the daemon hands the kernel the rest of it
/// (rule 11, `FUSE_NOTIFY_STORE`), as btrfs keeps every page it decompressed: the other
/// pages of that extent are then cached and read with no READ, and no page of another
/// extent is. With `nofill_cache` only the page asked for is cached.
#[test]
fn a_random_read_puts_its_whole_extent_in_the_page_cache() {
    use std::os::unix::fs::FileExt;
    let _turn = page_cache_turn();
    let dir = scratch("fill-cache");
    let data = sixteen_extents();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    fs::write(m.path("f"), &data).unwrap();
    m.unmount();
    for (opts, fills) in [
        ("compress=zstd:1,extent_size=128K", true),
        ("compress=zstd:1,extent_size=128K,nofill_cache", false),
    ] {
        // A new mount: a new inode in the kernel, nothing of the file cached.
        let m = Mount::new(&dir, opts);
        let f = fs::File::open(m.path("f")).unwrap();
        common::sys::fadvise(&f, libc::POSIX_FADV_RANDOM);
        let ext = 5 << 17;
        let mut page = vec![0u8; 4096];
        f.read_exact_at(&mut page, ext + 8192).unwrap();
        assert_eq!(page, data[(ext + 8192) as usize..][..4096]);
        // The store follows the READ's reply: give it a moment.
        let cached_pages = || {
            let cached = common::sys::pages_cached(&f, data.len());
            (0..cached.len()).filter(|&p| cached[p]).collect::<Vec<usize>>()
        };
        if fills {
            stored_bytes_once(&m, (128 << 10) - 4096);
        }
        let in_ext = cached_pages();
        if fills {
            let want: Vec<usize> = (160..192).collect();
            assert_eq!(in_ext, want, "{opts}: pages cached after one read");
            let (stores, bytes) = stored(&m);
            assert!(
                stores >= 1 && bytes == (128 << 10) - 4096,
                "{opts}: {stores} stores, {bytes} bytes"
            );
        } else {
            assert_eq!(in_ext, vec![162], "{opts}: pages cached after one read");
            assert_eq!(stored(&m), (0, 0), "{opts}");
        }
        // The rest of the extent reads right; with the extent stored, no READ is sent.
        let before = reads(&m);
        let mut rest = vec![0u8; 128 << 10];
        f.read_exact_at(&mut rest, ext).unwrap();
        assert_eq!(rest, data[ext as usize..][..128 << 10], "{opts}");
        if fills {
            assert_eq!(
                reads(&m),
                before,
                "{opts}: the stored extent was read again: {}",
                requests(&m)
            );
        }
        drop(f);
        m.unmount();
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// A store never overwrites newer bytes (rule 11): readers at random with their pages
/// dropped again and again (`POSIX_FADV_DONTNEED`), so that their READs keep storing
/// extents, beside writers that open, write and close, and a truncate by path. At the end
/// the page cache (not dropped) and, after a remount, the disk hold exactly what was
/// written.
#[test]
fn stores_beside_writers_never_bring_back_old_bytes() {
    use std::os::unix::fs::FileExt;
    let _turn = page_cache_turn();
    let dir = scratch("fill-race");
    let mut want = sixteen_extents();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    let p = m.path("f");
    fs::write(&p, &want).unwrap();
    m.unmount();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                let f = fs::File::open(&p).unwrap();
                common::sys::fadvise(&f, libc::POSIX_FADV_RANDOM);
                let mut rng = common::Rng(0x9e37_79b9 + t);
                let mut buf = vec![0u8; 4096];
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if n.is_multiple_of(16) {
                        common::sys::fadvise(&f, libc::POSIX_FADV_DONTNEED);
                    }
                    let off = rng.below(16 << 5) << 12;
                    let _ = f.read_at(&mut buf, off).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut rng = common::Rng(0x51ed_270b);
    for round in 0..150u32 {
        let w = fs::OpenOptions::new().write(true).open(&p).unwrap();
        for _ in 0..4 {
            let off = rng.below(want.len() as u64 - 9000) as usize;
            let len = 1 + rng.below(9000) as usize;
            let piece: Vec<u8> = (0..len).map(|i| b'A' + ((i as u32 + round) % 26) as u8).collect();
            w.write_all_at(&piece, off as u64).unwrap();
            want[off..off + len].copy_from_slice(&piece);
        }
        drop(w);
        if round % 40 == 39 {
            // Shorter by path (no writer handle), then back to its length with zeros.
            let cut = want.len() - 70_000 - round as usize;
            fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(cut as u64)
                .unwrap();
            let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.set_len(want.len() as u64).unwrap();
            want[cut..].fill(0);
        }
        // Readers store only while no writer is open: give them room.
        std::thread::sleep(std::time::Duration::from_millis(8));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads_done: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let got = fs::read(&p).unwrap();
    let first_bad = got.iter().zip(&want).position(|(a, b)| a != b);
    let (stores, _) = stored(&m);
    assert!(
        first_bad.is_none() && got.len() == want.len(),
        "the page cache holds wrong bytes from {first_bad:?} ({reads_done} random reads, {stores} stores)"
    );
    assert!(
        stores > 50,
        "the readers' READs stored only {stores} extents ({reads_done} reads)"
    );
    m.unmount();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    assert!(fs::read(&p).unwrap() == want, "wrong bytes after a remount");
    m.unmount();
    common::check_clean(&dir.join("backing"), "after the store race");
    fs::remove_dir_all(&dir).unwrap();
}

/// `ls -l` asks every file for its SELinux label (libselinux) and its access ACL (gnulib).
/// Where the backing file has no label the answer is "not supported", which `ls` remembers
/// for the whole device: one request per run instead of one per file. A label the backing
/// file has is still shown, and ACL queries still say "none" (ENODATA, which the kernel
/// caches and permission checks need).
#[test]
fn ls_l_asks_for_the_selinux_label_once_per_run() {
    let dir = scratch("selinux");
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..200 {
        fs::write(m.path(&format!("d/f{i}")), format!("file {i}")).unwrap();
    }
    let getxattrs = || requests(&m)["getxattr"].as_u64().unwrap();
    let before = getxattrs();
    let out = std::process::Command::new("ls")
        .arg("-l")
        .arg(m.path("d"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let asked = getxattrs() - before;
    assert!(
        asked <= 200 + 5,
        "one `ls -l` of 200 files sent {asked} GETXATTR: {}",
        requests(&m)
    );
    let f = m.path("d/f1");
    let mut buf = [0u8; 64];
    assert_eq!(common::sys::getxattr(&f, c"security.selinux", &mut buf), -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EOPNOTSUPP)
    );
    assert_eq!(
        common::sys::getxattr(&f, c"system.posix_acl_access", &mut buf),
        -1
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENODATA)
    );
    // "No ACL" was remembered: an ACL set through the mount is seen at once, by getfacl
    // and by the kernel's permission checks alike, and removing it is seen too.
    let acl = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let fp = f.to_str().unwrap();
    // (`touch`: a SETATTR makes the kernel forget the ACLs it cached, so the next query
    // reaches the daemon.)
    let fresh_acl = || {
        acl(&["touch", fp]);
        let before = getxattrs();
        let out = acl(&["getfacl", "-n", fp]);
        assert!(getxattrs() > before, "getfacl was answered by the kernel's cache");
        out
    };
    acl(&["setfacl", "-m", "u:65534:r", fp]);
    assert!(fresh_acl().contains("user:65534:r--"));
    acl(&["setfacl", "-b", fp]);
    assert!(!fresh_acl().contains("user:65534"));
    // A label the backing file carries is shown (security.* needs root to set).
    if nix::unistd::geteuid().is_root() {
        let label = b"system_u:object_r:etc_t:s0\0";
        assert_eq!(
            common::sys::setxattr(&f, c"security.selinux", label),
            0,
            "{}",
            std::io::Error::last_os_error()
        );
        let n = common::sys::getxattr(&f, c"security.selinux", &mut buf);
        assert_eq!(&buf[..n.max(0) as usize], label);
    }
    m.unmount();
    let _ = fs::remove_dir_all(&dir);
}

/// The kernel keeps a large directory's listing (`FOPEN_CACHE_DIR`): a second `ls -l` of
/// 1,500 files sends no READDIR(PLUS), and with no READDIRPLUS to drop the kernel's cached
/// ACLs, no GETXATTR per file either. A name made, removed or renamed through the mount
/// shows at once. A small directory is listed by the daemon each time: its READDIRPLUS
/// refreshes what the files' closes made stale, so re-reading them sends no GETATTR each.
#[test]
fn a_large_directorys_listing_comes_from_the_kernels_cache_and_follows_changes() {
    // The kernel keeps the listing in the directory's page cache, which another test's
    // drop_caches would empty.
    let _turn = page_cache_turn();
    let dir = scratch("dircache");
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    fs::create_dir(m.path("d")).unwrap();
    const N: usize = 1500;
    for i in 0..N {
        fs::write(m.path(&format!("d/file-number-{i}")), format!("file {i}")).unwrap();
    }
    let ls = |d: &str| {
        let out = std::process::Command::new("ls")
            .arg("-l")
            .arg(m.path(d))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let count = |r: &Value, k: &str| r[k].as_u64().unwrap();
    let first = ls("d");
    let before = requests(&m);
    let second = ls("d");
    let after = requests(&m);
    assert_eq!(first, second);
    for k in ["readdir", "readdirplus", "lookup"] {
        assert_eq!(count(&after, k), count(&before, k), "{k}: {before} -> {after}");
    }
    let getxattrs = count(&after, "getxattr") - count(&before, "getxattr");
    assert!(
        getxattrs <= 5,
        "a warm ls -l of {N} files sent {getxattrs} GETXATTR"
    );
    // Changes through the mount reach the next listing.
    fs::write(m.path("d/new"), b"new").unwrap();
    fs::remove_file(m.path("d/file-number-7")).unwrap();
    fs::rename(m.path("d/file-number-8"), m.path("d/g8")).unwrap();
    let names: std::collections::BTreeSet<String> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.contains("new") && names.contains("g8"), "{names:?}");
    assert!(!names.contains("file-number-7") && !names.contains("file-number-8"));
    assert_eq!(names.len(), N);

    // A small directory, read twice by a walk: the second walk sends no GETATTR a file.
    fs::create_dir(m.path("s")).unwrap();
    for i in 0..40 {
        fs::write(m.path(&format!("s/f{i}")), format!("small {i}")).unwrap();
    }
    let walk = || {
        for e in fs::read_dir(m.path("s")).unwrap() {
            let p = e.unwrap().path();
            let f = fs::File::open(&p).unwrap();
            f.metadata().unwrap();
            drop(f);
        }
    };
    walk();
    let before = requests(&m);
    walk();
    let after = requests(&m);
    let getattrs = count(&after, "getattr") - count(&before, "getattr");
    assert!(
        getattrs <= 3,
        "a second walk of 40 files sent {getattrs} GETATTR: {before} -> {after}"
    );
    m.unmount();
    let _ = fs::remove_dir_all(&dir);
}

/// A read-only mount sends no OPEN and no RELEASE per file (FUSE_NO_OPEN_SUPPORT: the first
/// OPEN is answered ENOSYS, then the kernel opens files itself and keeps their pages): a
/// re-read in new opens sends nothing at all, random reads still fill the cache with whole
/// extents, and the statistics file, read through the page cache there, is a new document
/// at every read (`stats --live --json` and `squeezefs umount` work as on any mount).
#[test]
fn a_read_only_mount_opens_nothing_and_its_statistics_stay_fresh() {
    use std::os::unix::fs::FileExt;
    let _turn = page_cache_turn();
    let dir = scratch("ro-noopen");
    let data = sixteen_extents();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    for i in 0..50 {
        fs::write(m.path(&format!("f{i}")), format!("file {i}\n").repeat(200 + i)).unwrap();
    }
    fs::write(m.path("big"), &data).unwrap();
    m.unmount();

    let m = Mount::new(&dir, "ro");
    let read_all = || {
        for i in 0..50 {
            let got = fs::read_to_string(m.path(&format!("f{i}"))).unwrap();
            assert_eq!(got, format!("file {i}\n").repeat(200 + i));
        }
    };
    read_all();
    let first = requests(&m);
    assert!(first["open"].as_u64().unwrap() <= 1, "{first}");
    assert_eq!(first["release"], 0, "{first}");
    assert_eq!(first["read"], 50, "one READ a file: {first}");
    read_all();
    let second = requests(&m);
    for k in ["open", "release", "read", "lookup", "getattr"] {
        assert_eq!(second[k], first[k], "the re-read sent {k}: {first} then {second}");
    }

    // A random read fills its whole extent, with no handle.
    let f = fs::File::open(m.path("big")).unwrap();
    common::sys::fadvise(&f, libc::POSIX_FADV_RANDOM);
    let ext = 3 << 17;
    let mut page = vec![0u8; 4096];
    f.read_exact_at(&mut page, ext + 8192).unwrap();
    assert_eq!(page, data[(ext + 8192) as usize..][..4096]);
    assert_eq!(stored_bytes_once(&m, (128 << 10) - 4096), (128 << 10) - 4096);
    // The statistics file was a new document at each of those reads (through the page
    // cache here): it counts the READ just made.
    let before = reads(&m);
    assert_eq!(before, second["read"].as_u64().unwrap() + 1);
    let mut rest = vec![0u8; 128 << 10];
    f.read_exact_at(&mut rest, ext).unwrap();
    assert_eq!(rest, data[ext as usize..][..128 << 10]);
    assert_eq!(reads(&m), before, "the extent came from the page cache");
    // One more READ elsewhere: a new document shows it, whether or not its length moved
    // (the size given is made to differ from the last one all the same).
    f.read_exact_at(&mut page, (9 << 17) + 4096).unwrap();
    assert_eq!(page, data[(9 << 17) + 4096..][..4096]);
    assert_eq!(reads(&m), before + 1);
    drop(f);

    let live = common::squeezefs(&[
        std::ffi::OsStr::new("stats"),
        std::ffi::OsStr::new("--live"),
        std::ffi::OsStr::new("--json"),
        m.mnt.as_os_str(),
    ]);
    assert!(live.status.success(), "{}", String::from_utf8_lossy(&live.stderr));
    let doc: Value = serde_json::from_slice(&live.stdout).unwrap();
    assert_eq!(doc["requests"]["release"], 0, "{doc}");
    // `squeezefs umount` finds the daemon through the statistics file. It waits for the
    // daemon to be gone, so this test (its parent) reaps it meanwhile.
    let mnt = m.mnt.clone();
    let umount =
        std::thread::spawn(move || common::squeezefs(&[std::ffi::OsStr::new("umount"), mnt.as_os_str()]));
    m.wait_exit();
    let out = umount.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The statistics file's `dirty` object: bytes held, budget, delay.
fn dirty(m: &Mount) -> (u64, u64, u64) {
    let d = &stats_doc(m)["dirty"];
    let get = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("dirty.{k} in {d}"));
    (get("bytes"), get("max"), get("expire_s"))
}

fn extents_compressed(m: &Mount) -> u64 {
    stats_doc(m)["extents"]["compressed"]
        .as_u64()
        .expect("extents.compressed")
}

/// One 4 KiB page into each of `n` extents, at page `page` of each, through `f`; the same
/// into `model`; then the kernel's dirty pages are written back (WRITEs, no fsync).
fn a_page_per_extent(f: &fs::File, model: &mut [u8], n: usize, page: usize, fill: u8) {
    use std::os::unix::fs::FileExt;
    let ext = 128 << 10;
    for i in 0..n {
        let off = i * ext + page * 4096;
        let bytes = vec![fill.wrapping_add(i as u8); 4096];
        f.write_all_at(&bytes, off as u64).unwrap();
        model[off..off + 4096].copy_from_slice(&bytes);
    }
    assert_eq!(common::sys::write_back_pages(f), 0);
}

/// Random partial writes wait in the daemon's memory while the mount's dirty budget
/// (`max_dirty=`) lasts, so each extent is compressed once, at the fsync, however many
/// WRITEs it got; the statistics file shows what waits. With a small budget the writer
/// compresses its own extents whenever the budget is spent. And what has waited for
/// `dirty_expire=` goes to the backing file while the file stays open: a kill -9 after that
/// loses none of it, with no fsync.
#[test]
fn partial_writes_wait_in_memory_and_each_extent_is_compressed_once() {
    use std::os::unix::fs::FileExt;
    let dir = scratch("dirty");
    let data = sixteen_extents();
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    fs::write(m.path("f"), &data).unwrap();
    m.unmount();
    let ext = 128 << 10;
    // 16 extents written twice, a page at a time, in two rounds the kernel writes back:
    // with room for them all, and with room for four.
    for (max, large) in [("64M", true), ("512K", false)] {
        let m = Mount::new(&dir, &format!("compress=zstd:1,extent_size=128K,max_dirty={max}"));
        let mut model = fs::read(m.path("f")).unwrap();
        let f = fs::OpenOptions::new().write(true).open(m.path("f")).unwrap();
        let before = extents_compressed(&m);
        a_page_per_extent(&f, &mut model, 16, 1, b'a');
        a_page_per_extent(&f, &mut model, 16, 6, b'A');
        let (bytes, limit, expire) = dirty(&m);
        let compressed = extents_compressed(&m) - before;
        if large {
            assert_eq!((bytes, limit, expire), (16 * ext as u64, 64 << 20, 30));
            assert_eq!(
                compressed, 0,
                "max_dirty={max}: nothing compressed before the fsync"
            );
        } else {
            assert!(bytes <= 5 * ext as u64, "max_dirty={max}: {bytes} dirty bytes");
            assert!(compressed >= 24, "max_dirty={max}: {compressed} compressions");
        }
        f.sync_all().unwrap();
        let compressed = extents_compressed(&m) - before;
        assert_eq!(dirty(&m).0, 0, "max_dirty={max}: nothing waits after the fsync");
        if large {
            assert_eq!(compressed, 16, "max_dirty={max}: each extent once");
        } else {
            assert!(compressed >= 28, "max_dirty={max}: {compressed} compressions");
        }
        drop(f);
        assert!(
            fs::read(m.path("f")).unwrap() == model,
            "max_dirty={max}: contents"
        );
        m.unmount();
    }
    // The write-behind: files left open with partial extents dirty, one of them grown,
    // one new. Written behind and committed, they survive a kill -9 with no fsync.
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K,dirty_expire=1");
    let mut model = fs::read(m.path("f")).unwrap();
    let f = fs::OpenOptions::new().write(true).open(m.path("f")).unwrap();
    a_page_per_extent(&f, &mut model, 4, 9, b'z');
    let tail = vec![b't'; 70_000];
    f.write_all_at(&tail, model.len() as u64).unwrap();
    model.extend_from_slice(&tail);
    let new: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let g = common::open_rw_new(&m.path("g"));
    g.write_all_at(&new, 0).unwrap();
    for f in [&f, &g] {
        assert_eq!(common::sys::write_back_pages(f), 0);
    }
    assert_eq!(dirty(&m).2, 1);
    let committed_before = stats_doc(&m)["commit"]["commits"]
        .as_u64()
        .expect("commit.commits");
    let start = std::time::Instant::now();
    while dirty(&m).0 > 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the write-behind did not come: {:?}",
            dirty(&m)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The write-behind queues both files for the group commit (each read of the
    // statistics file runs it at once): their superblocks, with the new sizes.
    let commits = |m: &Mount| {
        stats_doc(m)["commit"]["commits"]
            .as_u64()
            .expect("commit.commits")
    };
    while commits(&m) < committed_before + 2 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "no group commit after the write-behind: {}",
            stats_doc(&m)["commit"]
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    m.kill();
    drop((f, g));
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    assert!(
        fs::read(m.path("f")).unwrap() == model,
        "written behind, then killed"
    );
    assert!(
        fs::read(m.path("g")).unwrap() == new,
        "a new file written behind, then killed"
    );
    m.unmount();
    common::check_clean(&dir.join("backing"), "after the write-behind and a kill -9");
    fs::remove_dir_all(&dir).unwrap();
}

/// CPU ticks (user + system) process `pid` has used (`/proc/PID/stat`, fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn clock_ticks_per_second() -> u64 {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Mount option `spin=` (`spin/`): a burst of requests makes a session thread spin on
/// /dev/fuse instead of sleeping, and the spin ends by itself once they stop: an idle daemon
/// uses no CPU. On a non-root mount, whose device descriptor fusermount3 passed, as on
/// root's. Busy threads beside the mount end a spin while requests still come. By default
/// (`spin=auto`) the mount measures this machine's wake-ups and spins exactly where that
/// says it pays; `spin=0` never spins.
#[test]
fn the_spin_on_dev_fuse_starts_with_requests_and_ends_when_they_stop() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("spin");
    common::open_to_others(&d);
    let m = Mount::as_user(&d, "spin=100", "tests");
    let mnt = m.mnt.display().to_string();
    let out = common::as_tests(&[
        "sh",
        "-c",
        &format!("cd {mnt} && for i in $(seq 300); do echo $i > f$i; done && cat f* | wc -l"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "300");
    let out = common::as_tests(&["cat", &format!("{mnt}/.squeezefs-stats")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["spin"]["mode"], "fixed", "{}", doc["spin"]);
    assert_eq!(doc["spin"]["window_us"], 100, "{}", doc["spin"]);
    assert!(doc["spin"]["bursts"].as_u64().unwrap() >= 1, "{}", doc["spin"]);

    // Idle: a thread still spinning would take a whole CPU, about 2 s in these 2 s.
    let pid = m.child.as_ref().unwrap().id();
    let idle_ticks = || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let t0 = cpu_ticks(pid);
        std::thread::sleep(std::time::Duration::from_secs(2));
        cpu_ticks(pid) - t0
    };
    let used = idle_ticks();
    let hz = clock_ticks_per_second();
    assert!(
        used * 10 <= 2 * hz,
        "the idle daemon used {used} ticks ({hz}/s) in 2 s: still spinning"
    );

    // CPU-bound threads beside the mount (one more than the CPUs the spin leaves): the
    // governor yields while stats keep coming.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy: Vec<_> = (0..cpus)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let t = std::time::Instant::now();
    let (mut yields, mut round) = (0, 0);
    while yields == 0 && t.elapsed() < std::time::Duration::from_secs(20) {
        // New files: each create is a request (the kernel caches what it was told).
        round += 1;
        let script = format!("cd {mnt} && for i in $(seq 300); do echo $i > g{round}_$i; done");
        assert!(common::as_tests(&["sh", "-c", &script]).status.success());
        let out = common::as_tests(&["cat", &format!("{mnt}/.squeezefs-stats")]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        yields = doc["spin"]["yields"].as_u64().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
    assert!(
        yields >= 1,
        "the spin never yielded to {cpus} busy threads in 20 s"
    );
    drop(m);

    // The default: measured; spinning exactly where the measurement says it pays.
    let d = scratch("spin-auto");
    let m = Mount::new(&d, "");
    let t = std::time::Instant::now();
    let spin = loop {
        let spin = stats_doc(&m)["spin"].clone();
        if !spin["probe"].is_null() {
            break spin;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "no probe: {spin}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let pays = spin["probe"]["pays"].as_bool().unwrap();
    for i in 0..50 {
        fs::write(m.path(&format!("f{i}")), format!("{i}\n")).unwrap();
    }
    let spin = &stats_doc(&m)["spin"];
    assert_eq!(spin["mode"], "auto", "{spin}");
    assert_eq!(spin["window_us"], if pays { 100 } else { 0 }, "{spin}");
    assert_eq!(spin["bursts"].as_u64().unwrap() >= 1, pays, "{spin}");
    drop(m);

    let d = scratch("spin-off");
    let m = Mount::new(&d, "spin=0");
    for i in 0..50 {
        fs::write(m.path(&format!("f{i}")), format!("{i}\n")).unwrap();
    }
    let spin = &stats_doc(&m)["spin"];
    assert_eq!(
        (
            spin["mode"].as_str(),
            spin["window_us"].as_u64(),
            spin["bursts"].as_u64()
        ),
        (Some("off"), Some(0), Some(0)),
        "{spin}"
    );
}

/// While the channel spins, the other session threads stand aside (`spin/park.rs`): the
/// statistics count them parking during a stream of creates. A request that is held up
/// (an fsync waiting 400 ms for its name, held pending by the test hook) holds up nothing
/// else: a second program's requests are answered meanwhile, as before the change.
#[test]
fn while_spinning_the_other_session_threads_stand_aside_and_a_slow_request_holds_up_nothing() {
    let d = scratch("spin-park");
    let m = Mount::spawn_env(
        &d,
        "spin=100,dirops=behind",
        None,
        &[("SQUEEZEFS_TEST_APPLY_DELAY_MS", "400")],
    );
    fs::create_dir(m.path("d")).unwrap();
    // A stream of requests (the names are not new, so nothing goes behind: no delay).
    for round in 0..20 {
        for i in 0..100 {
            let _ = fs::metadata(m.path(&format!("d/absent{round}_{i}")));
        }
        if stats_doc(&m)["spin"]["parked"].as_u64().unwrap() > 0 {
            break;
        }
    }
    let spin = stats_doc(&m)["spin"].clone();
    assert!(
        spin["parked"].as_u64().unwrap() > 0,
        "no session thread parked: {spin}"
    );

    // A create goes behind, and its fsync waits for the applier's delay.
    let path = m.path("d/slow");
    let slow = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let mut f = fs::File::create(&path).unwrap();
        f.write_all(b"x").unwrap();
        f.sync_all().unwrap();
        t.elapsed()
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    let t = std::time::Instant::now();
    let mut answered = 0;
    while t.elapsed() < std::time::Duration::from_millis(250) {
        let _ = fs::metadata(m.path(&format!("d/other{answered}")));
        answered += 1;
    }
    let took = slow.join().unwrap();
    assert!(
        took >= std::time::Duration::from_millis(300),
        "the fsync did not wait for its name ({took:?}): the test proves nothing"
    );
    assert!(
        answered >= 20,
        "only {answered} LOOKUPs answered in 250 ms while an fsync waited: {}",
        stats_doc(&m)["spin"]
    );
}

/// The spinning thread answers a last close at once and hands its write-out to the closer
/// thread (`ops/closer.rs`): the statistics count them; every file reads back whole at once
/// (the statistics file's open waited for them), after the unmount (which finished the
/// queue first) and a new mount, and `check` is clean.
#[test]
fn last_closes_handed_on_by_the_spinning_thread_are_all_written() {
    let d = scratch("closer");
    let m = Mount::new(&d, "spin=100,compress=zstd:1");
    fs::create_dir(m.path("d")).unwrap();
    let body = |i: usize| format!("file {i}: {}\n", "squeeze ".repeat(i % 300)).into_bytes();
    for i in 0..1500 {
        fs::write(m.path(&format!("d/f{i}")), body(i)).unwrap();
    }
    let closer = stats_doc(&m)["closer"].clone();
    assert!(
        closer["handed_on"].as_u64().unwrap() > 0,
        "no last close handed on while spinning: {closer}"
    );
    let all_back = |m: &Mount, when: &str| {
        for i in 0..1500 {
            assert_eq!(
                fs::read(m.path(&format!("d/f{i}"))).unwrap(),
                body(i),
                "d/f{i} {when}"
            );
        }
    };
    all_back(&m, "at once");
    m.unmount();
    common::check_clean(&d.join("backing"), "after last closes handed on");
    let m = Mount::new(&d, "");
    all_back(&m, "after a remount");
}

/// `page_cache.ahead_files` of the statistics file once it reaches `want` (a store follows
/// the open that queued it: given up to 5 s), or as it is then.
fn ahead_files_once(m: &Mount, want: u64) -> u64 {
    let get = || stats_doc(m)["page_cache"]["ahead_files"].as_u64().unwrap();
    let mut n = get();
    for _ in 0..1000 {
        if n >= want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        n = get();
    }
    n
}

/// The bytes of file `i` of the walk test, generation `gen`: about 300 KiB of text for
/// most, 3 MiB for the one that spans several extents.
fn walked(i: usize, gen: u32) -> Vec<u8> {
    let lines = if i == 4 { 300_000 } else { 30_000 };
    (0..lines)
        .flat_map(|k| format!("{gen} file {i} line {k}\n").into_bytes())
        .collect()
}

/// A reader walking a directory in the order it lists its files (`tar`, `cp -r`) finds the
/// next files' first MiB in the kernel's page cache before it opens them
/// (`crate::siblings`): no READ reaches the daemon for a file that fits, and every byte
/// reads right. A file written after its bytes were stored ahead reads what was written
/// (rule 11: a writer waits for a store under way, and the kernel's own write replaces its
/// pages). With `nofill_cache` nothing is stored; opens in another order store nothing past
/// the first files.
#[test]
fn a_walk_in_listing_order_finds_the_next_files_cached() {
    let _turn = page_cache_turn();
    let dir = scratch("siblings");
    let m = Mount::new(&dir, "compress=zstd:1");
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..8 {
        fs::write(m.path(&format!("d/f{i}")), walked(i, 0)).unwrap();
    }
    fs::create_dir(m.path("d/sub")).unwrap();
    fs::write(m.path("d/sub/x"), b"in a subdirectory").unwrap();
    m.unmount();
    let index =
        |p: &std::path::Path| -> usize { p.file_name().unwrap().to_str().unwrap()[1..].parse().unwrap() };
    for (opts, fills) in [("compress=zstd:1", true), ("compress=zstd:1,nofill_cache", false)] {
        let m = Mount::new(&dir, opts);
        let order: Vec<std::path::PathBuf> = fs::read_dir(m.path("d"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        assert_eq!(order.len(), 8, "{opts}");
        for (k, p) in order.iter().enumerate() {
            let want = walked(index(p), 0);
            let mut f = fs::File::open(p).unwrap();
            let before = reads(&m);
            if fills && k >= 1 {
                // Opening file k - 1 queued file k (the first open queued the next two).
                assert!(
                    ahead_files_once(&m, k as u64) >= k as u64,
                    "{opts}: file {k} not stored ahead"
                );
                let first = want.len().min(1 << 20);
                let cached = common::sys::pages_cached(&f, first);
                let missing: Vec<usize> = (0..cached.len()).filter(|i| !cached[*i]).collect();
                assert!(
                    missing.is_empty(),
                    "{opts}: {} of the first {} pages of {p:?} (inode {}) cached (not: {missing:?}); {}",
                    cached.len() - missing.len(),
                    cached.len(),
                    std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap()),
                    stats_doc(&m)["page_cache"]
                );
            }
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut got).unwrap();
            assert!(got == want, "{opts}: wrong bytes in {p:?}");
            if fills && k >= 1 && want.len() <= 1 << 20 {
                assert_eq!(reads(&m), before, "{opts}: {p:?} was read from the daemon");
            }
        }
        let ahead = stats_doc(&m)["page_cache"]["ahead_files"].as_u64().unwrap();
        if fills {
            assert_eq!(ahead, 7, "{opts}: every file after the first, once");
        } else {
            assert_eq!(ahead, 0, "{opts}");
        }
        m.unmount();
    }

    // Opens in another order: nothing stored past what the first open of the listing's
    // first file would store.
    let m = Mount::new(&dir, "compress=zstd:1");
    let mut order: Vec<std::path::PathBuf> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    order.reverse();
    for p in &order {
        assert!(fs::read(p).unwrap() == walked(index(p), 0));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let ahead = stats_doc(&m)["page_cache"]["ahead_files"].as_u64().unwrap();
    assert!(ahead <= 2, "a backwards walk stored {ahead} files ahead");
    m.unmount();

    // Writers racing the stores: each round opens the listing's first file (which queues
    // the next two) and at once rewrites the second; it must read back what was written.
    for round in 1..=20u32 {
        let m = Mount::new(&dir, "compress=zstd:1");
        let order: Vec<std::path::PathBuf> = fs::read_dir(m.path("d"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        let first = fs::File::open(&order[0]).unwrap();
        let new = walked(index(&order[1]), round);
        fs::write(&order[1], &new).unwrap();
        assert!(
            fs::read(&order[1]).unwrap() == new,
            "round {round}: stale bytes after a write"
        );
        drop(first);
        m.unmount();
        let m = Mount::new(&dir, "compress=zstd:1");
        assert!(
            fs::read(&order[1]).unwrap() == new,
            "round {round}: stale bytes after a remount"
        );
        m.unmount();
    }
    common::check_clean(&dir.join("backing"), "after the walk test");
    fs::remove_dir_all(&dir).unwrap();
}
