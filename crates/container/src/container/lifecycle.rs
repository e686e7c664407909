//! How a change to a container becomes durable, in one vocabulary: [`Container::write_back`]
//! returns a [`WriteBack`] whose [`Ticket`] says what is left to do after a sync —
//! [`Container::commit`] the pending superblock, or [`Container::settle`] (remove the
//! copies the new state replaced). The caller (the FUSE layer's group commit) syncs many
//! files at once and then redeems their tickets.
//!
//! # The states of a change
//! A backing file without the container magic is *plain*: every operation goes straight to
//! the storage, and `write_back` returns [`WriteBack::Done`]. For a container:
//!
//! 1. **Dirty.** `write`, `set_size`, `punch_hole` (of a non-empty range) and the property
//!    setters change the file in memory and advance its state (a new [`Ticket`] value).
//!    Partial extents stay dirty in memory ([`Container::dirty_bytes`]); extents writes
//!    covered entirely, once [`crate::WRITE_BATCH`] of them wait, and all of the file's
//!    dirty extents once the mount's dirty budget is spent (`dirty.rs`), are compressed (in
//!    parallel) and written at once (to the half that does not hold the last durable copy) — written, not durable, and not yet described by a
//!    superblock.
//! 2. **Written back.** `write_back` writes every dirty extent (and punches what the file no
//!    longer uses). An inline file's data is in its superblock, which is written at once; so
//!    is the superblock of a file that wrote nothing since its last sync. Otherwise the new
//!    superblock must wait until the extents are durable: it is left *pending* and
//!    `write_back` returns [`WriteBack::Commit`] ([`Container::commit_pending`]). Until it
//!    is written the file on disk is its previous version (or empty, for a new file).
//! 3. **Committed.** Once every write made so far is durable (the caller's `fdatasync`, or
//!    one `syncfs` for many files), [`Container::commit`] writes the pending superblock —
//!    only if the file has not changed since the ticket was issued; otherwise it returns
//!    `None`, the superblock stays pending and the caller must `write_back` again.
//!    Committing first does the post-sync bookkeeping (the extents are durable, the halves
//!    they replaced are punched), and returns the ticket to settle with.
//! 4. **Settled.** The new superblock copy is written but not known durable; the older copy
//!    (and any replaced halves) must stay until it is ([`WriteBack::Settle`] when
//!    `write_back` wrote everything but such copies wait). After a sync covering the
//!    ticket's state, [`Container::settle`] punches them — only if the file has not changed
//!    since, nothing is pending and nothing is dirty; otherwise it does nothing.
//!
//! [`Container::flush`] does 2 and 3 with its own `sync_data` in between (and drops any
//! pending state); it is ordering, not durability. [`Container::fsync`] is `flush`,
//! `sync_data`, then 4: afterwards everything is durable and settled.
//! [`Container::drop_cache`] only forgets clean cached extents.

use super::state::Packed;
use super::{Container, Mode};
use crate::storage::Storage;
use crate::Result;

/// A state of the file (its epoch, in this container instance): what a commit or a settle
/// was promised for. Redeeming a ticket for a state the file has since left does nothing,
/// and so does redeeming it on another container of the same file (opened after this one
/// was dropped, its epochs counting from 0 again: a ticket left queued by an earlier
/// write-back must not commit or settle what the new one wrote).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    epoch: u64,
    instance: u64,
}

impl Ticket {
    fn of(p: &Packed) -> Ticket {
        Ticket {
            epoch: p.epoch,
            instance: p.instance,
        }
    }
}

/// What [`Container::write_back`] leaves to do once a sync covers what it wrote.
#[must_use = "a pending superblock or replaced copies wait for the caller's sync"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteBack {
    /// Nothing: the file on disk is complete and nothing it replaced waits.
    Done,
    /// Everything is written, but replaced copies (the older superblock copy, old extent
    /// halves) may only be removed after a sync: then [`Container::settle`].
    Settle(Ticket),
    /// The new superblock waits for the extents to be durable: after a sync,
    /// [`Container::commit`].
    Commit(Ticket),
}

impl WriteBack {
    /// Whether the caller has anything left to do after a sync.
    pub fn is_done(self) -> bool {
        self == WriteBack::Done
    }
}

impl<S: Storage> Container<S> {
    /// The file's last writer closed it (call before its write-back): a new file written
    /// whole from its start, larger than one extent of the mount's size and not yet
    /// written out, takes the large extent size (`grow.rs`). Nothing is written here.
    pub fn writer_closed(&mut self) {
        if let Mode::Packed(p) = &mut self.mode {
            p.decide_closed();
        }
    }

