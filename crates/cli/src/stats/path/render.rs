//! The table `squeezefs stats PATH…` prints (compsize's, with squeezefs' rows: packs,
//! slack, leftovers, damage, dictionaries) and its `--by rule` section.

use squeezefs_container::pack::audit::GARBAGE_MAX;

use super::{RuleGroup, Totals};
use crate::ui::human;

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn pct(disk: u64, unc: u64) -> String {
    if unc == 0 {
        "-".into()
    } else {
        format!("{}%", (disk as f64 * 100.0 / unc as f64).round() as u64)
    }
}

pub fn render(t: &Totals, secs: f64) -> String {
    let packed = if t.packed > 0 {
        format!(", {} packed", t.packed)
    } else {
        String::new()
    };
    let mut o = format!(
        "Processed {} files ({} containers, {} plain{packed}), {} extents, {} inline, in {:.2} s ({:.0} files/s).\n",
        t.files,
        t.containers,
        t.plain,
        t.extents(),
        t.inline,
        secs,
        t.files as f64 / secs.max(1e-9)
    );
    // `packed zstd-fast:5` is wider than the usual 14.
    let w = t.rows.keys().map(|l| l.len()).max().unwrap_or(0).max(14);
    o += &format!(
        "{:<w$} {:>5} {:>12} {:>12} {:>12}\n",
        "Type", "Perc", "Disk Usage", "Uncompressed", "Referenced"
    );
    o += &format!(
        "{:<w$} {:>5} {:>12} {:>12} {:>12}\n",
        "TOTAL",
        pct(t.disk(), t.uncompressed()),
        human(t.disk()),
        human(t.uncompressed()),
        human(t.referenced)
    );
    o += &type_rows(t, w, "");
    if t.slack() > 0 {
        o += &format!(
            "Slack: {} of the extents' {} is rounding to 4 KiB blocks ({:.1} %)\n",
            human(t.slack()),
            human(t.in_extents),
            t.slack() as f64 * 100.0 / t.in_extents.max(1) as f64
        );
    }
    if t.directories > 0 {
        o += &format!("{:<w$} {:>5} {:>12}\n", "(directories)", "", human(t.directories));
    }
    if t.shared > 0 {
        o += &format!(
            "Shared extents: {} of these files' extents are blocks the backing shares with another \
             of them (copies, dedupe), counted once: not in Disk Usage again.\n",
            human(t.shared)
        );
    }
    if let Some(p) = &t.packs {
        o += &format!(
            "Packs: {} holding {} of these files: {} ({} on disk{}); ",
            plural(p.count, "pack"),
            p.files,
            human(p.bytes),
            human(p.disk),
            if p.whole {
                ", in the totals"
            } else {
                ", not in the totals"
            }
        );
        match &p.garbage {
            Ok(g) => {
                o += &format!("garbage {} ({})", human(*g), pct(*g, p.bytes));
                if *g as f64 > p.bytes as f64 * GARBAGE_MAX {
                    o += &format!(
                        ": `squeezefs check --repair` reclaims packs above {:.0} % garbage (not mounted)",
                        GARBAGE_MAX * 100.0
                    );
                }
                o += ".\n";
            }
            Err(why) => o += &format!("garbage {why}.\n"),
        }
        if p.shared_files > 0 {
            o += &format!(
                "Shared: {} whose contents another file has too, stored once: {} of files, {} on disk saved.\n",
                plural(p.shared_files, "file"),
                human(p.shared_bytes),
                human(p.shared_saved)
            );
        }
    }
    if t.leftover > 0 {
        o += &format!(
            "{} of it left by interrupted writes: `squeezefs check --repair` removes it (not mounted)\n",
            human(t.leftover)
        );
    }
    if t.damaged_extents > 0 {
        o += &format!(
            "{} extents have damaged headers: run `squeezefs check` on the backing directory\n",
            t.damaged_extents
        );
    }
    match t.dict_gain {
        Some((with, without)) if t.dict_files > 0 => {
            o += &format!(
                "Dictionary gain: the {} files using a dictionary take {} written with it, {} without \
                 (saves {}, ratio {:.2} → {:.2}).\n",
                t.dict_files,
                human(with),
                human(without),
                human(without.saturating_sub(with)),
                t.dict_uncompressed() as f64 / without.max(1) as f64,
                t.dict_uncompressed() as f64 / with.max(1) as f64,
            );
        }
        None if t.dict_files > 0 => {
            o += &format!(
                "{} files use a dictionary (+dict rows): `--dict-gain` measures what it saves \
                 (reads and re-encodes those files).\n",
                t.dict_files
            );
        }
        _ => {}
    }
    if let Some(groups) = &t.by_rule {
        o += &render_by_rule(t, groups, w);
    }
    o
}

/// The rows by stored type, and `(metadata)`: `indent`, then columns as in the table.
fn type_rows(t: &Totals, w: usize, indent: &str) -> String {
    let mut o = String::new();
    for (label, p) in &t.rows {
        o += &format!(
            "{indent}{:<w$} {:>5} {:>12} {:>12}\n",
            label,
            pct(p.disk, p.uncompressed),
            human(p.disk),
            human(p.uncompressed)
        );
    }
    if t.overhead > 0 {
        o += &format!(
            "{indent}{:<w$} {:>5} {:>12}\n",
            "(metadata)",
            "",
            human(t.overhead)
        );
    }
    o
}

/// Logical bytes per byte on disk (`None`: nothing on disk).
pub(super) fn ratio(referenced: u64, disk: u64) -> Option<f64> {
    (disk > 0).then(|| referenced as f64 / disk as f64)
}

/// Disk of the totals no group holds: the directories, and the packs' own bytes (headers,
/// garbage) of a whole backing directory.
pub(super) fn unattributed(t: &Totals, groups: &[RuleGroup]) -> u64 {
    t.disk()
        .saturating_sub(groups.iter().map(|g| g.totals.disk()).sum::<u64>())
}

/// `--by rule`: each rule, where it comes from, its files and their rows by stored type.
fn render_by_rule(t: &Totals, groups: &[RuleGroup], w: usize) -> String {
    let mut o =
        "\nBy rule (the rule for each file's name now: its directory's rules, else the mount's rules=):\n"
            .to_string();
    for g in groups {
        let from = match g.from.len() {
            0 => String::new(),
            1 => format!("  ({})", g.from.first().expect("one")),
            n => format!(
                "  ({}, and {} more)",
                g.from.first().expect("some"),
                plural(n as u64 - 1, "place")
            ),
        };
        let gt = &g.totals;
        o += &format!("{}{from}\n", g.rule.as_deref().unwrap_or("(no rule)"));
        o += &format!(
            "    {}, {} referenced, {} on disk, ratio {}\n",
            plural(gt.files, "file"),
            human(gt.referenced),
            human(gt.disk()),
            ratio(gt.referenced, gt.disk()).map_or("-".into(), |r| format!("{r:.2}"))
        );
        o += &type_rows(gt, w, "    ");
    }
    let rest = unattributed(t, groups);
    if rest > 0 {
        o += &format!("(directories and packs' own bytes: {})\n", human(rest));
    }
    o
}
