//! `squeezefs compress PATH… [--codec C] [--extent-size S]`: rewrite files with another codec
//! or extent size, like `btrfs filesystem defragment -c`, and turn the plain files of an
//! adopted backing directory into containers.
//!
//! Two ways, each safe to interrupt (every file is left old or new, never mixed bytes):
//! * **In place** (a container keeping its extent size): each extent is rewritten into its
//!   other half, the old copy kept until the new one is durable ([`Container::rewrite`]).
//!   On a mount the daemon does it (the `user.squeezefs.rewrite` request), so no write can
//!   slip between reading an extent and rewriting it.
//! * **Copy and rename** (a plain file, or a new extent size): a new container is written
//!   beside the file, made durable, given the file's owner, mode, times and xattrs, and
//!   renamed over it. On a mount the copy goes through the mount, and the rename is skipped
//!   when the file changed meanwhile. Files with several hard links are left alone (a copy
//!   would split them).
//!
//! On a backing directory that is not mounted the files are handled directly; the command
//! refuses a directory a daemon serves (use the mount path instead).
//!
//! Without `--codec` and `--extent-size` (and unless `--no-rules`), each file whose name a
//! compression rule matches (`crate::rules`: its directory's `rules`, else the mount's
//! `rules=`; offline, only directories' rules are known) gets what that rule sets, as if it
//! were made now: the codec, extent size, dictionary and force it names become the file's own
//! properties and its data is rewritten with them; a file already stored so is skipped.

mod backing;
mod copy;
mod err;
mod job;
mod mounted;
mod offline;
mod props;
mod stage;

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde_json::json;
use squeezefs_codec::CodecSpec;

use crate::ui::{bytes_bar, human};
use backing::{not_served, offline_packs};
use copy::{rename_over, syncfs, temp_pid};
use err::err;
use job::{Asked, Done, Job, Packing};
use mounted::mounted;
use offline::offline;

pub struct Args {
    pub paths: Vec<PathBuf>,
    pub codec: Option<CodecSpec>,
    pub extent_shift: Option<u8>,
    /// Pack files of at most one extent: `--pack` (`Some(true)`: required), `--no-pack`
    /// (`Some(false)`), or neither (`None`: where packing is possible, as a mount does).
    pub pack: Option<bool>,
    /// Apply compression rules (not `--no-rules`; only without `--codec`/`--extent-size`).
    pub rules: bool,
    pub json: bool,
}

#[derive(Default)]
struct Summary {
    /// Files written by this run, by where they are stored now: in packs...
    packed: u64,
    /// ... or in containers of their own (`packed + containers = rewritten + converted`).
    containers: u64,
    /// Files written by this run, by how: recompressed in place...
    rewritten: u64,
    /// ... or copied (from plain files, or into another extent size).
    converted: u64,
    /// Pack bytes reclaimed at the end.
    reclaimed: u64,
    skipped: u64,
    left_alone: u64,
    failed: u64,
    /// Files that got the settings of the rule matching their name (rewritten or converted
    /// with properties it changed, or only given its properties: empty, or stored so).
    ruled: u64,
    /// Of those, files that had a property of their own (set by hand) that the rule's
    /// replaced with another value.
    replaced_own: u64,
    bytes: u64,
    disk_before: u64,
    disk_after: u64,
    /// Directories on a mount where copies were renamed (synced at the end).
    renamed_in: std::collections::BTreeSet<PathBuf>,
}

/// Files per batch of copies made durable together.
const BATCH: usize = 256;

type Outcome = (Result<Done, String>, u64);

