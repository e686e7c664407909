//! Compression policy on a real mount: properties (xattrs and `squeezefs property`), the
//! heuristic, the incompressible-file backoff, early abort, `compress-force`, the workspace
//! pool and the live statistics file.

#![deny(unsafe_code)]

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use squeezefs_container::format::{
    half_offset, ExtentHeader, Superblock, DATA_START, EXTENT_HEADER_LEN, SB_FLAG_NOCOMPRESS,
};
use squeezefs_testdata::{random, text};

mod common;
use common::{scratch, sys, Mount};

fn setx(p: &Path, name: &str, v: &str) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    let r = sys::setxattr(p, &n, v.as_bytes());
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

fn getx(p: &Path, name: &str) -> Result<String, i32> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    let r = sys::getxattr(p, &n, &mut buf);
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(r as usize);
    Ok(String::from_utf8(buf).unwrap())
}

fn listx(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 4096];
    let r = sys::listxattr(p, &mut buf);
    assert!(r >= 0);
    buf.truncate(r as usize);
    buf.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn squeezefs(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_squeezefs"))
        .args(args)
        .output()
        .unwrap()
}

fn live_stats(m: &Mount) -> Value {
    let out = squeezefs(&["stats", "--live", m.mnt.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn n(v: &Value, a: &str, b: &str) -> u64 {
    v[a][b]
        .as_u64()
        .unwrap_or_else(|| panic!("{a}.{b} missing in {v}"))
}

fn write_file(p: &Path, data: &[u8]) {
    let mut f = fs::File::create(p).unwrap();
    for chunk in data.chunks(1 << 20) {
        f.write_all(chunk).unwrap();
    }
    f.sync_all().unwrap();
}

/// The backing file's current superblock and the codec of extent `idx`'s newest copy.
fn backing_layout(path: &Path, idx: u64) -> (Superblock, Option<u8>) {
    let raw = fs::read(path).unwrap();
    let sb = (0..2)
        .filter_map(|s| Superblock::decode(raw.get(s * 4096..((s + 1) * 4096).min(raw.len()))?).ok())
        .max_by_key(|s| s.generation)
        .expect("a committed superblock");
    let codec = (0..2u8)
        .filter_map(|h| {
            let off = half_offset(sb.extent_shift, idx, h) as usize;
            let hb = raw.get(off..off + EXTENT_HEADER_LEN)?;
            ExtentHeader::decode(hb, idx, sb.extent_shift).ok()
        })
        .max_by_key(|h| h.generation)
        .map(|h| h.codec.id());
    assert!(raw.len() as u64 >= DATA_START || sb.is_inline());
    (sb, codec)
}

#[test]
fn properties_are_inherited_visible_as_xattrs_and_survive_remounting() {
    let dir = scratch("props");
    // Containers: the superblocks are read below.
    let m = Mount::new(&dir, "compress=zstd:1,nopack");
    let a = m.path("a");
    fs::create_dir(&a).unwrap();
    // Set with setxattr on a directory, read back canonical.
    setx(&a, "user.squeezefs.compression", "lz4").unwrap();
    assert_eq!(getx(&a, "user.squeezefs.compression").unwrap(), "lz4:1");
    // …and with the command, which checks the value first.
    let out = squeezefs(&["property", "set", a.to_str().unwrap(), "extent_size", "16K"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(getx(&a, "user.squeezefs.extent_size").unwrap(), "16K");
    // Bad values: EINVAL, a log line, nothing changed.
    assert_eq!(
        setx(&a, "user.squeezefs.compression", "zstd:42"),
        Err(libc::EINVAL)
    );
    assert_eq!(setx(&a, "user.squeezefs.extent_size", "3K"), Err(libc::EINVAL));
    assert_eq!(getx(&a, "user.squeezefs.compression").unwrap(), "lz4:1");
    let out = squeezefs(&["property", "set", a.to_str().unwrap(), "compression", "gzip"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("gzip"),
        "the error names the value"
    );

    // Inherited at creation, by directories and files.
    fs::create_dir(a.join("sub")).unwrap();
    assert_eq!(
        getx(&a.join("sub"), "user.squeezefs.compression").unwrap(),
        "lz4:1"
    );
    assert_eq!(getx(&a.join("sub"), "user.squeezefs.extent_size").unwrap(), "16K");
    let f = a.join("sub/inherited.txt");
    write_file(&f, &text(100_000));
    assert_eq!(getx(&f, "user.squeezefs.compression").unwrap(), "lz4:1");
    assert!(listx(&f).contains(&"user.squeezefs.compression".to_string()));
    // mknod(2) makes regular files too; they inherit as well.
    let made = a.join("sub/mknod");
    assert_eq!(sys::mknod(&made, libc::S_IFREG | 0o644, 0), 0);
    assert_eq!(getx(&made, "user.squeezefs.compression").unwrap(), "lz4:1");
    assert_eq!(getx(&made, "user.squeezefs.extent_size").unwrap(), "16K");
    // A file's own property wins over its directory's.
    let own = a.join("own.txt");
    fs::File::create(&own).unwrap();
    setx(&own, "user.squeezefs.compression", "zstd:9").unwrap();
    write_file(&own, &text(100_000));
    // A file made before its directory got a property follows the mount option.
    let b = m.path("b");
    fs::create_dir(&b).unwrap();
    write_file(&b.join("early.txt"), &text(100_000));
    setx(&b, "user.squeezefs.compression", "zlib:6").unwrap();
    assert_eq!(
        getx(&b.join("early.txt"), "user.squeezefs.compression"),
        Err(libc::ENODATA)
    );
    // `property get` tells where a value comes from.
    let out = squeezefs(&["property", "get", b.join("early.txt").to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["properties"]["compression"]["source"], "mount");
    assert_eq!(v["properties"]["compression"]["value"], "zstd:1");
    // `property set -r` reaches existing entries below; files with data keep their extent
    // size (reported, not an error).
    fs::create_dir(b.join("deep")).unwrap();
    write_file(&b.join("deep/x.txt"), &text(10_000));
    let out = squeezefs(&[
        "property",
        "set",
        "-r",
        b.to_str().unwrap(),
        "compression",
        "zstd:7",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for p in ["", "early.txt", "deep", "deep/x.txt"] {
        assert_eq!(
            getx(&b.join(p), "user.squeezefs.compression").unwrap(),
            "zstd:7",
            "{p}"
        );
    }
    let out = squeezefs(&[
        "property",
        "set",
        "-r",
        b.to_str().unwrap(),
        "extent_size",
        "256K",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipped 2 files"));
    assert_eq!(
        getx(&b.join("deep"), "user.squeezefs.extent_size").unwrap(),
        "256K"
    );
    let out = squeezefs(&["property", "set", "-r", b.to_str().unwrap(), "compression", ""]);
    assert!(out.status.success());
    assert_eq!(
        getx(&b.join("deep/x.txt"), "user.squeezefs.compression"),
        Err(libc::ENODATA)
    );
    // The extent size of a file with data is fixed.
    assert_eq!(setx(&own, "user.squeezefs.extent_size", "64K"), Err(libc::EINVAL));
    let log = fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert!(log.contains("refusing user.squeezefs.compression"), "{log}");
    m.unmount();

    // On disk: the inherited file has 16 KiB extents in lz4, the other zstd:9 / zstd:1.
    let back = dir.join("backing");
    let (sb, codec) = backing_layout(&back.join("a/sub/inherited.txt"), 0);
    assert_eq!(sb.extent_shift, 14);
    assert_eq!(codec, Some(2), "lz4");
    assert_eq!(backing_layout(&back.join("a/own.txt"), 0).1, Some(1), "zstd");
    assert_eq!(backing_layout(&back.join("a/own.txt"), 0).0.codec.level, 9);
    assert_eq!(backing_layout(&back.join("b/early.txt"), 0).0.codec.level, 1);
    assert_eq!(backing_layout(&back.join("a/sub/mknod"), 0).0.extent_shift, 14);

    // Remounted with another codec, properties stay and keep deciding.
    let m = Mount::new(&dir, "compress=zlib:1");
    let f = m.path("a/sub/inherited.txt");
    assert_eq!(getx(&f, "user.squeezefs.compression").unwrap(), "lz4:1");
    assert_eq!(getx(&m.path("a"), "user.squeezefs.extent_size").unwrap(), "16K");
    assert!(fs::read(&f).unwrap() == text(100_000));
    // Changing a file's codec affects what is written next; old extents still read.
    setx(&f, "user.squeezefs.compression", "zstd:3").unwrap();
    let mut h = fs::OpenOptions::new().append(true).open(&f).unwrap();
    h.write_all(&text(50_000)).unwrap();
    h.sync_all().unwrap();
    drop(h);
    let mut want = text(100_000);
    want.extend(text(50_000));
    assert!(fs::read(&f).unwrap() == want);
    // Removing it: ENODATA afterwards, and gone from the list.
    fs::File::create(m.path("plain.txt")).unwrap();
    let p = m.path("plain.txt");
    setx(&p, "user.squeezefs.compression", "lzo").unwrap();
    let c = CString::new("user.squeezefs.compression").unwrap();
    assert_eq!(sys::removexattr(&p, &c), 0);
    assert_eq!(getx(&p, "user.squeezefs.compression"), Err(libc::ENODATA));
    assert!(!listx(&p).contains(&"user.squeezefs.compression".to_string()));
    m.unmount();
    let (_, codec) = backing_layout(&dir.join("backing/a/sub/inherited.txt"), 7);
    assert_eq!(
        codec,
        Some(1),
        "appended extents are zstd, the earlier ones stay lz4"
    );
    assert_eq!(
        backing_layout(&dir.join("backing/a/sub/inherited.txt"), 0).1,
        Some(2)
    );
}

#[test]
fn incompressible_data_is_judged_flagged_and_backed_off_unless_forced() {
    let dir = scratch("incompressible");
    let noise = random(4 << 20, 42);
    // (128 KiB extents named: a file written whole would take 1 MiB ones, four in all.)
    let m = Mount::new(&dir, "compress=zstd:3,extent_size=128K");
    write_file(&m.path("noise"), &noise);
    let s = live_stats(&m);
    // 32 extents, all stored raw: at least BACKOFF_AFTER (8) judged by the heuristic before
    // the file is flagged, most of the rest not tried at all. How many are judged depends
    // on how the kernel's writeback cut the file into WRITEs (1 MiB each on a quiet
    // machine; under load it splits some, and an extent a WRITE leaves partial goes out
    // with the next batch, whose skips were decided before the first batch's failures
    // were learnt): at most two batches (8 + 9 extents) go before the flag, then one in
    // RETRY_EVERY (8) of the other 15.
    let (judged, skipped) = (n(&s, "raw_because", "heuristic"), n(&s, "raw_because", "backoff"));
    assert_eq!(judged + skipped, 32, "{s}");
    assert!(judged >= 8 && skipped >= 12, "{s}");
    assert_eq!(
        n(&s, "raw_because", "no_gain"),
        0,
        "noise never reached zstd: {s}"
    );
    assert_eq!(n(&s, "files", "flagged_incompressible"), 1);
    assert!(fs::read(m.path("noise")).unwrap() == noise);
    m.unmount();
    let (sb, codec) = backing_layout(&dir.join("backing/noise"), 3);
    assert!(
        sb.flags & SB_FLAG_NOCOMPRESS != 0,
        "the flag is in the superblock"
    );
    assert_eq!(codec, Some(0), "raw");

    let m = Mount::new(&dir, "compress-force=zstd:3,extent_size=128K");
    write_file(&m.path("noise2"), &noise);
    let s = live_stats(&m);
    assert_eq!(
        n(&s, "raw_because", "heuristic") + n(&s, "raw_because", "backoff"),
        0,
        "{s}"
    );
    assert!(n(&s, "raw_because", "no_gain") >= 32, "{s}");
    assert_eq!(n(&s, "files", "flagged_incompressible"), 0);
    assert_eq!(s["mount"]["force"], true);
    m.unmount();
    assert_eq!(
        backing_layout(&dir.join("backing/noise2"), 0).0.flags & SB_FLAG_NOCOMPRESS,
        0
    );
}

#[test]
fn early_abort_probes_before_high_zstd_levels() {
    let dir = scratch("earlyabort");
    let m = Mount::new(&dir, "compress=zstd:9");
    // Every 256 bytes: 16 zeros the heuristic samples (it sees repetition), then noise:
    // ~6 % compressible, so both probes fail and zstd:9 never runs.
    let rnd = random(1 << 20, 5);
    let tricky: Vec<u8> = (0..1 << 20)
        .map(|i| if i % 256 < 16 { 0 } else { rnd[i] })
        .collect();
    write_file(&m.path("tricky"), &tricky);
    write_file(&m.path("text"), &text(1 << 20));
    let s = live_stats(&m);
    assert_eq!(n(&s, "early_abort", "aborted"), 8, "{s}");
    assert_eq!(n(&s, "early_abort", "lz4_pass"), 8, "{s}");
    let zstd9 = s["codecs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["codec"] == "zstd:9")
        .unwrap();
    assert_eq!(zstd9["extents"], 8);
    assert!(fs::read(m.path("tricky")).unwrap() == tricky);
    m.unmount();
}

#[test]
fn the_live_stats_file_is_hidden_read_only_and_current() {
    let dir = scratch("livestats");
    let m = Mount::new(&dir, "compress=zstd:5,extent_size=64K,nopack");
    let stats = m.path(".squeezefs-stats");
    assert!(fs::metadata(&stats).unwrap().is_file());
    let names: Vec<_> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !names.iter().any(|n| n == ".squeezefs-stats"),
        "hidden from readdir"
    );
    let e = fs::OpenOptions::new().write(true).open(&stats).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES));
    let before: Value = serde_json::from_slice(&fs::read(&stats).unwrap()).unwrap();
    assert_eq!(before["format"], 1);
    assert_eq!(before["mount"]["compress"], "zstd:5");
    assert_eq!(before["mount"]["extent_size"], 65536);
    // Mounted with -o nopack: no packing, nothing packed.
    assert_eq!(before["packs"]["packing"], false, "{before}");
    assert_eq!(before["packs"]["files_packed"], 0, "{before}");
    // Files at three levels written at once from several threads: the pool stays in bounds.
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let p = m.path(&format!("f{t}"));
            std::thread::spawn(move || {
                fs::File::create(&p).unwrap();
                let level = ["zstd:1", "zstd:5", "zstd:12"][t % 3];
                setx(&p, "user.squeezefs.compression", level).unwrap();
                write_file(&p, &text(2 << 20));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let after = live_stats(&m);
    let w = &after["workspaces"];
    assert!(
        w["peak_count"].as_u64().unwrap() <= w["max"].as_u64().unwrap(),
        "{w}"
    );
    assert!(w["reused"].as_u64().unwrap() > 0, "workspaces are reused: {w}");
    assert!(w["levels"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["estimate"].as_u64().unwrap() > 0));
    let codecs = after["codecs"].as_array().unwrap();
    for level in ["zstd:1", "zstd:5", "zstd:12"] {
        let c = codecs
            .iter()
            .find(|c| c["codec"] == level)
            .unwrap_or_else(|| panic!("{level}: {after}"));
        assert!(c["bytes_in"].as_u64().unwrap() >= 2 * (2 << 20));
        assert!(c["ratio"].as_f64().unwrap() > 2.0);
    }
    // The table names everything a person looks for.
    let out = squeezefs(&["stats", "--live", m.mnt.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&out.stdout);
    for want in [
        "compressed",
        "heuristic",
        "early abort",
        "zstd workspaces",
        "checksum errors",
        "stored after reads",
        "zstd:12",
        "not packing (mounted with -o nopack",
    ] {
        assert!(table.contains(want), "{want} missing:\n{table}");
    }
    // Not a squeezefs mount: a clear error.
    let out = squeezefs(&["stats", "--live", dir.join("backing").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a squeezefs mounted"));
    m.unmount();

    // A damaged extent: EIO, a log line naming file and extent, and the counter.
    let back = dir.join("backing/f0");
    let mut raw = fs::read(&back).unwrap();
    let (sb, _) = backing_layout(&back, 1);
    let off = (0..2)
        .map(|h| half_offset(sb.extent_shift, 1, h) as usize)
        .find(|&o| raw[o] != 0)
        .unwrap();
    raw[off + EXTENT_HEADER_LEN + 10] ^= 0xff;
    fs::write(&back, &raw).unwrap();
    let m = Mount::new(&dir, "compress=zstd:5");
    let e = fs::read(m.path("f0")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let s = live_stats(&m);
    assert!(s["checksum_errors"].as_u64().unwrap() >= 1, "{s}");
    m.unmount();
    let log = fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert!(log.contains("f0") && log.contains("extent 1"), "{log}");
}

/// `chattr +c` / `+m` / `lsattr`, as a user on their own mount: `c` gives the file (or
/// directory) the mount's codec as its compression property, `m` the property `none`,
/// clearing the flag removes it, a directory's flag is inherited by files made in it, and any
/// other flag is refused (EOPNOTSUPP), never dropped in silence.
#[test]
fn chattr_c_and_m_set_the_compression_property_and_lsattr_shows_them() {
    let dir = scratch("chattr");
    common::open_to_others(&dir);
    let m = Mount::as_user(&dir, "compress=zstd:1", "tests");
    let run = |cmd: String| {
        let out = common::as_tests(&["sh", "-c", &cmd]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (f, d) = (
        m.path("f").display().to_string(),
        m.path("d").display().to_string(),
    );
    let flags = |p: &str| {
        let (ok, out) = run(format!("lsattr -d {p}"));
        assert!(ok, "lsattr {p}: {out}");
        out.split_whitespace().next().unwrap_or_default().to_string()
    };
    let prop = |p: &str| {
        let (ok, out) = run(format!(
            "getfattr --absolute-names --only-values -n user.squeezefs.compression {p}"
        ));
        ok.then(|| out.trim().to_string())
    };
    assert!(run(format!("echo hello > {f} && mkdir {d}")).0);
    assert!(!flags(&f).contains(['c', 'm']), "{}", flags(&f));
    assert_eq!(prop(&f), None);

    let (ok, out) = run(format!("chattr +c {f}"));
    assert!(ok, "chattr +c: {out}");
    assert!(flags(&f).contains('c'), "{}", flags(&f));
    assert_eq!(prop(&f).as_deref(), Some("zstd:1"));
    // c and m together are refused, as btrfs does; m alone replaces c.
    assert!(!run(format!("chattr +m {f}")).0, "c and m together");
    let (ok, out) = run(format!("chattr -c +m {f}"));
    assert!(ok, "chattr -c +m: {out}");
    assert!(
        flags(&f).contains('m') && !flags(&f).contains('c'),
        "{}",
        flags(&f)
    );
    assert_eq!(prop(&f).as_deref(), Some("none"));
    assert!(run(format!("chattr -m {f}")).0);
    assert!(!flags(&f).contains(['c', 'm']), "{}", flags(&f));
    assert_eq!(prop(&f), None);

    // A directory's flag is inherited like its property.
    assert!(run(format!("chattr +c {d}")).0);
    assert!(flags(&d).contains('c'));
    assert!(run(format!("echo new > {d}/g")).0);
    assert!(flags(&format!("{d}/g")).contains('c'));
    assert_eq!(prop(&format!("{d}/g")).as_deref(), Some("zstd:1"));

    // Flags squeezefs does not keep: refused, and nothing changes.
    for other in ["+A", "+d", "+S"] {
        let (ok, out) = run(format!("chattr {other} {f}"));
        assert!(
            !ok && out.contains("Operation not supported"),
            "chattr {other}: {out}"
        );
        assert!(!flags(&f).contains(['A', 'd', 'S']), "{}", flags(&f));
    }
    assert!(run(format!("cat {f}")).1.contains("hello"));
    m.unmount();
    common::check_clean(&dir.join("backing"), "after chattr");
    fs::remove_dir_all(&dir).unwrap();
}

/// `compress=zstd:adapt:MIN-MAX`: files without a compression property of their own are
/// written at the level the controller holds, always within the range, and the statistics
/// show the controller; a file under a directory's own property keeps that level; a range
/// that is not one is refused before anything is mounted.
#[test]
fn an_adaptive_mount_writes_within_its_range_and_properties_still_win() {
    let dir = scratch("adapt");
    let m = Mount::new(&dir, "compress=zstd:adapt:2-4");
    let data = text(8 << 20);
    for i in 0..4 {
        write_file(&m.path(&format!("f{i}")), &data);
    }
    fs::create_dir(m.path("d")).unwrap();
    setx(&m.path("d"), "user.squeezefs.compression", "zstd:7").unwrap();
    write_file(&m.path("d/own"), &data);
    let s = live_stats(&m);
    assert_eq!(s["mount"]["compress"], "zstd:adapt:2-4", "{}", s["mount"]);
    let a = &s["adapt"];
    assert_eq!((a["min"].as_i64(), a["max"].as_i64()), (Some(2), Some(4)), "{a}");
    assert!((2..=4).contains(&a["level"].as_i64().unwrap()), "{a}");
    let mut adaptive_bytes = 0;
    for c in s["codecs"].as_array().unwrap() {
        let name = c["codec"].as_str().unwrap();
        let bytes = c["bytes_in"].as_u64().unwrap();
        match name {
            "zstd:7" => assert!(bytes >= 8 << 20, "the property's level: {c}"),
            "zstd:2" | "zstd:3" | "zstd:4" => adaptive_bytes += bytes,
            other => panic!(
                "{other}: outside the range and no property says so: {}",
                s["codecs"]
            ),
        }
    }
    assert!(adaptive_bytes >= 4 * (8 << 20), "{}", s["codecs"]);
    for i in 0..4 {
        assert!(fs::read(m.path(&format!("f{i}"))).unwrap() == data, "f{i}");
    }
    assert!(fs::read(m.path("d/own")).unwrap() == data);
    let out = squeezefs(&["stats", "--live", m.mnt.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("adaptive level    zstd:") && table.contains("(range 2-4;"),
        "{table}"
    );
    // Slack (issue 30, point 5): what rounding each extent copy up to 4 KiB blocks costs,
    // per type and in all, less than a block per extent.
    let st = common::squeezefs_json(&[std::ffi::OsStr::new("stats"), m.mnt.as_os_str()]);
    let slack = st["slack"].as_u64().unwrap();
    let per_type: u64 = st["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["slack"].as_u64().unwrap())
        .sum();
    let extents = st["extents"].as_u64().unwrap();
    assert!(slack > 0 && slack == per_type && slack < extents * 4096, "{st}");
    let out = squeezefs(&["stats", m.mnt.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Slack: "), "{text}");
    drop(m);

    for bad in [
        "compress=zstd:adapt:9-2",
        "compress=zstd:adapt:0-5",
        "compress=zstd:adapt:1-30",
    ] {
        let out = squeezefs(&[
            "mount",
            dir.join("backing").to_str().unwrap(),
            dir.join("mnt").to_str().unwrap(),
            "-o",
            bad,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("zstd:adapt:MIN-MAX"),
            "{bad}: {err}"
        );
    }
}

/// The backing file's bytes on disk (its allocated blocks).
fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn files_written_whole_take_1m_extents_and_store_noise_at_its_size_others_keep_the_mounts() {
    let dir = scratch("grow-extents");
    let doc = text(3 << 20);
    let noise = random(20 << 20, 7);
    let m = Mount::new(&dir, "compress=zstd:1");
    // Written whole from the start, as `cp` and `tar` do (1 MiB WRITEs from the page cache).
    write_file(&m.path("doc"), &doc);
    write_file(&m.path("noise"), &noise);
    // Written at scattered offsets first (a database's pages): keeps 128 KiB extents.
    let mut pages = vec![0u8; 3 << 20];
    {
        use std::os::unix::fs::FileExt;
        let f = fs::File::create(m.path("pages")).unwrap();
        for i in (0..(3 << 20) / 4096).rev().step_by(7) {
            let page = &doc[i * 4096..(i + 1) * 4096];
            f.write_all_at(page, (i * 4096) as u64).unwrap();
            pages[i * 4096..(i + 1) * 4096].copy_from_slice(page);
        }
    }
    // At most 1 MiB and fsynced while open: keeps 128 KiB extents.
    write_file(&m.path("small"), &doc[..1 << 20]);
    // Closed whole without a sync (most files `cp -r` and `tar` write): one 1 MiB extent,
    // so on this mount a packed file, its noise stored in a block of its own size.
    let mid = random(300 << 10, 8);
    fs::write(m.path("mid"), &mid).unwrap();
    let s = live_stats(&m);
    assert_eq!(n(&s, "files", "grown_to_largest_extents"), 3, "{s}");
    m.unmount();
    let shift = |name: &str| backing_layout(&dir.join("backing").join(name), 0).0.extent_shift;
    assert_eq!(
        [shift("doc"), shift("noise"), shift("pages"), shift("small")],
        [20, 20, 17, 17]
    );
    // Noise takes its size on disk within 0.5 % (with 128 KiB extents each raw extent's
    // header costs a 33rd block: 103 %), the two superblocks (8 KiB) aside.
    let on_disk = allocated_bytes(&dir.join("backing/noise")) - 8192;
    assert!(
        on_disk as f64 <= noise.len() as f64 * 1.005,
        "{on_disk} bytes on disk for {} of noise",
        noise.len()
    );

    // A mount that names its extent size keeps it for every file.
    let m = Mount::new(&dir, "compress=zstd:1,extent_size=128K");
    assert!(fs::read(m.path("doc")).unwrap() == doc);
    assert!(fs::read(m.path("noise")).unwrap() == noise);
    assert!(fs::read(m.path("pages")).unwrap() == pages);
    assert!(fs::read(m.path("mid")).unwrap() == mid);
    assert_eq!(
        fs::metadata(dir.join("backing/mid")).unwrap().len(),
        0,
        "a packed file keeps only its record"
    );
    write_file(&m.path("doc2"), &doc);
    m.unmount();
    assert_eq!(shift("doc2"), 17);
    common::check_clean(&dir.join("backing"), "files with 1 MiB and 128 KiB extents");
}
