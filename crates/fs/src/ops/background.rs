//! The background pass's walk (`crate::background` decides when it runs and how fast):
//! every directory from the mount's root, each regular file's target found, its pending
//! extents rewritten a chunk at a time through `Files::quiet`.
//!
//! **Targets.** A file's own `background_compression` (an xattr of its backing file), else
//! the nearest directory above it that has one (the walk carries it down: a directory's
//! property applies to everything below it, made before or after it was set), else the
//! mount's `background_compression=`. `none` anywhere keeps the pass away from what it
//! covers.
//!
//! **What the walk holds.** Each entry is registered in the inode table like a lookup (one
//! count, given back when the walk is done with it), so the pass and the kernel's requests
//! share one inode and one lock per file: the pass never works on a file beside a state
//! the kernel's requests use.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fuser::INodeNo;
use log::warn;
use squeezefs_codec::{Algorithm, CodecSpec};
use squeezefs_container::pack::tree::Targets;
use squeezefs_container::{FileStorage, Recompressed};

use super::names::is_dict_dir;
use super::relayout::{kept_of, put_back};
use super::Core;
use crate::background::{Pass, Walk, CHUNK_BYTES};
use crate::inode::Inode;
use crate::props::{self, Prop, Value};
use crate::sys;

/// A directory waiting in the walk: its parent and name (registered only when its turn
/// comes, so a wide tree waiting costs names, not lookups), and the target it inherits;
/// `None` for the root.
type Dir = (Option<(Arc<Inode>, Vec<u8>)>, Option<CodecSpec>);

/// Extents of one file whose headers one look reads under the file's lock.
const SCAN_SLICE: u64 = 1024;

/// How a chunk ended.
enum Chunk {
    Done,
    /// The file is in use (a later walk comes back), or the pass stops.
    Left,
    /// An error (logged): the file is left until it changes.
    Failed,
}

/// What a chunk under the file's lock did.
enum Step {
    Done(Recompressed),
    /// A change came through the mount since the chunk's turn (`Pass::still`).
    Changed,
}

impl Walk for Core {
    fn background_walk(&self, pass: &Pass) -> u64 {
        let mut stack: Vec<Dir> = vec![(None, pass.target())];
        // Directories walked, by backing (device, inode): a bind mount of an ancestor inside
        // the backing directory must not loop.
        let mut seen = HashSet::new();
        let mut files = 0;
        while let Some((at, inherited)) = stack.pop() {
            if pass.stopping() {
                break;
            }
            let (dir, held) = match at {
                None => match self.inode(INodeNo(1)) {
                    Ok(root) => (root, None),
                    Err(_) => break,
                },
                Some((parent, name)) => match self.register(&parent, OsStr::from_bytes(&name)) {
                    Ok((ino, inode, _)) => (inode, Some(ino)),
                    Err(_) => continue, // gone since it was listed
                },
            };
            if dir.is_dir() && seen.insert(dir.key) {
                let target = self.dir_props(&dir).background.or(inherited);
                self.background_dir(&dir, target, pass, &mut stack, &mut files);
            }
            if let Some(ino) = held {
                self.inodes.forget(ino, 1);
            }
        }
        if !pass.stopping() {
            self.background_repack(pass);
        }
        if self.dedupe.on() {
            self.dedupe.walk_done();
        }
        files
    }
}

/// The targets a repack round's walk reads from the backing tree (the same properties the
/// walk above reads through the inode table).
struct PropTargets<'a> {
    pass: &'a Pass,
}

impl Targets for PropTargets<'_> {
    fn stop(&self) -> bool {
        self.pass.stopping()
    }

    fn dir(&self, dir: &std::fs::File, inherited: Option<CodecSpec>) -> Option<CodecSpec> {
        props::read_dir(dir, || "a directory of the backing tree".into())
            .background
            .or(inherited)
    }

    fn file(&self, file: &std::fs::File, inherited: Option<CodecSpec>) -> Option<CodecSpec> {
        let own = sys::xattr_get(file, &Prop::Background.cname(), 256)
            .ok()
            .and_then(|raw| props::parse(Prop::Background, &raw).ok());
        match own {
            Some(Value::Codec(c)) => Some(c),
            _ => inherited,
        }
    }
}