/// Makes a batch durable (see `stage.rs`): open pack blocks written, one `syncfs` per
/// filesystem, staged files committed, a second `syncfs`. Returns the batch, with a staged
/// file whose commit failed turned into its error, and whether the syncs succeeded.
fn commit_batch(
    done: Vec<Outcome>,
    packs: &[std::sync::Arc<squeezefs_container::pack::Packs>],
    pack_dirs: &std::collections::BTreeSet<PathBuf>,
) -> (Vec<Outcome>, Result<(), String>) {
    let mut devices = std::collections::BTreeMap::new();
    let mut staged = false;
    for (r, _) in &done {
        let p = match r {
            Ok(Done::Copied(tmp, s)) => {
                staged |= s.is_some();
                tmp.clone()
            }
            Ok(Done::Staging(..)) => {
                staged = true;
                continue;
            }
            _ => continue,
        };
        if let Ok(m) = std::fs::metadata(&p) {
            devices.entry(m.dev()).or_insert(p);
        }
    }
    let mut marks = Vec::new();
    for p in packs {
        match p.seal_all() {
            Ok(m) => marks.push((p, m)),
            Err(e) => return (done, Err(format!("writing pack blocks: {e}"))),
        }
    }
    // The packs' filesystems are synced too (their backing roots hold the packed files).
    for d in pack_dirs.iter().filter_map(|d| d.parent()) {
        if let Ok(m) = std::fs::metadata(d) {
            devices.entry(m.dev()).or_insert(d.to_path_buf());
        }
    }
    let sync = || -> Result<(), String> { devices.values().try_for_each(|p| syncfs(p)) };
    if let Err(e) = sync() {
        return (done, Err(e));
    }
    for (p, m) in marks {
        p.synced(m);
    }
    if !staged {
        return (done, Ok(()));
    }
    let done: Vec<Outcome> = done
        .into_iter()
        .map(|(r, before)| {
            let r = match r {
                Ok(Done::Copied(tmp, Some(mut st))) => match st.commit() {
                    Ok(()) => Ok(Done::Copied(tmp, Some(st))),
                    Err(e) => {
                        let _ = std::fs::remove_file(&tmp);
                        Err(err(&tmp, e))
                    }
                },
                Ok(Done::Staging(mut st)) => st.commit().map(|()| Done::Staging(st)),
                r => r,
            };
            (r, before)
        })
        .collect();
    let synced = sync();
    (done, synced)
}

