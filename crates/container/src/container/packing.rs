//! A container's life in a pack (format 4): a file of at most one extent is stored in the
//! mount's packs ([`crate::pack`]) instead of in its own backing file, which keeps only the
//! file's location record (the xattr [`LOCATION_XATTR`]) and no data block.
//!
//! # Which state is current
//! A backing file may hold a location record and container bytes at the same time (one of
//! them left over until a sync lets it go). The record and the superblock carry generations
//! from one counter; the higher one is the file. A record with no valid superblock beside it
//! wins too: the container bytes are then a first superblock torn by a crash (a file leaves
//! its pack by cutting the backing file to zero first, so no older container can be there).
//!
//! # Crash safety (the order of writes)
//! * **Into a pack.** The bytes are appended to a pack ([`Packs::append`]) and made durable
//!   ([`Packs::durable`]) before the record naming them is set; the record is set before
//!   the container bytes it replaces are cut, and those are cut only once the record is
//!   durable (`fsync`, or the group commit's `syncfs`).
//! * **Out of a pack** (the file grew past one extent, or is written on a mount that does
//!   not pack): the backing file is cut to zero (once the record is durable: it is the file
//!   meanwhile) and the cut made durable, the container is written as a new one whose
//!   superblock outranks the record, and the record is removed once that superblock is
//!   durable. (An unsynced cut lost in a crash beside a kept new superblock would bring the
//!   old extents back at the slots the new container reads.)
//! * A record is one `setxattr`: atomic. Losing an unsynced one in a crash brings back the
//!   file's previous state (still complete on disk), never a mix.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::state::{Ext, ExtentBuf, Packed, PendingLoc};
pub(super) use crate::pack::record::read_record as read_location;
use crate::pack::{Location, Packs, Shared, LOCATION_XATTR};
use crate::storage::Storage;
use crate::{Error, Result};

/// Whether two records are of the same state of a file (reclaim moved its bytes, or
/// changed what it keeps of its times, but not its contents or generation).
fn same_file(a: &Location, b: &Location) -> bool {
    a.generation == b.generation && a.content_sum == b.content_sum && a.len == b.len
}

impl Packed {
    /// The file goes to a pack at its next write-out: packs are writable here and it fits
    /// one extent. A dictionary property does not keep it out: a solid block of many small
    /// files is its own dictionary and beats one (README, "Dictionaries"); the record keeps
    /// the property for when the file outgrows its pack.
    pub(super) fn packs_it(&self) -> bool {
        self.packs.as_ref().is_some_and(|p| p.writable()) && self.size <= self.extent_len() as u64
    }

    /// The packs (present whenever the file has a record: opening refuses it otherwise).
    fn packs(&self) -> Result<&Arc<Packs>> {
        self.packs
            .as_ref()
            .ok_or_else(|| Error::Unsupported("a packed file, but this mount has no packs".into()))
    }

    /// Loads the file's bytes into extent 0, where they stay (like an inline file's, they
    /// exist nowhere else the container could find them again): from the slot a write-back
    /// handed them to, while its record waits, else from the pack its record names.
    pub(super) fn load_packed<S: Storage>(&mut self, st: &S) -> Result<()> {
        if !self.loc_unloaded {
            return Ok(());
        }
        let bytes = match &self.loc_pending {
            Some(PendingLoc::Bytes(slot)) => Shared::Copy(self.packs()?.read_slot(slot)?),
            Some(PendingLoc::Empty) => Shared::Copy(Vec::new()),
            None => {
                let loc = self.loc.expect("an unloaded packed file has a record or a slot");
                match self.packs()?.read_shared(&loc) {
                    Ok(b) => b,
                    Err(e) => match self.relocated(st, &loc)? {
                        // Reclaim moved the bytes (same generation and checksum) since
                        // this container read its record, and removed the old pack.
                        Some((moved, moves)) => {
                            self.pin = Some(self.packs()?.pin(moved.pack));
                            let b = self.packs()?.read_shared(&moved)?;
                            self.loc = Some(moved);
                            self.loc_moves = moves;
                            // (The same state of the file: a change since still counts.)
                            b
                        }
                        None => return Err(e),
                    },
                }
            }
        };
        // Only the file's bytes: a short clean buffer (`Ext::data`), no extent to zero; a
        // file that is all of its block holds the cached block itself.
        let keep = (self.size as usize).min(self.extent_len());
        let buf: ExtentBuf = match bytes {
            Shared::Block(b) if b.len() <= keep => b.into(),
            Shared::Block(b) => Box::<[u8]>::from(&b[..keep]).into(),
            Shared::Copy(mut v) => {
                v.truncate(keep);
                v.into_boxed_slice().into()
            }
        };
        let clock = self.tick();
        self.exts.insert(
            0,
            Ext {
                data: Some(buf),
                last_use: clock,
                ..Ext::default()
            },
        );
        self.recount();
        self.loc_unloaded = false;
        self.pin = None;
        Ok(())
    }

