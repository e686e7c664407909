//! Reclaiming the packs of a whole backing directory: every file's record is read (the
//! walk), each pack's garbage measured against them ([`check_pack`]), and the packs above
//! [`GARBAGE_MAX`] garbage reclaimed ([`reclaim`]). Shared by `check --repair`, offline
//! `compress`, the unmount hook and a mount's background rounds, which differ only in
//! [`TreeReclaim`]: which packs may be picked, how much to move, and the `settle` check.
//!
//! The walk uses paths under `root`; a mount passes `/proc/self/fd/N` of its backing root,
//! which works even when the mount covers the backing directory itself.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::audit::{check_pack, repair_pack, LiveMap, PackReport, GARBAGE_MAX};
use super::reclaim::{reclaim, victims, LiveFile, Reclaimed, Settle};
use super::record::{record_state, RecordState};
use super::Packs;
use crate::storage::{list_dir_as_owner, open_beneath_as_owner, FileStorage};

/// The records of a backing directory, as a walk found them.
#[derive(Debug, Default)]
pub struct Walked {
    pub live: LiveMap,
    /// Every file with a current record (one name per inode), by path relative to the root.
    pub files: Vec<LiveFile>,
}

/// Reads the record of every regular file below `root` (symlinks not followed; the root's
/// pack and dictionary directories left out). `None` when some record cannot be read: it
/// may name any pack, so nothing may be judged garbage.
///
/// Entries may come and go meanwhile (a mount's rounds): one that vanished, or turned into
/// a symlink or something else than a file, is skipped (a mount logs the renames that could
/// hide a file; see `squeezefs-fs` `reclaim.rs`). Every open is beneath the root
/// ([`open_beneath_as_owner`]: a mode-0 file or directory of the daemon's own user is read
/// too) and a file's identity comes from the fd its record was read from.
pub fn walk_records(root: &Path) -> std::io::Result<Option<Walked>> {
    let top = File::open(root)?;
    let mut out = Walked::default();
    let mut seen = HashSet::new();
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = if rel.as_os_str().is_empty() {
            top.try_clone()?
        } else {
            match open_beneath_as_owner(&top, &rel, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW) {
                Ok(d) => d,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e),
            }
        };
        let entries = match list_dir_as_owner(&dir) {
            Ok(list) => list,
            Err(e) if vanished(&e) => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let name = rel.join(entry.file_name());
            let kind = match entry.file_type() {
                Ok(k) => k,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e),
            };
            if kind.is_dir() {
                let n = entry.file_name();
                let top_level = rel.as_os_str().is_empty();
                if !(top_level && (n == super::dir::DIR_NAME || n == crate::dicts::DIR_NAME)) {
                    stack.push(name);
                }
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let f = match open_beneath_as_owner(&top, &name, libc::O_RDONLY | libc::O_NOFOLLOW) {
                Ok(f) => f,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e),
            };
            let m = f.metadata()?;
            // (Every file is asked: a packed file whose replaced bytes were not cut yet is
            // not empty.)
            if !m.is_file() || (m.nlink() > 1 && !seen.insert((m.dev(), m.ino()))) {
                continue;
            }
            match record_state(&FileStorage::new(f)) {
                Ok(RecordState::Current { loc, .. }) => {
                    out.live.add(&loc);
                    let name = name.display().to_string();
                    let id = Some((m.dev(), m.ino()));
                    out.files.push(LiveFile { name, loc, id });
                }
                Ok(RecordState::Absent | RecordState::Stale(_)) => {}
                Ok(RecordState::Unreadable(_)) | Err(_) => return Ok(None),
            }
        }
    }
    Ok(Some(out))
}

/// An entry removed, renamed, or replaced by a symlink (or a non-directory) since it was
/// listed.
fn vanished(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EXDEV | libc::ENXIO)
    )
}

