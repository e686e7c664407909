//! The background pass on a real mount (`background_compression=`, issue 30): data written
//! at the mount's fast codec is recompressed to the target while the mount is idle, as the
//! user who mounted it, with contents and times unchanged; directory and file properties
//! choose other targets or keep the pass away; a file open for writing waits; what cannot
//! be compressed is left and the pass converges; a crash (kill -9) anywhere in the pass
//! loses nothing. Files are written with 128 KiB extents named (`extent_size=128K`, the
//! pass's target staying `background_extent_size=1M`): files written whole would otherwise
//! take 1 MiB extents, or go to a pack, when written (`container/grow.rs`), and what the pass
//! does to files in small extents is what these tests are about.

#![deny(unsafe_code)]

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{scratch, Mount};

/// Runs `script` with `sh -c` as the user `tests`; its standard output.
fn sh(script: &str) -> String {
    let out = common::as_tests(&["sh", "-c", script]);
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The mount's live statistics, read as `tests` (the mount is that user's).
fn live(m: &Mount) -> Value {
    serde_json::from_str(&sh(&format!("cat {}/.squeezefs-stats", m.mnt.display()))).unwrap()
}

/// Polls the statistics `read` gives until `done` holds for them (at most `secs`, else
/// the test fails naming `what`); returns the last.
fn wait_for(read: impl Fn() -> Value, secs: u64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let v = read();
        if done(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "{what} within {secs} s: {}",
            v["background"]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The mount's live statistics, read by the test's own user.
fn own_stats(m: &Mount) -> Value {
    serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap()
}

/// Waits until the pass says nothing is pending (at most `secs`); the last statistics.
fn settled(m: &Mount, secs: u64) -> Value {
    wait_for(
        || live(m),
        secs,
        "the pass finishes",
        |v| v["background"]["pending_bytes"] == 0,
    )
}

/// The stored types (`zstd:12`, `none`, …) of one backing file.
fn stored(backing: &Path) -> Vec<String> {
    common::types(&common::squeezefs_json(&["stats".as_ref(), backing.as_os_str()]))
}

/// The extents of one backing file, and the bytes its copies lose to rounding (slack).
fn extents_and_slack(backing: &Path) -> (u64, u64) {
    let v = common::squeezefs_json(&["stats".as_ref(), backing.as_os_str()]);
    (v["extents"].as_u64().unwrap(), v["slack"].as_u64().unwrap())
}

/// Bytes of a backing file's location record (`user.sqzfs`): 64 when it keeps a change
/// time (version 3), 56 otherwise.
fn record_len(backing_file: &std::path::Path) -> usize {
    let out = std::process::Command::new("getfattr")
        .args(["--only-values", "-n", "user.sqzfs"])
        .arg(backing_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout.len()
}

/// Modification and change times (to the nanosecond) and an MD5 of each of `files`, as
/// `tests` sees them through the mount.
fn seen(m: &Mount, files: &[&str]) -> Vec<String> {
    files
        .iter()
        .map(|f| {
            let p = m.mnt.join(f);
            sh(&format!(
                "stat -c '%.9Y|%.9Z' {p} && md5sum < {p}",
                p = p.display()
            ))
        })
        .collect()
}

const FILES: [&str; 7] = [
    "logs/app.log",
    "noise.bin",
    "keep/a.txt",
    "arch/b.txt",
    "own.txt",
    "held.txt",
    "ro.txt",
];

#[test]
fn the_pass_recompresses_idle_files_to_their_targets_keeping_bytes_and_times() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("background-pass");
    common::open_to_others(&d);
    // Written at zstd:1 by a first mount, which also settles what the writes left (so the
    // times seen below are the files' final ones).
    let m = Mount::as_user(
        &d,
        "compress=zstd:1,extent_size=128K,background_extent_size=1M",
        "tests",
    );
    let mnt = m.mnt.display().to_string();
    sh(&format!(
        "cd {mnt} && mkdir logs keep arch && \
         setfattr -n user.squeezefs.background_compression -v none keep && \
         setfattr -n user.squeezefs.background_compression -v zstd:9 arch && \
         mkdir arch/sub && seq 1 300000 > arch/sub/c.txt && \
         seq 1 400000 > logs/app.log && head -c 1048576 /dev/urandom > noise.bin && \
         seq 1 200000 > keep/a.txt && seq 1 300000 > arch/b.txt && \
         seq 1 250000 > own.txt && setfattr -n user.squeezefs.background_compression -v zstd:6 own.txt && \
         seq 1 150000 > held.txt && seq 1 160000 > ro.txt && chmod 444 ro.txt && sync"
    ));
    m.unmount();
    let m = Mount::as_user(
        &d,
        "compress=zstd:1,extent_size=128K,background_extent_size=1M,background_compression=zstd:12,background_idle=1",
        "tests",
    );
    // A writer keeps held.txt open throughout the first pass.
    let mut holder: Child = Command::new("setpriv")
        .args(["--reuid=tests", "--regid=tests", "--clear-groups", "--"])
        .args(["sh", "-c", &format!("exec 3>>{mnt}/held.txt; exec sleep 600")])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let b = d.join("backing");
    live(&m); // (reading the statistics commits what closed files wait for)
    assert_eq!(stored(&b.join("logs/app.log")), ["zstd:1"], "written fast");
    // 2.7 MB in 128 KiB extents.
    let (extents, slack_before) = extents_and_slack(&b.join("logs/app.log"));
    assert_eq!(extents, 21);
    let before = seen(&m, &FILES);

    // The first walk leaves the held file, so it keeps something pending.
    wait_for(
        || live(&m),
        60,
        "a walk",
        |v| v["background"]["walks"].as_u64() > Some(0),
    );
    let v = live(&m);
    assert_eq!(v["background"]["busy_files"], 1, "{}", v["background"]);
    assert!(
        v["background"]["pending_bytes"].as_u64().unwrap() > 0,
        "{}",
        v["background"]
    );
    assert_eq!(stored(&b.join("logs/app.log")), ["zstd:12"], "the mount's target");
    // Cold files get 1 MiB extents (point 5): three, losing less to rounding.
    let (extents, slack) = extents_and_slack(&b.join("logs/app.log"));
    assert_eq!(extents, 3);
    assert!(slack < slack_before, "slack {slack_before} -> {slack}");
    assert_eq!(
        extents_and_slack(&b.join("keep/a.txt")).0,
        10,
        "`none` keeps 128 KiB extents too"
    );
    assert_eq!(stored(&b.join("arch/b.txt")), ["zstd:9"], "a directory's target");
    assert_eq!(
        stored(&b.join("arch/sub/c.txt")),
        ["zstd:9"],
        "inherited down the tree"
    );
    assert!(
        common::getfattr(&b.join("arch/sub"), "user.squeezefs.background_compression").is_none(),
        "not copied at mkdir: a change of arch's reaches below"
    );
    assert_eq!(stored(&b.join("own.txt")), ["zstd:6"], "a file's own target");
    assert_eq!(
        stored(&b.join("keep/a.txt")),
        ["zstd:1"],
        "`none` keeps the pass away"
    );
    assert_eq!(stored(&b.join("noise.bin")), ["none"], "incompressible: left");
    assert_eq!(stored(&b.join("held.txt")), ["zstd:1"], "open for writing: left");
    assert_eq!(
        stored(&b.join("ro.txt")),
        ["zstd:1"],
        "a mode that keeps the daemon out: left"
    );
    assert_eq!(v["background"]["read_only_files"], 1, "{}", v["background"]);

    // Once it is closed, a later walk takes it, and then nothing is pending.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let v = settled(&m, 90);
    assert_eq!(stored(&b.join("held.txt")), ["zstd:12"]);
    assert_eq!(v["background"]["errors"], 0, "{}", v["background"]);
    let out = sh(&format!("{} stats --json {mnt}", env!("CARGO_BIN_EXE_squeezefs")));
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["background"]["pending_bytes"], 0, "`stats --json` carries it");
    assert!(common::types(&doc).contains(&"zstd:12".to_string()));

    // Contents, modification and change times are what they were.
    assert_eq!(seen(&m, &FILES), before);
    // A change of metadata through the mount moves the change time shown again.
    sh(&format!("chmod 600 {mnt}/logs/app.log"));
    let after_chmod = seen(&m, &["logs/app.log"]);
    assert_ne!(after_chmod[0], before[0], "chmod moves the change time");
    m.unmount();
    common::check_clean(&b, "after the pass");

    // The kept times live in the superblocks: a new mount shows them too.
    let m = Mount::as_user(
        &d,
        "compress=zstd:1,extent_size=128K,background_extent_size=1M",
        "tests",
    );
    let again = seen(&m, &FILES);
    // (ro.txt, which the pass left, is not compared across mounts: its change time as a
    // non-root mount shows it moves at a remount whatever the pass does.)
    assert_eq!(&again[1..6], &before[1..6]);
    // The chmod kept the modification time and moved the change time (to a moment that
    // FUSE's write-back cache lets the kernel choose itself, milliseconds apart).
    let parts = |s: &str| {
        let (times, md5) = s.split_once('\n').unwrap();
        let (m, c) = times.split_once('|').unwrap();
        (m.to_string(), c.to_string(), md5.to_string())
    };
    let (again, chmodded, first) = (parts(&again[0]), parts(&after_chmod[0]), parts(&before[0]));
    assert_eq!((&again.0, &again.2), (&first.0, &first.2));
    assert_ne!(again.1, first.1);
    let secs = |t: &str| t.parse::<f64>().unwrap();
    assert!(
        (secs(&again.1) - secs(&chmodded.1)).abs() < 1.0,
        "{again:?} {chmodded:?}"
    );
    // A write drops them: the times are the write's.
    sh(&format!("echo more >> {mnt}/own.txt"));
    assert_ne!(seen(&m, &["own.txt"])[0], before[4]);
    m.unmount();
}

#[test]
fn a_mount_without_a_target_walks_nothing_and_reports_nothing_pending() {
    let d = scratch("background-off");
    let m = Mount::new(
        &d,
        "compress=zstd:1,extent_size=128K,background_extent_size=1M,background_idle=1",
    );
    fs::write(m.path("f"), "x".repeat(1 << 20)).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let v: Value = serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap();
    assert_eq!(v["background"]["state"], "off");
    assert_eq!(v["background"]["pending_bytes"], 0);
    assert_eq!(v["background"]["walks"], 0);
    // A property set through the mount turns it on, and marks the backing root so the
    // next mount walks too.
    fs::create_dir(m.path("cold")).unwrap();
    let st = Command::new("setfattr")
        .args(["-n", "user.squeezefs.background_compression", "-v", "zstd:7"])
        .arg(m.path("cold"))
        .status()
        .unwrap();
    assert!(st.success());
    fs::write(m.path("cold/g"), "y".repeat(1 << 20)).unwrap();
    wait_for(
        || own_stats(&m),
        60,
        "a walk leaves nothing pending",
        |v| v["background"]["pending_bytes"] == 0 && v["background"]["walks"].as_u64() > Some(0),
    );
    let b = d.join("backing");
    assert_eq!(stored(&b.join("cold/g")), ["zstd:7"]);
    assert_eq!(stored(&b.join("f")), ["zstd:1"], "no target there");
    // The marker is not the mount root's xattr.
    let out = Command::new("getfattr")
        .args(["-d", "-m", "-"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("background_seen"));
    m.unmount();
    assert!(common::getfattr(&b, "user.squeezefs.background_seen").is_some());
}

/// kill -9 of the daemon at random points of a slow pass, 20 times: every file reads as
/// written, `check` is clean after each, and the pass ends where it would have.
#[test]
fn kill_9_during_the_pass_loses_nothing() {
    let d = scratch("background-kill");
    let opts = "compress=zstd:1,extent_size=128K,background_extent_size=1M,background_compression=zstd:9,background_idle=1,background_rate=1M";
    let m = Mount::new(&d, opts);
    let mut want = Vec::new();
    for i in 0..6usize {
        let data = squeezefs_testdata::log_lines((1 << 20) + i * 300_000);
        fs::write(m.path(&format!("f{i}")), &data).unwrap();
        want.push(data);
    }
    // Small files (packed), repacked once the big ones are done: later kills land there.
    fs::create_dir(m.path("small")).unwrap();
    let small: Vec<Vec<u8>> = (0..400usize)
        .map(|i| squeezefs_testdata::log_lines(3000 + i * 23))
        .collect();
    for (i, data) in small.iter().enumerate() {
        fs::write(m.path(&format!("small/s{i}.log")), data).unwrap();
    }
    m.unmount();
    let b = d.join("backing");
    // What `stat` shows once the files are closed and committed: the backing files' own.
    let before: Vec<_> = (0..6)
        .map(|i| fs::metadata(b.join(format!("f{i}"))).unwrap())
        .map(|md| (md.modified().unwrap(), common::ctime(&md)))
        .collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for cycle in 0..20 {
        let m = Mount::new(&d, opts);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Idle after 1 s; the pass rewrites 1 MiB a second: kill somewhere in it.
        std::thread::sleep(Duration::from_millis(1000 + seed % 2500));
        m.kill();
        common::check_clean(&b, &format!("after kill {cycle}"));
    }
    let m = Mount::new(&d, opts);
    wait_for(
        || own_stats(&m),
        120,
        "the pass finishes",
        |v| v["background"]["pending_bytes"] == 0,
    );
    for (i, data) in want.iter().enumerate() {
        let p = m.path(&format!("f{i}"));
        assert!(fs::read(&p).unwrap() == *data, "f{i} reads as written");
        let md = fs::metadata(&p).unwrap();
        assert_eq!(
            (md.modified().unwrap(), common::ctime(&md)),
            before[i],
            "f{i}'s times"
        );
        assert_eq!(stored(&b.join(format!("f{i}"))), ["zstd:9"], "f{i}");
    }
    for (i, data) in small.iter().enumerate() {
        let p = m.path(&format!("small/s{i}.log"));
        assert!(fs::read(&p).unwrap() == *data, "small/s{i}.log reads as written");
    }
    m.unmount();
    assert_eq!(packed_types(&b.join("small")), ["packed zstd:9"]);
    common::check_clean(&b, "at the end");
}

/// The stored types of the packed files under `dir` (a backing directory): `packed zstd:15`…
fn packed_types(dir: &Path) -> Vec<String> {
    let mut t: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .flat_map(|p| stored(&p))
        .collect();
    t.sort();
    t.dedup();
    t
}

#[test]
fn cold_packs_are_rewritten_at_their_targets_into_big_blocks_and_the_pass_converges() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("background-repack");
    common::open_to_others(&d);
    let m = Mount::as_user(&d, "compress=zstd:1", "tests");
    let mnt = m.mnt.display().to_string();
    // Small files (packed) in a tree: a directory kept away, one with its own target, a
    // file with its own.
    sh(&format!(
        "cd {mnt} && mkdir -p src/a src/b keep arch && \
         setfattr -n user.squeezefs.background_compression -v none keep && \
         setfattr -n user.squeezefs.background_compression -v zstd:9 arch && \
         for i in $(seq 1 120); do seq $i $((i * 31)) > src/a/f$i.c; seq $i $((i * 17)) > src/b/g$i.h; done && \
         for i in $(seq 1 20); do seq $i $((i * 50)) > keep/k$i.txt; seq $i $((i * 60)) > arch/r$i.txt; done && \
         mkdir doc && for i in $(seq 1 30); do mkdir doc/p$i && seq 1 2500 > doc/p$i/copyright; done && \
         seq 1 3000 > src/own.txt && setfattr -n user.squeezefs.background_compression -v zstd:6 src/own.txt && \
         sync"
    ));
    let names = sh(&format!("cd {mnt} && find . -type f | sort"));
    let names: Vec<&str> = names.lines().collect();
    assert_eq!(names.len(), 311);
    m.unmount();
    // What `stat` shows once written out (the change time is the backing file's after the
    // group commit set each record).
    let m = Mount::as_user(&d, "compress=zstd:1", "tests");
    let before = seen(&m, &names);
    m.unmount();
    let b = d.join("backing");
    assert_eq!(packed_types(&b.join("src/a")), ["packed zstd:1"], "written fast");
    let packs_before = common::squeezefs_json(&["stats".as_ref(), b.as_os_str()])["packs"]["bytes"]
        .as_u64()
        .unwrap();

    let opts = "compress=zstd:1,background_compression=zstd:15,background_idle=1";
    let m = Mount::as_user(&d, opts, "tests");
    let v = settled(&m, 120);
    assert!(
        v["background"]["repacked_files"].as_u64() >= Some(291),
        "{}",
        v["background"]
    );
    // Contents, modification and change times unchanged (each moved record keeps the
    // change time the file showed: version 3).
    let after = seen(&m, &names);
    for ((n, a), b) in names.iter().zip(&after).zip(&before) {
        assert_eq!(a, b, "{n}: times and contents");
    }
    m.unmount();
    assert_eq!(
        record_len(&b.join("src/a/f7.c")),
        64,
        "a moved record keeps the ctime"
    );
    assert_eq!(packed_types(&b.join("src/a")), ["packed zstd:15"]);
    assert_eq!(packed_types(&b.join("src/b")), ["packed zstd:15"]);
    assert_eq!(
        packed_types(&b.join("keep")),
        ["packed zstd:1"],
        "`none` keeps the pass away"
    );
    assert_eq!(packed_types(&b.join("arch")), ["packed zstd:9"]);
    assert_eq!(stored(&b.join("src/own.txt")), ["packed zstd:6"]);
    let packs_after = common::squeezefs_json(&["stats".as_ref(), b.as_os_str()])["packs"]["bytes"]
        .as_u64()
        .unwrap();
    assert!(
        packs_after * 10 < packs_before * 9,
        "repacked: {packs_before} → {packs_after} bytes of packs"
    );
    common::check_clean(&b, "after the repack");
    // The 30 equal copyright files are stored once: 29 share the first one's bytes.
    let st = common::squeezefs_json(&["stats".as_ref(), b.as_os_str()]);
    assert_eq!(st["packs"]["shared_files"], 29, "{}", st["packs"]);
    assert_eq!(st["packs"]["shared_bytes"], 29 * 11_393, "{}", st["packs"]);
    let chk = common::squeezefs_json(&["check".as_ref(), b.as_os_str()]);
    assert_eq!(chk["shared"], 29);

    // Converged: the next mount's walk finds nothing to move.
    let m = Mount::as_user(&d, opts, "tests");
    let v = wait_for(
        || live(&m),
        60,
        "a walk with nothing pending",
        |v| v["background"]["walks"].as_u64() > Some(0) && v["background"]["pending_bytes"] == 0,
    );
    assert_eq!(v["background"]["repacked_files"], 0, "{}", v["background"]);
    let again = seen(&m, &names);
    assert_eq!(again, before, "times and contents on a new mount");
    m.unmount();
    common::check_clean(&b, "after the second mount");
    // A write to one copy gives it its own bytes; the others keep theirs.
    let m = Mount::as_user(&d, "compress=zstd:1", "tests");
    sh(&format!("echo changed > {mnt}/doc/p1/copyright"));
    // A change of metadata moves the change time again, and the record keeps none.
    let chmod = "src/a/f7.c";
    let i = names.iter().position(|n| n.ends_with(chmod)).unwrap();
    sh(&format!("chmod 600 {mnt}/{chmod}"));
    let now = seen(&m, &[names[i]]).remove(0);
    let ctime = |s: &str| s.split(['|', '\n']).nth(1).unwrap().parse::<f64>().unwrap();
    assert!(ctime(&now) > ctime(&before[i]), "{now} after {}", before[i]);
    assert_eq!(sh(&format!("cat {mnt}/doc/p1/copyright")), "changed\n");
    assert_eq!(
        sh(&format!("md5sum < {mnt}/doc/p2/copyright")),
        sh("seq 1 2500 | md5sum")
    );
    m.unmount();
    assert_eq!(
        record_len(&b.join(chmod)),
        56,
        "back to a record keeping no ctime"
    );
    let st = common::squeezefs_json(&["stats".as_ref(), b.as_os_str()]);
    assert_eq!(st["packs"]["shared_files"], 28, "{}", st["packs"]);
    common::check_clean(&b, "after a write to a shared file");
}
