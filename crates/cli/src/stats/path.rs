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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use serde_json::json;
use squeezefs_codec::CodecSpec;
use squeezefs_container::encode::Policy;
use squeezefs_container::pack::audit::{check_pack, LiveMap, GARBAGE_MAX};
use squeezefs_container::pack::dir::DIR_NAME as PACK_DIR;
use squeezefs_container::pack::{FsPackDir, Packs};
use squeezefs_container::predict;
use squeezefs_container::usage::{usage, Kind, Part, Usage};
use squeezefs_container::FileStorage;
use squeezefs_fs::rules::Rules;

use crate::ui::human;

#[derive(Default)]
pub struct Totals {
    pub files: u64,
    pub containers: u64,
    pub plain: u64,
    pub inline: u64,
    /// Packed files (their location record is current), empty ones included.
    pub packed: u64,
    /// Rows by type label (`zstd:3`, `none`, `inline`, `plain`, `packed zstd:1`).
    pub rows: BTreeMap<String, Part>,
    /// Allocated bytes not in current extents: superblocks and leftover copies; for a whole
    /// backing directory also the bytes of its packs that no packed row accounts for (pack
    /// headers, garbage).
    pub overhead: u64,
    /// Of which copies left by interrupted writes (`check --repair` removes them).
    pub leftover: u64,
    /// What the current extent copies of containers take (the base of the slack's share).
    pub in_extents: u64,
    /// Allocated bytes of the directories walked (each PATH that is one, and those below):
    /// in the total, as `du` counts them, so `du` through the mount and `stats` agree.
    pub directories: u64,
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
    /// The packs of the backing directories the scan covered whole or found packed files of.
    pub packs: Option<PackTotals>,
    /// With `--by rule`: the files grouped by the rule that applies to their names.
    pub by_rule: Option<Vec<RuleGroup>>,
    pub errors: Vec<String>,
}

/// The files one compression rule applies to (`stats --by rule`).
#[derive(Default)]
pub struct RuleGroup {
    /// The rule's canonical text; `None`: the files no rule matches.
    pub rule: Option<String>,
    /// Where it comes from, each place once (`rule 2 of /mnt/data`, `rule 1 of the mount's
    /// rules=`): equal rules of several directories (inherited ones) are one group.
    pub from: BTreeSet<String>,
    /// Where it is first shown: the mount's after directories', then by directory and
    /// position.
    order: Option<(bool, PathBuf, usize)>,
    /// Its files alone (no directories, no packs' own bytes).
    pub totals: Totals,
}

/// Where the files of one PATH are, for `--by rule`: the mount it was given on, and that
/// mount's `rules=`.
struct Place {
    mount: Option<(PathBuf, PathBuf)>,
    rules: Option<Arc<Rules>>,
}

impl Place {
    fn new(loc: &crate::locate::Located) -> Place {
        let rules = loc
            .mount
            .as_ref()
            .and_then(|m| crate::statsfile::read(m).ok())
            .and_then(|doc| crate::rules::mount_rules(&doc));
        Place {
            mount: loc.mount.clone().zip(loc.root.clone()),
            rules,
        }
    }

    /// A backing directory as the user knows it: its path on the mount, if given on one.
    fn shown(&self, backing: &Path) -> PathBuf {
        match &self.mount {
            Some((mount, root)) => match backing.strip_prefix(root) {
                Ok(rel) if rel.as_os_str().is_empty() => mount.clone(),
                Ok(rel) => mount.join(rel),
                Err(_) => backing.to_path_buf(),
            },
            None => backing.to_path_buf(),
        }
    }
}

/// Groups files by their rule, reading each directory's rules once.
struct ByRule {
    lookup: crate::rules::Lookup,
    groups: BTreeMap<Option<String>, RuleGroup>,
}

impl ByRule {
    /// Adds the file `backing` (of `place`), counted as [`Totals::add`] counts it.
    fn add(&mut self, backing: &Path, place: &Place, u: &Usage, allocated: u64) {
        let dir = backing.parent().unwrap_or(Path::new("/"));
        let name = backing.file_name().map(|n| n.as_bytes()).unwrap_or_default();
        let applies = self.lookup.rule(dir, name, place.rules.as_ref());
        let key = applies.as_ref().map(|a| a.rule.to_string());
        let g = self.groups.entry(key.clone()).or_default();
        g.rule = key;
        if let Some(a) = applies {
            let shown = place.shown(dir);
            g.from.insert(a.source(&shown));
            let order = (
                a.from_mount,
                if a.from_mount { PathBuf::new() } else { shown },
                a.index,
            );
            if g.order.as_ref().is_none_or(|o| order < *o) {
                g.order = Some(order);
            }
        }
        g.totals.add(u, allocated);
    }

