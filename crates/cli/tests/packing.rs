//! Small files packed (format 4, mount option `pack`) on a real mount: a tree of small
//! real files round-trips through a remount, takes less disk than one container per file,
//! its backing files hold no data block, the live statistics (`stats --live`) count what was
//! packed and read (and say when a mount does not pack), and the daemon's own record and
//! directory stay invisible through the mount; `check` verifies packs and reclaims garbage;
//! `compress` and `estimate` know packs; `stats` accounts packed files and packs.

#![deny(unsafe_code)]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;
use common::{allocated, du};
use common::{files_under, getfattr, real_tree, scratch, squeezefs, squeezefs_json, Mount};

/// `squeezefs stats --live MOUNT --json`'s `packs` object.
fn live_packs(m: &Mount) -> Value {
    squeezefs_json(&["stats".as_ref(), "--live".as_ref(), m.mnt.as_os_str()])["packs"].clone()
}

/// A counter of a `packs` object.
fn count(p: &Value, key: &str) -> u64 {
    p[key]
        .as_u64()
        .unwrap_or_else(|| panic!("packs.{key} missing: {p}"))
}

/// A tree copied into a mount, and what the mount said about it.
struct Tree {
    files: Vec<(PathBuf, Vec<u8>)>,
    /// Disk used by the backing directory afterwards.
    disk: u64,
    dir: PathBuf,
    /// The live `packs` counters after the copy and a sync, then after reading it back.
    written: Value,
    read: Value,
    /// `stats --live`'s table (after the reads) and the daemon's log.
    table: String,
    log: String,
}

/// Rewrites one file in three (reversed) and deletes one in three under `src` of the mount:
/// garbage in the packs. Returns the files left, with their new contents.
fn churn(m: &Mount, files: Vec<(PathBuf, Vec<u8>)>) -> Vec<(PathBuf, Vec<u8>)> {
    let mut kept = Vec::new();
    for (i, (rel, data)) in files.into_iter().enumerate() {
        let p = m.path("src").join(&rel);
        match i % 3 {
            0 => kept.push((rel, data)),
            1 => {
                let new: Vec<u8> = data.iter().rev().copied().collect();
                fs::write(&p, &new).unwrap();
                kept.push((rel, new));
            }
            _ => fs::remove_file(&p).unwrap(),
        }
    }
    kept
}

/// Every file of `files` reads back the same under `src` of the mount.
fn reads_back(m: &Mount, files: &[(std::path::PathBuf, Vec<u8>)]) {
    for (rel, data) in files {
        let got = fs::read(m.path("src").join(rel)).unwrap();
        assert!(&got == data, "{} differs", rel.display());
    }
}

