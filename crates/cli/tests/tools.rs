//! The user tools on real trees and real mounts: `stats PATH…` (compsize) and `compress`.

#![deny(unsafe_code)]

mod common;
use common::allocated;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{getfattr, real_tree, registry_tree, scratch, squeezefs, squeezefs_json, types, Mount};
use serde_json::Value;

fn os<P: AsRef<OsStr> + ?Sized>(p: &P) -> &OsStr {
    p.as_ref()
}

fn same_tree(root: &Path, files: &[(PathBuf, Vec<u8>)]) {
    for (rel, data) in files {
        let got = fs::read(root.join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
        assert!(got == *data, "{} differs", rel.display());
    }
}

#[test]
fn stats_counts_a_tree_the_same_on_the_mount_and_in_the_backing_directory() {
    let d = scratch("stats-tree");
    // Containers (packed files have their own rows: `packing.rs`).
    let m = Mount::new(&d, "compress=zstd:3,nopack");
    let files = real_tree(&m.path("src"));
    // A big text file (extents), a sparse one (holes count nothing), and a hard link.
    let big: Vec<u8> = (0..400_000u32)
        .flat_map(|i| format!("{i} log line\n").into_bytes())
        .collect();
    fs::write(m.path("big.log"), &big).unwrap();
    let f = fs::File::create(m.path("sparse")).unwrap();
    f.set_len(50 << 20).unwrap();
    drop(f);
    fs::hard_link(m.path("big.log"), m.path("big-link.log")).unwrap();
    Command::new("sync").status().unwrap();

    let on_mount = squeezefs_json(&[os("stats"), m.mnt.as_os_str()]);
    let in_backing = squeezefs_json(&[os("stats"), d.join("backing").as_os_str()]);
    for k in [
        "files",
        "containers",
        "disk",
        "uncompressed",
        "referenced",
        "extents",
        "inline",
    ] {
        assert_eq!(on_mount[k], in_backing[k], "{k}");
    }
    let logical: u64 = files.iter().map(|f| f.1.len() as u64).sum::<u64>() + big.len() as u64;
    assert_eq!(
        on_mount["files"],
        files.len() as u64 + 2,
        "a hard link counts once"
    );
    assert_eq!(on_mount["plain"], 0);
    assert_eq!(on_mount["uncompressed"], logical, "holes hold nothing");
    assert_eq!(on_mount["referenced"], logical + (50 << 20));
    assert_eq!(
        on_mount["disk"],
        allocated(&d.join("backing")) + common::directories_allocated(&d.join("backing")),
        "disk is what the backing files and directories occupy"
    );
    let t = types(&on_mount);
    assert!(
        t.contains(&"zstd:3".into()) && t.contains(&"inline".into()),
        "{t:?}"
    );
    assert!(
        on_mount["disk"].as_u64().unwrap() < logical / 2,
        "source code compresses"
    );

    // One file, through the mount: its extents and nothing else.
    let one = squeezefs_json(&[os("stats"), m.path("big.log").as_os_str()]);
    assert_eq!(one["files"], 1);
    assert_eq!(one["uncompressed"], big.len() as u64);
    assert_eq!(types(&one), vec!["zstd:3".to_string()]);

    // The table a person reads.
    let out = squeezefs(&[os("stats"), m.mnt.as_os_str()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "Processed",
        "files/s",
        "Type",
        "Perc",
        "Disk Usage",
        "TOTAL",
        "zstd:3",
        "inline",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
    // A path that does not exist is named.
    let out = squeezefs(&[os("stats"), m.path("nope").as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    m.unmount();
}

/// An adopted directory: plain files with owners, modes, xattrs and times of their own.
fn adopted(backing: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let files = real_tree(backing);
    let p = backing.join(&files[0].0);
    fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
    Command::new("setfattr")
        .args(["-n", "user.origin", "-v", "adopted"])
        .arg(&p)
        .status()
        .unwrap();
    Command::new("touch")
        .args(["-d", "2001-02-03 04:05:06"])
        .arg(&p)
        .status()
        .unwrap();
    files
}

#[test]
fn compress_turns_an_adopted_directory_into_containers_and_can_run_again() {
    let d = scratch("compress-adopt");
    let backing = d.join("backing");
    let files = adopted(&backing);
    let first = backing.join(&files[0].0);
    let before = fs::metadata(&first).unwrap();
    let plain = squeezefs_json(&[os("stats"), backing.as_os_str()]);
    assert_eq!(plain["plain"], files.len() as u64);
    // A copy an interrupted run left (its process is gone) is cleaned up.
    let stale = backing.join(".x.rs.squeezefs-compress.999999999.0");
    fs::write(&stale, b"partial").unwrap();

    let r = squeezefs_json(&[
        os("compress"),
        backing.as_os_str(),
        os("--codec"),
        os("zstd:7"),
        os("--no-pack"),
    ]);
    assert_eq!(r["converted"], files.len() as u64, "{r}");
    assert_eq!(r["failed"], 0);
    // Asking the directories above whether a squeezefs serves them leaves nothing there.
    assert!(
        !d.join(".squeezefs-lock").exists(),
        "a lock file made above BACKING"
    );
    assert!(!stale.exists(), "leftover copy removed");
    assert!(r["disk_after"].as_u64().unwrap() < r["disk_before"].as_u64().unwrap());

    let after = squeezefs_json(&[os("stats"), backing.as_os_str()]);
    assert_eq!(after["plain"], 0);
    assert_eq!(after["containers"], files.len() as u64);
    assert!(
        types(&after)
            .iter()
            .all(|t| t == "zstd:7" || t == "inline" || t == "none"),
        "{after}"
    );

    let md = fs::metadata(&first).unwrap();
    assert_eq!(md.mode(), before.mode());
    assert_eq!(
        (md.uid(), md.gid(), md.mtime()),
        (before.uid(), before.gid(), before.mtime())
    );
    let x = getfattr(&first, "user.origin");
    assert_eq!(x.as_deref(), Some(&b"adopted"[..]));

    // Run again: nothing left to do.
    let again = squeezefs_json(&[
        os("compress"),
        backing.as_os_str(),
        os("--codec"),
        os("zstd:7"),
        os("--no-pack"),
    ]);
    assert_eq!(again["skipped"], files.len() as u64, "{again}");
    // A new extent size alone: copies keep their codec (their own property).
    let big = &files.iter().max_by_key(|f| f.1.len()).unwrap().0;
    let r = squeezefs_json(&[
        os("compress"),
        backing.join(big).as_os_str(),
        os("--extent-size"),
        os("64K"),
        os("--no-pack"),
    ]);
    assert_eq!(r["converted"], 1, "{r}");
    let one = squeezefs_json(&[os("stats"), backing.join(big).as_os_str()]);
    assert!(types(&one).iter().all(|t| t == "zstd:7" || t == "none"), "{one}");

    // Every byte reads back through a mount, and check finds nothing wrong.
    let m = Mount::new(&d, "");
    same_tree(&m.mnt, &files);
    assert_eq!(
        fs::metadata(m.mnt.join(&files[0].0)).unwrap().mtime(),
        before.mtime()
    );
    // While mounted, the backing directory is refused, naming what to do.
    let out = squeezefs(&[os("compress"), backing.as_os_str(), os("--codec"), os("lz4")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use") && err.contains("on the mount"), "{err}");
    m.unmount();
    let c = squeezefs_json(&[os("check"), backing.as_os_str()]);
    assert_eq!(c["damaged_files"], 0, "{c}");
}

#[test]
fn compress_on_a_mount_recompresses_in_place_and_changes_extent_size_by_copy() {
    let d = scratch("compress-mount");
    // 128 KiB extents named: written whole, big.txt would take 1 MiB extents at once, and
    // `--extent-size 1M` would find nothing to copy in it.
    let m = Mount::new(&d, "compress=lz4,extent_size=128K");
    let files = real_tree(&m.path("t"));
    let big: Vec<u8> = (0..600_000u32)
        .flat_map(|i| format!("{i} entry\n").into_bytes())
        .collect();
    fs::write(m.path("t/big.txt"), &big).unwrap();
    fs::hard_link(m.path("t/big.txt"), m.path("big-link")).unwrap();
    fs::write(m.path("t/empty"), b"").unwrap();
    let ino = fs::metadata(m.path("t/big.txt")).unwrap().ino();
    let s0 = squeezefs_json(&[os("stats"), m.path("t").as_os_str()]);
    assert!(types(&s0).contains(&"lz4:1".into()), "{s0}");

    // Another codec: in place (same inode, hard links kept), through the daemon.
    let r = squeezefs_json(&[
        os("compress"),
        m.path("t").as_os_str(),
        os("--codec"),
        os("zstd:5"),
    ]);
    assert_eq!(r["failed"], 0, "{r}");
    assert!(r["rewritten"].as_u64().unwrap() > 0);
    let s1 = squeezefs_json(&[os("stats"), m.path("t").as_os_str()]);
    assert!(types(&s1).iter().all(|t| t != "lz4:1"), "{s1}");
    assert!(types(&s1).contains(&"zstd:5".into()));
    assert!(
        s1["disk"].as_u64() < s0["disk"].as_u64(),
        "zstd:5 beats lz4 on source code"
    );
    assert_eq!(fs::metadata(m.path("t/big.txt")).unwrap().ino(), ino);
    assert_eq!(fs::metadata(m.path("big-link")).unwrap().nlink(), 2);
    // The file now has the codec as its property, so later writes use it too.
    let p = getfattr(&m.path("t/big.txt"), "user.squeezefs.compression");
    assert_eq!(p.as_deref(), Some(&b"zstd:5"[..]));
    // An empty file too (nothing to rewrite; it was skipped without its property).
    let p = getfattr(&m.path("t/empty"), "user.squeezefs.compression");
    assert_eq!(p.as_deref(), Some(&b"zstd:5"[..]));

    // Another extent size: copied and renamed over; the hard-linked file is left alone.
    let r = squeezefs_json(&[
        os("compress"),
        m.path("t").as_os_str(),
        os("--extent-size"),
        os("1M"),
    ]);
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(r["left_alone"], 1, "{r}");
    assert!(r["converted"].as_u64().unwrap() > 0);
    let one = &files
        .iter()
        .find(|f| f.1.len() > 8192)
        .expect("a file with extents")
        .0;
    let es = getfattr(&m.path("t").join(one), "user.squeezefs.extent_size");
    assert_eq!(es.as_deref(), Some(&b"1M"[..]));
    let kept = getfattr(&m.path("t").join(one), "user.squeezefs.compression");
    assert_eq!(
        kept.as_deref(),
        Some(&b"zstd:5"[..]),
        "the copy keeps the file's own codec"
    );
    let s2 = squeezefs_json(&[os("stats"), m.path("t").as_os_str()]);
    assert!(types(&s2).iter().all(|t| t != "zstd:3"), "{s2}");
    same_tree(&m.path("t"), &files);
    assert_eq!(fs::read(m.path("t/big.txt")).unwrap(), big);
    let leftovers: Vec<_> = fs::read_dir(m.path("t"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("squeezefs-compress"))
        .collect();
    assert!(leftovers.is_empty());
    m.unmount();
    let c = squeezefs_json(&[os("check"), d.join("backing").as_os_str()]);
    assert_eq!(c["damaged_files"], 0, "{c}");
}

#[test]
fn compress_without_a_codec_uses_the_mount_and_directory_codecs() {
    let d = scratch("compress-default");
    let files = real_tree(&d.join("backing/adopted"));
    fs::create_dir_all(d.join("backing/deep")).unwrap();
    // Containers: what `compress` converts to on a mount that does not pack.
    let m = Mount::new(&d, "compress=lz4,nopack");
    Command::new("setfattr")
        .args(["-n", "user.squeezefs.compression", "-v", "zlib:9"])
        .arg(m.path("deep"))
        .status()
        .unwrap();
    // Plain files in an adopted directory, and one more in a directory with its own codec
    // (put there behind the daemon's back: an adopted file, not a new one).
    let big: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("{i} row\n").into_bytes())
        .collect();
    fs::write(d.join("backing/deep/rows.txt"), &big).unwrap();
    let r = squeezefs_json(&[os("compress"), m.mnt.as_os_str()]);
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(r["converted"], files.len() as u64 + 1, "{r}");
    let adopted = squeezefs_json(&[os("stats"), m.path("adopted").as_os_str()]);
    assert!(
        types(&adopted)
            .iter()
            .all(|t| t == "lz4:1" || t == "inline" || t == "none"),
        "{adopted}"
    );
    let deep = squeezefs_json(&[os("stats"), m.path("deep").as_os_str()]);
    assert_eq!(types(&deep), vec!["zlib:9".to_string()], "{deep}");
    // Nothing was pinned: the files follow the mount's codec, and a second run has nothing to do.
    let own = getfattr(&m.path("adopted").join(&files[0].0), "user.squeezefs.compression");
    assert_eq!(own, None, "no property of its own");
    let again = squeezefs_json(&[os("compress"), m.mnt.as_os_str()]);
    assert_eq!(again["skipped"], files.len() as u64 + 1, "{again}");
    same_tree(&m.path("adopted"), &files);
    assert_eq!(fs::read(m.path("deep/rows.txt")).unwrap(), big);
    m.unmount();
}

#[test]
fn an_interrupted_compress_leaves_every_file_whole() {
    let d = scratch("compress-kill");
    let backing = d.join("backing");
    let mut files = real_tree(&backing);
    // Enough work to be killed in the middle of.
    for i in 0..40 {
        let data: Vec<u8> = (0..50_000u32)
            .flat_map(|j| format!("{i} {j} row\n").into_bytes())
            .collect();
        let rel = PathBuf::from(format!("rows/{i}.txt"));
        fs::create_dir_all(backing.join("rows")).unwrap();
        fs::write(backing.join(&rel), &data).unwrap();
        files.push((rel, data));
    }
    for delay_ms in [30u64, 120, 400] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_squeezefs"))
            .args([os("compress"), backing.as_os_str(), os("--codec"), os("zstd:19")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        child.wait().unwrap();
        let c = squeezefs_json(&[os("check"), backing.as_os_str()]);
        assert_eq!(c["damaged_files"], 0, "after a kill at {delay_ms} ms: {c}");
        let m = Mount::new(&d, "");
        let visible = files.iter().filter(|f| m.mnt.join(&f.0).exists()).count();
        assert_eq!(visible, files.len());
        same_tree(&m.mnt, &files);
        m.unmount();
    }
    let r = squeezefs_json(&[os("compress"), backing.as_os_str(), os("--codec"), os("zstd:19")]);
    assert_eq!(r["failed"], 0, "{r}");
    let s = squeezefs_json(&[os("stats"), backing.as_os_str()]);
    assert_eq!(s["plain"], 0, "{s}");
    assert_eq!(s["files"], files.len() as u64, "no leftover copies counted");
}

/// `squeezefs compress BACKING --codec zstd:3 --no-pack`: every file a container, as
/// `estimate`'s `disk` column predicts (its `disk_packed` is the packed prediction).
fn compress_to_containers(backing: &Path) {
    squeezefs_json(&[
        os("compress"),
        backing.as_os_str(),
        os("--codec"),
        os("zstd:3"),
        os("--no-pack"),
    ]);
}

fn codec_row<'a>(est: &'a Value, codec: &str) -> &'a Value {
    est["codecs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["codec"] == codec)
        .unwrap_or_else(|| panic!("{codec} missing: {est}"))
}

#[test]
fn estimate_over_every_extent_is_exactly_what_compress_then_takes() {
    let d = scratch("estimate-census");
    let backing = d.join("backing");
    real_tree(&backing);
    let est = squeezefs_json(&[
        os("estimate"),
        backing.as_os_str(),
        os("--codecs"),
        os("zstd:3,lz4"),
        os("--sample"),
        os("1G"),
    ]);
    assert!(est["types"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["census"] == true));
    let predicted = codec_row(&est, "zstd:3")["disk"].as_u64().unwrap();
    assert_eq!(codec_row(&est, "zstd:3")["disk_stderr"], 0);
    assert!(codec_row(&est, "lz4:1")["disk"].as_u64().unwrap() > predicted);
    compress_to_containers(&backing);
    // (Estimates are of the files; `stats` counts the directories too.)
    let s = squeezefs_json(&[os("stats"), backing.as_os_str()]);
    let actual = s["disk"].as_u64().unwrap() - s["directories"].as_u64().unwrap();
    let err = (actual as f64 - predicted as f64).abs() / actual as f64;
    assert!(err < 0.005, "predicted {predicted}, compress took {actual}");
    // On the compressed tree (containers now) it reads the logical data: the same answer.
    let again = squeezefs_json(&[
        os("estimate"),
        backing.as_os_str(),
        os("--codecs"),
        os("zstd:3"),
        os("--sample"),
        os("1G"),
    ]);
    assert_eq!(codec_row(&again, "zstd:3")["disk"], predicted);
}

#[test]
fn a_sampled_estimate_is_within_its_error_of_a_real_compress() {
    let d = scratch("estimate-sample");
    let backing = d.join("backing");
    let bytes = registry_tree(&backing, 40 << 20);
    let start = std::time::Instant::now();
    let est = squeezefs_json(&[
        os("estimate"),
        backing.as_os_str(),
        os("--codecs"),
        os("zstd:3"),
        os("--sample"),
        os("2M"),
    ]);
    let secs = start.elapsed().as_secs_f64();
    let sampled = est["sampled_bytes"].as_u64().unwrap();
    assert!(sampled * 4 < bytes, "it samples: {sampled} of {bytes} bytes");
    let row = codec_row(&est, "zstd:3");
    let (ratio, pm) = (row["ratio"].as_f64().unwrap(), row["ratio_pm"].as_f64().unwrap());
    compress_to_containers(&backing);
    let s = squeezefs_json(&[os("stats"), backing.as_os_str()]);
    let files_disk = s["disk"].as_u64().unwrap() - s["directories"].as_u64().unwrap();
    let actual = s["uncompressed"].as_f64().unwrap() / files_disk as f64;
    eprintln!("estimate {ratio:.3} ± {pm:.3} in {secs:.1} s (sampled {sampled} of {bytes} bytes); compress gave {actual:.3}");
    assert!(pm > 0.0 && pm < ratio * 0.2, "a useful error bound: ± {pm}");
    // Three standard errors (the ± is two): fails by chance about once in 400 trees.
    assert!(
        (actual - ratio).abs() <= 1.5 * pm,
        "estimate {ratio:.3} ± {pm:.3}, compress gave {actual:.3}"
    );
}

/// A report piped into a reader that stops early (`| head`) ends the command as it ends
/// any Unix tool: quietly, by SIGPIPE; it was a panic ("failed printing to stdout").
#[test]
fn a_report_into_a_closed_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("closed-pipe");
    for i in 0..50 {
        fs::write(dir.join("backing").join(format!("f{i}")), vec![b'x'; 100 * i]).unwrap();
    }
    for args in [&["stats"][..], &["stats", "--json"], &["property", "get"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // the reader is gone before the first line
        let target = if args[0] == "property" {
            dir.join("backing/f1")
        } else {
            dir.join("backing")
        };
        let out = Command::new(env!("CARGO_BIN_EXE_squeezefs"))
            .args(args)
            .arg(&target)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?} {err}",
            out.status
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// `compress` on a mount that packs rewrites small files out of their blocks: their old
/// bytes are garbage in the pack the mount appends to. At its end it asks the daemon for a
/// reclaim round, which retires that pack first (issue 43: 32 MiB of garbage stayed in the
/// pack in use until it filled or the mount ended, and an explicit round freed 0 B), so
/// `stats` right after shows next to no garbage.
#[test]
fn compress_on_a_mount_leaves_next_to_no_pack_garbage() {
    let d = scratch("compress-garbage");
    // No background rounds: only the one compress asks for may reclaim.
    let m = Mount::new(&d, "compress=lz4,pack_gc=0");
    fs::create_dir(m.path("small")).unwrap();
    for i in 0..1500u32 {
        let text: String = (0..60)
            .map(|j| format!("file {i} line {j}: {}\n", i * 7919 + j))
            .collect();
        fs::write(m.path(&format!("small/f{i}.txt")), text).unwrap();
    }
    let r = squeezefs_json(&[os("compress"), m.mnt.as_os_str(), os("--codec"), os("zstd:9")]);
    assert_eq!(r["failed"], 0, "{r}");
    assert!(r["rewritten"].as_u64().unwrap() >= 1500, "{r}");
    assert!(r["reclaimed_bytes"].as_u64().unwrap() > 0, "{r}");
    let s = squeezefs_json(&[os("stats"), m.mnt.as_os_str()]);
    let (garbage, bytes) = (
        s["packs"]["garbage_bytes"].as_u64().expect("garbage measured"),
        s["packs"]["bytes"].as_u64().unwrap(),
    );
    println!("FIGURES after compress on a mount: {garbage} B of pack garbage in {bytes} B of packs");
    assert!(
        garbage * 20 <= bytes,
        "{garbage} B of garbage in {bytes} B of packs: {s}"
    );
    assert!(types(&s).contains(&"packed zstd:9".into()), "{s}");
    for i in (0..1500u32).step_by(97) {
        let text: String = (0..60)
            .map(|j| format!("file {i} line {j}: {}\n", i * 7919 + j))
            .collect();
        assert_eq!(
            fs::read_to_string(m.path(&format!("small/f{i}.txt"))).unwrap(),
            text
        );
    }
    m.unmount();
    common::check_clean(&d.join("backing"), "after compress on a mount");
}