/// Bytes of the pack files in these pack directories (allocated, as `du` counts).
fn packs_size(dirs: &std::collections::BTreeSet<PathBuf>) -> u64 {
    dirs.iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

pub fn main(args: Args) -> Result<u8, String> {
    let start = Instant::now();
    let asked = Asked {
        codec: args.codec,
        extent_shift: args.extent_shift,
        dict: None,
        force: false,
        pack: args.pack != Some(false),
    };
    // Rules apply only when nothing is asked explicitly.
    let apply_rules = args.rules && args.codec.is_none() && args.extent_shift.is_none();
    let mut lookup = crate::rules::Lookup::default();
    // Files a rule matches (whether or not they had its settings already).
    let mut matched = 0u64;
    let mut jobs: Vec<(Job, bool)> = Vec::new();
    // Pack directories files may be packed into: their growth is disk the packed files take.
    let mut pack_dirs = std::collections::BTreeSet::new();
    // Backing directories handled whole (offline), with their packs.
    let mut whole = Vec::new();
    // Mounts that pack: a reclaim round is asked of each at the end.
    let mut packing_mounts = std::collections::BTreeSet::new();
    // Files already listed, across all PATHs (`compress /mnt/h1 /mnt/h2`: one inode once).
    let mut seen = std::collections::HashSet::new();
    for p in &args.paths {
        let loc = crate::locate::locate(p)?;
        // Backing files are read directly (also on a mount): those that used a dictionary
        // need it.
        for why in crate::dictdir::load_near(&loc) {
            eprintln!("warning: {why}");
        }
        let on_mount = loc.mount.is_some();
        let mut mount_rules = None;
        let mut default_shift = None;
        let (default_codec, packs) = match &loc.mount {
            Some(m) => {
                let doc = crate::statsfile::read(m)?;
                if args.pack == Some(true) && doc["packs"]["packing"].as_bool() != Some(true) {
                    return Err(format!(
                        "{}: this mount does not pack small files (mounted with -o nopack, or its \
                         backing filesystem cannot keep location records: see the mount's log): \
                         remount it without nopack, then run compress --pack again (without --pack, files are rewritten unpacked)",
                        m.display()
                    ));
                }
                let codec = doc["mount"]["compress"]
                    .as_str()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(CodecSpec::DEFAULT);
                mount_rules = crate::rules::mount_rules(&doc);
                default_shift = doc["mount"]["extent_size"]
                    .as_u64()
                    .filter(|b| b.is_power_of_two())
                    .map(|b| b.trailing_zeros() as u8);
                (
                    codec,
                    Packing::Mount(doc["packs"]["packing"].as_bool() == Some(true)),
                )
            }
            None => {
                not_served(&loc.backing)?;
                let found = offline_packs(&loc.backing, asked.pack, args.pack == Some(true))?;
                let (dir, packs) = found.unzip();
                if let (Some(d), Some(p)) = (&dir, &packs) {
                    // The whole backing directory: its garbage is reclaimed at the end.
                    if d.parent() == Some(loc.backing.as_path()) {
                        whole.push((loc.backing.clone(), p.clone()));
                    }
                }
                pack_dirs.extend(dir);
                (CodecSpec::DEFAULT, Packing::Offline(packs))
            }
        };
        if let (Packing::Mount(true), Some(root)) = (&packs, &loc.root) {
            pack_dirs.insert(root.join(squeezefs_container::pack::dir::DIR_NAME));
            packing_mounts.extend(loc.mount.clone());
        }
        let top = if on_mount {
            p.canonicalize().map_err(|e| err(p, e))?
        } else {
            loc.backing.clone()
        };
        let md = std::fs::symlink_metadata(&top).map_err(|e| err(&top, e))?;
        let found = if md.is_dir() {
            crate::walk::entries(&top)?
        } else {
            vec![(top.clone(), md)]
        };
        for (path, m) in found.into_iter().filter(|(_, m)| m.is_file()) {
            if !seen.insert((m.dev(), m.ino())) {
                continue; // another name of a file already listed
            }
            if let Some(pid) = path.file_name().and_then(|n| temp_pid(n.as_bytes())) {
                // A copy an interrupted run left behind (its original is intact).
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    match std::fs::remove_file(&path) {
                        Ok(()) => eprintln!(
                            "squeezefs compress: removed {}, left by an interrupted run",
                            path.display()
                        ),
                        Err(e) => eprintln!("squeezefs compress: {}: {e}", path.display()),
                    }
                }
                continue;
            }
            let rel = path.strip_prefix(&top).unwrap_or(Path::new(""));
            let backing = if rel.as_os_str().is_empty() {
                loc.backing.clone()
            } else {
                loc.backing.join(rel)
            };
            if path
                .file_name()
                .is_some_and(|n| n.as_bytes().ends_with(b".squeezefs-stats"))
            {
                continue;
            }
            // (Its directory as given: a mount's, through the mount; else the backing one.)
            let dir = path.parent().unwrap_or(Path::new("/"));
            let name = path.file_name().map(|n| n.as_bytes()).unwrap_or_default();
            let links = m.nlink();
            // Rules go by name: a file of several names could match several (and flip
            // between runs), so one with hard links is treated as matched by none.
            let by_name = apply_rules && links < 2;
            if apply_rules && !by_name && lookup.rule(dir, name, mount_rules.as_ref()).is_some() {
                eprintln!(
                    "squeezefs compress: {}: has {links} hard links; compression rules (which go by \
                     name) are not applied to it",
                    path.display()
                );
            }
            let applies = if by_name {
                lookup.rule(dir, name, mount_rules.as_ref())
            } else {
                None
            };
            let rule = applies.as_ref().map(|a| {
                let mut s = a.rule.settings;
                // A dictionary that cannot be loaded (not in the dictionary directory) is
                // left out, as the daemon does for a file made now.
                if let Some(id) = s.dict.filter(|id| squeezefs_codec::dict::get(*id).is_none()) {
                    eprintln!(
                        "warning: {}: dictionary {id} of its rule `{}` ({}) is not in the \
                         dictionary directory; left out (`squeezefs dict list` shows the dictionaries)",
                        path.display(),
                        a.rule,
                        a.source(dir)
                    );
                    s.dict = None;
                }
                s
            });
            matched += rule.is_some() as u64;
            // (Only when this run applies rules: `--codec` and `--extent-size` beat them.)
            let mut create = if on_mount {
                lookup.new_file(dir, name, mount_rules.as_ref(), by_name)
            } else {
                Default::default()
            };
            if create
                .dict
                .is_some_and(|id| squeezefs_codec::dict::get(id).is_none())
            {
                create.dict = None;
            }
            // (An empty backing file may be a packed file: its size is in its record.)
            let size = if m.len() == 0 && !on_mount {
                backing::packed_len(&backing)
            } else {
                m.len()
            };
            jobs.push((
                Job {
                    path,
                    backing,
                    size,
                    links,
                    default_codec,
                    default_shift,
                    packs: packs.clone(),
                    rule,
                    create,
                    changed: Default::default(),
                    replaced_own: Default::default(),
                },
                on_mount,
            ));
        }
    }
    // The packs offline files go to: their open blocks are written before each batch's sync.
    let mut packs_used: Vec<std::sync::Arc<squeezefs_container::pack::Packs>> = Vec::new();
    for (j, _) in &jobs {
        if let Packing::Offline(Some(p)) = &j.packs {
            if !packs_used.iter().any(|q| std::sync::Arc::ptr_eq(p, q)) {
                packs_used.push(p.clone());
            }
        }
    }
    let total: u64 = jobs.iter().map(|(j, _)| j.size).sum();
    let packs_before = packs_size(&pack_dirs);
    let pb = bytes_bar(total, "compress");
    // The ratio so far (logical bytes done / disk they now take), shown beside the file.
    let ratio_so_far = std::sync::Mutex::new(String::new());
    if args.json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let blocks = |p: &Path| {
        std::fs::symlink_metadata(p)
            .map(|m| m.blocks() * 512)
            .unwrap_or(0)
    };
    // Files in parallel (each one's own extents are compressed in parallel too), in
    // batches: the copies of a batch are made durable by one `syncfs` per filesystem, then
    // renamed over their files.
    let summary = std::sync::Mutex::new(Summary::default());
    for batch in jobs.chunks(BATCH) {
        let done: Vec<(Result<Done, String>, u64)> = batch
            .par_iter()
            .map(|(job, on_mount)| {
                pb.set_message(format!("{}{}", ratio_so_far.lock().unwrap(), job.path.display()));
                let disk_before = blocks(&job.backing);
                let asked = job.asked(&asked);
                let r = if job.size == 0 {
                    // Nothing to rewrite; on a mount an empty file still gets what is asked
                    // as its properties, so what is written to it later uses them.
                    if *on_mount {
                        job.note_own_mounted(&asked);
                        mounted::set_asked(&job.path, &asked).map(|set| {
                            if set {
                                Done::PropsSet
                            } else {
                                Done::Skipped
                            }
                        })
                    } else {
                        Ok(Done::Skipped)
                    }
                } else if *on_mount {
                    mounted(&asked, job, &pb)
                } else {
                    offline(&asked, job, &pb)
                };
                (r, disk_before)
            })
            .collect();
        let (done, synced) = commit_batch(done, &packs_used, &pack_dirs);
        let mut s = summary.lock().unwrap();
        for ((job, on_mount), (r, disk_before)) in batch.iter().zip(done) {
            let r = match (r, &synced) {
                (Ok(Done::Copied(tmp, staged)), Ok(())) => staged
                    .map_or(Ok(()), |st| st.finish())
                    .and_then(|()| rename_over(&tmp, &job.backing))
                    .map(|()| Done::Converted {
                        packed: backing::is_packed(&job.backing),
                    })
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&tmp);
                        err(&job.backing, e)
                    }),
                (Ok(Done::Copied(tmp, _)), Err(e)) => {
                    let _ = std::fs::remove_file(&tmp);
                    Err(e.clone())
                }
                (Ok(Done::Staging(st)), Ok(())) => st
                    .finish()
                    .map(|()| Done::Rewritten { packed: true })
                    .map_err(|e| err(&job.backing, e)),
                (Ok(Done::Staging(..)), Err(e)) => Err(e.clone()),
                (r, _) => r,
            };
            match r {
                Ok(d) => {
                    s.bytes += job.size;
                    s.disk_before += disk_before;
                    s.disk_after += blocks(&job.backing);
                    let packed = match d {
                        Done::Rewritten { packed } | Done::Converted { packed } => Some(packed),
                        _ => None,
                    };
                    match packed {
                        Some(true) => s.packed += 1,
                        Some(false) => s.containers += 1,
                        None => {}
                    }
                    // (Not a file rewritten in place only to be packed.)
                    let got_rule = match d {
                        Done::Skipped | Done::LeftAlone => false,
                        Done::Rewritten { .. } => job.changed.load(std::sync::atomic::Ordering::Relaxed),
                        _ => true,
                    };
                    s.ruled += (job.rule.is_some() && got_rule) as u64;
                    s.replaced_own +=
                        (got_rule && job.replaced_own.load(std::sync::atomic::Ordering::Relaxed)) as u64;
                    match d {
                        Done::Rewritten { .. } => s.rewritten += 1,
                        Done::Converted { .. } => {
                            s.converted += 1;
                            if *on_mount {
                                s.renamed_in
                                    .insert(job.path.parent().unwrap_or(Path::new("/")).to_path_buf());
                            }
                        }
                        Done::Skipped | Done::PropsSet => s.skipped += 1,
                        Done::LeftAlone => s.left_alone += 1,
                        Done::Copied(..) | Done::Staging(..) => unreachable!("finished above"),
                    }
                }
                Err(e) => {
                    s.failed += 1;
                    pb.suspend(|| eprintln!("squeezefs compress: {e}"));
                }
            }
        }
        let disk_after = s.disk_after + packs_size(&pack_dirs).saturating_sub(packs_before);
        if disk_after > 0 {
            *ratio_so_far.lock().unwrap() = format!("ratio {:.2}  ", s.bytes as f64 / disk_after as f64);
        }
    }
    let mut s = summary.into_inner().unwrap();
    // Files rewritten out of packs left garbage there: reclaimed as `check --repair` does.
    for (root, packs) in &whole {
        pb.set_message(format!("reclaiming garbage in {}", root.display()));
        match crate::check::packs::reclaim_tree(root, packs, None) {
            Ok((Some(r), _)) => s.reclaimed += r.bytes_freed,
            Ok((None, _)) => {}
            Err(e) => {
                s.failed += 1;
                pb.suspend(|| eprintln!("squeezefs compress: {}: {e}", root.display()));
            }
        }
    }
    // On a mount, the daemon reclaims (its pack in use retired first, so the garbage the
    // rewrites just left there goes now rather than at the unmount).
    for mnt in &packing_mounts {
        pb.set_message(format!("reclaiming garbage in {}", mnt.display()));
        match mounted::reclaim_round(mnt) {
            Ok(freed) => s.reclaimed += freed,
            Err(e) => {
                s.failed += 1;
                pb.suspend(|| eprintln!("squeezefs compress: {e}"));
            }
        }
    }
    let packs_after = packs_size(&pack_dirs);
    if whole.is_empty() {
        // Part of a tree: what the packs grew by is what these files added to them.
        s.disk_after += packs_after.saturating_sub(packs_before);
    } else {
        s.disk_before += packs_before;
        s.disk_after += packs_after;
    }
    // Every rename durable before saying done: `syncfs` of backing filesystems, and on a
    // mount (where the kernel does not pass `syncfs` on) an fsync of each directory.
    let dirs = std::mem::take(&mut s.renamed_in);
    let synced = dirs
        .iter()
        .map(|d| File::open(d).and_then(|f| f.sync_all()).map_err(|e| err(d, e)))
        .chain(args.paths.iter().map(|p| syncfs(p)));
    for r in synced {
        if let Err(e) = r {
            s.failed += 1;
            eprintln!("squeezefs compress: {e}");
        }
    }
    pb.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let ratio = s.bytes as f64 / s.disk_after.max(1) as f64;
    if args.json {
        let v = json!({
            "files": jobs.len(), "packed": s.packed, "containers": s.containers,
            "rewritten": s.rewritten, "converted": s.converted, "reclaimed_bytes": s.reclaimed,
            "skipped": s.skipped, "left_alone": s.left_alone, "failed": s.failed, "bytes": s.bytes,
            "rule_matched": matched, "ruled": s.ruled, "replaced_own": s.replaced_own,
            "disk_before": s.disk_before, "disk_after": s.disk_after, "ratio": ratio, "seconds": secs,
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        println!(
            "{} files: {} packed, {} in containers of their own ({} recompressed in place, {} converted from \
             plain files or extent sizes), {} already as asked or empty, {} left alone (hard links), {} failed",
            jobs.len(),
            s.packed,
            s.containers,
            s.rewritten,
            s.converted,
            s.skipped,
            s.left_alone,
            s.failed
        );
        println!(
            "{} of data now takes {} on disk (was {}): ratio {:.2}, in {:.1} s ({}/s)",
            human(s.bytes),
            human(s.disk_after),
            human(s.disk_before),
            ratio,
            secs,
            human((s.bytes as f64 / secs.max(1e-9)) as u64)
        );
        if s.reclaimed > 0 {
            println!("{} of pack garbage reclaimed", human(s.reclaimed));
        }
        if matched > 0 {
            println!(
                "rules: {} of the {} a compression rule matches by name got its settings now, {} \
                 of them replacing a property set on the file itself (`squeezefs property get FILE \
                 rules` names a file's rule; --no-rules ignores them and keeps files' own properties)",
                s.ruled,
                if matched == 1 {
                    "1 file".to_string()
                } else {
                    format!("{matched} files")
                },
                s.replaced_own
            );
        }
    }
    Ok(if s.failed > 0 { 1 } else { 0 })
}