/// Copies the repository's sources into a mount with `opts`, syncs, reads them back.
fn tree_on(name: &str, opts: &str) -> Tree {
    let dir = scratch(name);
    let m = Mount::new(&dir, opts);
    let files = real_tree(&m.path("src"));
    let st = Command::new("sync").arg("-f").arg(&m.mnt).status().unwrap();
    assert!(st.success());
    let written = live_packs(&m);
    // The kernel keeps what was just written in its page cache (FOPEN_KEEP_CACHE): drop it,
    // so the read-back below goes through the daemon and its packs.
    nix::unistd::sync();
    fs::write("/proc/sys/vm/drop_caches", "1").expect("this test needs root (CI runs as root)");
    reads_back(&m, &files);
    // No file with bytes reports zero blocks (tar --sparse and cp would take it for holes).
    for (rel, data) in &files {
        let b = fs::metadata(m.path("src").join(rel)).unwrap().blocks();
        assert!(data.is_empty() || b > 0, "{} reports 0 blocks", rel.display());
    }
    let read = live_packs(&m);
    let out = squeezefs(&["stats".as_ref(), "--live".as_ref(), m.mnt.as_os_str()]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    m.unmount();
    Tree {
        files,
        disk: du(&dir.join("backing")),
        log: fs::read_to_string(dir.join("daemon.log")).unwrap(),
        dir,
        written,
        read,
        table,
    }
}

#[test]
fn a_tree_of_small_files_is_packed_and_round_trips() {
    let packed = tree_on("pack-tree", "compress=zstd:1,pack,pack_cache=8M");
    let plain = tree_on("nopack-tree", "compress=zstd:1,nopack");
    let (files, packed_disk, plain_disk, dir) = (&packed.files, packed.disk, plain.disk, &packed.dir);
    let logical: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    println!(
        "FIGURES {} files, {logical} bytes: packed {packed_disk} on disk (ratio {:.2}), one container per file {plain_disk} (ratio {:.2})",
        files.len(),
        logical as f64 / packed_disk as f64,
        logical as f64 / plain_disk as f64
    );
    // The tree is this repository's own `crates/`, which grows with the code and holds
    // larger files over time (137 files of 9.4 KB on average when packing saved 49.8 %
    // here): the test asks for 40 %, the figure above is what it was.
    assert!(
        packed_disk * 5 < plain_disk * 3,
        "packing saves at least 40 %: {packed_disk} vs {plain_disk}"
    );
    // The live counters: every file with bytes went to a pack, many to a block, stored
    // smaller; reading them back went through the packs' block cache or the disk.
    let (w, r) = (&packed.written, &packed.read);
    println!("PACKS written {w}\nPACKS read {r}");
    assert_eq!(w["packing"], true, "{w}");
    let nonempty = files.iter().filter(|(_, d)| !d.is_empty()).count() as u64;
    assert!(count(w, "files_packed") >= nonempty, "{nonempty} files: {w}");
    assert!(count(w, "blocks_written") > 0, "{w}");
    assert!(count(w, "blocks_written") * 2 < count(w, "files_packed"), "{w}");
    assert!(count(w, "bytes_in") >= logical, "{logical} bytes: {w}");
    assert!(count(w, "bytes_stored") > 0, "{w}");
    assert!(count(w, "bytes_stored") * 2 < count(w, "bytes_in"), "{w}");
    assert_eq!(count(w, "cache_size"), 8 << 20, "pack_cache=8M: {w}");
    assert!(
        count(r, "blocks_read") + count(r, "cache_hits") > count(w, "blocks_read") + count(w, "cache_hits"),
        "reads counted: {w} then {r}"
    );
    assert!(packed.table.contains("files packed in"), "{}", packed.table);
    assert!(
        packed
            .log
            .lines()
            .any(|l| l.contains("mounting") && l.ends_with("KiB, format 4)")),
        "{}",
        packed.log
    );
    // A mount that does not pack says so, and packs nothing.
    let p = &plain.read;
    assert_eq!(p["packing"], false, "{p}");
    assert_eq!(
        (count(p, "files_packed"), count(p, "blocks_written")),
        (0, 0),
        "{p}"
    );
    assert_eq!(
        count(p, "cache_size"),
        squeezefs_container::pack::DEFAULT_CACHE as u64
    );
    assert!(
        plain.table.contains("not packing (mounted with -o nopack"),
        "{}",
        plain.table
    );
    assert!(
        plain
            .log
            .lines()
            .any(|l| l.contains("mounting") && l.ends_with("KiB, format 3)"))
            && !plain.log.contains("format 4"),
        "{}",
        plain.log
    );
    // Backing files of at most one extent hold no data block: their bytes are in a pack.
    let backing = dir.join("backing");
    for (p, meta) in files_under(&backing.join("src")) {
        assert_eq!(meta.len(), 0, "{} keeps bytes in its backing file", p.display());
        assert_eq!(meta.blocks(), 0, "{} takes a block", p.display());
        assert!(
            getfattr(&p, "user.sqzfs").is_some(),
            "{} has no record",
            p.display()
        );
    }
    let packs: Vec<_> = fs::read_dir(backing.join(".squeezefs-packs")).unwrap().collect();
    assert!(!packs.is_empty());

    // Read back through a mount that does not pack (packs are always read): a new daemon,
    // so its blocks come from the disk.
    let m = Mount::new(dir, "nopack");
    for (rel, data) in files {
        let got = fs::read(m.path("src").join(rel)).unwrap();
        assert!(&got == data, "{} differs after remount", rel.display());
        assert_eq!(
            fs::metadata(m.path("src").join(rel)).unwrap().len(),
            data.len() as u64
        );
    }
    let p = live_packs(&m);
    assert_eq!(p["packing"], false, "{p}");
    assert!(count(&p, "blocks_read") > 0, "{p}");
    assert_eq!(count(&p, "files_packed"), 0, "{p}");
    // The record and the pack directory are the daemon's own.
    let one = m.path("src").join(&files[0].0);
    assert!(
        getfattr(&one, "user.sqzfs").is_none(),
        "record visible through the mount"
    );
    let st = Command::new("setfattr")
        .args(["-n", "user.sqzfs", "-v", "x"])
        .arg(&one)
        .status()
        .unwrap();
    assert!(!st.success(), "record settable through the mount");
    let listed = fs::read_dir(&m.mnt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect::<Vec<_>>();
    assert!(!listed.iter().any(|n| n == ".squeezefs-packs"), "{listed:?}");
    assert!(fs::create_dir(m.path(".squeezefs-packs")).is_err());
    m.unmount();

    // Growing past one extent makes a container; shrinking packs it again; renames and
    // hard links across directories keep the bytes.
    let m = Mount::new(dir, "compress=zstd:1,pack");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("src/grown"), b"small first").unwrap();
    fs::write(m.path("src/grown"), &big).unwrap();
    fs::create_dir(m.path("elsewhere")).unwrap();
    fs::rename(m.path("src").join(&files[1].0), m.path("elsewhere/moved")).unwrap();
    fs::hard_link(m.path("src").join(&files[2].0), m.path("elsewhere/linked")).unwrap();
    m.unmount();
    let grown = backing.join("src/grown");
    assert!(
        fs::metadata(&grown).unwrap().len() > 0,
        "a grown file is a container"
    );
    assert!(getfattr(&grown, "user.sqzfs").is_none(), "its record is gone");
    let m = Mount::new(dir, "compress=zstd:1,pack");
    assert_eq!(fs::read(m.path("src/grown")).unwrap(), big);
    assert_eq!(fs::read(m.path("elsewhere/moved")).unwrap(), files[1].1);
    assert_eq!(fs::read(m.path("elsewhere/linked")).unwrap(), files[2].1);
    fs::OpenOptions::new()
        .write(true)
        .open(m.path("src/grown"))
        .unwrap()
        .set_len(1000)
        .unwrap();
    m.unmount();
    let m = Mount::new(dir, "");
    assert_eq!(fs::read(m.path("src/grown")).unwrap(), &big[..1000]);
    m.unmount();
    assert_eq!(
        fs::metadata(&grown).unwrap().len(),
        0,
        "shrunk to one extent: packed again"
    );
    fs::remove_dir_all(dir).unwrap();
    fs::remove_dir_all(&plain.dir).unwrap();
}

/// `squeezefs check BACKING --json` (exit status and document).
fn check(backing: &Path, repair: bool) -> (i32, serde_json::Value) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["check".as_ref(), backing.as_os_str(), "--json".as_ref()];
    if repair {
        args.push("--repair".as_ref());
    }
    let out = common::squeezefs(&args);
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), doc)
}

