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
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::audit::{check_pack, repair_pack, LiveMap, PackReport, GARBAGE_MAX};
use super::format::LOCATION_XATTR;
use super::reclaim::{reclaim, victims, Garbage, LiveFile, Mover, Reclaimed, Settle};
use super::record::{record_state, record_state_of_empty, RecordState};
use super::Packs;
use crate::open_at::{list_dir_as_owner, open_beneath_as_owner, open_with_flags, reopen_as_owner};
use crate::storage::FileStorage;
use crate::sys;
use squeezefs_codec::CodecSpec;

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
    walk_records_with(root, None)
}

/// The background pass's targets ([`LiveFile::target`]), found as a walk goes down: the
/// fs crate reads its properties.
pub trait Targets {
    /// What `dir` gives everything below it: its own target, else `inherited` (the root
    /// inherits the mount's).
    fn dir(&self, dir: &File, inherited: Option<CodecSpec>) -> Option<CodecSpec>;
    /// A file's target: its own, else `inherited`.
    fn file(&self, file: &File, inherited: Option<CodecSpec>) -> Option<CodecSpec>;
    /// Whether the walk is to stop (asked at each directory): it then fails with
    /// [`std::io::ErrorKind::Interrupted`].
    fn stop(&self) -> bool {
        false
    }
}

/// [`walk_records`], each file with its target when `targets` is given.
pub fn walk_records_with(
    root: &Path,
    targets: Option<(&dyn Targets, Option<CodecSpec>)>,
) -> std::io::Result<Option<Walked>> {
    let top = File::open(root)?;
    let mut out = Walked::default();
    let mut seen = HashSet::new();
    let mut stack: Vec<(PathBuf, Option<CodecSpec>)> = vec![(PathBuf::new(), targets.and_then(|t| t.1))];
    while let Some((rel, inherited)) = stack.pop() {
        let dir = if rel.as_os_str().is_empty() {
            top.try_clone()?
        } else {
            match open_beneath_as_owner(&top, &rel, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW) {
                Ok(d) => d,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e),
            }
        };
        let inherited = match targets {
            Some((t, _)) if t.stop() => return Err(std::io::ErrorKind::Interrupted.into()),
            Some((t, _)) => t.dir(&dir, inherited),
            None => None,
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
                    stack.push((name, inherited));
                }
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            // Opened `O_PATH` (no OPEN, and no FLUSH at its close, on a network backing);
            // an empty file's record is read through it, the rest opened for reading.
            let f = match open_beneath_as_owner(&top, &name, libc::O_PATH | libc::O_NOFOLLOW) {
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
            let target = match targets {
                Some((t, _)) => t.file(&f, inherited),
                None => None,
            };
            // (A file with bytes is not asked through the `O_PATH` fd: it is opened anyway.)
            let empty = (m.len() == 0).then(|| sys::get_xattr_at_path_fd(f.as_fd(), LOCATION_XATTR));
            let state = match empty {
                Some(Ok(value)) => Ok(record_state_of_empty(value.as_deref())),
                // Data to look at (a superblock may outrank the record), or an xattr this
                // daemon may read only as the file's owner (a mode-0 file without root).
                _ => match reopen_for_reading(&f) {
                    Ok(r) => record_state(&FileStorage::new(r)),
                    Err(e) if vanished(&e) => continue,
                    Err(e) => return Err(e),
                },
            };
            match state {
                Ok(RecordState::Current { loc, .. }) => {
                    out.live.add(&loc);
                    let name = name.display().to_string();
                    let id = Some((m.dev(), m.ino()));
                    out.files.push(LiveFile {
                        name,
                        loc,
                        id,
                        target,
                    });
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
/// The file the `O_PATH` fd `f` stands for, opened for reading through `/proc/self/fd`
/// (the very file a walk found under its name, whatever renames came since), as its owner
/// where its mode refuses the daemon ([`reopen_as_owner`]).
fn reopen_for_reading(f: &File) -> std::io::Result<File> {
    use std::os::fd::AsRawFd;
    let proc = format!("/proc/self/fd/{}", f.as_raw_fd());
    match open_with_flags(Path::new(&proc), libc::O_RDONLY) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => reopen_as_owner(f, libc::O_RDONLY)?.ok_or(e),
        r => r,
    }
}

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
    reclaim_tree_to_end(root, packs, opts).map(|(r, _)| r)
}

/// [`reclaim_tree`], and whether it ran to the end: every record read, and every pack above
/// [`GARBAGE_MAX`] reclaimed (none left for the budget, no file left in its pack, no round
/// stopped or kept its packs). After such a walk of a whole tree no pack is above the
/// threshold (the unmount's clean mark, `clean`).
pub fn reclaim_tree_to_end(
    root: &Path,
    packs: &Packs,
    opts: TreeReclaim,
) -> Result<(Option<Reclaimed>, bool), String> {
    let mut ids = packs.dir().list().map_err(|e| e.to_string())?;
    if let Some(only) = &opts.only {
        ids.retain(|id| only.contains(id));
    }
    if ids.is_empty() {
        // (With `only`, the packs left out were not looked at.)
        return Ok((None, opts.only.is_none()));
    }
    let Some(w) = walk_records(root).map_err(|e| format!("{}: {e}", root.display()))? else {
        return Ok((None, false));
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
    let all_picked = v.len() == victims(&reports, GARBAGE_MAX).len();
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
        return Ok((None, true));
    }
    let r = reclaim_files(root, packs, &v, &w.files, &mut Garbage, opts.settle)
        .map_err(|e| format!("reclaiming packs: {e}"))?;
    let to_end = all_picked && r.left.is_empty() && r.aborted.is_none() && !r.stopped;
    Ok((Some(r), to_end))
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
    mover: &mut dyn Mover,
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
    reclaim(packs, victims, files, mover, open, sync, settle)
}

/// Live bytes of packed files one [`repack_tree`] round moves at most.
pub const REPACK_BUDGET: u64 = 256 << 20;

pub use super::reclaim::REPACK_SHIFT;

/// Bytes of files one repack batch holds at least: each batch's sync writes the open
/// blocks, so it fills several 1 MiB blocks first.
pub const REPACK_BATCH_BYTES: u64 = 8 << 20;

/// Whether `f`'s bytes wait for the background pass: it has a target (not `none`) and its
/// block, compressed, is at another codec or level. A block stored raw (its bytes did not
/// compress) or whose header cannot be read is left alone, so a walk converges.
pub fn repack_pending(packs: &Packs, f: &LiveFile) -> bool {
    f.loc.len > 0
        && packs
            .block_header(f.loc.pack, f.loc.block)
            .is_ok_and(|h| pending_in(f, &h))
}

/// [`repack_pending`] for a file whose block has header `h`.
fn pending_in(f: &LiveFile, h: &super::BlockHeader) -> bool {
    f.target
        .filter(|t| t.alg != squeezefs_codec::Algorithm::None)
        .is_some_and(|t| {
            h.codec != squeezefs_codec::Algorithm::None && (h.codec, h.level) != (t.alg, t.level)
        })
}

/// The background pass's [`Mover`]: files with a target go to the repacked lane in blocks
/// of [`REPACK_SHIFT`] at their target (a file already at it, or in a raw block, beside
/// pending ones in a pack, too); others are moved as a garbage reclaim moves them. Files are appended by
/// directory, then extension, then name, so similar files share blocks.
struct Repack<'a> {
    pace: &'a mut dyn FnMut(u64) -> bool,
    /// The pending files (by name), and the bytes of those whose record names their new
    /// place now.
    pending: HashSet<&'a str>,
    done_bytes: u64,
}

/// Where a file sorts in a repack: its directory, its extension, its name.
fn similarity_key(name: &str) -> (&str, &str, &str) {
    let (dir, base) = name.rsplit_once('/').unwrap_or(("", name));
    let ext = match base.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext,
        _ => "",
    };
    (dir, ext, base)
}