/// How a [`reclaim_tree`] round is bounded.
pub struct TreeReclaim<'a> {
    /// Only these packs may be reclaimed (a mount: [`Packs::reclaimable`]); `None`: any.
    pub only: Option<BTreeSet<u32>>,
    /// Live bytes to move at most: the packs with the most garbage go first.
    pub budget: Option<u64>,
    /// Remove orphan packs and cut torn tails ([`repair_pack`]): only where nothing else
    /// writes (offline, at unmount).
    pub repair: bool,
    /// The last word before packs are removed (see [`reclaim`]).
    pub settle: &'a mut dyn FnMut() -> Settle,
}

/// Walks `root`, measures the packs' garbage and reclaims those above [`GARBAGE_MAX`].
/// `Ok(None)`: nothing to do, or a record could not be read (nothing is touched then).
pub fn reclaim_tree(root: &Path, packs: &Packs, opts: TreeReclaim) -> Result<Option<Reclaimed>, String> {
    let mut ids = packs.dir().list().map_err(|e| e.to_string())?;
    if let Some(only) = &opts.only {
        ids.retain(|id| only.contains(id));
    }
    if ids.is_empty() {
        return Ok(None);
    }
    let Some(w) = walk_records(root).map_err(|e| format!("{}: {e}", root.display()))? else {
        return Ok(None);
    };
    let mut reports = BTreeMap::new();
    for id in ids {
        let r = check_pack(packs, id, &w.live, false).map_err(|e| format!("{}: {e}", packs.describe(id)))?;
        if opts.repair {
            repair_pack(packs, &r).map_err(|e| format!("{}: {e}", packs.describe(id)))?;
        }
        reports.insert(id, r);
    }
    let mut v = pick(&reports, opts.budget);
    if !opts.repair {
        // A pack no file uses any more (`repair_pack` removes those offline) goes too,
        // through the same checks as the others.
        v.extend(
            reports
                .values()
                .filter(|r| !r.damaged() && r.live_files == 0)
                .map(|r| r.id),
        );
    }
    if v.is_empty() {
        return Ok(None);
    }
    reclaim_files(root, packs, &v, &w.files, opts.settle)
        .map(Some)
        .map_err(|e| format!("reclaiming packs: {e}"))
}

/// The packs above [`GARBAGE_MAX`] garbage; with `budget`, those with the most garbage
/// first, until their live bytes fill it (at least one).
fn pick(reports: &BTreeMap<u32, PackReport>, budget: Option<u64>) -> BTreeSet<u32> {
    let v = victims(reports, GARBAGE_MAX);
    let Some(budget) = budget else { return v };
    let mut by_garbage: Vec<&PackReport> = v.iter().map(|id| &reports[id]).collect();
    by_garbage.sort_by(|a, b| b.garbage_fraction().total_cmp(&a.garbage_fraction()));
    let mut moved = 0;
    by_garbage
        .into_iter()
        .take_while(|r| {
            moved += r.live_bytes;
            moved <= budget || moved == r.live_bytes
        })
        .map(|r| r.id)
        .collect()
}

/// Reclaims packs `victims`, moving `files` (paths relative to `root`); one `syncfs` makes
/// each batch's records durable.
pub fn reclaim_files(
    root: &Path,
    packs: &Packs,
    victims: &BTreeSet<u32>,
    files: &[LiveFile],
    settle: &mut dyn FnMut() -> Settle,
) -> crate::Result<Reclaimed> {
    let top = File::open(root)?;
    let open = |f: &LiveFile| -> crate::Result<FileStorage> {
        let file = open_beneath_as_owner(&top, Path::new(&f.name), libc::O_RDWR | libc::O_NOFOLLOW)?;
        if !file.metadata()?.is_file() {
            return Err(crate::Error::Invalid("not a regular file any more".into()));
        }
        Ok(FileStorage::new(file))
    };
    let sync = |_: &[FileStorage]| -> crate::Result<()> {
        crate::storage::syncfs(&top)?;
        Ok(())
    };
    reclaim(packs, victims, files, open, sync, settle)
}
