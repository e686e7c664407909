//! `squeezefs stats PATH…`: compsize for squeezefs. How much disk the files under each PATH
//! take and what they hold, per codec and level, from container headers only (no daemon
//! needed: PATH may be on a mount or in a backing directory).
//!
//! Packed files (format 4) are `packed CODEC` rows: their size, and their share of their
//! pack block (from the block's header). When a PATH is a whole backing directory (or
//! contains one, or is the root of its mount), its packs are accounted too: their bytes are
//! added to the totals (the walk skips `.squeezefs-packs`), and their garbage is measured
//! against the location records the walk saw.
//!
//! With `--by rule` the files are also grouped by the compression rule that applies to each
//! one's name now (`crate::rules`: its directory's `rules`, else the mount's `rules=`), so
//! a user sees what each rule stores and saves.
//!
//! One concept a file: `scan.rs` walks the PATHs and counts each file and each backing
//! directory's packs into `totals.rs` (`Totals`, `RuleGroup`, `PackTotals`); `by_rule.rs`
//! groups the files by rule, `gain.rs` measures `--dict-gain`; `render.rs` prints the
//! table and `json.rs` the `--json` document; `shared.rs` counts blocks the backing shares
//! between files once. This file is the command itself and its
//! line on the mount's background pass.

mod by_rule;
mod gain;
mod json;
mod render;
mod scan;
mod shared;
mod totals;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::ui::human;
pub use json::to_json;
pub use render::render;
pub use scan::scan;
pub use totals::{PackTotals, RuleGroup, Totals};

pub fn main(paths: &[PathBuf], dict_gain: bool, by_rule: bool, json: bool) -> Result<u8, String> {
    let start = Instant::now();
    let t = scan(paths, dict_gain, by_rule)?;
    let secs = start.elapsed().as_secs_f64();
    let background = paths.first().and_then(|p| background_of(p));
    if json {
        let mut doc = to_json(&t, secs);
        doc["background"] = background.unwrap_or_default();
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    } else {
        print!("{}", render(&t, secs));
        if let Some(b) = background
            .as_ref()
            .filter(|b| b["target"].is_string() || b["walks"].as_u64() > Some(0))
        {
            println!("{}", background_line(b));
        }
        for e in &t.errors {
            eprintln!("squeezefs stats: {e}");
        }
    }
    Ok(if t.errors.is_empty() { 0 } else { 1 })
}

/// The background pass of the mount `path` is on (`background` of its statistics file:
/// target, state, `pending_bytes`, …), when it is on one.
fn background_of(path: &Path) -> Option<serde_json::Value> {
    let mount = crate::locate::locate(path).ok()?.mount?;
    crate::statsfile::read(&mount).ok()?.get("background").cloned()
}

/// One line on the background pass: its target and what is left.
fn background_line(b: &serde_json::Value) -> String {
    let target = b["target"].as_str().unwrap_or("per directory");
    let pending = b["pending_bytes"].as_u64().unwrap_or(0);
    let state = b["state"].as_str().unwrap_or("?");
    let done = human(b["rewritten_bytes"].as_u64().unwrap_or(0));
    if pending == 0 {
        format!("Background: {target}; nothing pending ({done} rewritten since mount)")
    } else {
        format!(
            "Background: {target}; {} pending, {state} ({done} rewritten since mount; it runs while the mount is idle)",
            human(pending)
        )
    }
}
