//! A cold file's extents made larger (issue 30, point 5): the background pass rewrites a
//! file stored in small extents (128 KiB by default) into extents of up to 1 MiB at its
//! target codec. Larger extents compress better (a zstd window eight times wider: the
//! Linux tree's files over 128 KiB take 23 % less at zstd:15) and lose less to rounding
//! each copy up to a 4 KiB block (slack: 3–4 % of what 128 KiB extents store, 0.5 % at
//! 1 MiB).
//!
//! **Where the new extents go.** A container's slots sit at fixed offsets for its extent
//! size, so the new ones cannot be written over the old while the old stay valid. They go
//! to a new extent area past everything the backing file holds (`SB_FLAG_AREA`, format
//! version 6: the superblock says where the area starts, in MiB past the superblocks), and
//! one superblock write switches from the old layout to the new:
//!
//! 1. [`Container::plan_relayout`]: leftovers past the old extents are cut, and the kept
//!    times (`SB_FLAG_TIMES`) are written and made durable first, as for any rewrite of
//!    the pass: `stat` shows the file's times however the backing file's move.
//! 2. [`Container::relayout_step`], as many times as the pass likes (it lets go of the
//!    file between steps, so a user's open never waits for more than one step): new
//!    extents are written in the new area. The current superblock knows nothing of them:
//!    to any reader or writer they are bytes past the file's last extent, which a
//!    container treats as holes and cuts at its next write-back. A step first checks that
//!    the superblock is still the one the plan was made on; if the file changed, the plan
//!    is dropped and what it wrote is cut ([`Step::Changed`]).
//! 3. The last step makes the new extents durable, then writes the superblock naming the
//!    new extent size and area and makes it durable, then punches the older superblock
//!    copy (it describes the old layout) durably, then the old area: an older copy never
//!    outlives the extents it describes.
//!
//! A crash before the superblock is durable leaves the old layout current and the new
//! extents past its end (cut at the next write-back, or by `check --repair`); a crash
//! after it leaves the new layout current and the old area not yet punched, which the pass
//! punches when it next visits the file ([`Container::punch_old_area`]) and `check`
//! reports as a leftover. Either way the file reads the same bytes.
//!
//! **What is left alone** (as by [`Container::recompress`], and for the same reasons): a
//! packed or inline file, a file flagged incompressible, a file with bytes in memory;
//! also a file whose extent size is its own property (`extent_size`: a database's small
//! extents are a choice), a file that uses a dictionary, and a file that would end up as
//! one extent (written back, it could become packed: the new extent size is the largest
//! that still leaves two extents).

use squeezefs_codec::CodecSpec;

use super::state::{Mode, Packed};
use super::{Container, Recompressed};
use crate::encode::{encode_extent, Policy};
use crate::format::{
    sb_offset, Geometry, KeptTimes, AREA_UNIT, BLOCK, DATA_START, EXTENT_HEADER_LEN, MAX_EXTENT_SHIFT,
};
use crate::layout::{
    current_superblock, newest_halves, read_halves, read_head, superblock_copies, Half, Head, Tie,
};
use crate::storage::Storage;
use crate::Result;

/// Old extents whose headers one step checks.
const CHECK_SLICE: u64 = 1024;

/// A relayout under way: what it was planned on, where it writes, how far it got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relayout {
    /// The superblock generation and size the plan was made on: a step on another is
    /// refused.
    generation: u64,
    size: u64,
    from: Geometry,
    to: Geometry,
    /// Extents of the new layout, and the next one to write.
    count: u64,
    next: u64,
    target: CodecSpec,
    /// Old extents whose headers the first steps found whole (a slice a step).
    checked: u64,
    /// Logical bytes written so far.
    done: u64,
    /// The end of the last copy written (0: none yet): the backing file must still reach
    /// it when the layout switches.
    written_end: u64,
}

impl Relayout {
    /// The new extent size, log2.
    pub fn shift(&self) -> u8 {
        self.to.shift
    }

    /// The file's logical size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Logical bytes still to write.
    pub fn remaining(&self) -> u64 {
        self.size.saturating_sub(self.next << self.to.shift)
    }
}