impl Core {
    /// Cold packs at archive density (issue 30, point 2): packed files whose block is not
    /// at their target are moved, with every file of their packs, into 1 MiB blocks at the
    /// target (`Reclaimer::repack`), a round at a time while rounds make progress. Each
    /// batch waits for the pass's turn (idle mount, rate).
    fn background_repack(&self, pass: &Pass) {
        let Some(r) = &self.reclaimer else { return };
        // A round holds the reclaimer: it stops, rather than waits, when the mount is busy.
        let mut pace = |bytes: u64| pass.turn_if_idle(bytes);
        let targets = PropTargets { pass };
        loop {
            if pass.stopping() {
                return;
            }
            let rp = match r.repack(&targets, pass.target(), &mut pace) {
                Ok(Some(rp)) => rp,
                Ok(None) => {
                    warn!("background pass: a location record cannot be read; packs are left as they are");
                    return pass.skipped(false);
                }
                Err(e) => {
                    warn!("background pass: repacking: {e}");
                    return pass.skipped(false);
                }
            };
            pass.found(rp.pending_bytes);
            pass.rewritten(0, rp.done_bytes);
            pass.repacked(rp.moved.as_ref().map_or(0, |m| m.files_moved));
            if rp.later_bytes > 0 && rp.done_bytes > 0 && !rp.stopped {
                // The budget left packs for another round, found again there.
                pass.unfound(rp.pending_bytes - rp.done_bytes);
                continue;
            }
            // Files left for an error are not counted as pending (a later walk tries
            // again); bytes in packs in use, over the budget or not reached before the
            // round stopped stay pending, and bring a later walk back.
            pass.unfound(rp.left_bytes);
            if rp.busy_bytes + rp.later_bytes + rp.stopped_bytes > 0 || rp.stopped {
                pass.skipped(true);
            }
            if rp.left_bytes > 0 {
                pass.skipped(false);
            }
            return;
        }
    }

    /// The entries of `dir`: subdirectories onto `stack`, regular files done now.
    fn background_dir(
        &self,
        dir: &Arc<Inode>,
        target: Option<CodecSpec>,
        pass: &Pass,
        stack: &mut Vec<Dir>,
        files: &mut u64,
    ) {
        let entries = match self.inodes.fd(dir).and_then(sys::read_dir) {
            Ok(e) => e,
            Err(e) => {
                warn!("background pass: cannot list {}: {e}", self.describe(dir));
                pass.skipped(false);
                return;
            }
        };
        let root = self.is_root(dir);
        for (name, _, dtype) in entries {
            if pass.stopping() {
                return;
            }
            if name == b".." || (root && is_dict_dir(1, &name)) {
                continue;
            }
            if dtype == libc::DT_DIR {
                stack.push((Some((dir.clone(), name)), target));
                continue;
            }
            if !matches!(dtype, libc::DT_REG | libc::DT_UNKNOWN) {
                continue;
            }
            // Gone since the listing, or not ours to open: nothing to do.
            let Ok((ino, inode, st)) = self.register(dir, OsStr::from_bytes(&name)) else {
                continue;
            };
            if inode.is_dir() {
                // (A file system that gives no d_type.)
                self.inodes.forget(ino, 1);
                stack.push((Some((dir.clone(), name)), target));
                continue;
            }
            if inode.is_reg {
                *files += 1;
                // A non-root daemon may not write a file whose mode keeps it out (opening
                // it anyway would take a chmod and back, which moves its ctime): left.
                let writable = self.as_root || (st.st_uid == sys::euid() && st.st_mode & 0o200 != 0);
                if !writable {
                    pass.read_only();
                } else if !pass.unchanged_since_clean_walk(st.st_ctime) {
                    let own = match self.file_background(&inode) {
                        Some(Value::Codec(c)) => Some(c),
                        _ => None,
                    };
                    if let Some(t) = own.or(target).filter(|t| t.alg != Algorithm::None) {
                        self.background_file(&inode, t, pass);
                    }
                    if self.dedupe.on() && st.st_size as u64 >= crate::dedupe::MIN_FILE {
                        self.background_dedupe(&inode, st.st_uid, pass);
                    }
                }
            }
            self.inodes.forget(ino, 1);
        }
    }

    /// Rewrites `inode`'s extents that are not at `target`: its headers looked at a slice
    /// at a time, the pending extents rewritten a chunk at a time, each when the governor
    /// allows it and only while the file is not in use.
    fn background_file(&self, inode: &Arc<Inode>, target: CodecSpec, pass: &Pass) {
        let mut start = 0u64;
        // A relayout that found a damaged extent: the file's extents are recompressed
        // where they are instead (the damaged one is left).
        let mut relayout_tried = false;
        loop {
            if pass.wait_turn(0).is_none() {
                return;
            }
            let want = pass.extent_shift();
            let look = self.files.scan(inode, |c| {
                let writable =
                    sys::status_flags(c.storage().file()).is_ok_and(|f| f & libc::O_ACCMODE == libc::O_RDWR);
                // Larger extents first (point 5): a relayout rewrites every extent at the
                // target anyway.
                let relayout = (start == 0 && !relayout_tried)
                    .then(|| c.relayout_shift(want))
                    .flatten();
                let old_area = start == 0 && c.old_area_left().unwrap_or(false);
                let (todo, count) = match relayout {
                    Some(_) => (Vec::new(), 0),
                    None => c.pending_in(target, start..start + SCAN_SLICE),
                };
                (
                    todo,
                    count,
                    c.extent_size().unwrap_or(0),
                    writable,
                    relayout,
                    old_area,
                )
            });
            let (todo, count, extent, writable, relayout, old_area) = match look {
                Ok(l) => l,
                // (Logged with the file's name by `Files::open_container`.)
                Err(_) => return pass.skipped(false),
            };
            if (relayout.is_some() || old_area) && !writable {
                return pass.read_only();
            }
            if old_area {
                self.background_punch_old_area(inode, pass);
            }
            if relayout.is_some() {
                relayout_tried = true;
                if self.background_relayout(inode, target, want, pass) {
                    return;
                }
                continue; // not relaid: its extents where they are
            }
            if !todo.is_empty() {
                if !writable {
                    // A non-root daemon, and a mode that keeps it out: left as it is.
                    return pass.read_only();
                }
                pass.found(todo.len() as u64 * extent);
                let per_chunk = (CHUNK_BYTES / extent.max(1)).max(1) as usize;
                for (n, chunk) in todo.chunks(per_chunk).enumerate() {
                    match self.background_chunk(inode, target, chunk, extent, pass) {
                        Chunk::Done => {}
                        Chunk::Left => return,
                        Chunk::Failed => {
                            // Not retried until the file changes: not pending either.
                            let rest = todo.len() - n * per_chunk;
                            return pass.unfound(rest as u64 * extent);
                        }
                    }
                }
            }
            start += SCAN_SLICE;
            if start >= count {
                return;
            }
        }
    }

