//! What a new user meets first (issue 28): misuse refused before anything is mounted or
//! made, with one line that says what to do and exit status 2; a mount that leaves the
//! mount root's times as the user gave them; `du` through a mount that agrees with
//! `squeezefs stats`; `compress` that counts what it did; a non-root unmount that kept every
//! byte logging nothing alarming.

#![deny(unsafe_code)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{is_mounted, scratch, squeezefs, squeezefs_json, Mount};

fn os<P: AsRef<OsStr> + ?Sized>(p: &P) -> &OsStr {
    p.as_ref()
}

/// `squeezefs mount ARGS…` that must be refused: exit 2, one line on stderr containing
/// `says`, nothing mounted at `mnt`.
fn refused(args: &[&OsStr], mnt: &Path, says: &str) -> String {
    let mut a = vec![os("mount")];
    a.extend_from_slice(args);
    let out = squeezefs(&a);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(says), "{args:?}: expected `{says}` in: {err}");
    assert!(!is_mounted(mnt), "{args:?} mounted");
    err
}

#[test]
fn misuse_is_refused_in_one_line_with_exit_2_and_nothing_is_made() {
    let d = scratch("misuse");
    let (backing, mnt) = (d.join("backing"), d.join("mnt"));

    // A BACKING that does not exist (a typo, a disk not mounted yet at boot): not made.
    let missing = d.join("not-there");
    let err = refused(
        &[missing.as_os_str(), mnt.as_os_str()],
        &mnt,
        "does not exist; create it (mkdir) or pass -o create",
    );
    assert!(err.contains(&format!("BACKING {}", missing.display())), "{err}");
    assert!(!missing.exists(), "a missing BACKING was made");

    // A MOUNTPOINT that is a regular file.
    let afile = d.join("afile");
    fs::write(&afile, b"mine").unwrap();
    refused(
        &[backing.as_os_str(), afile.as_os_str()],
        &afile,
        &format!("MOUNTPOINT {} is not a directory", afile.display()),
    );
    assert_eq!(fs::read(&afile).unwrap(), b"mine");
    // A MOUNTPOINT that does not exist.
    refused(
        &[backing.as_os_str(), d.join("no-mnt").as_os_str()],
        &d.join("no-mnt"),
        "does not exist",
    );

    // An unknown option: named, with the ones squeezefs and the kernel know.
    let err = refused(
        &[
            backing.as_os_str(),
            mnt.as_os_str(),
            os("-o"),
            os("compress=lz4,bogus=1"),
        ],
        &mnt,
        "unknown mount option `bogus`",
    );
    for known in [
        "compress-force=",
        "extent_size=",
        "create",
        "noatime",
        "max_read=",
        "--help",
    ] {
        assert!(err.contains(known), "{known} not named: {err}");
    }
    // The same in the mount-helper form (what mount(8) and fstab run).
    let out = squeezefs(&[backing.as_os_str(), mnt.as_os_str(), os("-o"), os("bogus")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mount option `bogus`"));
    assert!(!is_mounted(&mnt));
    // Refusals touched nothing: BACKING is as empty as it was made.
    assert_eq!(
        fs::read_dir(&backing).unwrap().count(),
        0,
        "BACKING was written to"
    );

    // The kernel's own options still pass.
    let m = Mount::new(&d, "noatime,nosuid,max_read=131072");
    fs::write(m.path("f"), b"x").unwrap();
    m.unmount();

    // -o create makes both, also in the helper form, which fstab lines use.
    let (nb, nm) = (d.join("new/backing"), d.join("new/mnt"));
    let out = squeezefs(&[
        nb.as_os_str(),
        nm.as_os_str(),
        os("-o"),
        os("create,compress=lz4"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(is_mounted(&nm), "the helper form detaches once mounted");
    fs::write(nm.join("g"), b"made").unwrap();
    let out = squeezefs(&[os("umount"), nm.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(nb.join("g").exists());
}

/// FUSE 3 mounts over a directory that is not empty; what it hides is said.
#[test]
fn mounting_over_a_non_empty_directory_warns_how_much_it_hides() {
    let d = scratch("nonempty");
    for n in ["a", "b", "c"] {
        fs::write(d.join("mnt").join(n), n).unwrap();
    }
    let m = Mount::new(&d, "");
    assert_eq!(
        fs::read_dir(&m.mnt).unwrap().count(),
        0,
        "the mount shows BACKING"
    );
    m.unmount();
    let log = fs::read_to_string(d.join("daemon.log")).unwrap();
    assert!(
        log.contains("is not empty: its 3 entries are hidden while squeezefs is mounted there"),
        "{log}"
    );
    assert_eq!(
        fs::read_dir(d.join("mnt")).unwrap().count(),
        3,
        "back after unmount"
    );
    // An empty one: no such line.
    let e = scratch("empty-mnt");
    Mount::new(&e, "").unmount();
    assert!(!fs::read_to_string(e.join("daemon.log"))
        .unwrap()
        .contains("not empty"));
}

/// The mtime of a directory, to the nanosecond. (Its atime follows reads by the backing
/// filesystem's rules: the unmount's pack walk lists the root, and under `relatime` that
/// moves an atime not newer than the mtime, as any reader's `ls` would.)
fn times(p: &Path) -> (i64, i64) {
    let m = fs::metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

/// `rsync -a` to a mount, unmount, mount again, `rsync -n --itemize-changes`: the root's
/// times must have stayed what rsync set. Mounting (the first time, when the lock file and
/// the private directory are made, and every time after, when the probes run), writing
/// small files into a subdirectory and `compress` leave the root's atime and mtime alone.
#[test]
fn the_mount_root_keeps_the_times_the_user_gave_it() {
    let d = scratch("root-times");
    let backing = d.join("backing");
    let sub = backing.join("sub");
    fs::create_dir(&sub).unwrap();
    fs::write(sub.join("old"), b"an adopted file").unwrap();
    let set = |p: &Path| {
        let st = Command::new("touch")
            .args(["-d", "2020-01-02 03:04:05.123456789"])
            .arg(p)
            .status()
            .unwrap();
        assert!(st.success());
    };
    set(&backing);
    let before = times(&backing);
    let m = Mount::new(&d, "");
    assert_eq!(times(&m.mnt), before, "through the mount");
    for i in 0..50 {
        fs::write(m.path("sub").join(format!("f{i}")), format!("small file {i}\n")).unwrap();
    }
    m.unmount();
    assert_eq!(times(&backing), before, "first mount");
    for entry in fs::read_dir(&backing).unwrap() {
        let n = entry.unwrap().file_name();
        assert!(!n.to_string_lossy().contains("probe"), "{n:?} left in the root");
    }
    let m = Mount::new(&d, "");
    let _ = fs::read_dir(m.path("sub")).unwrap().count();
    m.unmount();
    assert_eq!(times(&backing), before, "second mount");
    let out = squeezefs(&[os("compress"), backing.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(times(&backing), before, "offline compress");
}

/// A packed file's `st_blocks` is its share of its pack block: `du` through the mount adds
/// up to what `squeezefs stats` counts (4,000 packed files, each of which reported one
/// 512-byte block before).
#[test]
fn du_through_the_mount_agrees_with_stats() {
    let d = scratch("du-stats");
    let m = Mount::new(&d, "");
    let src = d.join("src");
    let files = common::real_tree(&src);
    // The test's own sources many times over, under distinct names (small text files).
    let copies = (4000 / files.len().max(1)).max(1);
    for c in 0..copies {
        let st = Command::new("cp")
            .arg("-r")
            .arg(&src)
            .arg(m.path(&format!("copy{c}")))
            .status()
            .unwrap();
        assert!(st.success());
    }
    // Right after the copy (bytes still in open blocks: estimated), and once committed.
    let early = common::du(&m.mnt);
    let s = squeezefs_json(&[os("stats"), m.mnt.as_os_str()]);
    let disk = s["disk"].as_u64().unwrap();
    assert!(
        s["packed"].as_u64().unwrap() as usize >= copies * files.len() * 9 / 10,
        "{s}"
    );
    // A new name for every file: the kernel asks again for attributes it has cached.
    m.unmount();
    let m = Mount::new(&d, "");
    let late = common::du(&m.mnt);
    println!("FIGURES du right after the copy {early}, after the commit {late}; stats {disk}");
    for (what, got) in [("after the commit", late), ("right after the copy", early)] {
        let off = got.abs_diff(disk) as f64 / disk as f64;
        assert!(
            off < 0.05,
            "du {what} {got} vs stats {disk}: {:.1} % off",
            off * 100.0
        );
    }
    m.unmount();
}

/// `compress` on plain small files says how many it packed and how many became containers,
/// as `stats` then counts them.
#[test]
fn compress_counts_what_it_packed() {
    let d = scratch("compress-counts");
    let backing = d.join("backing");
    let files = common::real_tree(&backing.join("src"));
    let out = squeezefs(&[os("compress"), backing.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let s = squeezefs_json(&[os("stats"), backing.as_os_str()]);
    let packed = s["packed"].as_u64().unwrap();
    assert!(packed as usize > files.len() / 2, "{s}");
    let expect = format!("{packed} packed, ");
    assert!(said.contains(&expect), "expected `{expect}` in: {said}");
    assert!(said.contains("in containers of their own"), "{said}");
    // JSON says the same (a second tree, the same way).
    let d2 = scratch("compress-counts-json");
    let b2 = d2.join("backing");
    common::real_tree(&b2.join("src"));
    let doc = squeezefs_json(&[os("compress"), b2.as_os_str()]);
    let s2 = squeezefs_json(&[os("stats"), b2.as_os_str()]);
    assert_eq!(doc["packed"], s2["packed"], "{doc}\n{s2}");
    assert_eq!(
        doc["packed"].as_u64().unwrap() + doc["containers"].as_u64().unwrap(),
        doc["converted"].as_u64().unwrap() + doc["rewritten"].as_u64().unwrap(),
        "{doc}"
    );
}

/// Runs the shell `script` as the user `tests`; it must succeed.
fn sh_as_tests(script: &str) {
    let out = common::as_tests(&["sh", "-c", script]);
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// On a mount of `d` by the user `tests` (without root), runs `make` in the mount, lets the
/// daemon write it out and commit it (`sync`, then 2.5 s), runs `then` in the mount, and
/// unmounts. Returns the mount point.
fn tree_as_tests(d: &Path, make: &str, then: &str) -> String {
    common::open_to_others(d);
    let m = Mount::as_user(d, "", "tests");
    let mnt = m.mnt.display().to_string();
    sh_as_tests(&format!("cd {mnt} && {make} && sync"));
    std::thread::sleep(Duration::from_millis(2500));
    sh_as_tests(&format!("cd {mnt} && {then}"));
    m.unmount();
    mnt
}

/// A mount without root whose tree holds the user's own mode-0 file and mode-0 directories
/// (with packed files in them, some deleted: garbage to reclaim) unmounts quietly: the
/// unmount's pack walk reads them with the owner-access rule the daemon already has, and
/// leaves their modes as they were.
#[test]
fn a_non_root_unmount_with_mode_0_files_and_directories_logs_nothing_alarming() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("mode0-unmount");
    // Written out and committed, then most of e/deep deleted: its pack is mostly garbage.
    let mnt = tree_as_tests(
        &d,
        "mkdir -p d e/deep && echo hello > d/f && echo x > g && echo y > e/h && \
         echo z > e/deep/i && for i in 1 2 3 4 5 6 7 8; do echo $i > e/deep/x$i; done && \
         cat e/deep/i >/dev/null",
        "rm e/deep/x* && chmod 0 d/f g e/deep e",
    );
    let log = fs::read_to_string(d.join("daemon.log")).unwrap();
    let alarming = common::alarming(&log);
    assert!(alarming.is_empty(), "{alarming:?}");
    assert!(
        log.contains("reclaimed"),
        "the unmount reclaimed the garbage: {log}"
    );
    let b = d.join("backing");
    for p in ["g", "d/f", "e"] {
        assert_eq!(fs::symlink_metadata(b.join(p)).unwrap().mode() & 0o7777, 0, "{p}");
    }
    let m = Mount::as_user(&d, "", "tests");
    sh_as_tests(&format!("cd {mnt} && chmod 700 e e/deep && chmod 600 g && test \"$(cat e/h e/deep/i g)\" = \"$(printf 'y\\nz\\nx')\""));
    m.unmount();
}

/// `check` and `stats` run by the owner of a tree without root (issue 43) go through its
/// mode-0 directories (and one it may search but not list) as the pack walk does: owner
/// access for the one call, then the mode put back. Every file is checked and counted: the
/// small packed ones, a container of several extents, those of a nested mode-0 directory.
#[test]
fn check_and_stats_by_the_owner_enter_mode_0_directories() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("mode0-walk");
    // `seq 1 200000`: 1,288,895 bytes, more than one 1 MiB extent (a file written whole
    // takes them; a smaller one would go to a pack as one).
    tree_as_tests(
        &d,
        "mkdir -p d/sub e && echo hello > d/a && echo world > d/b && echo nested > d/sub/c && \
         seq 1 200000 > d/big && echo y > e/h && echo x > g",
        "chmod 0 d/sub d && chmod 100 e",
    );
    let b = d.join("backing");
    let modes = || ["d", "d/sub", "e"].map(|p| fs::symlink_metadata(b.join(p)).unwrap().mode() & 0o7777);
    assert_eq!(modes(), [0, 0, 0o100], "as chmod left them");
    let sizes = [6u64, 6, 7, 1_288_895, 2, 2];
    let backing = b.display().to_string();
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    let run = |args: &[&str]| -> serde_json::Value {
        let out = common::as_tests(args);
        assert!(
            out.status.success(),
            "{args:?} as the owner: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let check = run(&[bin, "check", &backing, "--json"]);
    assert_eq!(check["files"], sizes.len(), "{check}");
    assert_eq!(check["damaged_files"], 0, "{check}");
    assert_eq!(check["leftovers"], 0, "{check}");
    assert_eq!(check["logical_bytes"], sizes.iter().sum::<u64>(), "{check}");
    assert_eq!(check["packs"]["damaged_packs"], 0, "{check}");
    assert!(check["containers"].as_u64() >= Some(1), "the big file: {check}");
    assert!(check["packed"].as_u64() >= Some(1), "small files: {check}");
    let kinds = ["containers", "packed", "plain"].map(|k| check[k].as_u64().unwrap());
    assert_eq!(kinds.iter().sum::<u64>(), sizes.len() as u64, "{check}");
    assert_eq!(modes(), [0, 0, 0o100], "put back after check");
    let stats = run(&[bin, "stats", &backing, "--json"]);
    assert_eq!(stats["errors"], serde_json::json!([]), "{stats}");
    assert_eq!(stats["files"], sizes.len(), "{stats}");
    assert_eq!(stats["referenced"], sizes.iter().sum::<u64>(), "{stats}");
    assert_eq!(stats["packed"], check["packed"], "{stats}");
    assert_eq!(stats["containers"], check["containers"], "{stats}");
    assert_eq!(modes(), [0, 0, 0o100], "put back after stats");
    // The human `check` says the same.
    let out = common::as_tests(&[bin, "check", &backing]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("no damage"), "{said}");
    assert_eq!(modes(), [0, 0, 0o100]);
    fs::remove_dir_all(&d).unwrap();
}

/// A daemon without root reading and `stat`ing its user's read-only files (mode 0444: git
/// objects, `cp -p`) moves neither their change time on the backing nor the one `stat`
/// shows (issue 43: the file was opened for writing at once, which took a chmod and back,
/// so a fresh mount's first look moved the ctime of every such file; the background pass
/// test saw it as a flake). It is opened for writing when something is written: after
/// the owner makes it writable again, a write and a truncate land.
#[test]
fn reading_a_read_only_file_moves_no_change_time() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("ro-ctime");
    let files = ["big.txt", "small.txt"];
    let mnt = tree_as_tests(
        &d,
        "seq 1 100000 > big.txt && echo small > small.txt",
        "chmod 444 big.txt small.txt",
    );
    let b = d.join("backing");
    let on_backing = || files.map(|p| common::ctime(&fs::symlink_metadata(b.join(p)).unwrap()));
    let shown = || {
        let out = common::as_tests(&[
            "sh",
            "-c",
            &format!("cd {mnt} && stat -c %.9Z {}", files.join(" ")),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let before = on_backing();
    std::thread::sleep(Duration::from_millis(50));
    // A fresh mount (nothing remembered): stat, read, stat.
    let m = Mount::as_user(&d, "", "tests");
    let first = shown();
    sh_as_tests(&format!("cd {mnt} && cat {} >/dev/null", files.join(" ")));
    assert_eq!(on_backing(), before, "a stat and a read moved the backing ctime");
    m.unmount();
    assert_eq!(on_backing(), before, "the unmount moved the backing ctime");
    // Another fresh mount shows what the first showed.
    let m = Mount::as_user(&d, "", "tests");
    assert_eq!(shown(), first);
    let expect: Vec<String> = before.iter().map(|(s, n)| format!("{s}.{n:09}")).collect();
    assert_eq!(
        first.lines().collect::<Vec<_>>(),
        expect,
        "stat shows the backing's ctime"
    );
    // Made writable again by its owner (its state, opened read-only by the stat, stays),
    // then written: the writes land.
    sh_as_tests(&format!(
        "cd {mnt} && cat big.txt >/dev/null && chmod 644 big.txt small.txt && \
         echo more >> big.txt && truncate -s 3 small.txt && sync"
    ));
    m.unmount();
    let m = Mount::as_user(&d, "", "tests");
    let out = common::as_tests(&[
        "sh",
        "-c",
        &format!("cd {mnt} && tail -n 2 big.txt && cat small.txt"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "100000\nmore\nsma");
    m.unmount();
    common::check_clean(&b, "after the writes");
}
