//! Compression rules by file name (issue 31) on a real mount, as the unprivileged user
//! `tests`: the mount's `rules=` and a directory's `rules` property decide codec, level and
//! extent size for new files by name; subdirectories inherit a directory's rules; a file's
//! own property beats them; a rename keeps the data as it is; `property get` names the
//! rule that applies; a bad rule is refused saying where; `squeezefs compress` applies
//! rules to files written before them, and `stats --by rule` shows what each rule holds.
//! The mounts name `extent_size=128K`: the files here are written whole, and would otherwise
//! take 1 MiB extents or go to a pack (`container/grow.rs`) where these tests count 128 KiB
//! extents and containers.

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
    let opts = r#"compress=zstd:3,extent_size=128K,rules="*.log,*.txt=zstd:9; *.jpg,*.png=none""#;
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
    let m = Mount::as_user(&d, "compress=zstd:3,extent_size=128K", "tests");
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

/// `stats --by rule --json PATH`, read as `tests`: the document, after checking that the
/// groups' files and disk add up to the totals (with what no group holds: directories and
/// the packs' own bytes).
fn by_rule(path: &str) -> serde_json::Value {
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&format!("{bin} stats --by rule --json '{path}'"))).unwrap();
    let groups = v["by_rule"].as_array().expect("by_rule");
    let sum = |k: &str| groups.iter().map(|g| g[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("files"), v["files"].as_u64().unwrap(), "{v}");
    assert_eq!(sum("referenced"), v["referenced"].as_u64().unwrap(), "{v}");
    // What no group holds: the directories, and for a whole backing directory its packs
    // beyond the packed files' shares of their blocks (headers, garbage, allocation).
    let packed: u64 = groups
        .iter()
        .flat_map(|g| g["types"].as_array().unwrap())
        .filter(|t| t["type"].as_str().unwrap().starts_with("packed "))
        .map(|t| t["disk"].as_u64().unwrap())
        .sum();
    let packs = match v["packs"]["whole"].as_bool() {
        Some(true) => v["packs"]["disk"].as_u64().unwrap() - packed,
        _ => 0,
    };
    let rest = v["directories"].as_u64().unwrap() + packs;
    assert_eq!(v["by_rule_unattributed_disk"].as_u64(), Some(rest), "{v}");
    assert_eq!(sum("disk") + rest, v["disk"].as_u64().unwrap(), "{v}");
    v
}

/// The group of rule `rule` (`None`: files no rule matches) in a `by_rule` document.
fn group<'a>(v: &'a serde_json::Value, rule: Option<&str>) -> &'a serde_json::Value {
    v["by_rule"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["rule"].as_str() == rule)
        .unwrap_or_else(|| panic!("no group {rule:?} in {v}"))
}