    /// Has the stored extents of `inode` share the blocks of equal ones seen before
    /// (`crate::dedupe`): its extent headers read a slice at a time under the file's lock,
    /// the backing asked without it (it compares the bytes itself), each slice when the
    /// governor allows it.
    fn background_dedupe(&self, inode: &Arc<Inode>, owner: u32, pass: &Pass) {
        let mut start = 0u64;
        let mut storage: Option<Arc<FileStorage>> = None;
        loop {
            if pass.wait_turn(0).is_none() {
                return;
            }
            let look = self.files.scan(inode, |c| -> std::io::Result<_> {
                let (halves, count) = c
                    .stored_halves(start..start + SCAN_SLICE)
                    .map_err(std::io::Error::other)?;
                // A descriptor of its own: the file's state may close its own meanwhile.
                let file = match storage {
                    Some(_) => None,
                    None => Some(c.storage().file().try_clone()?),
                };
                Ok((halves, count, file))
            });
            let (halves, count, file) = match look {
                Ok(Ok(l)) => l,
                Ok(Err(e)) => {
                    warn!(
                        "background pass: reading the extents of {}: {e}",
                        self.describe(inode)
                    );
                    return pass.skipped(false);
                }
                // (Logged with the file's name by `Files::open_container`.)
                Err(_) => return pass.skipped(false),
            };
            if let Some(f) = file {
                storage = Some(Arc::new(FileStorage::new(f)));
            }
            let Some(st) = &storage else { return };
            if !halves.is_empty() {
                let mut stopped = false;
                self.dedupe
                    .file(inode.key, owner, st.clone(), &halves, start == 0, |bytes| {
                        stopped = pass.wait_turn(bytes).is_none();
                        !stopped
                    });
                if !self.dedupe.on() {
                    // The backing cannot share: the pass walks for targets alone again.
                    return pass.sharing_off();
                }
                if stopped {
                    return;
                }
            }
            start += SCAN_SLICE;
            if start >= count {
                return;
            }
        }
    }

    /// One chunk of a file's pending extents, under its lock.
    fn background_chunk(
        &self,
        inode: &Arc<Inode>,
        target: CodecSpec,
        chunk: &[u64],
        extent: u64,
        pass: &Pass,
    ) -> Chunk {
        let bytes = chunk.len() as u64 * extent;
        loop {
            let Some(turn) = pass.wait_turn(bytes) else {
                return Chunk::Left;
            };
            let done = self.files.quiet(
                inode,
                |c| {
                    if !pass.still(turn) {
                        return Ok(Step::Changed);
                    }
                    // The change and modification times are the file's, whatever the
                    // rewrite does to the backing file's (`SB_FLAG_TIMES`); the backing
                    // file's are put back too (its access time, for tools that read it).
                    let st = sys::fstat(c.storage().file())?;
                    let r = c.recompress_extents(target, chunk, Some(kept_of(&st)))?;
                    if r.extents > 0 {
                        put_back(c.storage().file(), &st)?;
                    }
                    Ok(Step::Done(r))
                },
                "background pass",
            );
            match done {
                Ok(Some(Step::Done(r))) => {
                    pass.rewritten(r.extents, bytes);
                    return Chunk::Done;
                }
                Ok(Some(Step::Changed)) => continue, // its turn again, once idle
                Ok(None) => {
                    pass.skipped(true);
                    return Chunk::Left;
                }
                // (Logged with the file's name by `Files::quiet`.)
                Err(_) => {
                    pass.skipped(false);
                    return Chunk::Failed;
                }
            }
        }
    }
}
