//! The background pass's relayout of one file (issue 30, point 5): a cold file stored in
//! extents smaller than `background_extent_size=` (1 MiB unless the mount chose an
//! extent size) is rewritten into larger extents at its target, one new extent per turn
//! (`Container::relayout_step`; the container's `relayout.rs` says how it stays
//! crash-safe). The file's lock is held for one step at a time, so a user who opens the
//! file waits for one extent at most; a step finds out itself whether the file changed
//! in between, and then the plan is dropped and the next walk starts again. A plan left
//! because the file came into use is not kept either: a later walk plans again, and its
//! plan first cuts what the earlier one wrote (a file that is never idle long enough for a
//! whole relayout keeps its extents; the pass's `pending_bytes` says so).

use std::sync::Arc;

use squeezefs_codec::CodecSpec;
use squeezefs_container::format::KeptTimes;
use squeezefs_container::{Relayout, RelayoutStep};

use super::Core;
use crate::background::Pass;
use crate::inode::Inode;
use crate::lifecycle::state::Times;
use crate::sys;

/// How one turn ended.
enum Turn {
    /// The step wrote its extents (or the file switched to the new layout).
    Step(RelayoutStep),
    /// Not a candidate any more when the plan was to be made.
    NotNow,
    /// A change came through the mount since the turn was given.
    Changed,
}

impl Core {
    /// Relays `inode` out to extents of `1 << want` bytes (at most) at `target`; false
    /// when it is not relaid (not a candidate when planned, or a damaged extent), and the
    /// caller recompresses its extents where they are.
    pub(super) fn background_relayout(
        &self,
        inode: &Arc<Inode>,
        target: CodecSpec,
        want: u8,
        pass: &Pass,
    ) -> bool {
        let mut plan: Option<Relayout> = None;
        loop {
            // One new extent per turn: its logical bytes, at the pass's rate.
            let bytes = plan.map_or(1 << want, |p| (1u64 << p.shift()).min(p.remaining()));
            let Some(turn) = pass.wait_turn(bytes) else {
                return true; // the pass stops: still pending
            };
            let done = self.files.quiet(
                inode,
                |c| {
                    if !pass.still(turn) {
                        return Ok(Turn::Changed);
                    }
                    // The file's times, kept in its superblock before anything moves the
                    // backing file's.
                    let st = sys::fstat(c.storage().file())?;
                    let p = match plan.as_mut() {
                        Some(p) => p,
                        None => {
                            let Some(p) = c.plan_relayout(target, want, kept_of(&st))? else {
                                return Ok(Turn::NotNow);
                            };
                            pass.found(p.remaining());
                            plan.insert(p)
                        }
                    };
                    let step = c.relayout_step(p, 1)?;
                    // The backing file's own times put back (for tools that read the
                    // backing tree) while the file keeps its times; not once a change of
                    // the file dropped them (`stat` shows the backing file's then, which
                    // nothing of the pass may move).
                    if c.kept_times().is_some() {
                        put_back(c.storage().file(), &st)?;
                    }
                    Ok(Turn::Step(step))
                },
                "background pass (relayout)",
            );
            match done {
                Ok(Some(Turn::Step(RelayoutStep::Progress))) => {}
                Ok(Some(Turn::Step(RelayoutStep::Done(r)))) => {
                    let total = plan.map_or(0, |p| p.size());
                    pass.rewritten(r.extents, total);
                    return true;
                }
                Ok(Some(Turn::Step(RelayoutStep::Changed))) => {
                    // Changed since the plan: what was written through the mount brings
                    // another walk, which plans again.
                    if let Some(p) = plan {
                        pass.unfound(p.size());
                    }
                    pass.skipped(true);
                    return true;
                }
                Ok(Some(Turn::Step(RelayoutStep::Damaged))) => {
                    if let Some(p) = plan {
                        pass.unfound(p.size());
                    }
                    return false;
                }
                Ok(Some(Turn::NotNow)) => return false,
                // Its turn again, once idle: the plan finds out itself whether the file
                // changed.
                Ok(Some(Turn::Changed)) => {}
                Ok(None) => {
                    pass.skipped(true); // in use: a later walk
                    return true;
                }
                // (Logged with the file's name by `Files::quiet`.)
                Err(_) => {
                    if let Some(p) = plan {
                        pass.unfound(p.size());
                    }
                    pass.skipped(false);
                    return true;
                }
            }
        }
    }

    /// Punches the old extent area a crash kept a relayout from punching, with the file's
    /// times kept as for any rewrite of the pass.
    pub(super) fn background_punch_old_area(&self, inode: &Arc<Inode>, pass: &Pass) {
        let Some(turn) = pass.wait_turn(0) else { return };
        let done = self.files.quiet(
            inode,
            |c| {
                if !pass.still(turn) {
                    return Ok(());
                }
                let st = sys::fstat(c.storage().file())?;
                let punched = c.punch_old_area(Some(kept_of(&st)));
                // (Whatever the punch did: its superblock write moved them too.)
                if c.kept_times().is_some() {
                    put_back(c.storage().file(), &st)?;
                }
                punched.map(|_| ())
            },
            "background pass (relayout)",
        );
        match done {
            Ok(Some(())) => {}
            Ok(None) => pass.skipped(true),
            Err(_) => pass.skipped(false),
        }
    }
}

/// The change and modification times of `st`, to keep (every rewrite of the pass).
pub(super) fn kept_of(st: &libc::stat) -> KeptTimes {
    KeptTimes {
        ctime: (st.st_ctime, st.st_ctime_nsec as u32),
        mtime: (st.st_mtime, st.st_mtime_nsec as u32),
    }
}

/// Puts `st`'s access and modification times back on `file`.
pub(super) fn put_back(file: &std::fs::File, st: &libc::stat) -> std::io::Result<()> {
    let [atime, mtime] = Times {
        atime: Some((st.st_atime, st.st_atime_nsec)),
        mtime: Some((st.st_mtime, st.st_mtime_nsec)),
        ctime: None,
    }
    .timespecs();
    sys::utimens(file, atime, mtime)
}
