//! `squeezefs stats --live MOUNTPOINT`: what a running daemon has decided and holds, read from
//! the mount's statistics file (`MOUNTPOINT/.squeezefs-stats`), as a table or `--json`.

use std::path::Path;

use serde_json::Value;

use crate::statsfile::read;
use crate::ui::human;

fn n(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
        .unwrap_or("?")
}

/// The table.
pub fn render(v: &Value, mountpoint: &Path) -> String {
    let mut o = String::new();
    let line = |o: &mut String, t: String| {
        o.push_str(&t);
        o.push('\n');
    };
    line(
        &mut o,
        format!(
            "squeezefs at {} (backing {}): {}={}, extent size {}{}",
            mountpoint.display(),
            s(v, &["mount", "backing"]),
            if v["mount"]["force"].as_bool() == Some(true) {
                "compress-force"
            } else {
                "compress"
            },
            s(v, &["mount", "compress"]),
            human(n(v, &["mount", "extent_size"])),
            match v["mount"]["whole_file_extent_size"].as_u64() {
                Some(b) => format!(" ({} for files written whole)", human(b)),
                None => String::new(),
            }
        ),
    );
    line(&mut o, String::new());
    line(
        &mut o,
        format!(
            "extents written   {} compressed, {} raw ({}), {} holes",
            n(v, &["extents", "compressed"]),
            n(v, &["extents", "raw"]),
            human(n(v, &["extents", "raw_bytes"])),
            n(v, &["extents", "hole"])
        ),
    );
    line(
        &mut o,
        format!(
            "raw because       no gain {}, heuristic {} (overruled by lz4: {}), backoff {}, early abort {}, \
             content type {}, codec none/too small {}",
            n(v, &["raw_because", "no_gain"]),
            n(v, &["raw_because", "heuristic"]),
            n(v, &["heuristic_overruled"]),
            n(v, &["raw_because", "backoff"]),
            n(v, &["raw_because", "early_abort"]),
            n(v, &["raw_because", "content_type"]),
            n(v, &["raw_because", "no_codec_or_too_small"])
        ),
    );
    line(
        &mut o,
        format!(
            "early abort       lz4 passed {}, zstd-1 passed {}, aborted {}",
            n(v, &["early_abort", "lz4_pass"]),
            n(v, &["early_abort", "zstd1_pass"]),
            n(v, &["early_abort", "aborted"])
        ),
    );
    line(
        &mut o,
        format!(
            "files             {} inline, {} written whole into the largest extents, {} flagged incompressible, {} unflagged",
            n(v, &["files", "inline"]),
            n(v, &["files", "grown_to_largest_extents"]),
            n(v, &["files", "flagged_incompressible"]),
            n(v, &["files", "unflagged"])
        ),
    );
    line(
        &mut o,
        format!(
            "dictionaries      {} loaded; {} extents compressed with one ({} → {}), {} inline files",
            v["dictionaries"]["loaded"].as_array().map_or(0, |a| a.len()),
            n(v, &["dictionaries", "extents"]),
            human(n(v, &["dictionaries", "bytes_in"])),
            human(n(v, &["dictionaries", "bytes_out"])),
            n(v, &["dictionaries", "inline_files"])
        ),
    );
    line(
        &mut o,
        format!("checksum errors   {}", n(v, &["checksum_errors"])),
    );
    line(&mut o, page_cache(v));
    line(&mut o, spin(v));
    if let Some(d) = v["dirty"].as_object().filter(|d| d.contains_key("max")) {
        line(
            &mut o,
            format!(
                "dirty             {} written, not compressed yet (budget {}; written out after {} s)",
                human(d["bytes"].as_u64().unwrap_or(0)),
                human(d["max"].as_u64().unwrap_or(0)),
                d["expire_s"].as_u64().unwrap_or(0)
            ),
        );
    }
    if let Some(a) = v["adapt"].as_object() {
        line(
            &mut o,
            format!(
                "adaptive level    zstd:{} (range {}-{}; lowered {}, raised {}; compressor busy {:.0} %)",
                a["level"].as_i64().unwrap_or(0),
                a["min"].as_i64().unwrap_or(0),
                a["max"].as_i64().unwrap_or(0),
                a["lowered"].as_u64().unwrap_or(0),
                a["raised"].as_u64().unwrap_or(0),
                a["busy"].as_f64().unwrap_or(0.0) * 100.0
            ),
        );
    }
    if let Some(b) = v["background"].as_object().filter(|b| b["state"] != "off") {
        line(
            &mut o,
            format!(
                "background pass   {} to {}: {} pending; {} rewritten in {} extents, {} walks, {} files in use skipped, {} errors",
                b["state"].as_str().unwrap_or("?"),
                b["target"].as_str().unwrap_or("per-directory targets"),
                human(b["pending_bytes"].as_u64().unwrap_or(0)),
                human(b["rewritten_bytes"].as_u64().unwrap_or(0)),
                b["rewritten_extents"].as_u64().unwrap_or(0),
                b["walks"].as_u64().unwrap_or(0),
                b["busy_files"].as_u64().unwrap_or(0),
                b["errors"].as_u64().unwrap_or(0),
            ),
        );
    }
    line(&mut o, String::new());
    line(
        &mut o,
        format!(
            "{:<16} {:>10} {:>12} {:>12} {:>7}",
            "codec", "extents", "in", "out", "ratio"
        ),
    );
    for c in v["codecs"].as_array().into_iter().flatten() {
        line(
            &mut o,
            format!(
                "{:<16} {:>10} {:>12} {:>12} {:>7.2}",
                s(c, &["codec"]),
                n(c, &["extents"]),
                human(n(c, &["bytes_in"])),
                human(n(c, &["bytes_out"])),
                c["ratio"].as_f64().unwrap_or(0.0)
            ),
        );
    }
    if let Some(p) = v.get("packs") {
        line(&mut o, String::new());
        for l in packs(p) {
            line(&mut o, l);
        }
    }
    let w = &v["workspaces"];
    line(&mut o, String::new());
    line(
        &mut o,
        format!(
            "zstd workspaces   {} of at most {}, {} (peak {}, {}); idle ones freed after {} s",
            n(w, &["count"]),
            n(w, &["max"]),
            human(n(w, &["bytes"])),
            n(w, &["peak_count"]),
            human(n(w, &["peak_bytes"])),
            n(w, &["reclaim_after_s"])
        ),
    );
    line(
        &mut o,
        format!(
            "                  allocated {}, reused {}, borrowed {}, waited {}, reclaimed {}, evicted {}, failed {}",
            n(w, &["allocated"]),
            n(w, &["reused"]),
            n(w, &["borrowed"]),
            n(w, &["waited"]),
            n(w, &["reclaimed"]),
            n(w, &["evicted"]),
            n(w, &["alloc_failed"])
        ),
    );
    line(
        &mut o,
        format!(
            "{:<16} {:>6} {:>6} {:>12} {:>14}",
            "level", "idle", "busy", "bytes", "estimate each"
        ),
    );
    for l in w["levels"].as_array().into_iter().flatten() {
        line(
            &mut o,
            format!(
                "{:<16} {:>6} {:>6} {:>12} {:>14}",
                l["level"].as_i64().map_or("?".into(), |x| format!("zstd:{x}")),
                n(l, &["idle"]),
                n(l, &["busy"]),
                human(n(l, &["bytes"])),
                human(n(l, &["estimate"]))
            ),
        );
    }
    o
}

