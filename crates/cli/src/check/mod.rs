//! `squeezefs check BACKING [--repair] [--json]`: scrub a backing directory at rest. Every
//! container's superblocks and every extent copy are verified (checksums, and decoded);
//! damage is reported with file, extent and offset, and the exit code is 1. `--repair`
//! removes what crashes left behind (stale or torn copies beside a valid one, data past the
//! end, never-committed files), never the only valid copy. Takes the backing directory's
//! lock, so it refuses to run while the directory is mounted.
//!
//! Packed files (format 4) are verified by reading their bytes from their packs; then every
//! pack is walked (`packs.rs`): damaged blocks, packs no file uses, blocks torn by a crash,
//! garbage. `--repair` also removes those leftovers and reclaims packs above 25 % garbage.

pub mod packs;

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use squeezefs_container::check::{self, Fix, Report, Severity};
use squeezefs_container::pack::audit::LiveMap;
use squeezefs_container::pack::reclaim::LiveFile;
use squeezefs_container::pack::{FsPackDir, Packs};
use squeezefs_container::FileStorage;

use crate::ui::{bar, human};

pub struct Args {
    pub backing: PathBuf,
    pub repair: bool,
    pub json: bool,
}

/// Regular files under `root` (symlinks are not followed), with their sizes; a file with
/// several hard links once.
fn files(root: &Path) -> Result<Vec<(PathBuf, u64)>, String> {
    let mut out: Vec<(PathBuf, std::fs::Metadata)> = crate::walk::entries(root)?
        .into_iter()
        .filter(|(_, m)| m.is_file())
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen = HashSet::new();
    out.retain(|(_, m)| m.nlink() < 2 || seen.insert((m.dev(), m.ino())));
    Ok(out.into_iter().map(|(p, m)| (p, m.len())).collect())
}