/// How a step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Extents written; more to do.
    Progress,
    /// The new layout is the file's: extents rewritten and their logical bytes.
    Done(Recompressed),
    /// The file is not as planned any more (changed, or no longer a candidate): nothing
    /// of the plan is left.
    Changed,
    /// An extent of the file has no valid copy (`check` reports it): the file is left in
    /// its extents (recompression leaves that extent alone), and nothing was written.
    Damaged,
}

impl Packed {
    /// The extent size (log2) a relayout towards `want` would give this file, if it is a
    /// candidate (the module's documentation).
    fn relayout_shift(&self, want: u8) -> Option<u8> {
        let candidate = !self.nocompress
            && self.share.bytes() == 0
            && self.loc.is_none()
            && self.loc_pending.is_none()
            && self.sb_slot.is_some()
            && !self.sb_inline
            && !self.shift_prop
            && !self.dict_used
            && self.dict.is_none()
            && !self.needs_reopen
            && self.size >= 2;
        if !candidate {
            return None;
        }
        // The largest extent size, at most `want`, that leaves at least two extents.
        let fits = 63 - (self.size - 1).leading_zeros() as u8;
        let shift = want.min(MAX_EXTENT_SHIFT).min(fits);
        (shift > self.shift && self.size > 1 << shift).then_some(shift)
    }
}

impl<S: Storage> Container<S> {
    /// Whether a relayout towards extents of `1 << want` bytes would change this file, and
    /// to which extent size (log2).
    pub fn relayout_shift(&self, want: u8) -> Option<u8> {
        match &self.mode {
            Mode::Packed(p) => p.relayout_shift(want),
            Mode::Plain => None,
        }
    }

    /// Begins a relayout towards extents of `1 << want` bytes at `target` (step 1 of the
    /// module's documentation); `None` when the file is not a candidate. A superblock
    /// keeping `keep_times` (the backing file's times before anything moved them) is made
    /// durable first, unless the file keeps some already.
    pub fn plan_relayout(
        &mut self,
        target: CodecSpec,
        want: u8,
        keep_times: KeptTimes,
    ) -> Result<Option<Relayout>> {
        let Mode::Packed(p) = &mut self.mode else {
            return Ok(None);
        };
        let Some(shift) = p.relayout_shift(want) else {
            return Ok(None);
        };
        // The kept times are also what tells a step that nothing changed: any change of
        // the file drops them (`Packed::changed`, `forget_kept_times`), and writes a
        // superblock without them, so a write that left the size and the superblock as
        // they were is still seen.
        if p.kept_times.is_none() {
            p.kept_times = Some(keep_times);
            p.sb_dirty = true;
        }
        // Durable superblock (with the kept times), and nothing past the old extents.
        self.fsync()?;
        self.cut_leftovers()?;
        let Mode::Packed(p) = &self.mode else {
            return Ok(None);
        };
        let old_len = self.storage.len()?;
        // Past both halves of every extent of the old layout, not only past what the
        // backing file holds: an old half never written is still a place the old layout
        // may probe and punch (a B half a write-back leaves dirty).
        let old_end = old_len.max(p.geo().half(p.extent_count(), 0));
        let area = old_end.saturating_sub(DATA_START).div_ceil(AREA_UNIT).max(1);
        let Ok(area) = u32::try_from(area) else {
            return Ok(None); // past 4 PiB: left as it is
        };
        let plan = Relayout {
            generation: p.sb_gen,
            size: p.size,
            from: p.geo(),
            to: Geometry::new(shift, area),
            count: p.size.div_ceil(1 << shift),
            next: 0,
            target,
            done: 0,
            written_end: 0,
            checked: 0,
        };
        self.mark_past_end_stale();
        Ok(Some(plan))
    }

    /// What a plan writes lies past the current layout's last extent: this container must
    /// read it as holes and punch it before its next superblock if the file grows over it,
    /// as a container opened afresh does (`stale_from` at open). A write-back clears
    /// that mark, so it is set again before every step.
    fn mark_past_end_stale(&mut self) {
        if let Mode::Packed(p) = &mut self.mode {
            let n = p.extent_count();
            p.stale_from = Some(p.stale_from.map_or(n, |s| s.min(n)));
        }
    }