    /// The groups, rules first (in the order they are shown), then the files no rule
    /// matches.
    fn finish(self) -> Vec<RuleGroup> {
        let mut v: Vec<RuleGroup> = self.groups.into_values().collect();
        v.sort_by(|a, b| (a.rule.is_none(), &a.order).cmp(&(b.rule.is_none(), &b.order)));
        v
    }
}

/// The packs of one or more backing directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackTotals {
    pub count: u64,
    /// Length of the pack files, and what they occupy in the backing filesystem.
    pub bytes: u64,
    pub disk: u64,
    /// Files of the scan whose bytes are in them.
    pub files: u64,
    /// Stored bytes no live file uses (`check_pack`'s garbage), measured only when the scan
    /// read every record of the backing directory; otherwise why not.
    pub garbage: Result<u64, String>,
    /// Every one was walked whole: their bytes are in the totals.
    pub whole: bool,
    /// Files whose bytes another file's record names too (stored once), their logical
    /// bytes, and the stored bytes that saves.
    pub shared_files: u64,
    pub shared_bytes: u64,
    pub shared_saved: u64,
}

impl Default for PackTotals {
    fn default() -> PackTotals {
        PackTotals {
            count: 0,
            bytes: 0,
            disk: 0,
            files: 0,
            garbage: Ok(0),
            whole: true,
            shared_files: 0,
            shared_bytes: 0,
            shared_saved: 0,
        }
    }
}

impl Totals {
    /// Adds one file that occupies `allocated` bytes in the backing filesystem.
    fn add(&mut self, u: &Usage, allocated: u64) {
        self.files += 1;
        self.referenced += u.size;
        for id in &u.dicts {
            *self.dict_users.entry(*id).or_default() += 1;
        }
        if u.packed.is_some() {
            self.packed += 1;
            self.damaged_extents += u.damaged_extents;
            for (k, p) in &u.parts {
                self.rows.entry(k.label()).or_default().add(p);
            }
            // Its bytes are in a pack (its row's disk is its share of its block); its backing
            // file holds none, unless a crash left there the bytes the record replaced.
            self.overhead += allocated;
            self.leftover += u.leftover.min(allocated);
            return;
        }
        if u.plain {
            self.plain += 1;
            self.rows.entry("plain".into()).or_default().add(&Part {
                extents: 0,
                disk: allocated,
                uncompressed: u.size,
                slack: 0,
            });
            return;
        }
        self.containers += 1;
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
            if matches!(k.without_dict(), Kind::Extent(..)) {
                self.in_extents += p.disk;
            }
            self.rows.entry(k.label()).or_default().add(&p);
        }
        // Superblocks, and copies left by interrupted writes.
        self.overhead += allocated.saturating_sub(in_extents);
    }

    /// Logical bytes of the files that use a dictionary (only known with `--dict-gain`).
    pub fn dict_uncompressed(&self) -> u64 {
        self.dict_referenced
    }

    /// Bytes lost to rounding extent copies up to whole blocks.
    pub fn slack(&self) -> u64 {
        self.rows.values().map(|p| p.slack).sum()
    }

    pub fn disk(&self) -> u64 {
        self.rows.values().map(|p| p.disk).sum::<u64>() + self.overhead + self.directories
    }

    pub fn uncompressed(&self) -> u64 {
        self.rows.values().map(|p| p.uncompressed).sum()
    }

    pub fn extents(&self) -> u64 {
        self.rows.values().map(|p| p.extents).sum()
    }
}

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

/// A backing directory whose packs the scan reads.
struct Root {
    path: PathBuf,
    packs: Packs,
    /// The scan walked it whole (a PATH is it, contains it, or is its mount's root).
    whole: bool,
    /// The current records the scan saw under it.
    live: LiveMap,
    /// Packed files seen under it, and their shares of their blocks.
    files: u64,
    shares: u64,
    /// Shares of files whose bytes another file names too (not in `shares`).
    shared_disk: u64,
}

/// Notes backing directory `path` (walked whole or not).
fn note_root(roots: &mut Vec<(PathBuf, bool)>, path: &Path, whole: bool) {
    match roots.iter_mut().find(|r| r.0 == path) {
        Some(r) => r.1 |= whole,
        None => roots.push((path.to_path_buf(), whole)),
    }
}

