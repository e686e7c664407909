//! The scan: each PATH located and walked (every inode once), each file's usage read from
//! its headers in parallel, packed files' shares and records noted against their backing
//! directory's packs (`Root`), and those packs accounted (`add_packs`).

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use squeezefs_container::pack::audit::{check_pack, LiveMap};
use squeezefs_container::pack::dir::DIR_NAME as PACK_DIR;
use squeezefs_container::pack::{FsPackDir, Packs};
use squeezefs_container::usage::{shared_blocks, usage, Kind, Usage};
use squeezefs_container::FileStorage;

use super::by_rule::{ByRule, Place};
use super::gain::gain;
use super::shared::Claimed;
use super::{PackTotals, Totals};

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
        list.extend(
            found
                .into_iter()
                .map(|(p, m)| (p, m.blocks() * 512, m.dev(), place)),
        );
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
    // (What a file holds, its allocated bytes, its `--dict-gain`, and the blocks of its
    // extents the backing shares with other files, or why they are not known.)
    type Counted = (
        Usage,
        u64,
        Option<(u64, u64)>,
        Result<Vec<(Kind, u64, u64)>, String>,
    );
    // (A file, its device, its place, its root, and what it holds.)
    type Scanned<'a> = (&'a Path, u64, usize, Option<usize>, Result<Counted, String>);
    let results: Vec<Scanned> = list
        .par_iter()
        .map(|(path, blocks, dev, place)| {
            let root = root_of(path);
            let r = (|| {
                let f = squeezefs_container::open_as_owner(path, false)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let packs = root.map(|i| &roots[i].packs);
                let st = FileStorage::new(f);
                let mut u = usage(&st, packs).map_err(|e| format!("{}: {e}", path.display()))?;
                let copies = std::mem::take(&mut u.copies);
                let shared = shared_blocks(st.file(), &copies).map_err(|e| {
                    format!(
                        "{}: which blocks it shares with other files is unknown (FIEMAP: {e}); its blocks are counted as its own",
                        path.display()
                    )
                });
                let gain = if dict_gain && u.parts.keys().any(|k| k.uses_dict()) {
                    Some(gain(
                        path,
                        u.codec.unwrap_or(squeezefs_codec::CodecSpec::DEFAULT),
                    )?)
                } else {
                    None
                };
                Ok((u, *blocks, gain, shared))
            })();
            (path.as_path(), *dev, *place, root, r)
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
    let mut claimed = Claimed::default();
    for (path, dev, place, root, r) in results {
        match r {
            Ok((mut u, mut blocks, gain, shared)) => {
                match shared {
                    Ok(shared) => {
                        // Blocks a file counted before names too: counted there, not here.
                        let again = claimed.count_once(dev, &shared, &mut u);
                        blocks = blocks.saturating_sub(again);
                        t.shared += again;
                    }
                    // Still counted, as its own: a warning, not a failure of the scan.
                    Err(e) => eprintln!("warning: {e}"),
                }
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