#[test]
fn check_verifies_packs_reclaims_garbage_and_names_damage() {
    let dir = scratch("pack-check");
    let backing = dir.join("backing");
    // (Reclaiming at unmount is off: this test reclaims with `check --repair`.)
    let m = Mount::new(&dir, "compress=zstd:1,pack,nopack_reclaim");
    let files = real_tree(&m.path("src"));
    // Delete two files in three: their bytes stay in the packs as garbage.
    let mut kept = Vec::new();
    for (i, (rel, data)) in files.into_iter().enumerate() {
        if i % 3 == 0 {
            kept.push((rel, data));
        } else {
            fs::remove_file(m.path("src").join(&rel)).unwrap();
        }
    }
    m.unmount();
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["packed"].as_u64().unwrap(), kept.len() as u64);
    assert_eq!(doc["extents_verified"].as_u64().unwrap(), kept.len() as u64);
    let garbage = doc["packs"]["garbage_bytes"].as_u64().unwrap();
    let before = doc["packs"]["bytes"].as_u64().unwrap();
    assert!(
        garbage * 2 > before,
        "two thirds deleted: {garbage} of {before} garbage"
    );

    // --repair reclaims: the packs shrink by the garbage, the files read back the same.
    let (code, doc) = check(&backing, true);
    assert_eq!(code, 0, "{doc}");
    let moved = doc["packs"]["reclaimed"]["files_moved"].as_u64().unwrap();
    assert!(moved > 0, "{doc}");
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    let after = doc["packs"]["bytes"].as_u64().unwrap();
    let left = doc["packs"]["garbage_bytes"].as_u64().unwrap();
    println!("FIGURES packs {before} bytes with {garbage} garbage → {after} bytes with {left} garbage after check --repair");
    assert!(after + garbage / 2 < before, "{before} → {after}");
    assert!(left * 4 <= after, "{left} garbage of {after} left");
    let m = Mount::new(&dir, "");
    reads_back(&m, &kept);
    m.unmount();

    // A pack nothing points into is a leftover: --repair removes it.
    let packs = backing.join(".squeezefs-packs");
    let some = fs::read_dir(&packs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "pack"))
        .expect("a pack");
    let orphan = packs.join("999.pack");
    let mut bytes = fs::read(&some).unwrap();
    bytes[16..20].copy_from_slice(&999u32.to_le_bytes());
    // (The header's checksum no longer matches: an orphan whether or not it decodes.)
    fs::write(&orphan, &bytes).unwrap();
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["packs"]["leftovers"].as_u64().unwrap(), 1, "{doc}");
    let (code, _) = check(&backing, true);
    assert_eq!(code, 0);
    assert!(!orphan.exists());

    // A flipped byte in a block files use: exit 1, the pack and the files named.
    let some = fs::read_dir(&packs).unwrap().next().unwrap().unwrap().path();
    let mut bytes = fs::read(&some).unwrap();
    let at = 64 + 48 + 10;
    bytes[at] ^= 0x40;
    fs::write(&some, &bytes).unwrap();
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 1, "{doc}");
    assert!(doc["packs"]["damaged_packs"].as_u64().unwrap() == 1, "{doc}");
    let damaged = doc["damaged_files"].as_u64().unwrap();
    assert!(damaged > 0, "{doc}");
    let text = doc.to_string();
    assert!(
        text.contains(&*some.to_string_lossy()),
        "the pack is named: {text}"
    );
    // --repair never removes what damaged files still point into.
    let (code, _) = check(&backing, true);
    assert_eq!(code, 1);
    assert!(some.exists());
}

/// `squeezefs compress ARGS… --json`.
fn compress(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let mut a: Vec<&std::ffi::OsStr> = vec!["compress".as_ref()];
    a.extend_from_slice(args);
    common::squeezefs_json(&a)
}

