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

mod file;

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde_json::json;
use squeezefs_codec::CodecSpec;

use crate::ui::{bytes_bar, human};
use file::{err, mounted, not_served, offline, rename_over, syncfs, temp_pid, Asked, Done, Job};

pub struct Args {
    pub paths: Vec<PathBuf>,
    pub codec: Option<CodecSpec>,
    pub extent_shift: Option<u8>,
    pub json: bool,
}

#[derive(Default)]
struct Summary {
    rewritten: u64,
    converted: u64,
    skipped: u64,
    left_alone: u64,
    failed: u64,
    bytes: u64,
    disk_before: u64,
    disk_after: u64,
    /// Directories on a mount where copies were renamed (synced at the end).
    renamed_in: std::collections::BTreeSet<PathBuf>,
}

/// Files per batch of copies made durable together.
const BATCH: usize = 256;

pub fn main(args: Args) -> Result<u8, String> {
    let start = Instant::now();
    let asked = Asked {
        codec: args.codec,
        extent_shift: args.extent_shift,
    };
    let mut jobs: Vec<(Job, bool)> = Vec::new();
    for p in &args.paths {
        let loc = crate::locate::locate(p)?;
        // Backing files are read directly (also on a mount): those that used a dictionary
        // need it.
        for why in crate::dictdir::load_near(&loc) {
            eprintln!("warning: {why}");
        }
        let on_mount = loc.mount.is_some();
        let default_codec = match &loc.mount {
            Some(m) => crate::statsfile::read(m)?["mount"]["compress"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .unwrap_or(CodecSpec::DEFAULT),
            None => CodecSpec::DEFAULT,
        };
        if !on_mount {
            not_served(&loc.backing)?;
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
        let mut seen = std::collections::HashSet::new();
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
            let links = m.nlink();
            jobs.push((
                Job {
                    path,
                    backing,
                    size: m.len(),
                    links,
                    default_codec,
                },
                on_mount,
            ));
        }
    }
    let total: u64 = jobs.iter().map(|(j, _)| j.size).sum();
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
                let r = if job.size == 0 {
                    Ok(Done::Skipped)
                } else if *on_mount {
                    mounted(&asked, job, &pb)
                } else {
                    offline(&asked, job, &pb)
                };
                (r, disk_before)
            })
            .collect();
        let mut devices = std::collections::BTreeMap::new();
        for (r, _) in &done {
            if let Ok(Done::Copied(tmp)) = r {
                if let Ok(m) = std::fs::metadata(tmp) {
                    devices.entry(m.dev()).or_insert_with(|| tmp.clone());
                }
            }
        }
        let synced: Result<(), String> = devices.values().try_for_each(|p| syncfs(p));
        let mut s = summary.lock().unwrap();
        for ((job, on_mount), (r, disk_before)) in batch.iter().zip(done) {
            let r = match (r, &synced) {
                (Ok(Done::Copied(tmp)), Ok(())) => rename_over(&tmp, &job.backing).map(|()| Done::Converted),
                (Ok(Done::Copied(tmp)), Err(e)) => {
                    let _ = std::fs::remove_file(&tmp);
                    Err(e.clone())
                }
                (r, _) => r,
            };
            match r {
                Ok(d) => {
                    s.bytes += job.size;
                    s.disk_before += disk_before;
                    s.disk_after += blocks(&job.backing);
                    match d {
                        Done::Rewritten => s.rewritten += 1,
                        Done::Converted => {
                            s.converted += 1;
                            if *on_mount {
                                s.renamed_in
                                    .insert(job.path.parent().unwrap_or(Path::new("/")).to_path_buf());
                            }
                        }
                        Done::Skipped => s.skipped += 1,
                        Done::LeftAlone => s.left_alone += 1,
                        Done::Copied(_) => unreachable!("renamed above"),
                    }
                }
                Err(e) => {
                    s.failed += 1;
                    pb.suspend(|| eprintln!("squeezefs compress: {e}"));
                }
            }
        }
        if s.disk_after > 0 {
            *ratio_so_far.lock().unwrap() = format!("ratio {:.2}  ", s.bytes as f64 / s.disk_after as f64);
        }
    }
    let mut s = summary.into_inner().unwrap();
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
            "files": jobs.len(), "rewritten": s.rewritten, "converted": s.converted,
            "skipped": s.skipped, "left_alone": s.left_alone, "failed": s.failed, "bytes": s.bytes,
            "disk_before": s.disk_before, "disk_after": s.disk_after, "ratio": ratio, "seconds": secs,
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        println!(
            "{} files: {} rewritten, {} converted into containers, {} already as asked or empty, \
             {} left alone (hard links), {} failed",
            jobs.len(),
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
    }
    Ok(if s.failed > 0 { 1 } else { 0 })
}
