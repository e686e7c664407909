//! READ and WRITE through the lifecycle: a write written out at once when asked (rule
//! 10), a read through the file's state or a container kept for the reads that follow (rule
//! 9), with the rest of its extent to spill (rule 11), and the end of a reader.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fuser::Errno;
use squeezefs_container::ReadBytes;

use super::access::Change;
use super::{Files, Spill};
use crate::inode::Inode;
use crate::readahead;

/// Batches compressed after their WRITE's answer at once, on the whole mount: one per
/// core.
fn max_batches() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How long a last close or an fsync waits for batches of the file being compressed
/// (`finish_write` waits for nothing a session thread provides: they end).
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A WRITE's batch to compress after its answer ([`Files::write`]). However it ends —
/// finished, or dropped unfinished (its extents stay dirty: the next write-out takes
/// them) — the file's count of batches goes down and a last close waiting for it wakes.
pub struct WriteLater {
    inode: Arc<Inode>,
    batch: Option<squeezefs_container::Batch>,
    /// The mount's count of batches after their answer ([`Files::batches`]).
    mount: Arc<AtomicUsize>,
}

impl Drop for WriteLater {
    fn drop(&mut self) {
        self.mount.fetch_sub(1, Ordering::AcqRel);
        if let Some(of) = self
            .inode
            .file
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            of.batches = of.batches.saturating_sub(1);
        }
        self.inode.file.changed.notify_all();
    }
}

