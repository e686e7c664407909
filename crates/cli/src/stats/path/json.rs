//! The `--json` document of `squeezefs stats PATH…`: the same totals as the table, by
//! stored type, packs and, with `--by rule`, by rule.

use serde_json::json;

use super::render::{ratio, unattributed};
use super::Totals;

/// The rows by stored type, as JSON.
fn types_json(t: &Totals) -> Vec<serde_json::Value> {
    t.rows
        .iter()
        .map(|(label, p)| {
            json!({"type": label, "extents": p.extents, "disk": p.disk, "uncompressed": p.uncompressed, "slack": p.slack})
        })
        .collect()
}

pub fn to_json(t: &Totals, secs: f64) -> serde_json::Value {
    let rows = types_json(t);
    let mut doc = json!({
        "files": t.files,
        "containers": t.containers,
        "plain": t.plain,
        "inline": t.inline,
        "packed": t.packed,
        "extents": t.extents(),
        "disk": t.disk(),
        "uncompressed": t.uncompressed(),
        "referenced": t.referenced,
        "metadata": t.overhead,
        "slack": t.slack(),
        "directories": t.directories,
        "leftover": t.leftover,
        "damaged_extents": t.damaged_extents,
        "dict_files": t.dict_files,
        "dict_gain": t.dict_gain.map(|(with, without)| json!({
            "disk_with": with, "disk_without": without, "uncompressed": t.dict_uncompressed(),
        })),
        "shared_extents_saved": t.shared,
        "types": rows,
        "packs": t.packs.as_ref().map(|p| json!({
            "count": p.count,
            "bytes": p.bytes,
            "disk": p.disk,
            "files": p.files,
            "garbage_bytes": p.garbage.as_ref().ok(),
            "garbage_not_measured": p.garbage.as_ref().err(),
            "whole": p.whole,
            "shared_files": p.shared_files,
            "shared_bytes": p.shared_bytes,
            "shared_saved_bytes": p.shared_saved,
        })),
        "errors": t.errors,
        "seconds": secs,
    });
    if let Some(groups) = &t.by_rule {
        let by: Vec<_> = groups
            .iter()
            .map(|g| {
                let gt = &g.totals;
                json!({
                    "rule": g.rule,
                    "from": g.from,
                    "files": gt.files,
                    "referenced": gt.referenced,
                    "disk": gt.disk(),
                    "uncompressed": gt.uncompressed(),
                    "metadata": gt.overhead,
                    "ratio": ratio(gt.referenced, gt.disk()),
                    "types": types_json(gt),
                })
            })
            .collect();
        doc["by_rule"] = by.into();
        doc["by_rule_unattributed_disk"] = unattributed(t, groups).into();
    }
    doc
}