/// Rules set after files were written change nothing of them until `squeezefs compress`
/// applies them, as the user `tests`, on a mount (the directory's rules, then the mount's
/// `rules=` after a remount) and offline: each old file gets its rule's codec, level,
/// extent size, as if made now, with the same bytes; files no rule matches stay as they
/// were; a second run skips everything; `--codec` beats the rules; `stats --by rule` counts
/// what each rule holds, adding up to the totals.
#[test]
fn compress_applies_rules_to_files_written_before_them() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("rules-compress");
    common::open_to_others(&d);
    let orig = d.join("orig");
    std::fs::create_dir(&orig).unwrap();
    assert!(std::process::Command::new("chown")
        .arg("tests:")
        .arg(&orig)
        .status()
        .unwrap()
        .success());
    let orig = orig.display().to_string();
    let m = Mount::as_user(&d, "compress=zstd:3,extent_size=128K", "tests");
    let mnt = m.mnt.display().to_string();
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    let b = d.join("backing");
    // Written with the mount's codec, before any rule (`sub` made before them too: it gets
    // no rules of its own).
    ok(&format!(
        "cd {mnt} && mkdir data data/sub && seq 1 200000 > top.txt && cd data && \
         seq 1 200000 > a.log && seq 1 100000 > b.db && seq 1 100000 > x.bin && \
         seq 1 200000 > c.txt && seq 1 1000 > small.log && touch empty.log && \
         {{ printf '\\037\\213\\010\\000\\000\\000\\000\\000\\000\\003'; seq 1 100000; }} > z.gz && \
         seq 1 200000 > sub/d.log && seq 1 200000 > sub/e.txt && sync && \
         cp a.log b.db x.bin c.txt small.log z.gz {orig}/"
    ));
    let data = m.mnt.join("data");
    for f in ["a.log", "b.db", "x.bin", "c.txt"] {
        assert_eq!(stored(&data.join(f)).0, ["zstd:3"], "{f}");
    }
    assert_eq!(stored(&data.join("small.log")).0, ["packed zstd:3"]);
    assert_eq!(
        stored(&data.join("z.gz")).0,
        ["none"],
        "starts like gzip: raw, untried"
    );

    // `.*` matches the copies compress makes (`.NAME.squeezefs-compress.PID.N`) by their
    // temporary names: the copy of x.bin must end with what its real name gets instead.
    let rules = "*.log=zstd:9; *.db=zstd:1,extent_size=16K; *.bin=extent_size=16K; *.gz=force; \
                 .*=none,extent_size=64K";
    ok(&format!("{bin} property set {mnt}/data rules '{rules}'"));
    assert_eq!(
        stored(&data.join("a.log")).0,
        ["zstd:3"],
        "a rule set later changes nothing"
    );
    assert_eq!(stored(&data.join("b.db")), (vec!["zstd:3".to_string()], 5));
    let v = by_rule(&format!("{mnt}/data"));
    assert_eq!(group(&v, Some("*.log=zstd:9"))["files"], 3, "{v}");
    assert_eq!(
        group(&v, Some("*.log=zstd:9"))["from"],
        serde_json::json!([format!("rule 1 of {mnt}/data")])
    );
    assert_eq!(
        common::types(group(&v, Some("*.log=zstd:9"))),
        ["packed zstd:3", "zstd:3"],
        "what the files hold now, before compress"
    );
    assert_eq!(group(&v, None)["files"], 3, "c.txt, sub/d.log, sub/e.txt: {v}");

    let run = |args: &str| -> serde_json::Value {
        serde_json::from_str(&ok(&format!("{bin} compress {args} --json"))).unwrap()
    };
    let s = run(&format!("{mnt}/data"));
    assert_eq!(
        (s["rule_matched"].as_u64(), s["ruled"].as_u64()),
        (Some(6), Some(6)),
        "{s}"
    );
    assert_eq!(s["failed"], 0, "{s}");
    assert_eq!(stored(&data.join("a.log")).0, ["zstd:9"]);
    assert_eq!(stored(&data.join("small.log")).0, ["packed zstd:9"]);
    let (t, extents) = stored(&data.join("b.db"));
    assert_eq!(
        (t, extents),
        (vec!["zstd:1".to_string()], 588_895u64.div_ceil(16 << 10))
    );
    let (t, extents) = stored(&data.join("x.bin"));
    assert_eq!(
        (t, extents),
        (vec!["zstd:3".to_string()], 588_895u64.div_ceil(16 << 10)),
        "16K extents, and not the copy's `.*` rule: the mount's codec"
    );
    assert_eq!(stored(&data.join("c.txt")).0, ["zstd:3"], "no rule: unchanged");
    assert_eq!(stored(&data.join("z.gz")).0, ["zstd:3"], "forced: compressed");
    assert_eq!(
        stored(&data.join("sub/d.log")).0,
        ["zstd:3"],
        "sub has no rules of its own"
    );
    let prop = |f: &str, p: &str| {
        ok(&format!(
            "getfattr --only-values -n user.squeezefs.{p} {mnt}/data/{f}"
        ))
    };
    assert_eq!(
        prop("a.log", "compression"),
        "zstd:9",
        "the rule's codec is its own now"
    );
    assert_eq!(prop("b.db", "extent_size"), "16K");
    assert_eq!(prop("x.bin", "extent_size"), "16K");
    assert!(
        !sh(&format!(
            "getfattr -n user.squeezefs.compression {mnt}/data/x.bin"
        ))
        .0,
        "the copy's `none` from its temporary name is not kept"
    );
    assert_eq!(
        prop("empty.log", "compression"),
        "zstd:9",
        "an empty file gets the rule too"
    );
    assert_eq!(
        prop("z.gz", "compression_force"),
        "on",
        "the rule's force is its own now"
    );
    for f in ["a.log", "b.db", "x.bin", "c.txt", "small.log", "z.gz"] {
        ok(&format!("cmp {mnt}/data/{f} {orig}/{f}"));
    }
    assert!(
        ok(&format!("ls -a {mnt}/data"))
            .lines()
            .all(|l| !l.contains("squeezefs-compress")),
        "no copy left"
    );

    // Again: every file as its rule sets, or as without rules.
    let s = run(&format!("{mnt}/data"));
    assert_eq!(s["skipped"], s["files"], "{s}");
    assert_eq!(
        (s["ruled"].as_u64(), s["rule_matched"].as_u64()),
        (Some(0), Some(6)),
        "{s}"
    );

    // `--codec` beats the rule; `--no-rules` leaves the file as it is; then the rule again.
    let s = run(&format!("{mnt}/data/a.log --codec lz4"));
    assert_eq!(
        (s["rewritten"].as_u64(), s["ruled"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(stored(&data.join("a.log")).0, ["lz4:1"]);
    run(&format!("{mnt}/data/a.log --no-rules"));
    assert_eq!(stored(&data.join("a.log")).0, ["lz4:1"]);
    run(&format!("{mnt}/data/a.log"));
    assert_eq!(stored(&data.join("a.log")).0, ["zstd:9"]);

    let v = by_rule(&format!("{mnt}/data"));
    let logs = group(&v, Some("*.log=zstd:9"));
    assert_eq!(logs["files"], 3, "{v}");
    assert_eq!(common::types(logs), ["packed zstd:9", "zstd:9"], "{v}");
    let dbs = group(&v, Some("*.db=zstd:1,extent_size=16K"));
    assert_eq!(
        (dbs["files"].as_u64(), dbs["referenced"].as_u64()),
        (Some(1), Some(588_895))
    );
    assert_eq!(common::types(dbs), ["zstd:1"]);
    assert!(dbs["ratio"].as_f64().unwrap() > 2.0, "{dbs}");
    assert_eq!(group(&v, None)["files"], 3, "{v}");
    let text = ok(&format!("{bin} stats --by rule {mnt}/data"));
    assert!(
        text.contains(&format!("*.db=zstd:1,extent_size=16K  (rule 2 of {mnt}/data)"))
            && text.contains("(no rule)")
            && text.contains("1 file, 575.1 KiB referenced"),
        "{text}"
    );

    // The mount's `rules=` (after a remount), where a directory has no rules of its own:
    // the root and `sub`, not `data`.
    m.unmount();
    let m = Mount::as_user(
        &d,
        r#"compress=zstd:3,extent_size=128K,rules="*.txt=zlib:6""#,
        "tests",
    );
    assert_eq!(stored(&m.mnt.join("top.txt")).0, ["zstd:3"]);
    let s = run(&mnt);
    assert_eq!(
        (s["ruled"].as_u64(), s["failed"].as_u64()),
        (Some(2), Some(0)),
        "{s}"
    );
    assert_eq!(stored(&m.mnt.join("top.txt")).0, ["zlib:6"]);
    assert_eq!(stored(&data.join("sub/e.txt")).0, ["zlib:6"]);
    assert_eq!(
        stored(&data.join("c.txt")).0,
        ["zstd:3"],
        "data's rules replace the mount's"
    );
    ok(&format!("cmp {mnt}/data/c.txt {orig}/c.txt"));
    let v = by_rule(&mnt);
    let txt = group(&v, Some("*.txt=zlib:6"));
    assert_eq!(txt["files"], 2, "{v}");
    assert_eq!(txt["from"], serde_json::json!(["rule 1 of the mount's rules="]));
    assert_eq!(group(&v, Some("*.log=zstd:9"))["files"], 3, "{v}");

    // Offline, in the backing directory: a directory's rules apply (the mount's are not
    // known there).
    ok(&format!(
        "mkdir {mnt}/off && seq 1 200000 > {mnt}/off/o.log && sync && \
         {bin} property set {mnt}/off rules '*.log=lz4'"
    ));
    m.unmount();
    let off = format!("{}/off", b.display());
    assert_eq!(stored(Path::new(&format!("{off}/o.log"))).0, ["zstd:3"]);
    let s = run(&off);
    assert_eq!(
        (s["ruled"].as_u64(), s["failed"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(stored(Path::new(&format!("{off}/o.log"))).0, ["lz4:1"]);
    common::check_clean(&b, "after compress applied rules");
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
    let m = Mount::as_user(
        &d,
        r#"compress=zstd:3,extent_size=128K,rules="*.forced=force""#,
        "tests",
    );
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
    // A directory's rules set force by name too (a file no rule matches is sniffed).
    ok(&format!(
        "cd {mnt} && mkdir dr && {bin} property set dr rules '*.f=force' && {} && {} && sync",
        gz("dr/a.f"),
        gz("dr/a.n")
    ));
    assert_eq!(
        stored(&m.mnt.join("dr/a.f")).0,
        ["zstd:3"],
        "the directory's rule's force"
    );
    assert_eq!(stored(&m.mnt.join("dr/a.n")).0, ["none"]);
    // A small file made in `fd` is packed; its record (version 4) keeps the property.
    let rec = common::getfattr(&b.join("fd/small.txt"), "user.sqzfs").expect("packed");
    assert_eq!(rec[0], 4, "location record version 4");
    // Kept across a remount, by containers and packed files; the data reads back.
    let sum = ok(&format!("md5sum < {mnt}/fd/x.bin"));
    m.unmount();
    common::check_clean(&b, "after force");
    let m = Mount::as_user(&d, "compress=zstd:3,extent_size=128K", "tests");
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

/// Review fixes of `compress` with rules, as `tests` on a mount: `--extent-size` beats the
/// rules (the copy takes none of the rule's codec, force or dictionary); a file with hard
/// links is listed once across PATHs and gets no rule by name (with a warning); a copy
/// whose real name gets no extent size has the mount's, not its temporary name's rule's;
/// a copy keeps the file's own background_compression.
#[test]
fn compress_extent_size_beats_rules_and_hard_links_get_none() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    let d = scratch("rules-review");
    common::open_to_others(&d);
    // Plain files in the backing directory before the first mount (adopted as they are).
    let p = d.join("backing/p");
    std::fs::create_dir(&p).unwrap();
    let text: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    std::fs::write(p.join("plain.txt"), &text).unwrap();
    assert!(std::process::Command::new("chown")
        .args(["-R", "tests:"])
        .arg(&p)
        .status()
        .unwrap()
        .success());
    let m = Mount::as_user(&d, "compress=zstd:3,extent_size=128K", "tests");
    let mnt = m.mnt.display().to_string();
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    ok(&format!(
        "cd {mnt} && mkdir e && seq 1 100000 > e/x.db && seq 1 100000 > e/h1 && ln e/h1 e/h2 && seq 1 1000 > e/f.dd && seq 1 100000 > e/k.z3 && \
         touch e/m.own && {bin} property set e/m.own compression zlib:6 && seq 1 100000 > e/m.own && \
         {bin} property set p/plain.txt background_compression zstd:15 && sync && \
         {bin} property set e rules 'h1=lz4; h2=zstd:9; *.db=lz4,force; *.dd=dictionary=12345; *.z3=zstd:3; *.own=lz4' && \
         {bin} property set p rules '.*=extent_size=16K'"
    ));
    let run = |args: &str| -> (serde_json::Value, String) {
        let (good, out, err) = sh(&format!("{bin} compress {args} --json"));
        assert!(good, "{args}: {err}");
        (serde_json::from_str(&out).unwrap(), err)
    };
    // A: --extent-size beats the rule: the mount's codec, no force, no rule counted.
    let (s, _) = run(&format!("{mnt}/e/x.db --extent-size 16K"));
    assert_eq!(
        (s["converted"].as_u64(), s["ruled"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(
        stored(&m.mnt.join("e/x.db")),
        (vec!["zstd:3".to_string()], 588_895u64.div_ceil(16 << 10))
    );
    assert!(
        !sh(&format!(
            "getfattr -n user.squeezefs.compression_force {mnt}/e/x.db"
        ))
        .0,
        "the rule's force is not the copy's"
    );
    // B: one inode, two names matching two rules: listed once, no rule, a warning.
    let (s, err) = run(&format!("{mnt}/e/h1 {mnt}/e/h2"));
    assert_eq!(
        (s["files"].as_u64(), s["ruled"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert!(err.contains("hard links") && err.contains("not applied"), "{err}");
    assert_eq!(stored(&m.mnt.join("e/h1")).0, ["zstd:3"]);
    // C, D: the plain file's copy (whose temporary name `.*` gives 16K extents) gets the
    // mount's extent size, and keeps its own background_compression.
    let (s, _) = run(&format!("{mnt}/p"));
    assert_eq!(
        (s["converted"].as_u64(), s["failed"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(
        stored(&m.mnt.join("p/plain.txt")),
        (vec!["zstd:3".to_string()], 588_895u64.div_ceil(128 << 10)),
        "the mount's extent size, not the temporary name's rule's"
    );
    assert_eq!(
        ok(&format!(
            "getfattr --only-values -n user.squeezefs.background_compression {mnt}/p/plain.txt"
        )),
        "zstd:15"
    );
    assert_eq!(ok(&format!("cat {mnt}/p/plain.txt")), text);
    // E: a rule's dictionary that is not there is left out with a warning (on the mount,
    // not a failure), as the daemon does.
    let (s, err) = run(&format!("{mnt}/e/f.dd"));
    assert_eq!(s["failed"], 0, "{s}");
    assert!(
        err.contains("dictionary 12345") && err.contains("left out"),
        "{err}"
    );
    // G: stored with the rule's codec already: not rewritten, but the codec becomes its
    // own property, and counted.
    let (s, _) = run(&format!("{mnt}/e/k.z3"));
    assert_eq!(
        (s["rewritten"].as_u64(), s["ruled"].as_u64()),
        (Some(0), Some(1)),
        "{s}"
    );
    assert_eq!(
        ok(&format!(
            "getfattr --only-values -n user.squeezefs.compression {mnt}/e/k.z3"
        )),
        "zstd:3"
    );
    // G: on the backing directory of a live mount, stats --by rule says the mount's
    // rules= is not known there.
    let (good, _, err) = sh(&format!("{bin} stats --by rule {}/backing/e", d.display()));
    assert!(good && err.contains("rules= is not known"), "{err}");
    // H: a rule's codec replaces one set by hand, and that is counted.
    let (s, _) = run(&format!("{mnt}/e/m.own {mnt}/e/k.z3"));
    assert_eq!(
        (s["ruled"].as_u64(), s["replaced_own"].as_u64()),
        (Some(1), Some(1)),
        "{s}"
    );
    assert_eq!(stored(&m.mnt.join("e/m.own")).0, ["lz4:1"]);
    m.unmount();
    // D offline: a copy into another extent size keeps the backing xattr.
    let plain = format!("{}/backing/p/plain.txt", d.display());
    let (s, _) = run(&format!("{plain} --extent-size 16K"));
    assert_eq!(
        (s["converted"].as_u64(), s["failed"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(
        ok(&format!(
            "getfattr --only-values -n user.squeezefs.background_compression {plain}"
        )),
        "zstd:15",
        "offline"
    );
    let (s, err) = run(&format!("{}/backing/e/f.dd", d.display()));
    assert_eq!(s["failed"], 0, "{s}");
    assert!(
        err.contains("dictionary 12345") && err.contains("left out"),
        "offline: {err}"
    );
    common::check_clean(&d.join("backing"), "after the review fixes");
}