/// Bytes of decompressed blocks `check` keeps: a directory's packed files are read in a row.
const PACK_CACHE: usize = 64 << 20;

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
    let packs = Packs::new(
        Box::new(FsPackDir::new(&root, args.repair)),
        args.repair,
        PACK_CACHE,
    )
    .map_err(|e| format!("{}: {e}", FsPackDir::new(&root, false).path().display()))?;
    if args.repair {
        // A file a repair moves keeps the change time it shows (where records may be 64
        // bytes for free).
        packs.set_keep_ctime(squeezefs_fs::packing::keeps_ctime(&root));
        // A repair rewrites records and packs: the next unmount walks.
        packs.take_clean_mark().map_err(|e| {
            format!(
                "{}: removing the clean mark: {e}",
                FsPackDir::new(&root, false).path().display()
            )
        })?;
    }
    let pack_bytes: u64 = packs
        .dir()
        .list()
        .unwrap_or_default()
        .iter()
        .filter_map(|&id| std::fs::metadata(packs.describe(id)).ok())
        .map(|m| m.len())
        .sum();
    let total: u64 = list.iter().map(|f| f.1).sum::<u64>() + pack_bytes;
    let pb = bar(total, "check");
    if args.json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let (mut containers, mut plain, mut verified, mut logical) = (0u64, 0u64, 0u64, 0u64);
    let mut packed = 0u64;
    let mut live = LiveMap::default();
    let mut live_files = Vec::new();
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
    // New files a daemon made ahead and never named (`dirops=behind`, killed first).
    for (rel, removed) in unnamed_new_files(&root, args.repair) {
        leftovers += 1;
        repaired += u64::from(removed);
        let r = Report {
            findings: vec![check::Finding {
                severity: Severity::Leftover,
                extent: None,
                detail: if removed {
                    "a new file whose name was never applied (its daemon ended first): removed".into()
                } else {
                    "a new file whose name was never applied (its daemon ended first; the next mount or --repair removes it)".into()
                },
                fix: None,
            }],
            ..Report::default()
        };
        reports.push((rel, r, usize::from(removed)));
    }
    for (path, len) in &list {
        let rel = path.strip_prefix(&root).unwrap_or(path).display().to_string();
        pb.set_message(rel.clone());
        // A mode-0 file of the user's own (a squeezefs without root keeps them) is read too.
        let opened = squeezefs_container::open_as_owner(path, args.repair);
        let report = opened.map_err(|e| e.to_string()).and_then(|f| {
            let st = FileStorage::new(f);
            let r = check::check(&st, Some(&packs)).map_err(|e| e.to_string())?;
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
            Err(e) => {
                // Its record (if any) is unknown: no pack may be judged unused.
                live.mark_incomplete();
                (
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
                )
            }
        };
        if r.record_unknown {
            live.mark_incomplete();
        }
        if let Some(loc) = r.packed {
            packed += 1;
            live.add(&loc);
            live_files.push(LiveFile {
                name: rel.clone(),
                loc,
                // (Offline: nothing renames files under `check`.)
                id: None,
                target: None,
            });
        } else if r.plain {
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
    let packs_out = packs::check(&root, &packs, &live, &live_files, args.repair, &pb);
    pb.finish_and_clear();
    let pack_damage = packs_out.damaged() + packs_out.errors.len() as u64;
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
                            Fix::Punch { offset, len } => format!("punch {len} bytes at {offset}"),
                            Fix::Truncate(n) => format!("truncate to {n}"),
                            Fix::RemoveRecord => "remove the location record".into(),
                        }),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let doc = json!({
            "backing": root.display().to_string(),
            "files": list.len(),
            "containers": containers,
            "packed": packed,
            "shared": live.shared().files,
            "shared_bytes": live.shared().bytes,
            "shared_mismatched": live.shared().mismatched,
            "plain": plain,
            "extents_verified": verified,
            "logical_bytes": logical,
            "damaged_files": damaged_files,
            "damaged_extents": damaged_extents,
            "leftovers": leftovers,
            "repaired": repaired,
            "problems": files,
            "packs": packs::json(&packs_out),
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
            "checked {} files ({containers} containers, {packed} packed, {plain} plain), {verified} extents verified, {} logical",
            list.len(),
            human(logical)
        );
        let shared = live.shared();
        if shared.mismatched > 0 {
            println!(
                "{} packed files name bytes another file names with another checksum: one of each pair is damaged (listed above)",
                shared.mismatched
            );
        }
        if shared.files > 0 {
            println!(
                "{} packed files name bytes another file names too (equal contents stored once, {} saved before compression; each read against its own checksum)",
                shared.files,
                human(shared.bytes)
            );
        }
        packs::print(&packs_out, args.repair);
        if pack_damage > 0 {
            println!("{pack_damage} damaged packs: the files in their damaged blocks are listed above");
        }
        if damaged_files > 0 {
            println!(
                "{damaged_files} damaged files ({damaged_extents} unreadable extents): reads of them fail with EIO"
            );
        } else if pack_damage == 0 {
            println!("no damage");
        }
        let leftovers = leftovers + packs_out.leftovers();
        let repaired = repaired + packs_out.repaired;
        if leftovers > 0 && !args.repair {
            println!("{leftovers} leftovers of interrupted writes (harmless): remove with --repair");
        } else if repaired > 0 {
            println!("{repaired} leftovers removed");
        }
    }
    Ok(if damaged_files > 0 || pack_damage > 0 {
        1
    } else {
        0
    })
}

/// The files in BACKING's private directory that a daemon made ahead for new files and
/// never named (`.squeezefs-packs/.new-*`), each with whether `repair` removed it.
fn unnamed_new_files(root: &Path, repair: bool) -> Vec<(String, bool)> {
    use squeezefs_container::pack::dir::{DIR_NAME, POOL_PREFIX};
    let Ok(rd) = std::fs::read_dir(root.join(DIR_NAME)) else {
        return Vec::new();
    };
    let mut out: Vec<(String, bool)> = rd
        .flatten()
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .starts_with(POOL_PREFIX.as_bytes())
        })
        .map(|e| {
            let removed = repair && std::fs::remove_file(e.path()).is_ok();
            (format!("{DIR_NAME}/{}", e.file_name().to_string_lossy()), removed)
        })
        .collect();
    out.sort();
    out
}