/// Counts the files under `paths` (each on a mount or in a backing directory). Every inode
/// is counted once however many names it has. `by_rule`: also grouped by the rule that
/// applies to each file's name ([`Totals::by_rule`]).
pub fn scan(paths: &[PathBuf], dict_gain: bool, by_rule: bool) -> Result<Totals, String> {
    let mut list = Vec::new();
    let mut seen = HashSet::new();
    let mut directories = 0u64;
    let mut found_roots: Vec<(PathBuf, bool)> = Vec::new();
    let mut places = Vec::new();
    for p in paths {
        let loc = crate::locate::locate(p)?;
        let place = places.len();
        if by_rule {
            places.push(Place::new(&loc));
            // Read offline while a daemon serves it: the mount's rules= is not known here.
            let served = || {
                loc.backing.ancestors().any(|a| {
                    squeezefs_fs::lock::probe(a).is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock)
                })
            };
            if loc.mount.is_none() && served() {
                eprintln!(
                    "note: {} is in the backing directory of a live mount: the mount's rules= is \
                     not known here (only directories' rules are); run stats --by rule on the mount \
                     for the rule each file gets",
                    p.display()
                );
            }
        }
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
            let (found, roots) = crate::walk::entries_and_packs(&loc.backing)?;
            // Backing directories in the tree: walked whole.
            for r in roots {
                note_root(&mut found_roots, &r, true);
            }
            found
        } else {
            vec![(loc.backing.clone(), md.clone())]
        };
        match &loc.root {
            Some(root) => note_root(&mut found_roots, root, md.is_dir() && loc.backing == *root),
            // Inside a backing directory: the nearest one above holds its packed files' packs.
            None => {
                if let Some(a) = loc
                    .backing
                    .ancestors()
                    .skip(1)
                    .find(|a| crate::walk::is_pack_dir(&a.join(PACK_DIR)))
                {
                    note_root(&mut found_roots, a, false);
                }
            }
        }
        if md.is_dir() && seen.insert((md.dev(), md.ino())) {
            directories += md.blocks() * 512;
        }
        for (_, m) in found.iter().filter(|(_, m)| m.is_dir()) {
            if seen.insert((m.dev(), m.ino())) {
                directories += m.blocks() * 512;
            }
        }
        found.retain(|(_, m)| m.is_file() && seen.insert((m.dev(), m.ino())));
        list.extend(found.into_iter().map(|(p, m)| (p, m.blocks() * 512, place)));
    }
    let mut roots = Vec::new();
    for (path, whole) in found_roots {
        // Read-only, no cache of decoded blocks: only block headers are read.
        let packs = Packs::new(Box::new(FsPackDir::new(&path, false)), false, 0)
            .map_err(|e| format!("{}: {e}", FsPackDir::new(&path, false).path().display()))?;
        roots.push(Root {
            path,
            packs,
            whole,
            live: LiveMap::default(),
            files: 0,
            shares: 0,
            shared_disk: 0,
        });
    }
    // A file's packs are its backing directory's: the nearest root above it.
    let root_of = |path: &Path| {
        roots
            .iter()
            .enumerate()
            .filter(|(_, r)| path.starts_with(&r.path))
            .max_by_key(|(_, r)| r.path.components().count())
            .map(|(i, _)| i)
    };
    type Counted = (Usage, u64, Option<(u64, u64)>);
    // (A file, its place, its root, and what it holds.)
    type Scanned<'a> = (&'a Path, usize, Option<usize>, Result<Counted, String>);
    let results: Vec<Scanned> = list
        .par_iter()
        .map(|(path, blocks, place)| {
            let root = root_of(path);
            let r = (|| {
                let f = squeezefs_container::open_as_owner(path, false)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let packs = root.map(|i| &roots[i].packs);
                let u = usage(&FileStorage::new(f), packs).map_err(|e| format!("{}: {e}", path.display()))?;
                let gain = if dict_gain && u.parts.keys().any(|k| k.uses_dict()) {
                    Some(gain(
                        path,
                        u.codec.unwrap_or(squeezefs_codec::CodecSpec::DEFAULT),
                    )?)
                } else {
                    None
                };
                Ok((u, *blocks, gain))
            })();
            (path.as_path(), *place, root, r)
        })
        .collect();
    let mut t = Totals {
        directories,
        ..Totals::default()
    };
    let mut groups = by_rule.then(|| ByRule {
        lookup: crate::rules::Lookup::default(),
        groups: BTreeMap::new(),
    });
    for (path, place, root, r) in results {
        match r {
            Ok((mut u, blocks, gain)) => {
                if let Some(loc) = &u.packed {
                    match root {
                        Some(i) => {
                            let r = &mut roots[i];
                            let share: u64 = u.parts.values().map(|p| p.disk).sum();
                            r.files += 1;
                            if r.live.add(loc) {
                                r.shares += share;
                            } else {
                                // Its bytes are another file's too (the background pass
                                // stores equal contents once): counted once, there.
                                r.shared_disk += share;
                                for p in u.parts.values_mut() {
                                    p.disk = 0;
                                }
                            }
                        }
                        None => t.errors.push(format!(
                            "{}: a packed file, but no pack directory ({PACK_DIR}) was found above it",
                            path.display()
                        )),
                    }
                }
                t.add(&u, blocks);
                if let Some(g) = &mut groups {
                    g.add(path, &places[place], &u, blocks);
                }
                if let Some((w, wo)) = gain {
                    let g = t.dict_gain.get_or_insert((0, 0));
                    g.0 += w;
                    g.1 += wo;
                }
            }
            Err(e) => {
                // Its record, if any, is unknown: no pack byte is known to be garbage.
                if let Some(i) = root {
                    roots[i].live.mark_incomplete();
                }
                t.errors.push(e);
            }
        }
    }
    if dict_gain && t.dict_gain.is_none() {
        t.dict_gain = Some((0, 0));
    }
    t.by_rule = groups.map(ByRule::finish);
    for r in &roots {
        if !r.whole && r.files == 0 {
            continue;
        }
        let pt = add_packs(&mut t, r);
        if pt.count == 0 && pt.files == 0 {
            continue;
        }
        let all = t.packs.get_or_insert_with(PackTotals::default);
        all.count += pt.count;
        all.bytes += pt.bytes;
        all.disk += pt.disk;
        all.files += pt.files;
        all.whole &= pt.whole;
        all.shared_files += pt.shared_files;
        all.shared_bytes += pt.shared_bytes;
        all.shared_saved += pt.shared_saved;
        all.garbage = match (&all.garbage, pt.garbage) {
            (Ok(a), Ok(b)) => Ok(a + b),
            (Err(e), _) => Err(e.clone()),
            (_, Err(e)) => Err(e),
        };
    }
    Ok(t)
}