impl Files {
    /// A WRITE; with `write_out`, an open file's extents are written out at once, partial
    /// last one included, so that an error reaches this WRITE rather than the write-out at
    /// the last close, which nobody waits for (rule 10). A file with no handle is written
    /// back by [`Files::change_data`] anyway (rule 2).
    ///
    /// A batch of covered extents due to go out (`container/batch.rs`) is returned instead
    /// of compressed here, for [`Files::finish_write`] after the WRITE is answered: the
    /// kernel then ends the pages' writeback at once, and a writer closing the file (whose
    /// close waits for its writeback) or writing on goes on while the batch compresses.
    /// With `write_out`, it is compressed and written here, before the answer.
    pub fn write(
        &self,
        inode: &Arc<Inode>,
        offset: u64,
        data: &[u8],
        write_out: bool,
    ) -> Result<Option<WriteLater>, Errno> {
        let change = if self.read_only {
            Change::Data
        } else {
            Change::KernelWrite
        };
        // (A file with no handle is written back by this very call, batch and all: nothing
        // to compress after it.)
        let handles = inode
            .file
            .open
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|of| of.handles > 0);
        if !handles {
            self.run(inode, change, |c| c.write(offset, data), "write")?;
            return Ok(None);
        }
        let batch = self.run(inode, change, |c| c.write_deferring(offset, data), "write")?;
        if let Some(batch) = batch {
            // At most one batch per core after its answer on the whole mount (each holds
            // its extents' buffers, outside the dirty budget once they change or go out;
            // session threads are twice the cores): past that, this WRITE compresses its
            // batch before answering.
            let later = !write_out && self.batches.fetch_add(1, Ordering::AcqRel) < max_batches();
            if later {
                if let Some(of) = inode.file.open.lock().unwrap().as_mut() {
                    of.batches += 1;
                }
                return Ok(Some(WriteLater {
                    inode: inode.clone(),
                    batch: Some(batch),
                    mount: self.batches.clone(),
                }));
            }
            if !write_out {
                self.batches.fetch_sub(1, Ordering::AcqRel);
            }
            let done = batch.compress();
            self.run(inode, change, |c| c.finish_batch(done), "write")?;
        }
        if !write_out {
            return Ok(None);
        }
        self.write_out(inode).map(|()| None)
    }

    /// The rest of a WRITE [`Files::write`] deferred, after its answer: the batch is
    /// compressed without the file's lock and written. Nobody waits for an error here: it
    /// waits for the file's next `fsync` (rule 10), and the extents stay dirty (the next
    /// write-out tries again).
    pub fn finish_write(&self, mut later: WriteLater) {
        let Some(batch) = later.batch.take() else {
            return;
        };
        let done = batch.compress();
        let inode = &later.inode;
        // Not through `run`: this changes no byte of the file (its WRITE did), so it waits
        // for no page-cache store (rule 11: a session thread never does), and a file whose
        // state went meanwhile (its last close did not wait for this, or it was written
        // out) has nothing left here to write.
        let mut open = inode.file.open.lock().unwrap();
        let Some(of) = open.as_mut() else {
            return;
        };
        of.pin_kernel_mtime();
        let r = of.container.finish_batch(done);
        self.keep_times(inode, of);
        drop(open);
        if let Err(e) = r {
            let errno = self.error(inode, "write", e);
            inode.file.lost_write(errno.code());
        }
    }

    /// Waits, a while at most, until no batch of the file is being compressed after its
    /// WRITE's answer ([`Files::finish_write`]) — with `last`, only when one handle is
    /// left: the write-out of a last close, or an fsync, would otherwise compress those
    /// extents a second time (then only work is lost).
    pub fn wait_batches(&self, inode: &Arc<Inode>, last: bool) {
        let mut open = inode.file.open.lock().unwrap();
        let until = std::time::Instant::now() + BATCH_WAIT;
        while let Some(left) = open
            .as_ref()
            .filter(|of| of.batches > 0 && (!last || of.handles == 1))
            .and_then(|_| until.checked_duration_since(std::time::Instant::now()))
        {
            open = inode.file.changed.wait_timeout(open, left).unwrap().0;
        }
    }

    /// An open file's extents written out now, partial last one included (rule 10: near a
    /// full backing filesystem, a WRITE's or a copy's error reaches its caller).
    pub fn write_out(&self, inode: &Arc<Inode>) -> Result<(), Errno> {
        let mut open = inode.file.open.lock().unwrap();
        let Some(of) = open.as_mut().filter(|of| of.handles > 0) else {
            return Ok(());
        };
        // A superblock this leaves pending is committed after the last close's write-back
        // (rule 1), which finds it.
        let written = of.container.write_back().map(|_| ());
        self.keep_times(inode, of);
        written.map_err(|e| self.error(inode, "write-out", e))
    }

    /// A READ on a mount with no OPEN (and so no RELEASE) ended at `end`: at the end of the
    /// file, its reader is taken as done, as a close would ([`Files::release_lazy`]): the
    /// extent cache the read-ahead grew goes back to its usual budget.
    pub fn read_to(&self, inode: &Arc<Inode>, end: u64) {
        if let Some(of) = inode.file.open.lock().unwrap().as_mut() {
            if of.container.size().is_ok_and(|size| end >= size) {
                readahead::finish(of);
            }
        }
    }

    /// A read: through the file's state, or, with none (a lazy handle's first READ, rule
    /// 9), through a container opened now and kept like a lookup's for the READs that
    /// follow. With the bytes, for a READ that does not continue a sequential stream (whose
    /// next extents the kernel asks for whole, and the read-ahead decodes ahead), the rest
    /// of its extent to hand the kernel (rule 11), when `may_spill` (memory) allows. The
    /// bytes of a sequential reader's READ are a range of the extent's cached buffer, shared
    /// rather than copied (`ReadBytes`): the reply is written from it.
    pub fn read(
        &self,
        ino: u64,
        inode: &Arc<Inode>,
        offset: u64,
        size: usize,
        may_spill: impl FnOnce() -> bool,
    ) -> Result<(ReadBytes, Option<Spill>), Errno> {
        let open = inode.file.open.lock().unwrap();
        let (data, streamed) = if open.is_some() {
            let open = self.ahead.wait_for(inode, open, offset, size);
            drop(open);
            let data = self.with_container(inode, |c| c.read_bytes(offset, size), "read")?;
            (data, true)
        } else {
            drop(open);
            let data = self.with_kept(ino, inode, |c| c.read_bytes(offset, size), "read")?;
            (data, false)
        };
        let mut open = inode.file.open.lock().unwrap();
        let spill = open.as_mut().and_then(|of| {
            let sequential = of.stream.continues(offset, data.len() as u64);
            if streamed {
                self.ahead.after_read(inode, of, offset, data.len());
            }
            (!sequential).then(|| self.spill(inode, of, offset, data.len(), may_spill))?
        });
        Ok((data, spill))
    }
}
