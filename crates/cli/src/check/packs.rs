//! `check`'s pack half: every pack walked and its blocks verified, orphans and torn tails
//! found, garbage measured; with `--repair`, leftovers removed and packs above
//! [`GARBAGE_MAX`] garbage reclaimed (their live files moved to new blocks, then the old
//! pack removed: see `squeezefs_container::pack::reclaim` for the crash-safe order).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

use serde_json::{json, Value};
use squeezefs_container::pack::audit::{
    check_pack, repair_pack, LiveMap, PackIssue, PackReport, GARBAGE_MAX,
};
use squeezefs_container::pack::reclaim::{reclaim, victims, LiveFile, Reclaimed};
use squeezefs_container::pack::Packs;
use squeezefs_container::FileStorage;

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
    match reclaim_files(root, packs, &v, files) {
        Ok(r) => out.reclaimed = Some(r),
        Err(e) => out.errors.push(format!("reclaiming: {e}")),
    }
    out
}

/// Reclaims packs `victims`, moving `files` (paths relative to `root`); one `syncfs` makes
/// each batch's records durable.
fn reclaim_files(
    root: &Path,
    packs: &Packs,
    victims: &std::collections::BTreeSet<u32>,
    files: &[LiveFile],
) -> squeezefs_container::Result<Reclaimed> {
    let open = |f: &LiveFile| -> squeezefs_container::Result<FileStorage> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(root.join(&f.name))?;
        Ok(FileStorage::new(file))
    };
    let sync = |_: &[FileStorage]| -> squeezefs_container::Result<()> {
        let f = File::open(root)?;
        nix::unistd::syncfs(f.as_raw_fd()).map_err(std::io::Error::from)?;
        Ok(())
    };
    reclaim(packs, victims, files, open, sync)
}

/// Reclaims the packs of the backing directory `root` (after `compress` rewrote files in
/// it): every record under `root` is read, packs are walked without verifying payloads
/// (reclaim verifies each file it moves), orphans removed and packs above
/// [`GARBAGE_MAX`] garbage rewritten (with `budget`, those with the most garbage first, until
/// the live bytes to move would exceed it). Does nothing when a record cannot be read.
pub fn reclaim_tree(root: &Path, packs: &Packs, budget: Option<u64>) -> Result<Option<Reclaimed>, String> {
    use squeezefs_container::pack::record::{record_state, RecordState};
    use std::os::unix::fs::MetadataExt;
    let ids = packs.dir().list().map_err(|e| e.to_string())?;
    if ids.is_empty() {
        return Ok(None);
    }
    let mut live = LiveMap::default();
    let mut files = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (path, m) in crate::walk::entries(root)? {
        // (Every file is asked: a packed file whose replaced bytes were not cut yet is not
        // empty.)
        if !m.is_file() || (m.nlink() > 1 && !seen.insert((m.dev(), m.ino()))) {
            continue;
        }
        let state = File::open(&path).map(|f| record_state(&FileStorage::new(f)));
        match state {
            Ok(Ok(RecordState::Current { loc, .. })) => {
                live.add(&loc);
                let name = path.strip_prefix(root).unwrap_or(&path).display().to_string();
                files.push(LiveFile { name, loc });
            }
            Ok(Ok(RecordState::Absent | RecordState::Stale(_))) => {}
            // A record that cannot be read may point anywhere: nothing is reclaimed.
            Ok(Ok(RecordState::Unreadable(_)) | Err(_)) | Err(_) => return Ok(None),
        }
    }
    let mut reports = BTreeMap::new();
    for id in ids {
        let r = check_pack(packs, id, &live, false).map_err(|e| format!("{}: {e}", packs.describe(id)))?;
        repair_pack(packs, &r).map_err(|e| format!("{}: {e}", packs.describe(id)))?;
        reports.insert(id, r);
    }
    let mut v = victims(&reports, GARBAGE_MAX);
    if let Some(budget) = budget {
        // The packs with the most garbage first, until their live bytes fill the budget.
        let mut by_garbage: Vec<&PackReport> = v.iter().map(|id| &reports[id]).collect();
        by_garbage.sort_by(|a, b| b.garbage_fraction().total_cmp(&a.garbage_fraction()));
        let mut moved = 0;
        v = by_garbage
            .into_iter()
            .take_while(|r| {
                moved += r.live_bytes;
                moved <= budget || moved == r.live_bytes
            })
            .map(|r| r.id)
            .collect();
    }
    if v.is_empty() {
        return Ok(None);
    }
    reclaim_files(root, packs, &v, &files)
        .map(Some)
        .map_err(|e| format!("reclaiming packs: {e}"))
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
