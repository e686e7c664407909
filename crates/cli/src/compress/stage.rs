//! Files `compress` writes offline, committed a batch at a time the way a mount's group
//! commit does, so packed files share solid blocks and a batch costs two `syncfs`:
//! 1. each file is written back without waiting ([`Container::write_back`]): extents, or
//!    its bytes handed to the packs;
//! 2. open pack blocks are written ([`Packs::seal_all`]), one `syncfs` makes all of it
//!    durable ([`Packs::synced`]);
//! 3. each file commits ([`Staged::commit`]): its superblock, or its location record;
//! 4. a second `syncfs` makes those durable; then copies are renamed over their files and
//!    files packed in place drop the container bytes the record replaced
//!    ([`Staged::finish`]), and get their times back.
//!
//! Interrupted anywhere, every file is as it was or as rewritten: a copy is not renamed
//! before its superblock or record is durable, and a file packed in place keeps its old
//! container until its record is.

use std::fs::File;
use std::os::unix::fs::MetadataExt;

use squeezefs_container::{Container, FileStorage, Ticket, WriteBack};
use squeezefs_fs::sys;

/// A file written back, waiting for the batch's syncs.
pub(in crate::compress) struct Staged {
    c: Container<FileStorage>,
    ticket: Option<Ticket>,
    /// The file whose times are put back at the end, and those times.
    file: File,
    times: (libc::timespec, libc::timespec),
}

fn ts(s: i64, ns: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: s,
        tv_nsec: ns,
    }
}

impl Staged {
    /// Writes `c` back; `file` (the same file) gets the times of `times_of` at the end.
    pub(in crate::compress) fn new(
        mut c: Container<FileStorage>,
        file: File,
        times_of: &std::fs::Metadata,
    ) -> Result<Staged, String> {
        let ticket = match c.write_back().map_err(|e| e.to_string())? {
            WriteBack::Commit(t) => Some(t),
            WriteBack::Settle(_) | WriteBack::Done => None,
        };
        Ok(Staged {
            c,
            ticket,
            file,
            times: (
                ts(times_of.atime(), times_of.atime_nsec()),
                ts(times_of.mtime(), times_of.mtime_nsec()),
            ),
        })
    }

    /// After the first sync: the superblock or record that waited for it.
    pub(in crate::compress) fn commit(&mut self) -> Result<(), String> {
        if let Some(t) = self.ticket.take() {
            self.c.commit(t).map_err(|e| e.to_string())?;
        }
        if self.c.commit_pending() {
            return Err("its commit is still pending after the sync (it changed meanwhile?)".into());
        }
        Ok(())
    }

    /// After the second sync: what the commit replaced goes, and the times come back.
    pub(in crate::compress) fn finish(mut self) -> Result<(), String> {
        let t = self.c.ticket();
        self.c.settle(t).map_err(|e| e.to_string())?;
        sys::utimens(&self.file, self.times.0, self.times.1)
            .map_err(|e| format!("putting its times back: {e}"))
    }
}
