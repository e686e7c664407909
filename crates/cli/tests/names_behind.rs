//! New files named behind the caller (`dirops=behind`, `fs::ns`): shown at once with their
//! final inode number, named on the backing in the order they were made, durable at fsync,
//! and after a kill -9 a prefix of them, with nothing of the rest left after the next mount.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::*;

const DELAY: &str = "SQUEEZEFS_TEST_APPLY_DELAY_MS";

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn pool_files(backing: &Path) -> usize {
    fs::read_dir(backing.join(".squeezefs-packs"))
        .map(|r| {
            r.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(".new-"))
            })
            .count()
        })
        .unwrap_or(0)
}

fn stats(m: &Mount) -> serde_json::Value {
    serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap()
}

/// Files made while their names wait (each held 150 ms): the backing does not have them
/// yet, but the mount shows them — looked up again after the kernel forgot them, with
/// their bytes, their number, and their directory's new mtime — and a listing (which waits
/// for the names) gives each the same number, which the backing file has too, also after
/// a remount.
#[test]
fn new_files_are_shown_at_once_and_named_behind_with_one_number() {
    require_root("drops the kernel's dentry cache");
    let dir = scratch("behind-shown");
    let m = Mount::spawn_env(&dir, "dirops=behind", None, &[(DELAY, "150")]);
    fs::create_dir(m.path("d")).unwrap();
    let before = SystemTime::now();
    let mut inos = BTreeMap::new();
    for i in 0..10 {
        let name = format!("f{i}");
        let mut f = fs::File::create_new(m.path(&format!("d/{name}"))).unwrap();
        f.write_all(format!("bytes of {name}").as_bytes()).unwrap();
        inos.insert(name, f.metadata().unwrap().ino());
    }
    let on_backing = names_in(&dir.join("backing/d")).len();
    assert!(
        on_backing < 10,
        "{on_backing} of 10 names on the backing already: not behind"
    );
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    for (name, ino) in &inos {
        let p = m.path(&format!("d/{name}"));
        let md = fs::metadata(&p).unwrap();
        assert_eq!(md.ino(), *ino, "{name}: another number looked up again");
        assert_eq!(fs::read_to_string(&p).unwrap(), format!("bytes of {name}"));
    }
    let dmtime = fs::metadata(m.path("d")).unwrap().modified().unwrap();
    assert!(
        dmtime >= before - Duration::from_millis(10),
        "the directory's mtime does not show its new files"
    );
    // A listing waits for the pending names, and lists each under its number.
    let listed: BTreeMap<String, u64> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), e.ino())
        })
        .collect();
    assert_eq!(listed, inos);
    for (name, ino) in &inos {
        let st = fs::metadata(dir.join(format!("backing/d/{name}"))).unwrap();
        assert_eq!(st.ino(), *ino, "{name}: the backing file has another number");
    }
    let s = stats(&m);
    assert_eq!(s["namespace"]["behind"].as_u64(), Some(10), "{s}");
    assert_eq!(s["namespace"]["errors"].as_u64(), Some(0), "{s}");
    m.unmount();
    assert_eq!(
        pool_files(&dir.join("backing")),
        0,
        "pool files left after an unmount"
    );
    let m = Mount::new(&dir, "");
    for (name, ino) in &inos {
        let p = m.path(&format!("d/{name}"));
        assert_eq!(fs::metadata(&p).unwrap().ino(), *ino);
        assert_eq!(fs::read_to_string(&p).unwrap(), format!("bytes of {name}"));
    }
    m.unmount();
    check_clean(&dir.join("backing"), "after names made behind");
}

