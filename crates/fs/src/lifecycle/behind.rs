//! Write-behind: a file that has held dirty extents in memory for the mount's
//! `dirty_expire=` (30 s by default) has them written out, by the housekeeping thread,
//! while its handles stay open.
//!
//! Partial extents wait in the daemon's memory for the file's write-back (last close,
//! fsync) while the mount's dirty budget lasts (`squeezefs_container`'s `dirty.rs`), so a
//! random writer has each extent compressed once. A file kept open and left alone (a log,
//! a database) would keep them there indefinitely; as the kernel writes its dirty pages
//! back once they are 30 s old (`vm.dirty_expire_centisecs`), this writes them to the
//! backing file once they are as old as the budget's `expire`. As with the kernel, that makes them safe from
//! the daemon's death (kill -9, the OOM killer), not from a power failure: only fsync does
//! that (rule 4).

use std::sync::Arc;

use log::warn;
use squeezefs_container::DirtyBudget;

use super::commit;
use crate::inode::Inodes;

/// What the housekeeping thread needs to write old dirty extents out.
pub struct WriteBehind {
    pub(super) inodes: Arc<Inodes>,
    pub(super) budget: Arc<DirtyBudget>,
}

impl WriteBehind {
    /// Writes out the dirty extents of every file that has held some for the budget's
    /// `expire` or longer; returns how many files it wrote. Looks at nothing while no file holds dirty
    /// bytes (the budget says so), and passes over a file whose lock is taken (a request
    /// is working on it: it comes round again at the next call).
    pub fn run(&self) -> usize {
        let expire = self.budget.expire();
        if self.budget.used() == 0 {
            return 0;
        }
        let mut written = 0;
        for inode in self.inodes.all() {
            let Ok(mut open) = inode.file.open.try_lock() else {
                continue;
            };
            let Some(of) = open.as_mut() else { continue };
            if of.container.dirty_since().is_none_or(|t| t.elapsed() < expire) {
                continue;
            }
            // The file has a handle (a file without one holds nothing dirty: its last
            // close wrote it back), so a superblock this leaves pending is committed after
            // the last close's write-back (rule 1), as for a WRITE that writes out.
            match of.container.write_back() {
                Ok(_) => written += 1,
                Err(e) => {
                    // Nobody waits for this: the error waits for the file's next fsync
                    // (rule 10), and the kernel's cache of it is no longer trusted (rule 8).
                    warn!("{}: write-behind: {e}", self.inodes.describe(&inode));
                    inode.file.suspect_cache();
                    inode.file.lost_write(e.errno());
                }
            }
            commit::keep_times(&self.inodes, &inode, of);
        }
        written
    }
}