    /// The record on disk, when it names the same bytes as `loc` somewhere else (reclaim
    /// moved them), and [`Packs::moves`] as it was read.
    fn relocated<S: Storage>(&self, st: &S, loc: &Location) -> Result<Option<(Location, u64)>> {
        let packs = self.packs()?;
        let _records = packs.records().read().unwrap();
        let moves = packs.moves();
        Ok(read_location(st)?
            .filter(|l| l != loc && same_file(l, loc))
            .map(|l| (l, moves)))
    }

    /// The current record, when the file is packed, unchanged since, and nothing waits to
    /// replace it.
    fn current_loc(&self) -> Option<Location> {
        self.loc
            .filter(|_| !self.loc_stale && self.loc_pending.is_none() && self.loc_epoch == self.epoch)
    }

    /// The change time `stat` shows for a packed file instead of its backing file's
    /// ([`Location::kept_ctime`]), from the record on disk when a reclaim may have replaced
    /// it since this container read it (`None`: the backing file's; also when the file
    /// is not packed).
    pub(super) fn record_ctime<S: Storage>(&self, st: &S) -> Option<(i64, u32)> {
        let loc = self.current_loc()?;
        let packs = self.packs.as_ref()?;
        if unmoved(packs, st, self.loc_moves).is_some() {
            return loc.kept_ctime_parts();
        }
        let _records = packs.records().read().unwrap();
        match read_location(st) {
            Ok(Some(l)) if same_file(&l, &loc) => l.kept_ctime_parts(),
            _ => loc.kept_ctime_parts(),
        }
    }

    /// Drops the change time the record keeps (the caller is about to change the file's
    /// metadata, which moves the backing file's): the record on disk, moved by a reclaim
    /// or not, is written again without it. Made durable by the next `fsync`.
    pub(super) fn forget_record_ctime<S: Storage>(&mut self, st: &S) -> Result<()> {
        let Some(loc) = self.current_loc() else {
            return Ok(());
        };
        let packs = self.packs()?.clone();
        let _records = packs.records().read().unwrap();
        let moves = packs.moves();
        let on_disk = if unmoved(&packs, st, self.loc_moves).is_some() {
            Some(loc)
        } else {
            read_location(st)?.filter(|l| same_file(l, &loc))
        };
        let Some(mut l) = on_disk else {
            return Ok(());
        };
        if l.kept_ctime.take().is_some() {
            st.set_xattr(LOCATION_XATTR, &l.encode())?;
            self.loc_durable = false;
        }
        if self.loc_unloaded && l.pack != loc.pack {
            self.pin = Some(packs.pin(l.pack));
        }
        self.loc = Some(l);
        self.loc_moves = moves;
        Ok(())
    }