    /// Writes up to `extents` more extents of `plan`'s new layout; the last step switches
    /// the file to it (steps 2 and 3 of the module's documentation). Between steps the
    /// file may be used, changed, or closed and opened again: the plan carries what a step
    /// needs, and a step on a file that changed drops the plan ([`Step::Changed`]).
    pub fn relayout_step(&mut self, plan: &mut Relayout, extents: u64) -> Result<Step> {
        let Mode::Packed(p) = &self.mode else {
            return Ok(Step::Changed);
        };
        let as_planned = p.kept_times.is_some()
            && p.sb_gen == plan.generation
            && p.size == plan.size
            && p.geo() == plan.from
            && p.relayout_shift(plan.to.shift) == Some(plan.to.shift);
        if !as_planned {
            self.drop_relayout(plan)?;
            return Ok(Step::Changed);
        }
        // First steps: the old extents' headers, a slice at a time (the file's lock is
        // held for one slice only). An extent with no valid copy would fail the relayout
        // at every visit.
        let old_count = plan.size.div_ceil(1 << plan.from.shift);
        if plan.checked < old_count {
            let to = (plan.checked + CHECK_SLICE).min(old_count);
            for idx in plan.checked..to {
                let halves = read_halves(&self.storage, plan.from, idx)?;
                let damaged = newest_halves(&halves, Tie::First).is_empty()
                    && halves.iter().any(|h| matches!(h, Half::Invalid(_)));
                if damaged {
                    return Ok(Step::Damaged);
                }
            }
            plan.checked = to;
            return Ok(Step::Progress);
        }
        self.mark_past_end_stale();
        let end = (plan.next + extents.max(1)).min(plan.count);
        if let Err(e) = self.write_new_extents(plan, end) {
            // (An extent that does not read, say: the plan is dropped, and what it wrote
            // goes.)
            let _ = self.cut_leftovers();
            return Err(e);
        }
        if plan.next < plan.count {
            return Ok(Step::Progress);
        }
        if self.storage.len()? < plan.written_end {
            // Cut by something that did not move the generation: not what was planned.
            self.drop_relayout(plan)?;
            return Ok(Step::Changed);
        }
        self.switch_layout(plan)?;
        Ok(Step::Done(Recompressed {
            extents: plan.count,
            bytes: plan.done,
        }))
    }

    /// New extents up to (not including) `end`.
    fn write_new_extents(&mut self, plan: &mut Relayout, end: u64) -> Result<()> {
        let policy = Policy {
            codec: plan.target,
            force: true,
            dict: None,
            compressed_content: false,
        };
        while plan.next < end {
            let j = plan.next;
            let data = self.read(j << plan.to.shift, 1 << plan.to.shift)?;
            // All zeros: a hole (nothing written), as the writer makes them.
            if data.iter().any(|&b| b != 0) {
                let (half, outcome) = encode_extent(policy, false, j, 1, &data);
                if let Mode::Packed(p) = &self.mode {
                    p.stats
                        .extent(&outcome, data.len(), half.len() - EXTENT_HEADER_LEN);
                }
                let at = plan.to.half(j, 0);
                self.storage.write_at(&half, at)?;
                plan.written_end = at + half.len() as u64;
            }
            plan.done += data.len() as u64;
            plan.next += 1;
        }
        Ok(())
    }

    /// Step 3: the new extents durable, then the superblock naming them, then the old area
    /// punched.
    fn switch_layout(&mut self, plan: &Relayout) -> Result<()> {
        self.storage.sync_data()?;
        let st = &self.storage;
        let Mode::Packed(p) = &mut self.mode else {
            return Ok(());
        };
        p.synced(st)?;
        // From here until the old area is punched, a failure (a full disk at the
        // superblock write, a failed sync) leaves memory and disk possibly apart: which
        // layout is current is known again only by reading the disk. The container says
        // so (`needs_reopen`), and every later punch of an old area reads the current
        // superblock back first.
        p.needs_reopen = true;
        // Nothing cached describes the old layout any more; a read-ahead planned on it
        // is refused (the geometry and the epoch moved).
        p.exts.clear();
        p.stale_from = None;
        p.shift = plan.to.shift;
        p.area = ((plan.to.start - DATA_START) / AREA_UNIT) as u32;
        p.epoch += 1;
        p.recount();
        p.sb_dirty = true;
        p.write_superblock(st, None, true)?;
        st.sync_data()?;
        // (The older superblock copy, which describes the old layout, is punched here.)
        p.synced(st)?;
        // That punch durable before the old area's: an older copy must never outlive the
        // extents it describes (decay of the newer copy would then read holes as zeros).
        st.sync_data()?;
        st.punch(DATA_START, plan.to.start - DATA_START)?;
        p.needs_reopen = false;
        Ok(())
    }

