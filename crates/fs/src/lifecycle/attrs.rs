//! What `stat` shows of a regular file: its size and times (the times its superblock keeps,
//! dropped before a change of metadata), what it takes in a pack, its extent size.

use std::sync::Arc;

use fuser::Errno;

use super::state::{Closed, FileSlot, Meta, Times};
use super::Files;
use crate::inode::Inode;
use crate::sys;

impl Files {
    /// The file's logical size: from its container in memory, the remembered size, or a
    /// container opened now (and kept for the `open` that usually follows a lookup); and the
    /// times set explicitly that `stat` shows rather than the backing file's (rule 7: a
    /// write-out may have moved them a moment ago, and they go back on it right after).
    ///
    /// Also the owner and mode set on it that wait in memory (rule 7), which `stat` shows.
    ///
    /// The change and modification times are those the superblock keeps when it keeps
    /// some (background recompression moved the backing file's, `SB_FLAG_TIMES`).
    pub fn size_and_times(&self, ino: u64, inode: &Arc<Inode>) -> Result<(u64, Times, Meta), Errno> {
        let mut slot = inode.file.open.lock().unwrap();
        if let Some(of) = slot.as_ref() {
            let s = of.container.size().map_err(|e| self.error(inode, "size", e))?;
            return Ok((s, of.times.over_kept(of.container.kept_times()), of.meta));
        }
        if let Some(c) = self.closed_in(inode, &mut slot) {
            return Ok((c.size(), Times::default().over_kept(c.kept()), Meta::default()));
        }
        drop(slot);
        let (s, kept) = self.with_kept(ino, inode, |c| Ok((c.size()?, c.kept_times())), "size")?;
        Ok((s, Times::default().over_kept(kept), Meta::default()))
    }

    /// Before a change through the mount that moves the backing file's ctime but not its
    /// data (an owner, mode, time, xattr or link count): times the superblock keeps go,
    /// so `stat` shows the backing file's again, with the kept modification time put on
    /// it. Costs nothing when the file is
    /// known to keep none (the usual case: a lookup came first).
    pub fn drop_kept_times(&self, inode: &Arc<Inode>) -> Result<(), Errno> {
        if !inode.is_reg {
            return Ok(());
        }
        // Looked at with the pass kept out (`FileState::share`): a chunk under way has
        // put what it kept in the state or the remembered `Closed` by then. (The pass
        // starts no chunk after the change that brings us here: `Pass::still`.)
        let known = {
            let _private = inode.file.share();
            let mut slot = inode.file.open.lock().unwrap();
            match slot.as_ref() {
                Some(of) => Some(of.container.kept_times().is_some()),
                None => self.closed_in(inode, &mut slot).map(|c| c.kept().is_some()),
            }
        };
        if known == Some(false) {
            return Ok(());
        }
        let mut opened = false;
        let r = self.with_container(
            inode,
            |c| {
                opened = true;
                let Some(kept) = c.kept_times() else { return Ok(()) };
                // The superblock (or location record) without them goes now, durably,
                // before the change the caller makes (a crash in between shows the
                // backing file's times, never kept ones beside the new metadata), and
                // nothing of ours moves the backing file's ctime after that change. The
                // modification time a superblock kept goes on the backing file: a change
                // of metadata is not one of data (a record keeps none).
                c.forget_kept_times()?;
                c.fsync()?;
                let Some((sec, nsec)) = kept.mtime else {
                    return Ok(());
                };
                let [omit, mtime] = Times {
                    mtime: Some((sec, i64::from(nsec))),
                    ..Times::default()
                }
                .timespecs();
                sys::utimens(c.storage().file(), omit, mtime)?;
                Ok(())
            },
            "kept times",
        );
        // A file whose container cannot be opened (damaged) keeps no times: its rename or
        // chmod must still work. Failing to drop times it does keep is an error.
        match r {
            Err(_) if known.is_none() && !opened => Ok(()),
            r => r,
        }
    }

    /// [`Files::drop_kept_times`] again after the change of metadata is made: a chunk of
    /// the background pass whose turn came between the first call and the change may have
    /// kept times from before it. Costs nothing when the file keeps none; an error is
    /// logged (the change itself is done).
    pub fn drop_kept_times_after(&self, inode: &Arc<Inode>) {
        let _ = self.drop_kept_times(inode);
    }

    /// What `stat` remembers of a closed file, unless a reclaim may have replaced its
    /// location record since ([`Closed::moves`]): a round that moved other files leaves
    /// it true, and it is marked true up to the count now.
    #[cfg(test)]
    pub(super) fn closed(&self, inode: &Inode) -> Option<Closed> {
        self.closed_in(inode, &mut inode.file.open.lock().unwrap())
    }

    /// [`Files::closed`] with the file's lock held (`slot`).
    fn closed_in(&self, inode: &Inode, slot: &mut FileSlot) -> Option<Closed> {
        let c = slot.closed.as_mut()?;
        if let Some(since) = c.moves() {
            let now = self.opts.packs.as_ref()?.unmoved_since(inode.key, since)?;
            c.set_moves(now);
        }
        Some(c.clone())
    }

    /// What a packed file takes on disk (`Container::packed_stored`), from its container
    /// in memory or what its closed one said; `None` when it is not packed.
    pub fn packed_stored(&self, ino: u64, inode: &Arc<Inode>) -> Result<Option<u64>, Errno> {
        let mut slot = inode.file.open.lock().unwrap();
        if let Some(of) = slot.as_ref() {
            return Ok(of.container.packed_stored());
        }
        if let Some(c) = self.closed_in(inode, &mut slot) {
            return Ok(c.stored());
        }
        drop(slot);
        self.with_kept(ino, inode, |c| Ok(c.packed_stored()), "stored size")
    }

    /// The extent size of a file whose container is in memory.
    pub fn extent_size(&self, inode: &Arc<Inode>) -> Option<u64> {
        let open = inode.file.open.lock().unwrap();
        open.as_ref().and_then(|of| of.container.extent_size())
    }
}