/// A kill -9 while names wait: the backing has a prefix of the files in the order they
/// were made — including every one an fsync returned for, with its bytes — and never a
/// later one without the earlier; `check` sees the rest as leftovers, and the next mount
/// removes them.
#[test]
fn a_kill_leaves_a_prefix_of_the_new_names_and_every_fsynced_one() {
    let dir = scratch("behind-kill");
    let m = Mount::spawn_env(&dir, "dirops=behind", None, &[(DELAY, "20")]);
    fs::create_dir(m.path("d")).unwrap();
    let name = |i: usize| format!("f{i:03}");
    for i in 0..200 {
        let mut f = fs::File::create_new(m.path(&format!("d/{}", name(i)))).unwrap();
        f.write_all(name(i).as_bytes()).unwrap();
        if i == 60 {
            f.sync_all().unwrap();
        }
    }
    m.kill();
    let backing = dir.join("backing");
    let names = names_in(&backing.join("d"));
    let n = names.len();
    assert!(
        n > 60,
        "only {n} names on the backing: the fsynced f060 is missing"
    );
    assert!(
        n < 200,
        "all 200 names on the backing at the kill: nothing was pending"
    );
    assert_eq!(names, (0..n).map(name).collect::<Vec<_>>(), "not a prefix");
    println!(
        "FIGURES {n} of 200 names on the backing at the kill, {} pool files",
        pool_files(&backing)
    );
    let report = squeezefs_json(&["check".as_ref(), backing.as_os_str()]);
    assert_eq!(report["damaged_files"].as_u64(), Some(0), "{report}");
    let left = pool_files(&backing);
    assert!(left > 0, "no file made ahead is left: the test shows nothing");
    assert!(
        report["leftovers"].as_u64().unwrap() >= left as u64,
        "check does not report the {left} unnamed files as leftovers: {report}"
    );
    let m = Mount::new(&dir, "");
    assert_eq!(pool_files(&backing), 0, "the mount left the unnamed files");
    assert_eq!(fs::read_to_string(m.path("d/f060")).unwrap(), "f060");
    assert_eq!(names_in(&m.path("d")).len(), n);
    m.unmount();
    check_clean(&backing, "after the kill and a remount");
}

/// A daemon without root (path mode: files reopened by name) names new files behind too,
/// and reads them back after the kernel forgot them, before and after their names land.
#[test]
fn a_user_mount_names_new_files_behind() {
    require_root("mounts as the `tests` user");
    let dir = scratch("behind-user");
    open_to_others(&dir);
    let m = Mount::as_user(&dir, "dirops=behind", "tests");
    let d = m.path("d");
    let out = as_tests(&[
        "sh",
        "-c",
        &format!(
            "mkdir {d} && for i in $(seq 0 99); do echo bytes$i > {d}/f$i; done",
            d = d.display()
        ),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let out = as_tests(&[
        "sh",
        "-c",
        &format!("for i in $(seq 0 99); do cat {d}/f$i; done", d = d.display()),
    ]);
    let want: String = (0..100).map(|i| format!("bytes{i}\n")).collect();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        want,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_tests(&["cat", &m.path(".squeezefs-stats").display().to_string()]);
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["namespace"]["behind"].as_u64().unwrap() >= 100, "{s}");
    m.unmount();
    assert_eq!(names_in(&dir.join("backing/d")).len(), 100);
    check_clean(&dir.join("backing"), "after a user's names made behind");
}

/// A pack reclaim round asked while names wait: it applies them first (files packed in the
/// private directory are outside its walk), and every file reads back whole after it and
/// after a remount.
#[test]
fn a_reclaim_round_while_names_wait_keeps_every_new_file() {
    let dir = scratch("behind-reclaim");
    let opts = "compress=zstd:1,pack,nopack_reclaim,pack_gc=0,dirops=behind";
    let m = Mount::spawn_env(&dir, opts, None, &[(DELAY, "30")]);
    fs::create_dir(m.path("d")).unwrap();
    let body = |n: &str| format!("{n} ").repeat(200);
    for i in 0..40 {
        fs::write(m.path(&format!("d/old{i}")), body(&format!("old{i}"))).unwrap();
    }
    for i in 0..40 {
        fs::remove_file(m.path(&format!("d/old{i}"))).unwrap();
    }
    for i in 0..40 {
        fs::write(m.path(&format!("d/f{i}")), body(&format!("f{i}"))).unwrap();
    }
    let pending = 40 - names_in(&dir.join("backing/d")).len();
    assert!(pending > 0, "no name pending: the test shows nothing");
    reclaim_round(&m.mnt);
    assert_eq!(
        names_in(&dir.join("backing/d")).len(),
        40,
        "the round did not apply the names first"
    );
    for i in 0..40 {
        assert_eq!(
            fs::read_to_string(m.path(&format!("d/f{i}"))).unwrap(),
            body(&format!("f{i}"))
        );
    }
    m.unmount();
    let m = Mount::new(&dir, "");
    for i in 0..40 {
        assert_eq!(
            fs::read_to_string(m.path(&format!("d/f{i}"))).unwrap(),
            body(&format!("f{i}"))
        );
    }
    m.unmount();
    check_clean(&dir.join("backing"), "after a reclaim round with names pending");
}
