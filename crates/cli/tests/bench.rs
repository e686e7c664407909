//! `squeezefs bench` end to end: the codec table on real files, and the filesystem table
//! on a real FUSE mount beside kernel btrfs (loop image) and the host filesystem. Needs
//! root, /dev/fuse, btrfs-progs, tar and xz (`scripts/test` installs them; CI runs as root).

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn squeezefs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_squeezefs"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("squeezefs-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn codec_table_on_real_files() {
    let out = squeezefs()
        .args([
            "bench",
            "codecs",
            "/usr/include/linux",
            "--codecs",
            "none,lz4,zstd:1,zstd:19,zlib:6,lzo",
        ])
        .args(["--rounds", "2", "--max-bytes", "4M", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    let get = |c: &str| rows.iter().find(|r| r["codec"] == c).unwrap().clone();
    assert!((get("none")["ratio"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    let z1 = get("zstd:1")["ratio"].as_f64().unwrap();
    let z19 = get("zstd:19")["ratio"].as_f64().unwrap();
    assert!(z1 > 2.0, "C headers compress: {z1}");
    assert!(z19 > z1, "zstd:19 {z19} beats zstd:1 {z1}");
    assert!(
        get("zstd:19")["workspace_bytes"].as_u64().unwrap()
            > get("zstd:1")["workspace_bytes"].as_u64().unwrap()
    );
    for r in rows {
        assert!(r["compress_mb_s"].as_f64().unwrap() > 0.0 && r["decompress_mb_s"].as_f64().unwrap() > 0.0);
    }
    // The table form, and a clear error for a bad codec.
    let out = squeezefs()
        .args([
            "bench",
            "codecs",
            "/usr/include/linux",
            "--codecs",
            "lz4",
            "--max-bytes",
            "1M",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("compress MB/s") && text.contains("lz4"), "{text}");
    let out = squeezefs()
        .args(["bench", "codecs", "/usr/include/linux", "--codecs", "zstd:99"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("zstd"));
}

#[test]
fn filesystem_table_beside_btrfs_and_the_host() {
    assert_eq!(
        nix::unistd::geteuid().as_raw(),
        0,
        "this test needs root: it mounts kernel btrfs from a loop image (CI runs as root)"
    );
    let dir = scratch("fs");
    // A small mixed corpus and a small source tarball.
    let corpus = dir.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for (i, src) in ["/usr/include/linux", "/usr/share/common-licenses"]
        .iter()
        .enumerate()
    {
        let st = Command::new("cp")
            .arg("-r")
            .arg(src)
            .arg(corpus.join(format!("part{i}")))
            .status()
            .unwrap();
        assert!(st.success());
    }
    let tarball = dir.join("src.tar.xz");
    let st = Command::new("tar")
        .arg("-cJf")
        .arg(&tarball)
        .args(["-C", "/usr/include", "linux", "asm-generic"])
        .status()
        .unwrap();
    assert!(st.success());
    let out = squeezefs()
        .args(["bench", "fs", "--codecs", "zstd:1", "--copies", "2"])
        .arg("--corpus")
        .arg(&corpus)
        .arg("--tarball")
        .arg(&tarball)
        .arg("--work")
        .arg(dir.join("work"))
        .arg("--json")
        .arg(dir.join("out.json"))
        .arg("--png")
        .arg(dir.join("out.png"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("squeezefs zstd:1 against btrfs zstd:1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("squeezefs+pack zstd:1 against btrfs zstd:1"),
        "{stdout}"
    );
    let v = json(&dir.join("out.json"));
    let rows = v["rows"].as_array().unwrap();
    let methods: Vec<&str> = rows.iter().map(|r| r["method"].as_str().unwrap()).collect();
    for want in [
        "squeezefs zstd:1",
        "squeezefs+pack zstd:1",
        "btrfs zstd:1",
        "btrfs (no compression)",
    ] {
        assert_eq!(
            methods.iter().filter(|m| **m == want).count(),
            2,
            "{want} in {methods:?}"
        );
    }
    assert!(v["caches_dropped"].as_bool().unwrap());
    // (Named after the decompressed tar it extracts.)
    let tar_name = "tarball src.tar";
    for w in ["corpus x2", tar_name] {
        let sel: Vec<&serde_json::Value> = rows.iter().filter(|r| r["workload"] == w).collect();
        assert_eq!(
            sel.len(),
            5,
            "{w}: squeezefs, squeezefs+pack, btrfs zstd:1, btrfs, host"
        );
        // Every method stored the same logical bytes; compression shows in the ratio.
        let logical = sel[0]["logical_bytes"].as_u64().unwrap();
        assert!(sel
            .iter()
            .all(|r| r["logical_bytes"].as_u64().unwrap() == logical));
        let ratio = |m: &str| {
            sel.iter().find(|r| r["method"] == m).unwrap()["ratio"]
                .as_f64()
                .unwrap()
        };
        let host = sel
            .iter()
            .find(|r| r["method"].as_str().unwrap().ends_with("(host)"))
            .unwrap()["ratio"]
            .as_f64()
            .unwrap();
        // Small text files: compression must beat storing them plainly on the host.
        let sq = ratio("squeezefs zstd:1");
        println!(
            "{w}: squeezefs zstd:1 ratio {sq:.3}, host {host:.3}, btrfs zstd:1 {:.3}",
            ratio("btrfs zstd:1")
        );
        assert!(sq > 1.2 * host, "{w}: {sq} vs host {host}");
        // Small files packed take less than one container each.
        let packed = ratio("squeezefs+pack zstd:1");
        assert!(packed > sq, "{w}: packed {packed} vs {sq}");
        assert!(ratio("btrfs zstd:1") > ratio("btrfs (no compression)"));
        let sq = sel.iter().find(|r| r["method"] == "squeezefs zstd:1").unwrap();
        assert!(sq["daemon_peak_rss"].as_u64().unwrap() > 0);
    }
    let png = std::fs::read(dir.join("out.png")).unwrap();
    assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG\r\n\x1a\n"));
    // Nothing left mounted or behind in the scratch directory.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.to_str().unwrap()), "{mounts}");
    std::fs::remove_dir_all(&dir).unwrap();
}
