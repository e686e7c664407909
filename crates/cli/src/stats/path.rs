//! `squeezefs stats PATH…`: compsize for squeezefs. How much disk the files under each PATH
//! take and what they hold, per codec and level, from container headers only (no daemon
//! needed: PATH may be on a mount or in a backing directory).

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde_json::json;
use squeezefs_codec::CodecSpec;
use squeezefs_container::encode::Policy;
use squeezefs_container::predict;
use squeezefs_container::usage::{usage, Kind, Part, Usage};
use squeezefs_container::FileStorage;

use crate::ui::human;

#[derive(Default)]
pub struct Totals {
    pub files: u64,
    pub containers: u64,
    pub plain: u64,
    pub inline: u64,
    /// Rows by type label (`zstd:3`, `none`, `inline`, `plain`).
    pub rows: BTreeMap<String, Part>,
    /// Allocated bytes not in current extents: superblocks and leftover copies.
    pub overhead: u64,
    /// Of which copies left by interrupted writes (`check --repair` removes them).
    pub leftover: u64,
    pub referenced: u64,
    pub damaged_extents: u64,
    /// Files with extents or inline data compressed with a dictionary.
    pub dict_files: u64,
    /// Their logical size.
    pub dict_referenced: u64,
    /// Files that need or use each dictionary (payloads naming it, or the property).
    pub dict_users: BTreeMap<u32, u64>,
    /// With `--dict-gain`: what those files take written with their dictionary, and without.
    pub dict_gain: Option<(u64, u64)>,
    pub errors: Vec<String>,
}

impl Totals {
    /// Adds one file that occupies `allocated` bytes in the backing filesystem.
    fn add(&mut self, u: &Usage, allocated: u64) {
        self.files += 1;
        self.referenced += u.size;
        if u.plain {
            self.plain += 1;
            self.rows.entry("plain".into()).or_default().add(&Part {
                extents: 0,
                disk: allocated,
                uncompressed: u.size,
            });
            return;
        }
        self.containers += 1;
        for id in &u.dicts {
            *self.dict_users.entry(*id).or_default() += 1;
        }
        if u.parts.keys().any(|k| k.uses_dict()) {
            self.dict_files += 1;
            self.dict_referenced += u.size;
        }
        self.leftover += u.leftover;
        self.damaged_extents += u.damaged_extents;
        let mut in_extents = 0;
        for (k, p) in &u.parts {
            let mut p = *p;
            if k.without_dict() == Kind::Inline {
                // The whole file is its superblock.
                self.inline += 1;
                p.disk = allocated;
            }
            in_extents += p.disk;
            self.rows.entry(k.label()).or_default().add(&p);
        }
        // Superblocks, and copies left by interrupted writes.
        self.overhead += allocated.saturating_sub(in_extents);
    }

    /// Logical bytes of the files that use a dictionary (only known with `--dict-gain`).
    pub fn dict_uncompressed(&self) -> u64 {
        self.dict_referenced
    }

    pub fn disk(&self) -> u64 {
        self.rows.values().map(|p| p.disk).sum::<u64>() + self.overhead
    }

    pub fn uncompressed(&self) -> u64 {
        self.rows.values().map(|p| p.uncompressed).sum()
    }

    pub fn extents(&self) -> u64 {
        self.rows.values().map(|p| p.extents).sum()
    }
}

fn pct(disk: u64, unc: u64) -> String {
    if unc == 0 {
        "-".into()
    } else {
        format!("{}%", (disk as f64 * 100.0 / unc as f64).round() as u64)
    }
}

/// Counts the files under `paths` (each on a mount or in a backing directory). Every inode
/// is counted once however many names it has.
pub fn scan(paths: &[PathBuf], dict_gain: bool) -> Result<Totals, String> {
    let mut list = Vec::new();
    let mut seen = HashSet::new();
    for p in paths {
        let loc = crate::locate::locate(p)?;
        if dict_gain {
            // Reading payloads back needs the dictionaries (also on a mount: this reads
            // the backing files, not the mount).
            for why in crate::dictdir::load_near(&loc) {
                eprintln!("warning: {why}");
            }
        }
        let md = std::fs::symlink_metadata(&loc.backing).map_err(|e| {
            format!(
                "{}: {e} (its backing file is {})",
                p.display(),
                loc.backing.display()
            )
        })?;
        let mut found = if md.is_dir() {
            crate::walk::entries(&loc.backing)?
        } else {
            vec![(loc.backing.clone(), md)]
        };
        found.retain(|(_, m)| m.is_file() && seen.insert((m.dev(), m.ino())));
        list.extend(found.into_iter().map(|(p, m)| (p, m.blocks() * 512)));
    }
    type Counted = (Usage, u64, Option<(u64, u64)>);
    let results: Vec<Result<Counted, String>> = list
        .par_iter()
        .map(|(path, blocks)| {
            let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let u = usage(&FileStorage::new(f)).map_err(|e| format!("{}: {e}", path.display()))?;
            let gain = if dict_gain && u.parts.keys().any(|k| k.uses_dict()) {
                Some(gain(
                    path,
                    u.codec.unwrap_or(squeezefs_codec::CodecSpec::DEFAULT),
                )?)
            } else {
                None
            };
            Ok((u, *blocks, gain))
        })
        .collect();
    let mut t = Totals::default();
    for r in results {
        match r {
            Ok((u, blocks, gain)) => {
                t.add(&u, blocks);
                if let Some((w, wo)) = gain {
                    let g = t.dict_gain.get_or_insert((0, 0));
                    g.0 += w;
                    g.1 += wo;
                }
            }
            Err(e) => t.errors.push(e),
        }
    }
    if dict_gain && t.dict_gain.is_none() {
        t.dict_gain = Some((0, 0));
    }
    Ok(t)
}

