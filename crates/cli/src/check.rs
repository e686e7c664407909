//! `squeezefs check BACKING [--repair] [--json]`: scrub a backing directory at rest. Every
//! container's superblocks and every extent copy are verified (checksums, and decoded);
//! damage is reported with file, extent and offset, and the exit code is 1. `--repair`
//! removes what crashes left behind (stale or torn copies beside a valid one, data past the
//! end, never-committed files), never the only valid copy. Takes the backing directory's
//! lock, so it refuses to run while the directory is mounted.

use std::path::{Path, PathBuf};

use serde_json::json;
use squeezefs_container::check::{self, Fix, Report, Severity};
use squeezefs_container::FileStorage;

use crate::ui::{bar, human};

pub struct Args {
    pub backing: PathBuf,
    pub repair: bool,
    pub json: bool,
}

/// Regular files under `root` (symlinks are not followed), with their sizes.
fn files(root: &Path) -> Result<Vec<(PathBuf, u64)>, String> {
    let mut out: Vec<(PathBuf, u64)> = crate::walk::entries(root)?
        .into_iter()
        .filter(|(_, m)| m.is_file())
        .map(|(p, m)| (p, m.len()))
        .collect();
    out.sort();
    Ok(out)
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Damage => "damage",
        Severity::Leftover => "leftover",
        Severity::Warning => "warning",
    }
}

/// Returns the process exit code: 0 clean (leftovers repaired or not), 1 damage found.
pub fn main(args: Args) -> Result<u8, String> {
    let root = args
        .backing
        .canonicalize()
        .map_err(|e| format!("{}: {e}", args.backing.display()))?;
    let _lock = squeezefs_fs::lock::lock_wait(&root, std::time::Duration::from_secs(10), |why| {
        eprintln!("squeezefs check: {why}; waiting up to 10 s in case it is still unmounting")
    })
    .map_err(|e| e.to_string())?;
    let list = files(&root)?;
    let total: u64 = list.iter().map(|f| f.1).sum();
    let pb = bar(total, "check");
    if args.json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let (mut containers, mut plain, mut verified, mut logical) = (0u64, 0u64, 0u64, 0u64);
    let (mut damaged_files, mut damaged_extents, mut leftovers, mut repaired) = (0u64, 0u64, 0u64, 0u64);
    let mut reports = Vec::new();
    // Dictionaries first: extents compressed with one are verified by decoding with it, and
    // a damaged dictionary is damage to every file that used it.
    for why in crate::dictdir::load_for(&root) {
        damaged_files += 1;
        let finding = check::Finding {
            severity: Severity::Damage,
            extent: None,
            detail: format!("dictionary refused: {why}"),
            fix: None,
        };
        let r = Report {
            findings: vec![finding],
            ..Report::default()
        };
        reports.push((squeezefs_container::dicts::DIR_NAME.to_string(), r, 0));
    }
    for (path, len) in &list {
        let rel = path.strip_prefix(&root).unwrap_or(path).display().to_string();
        pb.set_message(rel.clone());
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(args.repair)
            .open(path);
        let report = opened.map_err(|e| e.to_string()).and_then(|f| {
            let st = FileStorage::new(f);
            let r = check::check(&st).map_err(|e| e.to_string())?;
            let fixed = if args.repair && r.leftovers() > 0 {
                check::repair(&st, &r).map_err(|e| format!("repair: {e}"))?
            } else {
                0
            };
            Ok((r, fixed))
        });
        pb.inc(*len);
        let (r, fixed) = match report {
            Ok(x) => x,
            Err(e) => (
                Report {
                    findings: vec![check::Finding {
                        severity: Severity::Damage,
                        extent: None,
                        detail: format!("cannot be read: {e}"),
                        fix: None,
                    }],
                    ..Report::default()
                },
                0,
            ),
        };
        if r.plain {
            plain += 1;
        } else {
            containers += 1;
        }
        verified += r.extents_verified;
        logical += r.size;
        leftovers += r.leftovers() as u64;
        repaired += fixed as u64;
        if r.damaged() {
            damaged_files += 1;
            damaged_extents += r
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Damage && f.extent.is_some())
                .count() as u64;
        }
        if !r.findings.is_empty() {
            reports.push((rel, r, fixed));
        }
    }
    pb.finish_and_clear();
    if args.json {
        let files: Vec<_> = reports
            .iter()
            .map(|(rel, r, fixed)| {
                json!({
                    "path": rel,
                    "repaired": fixed,
                    "findings": r.findings.iter().map(|f| json!({
                        "severity": severity_name(f.severity),
                        "extent": f.extent.map(|e| e.0),
                        "offset": f.extent.map(|e| e.1),
                        "detail": f.detail,
                        "fix": f.fix.map(|x| match x {
                            Fix::PunchHalf { index, half } => format!("punch extent {index} half {half}"),
                            Fix::Truncate(n) => format!("truncate to {n}"),
                        }),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let doc = json!({
            "backing": root.display().to_string(),
            "files": list.len(),
            "containers": containers,
            "plain": plain,
            "extents_verified": verified,
            "logical_bytes": logical,
            "damaged_files": damaged_files,
            "damaged_extents": damaged_extents,
            "leftovers": leftovers,
            "repaired": repaired,
            "problems": files,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    } else {
        for (rel, r, fixed) in &reports {
            for f in &r.findings {
                let at = f
                    .extent
                    .map(|(i, o)| format!("extent {i} (offset {o}): "))
                    .unwrap_or_default();
                let tag = match (f.severity, f.fix.is_some() && *fixed > 0) {
                    (Severity::Damage, _) => "DAMAGED",
                    (_, true) => "repaired",
                    (Severity::Leftover, false) => "leftover",
                    (Severity::Warning, _) => "warning",
                };
                println!("{tag} {rel}: {at}{}", f.detail);
            }
        }
        println!(
            "checked {} files ({containers} containers, {plain} plain), {verified} extents verified, {} logical",
            list.len(),
            human(logical)
        );
        if damaged_files > 0 {
            println!(
                "{damaged_files} damaged files ({damaged_extents} unreadable extents): reads of them fail with EIO"
            );
        } else {
            println!("no damage");
        }
        if leftovers > 0 && !args.repair {
            println!("{leftovers} leftovers of interrupted writes (harmless): remove with --repair");
        } else if repaired > 0 {
            println!("{repaired} leftovers removed");
        }
    }
    Ok(if damaged_files > 0 { 1 } else { 0 })
}
