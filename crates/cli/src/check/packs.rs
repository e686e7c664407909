//! `check`'s pack half: every pack walked and its blocks verified, orphans and torn tails
//! found, garbage measured; with `--repair`, leftovers removed and packs above
//! [`GARBAGE_MAX`] garbage reclaimed (their live files moved to new blocks, then the old
//! pack removed: see `squeezefs_container::pack::reclaim` for the crash-safe order).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use squeezefs_container::pack::audit::{
    check_pack, repair_pack, LiveMap, PackIssue, PackReport, GARBAGE_MAX,
};
use squeezefs_container::pack::reclaim::{victims, Garbage, LiveFile, Reclaimed, Settle};
use squeezefs_container::pack::tree::{self, TreeReclaim};
use squeezefs_container::pack::Packs;

use crate::ui::human;

/// What the packs came to.
#[derive(Default)]
pub struct Outcome {
    pub reports: BTreeMap<u32, PackReport>,
    pub repaired: u64,
    pub reclaimed: Option<Reclaimed>,
    pub errors: Vec<String>,
}

impl Outcome {
    pub fn damaged(&self) -> u64 {
        self.reports.values().filter(|r| r.damaged()).count() as u64
    }

    pub fn leftovers(&self) -> u64 {
        self.reports
            .values()
            .flat_map(|r| &r.issues)
            .filter(|i| matches!(i, PackIssue::Leftover(..)))
            .count() as u64
    }
}

/// Checks every pack of `packs` against the records in `live` (the files `check` walked,
/// by path relative to `root`); with `repair`, repairs and reclaims.
pub fn check(
    root: &Path,
    packs: &Packs,
    live: &LiveMap,
    files: &[LiveFile],
    repair: bool,
    progress: &indicatif::ProgressBar,
) -> Outcome {
    let mut out = Outcome::default();
    let ids = match packs.dir().list() {
        Ok(ids) => ids,
        Err(e) => {
            out.errors.push(format!("listing the packs: {e}"));
            return out;
        }
    };
    for id in ids {
        progress.set_message(packs.describe(id));
        match check_pack(packs, id, live, true) {
            Ok(r) => {
                progress.inc(r.len);
                out.reports.insert(id, r);
            }
            Err(e) => out.errors.push(format!("{}: {e}", packs.describe(id))),
        }
    }
    if !repair || !live.complete() || !out.errors.is_empty() {
        return out;
    }
    for r in out.reports.values() {
        match repair_pack(packs, r) {
            Ok(n) => out.repaired += n as u64,
            Err(e) => out
                .errors
                .push(format!("repairing {}: {e}", packs.describe(r.id))),
        }
    }
    let v = victims(&out.reports, GARBAGE_MAX);
    if v.is_empty() {
        return out;
    }
    progress.set_message(format!("reclaiming {} packs", v.len()));
    match tree::reclaim_files(root, packs, &v, files, &mut Garbage, &mut Settle::default) {
        Ok(r) => out.reclaimed = Some(r),
        Err(e) => out.errors.push(format!("reclaiming: {e}")),
    }
    out
}

/// Reclaims the packs of the backing directory `root` where nothing else writes (after
/// `compress` rewrote files in it, or at unmount): orphans removed, packs above
/// [`GARBAGE_MAX`] garbage rewritten (with `budget`, those with the most garbage first).
/// Also says whether it ran to the end (`tree::reclaim_tree_to_end`).
pub fn reclaim_tree(
    root: &Path,
    packs: &Packs,
    budget: Option<u64>,
) -> Result<(Option<Reclaimed>, bool), String> {
    tree::reclaim_tree_to_end(
        root,
        packs,
        TreeReclaim {
            only: None,
            budget,
            repair: true,
            settle: &mut Settle::default,
        },
    )
}

/// The human lines: findings first, then the summary.
pub fn print(o: &Outcome, repair: bool) {
    for r in o.reports.values() {
        for i in &r.issues {
            match i {
                PackIssue::Damage(d) => println!("DAMAGED {d}"),
                PackIssue::Leftover(_, d) if repair => println!("repaired {d}"),
                PackIssue::Leftover(_, d) => println!("leftover {d}"),
                PackIssue::Warning(d) => println!("warning {d}"),
            }
        }
    }
    for e in &o.errors {
        println!("ERROR {e}");
    }
    if let Some(rc) = &o.reclaimed {
        for (name, why) in &rc.left {
            println!("warning {name}: left in its pack ({why})");
        }
    }
    if o.reports.is_empty() {
        return;
    }
    let len: u64 = o.reports.values().map(|r| r.len).sum();
    let garbage: u64 = o.reports.values().map(|r| r.garbage).sum();
    let files: u64 = o.reports.values().map(|r| r.live_files).sum();
    let blocks: u64 = o.reports.values().map(|r| r.blocks_verified).sum();
    println!(
        "checked {} packs ({}): {blocks} blocks verified, {files} packed files, {} garbage ({:.0} %)",
        o.reports.len(),
        human(len),
        human(garbage),
        if len > 0 {
            garbage as f64 * 100.0 / len as f64
        } else {
            0.0
        }
    );
    match &o.reclaimed {
        Some(rc) => println!(
            "reclaimed {}: {} files moved to new blocks, {} packs removed",
            human(rc.bytes_freed),
            rc.files_moved,
            rc.packs_removed.len()
        ),
        None if !repair && !victims(&o.reports, GARBAGE_MAX).is_empty() => println!(
            "packs above {:.0} % garbage: reclaim them with --repair",
            GARBAGE_MAX * 100.0
        ),
        None => {}
    }
}

/// The `packs` object of `--json`.
pub fn json(o: &Outcome) -> Value {
    json!({
        "packs": o.reports.values().map(|r| json!({
            "id": r.id,
            "bytes": r.len,
            "blocks": r.blocks,
            "blocks_verified": r.blocks_verified,
            "live_files": r.live_files,
            "live_bytes": r.live_bytes,
            "garbage_bytes": r.garbage,
            "damaged": r.damaged(),
            "findings": r.issues.iter().map(|i| match i {
                PackIssue::Damage(d) => json!({"severity": "damage", "detail": d}),
                PackIssue::Leftover(_, d) => json!({"severity": "leftover", "detail": d}),
                PackIssue::Warning(d) => json!({"severity": "warning", "detail": d}),
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "bytes": o.reports.values().map(|r| r.len).sum::<u64>(),
        "garbage_bytes": o.reports.values().map(|r| r.garbage).sum::<u64>(),
        "damaged_packs": o.damaged(),
        "leftovers": o.leftovers(),
        "repaired": o.repaired,
        "reclaimed": o.reclaimed.as_ref().map(|r| json!({
            "files_moved": r.files_moved,
            "packs_removed": r.packs_removed,
            "bytes_freed": r.bytes_freed,
            "left": r.left.iter().map(|(n, e)| json!({"path": n, "why": e.to_string()})).collect::<Vec<_>>(),
        })),
        "errors": o.errors,
    })
}
