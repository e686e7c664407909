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
