//! Compression rules by file name (issue 31) on a real mount, as the unprivileged user
//! `tests`: the mount's `rules=` and a directory's `rules` property decide codec, level and
//! extent size for new files by name; subdirectories inherit a directory's rules; a file's
//! own property beats them; a rename keeps the data as it is; `property get` names the
//! rule that applies; a bad rule is refused saying where.

#![deny(unsafe_code)]

use std::path::Path;

mod common;
use common::{scratch, Mount};

/// Runs `script` with `sh -c` as the user `tests`: (success, stdout, stderr).
fn sh(script: &str) -> (bool, String, String) {
    let out = common::as_tests(&["sh", "-c", script]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(script: &str) -> String {
    let (good, out, err) = sh(script);
    assert!(good, "{script}: {err}");
    out
}

/// The stored types (`zstd:9`, `packed lz4:1`, …) and extent count of one file, as
/// `squeezefs stats --json` gives them to `tests` through the mount.
fn stored(file: &Path) -> (Vec<String>, u64) {
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&format!("{bin} stats --json '{}'", file.display()))).unwrap();
    (common::types(&v), v["extents"].as_u64().unwrap())
}

#[test]
fn rules_choose_codec_level_and_extent_size_by_name_for_a_user_mount() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("rules");
    common::open_to_others(&d);
    let opts = r#"compress=zstd:3,rules="*.log,*.txt=zstd:9; *.jpg,*.png=none""#;
    let m = Mount::as_user(&d, opts, "tests");
    let mnt = m.mnt.display().to_string();
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    let b = d.join("backing");
    // The mount's rules, where no directory has its own (files of 10 extents: containers).
    ok(&format!(
        "cd {mnt} && seq 1 200000 > app.log && seq 1 200000 > notes.txt && seq 1 200000 > other.c && \
         head -c 300000 /dev/zero | tr '\\0' 'x' > photo.jpg && sync"
    ));
    assert_eq!(stored(&m.mnt.join("app.log")).0, ["zstd:9"]);
    assert_eq!(stored(&m.mnt.join("notes.txt")).0, ["zstd:9"]);
    assert_eq!(
        stored(&m.mnt.join("other.c")).0,
        ["zstd:3"],
        "no rule: the mount's codec"
    );
    assert_eq!(
        stored(&m.mnt.join("photo.jpg")).0,
        ["none"],
        "`none` stores it raw"
    );

    // A directory's rules (through `property set`) replace the mount's below it, and a
    // directory made in it inherits them.
    let rules = "*.sqlite,*.db=zstd:1,extent_size=16K; *.log=lz4";
    ok(&format!(
        "mkdir {mnt}/data && {bin} property set {mnt}/data rules '{rules}'"
    ));
    ok(&format!(
        "cd {mnt}/data && mkdir sub && seq 1 100000 > x.db && seq 1 200000 > y.log && seq 1 200000 > z.txt && \
         seq 1 100000 > sub/q.sqlite && touch own.log && {bin} property set own.log compression zlib:6 && \
         seq 1 200000 > own.log && sync"
    ));
    let (t, extents) = stored(&m.mnt.join("data/x.db"));
    assert_eq!(t, ["zstd:1"]);
    assert_eq!(extents, 588_895u64.div_ceil(16 << 10), "16K extents");
    assert_eq!(stored(&m.mnt.join("data/y.log")).0, ["lz4:1"]);
    assert_eq!(
        stored(&m.mnt.join("data/z.txt")).0,
        ["zstd:3"],
        "the directory's rules replace the mount's"
    );
    let (t, extents) = stored(&m.mnt.join("data/sub/q.sqlite"));
    assert_eq!(
        (t, extents),
        (vec!["zstd:1".to_string()], 588_895u64.div_ceil(16 << 10))
    );
    assert_eq!(
        stored(&m.mnt.join("data/own.log")).0,
        ["zlib:6"],
        "a file's own property beats a rule"
    );
    assert_eq!(
        ok(&format!(
            "getfattr --only-values -n user.squeezefs.rules {mnt}/data/sub"
        )),
        "*.sqlite,*.db=zstd:1,extent_size=16K; *.log=lz4:1",
        "inherited by a new directory, in canonical form"
    );

    // `property get` names the rule for a file, and says so when none matches.
    let got = ok(&format!("{bin} property get {mnt}/data/x.db rules"));
    assert!(
        got.contains("rule=*.sqlite,*.db=zstd:1,extent_size=16K") && got.contains("rule 1 of"),
        "{got}"
    );
    let got = ok(&format!("{bin} property get {mnt}/app.log --json"));
    let v: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(v["properties"]["rule"]["value"], "*.log,*.txt=zstd:9", "{v}");
    assert_eq!(v["properties"]["compression"]["value"], "zstd:9");
    assert!(ok(&format!("{bin} property get {mnt}/other.c rules")).contains("no rule"));

    // A rename keeps the data as it is (no recompression, same bytes).
    let before = ok(&format!("md5sum < {mnt}/app.log"));
    ok(&format!(
        "mv {mnt}/app.log {mnt}/app.jpg && mv {mnt}/data/y.log {mnt}/data/y.db && sync"
    ));
    assert_eq!(stored(&m.mnt.join("app.jpg")).0, ["zstd:9"]);
    assert_eq!(stored(&m.mnt.join("data/y.db")).0, ["lz4:1"]);
    assert_eq!(ok(&format!("md5sum < {mnt}/app.jpg")), before);

    // Bad rules are refused, saying where and what is expected; nothing is stored.
    let (good, _, err) = sh(&format!(
        "{bin} property set {mnt}/data rules '*.log=zstd:9; *.db=zstd:99'"
    ));
    assert!(
        !good && err.contains("column 20") && err.contains("expected a codec"),
        "{err}"
    );
    let (good, _, err) = sh(&format!("{bin} property set {mnt}/data rules '*.log'"));
    assert!(
        !good && err.contains("column 6") && err.contains("GLOBS=SETTINGS"),
        "{err}"
    );
    let (good, _, err) = sh(&format!(
        "setfattr -n user.squeezefs.rules -v '*.[log=lz4' {mnt}/data"
    ));
    assert!(!good && err.contains("Invalid argument"), "{err}");
    let (good, _, err) = sh(&format!("{bin} property set {mnt}/other.c rules '*=none'"));
    assert!(!good && err.contains("rules live on directories"), "{err}");
    assert_eq!(
        ok(&format!(
            "getfattr --only-values -n user.squeezefs.rules {mnt}/data"
        )),
        "*.sqlite,*.db=zstd:1,extent_size=16K; *.log=lz4:1"
    );
    // Removing them: new files get the directory's (here the mount's) settings again.
    ok(&format!(
        "{bin} property set {mnt}/data rules '' && seq 1 100000 > {mnt}/data/w.db && sync"
    ));
    assert_eq!(stored(&m.mnt.join("data/w.db")), (vec!["zstd:3".to_string()], 5));
    let mnt_path = m.mnt.clone();
    m.unmount();
    common::check_clean(&b, "after rules");

    // A bad `rules=` mount option is refused before mounting, saying where.
    let out = common::squeezefs(&[
        "mount".as_ref(),
        b.as_os_str(),
        mnt_path.as_os_str(),
        "-o".as_ref(),
        r#"rules="*.log=zstd:9;*.db""#.as_ref(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("column 18") && err.contains("has no `=`"),
        "{err}"
    );
}

