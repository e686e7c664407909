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
            "squeezefs at {} (backing {}): {}={}, extent size {}",
            mountpoint.display(),
            s(v, &["mount", "backing"]),
            if v["mount"]["force"].as_bool() == Some(true) {
                "compress-force"
            } else {
                "compress"
            },
            s(v, &["mount", "compress"]),
            human(n(v, &["mount", "extent_size"]))
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
            "raw because       no gain {}, heuristic {} (overruled by lz4: {}), backoff {}, early abort {}, codec none/too small {}",
            n(v, &["raw_because", "no_gain"]),
            n(v, &["raw_because", "heuristic"]),
            n(v, &["heuristic_overruled"]),
            n(v, &["raw_because", "backoff"]),
            n(v, &["raw_because", "early_abort"]),
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
            "files             {} inline, {} flagged incompressible, {} unflagged",
            n(v, &["files", "inline"]),
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

pub fn main(mountpoint: &Path, json: bool) -> Result<(), String> {
    let v = read(mountpoint)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        print!("{}", render(&v, mountpoint));
    }
    Ok(())
}