#[test]
fn compress_packs_plain_files_and_containers_offline_and_keeps_them_packed() {
    // An adopted directory of plain files.
    let dir = scratch("pack-compress");
    let backing = dir.join("backing");
    fs::create_dir_all(&backing).unwrap();
    let files = real_tree(&backing.join("src"));
    let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
    let some = files.iter().find(|(_, d)| d.len() > 4096).unwrap().0.clone();
    let before = mtime(&backing.join("src").join(&some));
    // Packing is the default, offline as on a mount.
    let doc = compress(&[backing.as_os_str()]);
    assert_eq!(doc["failed"], 0, "{doc}");
    assert_eq!(doc["converted"].as_u64().unwrap(), files.len() as u64, "{doc}");
    for (p, meta) in files_under(&backing.join("src")) {
        assert_eq!(meta.blocks(), 0, "{} takes a block", p.display());
        assert!(
            getfattr(&p, "user.sqzfs").is_some(),
            "{} has no record",
            p.display()
        );
    }
    assert_eq!(mtime(&backing.join("src").join(&some)), before, "times kept");
    // Solid blocks: far fewer blocks than files.
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["packed"].as_u64().unwrap(), files.len() as u64);
    let blocks: u64 = doc["packs"]["packs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["blocks"].as_u64().unwrap())
        .sum();
    assert!(
        blocks * 4 < files.len() as u64,
        "{blocks} blocks for {} files",
        files.len()
    );
    // `estimate` reads packed files, and predicts packing close to what it takes.
    let pack_bytes = doc["packs"]["bytes"].as_u64().unwrap();
    let est = common::squeezefs_json(&[
        "estimate".as_ref(),
        backing.as_os_str(),
        "--codecs".as_ref(),
        "zstd:3".as_ref(),
    ]);
    let logical: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    assert_eq!(est["bytes"].as_u64().unwrap(), logical, "{est}");
    let predicted = est["codecs"][0]["disk_packed"].as_u64().unwrap();
    let unpacked = est["codecs"][0]["disk"].as_u64().unwrap();
    println!("FIGURES estimate: packed {predicted} (real {pack_bytes}), one container per file {unpacked}");
    assert!(predicted * 2 < unpacked, "{predicted} vs {unpacked}");
    assert!(
        predicted * 10 > pack_bytes * 8 && predicted * 10 < pack_bytes * 12,
        "predicted {predicted}, packed {pack_bytes}"
    );

    // Recompressing packed files keeps them packed, and the garbage they leave is reclaimed.
    let doc = compress(&[backing.as_os_str(), "--codec".as_ref(), "zstd:9".as_ref()]);
    assert_eq!(doc["failed"], 0, "{doc}");
    assert_eq!(doc["rewritten"].as_u64().unwrap(), files.len() as u64, "{doc}");
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["packed"].as_u64().unwrap(), files.len() as u64);
    let garbage = doc["packs"]["garbage_bytes"].as_u64().unwrap();
    let bytes = doc["packs"]["bytes"].as_u64().unwrap();
    assert!(garbage * 4 <= bytes, "{garbage} garbage of {bytes}");
    let m = Mount::new(&dir, "nopack");
    reads_back(&m, &files);
    assert_eq!(
        getfattr(&m.path("src").join(&some), "user.squeezefs.compression").as_deref(),
        Some(b"zstd:9".as_slice())
    );
    // On a mount that does not pack, the default packs nothing and fails nothing...
    let doc = compress(&[m.path("src").as_os_str(), "--codec".as_ref(), "zstd:3".as_ref()]);
    assert_eq!(doc["failed"], 0, "{doc}");
    assert_eq!(doc["packed"], 0, "{doc}");
    // ... and --pack says what to do.
    let out = common::squeezefs(&["compress".as_ref(), m.path("src").as_os_str(), "--pack".as_ref()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("remount it without nopack"));
    m.unmount();

    // Containers written by a mount that does not pack are packed in place.
    let other = scratch("pack-compress-containers");
    let m = Mount::new(&other, "compress=zstd:1,nopack");
    let files = real_tree(&m.path("src"));
    m.unmount();
    let ob = other.join("backing");
    // --no-pack leaves them containers. Recompressed, a small container's current copy may
    // sit in its second half (a backing file over 128 KiB for 30 KB): still packed below.
    let doc = compress(&[
        ob.as_os_str(),
        "--no-pack".as_ref(),
        "--codec".as_ref(),
        "zstd:3".as_ref(),
    ]);
    assert_eq!(doc["failed"], 0, "{doc}");
    assert_eq!(doc["packed"], 0, "{doc}");
    // (The mount made the pack directory, squeezefs's private one, for its probes: it
    // must hold no pack.)
    let packs_made = fs::read_dir(ob.join(squeezefs_container::pack::dir::DIR_NAME))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(packs_made, 0, "--no-pack made packs");
    let doc = compress(&[ob.as_os_str(), "--pack".as_ref()]);
    assert_eq!(doc["failed"], 0, "{doc}");
    let small = files
        .iter()
        .filter(|(_, d)| !d.is_empty() && d.len() <= 128 << 10)
        .count();
    assert_eq!(doc["packed"].as_u64().unwrap(), small as u64, "{doc}");
    let (code, doc) = check(&ob, false);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["leftovers"].as_u64().unwrap(), 0, "{doc}");
    let m = Mount::new(&other, "");
    reads_back(&m, &files);
    m.unmount();
}

/// The `packed …` rows of a `squeezefs stats --json` document: (disk, uncompressed) summed.
fn packed_rows(doc: &serde_json::Value) -> (u64, u64) {
    doc["types"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["type"].as_str().unwrap().starts_with("packed "))
        .fold((0, 0), |(d, u), t| {
            (
                d + t["disk"].as_u64().unwrap(),
                u + t["uncompressed"].as_u64().unwrap(),
            )
        })
}