/// The live statistics of a mount, read as `tests`.
fn live(mnt: &str) -> serde_json::Value {
    serde_json::from_str(&ok(&format!("cat {mnt}/.squeezefs-stats"))).unwrap()
}

/// Already-compressed files (here gzip, big and small) are stored raw with no trial
/// compression: the daemon's counters show them as `content_type`, and nothing judged or
/// tried; the text beside them compresses; with `compress-force` they are tried.
#[test]
fn already_compressed_files_are_stored_raw_without_a_trial() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("content-type");
    common::open_to_others(&d);
    let m = Mount::as_user(&d, "compress=zstd:3", "tests");
    let mnt = m.mnt.display().to_string();
    ok(&format!(
        "cd {mnt} && seq 1 400000 | gzip -1 > big.gz && seq 1 3000 | gzip -1 > small.gz && \
         seq 1 200000 > text.txt && sync"
    ));
    let v = live(&mnt);
    let why = &v["raw_because"];
    assert!(
        why["content_type"].as_u64() >= Some(4),
        "the big one's extents: {why}"
    );
    for tried in ["heuristic", "no_gain", "early_abort"] {
        assert_eq!(why[tried], 0, "{tried}: {why}");
    }
    assert!(
        v["extents"]["compressed"].as_u64() >= Some(10),
        "the text compresses: {v}"
    );
    assert_eq!(
        ok(&format!("gzip -dc < {mnt}/big.gz | md5sum")),
        ok("seq 1 400000 | md5sum")
    );
    assert_eq!(ok(&format!("gzip -dc < {mnt}/small.gz | wc -l")).trim(), "3000");
    m.unmount();
    common::check_clean(&d.join("backing"), "after compressed files");

    // Forced: tried like anything else.
    let m = Mount::as_user(&d, "compress-force=zstd:3", "tests");
    ok(&format!("cd {mnt} && seq 1 400000 | gzip -1 > big2.gz && sync"));
    let v = live(&mnt);
    assert_eq!(v["raw_because"]["content_type"], 0, "{v}");
    m.unmount();
}

