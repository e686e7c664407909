//! Archive-sized extents for files written whole (issue 45).
//!
//! Larger extents compress better (zstd sees more history: the W1 mix stored 2.26× with 1 MiB
//! extents against 2.10× with 128 KiB) and waste less on incompressible data (each stored
//! extent carries a 48-byte header, which costs a 4 KiB block whenever the payload fills its
//! blocks: 33 blocks for a raw 128 KiB extent, 257 for a raw 1 MiB one). Smaller extents
//! serve small random reads and writes better (a 4 KiB read decodes one extent; a 4 KiB
//! write rewrites one). Which a file wants shows in how it is written: `cp`, `tar`, a
//! download or a build write a file once, from its start to its end; a database or a VM
//! image is written at scattered offsets.
//!
//! So a file that a mount without `extent_size=` creates starts *undecided*
//! ([`Packed::grow_to`]): it has no data on disk yet (an empty file written out stays
//! undecided: its superblock or record describes no extent), and its extents stay in memory
//! even when writes cover them whole (they would otherwise go out a batch at a time). Once writes have
//! covered more than [`grow_at`] (1 MiB) from its start without a gap (whatever else arrived
//! out of order meanwhile: several FUSE threads hand over the kernel's write-back), it takes
//! the largest extent size (`grow_to`, 1 MiB) before anything is written out: its extents in
//! memory are regrouped, and from then on it is written like any file of that extent size.
//! A smaller file closed by its writer, written whole, larger than one of the mount's
//! extents, takes the large extent size too: one extent, which on a mount that packs sends
//! it to a pack (blocks of up to 1 MiB, a 48-byte header each, no block rounding). It keeps
//! the mount's extent size when it is written out before (fsynced, written behind while
//! open, the mount's dirty budget spent: a log file that grows and syncs keeps extents it
//! can rewrite cheaply), when a size change, a hole punched or a property of its own comes
//! first, or when writes covered [`give_up_at`] (8 MiB) of it elsewhere first (64 MiB, when
//! they cover all but its start: [`give_up_dense_at`]). The
//! decision is made once, in memory; nothing about it is stored (a 1 MiB extent file is a
//! version 2 container like any other), so the format does not change.
//!
//! A file regrouped this way that is later written at random offsets pays for it (a 4 KiB
//! write rewrites 1 MiB); docs/BENCHMARKS.md measures issue 29's random I/O on such a file.

use super::state::{Ext, Packed, PendingLoc};

/// A file written from its start without a gap takes the larger extent size (`to`) once
/// writes covered more than one extent of it (1 MiB); a smaller one only when its writer
/// closes it whole ([`Packed::decide_closed`]).
pub fn grow_at(to: u8) -> u64 {
    1 << to
}

/// A file still undecided once writes covered this much of it (elsewhere than from its
/// start: a sparse file, a database's scattered pages) keeps the mount's extent size: the
/// bytes an undecided file holds in memory are bounded (8 MiB for 1 MiB extents) — unless
/// they cover it densely ([`dense`]), up to [`give_up_dense_at`].
pub fn give_up_at(to: u8) -> u64 {
    8 << to
}

/// A file whose writes cover at least three quarters of it up to its end, all but its
/// start, is a sequential writer whose first WRITE is late (measured: a `cp -r` of a tree
/// onto a mount on a loop image had its first WRITE of a 25 MiB file served after 8 MiB
/// beyond it, the session thread holding it not scheduled on a busy 2-CPU machine; the
/// file kept 128 KiB extents in 1 of 3 copies). It waits for its start up to this much
/// (64 MiB for 1 MiB extents; the mount's dirty budget still decides at once when spent).
pub fn give_up_dense_at(to: u8) -> u64 {
    64 << to
}

/// Whether `covered` bytes of a file of `size` bytes are dense (see [`give_up_dense_at`]).
fn dense(covered: u64, size: u64) -> bool {
    covered.saturating_mul(4) >= size.saturating_mul(3)
}

impl Packed {
    /// Bytes writes have covered, counted over the extents in memory.
    fn covered_bytes(&self) -> u64 {
        self.exts
            .values()
            .flat_map(|e| e.covered.iter())
            .map(|&(a, b)| u64::from(b - a))
            .sum()
    }

    /// How far from the file's start writes have covered it without a gap.
    fn covered_prefix(&self) -> u64 {
        let len = self.extent_len() as u64;
        let mut end = 0;
        for (&i, e) in &self.exts {
            match e.covered.first() {
                Some(&(0, b)) if i * len == end => {
                    end += u64::from(b);
                    if u64::from(b) < len {
                        break;
                    }
                }
                _ => break,
            }
        }
        end.min(self.size)
    }