#[test]
fn stats_counts_packed_files_by_their_share_of_the_packs_and_measures_garbage() {
    let dir = scratch("pack-stats");
    let backing = dir.join("backing");
    let m = Mount::new(&dir, "compress=zstd:1,pack,nopack_reclaim");
    let files = real_tree(&m.path("src"));
    let stats = |p: &Path| squeezefs_json(&["stats".as_ref(), p.as_os_str()]);
    // (Opening the statistics file commits closed files: the records are on disk.)
    let on_mount = stats(&m.mnt);
    let in_backing = stats(&backing);
    // Which files are packed: their backing file carries a record.
    let packed: Vec<&(std::path::PathBuf, Vec<u8>)> = files
        .iter()
        .filter(|(rel, _)| getfattr(&backing.join("src").join(rel), "user.sqzfs").is_some())
        .collect();
    let logical: u64 = packed.iter().map(|(_, d)| d.len() as u64).sum();
    assert!(
        packed.len() * 10 >= files.len() * 9,
        "most source files are packed"
    );
    for doc in [&on_mount, &in_backing] {
        assert_eq!(doc["packed"], packed.len() as u64, "{doc}");
        let (disk, unc) = packed_rows(doc);
        assert_eq!(unc, logical, "packed rows hold the packed files' bytes: {doc}");
        assert!(
            disk > 0 && disk < logical / 2,
            "source text compresses in solid blocks: {disk} for {logical}"
        );
        assert!(common::types(doc).contains(&"packed zstd:1".to_string()), "{doc}");
        // The walk skips the pack directory; the packs are added for the whole tree, so
        // Disk Usage is still what the backing directory occupies (its directories too).
        let dirs = common::directories_allocated(&backing);
        assert_eq!(doc["disk"].as_u64().unwrap(), allocated(&backing) + dirs, "{doc}");
        let p = &doc["packs"];
        assert!(p["count"].as_u64().unwrap() >= 1, "{doc}");
        assert_eq!(
            p["files"],
            packed.iter().filter(|(_, d)| !d.is_empty()).count() as u64
        );
        assert!(p["bytes"].as_u64().unwrap() >= disk, "{doc}");
        assert_eq!(p["whole"], true);
        // Nothing deleted yet: no garbage beyond rounding.
        assert!(
            p["garbage_bytes"].as_u64().unwrap() < 64 * p["count"].as_u64().unwrap() + 1024,
            "{doc}"
        );
    }
    for k in [
        "files",
        "packed",
        "disk",
        "uncompressed",
        "referenced",
        "types",
        "packs",
    ] {
        assert_eq!(on_mount[k], in_backing[k], "{k}");
    }

    // Delete two files in three: their bytes stay in the packs as garbage.
    let mut kept_bytes = 0;
    for (i, (rel, data)) in packed.iter().enumerate() {
        if i % 3 == 0 {
            kept_bytes += data.len() as u64;
        } else {
            fs::remove_file(m.path("src").join(rel)).unwrap();
        }
    }
    let after = stats(&m.mnt);
    assert_eq!(packed_rows(&after).1, kept_bytes, "{after}");
    let garbage = after["packs"]["garbage_bytes"].as_u64().unwrap();
    let bytes = after["packs"]["bytes"].as_u64().unwrap();
    assert!(
        garbage > 0 && garbage * 2 > bytes,
        "two thirds deleted: {garbage} of {bytes}"
    );
    let dirs = common::directories_allocated(&backing);
    assert_eq!(
        after["disk"].as_u64().unwrap(),
        allocated(&backing) + dirs,
        "{after}"
    );

    // A directory below the root: its files' shares, the packs not in the totals, garbage
    // not measured (the walk did not see every record).
    let sub = stats(&m.path("src/cli"));
    let (sub_disk, sub_unc) = packed_rows(&sub);
    assert!(sub_unc > 0 && sub_disk > 0 && sub_disk < sub_unc, "{sub}");
    assert_eq!(sub["packs"]["whole"], false, "{sub}");
    assert!(sub["packs"]["garbage_bytes"].is_null(), "{sub}");
    let sub_dirs = common::directories_allocated(&backing.join("src/cli"));
    assert_eq!(sub["disk"].as_u64().unwrap(), sub_disk + sub_dirs, "{sub}");

    // The table a person reads.
    let out = common::squeezefs(&["stats".as_ref(), m.mnt.as_os_str()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{text}");
    for want in ["packed zstd:1", "Packs: ", "garbage", "packed),"] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
    m.unmount();

    // Same garbage as `check`, which walks the same block headers.
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["packs"]["garbage_bytes"].as_u64().unwrap(), garbage);
    assert_eq!(
        stats(&backing)["packs"]["garbage_bytes"].as_u64().unwrap(),
        garbage
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unmount_reclaims_the_garbage_its_mount_left() {
    let dir = scratch("pack-unmount-reclaim");
    let backing = dir.join("backing");
    let m = Mount::new(&dir, "compress=zstd:1,pack");
    let files = real_tree(&m.path("src"));
    m.unmount();
    let (_, doc) = check(&backing, false);
    let before = doc["packs"]["bytes"].as_u64().unwrap();
    // Rewrite one file in three and delete one in three, in a second mount.
    let m = Mount::new(&dir, "compress=zstd:1,pack");
    let kept = churn(&m, files);
    m.unmount();
    // Reclaimed before the daemon let go of the directory: no pack above 25 % garbage.
    let doc = no_pack_to_reclaim(&backing);
    let after = doc["packs"]["bytes"].as_u64().unwrap();
    println!("FIGURES packs {before} bytes; after rewriting 1/3 and deleting 1/3 and unmounting: {after}");
    assert!(after < before, "{before} → {after}");
    let m = Mount::new(&dir, "");
    reads_back(&m, &kept);
    m.unmount();
}

/// Whether the unmount just done left its walk of the tree out (the daemon says so).
fn walk_skipped(dir: &Path) -> bool {
    fs::read_to_string(dir.join("daemon.log"))
        .unwrap()
        .contains("the tree is not walked")
}

/// No pack of `backing` above the 25 % garbage an unmount reclaims, and no leftover;
/// `check`'s document.
fn no_pack_to_reclaim(backing: &Path) -> Value {
    let (code, doc) = check(backing, false);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["packs"]["leftovers"].as_u64().unwrap(), 0, "{doc}");
    for p in doc["packs"]["packs"].as_array().unwrap() {
        let (g, b) = (p["garbage_bytes"].as_u64().unwrap(), p["bytes"].as_u64().unwrap());
        assert!(g * 4 <= b, "pack {} keeps {g} garbage of {b}: {doc}", p["id"]);
    }
    doc
}

/// The unmount's reclaim walk (a round trip a file on a network backing) is left out only
/// when the mount started from the clean mark of a complete reclaim and made no garbage:
/// new files only. Removing or rewriting files, a kill -9, a mark that no longer matches
/// the packs, and `check --repair` each make the next unmount walk, and the garbage goes.
#[test]
fn an_unmount_walks_the_tree_only_when_its_mount_may_have_left_garbage() {
    let dir = scratch("pack-clean-mark");
    let backing = dir.join("backing");
    let mark = backing.join(".squeezefs-packs/.probe-clean");
    let opts = "compress=zstd:1,pack";
    // A new backing directory has no pack, so no garbage to start from: the first mount
    // of it, writing new files only, does not walk either, and leaves the mark.
    let m = Mount::new(&dir, opts);
    let mut files = real_tree(&m.path("src"));
    m.unmount();
    assert!(walk_skipped(&dir), "a first mount with new files only walked");
    assert!(mark.exists(), "no mark left");
    // A mount takes the mark away before it serves anything.
    let m = Mount::new(&dir, opts);
    assert!(!mark.exists(), "the mark stays while mounted");
    // New files and directories only: no walk, and nothing to reclaim.
    for i in 0..50 {
        let rel = PathBuf::from(format!("new/{}/f{i}", i % 5));
        fs::create_dir_all(m.path("src").join(&rel).parent().unwrap()).unwrap();
        let data = format!("new file {i}\n").repeat(i + 1).into_bytes();
        fs::write(m.path("src").join(&rel), &data).unwrap();
        files.push((rel, data));
    }
    let st = Command::new("chmod")
        .arg("-R")
        .arg("go-w")
        .arg(m.path("src"))
        .status()
        .unwrap();
    assert!(st.success());
    fs::rename(m.path("src/new/0"), m.path("src/new/moved")).unwrap();
    for f in files.iter_mut().filter(|f| f.0.starts_with("new/0")) {
        f.0 = Path::new("new/moved").join(f.0.strip_prefix("new/0").unwrap());
    }
    m.unmount();
    assert!(walk_skipped(&dir), "new files only: the walk is left out");
    assert!(mark.exists());
    no_pack_to_reclaim(&backing);
    // A stale mark (the packs it names have grown since) is no mark.
    let stale = fs::read(&mark).unwrap();
    let m = Mount::new(&dir, opts);
    fs::write(m.path("src/one-more"), b"appended to a pack").unwrap();
    files.push(("one-more".into(), b"appended to a pack".to_vec()));
    m.unmount();
    assert!(walk_skipped(&dir));
    fs::write(&mark, &stale).unwrap();
    let m = Mount::new(&dir, opts);
    m.unmount();
    assert!(
        !walk_skipped(&dir),
        "a mark naming other pack lengths was trusted"
    );
    // Rewrite one file in three and remove one in three: garbage, so a walk reclaims it.
    let m = Mount::new(&dir, opts);
    files = churn(&m, files);
    m.unmount();
    assert!(!walk_skipped(&dir), "files removed and rewritten, yet no walk");
    no_pack_to_reclaim(&backing);
    // Removing a file alone is garbage too.
    let m = Mount::new(&dir, opts);
    let (gone, _) = files.remove(files.len() / 2);
    fs::remove_file(m.path("src").join(&gone)).unwrap();
    m.unmount();
    assert!(!walk_skipped(&dir), "a file removed, yet no walk");
    // A daemon killed leaves no mark (it took it at its start): the next unmount walks.
    let m = Mount::new(&dir, opts);
    fs::write(m.path("src/before-kill"), b"x".repeat(100)).unwrap();
    m.kill();
    assert!(!mark.exists(), "a killed daemon left a mark");
    let m = Mount::new(&dir, opts);
    m.unmount();
    assert!(!walk_skipped(&dir), "after a kill -9, no walk");
    assert!(mark.exists(), "a complete walk leaves the mark");
    // `check --repair` takes the mark away too.
    let (code, doc) = check(&backing, true);
    assert_eq!(code, 0, "{doc}");
    assert!(!mark.exists(), "check --repair left the mark");
    let m = Mount::new(&dir, opts);
    reads_back(&m, &files);
    m.unmount();
    assert!(!walk_skipped(&dir));
    no_pack_to_reclaim(&backing);
    fs::remove_dir_all(&dir).unwrap();
}

/// Bytes of the pack files of `backing`.
fn pack_bytes(backing: &Path) -> u64 {
    fs::read_dir(backing.join(".squeezefs-packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// `setfattr user.squeezefs.reclaim` on the mount's root (a round now), then what the round
/// did (`getfattr`).
fn reclaim_round(m: &Mount) -> Value {
    common::reclaim_round(&m.mnt)
}

fn last_round(m: &Mount) -> Value {
    serde_json::from_slice(&getfattr(&m.mnt, "user.squeezefs.reclaim").expect("getfattr")).unwrap()
}

#[test]
fn a_mount_reclaims_garbage_while_mounted_beside_renames_and_in_the_background() {
    let dir = scratch("pack-live-reclaim");
    let backing = dir.join("backing");
    // (No reclaim at unmount, no background rounds: this part asks for rounds itself.)
    let opts = "compress=zstd:1,pack,nopack_reclaim,pack_gc=0";
    let m = Mount::new(&dir, opts);
    let files = real_tree(&m.path("src"));
    m.unmount();
    let before = pack_bytes(&backing);

    // A second mount rewrites one file in three and deletes one in three: garbage in the
    // first mount's pack.
    let m = Mount::new(&dir, opts);
    let mut kept = churn(&m, files);
    // Some files are read now, so their containers are in memory (with the record they
    // read) when reclaim moves their bytes.
    for (rel, data) in kept.iter().take(20) {
        assert!(&fs::read(m.path("src").join(rel)).unwrap() == data);
    }
    // Rounds run while another thread moves files between directories, and a directory:
    // a file the walk missed must never lose its pack.
    fs::create_dir(m.path("src/elsewhere")).unwrap();
    let movers: Vec<PathBuf> = kept.iter().step_by(2).map(|(rel, _)| rel.clone()).collect();
    let src = m.path("src");
    let renamer = std::thread::spawn(move || {
        let mut moved = std::collections::BTreeMap::new();
        for (k, rel) in movers.iter().enumerate() {
            let to = PathBuf::from(format!("elsewhere/m{k}"));
            fs::rename(src.join(rel), src.join(&to)).unwrap();
            moved.insert(rel.clone(), to);
            if k % 50 == 0 {
                fs::rename(src.join("elsewhere"), src.join("elsewhere2")).unwrap();
                fs::rename(src.join("elsewhere2"), src.join("elsewhere")).unwrap();
            }
        }
        moved
    });
    let mut rounds = Vec::new();
    while !renamer.is_finished() || rounds.is_empty() {
        rounds.push(reclaim_round(&m));
    }
    let moved = renamer.join().unwrap();
    for (rel, _) in kept.iter_mut() {
        if let Some(to) = moved.get(rel) {
            *rel = to.clone();
        }
    }
    reads_back(&m, &kept);
    // A quiet round reclaims whatever the busy ones kept.
    let quiet = reclaim_round(&m);
    let during = pack_bytes(&backing);
    println!(
        "FIGURES live reclaim: packs {before} B, after rewriting 1/3 and deleting 1/3 and reclaim rounds while mounted: {during} B; rounds beside renames: {}; quiet round: {quiet}",
        rounds.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(" ")
    );
    let freed: u64 = rounds
        .iter()
        .chain([&quiet])
        .map(|r| r["bytes_freed"].as_u64().unwrap())
        .sum();
    assert!(freed > 0, "nothing reclaimed: {rounds:?} {quiet}");
    assert!(quiet["error"].is_null(), "{quiet}");
    assert!(during < before + before / 4, "{before} → {during}");
    reads_back(&m, &kept);
    m.unmount();
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    for p in doc["packs"]["packs"].as_array().unwrap() {
        let (g, b) = (p["garbage_bytes"].as_u64().unwrap(), p["bytes"].as_u64().unwrap());
        assert!(
            g * 4 <= b || p["id"].as_u64() > Some(1),
            "old pack kept {g} garbage of {b}: {doc}"
        );
    }

    // In the background (pack_gc=1): rewriting half the files leaves garbage in the
    // second mount's packs, which a round reclaims without being asked.
    let m = Mount::new(&dir, "compress=zstd:1,pack,nopack_reclaim,pack_gc=1");
    for (i, (rel, data)) in kept.iter_mut().enumerate() {
        if i % 2 == 0 {
            *data = data.iter().map(|b| b.wrapping_add(1)).collect();
            fs::write(m.path("src").join(&*rel), &*data).unwrap();
        }
    }
    let t = std::time::Instant::now();
    let last = loop {
        let l = last_round(&m);
        if l["bytes_freed"].as_u64().unwrap_or(0) > 0 || t.elapsed().as_secs() > 30 {
            break l;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    println!("FIGURES background round: {last}");
    assert!(
        last["bytes_freed"].as_u64().unwrap() > 0,
        "no background round freed anything: {last}"
    );
    reads_back(&m, &kept);
    m.unmount();
    let (code, doc) = check(&backing, false);
    assert_eq!(code, 0, "{doc}");
    let m = Mount::new(&dir, "");
    reads_back(&m, &kept);
    m.unmount();
}

/// a file that is open but unlinked (or replaced by a rename) keeps its bytes in
/// its pack; a reclaim round while mounted must not remove that pack under it.
#[test]
fn an_open_unlinked_packed_file_survives_a_reclaim_round() {
    use std::io::Read;
    let dir = scratch("review-open-unlinked");
    let opts = "compress=zstd:1,pack,nopack_reclaim,pack_gc=0";
    let m = Mount::new(&dir, opts);
    fs::create_dir(m.path("src")).unwrap();
    let want: Vec<u8> = (0..3000u32).flat_map(|i| i.to_le_bytes()).collect();
    fs::write(m.path("src/victim"), &want).unwrap();
    for i in 0..20 {
        fs::write(m.path(&format!("src/other{i}")), vec![i as u8; 2000]).unwrap();
    }
    m.unmount();
    // Second mount: the first mount's pack is no longer the current one.
    let m = Mount::new(&dir, opts);
    let mut f = fs::File::open(m.path("src/victim")).unwrap();
    // The classic pattern: a reader has the file open, the file is removed (or replaced by
    // an atomic rename), the reader goes on reading.
    fs::remove_file(m.path("src/victim")).unwrap();
    for i in 0..20 {
        fs::remove_file(m.path(&format!("src/other{i}"))).unwrap();
    }
    let r = reclaim_round(&m);
    println!("round: {r}");
    let mut got = Vec::new();
    let res = f.read_to_end(&mut got);
    assert!(
        res.is_ok() && got == want,
        "open unlinked file after a reclaim round {r}: {res:?}, {} bytes",
        got.len()
    );
    drop(f);
    m.unmount();
}

/// truncating a packed file to zero and extending it must read zeros, not the
/// bytes it had in its pack.
#[test]
fn truncate_to_zero_then_extend_reads_zeros_through_a_mount() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let dir = scratch("review-trunc");
    let m = Mount::new(&dir, "compress=zstd:1,pack,nopack_reclaim,pack_gc=0");
    let p = m.path("f");
    fs::write(&p, vec![7u8; 3000]).unwrap();
    // Written back at close, packed at the group commit (the commit thread), or now:
    let f = fs::File::open(&p).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let mut f = fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
    f.set_len(0).unwrap();
    f.set_len(100).unwrap();
    let mut got = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut got).unwrap();
    drop(f);
    // And through a fresh open (no page cache).
    let m2 = {
        m.unmount();
        Mount::new(&dir, "compress=zstd:1,pack,nopack_reclaim,pack_gc=0")
    };
    let again = fs::read(m2.path("f")).unwrap();
    // Truncate to zero with O_TRUNC, then a write at an offset.
    let mut g = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m2.path("f"))
        .unwrap();
    g.seek(SeekFrom::Start(40)).unwrap();
    g.write_all(b"xyz").unwrap();
    drop(g);
    let third = fs::read(m2.path("f")).unwrap();
    m2.unmount();
    println!(
        "REVIEW got {:?} again {:?} third {:?}",
        &got[..4],
        &again[..4],
        &third[..4]
    );
    assert!(
        got == vec![0u8; 100],
        "after truncate 0 + extend: {:?}",
        &got[..8]
    );
    assert!(again == vec![0u8; 100], "after remount: {:?}", &again[..8]);
    assert!(
        third[..40] == [0u8; 40],
        "O_TRUNC + write at 40: {:?}",
        &third[..8]
    );
}

/// X has two names, d/a and d/b; the walk lists it once (the name readdir gives
/// first). Replacing that name during the round (rm + create, as rsync or an editor does)
/// must not cost X, still linked under the other name, its pack.
#[test]
fn replacing_one_name_of_a_hard_linked_file_during_a_round() {
    let delays: Vec<u64> = std::env::var("REVIEW_DELAYS")
        .unwrap_or("5,20,50,100".into())
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let mut lost = Vec::new();
    for (k, delay) in delays.iter().enumerate() {
        let dir = scratch(&format!("review-hardlink-{k}"));
        let backing = dir.join("backing");
        let opts = "compress=zstd:1,pack,nopack_reclaim,pack_gc=0";
        let m = Mount::new(&dir, opts);
        fs::create_dir(m.path("src")).unwrap();
        fs::create_dir(m.path("src/d")).unwrap();
        for i in 0..3000 {
            let sub = format!("src/s{}", i % 30);
            let _ = fs::create_dir(m.path(&sub));
            fs::write(
                m.path(&format!("{sub}/f{i}")),
                format!("file {i} ").repeat(50 + i % 100),
            )
            .unwrap();
        }
        let want: Vec<u8> = (0..2000u32).flat_map(|i| (i * 7919).to_le_bytes()).collect();
        fs::write(m.path("src/d/a"), &want).unwrap();
        fs::hard_link(m.path("src/d/a"), m.path("src/d/b")).unwrap();
        m.unmount();
        let m = Mount::new(&dir, opts);
        // Garbage: a third of the files go.
        for i in (0..3000).step_by(3) {
            fs::remove_file(m.path(&format!("src/s{}/f{i}", i % 30))).unwrap();
        }
        // The name the walk takes: the first of the two in the backing directory's order.
        let first = fs::read_dir(backing.join("src/d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n == "a" || n == "b")
            .unwrap();
        let other = if first == "a" { "b" } else { "a" };
        let mnt = m.mnt.clone();
        let t = std::thread::spawn(move || {
            let ok = Command::new("setfattr")
                .args(["-n", "user.squeezefs.reclaim", "-v", "1"])
                .arg(&mnt)
                .status()
                .unwrap()
                .success();
            assert!(ok);
        });
        std::thread::sleep(std::time::Duration::from_millis(*delay));
        let p = m.path(&format!("src/d/{first}"));
        fs::remove_file(&p).unwrap();
        fs::write(&p, b"a new file under the old name").unwrap();
        t.join().unwrap();
        let r = last_round(&m);
        let got = fs::read(m.path(&format!("src/d/{other}")));
        println!(
            "REVIEW delay {delay} ms: round {r}; src/d/{other}: {:?}",
            got.as_ref().map(|g| g == &want)
        );
        if !matches!(&got, Ok(g) if g == &want) {
            lost.push((
                delay,
                r.to_string(),
                format!("{got:?}").chars().take(80).collect::<String>(),
            ));
        }
        m.unmount();
    }
    assert!(lost.is_empty(), "X lost under its other name: {lost:?}");
}

/// `squeezefs compress --codec` through a packing mount: packed files are packed again
/// with the new codec (their rows in `stats` say so), bytes unchanged, and the garbage they
/// leave is reclaimed by the next round.
#[test]
fn compress_through_a_packing_mount_repacks_with_the_new_codec() {
    let dir = scratch("pack-compress-mount");
    let m = Mount::new(&dir, "compress=lz4,pack,nopack_reclaim,pack_gc=0");
    let files = real_tree(&m.path("src"));
    m.unmount();
    let m = Mount::new(&dir, "compress=lz4,pack,nopack_reclaim,pack_gc=0");
    let stats = |p: &Path| squeezefs_json(&["stats".as_ref(), p.as_os_str()]);
    let before = stats(&m.path("src"));
    let types = |doc: &Value| -> Vec<String> {
        doc["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(types(&before).iter().any(|t| t == "packed lz4:1"), "{before}");
    let done = compress(&["--codec".as_ref(), "zstd:9".as_ref(), m.path("src").as_os_str()]);
    assert_eq!(done["failed"].as_u64(), Some(0), "{done}");
    let after = stats(&m.path("src"));
    let t = types(&after);
    assert!(t.iter().any(|t| t == "packed zstd:9"), "{after}");
    assert!(!t.iter().any(|t| t == "packed lz4:1"), "{after}");
    let (d0, _) = packed_rows(&before);
    let (d1, _) = packed_rows(&after);
    println!("FIGURES packed files through a mount: lz4 {d0} B → zstd:9 {d1} B");
    assert!(d1 < d0, "{d0} → {d1}");
    reads_back(&m, &files);
    // The lz4 copies were garbage; compress asked the daemon for a round at its end,
    // which took them back.
    assert!(done["reclaimed_bytes"].as_u64() > Some(0), "{done}");
    assert!(
        last_round(&m)["packs_removed"].as_u64() > Some(0),
        "{}",
        last_round(&m)
    );
    reads_back(&m, &files);
    m.unmount();
    let (code, doc) = check(&dir.join("backing"), false);
    assert_eq!(code, 0, "{doc}");
}

/// Reading a packed file moves its atime by the backing filesystem's rules (relatime here),
/// as reading any other file does, although its bytes come from a pack (xfstests
/// generic/003).
#[test]
fn reading_a_packed_file_moves_its_atime_like_any_file() {
    use std::time::{Duration, SystemTime};
    let dir = scratch("pack-atime");
    let opts = "compress=zstd:1,pack,pack_gc=0";
    let m = Mount::new(&dir, opts);
    let p = m.path("f");
    fs::write(&p, b"a small file, packed").unwrap();
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_times(fs::FileTimes::new().set_accessed(old).set_modified(old))
        .unwrap();
    m.unmount();
    let m = Mount::new(&dir, opts);
    assert_eq!(fs::metadata(m.path("f")).unwrap().accessed().unwrap(), old);
    assert_eq!(fs::read(m.path("f")).unwrap(), b"a small file, packed");
    m.unmount();
    let backing = dir.join("backing/f");
    let a = fs::metadata(&backing).unwrap().accessed().unwrap();
    assert!(a > old, "atime did not move on read: {a:?}");
    assert_eq!(fs::metadata(&backing).unwrap().len(), 0, "the file is packed");
    assert_eq!(fs::metadata(&backing).unwrap().modified().unwrap(), old);
}
