//! `copy_file_range(2)` within a mount (issue 45): whole stored extents are copied as they
//! are (the statistics file counts them: `copied`), the rest read and written; the copy
//! reads back after a remount and `check` finds the backing clean.

#![deny(unsafe_code)]

use std::fs;
use std::io::{Seek, SeekFrom};

use serde_json::Value;
use squeezefs_testdata::{random, text};

mod common;
use common::{scratch, sys, Mount};

fn stats(m: &Mount) -> Value {
    serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap()
}

/// Copies `len` bytes from `src`'s offset to `dst`'s, as `cp` does (short counts: again).
fn copy_all(src: &fs::File, dst: &fs::File, len: usize) -> usize {
    let mut done = 0;
    while done < len {
        let n = sys::copy_file_range(src, dst, len - done);
        assert!(n >= 0, "copy_file_range: {}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    done
}

#[test]
fn copy_file_range_copies_stored_extents_and_the_copy_reads_back_after_a_remount() {
    let dir = scratch("copy-range");
    let m = Mount::new(&dir, "compress=zstd:1");
    let mut data = text(5 << 20);
    data.extend_from_slice(&random((2 << 20) + 4321, 3));
    fs::write(m.path("a"), &data).unwrap();
    let copied = |m: &Mount| stats(m)["copied"]["extents"].as_u64().unwrap();

    // A whole file into a new one: its 8 extents of 1 MiB (written whole) copied as stored.
    let src = fs::File::open(m.path("a")).unwrap();
    let dst = fs::File::create(m.path("b")).unwrap();
    assert_eq!(copy_all(&src, &dst, data.len() + 10), data.len());
    assert_eq!(copied(&m), 8, "{}", stats(&m)["copied"]);
    assert!(fs::read(m.path("b")).unwrap() == data, "the copy, read at once");
    drop((src, dst));

    // From 100 bytes in: offsets not equally far into an extent, read and written.
    let mut src = fs::File::open(m.path("a")).unwrap();
    src.seek(SeekFrom::Start(100)).unwrap();
    let dst = fs::File::create(m.path("c")).unwrap();
    assert_eq!(copy_all(&src, &dst, 3 << 20), 3 << 20);
    assert_eq!(copied(&m), 8, "nothing more copied as stored");
    drop((src, dst));

    // Into the middle of a file with bytes of its own around: whole extents as stored.
    fs::write(m.path("d"), text(9 << 20)).unwrap();
    let mut want = text(9 << 20);
    let mut src = fs::File::open(m.path("a")).unwrap();
    src.seek(SeekFrom::Start(1 << 20)).unwrap();
    let mut dst = fs::OpenOptions::new().write(true).open(m.path("d")).unwrap();
    dst.seek(SeekFrom::Start(2 << 20)).unwrap();
    assert_eq!(copy_all(&src, &dst, 3 << 20), 3 << 20);
    want[2 << 20..5 << 20].copy_from_slice(&data[1 << 20..4 << 20]);
    assert_eq!(copied(&m), 11);
    drop((src, dst));

    // Within one file (ranges apart): read and written.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("d"))
        .unwrap();
    let g = fs::OpenOptions::new().write(true).open(m.path("d")).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut g = g;
    g.seek(SeekFrom::Start(8 << 20)).unwrap();
    assert_eq!(copy_all(&f, &g, 1 << 20), 1 << 20);
    want.copy_within(0..1 << 20, 8 << 20);
    drop((f, g));
    assert!(fs::read(m.path("d")).unwrap() == want);

    m.unmount();
    let m = Mount::new(&dir, "compress=zstd:1");
    assert!(fs::read(m.path("b")).unwrap() == data, "after a remount");
    assert!(fs::read(m.path("c")).unwrap() == data[100..100 + (3 << 20)]);
    assert!(fs::read(m.path("d")).unwrap() == want);
    m.unmount();
    common::check_clean(&dir.join("backing"), "after copies");
    fs::remove_dir_all(&dir).unwrap();
}

/// On an XFS backing with reflinks, a copy shares its source's blocks: the backing's used
/// space grows by less than 1 % of the file's stored size (its superblocks and the header
/// blocks are its own), the copy reads back after a remount, and a write to the copy
/// changes it alone (the backing's copy on write). Root: a loop-mounted XFS image
/// (`scripts/test-deps` installs xfsprogs).
#[test]
fn on_xfs_with_reflinks_a_copy_shares_the_blocks_of_its_source() {
    let dir = scratch("copy-xfs");
    let backing = common::xfs_backing(&dir);
    // (1 MiB extents named: the subject here is sharing, not which size a file takes.)
    let opts = "compress=zstd:1,extent_size=1M";
    let m = Mount::new(&dir, opts);
    // Half text, half noise: about half of it stored.
    let data = common::half_text_mibs(64);
    fs::write(m.path("a"), &data).unwrap();
    fs::File::open(m.path("a")).unwrap().sync_all().unwrap();
    let before = common::used(&backing);

    let src = fs::File::open(m.path("a")).unwrap();
    let dst = fs::File::create(m.path("b")).unwrap();
    assert_eq!(copy_all(&src, &dst, data.len()), data.len());
    dst.sync_all().unwrap();
    drop((src, dst));
    let after = common::used(&backing);
    let doc = stats(&m);
    let stored = doc["copied"]["stored_bytes"].as_u64().unwrap();
    let shared = doc["copied"]["shared_bytes"].as_u64().unwrap();
    assert_eq!(doc["copied"]["extents"], 64, "{}", doc["copied"]);
    assert!(shared > stored, "every extent shared: {}", doc["copied"]);
    let added = after.saturating_sub(before);
    assert!(
        added * 100 < stored,
        "the copy added {added} bytes to the backing, its extents store {stored}"
    );
    assert!(fs::read(m.path("b")).unwrap() == data);
    // `squeezefs stats` counts the shared blocks once: the copy adds about what it added to
    // the backing, and says so.
    let (a, b) = (m.path("a").into_os_string(), m.path("b").into_os_string());
    let one = common::squeezefs_json(&["stats".as_ref(), &a]);
    let both = common::squeezefs_json(&["stats".as_ref(), &a, &b]);
    let (d1, d2) = (one["disk"].as_u64().unwrap(), both["disk"].as_u64().unwrap());
    assert!(
        d2 - d1 < d1 / 100 + (64 << 10),
        "stats: a takes {d1}, a and b {d2}: {both}"
    );
    assert!(
        both["shared_extents_saved"].as_u64().unwrap() * 100 >= 95 * d1,
        "{both}"
    );
    assert_eq!(one["shared_extents_saved"], 0, "{one}");
    // What the source occupies beyond its extents: its superblocks, and no blocks XFS
    // preallocated past a half written at the file's end and stranded there when the file
    // grew past them (790 KiB of this file's 34 MiB before the write-out made the file long
    // enough first).
    assert!(one["metadata"].as_u64().unwrap() <= 64 << 10, "{one}");

    // A write to the copy: the source keeps its bytes.
    let mut want = data.clone();
    want[10 << 20..(10 << 20) + 5].copy_from_slice(b"HELLO");
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(m.path("b")).unwrap();
        f.write_all_at(b"HELLO", 10 << 20).unwrap();
        f.sync_all().unwrap();
    }
    m.unmount();
    let m = Mount::new(&dir, opts);
    assert!(
        fs::read(m.path("a")).unwrap() == data,
        "the source after a remount"
    );
    assert!(fs::read(m.path("b")).unwrap() == want, "the copy after a remount");
    m.unmount();
    common::check_clean(&backing, "after copies on XFS");
    drop(backing);
    fs::remove_dir_all(&dir).unwrap();
}
