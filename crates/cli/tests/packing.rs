//! Small files packed (format 4, mount option `pack`) on a real mount: a tree of small
//! real files round-trips through a remount, takes less disk than one container per file,
//! its backing files hold no data block, and the daemon's own record and directory stay
//! invisible through the mount; `check` verifies packs and reclaims garbage; `stats`
//! accounts packed files and packs.

#![deny(unsafe_code)]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

mod common;
use common::{files_under, getfattr, real_tree, scratch, squeezefs_json, Mount};

/// Disk used under `dir`, directories included (what `du` shows).
fn du(dir: &Path) -> u64 {
    let out = Command::new("du")
        .args(["-s", "--block-size=1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Copies the repository's sources into a mount with `opts`; returns (files, disk).
fn tree_on(name: &str, opts: &str) -> (Vec<(std::path::PathBuf, Vec<u8>)>, u64, std::path::PathBuf) {
    let dir = scratch(name);
    let m = Mount::new(&dir, opts);
    let files = real_tree(&m.path("src"));
    m.unmount();
    let disk = du(&dir.join("backing"));
    (files, disk, dir)
}

#[test]
fn a_tree_of_small_files_is_packed_and_round_trips() {
    let (files, packed_disk, dir) = tree_on("pack-tree", "compress=zstd:1,pack");
    let (_, plain_disk, other) = tree_on("nopack-tree", "compress=zstd:1");
    let logical: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    println!(
        "FIGURES {} files, {logical} bytes: packed {packed_disk} on disk (ratio {:.2}), one container per file {plain_disk} (ratio {:.2})",
        files.len(),
        logical as f64 / packed_disk as f64,
        logical as f64 / plain_disk as f64
    );
    assert!(
        packed_disk * 2 < plain_disk,
        "packing saves at least half: {packed_disk} vs {plain_disk}"
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

    // Read back through a mount that does not pack (packs are always read).
    let m = Mount::new(&dir, "");
    for (rel, data) in &files {
        let got = fs::read(m.path("src").join(rel)).unwrap();
        assert!(&got == data, "{} differs after remount", rel.display());
        assert_eq!(
            fs::metadata(m.path("src").join(rel)).unwrap().len(),
            data.len() as u64
        );
    }
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
    let m = Mount::new(&dir, "compress=zstd:1,pack");
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
    let m = Mount::new(&dir, "compress=zstd:1,pack");
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
    let m = Mount::new(&dir, "");
    assert_eq!(fs::read(m.path("src/grown")).unwrap(), &big[..1000]);
    m.unmount();
    assert_eq!(
        fs::metadata(&grown).unwrap().len(),
        0,
        "shrunk to one extent: packed again"
    );
    fs::remove_dir_all(&dir).unwrap();
    fs::remove_dir_all(&other).unwrap();
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
    let m = Mount::new(&dir, "compress=zstd:1,pack");
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
    for (rel, data) in &kept {
        assert!(
            &fs::read(m.path("src").join(rel)).unwrap() == data,
            "{}",
            rel.display()
        );
    }
    m.unmount();

    // A pack nothing points into is a leftover: --repair removes it.
    let packs = backing.join(".squeezefs-packs");
    let some = fs::read_dir(&packs).unwrap().next().unwrap().unwrap().path();
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

/// What the files under `root` occupy (pack files included), each inode once.
fn allocated(root: &Path) -> u64 {
    let mut seen = std::collections::HashSet::new();
    files_under(root)
        .into_iter()
        .filter(|(_, m)| seen.insert(m.ino()))
        .map(|(_, m)| m.blocks() * 512)
        .sum()
}

#[test]
fn stats_counts_packed_files_by_their_share_of_the_packs_and_measures_garbage() {
    let dir = scratch("pack-stats");
    let backing = dir.join("backing");
    let m = Mount::new(&dir, "compress=zstd:1,pack");
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
        // Disk Usage is still what the backing directory occupies.
        assert_eq!(doc["disk"].as_u64().unwrap(), allocated(&backing), "{doc}");
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
    assert_eq!(after["disk"].as_u64().unwrap(), allocated(&backing), "{after}");

    // A directory below the root: its files' shares, the packs not in the totals, garbage
    // not measured (the walk did not see every record).
    let sub = stats(&m.path("src/cli"));
    let (sub_disk, sub_unc) = packed_rows(&sub);
    assert!(sub_unc > 0 && sub_disk > 0 && sub_disk < sub_unc, "{sub}");
    assert_eq!(sub["packs"]["whole"], false, "{sub}");
    assert!(sub["packs"]["garbage_bytes"].is_null(), "{sub}");
    assert_eq!(sub["disk"].as_u64().unwrap(), sub_disk, "{sub}");

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