impl Mover for Repack<'_> {
    fn destination(&self, f: &LiveFile, was: Option<&super::BlockHeader>) -> super::reclaim::Destination {
        // Every file with a target goes to a block at it, even one whose block was stored
        // raw: the new block is at the target or raw again, and neither is pending, so one
        // round is enough.
        match f.target {
            Some(t) if t.alg != squeezefs_codec::Algorithm::None => super::reclaim::Destination {
                lane: super::Lane::Repacked,
                codec: t,
                shift: REPACK_SHIFT,
            },
            _ => Garbage.destination(f, was),
        }
    }

    fn order(&self, files: &mut [&LiveFile]) {
        files.sort_by(|a, b| similarity_key(&a.name).cmp(&similarity_key(&b.name)));
    }

    fn pace(&mut self, bytes: u64) -> bool {
        (self.pace)(bytes)
    }

    fn dedup(&self) -> bool {
        true
    }

    fn batch_bytes(&self) -> u64 {
        REPACK_BATCH_BYTES
    }

    fn may_share(&self, f: &LiveFile, h: &super::BlockHeader) -> bool {
        !pending_in(f, h)
    }

    fn moved(&mut self, f: &LiveFile) {
        if self.pending.contains(f.name.as_str()) {
            self.done_bytes += u64::from(f.loc.len);
        }
    }
}