pub fn render(t: &Totals, secs: f64) -> String {
    let mut o = format!(
        "Processed {} files ({} containers, {} plain), {} extents, {} inline, in {:.2} s ({:.0} files/s).\n",
        t.files,
        t.containers,
        t.plain,
        t.extents(),
        t.inline,
        secs,
        t.files as f64 / secs.max(1e-9)
    );
    o += &format!(
        "{:<14} {:>5} {:>12} {:>12} {:>12}\n",
        "Type", "Perc", "Disk Usage", "Uncompressed", "Referenced"
    );
    o += &format!(
        "{:<14} {:>5} {:>12} {:>12} {:>12}\n",
        "TOTAL",
        pct(t.disk(), t.uncompressed()),
        human(t.disk()),
        human(t.uncompressed()),
        human(t.referenced)
    );
    for (label, p) in &t.rows {
        o += &format!(
            "{:<14} {:>5} {:>12} {:>12}\n",
            label,
            pct(p.disk, p.uncompressed),
            human(p.disk),
            human(p.uncompressed)
        );
    }
    if t.overhead > 0 {
        o += &format!("{:<14} {:>5} {:>12}\n", "(metadata)", "", human(t.overhead));
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
    o
}

pub fn to_json(t: &Totals, secs: f64) -> serde_json::Value {
    let rows: Vec<_> = t
        .rows
        .iter()
        .map(|(label, p)| {
            json!({"type": label, "extents": p.extents, "disk": p.disk, "uncompressed": p.uncompressed})
        })
        .collect();
    json!({
        "files": t.files,
        "containers": t.containers,
        "plain": t.plain,
        "inline": t.inline,
        "extents": t.extents(),
        "disk": t.disk(),
        "uncompressed": t.uncompressed(),
        "referenced": t.referenced,
        "metadata": t.overhead,
        "leftover": t.leftover,
        "damaged_extents": t.damaged_extents,
        "dict_files": t.dict_files,
        "dict_gain": t.dict_gain.map(|(with, without)| json!({
            "disk_with": with, "disk_without": without, "uncompressed": t.dict_uncompressed(),
        })),
        "types": rows,
        "errors": t.errors,
        "seconds": secs,
    })
}

/// What one container (a backing file) would take on disk written now with `codec` (the
/// one its superblock names) with its dictionary and without it: its content read back,
/// encoded both ways as the filesystem would (`container::predict`). For `squeezefs stats
/// --dict-gain`.
fn gain(backing: &Path, codec: CodecSpec) -> Result<(u64, u64), String> {
    use squeezefs_container::{Container, Options};
    let f = std::fs::File::open(backing).map_err(|e| format!("{}: {e}", backing.display()))?;
    let mut c = Container::open(FileStorage::new(f), &Options::default())
        .map_err(|e| format!("{}: {e}", backing.display()))?;
    let Some(extent) = c.extent_size() else {
        return Ok((0, 0));
    };
    let shift = extent.trailing_zeros() as u8;
    let size = c.size().map_err(|e| e.to_string())?;
    let dict = c.dictionary_property();
    let (mut with, mut without) = (0, 0);
    let mut off = 0;
    while off < size {
        let data = c
            .read(off, extent as usize)
            .map_err(|e| format!("{}: {e}", backing.display()))?;
        let idx = off >> shift;
        let policy = Policy::new(codec, false);
        without += predict::extent(policy, shift, size, idx, &data).disk;
        with += predict::extent(Policy { dict, ..policy }, shift, size, idx, &data).disk;
        off += extent;
    }
    Ok((with, without))
}

pub fn main(paths: &[PathBuf], dict_gain: bool, json: bool) -> Result<u8, String> {
    let start = Instant::now();
    let t = scan(paths, dict_gain)?;
    let secs = start.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&t, secs)).expect("json")
        );
    } else {
        print!("{}", render(&t, secs));
        for e in &t.errors {
            eprintln!("squeezefs stats: {e}");
        }
    }
    Ok(if t.errors.is_empty() { 0 } else { 1 })
}