    /// Takes the decision for an undecided file (see the module): it grows once writes
    /// covered more than [`grow_at`] from its start without a gap (whatever arrived beyond,
    /// out of order); it keeps its size when a write-out is about to happen first (`now`),
    /// or once writes covered [`give_up_at`] bytes elsewhere. An empty file decides nothing.
    pub(super) fn decide_extent_size(&mut self, now: bool) {
        let Some(to) = self.grow_to else { return };
        if self.size == 0 {
            // (Nothing to decide on: an empty file written out stays undecided.)
            return;
        }
        let grow = self.covered_prefix() > grow_at(to);
        if !grow && !now {
            let covered = self.covered_bytes();
            let limit = if dense(covered, self.size) {
                give_up_dense_at(to)
            } else {
                give_up_at(to)
            };
            if covered < limit {
                return;
            }
        }
        self.grow_to = None;
        if grow {
            self.regroup(to);
        }
    }

    /// The buffer [`Packed::regroup`] built for new extent `j`, zeros to its end (`len`).
    fn set_regrouped(&mut self, built: Option<(u64, Vec<u8>)>, len: usize) {
        if let Some((j, mut buf)) = built {
            buf.resize(len, 0);
            self.exts.entry(j).or_default().data = Some(buf.into_boxed_slice().into());
        }
    }

    /// The file's last writer closed it (see [`super::Container::writer_closed`]).
    pub(super) fn decide_closed(&mut self) {
        let Some(to) = self.grow_to else { return };
        if self.size == 0 {
            return;
        }
        self.grow_to = None;
        if self.covered_prefix() == self.size && self.size > self.extent_len() as u64 {
            self.regroup(to);
        }
    }

    /// The file keeps the extent size it has (a change that is not a plain write came):
    /// the extents writes covered while it was undecided go out with the next write.
    pub(super) fn keep_extent_size(&mut self) {
        if self.grow_to.take().is_some() {
            self.held_back = true;
        }
    }

    /// Whether anything of the file's data is on disk (a superblock describing data, a
    /// record naming bytes, an extent written).
    fn data_on_disk(&self) -> bool {
        self.sb_covers
            || self.loc.is_some_and(|l| l.len > 0)
            || matches!(self.loc_pending, Some(PendingLoc::Bytes(_)))
            || self
                .exts
                .values()
                .any(|e| e.written || e.disk.is_some_and(|d| d.cur.is_some()))
    }

    /// A copy of stored extents (`copy.rs`) into a new, empty file that has not decided
    /// its extent size: it takes the source's (`to`), when larger than its own. True when
    /// its extent size is `to` afterwards.
    pub(super) fn adopt_extent_size(&mut self, to: u8) -> bool {
        if self.grow_to.is_some() && self.size == 0 && to > self.shift && !self.data_on_disk() {
            self.grow_to = None;
            self.regroup(to);
        }
        self.shift == to
    }

    /// Regroups the extents in memory into extents of `1 << to` bytes: each new extent holds
    /// the bytes, the written ranges and the dirty mark of the old ones it covers. Nothing
    /// on disk is laid out by the old size: at most an empty file's superblock or location
    /// record (a superblock describing no data, no extent ever written), which the first
    /// write-out replaces like any other.
    fn regroup(&mut self, to: u8) {
        // What makes an undecided file (every path that writes data out decides first):
        // checked anyway, since regrouping over data laid out by the old size would lose it.
        if self.data_on_disk() {
            debug_assert!(false, "regroup over data on disk");
            return;
        }
        let (from, len) = (self.shift, 1usize << to);
        let k = to - from;
        let old = std::mem::take(&mut self.exts);
        // Each new extent's buffer is built in order (the map is sorted: pieces come by
        // new extent, then by offset), zeros only between and after its pieces: a memset
        // of the whole 1 MiB first, then the copies over it, cost a sequential writer as
        // much as the copies (measured: 4 % of the daemon's time in a `cp -r`).
        let mut building: Option<(u64, Vec<u8>)> = None;
        for (i, e) in old {
            let j = i >> k;
            let at = ((i - (j << k)) << from) as usize;
            if let Some(d) = &e.data {
                if building.as_ref().is_some_and(|(b, _)| *b != j) {
                    self.set_regrouped(building.take(), len);
                }
                let (_, buf) = building.get_or_insert_with(|| (j, Vec::with_capacity(len)));
                debug_assert!(buf.len() <= at && at + d.len() <= len);
                buf.resize(at, 0);
                buf.extend_from_slice(d);
            }
            let n: &mut Ext = self.exts.entry(j).or_default();
            n.dirty |= e.dirty;
            n.last_use = n.last_use.max(e.last_use);
            for &(a, b) in &e.covered {
                n.cover(a + at as u32, b + at as u32, len as u32);
            }
        }
        self.set_regrouped(building.take(), len);
        self.shift = to;
        self.stats.extents_grown();
        // (Anything planned on the old extents, a read ahead, is for another state.)
        self.epoch += 1;
        self.recount();
    }
}