/// The packs section: what this mount packed, and what reading packed files cost. A mount
/// that does not pack still reads the packs written before, so its reads are shown too.
fn packs(p: &Value) -> Vec<String> {
    let (read, hits) = (n(p, &["blocks_read"]), n(p, &["cache_hits"]));
    let reads = format!(
        "                  {read} blocks read, {hits} cache hits ({}), cache {} of {}; {} reclaimed",
        match read + hits {
            0 => "no reads yet".to_string(),
            all => format!("{:.0} % hit rate", hits as f64 * 100.0 / all as f64),
        },
        human(n(p, &["cache_bytes"])),
        human(n(p, &["cache_size"])),
        human(n(p, &["bytes_reclaimed"]))
    );
    if p["packing"].as_bool() != Some(true) {
        let mut out = vec!["packs             not packing (mounted with -o nopack, read-only, or on a backing filesystem that cannot keep records)".to_string()];
        if read + hits > 0 {
            out.push(reads);
        }
        return out;
    }
    let (bytes_in, stored) = (n(p, &["bytes_in"]), n(p, &["bytes_stored"]));
    vec![
        format!(
            "packs             {} files packed in {} blocks, {} in → {} stored ({})",
            n(p, &["files_packed"]),
            n(p, &["blocks_written"]),
            human(bytes_in),
            human(stored),
            if stored > 0 {
                format!("{:.2}", bytes_in as f64 / stored as f64)
            } else {
                "–".to_string()
            }
        ),
        reads,
    ]
}

pub fn main(mountpoint: &Path, json: bool) -> Result<(), String> {
    let v = read(mountpoint)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        print!("{}", render(&v, mountpoint));
    }
    Ok(())
}