    /// Whether this container's state may differ from the disk's (a relayout's switch
    /// failed half way): the caller drops it and opens the file again.
    pub fn needs_reopen(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.needs_reopen)
    }

    /// A plan that will not finish: what it wrote past the file's extents is cut (they
    /// are past whatever the current superblock describes, unless the file grew into
    /// them, and then the cut leaves what the file holds).
    fn drop_relayout(&mut self, plan: &Relayout) -> Result<()> {
        if plan.next > 0 {
            self.cut_leftovers()?;
        }
        Ok(())
    }

    /// Cuts backing bytes past the file's last extent (a dropped relayout's, or a
    /// truncation's that a crash interrupted), once the superblock that does not need
    /// them is durable.
    fn cut_leftovers(&mut self) -> Result<()> {
        let st = &self.storage;
        let Mode::Packed(p) = &mut self.mode else {
            return Ok(());
        };
        if p.sb_slot.is_none() || p.sb_inline || p.loc.is_some() || p.share.bytes() > 0 {
            return Ok(());
        }
        p.cut_past_last_extent(st)
    }

    /// Whether the file's old extent area (before a relayout moved it) still holds data:
    /// a crash came between the new superblock and the punch.
    pub fn old_area_left(&self) -> Result<bool> {
        let Mode::Packed(p) = &self.mode else {
            return Ok(false);
        };
        let start = p.geo().start;
        if start == DATA_START || p.sb_slot.is_none() {
            return Ok(false);
        }
        Ok(self.storage.next_data(DATA_START)?.is_some_and(|at| at < start))
    }

    /// Punches the old extent area [`Container::old_area_left`] found, once the
    /// superblock naming the new one is durable, and only when the disk's current
    /// superblock is the one this container knows (its generation and area, read back).
    /// The punch moves the backing file's times: with `keep_times`, a file that keeps
    /// none gets these kept first, made durable (as before any rewrite of the pass).
    /// Returns whether it punched.
    pub fn punch_old_area(&mut self, keep_times: Option<KeptTimes>) -> Result<bool> {
        if !self.old_area_left()? || self.needs_reopen() {
            return Ok(false);
        }
        {
            let st = &self.storage;
            let Mode::Packed(p) = &mut self.mode else {
                return Ok(false);
            };
            if !p.sb_durable || p.sb_unknown {
                st.sync_data()?;
                p.synced(st)?;
            }
            // The disk's current superblock must be the one this container knows, read
            // back before anything of ours is written.
            let on_disk = match read_head(st)? {
                Head::Container(blocks) => {
                    let copies = superblock_copies(&blocks);
                    current_superblock(&copies, Tie::First).map(|(_, sb)| (sb.generation, sb.area))
                }
                _ => None,
            };
            if on_disk != Some((p.sb_gen, p.area)) {
                return Ok(false);
            }
            if let Some(t) = keep_times {
                if p.kept_times.is_none() {
                    p.kept_times = Some(t);
                    p.sb_dirty = true;
                }
            }
        }
        self.fsync()?;
        let st = &self.storage;
        let Mode::Packed(p) = &mut self.mode else {
            return Ok(false);
        };
        // The other superblock copy may still describe the old area (both copies were
        // valid at open, so nothing marked it to go): it goes first, durably, before the
        // area it describes.
        if let Some(s) = p.sb_slot {
            st.punch(sb_offset(1 - s), BLOCK)?;
            p.sb_other_dirty = false;
            st.sync_data()?;
        }
        st.punch(DATA_START, p.geo().start - DATA_START)?;
        Ok(true)
    }
}
