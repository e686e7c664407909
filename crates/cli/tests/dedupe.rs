//! Identical large files stored once where the backing shares blocks (issue 45): the
//! background pass has equal stored extents share their blocks (`FIDEDUPERANGE`), the
//! statistics file says what it shared, every file reads back its own bytes, a write to one
//! copy leaves the others alone, and `check` finds the backing clean.

#![deny(unsafe_code)]

use std::fs;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{scratch, Mount};

fn stats(m: &Mount) -> Value {
    serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap()
}

/// Writes `data` to `name` and makes it durable.
fn write_synced(m: &Mount, name: &str, data: &[u8]) {
    fs::write(m.path(name), data).unwrap();
    fs::File::open(m.path(name)).unwrap().sync_all().unwrap();
}

/// On an XFS backing with reflinks and default options, five files written (not copied)
/// with the same 20 MB of compressible bytes take, once the background pass has walked
/// them, at most 1.2× the space of one (measured 1.09–1.15× on this data, 1.004× on text of
/// other words: what is left is blocks XFS allocated ahead of writes at each file's end and
/// left inside the files where the first file's slot holds other bytes; issue 45's goal is
/// 1.1×).
#[test]
fn on_xfs_five_files_written_alike_take_the_space_of_one() {
    let dir = scratch("dedupe-xfs");
    let backing = common::xfs_backing(&dir);
    let opts = "background_idle=1";
    let m = Mount::new(&dir, opts);
    let data = common::half_text_mibs(20);
    let empty = common::used(&backing);
    write_synced(&m, "f0", &data);
    let one = common::used(&backing) - empty;
    for i in 1..5 {
        write_synced(&m, &format!("f{i}"), &data);
    }
    let written = common::used(&backing) - empty;
    assert!(
        written > 4 * one,
        "five copies before the pass: {written} for one of {one}"
    );
    // The pass walks once the mount has been idle a second.
    let t = Instant::now();
    let mut all = written;
    while all * 10 > one * 12 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
        common::sync_fs(&backing);
        all = common::used(&backing) - empty;
    }
    let doc = stats(&m);
    eprintln!(
        "one file {one} bytes, five before the pass {written}, after {all} ({:.3}x one)",
        all as f64 / one as f64
    );
    assert!(
        all * 10 <= one * 12,
        "five files take {all} bytes, one {one}: {}",
        doc["dedupe"]
    );
    assert_eq!(doc["dedupe"]["on"], true);
    // Four files' copies shared (the copies' blocks counted, not the slots' empty rest; a
    // file walked again would count again).
    let shared = doc["dedupe"]["bytes"].as_u64().unwrap();
    assert!(shared * 10 >= 4 * one * 8, "{}", doc["dedupe"]);
    assert_eq!(doc["dedupe"]["errors"], 0);
    for i in 0..5 {
        assert!(fs::read(m.path(&format!("f{i}"))).unwrap() == data, "f{i}");
    }
    // `squeezefs stats` counts the shared blocks once: the five take about what the first
    // does (its slots' rest and the others' headers and superblocks are their own).
    let path = |i: usize| m.path(&format!("f{i}")).into_os_string();
    let first = common::squeezefs_json(&["stats".as_ref(), &path(0)]);
    let names: Vec<_> = (0..5).map(path).collect();
    let mut args = vec!["stats".as_ref()];
    args.extend(names.iter().map(|n| n.as_os_str()));
    let five = common::squeezefs_json(&args);
    let (d1, d5) = (first["disk"].as_u64().unwrap(), five["disk"].as_u64().unwrap());
    eprintln!(
        "stats: the first file {d1} bytes, the five {d5} ({:.3}x)",
        d5 as f64 / d1 as f64
    );
    assert!(
        d5 * 10 <= d1 * 12,
        "stats counts the five as {d5}, the first as {d1}: {five}"
    );
    assert!(
        five["shared_extents_saved"].as_u64().unwrap() * 10 >= 4 * d1 * 8,
        "{five}"
    );
    assert_eq!(first["shared_extents_saved"], 0, "{first}");

    // A write to one copy: the others keep their bytes (the backing's copy on write).
    let mut want = data.clone();
    want[(7 << 20) + 3..(7 << 20) + 8].copy_from_slice(b"HELLO");
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(m.path("f2")).unwrap();
        f.write_all_at(b"HELLO", (7 << 20) + 3).unwrap();
        f.sync_all().unwrap();
    }
    m.unmount();
    let m = Mount::new(&dir, opts);
    for i in 0..5 {
        let got = fs::read(m.path(&format!("f{i}"))).unwrap();
        assert!(&got == if i == 2 { &want } else { &data }, "f{i} after a remount");
    }
    m.unmount();
    common::check_clean(&backing, "after sharing on XFS");
    drop(backing);
    fs::remove_dir_all(&dir).unwrap();
}

/// `nodedupe`, or a backing that cannot share blocks (the scratch directory's ext4 or
/// tmpfs): equal files stay apart and the pass does not walk for it.
#[test]
fn nothing_is_shared_with_nodedupe_or_where_the_backing_cannot() {
    let dir = scratch("dedupe-off");
    let m = Mount::new(&dir, "background_idle=1");
    let doc = stats(&m);
    assert_eq!(doc["dedupe"]["on"], false, "{}", doc["dedupe"]);
    assert_eq!(doc["background"]["state"], "off", "{}", doc["background"]);
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();

    let dir = scratch("dedupe-nodedupe");
    let backing = common::xfs_backing(&dir);
    let m = Mount::new(&dir, "background_idle=1,nodedupe");
    let data = common::half_text_mibs(4);
    let empty = common::used(&backing);
    write_synced(&m, "a", &data);
    let one = common::used(&backing) - empty;
    write_synced(&m, "b", &data);
    std::thread::sleep(Duration::from_secs(3));
    common::sync_fs(&backing);
    let two = common::used(&backing) - empty;
    assert!(
        two * 10 >= one * 19,
        "two equal files take {two} bytes, one {one}"
    );
    let doc = stats(&m);
    assert_eq!(doc["dedupe"]["on"], false);
    assert_eq!(doc["dedupe"]["bytes"], 0);
    assert_eq!(doc["background"]["state"], "off", "{}", doc["background"]);
    m.unmount();
    drop(backing);
    fs::remove_dir_all(&dir).unwrap();
}