/// Force per directory, per file and in rules (issue 31, point 2), as `tests` on a mount
/// without `compress-force`: files that start like gzip are stored raw untried, unless a
/// rule, their directory's `compression_force` or their own says force, which compresses
/// them; the property is inherited, shown, turned off, refused when bad, and kept across a
/// remount, by containers (format 7) and packed files (location record version 4) alike.
#[test]
fn force_by_rule_directory_and_file_compresses_what_the_sniff_would_skip() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("rules-force");
    common::open_to_others(&d);
    let b = d.join("backing");
    let m = Mount::as_user(&d, r#"compress=zstd:3,rules="*.forced=force""#, "tests");
    let mnt = m.mnt.display().to_string();
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    // 5 extents of text behind a gzip header: what the content sniff stores raw.
    let gz = |name: &str| {
        format!("{{ printf '\\037\\213\\010\\000\\000\\000\\000\\000\\000\\003'; seq 1 100000; }} > {name}")
    };
    ok(&format!(
        "cd {mnt} && {} && {} && mkdir fd && {bin} property set fd compression_force on && \
         mkdir fd/sub && {} && {} && touch own && {bin} property set own compression_force on && {} && \
         touch fd/off && {bin} property set fd/off compression_force off && {} && \
         seq 1 1000 > fd/small.txt && sync",
        gz("a.plain"),
        gz("a.forced"),
        gz("fd/x.bin"),
        gz("fd/sub/y.bin"),
        gz("own"),
        gz("fd/off"),
    ));
    assert_eq!(stored(&m.mnt.join("a.plain")).0, ["none"], "sniffed, raw");
    assert_eq!(stored(&m.mnt.join("a.forced")).0, ["zstd:3"], "the rule's force");
    assert_eq!(stored(&m.mnt.join("fd/x.bin")).0, ["zstd:3"], "the directory's");
    assert_eq!(stored(&m.mnt.join("fd/sub/y.bin")).0, ["zstd:3"], "inherited");
    assert_eq!(stored(&m.mnt.join("own")).0, ["zstd:3"], "the file's own");
    assert_eq!(stored(&m.mnt.join("fd/off")).0, ["none"], "turned off");
    // Shown where it is set, and where it comes from.
    let got = ok(&format!("{bin} property get {mnt}/fd/x.bin compression_force"));
    assert!(
        got.contains("compression_force=on") && got.contains("set on this file"),
        "{got}"
    );
    let got = ok(&format!(
        "{bin} property get {mnt}/a.plain compression_force --json"
    ));
    let v: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        v["properties"]["compression_force"]["value"],
        serde_json::Value::Null,
        "{v}"
    );
    assert_eq!(
        ok(&format!(
            "getfattr --only-values -n user.squeezefs.compression_force {mnt}/fd/sub"
        )),
        "on"
    );
    assert!(ok(&format!("{bin} property get {mnt}/a.forced rules")).contains("rule=*.forced=force"));
    // A bad value is refused, saying what is accepted; `off` on a directory removes it.
    let (good, _, err) = sh(&format!("{bin} property set {mnt}/fd compression_force maybe"));
    assert!(!good && err.contains("`maybe` is not `on`"), "{err}");
    let (good, _, err) = sh(&format!(
        "setfattr -n user.squeezefs.compression_force -v off {mnt}/fd"
    ));
    assert!(!good && err.contains("Invalid argument"), "{err}");
    ok(&format!(
        "cd {mnt} && {bin} property set fd/sub compression_force off && {} && sync",
        gz("fd/sub/z.bin")
    ));
    assert_eq!(stored(&m.mnt.join("fd/sub/z.bin")).0, ["none"]);
    // A small file made in `fd` is packed; its record (version 4) keeps the property.
    let rec = common::getfattr(&b.join("fd/small.txt"), "user.sqzfs").expect("packed");
    assert_eq!(rec[0], 4, "location record version 4");
    // Kept across a remount, by containers and packed files; the data reads back.
    let sum = ok(&format!("md5sum < {mnt}/fd/x.bin"));
    m.unmount();
    common::check_clean(&b, "after force");
    let m = Mount::as_user(&d, "compress=zstd:3", "tests");
    let mnt = m.mnt.display().to_string();
    for f in ["fd/x.bin", "own", "a.forced", "fd/small.txt"] {
        let got = ok(&format!("{bin} property get {mnt}/{f} compression_force"));
        assert!(got.contains("compression_force=on"), "{f}: {got}");
    }
    assert_eq!(ok(&format!("md5sum < {mnt}/fd/x.bin")), sum);
    // Growing the packed file makes it a container that keeps force.
    ok(&format!("cd {mnt}/fd && {} && sync", gz("small.txt")));
    assert_eq!(stored(&m.mnt.join("fd/small.txt")).0, ["zstd:3"]);
    m.unmount();
    common::check_clean(&b, "after the remount");
}