    /// Writes everything dirty and the superblock, in crash-safe order. Not a durability
    /// promise by itself (see [`Container::fsync`]): after a crash the file is either as
    /// before or as written, never a mix of a new size with missing data.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.mode {
            Mode::Plain => Ok(()),
            Mode::Packed(p) => {
                p.flush(&self.storage, false)?;
                // What was written out stays cached up to the cache's budget only.
                p.trim_cache();
                // A record a deferred write-back left for the commit is set now.
                p.commit_location(&self.storage)?;
                p.pending = None;
                Ok(())
            }
        }
    }

    /// [`Container::flush`] without waiting for the disk: everything dirty is written; a
    /// superblock that must follow a sync is left pending ([`WriteBack::Commit`]), and
    /// copies it replaced that must outlive a sync are reported ([`WriteBack::Settle`]).
    pub fn write_back(&mut self) -> Result<WriteBack> {
        match &mut self.mode {
            Mode::Plain => Ok(WriteBack::Done),
            Mode::Packed(p) => {
                let pending = p.flush(&self.storage, true)?;
                p.trim_cache();
                p.pending = pending.then_some(p.epoch);
                Ok(if pending {
                    WriteBack::Commit(Ticket::of(p))
                } else if p.unsettled() {
                    WriteBack::Settle(Ticket::of(p))
                } else {
                    WriteBack::Done
                })
            }
        }
    }

    /// Writes the superblock `write_back` left pending for `ticket`. Call only once every
    /// write made before it is durable. Returns the ticket to [`Container::settle`] with
    /// after the next sync, or `None`, doing nothing, when nothing is pending or the file
    /// changed since (then `write_back` again).
    pub fn commit(&mut self, ticket: Ticket) -> Result<Option<Ticket>> {
        match &mut self.mode {
            Mode::Packed(p) if p.pending == Some(p.epoch) && ticket == Ticket::of(p) => {
                p.pending = None;
                if p.loc_pending.is_some() {
                    // The caller's sync covered the backing file, not necessarily the
                    // pack: `commit_location` makes sure of that itself.
                    p.commit_location(&self.storage)?;
                } else {
                    p.synced(&self.storage)?;
                    p.write_superblock(&self.storage, None, true)?;
                    p.stale_from = None;
                }
                Ok(Some(Ticket::of(p)))
            }
            _ => Ok(None),
        }
    }

    /// The file's current state, as a ticket (what a commit or settle now would be for).
    pub fn ticket(&self) -> Ticket {
        match &self.mode {
            Mode::Packed(p) => Ticket::of(p),
            Mode::Plain => Ticket {
                epoch: 0,
                instance: 0,
            },
        }
    }

    /// After a sync that covers everything this container wrote up to `ticket` (a group
    /// commit's second `syncfs`): that is durable now, so what it replaced goes — the
    /// older superblock copy and old extent halves. Does nothing when the file changed
    /// since (what was written since may not be durable).
    pub fn settle(&mut self, ticket: Ticket) -> Result<()> {
        // The share counts exactly the dirty extents whenever a method returns.
        debug_assert!(match &self.mode {
            Mode::Packed(p) => (p.share.bytes() > 0) == p.exts.values().any(|e| e.dirty),
            Mode::Plain => true,
        });
        match &mut self.mode {
            Mode::Packed(p) if ticket == Ticket::of(p) && p.pending.is_none() && p.share.bytes() == 0 => {
                p.synced_all(&self.storage)
            }
            _ => Ok(()),
        }
    }

    /// Whether a superblock is waiting for [`Container::commit`].
    pub fn commit_pending(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.pending.is_some())
    }

    /// Whether container copies the written ones replaced wait for [`Container::settle`]
    /// (an older superblock copy, old extent halves): dropping the container now would keep
    /// them on disk until the file is written again. (Not a packed file's record still to
    /// be known durable, which every packed file opened has: nothing is kept by dropping it.)
    pub fn settle_pending(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.copies_unsettled())
    }

    /// Drops every clean cached extent (memory of a file nobody has open).
    pub fn drop_cache(&mut self) {
        if let Mode::Packed(p) = &mut self.mode {
            p.trim_cache_to(0);
        }
    }

    /// [`Container::flush`], then makes everything durable.
    pub fn fsync(&mut self) -> Result<()> {
        self.flush()?;
        match &mut self.mode {
            // A location record is metadata: `fdatasync` need not write it.
            Mode::Packed(p) if p.loc.is_some() => {
                self.storage.sync_all()?;
                p.synced_all(&self.storage)?;
            }
            Mode::Packed(p) => {
                self.storage.sync_data()?;
                p.synced_all(&self.storage)?;
            }
            Mode::Plain => self.storage.sync_data()?,
        }
        Ok(())
    }

    /// Bytes of logical data held dirty in memory.
    pub fn dirty_bytes(&self) -> usize {
        match &self.mode {
            Mode::Plain => 0,
            Mode::Packed(p) => p.dirty_bytes(),
        }
    }

    /// Decompressed bytes held in memory, dirty and clean (a walk of the extent cache: for
    /// tests and diagnostics, not for every request).
    pub fn cached_bytes(&self) -> usize {
        match &self.mode {
            Mode::Plain => 0,
            Mode::Packed(p) => p
                .exts
                .values()
                .filter_map(|e| e.data.as_ref())
                .map(|d| d.len())
                .sum(),
        }
    }

    /// Whether its next write-back puts it in a pack (a file of at most one extent on a
    /// mount that packs): a write-back before its last close would pack it again later.
    pub fn goes_to_a_pack(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.packs_it())
    }

    /// Since when the file has held dirty bytes in memory (none: it holds none), for a
    /// write-behind of the ones held too long.
    pub fn dirty_since(&self) -> Option<std::time::Instant> {
        match &self.mode {
            Mode::Plain => None,
            Mode::Packed(p) => p.share.since(),
        }
    }
}