/// How a [`repack_tree`] round is bounded, and what it may touch.
pub struct TreeRepack<'a> {
    /// The targets, and the mount's (what the root inherits).
    pub targets: &'a dyn Targets,
    pub mount_target: Option<CodecSpec>,
    /// The packs a round may take: [`Packs::reclaimable`] asked *before* the walk (then no
    /// record the walk missed can name one of them, as for a garbage round).
    pub free: BTreeSet<u32>,
    /// Live bytes to move at most (whole packs, in id order, at least one).
    pub budget: u64,
    /// Asked before each batch of files with their bytes: `false` stops the round.
    pub pace: &'a mut dyn FnMut(u64) -> bool,
    /// The last word before packs are removed (see [`reclaim`]).
    pub settle: &'a mut dyn FnMut() -> Settle,
}

/// What a [`repack_tree`] round found and did.
#[derive(Debug, Default)]
pub struct Repacked {
    /// Bytes of packed files waiting for the pass when the round began.
    pub pending_bytes: u64,
    /// Of those, the bytes the round moved to their target.
    pub done_bytes: u64,
    /// Pending bytes in packs the round could not take (being appended to, a slot waiting
    /// for its record, pinned by an open file): a later round takes them.
    pub busy_bytes: u64,
    /// The packs those are in (a mount retires the one it appends to, so the next round
    /// can take it).
    pub busy_packs: BTreeSet<u32>,
    /// Pending bytes left for the next round by the budget.
    pub later_bytes: u64,
    /// Pending bytes of files left where they were for an error (`moved.left`): not
    /// counted as pending until a later walk tries again.
    pub left_bytes: u64,
    /// Pending bytes of packs taken but not moved because the round stopped.
    pub stopped_bytes: u64,
    /// The walk or the move stopped (the pass is stopping, or the mount is not idle).
    pub stopped: bool,
    /// The move itself, when packs were picked.
    pub moved: Option<Reclaimed>,
}

/// The background pass's rewrite of cold packs: walks `root` with the targets, picks the
/// packs holding files whose blocks are not at their target ([`repack_pending`]), and
/// moves every live file of those packs, through [`reclaim`] (same crash safety, same
/// checks beside a mount's writes), into 1 MiB blocks at the target in packs of their own
/// ([`super::Lane::Repacked`]), ordered by [`similarity_key`], equal contents stored once.
/// `Ok(None)`: a record could not be read (nothing is touched then).
pub fn repack_tree(root: &Path, packs: &Packs, opts: TreeRepack) -> Result<Option<Repacked>, String> {
    let w = match walk_records_with(root, Some((opts.targets, opts.mount_target))) {
        Ok(Some(w)) => w,
        Ok(None) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
            return Ok(Some(Repacked {
                stopped: true,
                ..Repacked::default()
            }))
        }
        Err(e) => return Err(format!("{}: {e}", root.display())),
    };
    let mut out = Repacked::default();
    // Per pack: its live bytes, and its pending bytes.
    let mut by_pack: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut pending_files = Vec::new();
    for (i, f) in w.files.iter().enumerate() {
        if f.loc.len == 0 {
            continue;
        }
        let e = by_pack.entry(f.loc.pack).or_default();
        e.0 += u64::from(f.loc.len);
        if repack_pending(packs, f) {
            e.1 += u64::from(f.loc.len);
            out.pending_bytes += u64::from(f.loc.len);
            pending_files.push(i);
        }
    }
    let mut victims = BTreeSet::new();
    let mut live = 0u64;
    for (&id, &(bytes, pending)) in &by_pack {
        if pending == 0 {
            continue;
        }
        if !opts.free.contains(&id) {
            out.busy_bytes += pending;
            out.busy_packs.insert(id);
        } else if live > 0 && live + bytes > opts.budget {
            out.later_bytes += pending;
        } else {
            live += bytes;
            victims.insert(id);
        }
    }
    if victims.is_empty() {
        return Ok(Some(out));
    }
    let mut mover = Repack {
        pace: opts.pace,
        pending: pending_files.iter().map(|&i| w.files[i].name.as_str()).collect(),
        done_bytes: 0,
    };
    let r = reclaim_files(root, packs, &victims, &w.files, &mut mover, opts.settle)
        .map_err(|e| format!("repacking: {e}"))?;
    out.stopped = r.stopped;
    out.done_bytes = mover.done_bytes;
    let left: HashSet<&str> = r.left.iter().map(|(n, _)| n.as_str()).collect();
    let mut taken = 0;
    for &i in &pending_files {
        let f = &w.files[i];
        if victims.contains(&f.loc.pack) {
            taken += u64::from(f.loc.len);
            if left.contains(f.name.as_str()) {
                out.left_bytes += u64::from(f.loc.len);
            }
        }
    }
    // Not moved, not left for an error: the round stopped before them (or their record
    // changed meanwhile, and a walk looks at them again anyway).
    out.stopped_bytes = taken.saturating_sub(out.done_bytes + out.left_bytes);
    out.moved = Some(r);
    Ok(Some(out))
}