/// Whether a session thread spins on /dev/fuse between requests, and why (`spin=`).
fn spin(v: &Value) -> String {
    let sp = &v["spin"];
    let Some(mode) = sp["mode"].as_str() else {
        return "spin              (not reported by this daemon)".to_string();
    };
    let probe = &sp["probe"];
    if let Some(declined) = sp["declined"].as_str() {
        return format!("spin              not spinning (auto: {declined})");
    }
    let why = match (mode, probe["blocking_us"].as_f64(), probe["spinning_us"].as_f64()) {
        ("off", ..) => return "spin              off (spin=0)".to_string(),
        ("fixed", ..) => "spin=MICROS".to_string(),
        (_, Some(b), Some(s)) => format!(
            "auto: a round trip costs {b:.1} µs sleeping, {s:.1} µs spinning: {}",
            if probe["pays"].as_bool() == Some(true) {
                "pays"
            } else {
                "too little saved"
            }
        ),
        (..) if probe["cpus"].as_u64() == Some(1) => "auto: one CPU".to_string(),
        _ => "auto: measuring".to_string(),
    };
    match n(sp, &["window_us"]) {
        0 => format!("spin              not spinning ({why})"),
        w => format!(
            "spin              {w} µs after a request ({why}); {} bursts, {} yielded to busy threads{}",
            n(sp, &["bursts"]),
            n(sp, &["yields"]),
            if sp["spinning"].as_bool() == Some(true) {
                ", spinning now"
            } else {
                ""
            }
        ),
    }
}

/// The pages handed to the kernel's page cache after READs (the rest of each extent a READ
/// decoded); older daemons do not report them.
fn page_cache(v: &Value) -> String {
    let p = &v["page_cache"];
    match p["enabled"].as_bool() {
        None => "page cache        (not reported by this daemon)".to_string(),
        Some(false) => "page cache        not filled (nofill_cache)".to_string(),
        Some(true) => format!(
            "page cache        {} stored after reads ({} pieces); skipped: {} memory short, {} busy; {} refused",
            human(n(p, &["bytes"])),
            n(p, &["stores"]),
            n(p, &["skipped_low_memory"]),
            n(p, &["skipped_busy"]),
            n(p, &["refused"])
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_spin_line_says_what_was_measured_and_decided() {
        let line = |sp: Value| spin(&json!({ "spin": sp }));
        assert_eq!(
            line(json!({"mode": "auto", "window_us": 100, "bursts": 7, "yields": 2, "spinning": false,
                        "probe": {"blocking_us": 30.1, "spinning_us": 7.5, "pays": true}})),
            "spin              100 µs after a request (auto: a round trip costs 30.1 µs sleeping, 7.5 µs spinning: pays); 7 bursts, 2 yielded to busy threads"
        );
        assert_eq!(
            line(json!({"mode": "auto", "window_us": 0, "probe": {"blocking_us": 9.0, "spinning_us": 6.0, "pays": false}})),
            "spin              not spinning (auto: a round trip costs 9.0 µs sleeping, 6.0 µs spinning: too little saved)"
        );
        assert_eq!(
            line(json!({"mode": "auto", "window_us": 0, "probe": {"cpus": 1, "pays": false}})),
            "spin              not spinning (auto: one CPU)"
        );
        assert_eq!(
            line(json!({"mode": "off", "window_us": 0})),
            "spin              off (spin=0)"
        );
        assert_eq!(
            line(
                json!({"mode": "auto", "window_us": 0, "probe": null, "declined": "BACKING is on a FUSE filesystem (fuse.glusterfs)"})
            ),
            "spin              not spinning (auto: BACKING is on a FUSE filesystem (fuse.glusterfs))"
        );
        assert!(line(json!({"window_us": 0})).contains("not reported"));
    }

    #[test]
    fn the_packs_section_says_what_was_packed_and_read() {
        let p = json!({
            "packing": true, "files_packed": 12, "blocks_written": 2, "bytes_in": 40960,
            "bytes_stored": 10240, "blocks_read": 1, "cache_hits": 3, "bytes_reclaimed": 0,
            "cache_size": 32 << 20, "cache_bytes": 1 << 20,
        });
        let table = render(&json!({ "packs": p }), Path::new("/m"));
        assert!(
            table.contains(
                "packs             12 files packed in 2 blocks, 40.0 KiB in → 10.0 KiB stored (4.00)"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "1 blocks read, 3 cache hits (75 % hit rate), cache 1.0 MiB of 32.0 MiB; 0 B reclaimed"
            ),
            "{table}"
        );
        // Not packing: said so; reads of packs written before still shown.
        let mut q = p.clone();
        q["packing"] = false.into();
        let table = render(&json!({ "packs": q }), Path::new("/m"));
        assert!(
            table.contains("not packing (mounted with -o nopack") && table.contains("1 blocks read"),
            "{table}"
        );
        assert!(!table.contains("files packed"), "{table}");
        q["blocks_read"] = 0.into();
        q["cache_hits"] = 0.into();
        let table = render(&json!({ "packs": q }), Path::new("/m"));
        assert!(!table.contains("blocks read"), "{table}");
        // A daemon before the packs object: no section.
        assert!(!render(&json!({}), Path::new("/m")).contains("packs"));
    }
}
