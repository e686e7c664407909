//! Write-behind: a file that has held dirty extents in memory for the mount's
//! `dirty_expire=` (30 s by default) has them written out, by the housekeeping thread,
//! while its handles stay open, and its superblock committed by the group commit.
//!
//! Partial extents wait in the daemon's memory for the file's write-back (last close,
//! fsync) while the mount's dirty budget lasts (`squeezefs_container`'s `dirty.rs`), so a
//! random writer has each extent compressed once. A file kept open and left alone (a log,
//! a database) would keep them there indefinitely; as the kernel writes its dirty pages
//! back once they are 30 s old (`vm.dirty_expire_centisecs`), this writes them to the
//! backing file once they are as old as the budget's `expire`, and queues the file for the
//! group commit, which writes its superblock once they are durable (if the file has not
//! changed again meanwhile: a file still being written gets its superblock at its last
//! close). After that the bytes and the size survive a kill -9, and a power failure, with
//! no fsync of the user's; only an fsync says when.
//!
//! Left alone: a file with no handle (its last close wrote it back; what a failed
//! write-back left waits for the next change or fsync), and a file that goes to a pack at
//! its write-back (at most one extent: writing it behind would pack it once per period).

use std::sync::Arc;

use log::warn;
use squeezefs_container::DirtyBudget;

use super::commit::{self, Committer, Ticketed};
use crate::inode::Inodes;

/// What the housekeeping thread needs to write old dirty extents out.
pub struct WriteBehind {
    pub(super) inodes: Arc<Inodes>,
    pub(super) budget: Arc<DirtyBudget>,
    pub(super) committer: Arc<Committer>,
}

impl WriteBehind {
    /// Writes out the dirty extents of every open file that has held some for the
    /// budget's `expire` or longer, and queues it for the group commit. Looks at nothing
    /// while no file holds dirty bytes (the budget says so), and passes over a file whose
    /// lock is taken (a request is working on it: it comes round again at the next call).
    pub fn run(&self) {
        let expire = self.budget.expire();
        if self.budget.used() == 0 {
            return;
        }
        for inode in self.inodes.all() {
            let Ok(mut open) = inode.file.open.try_lock() else {
                continue;
            };
            let Some(of) = open.as_mut() else { continue };
            if of.handles == 0
                || of.container.goes_to_a_pack()
                || of.container.dirty_since().is_none_or(|t| t.elapsed() < expire)
            {
                continue;
            }
            let left = match of.container.write_back() {
                Ok(w) => Ticketed::from(w),
                Err(e) => {
                    // Nobody waits for this: the error waits for the file's next fsync
                    // (rule 10), logged once however often it is tried again.
                    if !inode.file.has_unreported() {
                        warn!("{}: write-behind: {e}", self.inodes.describe(&inode));
                    }
                    inode.file.lost_write(e.errno());
                    None
                }
            };
            commit::keep_times(&self.inodes, &inode, of);
            drop(open);
            if let (Some(t), Some(ino)) = (left, self.inodes.number(&inode)) {
                self.committer.push(ino, inode.clone(), t);
            }
        }
    }
}