/// Accounts the packs of one backing directory: their size, and for one walked whole, their
/// garbage and their bytes in the totals.
fn add_packs(t: &mut Totals, r: &Root) -> PackTotals {
    let mut pt = PackTotals {
        files: r.files,
        whole: r.whole,
        shared_files: r.live.shared().files,
        shared_bytes: r.live.shared().bytes,
        shared_saved: r.shared_disk,
        garbage: if !r.whole {
            Err(format!(
                "measured only for a whole backing directory ({} or the root of its mount)",
                r.path.display()
            ))
        } else if !r.live.complete() {
            Err("not measured: some files could not be read (their records are unknown)".into())
        } else {
            Ok(0)
        },
        ..PackTotals::default()
    };
    let ids = match r.packs.dir().list() {
        Ok(ids) => ids,
        Err(e) => {
            t.errors.push(format!(
                "{}: {e}",
                FsPackDir::new(&r.path, false).path().display()
            ));
            pt.garbage = Err("not measured: the packs could not be listed".into());
            return pt;
        }
    };
    for id in ids {
        let md = match std::fs::metadata(r.packs.describe(id)) {
            Ok(m) => m,
            Err(e) => {
                t.errors.push(format!("{}: {e}", r.packs.describe(id)));
                continue;
            }
        };
        pt.count += 1;
        pt.bytes += md.len();
        pt.disk += md.blocks() * 512;
        if let Ok(g) = &mut pt.garbage {
            // Headers only: every block's stored bytes against the live bytes in it.
            match check_pack(&r.packs, id, &r.live, false) {
                Ok(rep) => *g += rep.garbage,
                Err(e) => {
                    t.errors.push(format!("{}: {e}", r.packs.describe(id)));
                    pt.garbage = Err(format!(
                        "not measured: {} could not be read",
                        r.packs.describe(id)
                    ));
                }
            }
        }
    }
    if r.whole {
        // The walk skips `.squeezefs-packs`, so a whole backing directory's packs are added
        // here: Disk Usage is then all the directory occupies. The packed rows already hold
        // the files' shares of their blocks; the rest of the packs (pack headers, garbage,
        // rounding, allocation) is overhead, like superblocks.
        t.overhead += pt.disk.saturating_sub(r.shares);
    }
    pt
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
fn ratio(referenced: u64, disk: u64) -> Option<f64> {
    (disk > 0).then(|| referenced as f64 / disk as f64)
}

/// Disk of the totals no group holds: the directories, and the packs' own bytes (headers,
/// garbage) of a whole backing directory.
fn unattributed(t: &Totals, groups: &[RuleGroup]) -> u64 {
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

/// What one container (a backing file) would take on disk written now with `codec` (the
/// one its superblock names) with its dictionary and without it: its content read back,
/// encoded both ways as the filesystem would (`container::predict`). For `squeezefs stats
/// --dict-gain`.
fn gain(backing: &Path, codec: CodecSpec) -> Result<(u64, u64), String> {
    use squeezefs_container::{Container, Options};
    let f = squeezefs_container::open_as_owner(backing, false)
        .map_err(|e| format!("{}: {e}", backing.display()))?;
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