    /// Write-out into a pack: the bytes go to the packs now, the record once they are
    /// durable ([`Packed::commit_location`]); with `defer` that is left to the caller's
    /// commit (returns true).
    pub(super) fn flush_packed<S: Storage>(&mut self, st: &S, defer: bool) -> Result<bool> {
        self.load_packed(st)?;
        let len = self.size as usize;
        let pending = if len == 0 {
            PendingLoc::Empty
        } else {
            // From memory, the pack, or the file's extent on disk (a container shrunk to
            // one extent).
            let mut data = Vec::with_capacity(len);
            self.append_bytes(st, 0, 0, len, &mut data)?;
            // At the file's codec, never the adaptive level: pack groups are keyed by codec and
            // level, and a moving level would keep one half-filled block open per level. An
            // already-compressed small file (PNG, GIF, gzip, …) is not sniffed: its block is
            // compressed once for many files, and small files of those kinds compress well
            // together (measured on the mixed corpus: 17-79 % by kind, FORMAT "Storage rules").
            PendingLoc::Bytes(self.packs()?.append(self.codec, self.shift, &data)?)
        };
        // The slot keeps the bytes until the record is set (`load_packed` reads them back
        // from it), so the file drops its extent-sized copy now: thousands of small files
        // waiting for a group commit cost their own bytes, not an extent each. Nothing of
        // the file is in the backing file's extent slots any more.
        self.exts.clear();
        self.recount();
        self.loc_unloaded = len > 0;
        self.stale_from = Some(0);
        self.sb_dirty = false;
        self.loc_pending = Some(pending);
        self.stats.packed_file();
        if defer {
            return Ok(true);
        }
        self.commit_location(st)?;
        Ok(false)
    }

    /// Sets the record for the bytes [`Packed::flush_packed`] handed over, once they are
    /// durable in their pack. The container bytes it replaces are cut once it is durable.
    pub(super) fn commit_location<S: Storage>(&mut self, st: &S) -> Result<()> {
        let Some(pending) = self.loc_pending.clone() else {
            return Ok(());
        };
        let (pack, block, offset, len, sum) = match &pending {
            PendingLoc::Empty => (0, 0, 0, 0, xxhash_rust::xxh3::xxh3_64(&[])),
            PendingLoc::Bytes(slot) => match self.packs()?.durable(slot) {
                Ok(p) => (p.pack, p.block, p.offset, slot.len, slot.sum),
                Err(e) => {
                    // Its block is lost or not durable: the bytes come back from the slot
                    // and go to the packs again at the next write-out.
                    self.load_packed(st)?;
                    if let Some(x) = self.exts.get_mut(&0) {
                        x.dirty = true;
                    }
                    self.recount();
                    self.loc_pending = None;
                    self.sb_dirty = true;
                    return Err(e);
                }
            },
        };
        let (_, props) = self.sb_flags_and_props();
        let rec = Location {
            props,
            codec: self.codec,
            extent_shift: self.shift,
            pack,
            block,
            offset,
            len,
            generation: self.sb_gen + 1,
            content_sum: sum,
            dict_id: self.dict.unwrap_or(0),
            // Written for a change of the file: the backing file's ctime is the file's.
            kept_ctime: None,
        };
        {
            let packs = self.packs()?.clone();
            let _records = packs.records().read().unwrap();
            st.set_xattr(LOCATION_XATTR, &rec.encode())?;
            self.loc_moves = packs.moves();
            self.loc_epoch = self.epoch;
            packs.counters.records_changed.fetch_add(1, Ordering::Relaxed);
            if len > 0 {
                packs.counters.slots_recorded.fetch_add(1, Ordering::Relaxed);
            }
            if self.loc.as_ref().is_some_and(|l| l.len > 0) {
                // The bytes the old record named are nobody's now.
                packs.note_garbage();
            }
        }
        // The slot kept the pack from reclaim until now; while the bytes are not loaded
        // the pin does.
        self.pin = (self.loc_unloaded && len > 0)
            .then(|| self.packs().map(|p| p.pin(pack)))
            .transpose()?;
        self.sb_gen += 1;
        self.loc = Some(rec);
        self.loc_durable = false;
        self.loc_stale = false;
        self.loc_pending = None;
        // Whatever the backing file holds (superblocks, extents, a plain file's bytes) is
        // no longer the file: cut once the record is durable.
        self.backing_stale = st.len()? > 0;
        self.sb_slot = None;
        self.sb_anchored = false;
        self.sb_covers = false;
        self.sb_durable = false;
        self.sb_unknown = false;
        self.sb_other_dirty = false;
        self.sb_inline = false;
        self.unsynced = false;
        Ok(())
    }

