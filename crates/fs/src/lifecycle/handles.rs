//! Handles coming and going: a handle attached to the shared container (or a lazy one,
//! rule 9), a new file's first handle, and the last close's write-back queued for the group
//! commit (rule 1 of [`state`](super::state)).

use std::sync::Arc;

use fuser::Errno;
use squeezefs_container::{Container, FileStorage};

use super::commit::{self, Ticketed};
use super::state::{Closed, OpenFile};
use super::Files;
use crate::inode::Inode;
use crate::readahead;

impl Files {
    /// Whether a handle open for writing exists (the kernel may hold unwritten data).
    pub fn has_writers(&self, inode: &Arc<Inode>) -> bool {
        let open = inode.file.open.lock().unwrap();
        open.as_ref().is_some_and(|of| of.writers > 0)
    }

    /// A new handle on a regular file: shares the container in memory (opening it for the
    /// first handle), and truncates it for O_TRUNC.
    pub fn attach(&self, inode: &Arc<Inode>, truncate: bool, writable: bool) -> Result<(), Errno> {
        let mut open = inode.file.open.lock().unwrap();
        if writable || truncate {
            // A writer may change the kernel's pages: no store may be under way (rule 11).
            // Returns at once for the FUSE handlers, which came through `hold_spills`.
            open = self.wait_spills(inode, open);
            open.stored_ahead = false;
        }
        let of = match open.as_mut() {
            Some(of) => {
                of.handles += 1;
                of
            }
            None => open.insert(OpenFile::new(self.open_container(inode)?, 1, 0)),
        };
        of.writers += u32::from(writable);
        if truncate {
            // A change of the data (rule 7).
            of.times = of.times.forgotten(of.meta.is_set());
            of.container
                .set_size(0)
                .map_err(|e| self.error(inode, "truncate", e))?;
        }
        Ok(())
    }

    /// A read-only handle on a file with no state: counted, nothing opened (rule 9).
    /// Returns false when the file has a state (the caller attaches instead).
    pub fn open_lazy(&self, inode: &Arc<Inode>) -> bool {
        let mut open = inode.file.open.lock().unwrap();
        if open.is_some() {
            return false;
        }
        open.lazy += 1;
        true
    }

    /// The close of a handle [`Files::open_lazy`] made.
    pub fn release_lazy(&self, inode: &Arc<Inode>) {
        let mut open = inode.file.open.lock().unwrap();
        // (Each handle `open_lazy` counted is released once.)
        open.lazy = open.lazy.saturating_sub(1);
        if let Some(of) = open.as_mut() {
            readahead::finish(of);
        }
    }

    /// The first handle of a file just created, with the container made for it (nothing
    /// read back); a handle racing in meanwhile keeps the container it opened.
    pub fn attach_new(&self, inode: &Arc<Inode>, container: Container<FileStorage>) {
        let mut open = inode.file.open.lock().unwrap();
        open.stored_ahead = false;
        match open.as_mut() {
            Some(of) => {
                of.handles += 1;
                of.writers += 1;
            }
            None => **open = Some(OpenFile::new(container, 1, 1)),
        }
    }

    /// A handle goes (rule 1 of [`state`](super::state) for the last one).
    pub fn release(&self, ino: u64, inode: &Arc<Inode>, writable: bool) -> Result<(), Errno> {
        // The last handle's write-back would compress the extents of a batch being
        // compressed after its WRITE's answer a second time: those end first.
        self.wait_batches(inode, true);
        let mut open = inode.file.open.lock().unwrap();
        let Some(of) = open.as_mut() else {
            return Ok(());
        };
        of.handles -= 1;
        if writable {
            of.writers = of.writers.saturating_sub(1);
        }
        if of.handles > 0 {
            // Owner and mode wait only while the file has a writer (rule 7).
            if of.writers == 0 && of.meta.is_set() {
                self.keep_times(inode, of);
            }
            return Ok(());
        }
        // Owner and mode waiting (rule 7) first, before the write-back: measured, a
        // `tar -x` then sends no SETATTR of the kernel's own mtime for the next file, which it
        // sent for nearly every file when they went on after the write-back (the backing
        // changes of this RELEASE, which nobody waits for, then overlap that file's create
        // and first write, and its write finds the clock moved: docs/BENCHMARKS.md).
        if let Err(e) = of.apply_meta() {
            commit::lost_meta(&self.inodes, inode, &e);
        }
        // Its writer is done: a new file written whole decides its extent size now.
        of.container.writer_closed();
        let written = of.container.write_back().map(Ticketed::from);
        self.keep_times(inode, of);
        match written {
            // A superblock to commit, or old copies to remove once a sync covers what
            // replaced them (a rewritten small file's older superblock copy): the group
            // commit does both.
            Ok(Some(left)) => {
                of.container.drop_cache();
                drop(open);
                self.committer.push(ino, inode.clone(), left);
                Ok(())
            }
            res => {
                open.closed = Closed::of(&of.container);
                **open = None;
                drop(open);
                // A FORGET that came while the file was open kept the inode; it goes now
                // (a RELEASE handed on is answered before this runs, so the kernel may
                // have forgotten the inode meanwhile: `ops/closer.rs`).
                self.inodes.forget(ino, 0);
                // RELEASE's answer reaches nobody: the error waits for the next fsync
                // (rule 10).
                res.map(|_| ()).map_err(|e| {
                    let errno = self.error(inode, "write-out at the last close", e);
                    inode.file.lost_write(errno.code());
                    errno
                })
            }
        }
    }
}