    /// Before the file is written as a container again: its bytes are loaded, the backing
    /// file's leftovers cut (after making the record durable: it is the file until the new
    /// superblock is), and the record marked for removal once that superblock is durable.
    pub(super) fn leave_pack<S: Storage>(&mut self, st: &S) -> Result<()> {
        self.load_packed(st)?;
        if self.loc_pending.take().is_some() {
            // Bytes handed to a pack but never named by a record: garbage there.
            self.sb_dirty = true;
        }
        if self.loc.is_none() || self.loc_stale {
            return Ok(());
        }
        if self.backing_stale {
            if !self.loc_durable {
                st.sync_all()?;
                self.loc_durable = true;
            }
            st.set_len(0)?;
            self.backing_stale = false;
        }
        // The cut durable before any byte of the new container: superblocks outrank the
        // record, and the old extents sit at the slots the new one reads. Always, not only
        // after a cut this container made: an earlier open, or a fsync of this one
        // (`synced_all`), may have cut without a sync since, and a group commit's settle
        // may run after such a cut with a sync from before it.
        st.sync_data()?;
        self.loc_stale = true;
        if let (Some(l), Some(p)) = (&self.loc, &self.packs) {
            // Its bytes are nobody's once the superblock replaces the record: told now,
            // not only when the record is removed (the container may be dropped first,
            // leaving a stale record the walk counts as garbage).
            if l.len > 0 {
                p.note_garbage();
            }
        }
        self.sb_dirty = true;
        Ok(())
    }

    /// After a sync that covered metadata too (`fsync`, `syncfs`): the record is durable, so
    /// what it replaced in the backing file goes.
    pub(super) fn synced_all<S: Storage>(&mut self, st: &S) -> Result<()> {
        self.synced(st)?;
        if self.loc.is_some() && !self.loc_stale {
            self.loc_durable = true;
            if self.backing_stale {
                st.set_len(0)?;
                self.backing_stale = false;
            }
        }
        Ok(())
    }

    /// Once the superblock that replaced a record is durable, the record goes.
    pub(super) fn drop_stale_location<S: Storage>(&mut self, st: &S) -> Result<()> {
        if self.loc_stale && self.sb_slot.is_some() && self.sb_durable {
            let packs = self.packs.clone();
            let _records = packs.as_ref().map(|p| p.records().read().unwrap());
            st.remove_xattr(LOCATION_XATTR)?;
            if let Some(p) = &packs {
                p.counters.records_changed.fetch_add(1, Ordering::Relaxed);
                if self.loc.as_ref().is_some_and(|l| l.len > 0) {
                    p.note_garbage();
                }
            }
            self.loc_stale = false;
            self.loc = None;
            self.loc_durable = false;
        }
        Ok(())
    }

    /// Whether something written waits for a sync before what it replaced can go.
    pub(super) fn location_unsettled(&self) -> bool {
        self.backing_stale || self.loc_stale || (self.loc.is_some() && !self.loc_durable)
    }

    /// Something waits for a settle: replaced copies, or the location record's state.
    pub(super) fn unsettled(&self) -> bool {
        self.copies_unsettled() || self.location_unsettled()
    }

    /// Container copies the written ones replaced (the older superblock, old extent halves)
    /// are still on disk, waiting for a settle.
    pub(super) fn copies_unsettled(&self) -> bool {
        self.sb_other_dirty || self.exts.values().any(|e| e.disk.is_some_and(|d| d.other_dirty))
    }
}

/// [`Packs::unmoved_since`] for the backing file `st` (its identity unknown: moved).
fn unmoved<S: Storage>(packs: &Packs, st: &S, since: u64) -> Option<u64> {
    if packs.moves() == since {
        return Some(since);
    }
    packs.unmoved_since(st.identity().ok()??, since)
}
