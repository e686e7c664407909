//! fallocate (allocation, punching and zeroing ranges, with the ENOSPC promise a
//! compressing filesystem can keep) and lseek's SEEK_DATA/SEEK_HOLE (exact, with the
//! kernel's cached writes flushed first).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Errno, INodeNo};
use log::warn;

use super::Core;
use super::Who;
use crate::inode::Inode;
use crate::sys;

/// Most kernel cache write-backs (for SEEK_DATA/SEEK_HOLE) waited for at once: each holds
/// a daemon thread while others serve the WRITEs it causes (the session runs at least 4).
const KERNEL_FLUSHES: usize = 1;

impl Core {
    pub(super) fn do_fallocate(
        &self,
        req: &Who,
        ino: INodeNo,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        let i = self.inode(ino)?;
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        let known = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 || (punch && !keep) || (punch && zero) {
            return Err(Errno::EOPNOTSUPP);
        }
        self.kill_privs(req, ino, &i)?;
        if !punch && !zero {
            self.check_room_for(&i, offset, end)?;
        }
        self.files.change_data(
            &i,
            |c| {
                if punch || zero {
                    c.punch_hole(offset, length)?;
                }
                // Plain allocation reserves nothing (extents are allocated when written,
                // compressed; docs/ARCHITECTURE.md "Space"); it only grows the file
                // unless KEEP_SIZE.
                if !keep && end > c.size()? {
                    c.set_size(end)?;
                }
                Ok(())
            },
            "fallocate",
        )
    }

    /// fallocate's promise, as far as a compressing filesystem can keep it (ZFS's rule):
    /// ENOSPC unless the holes in `start..end` would fit on the backing filesystem even
    /// stored uncompressed. Nothing is reserved: other writes may still use that room.
    fn check_room_for(&self, inode: &Arc<Inode>, start: u64, end: u64) -> Result<(), Errno> {
        let holes = self.files.with_container(
            inode,
            |c| {
                let mut holes = 0u64;
                let mut off = start;
                while off < end {
                    let Some(data) = c.seek_data(off)?.filter(|&d| d < end) else {
                        holes += end - off;
                        break;
                    };
                    holes += data - off;
                    off = c.seek_hole(data)?.unwrap_or(end).min(end);
                }
                Ok(holes)
            },
            "fallocate",
        )?;
        let root = self.inode(INodeNo(1))?;
        let st = sys::statvfs(self.fd(&root)?)?;
        let room = st.f_bavail.saturating_mul(st.f_frsize);
        if holes > room {
            return Err(Errno::ENOSPC);
        }
        Ok(())
    }

    /// SEEK_DATA / SEEK_HOLE, exact. While the file is open for writing, written data may
    /// still sit in the kernel's page cache (writeback cache), unseen here: the kernel is
    /// asked to write it back first, so holes and data are answered from every byte
    /// written. Only when it cannot be asked (several such seeks at once) is the answer
    /// the coarse one POSIX allows: all data up to a size only the kernel knows.
    pub(super) fn do_lseek(&self, ino: INodeNo, offset: i64, whence: i32) -> Result<i64, Errno> {
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return Err(Errno::EINVAL);
        }
        // lseek(2): ENXIO for an offset beyond the end, and so for a negative one.
        let off = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
        let i = self.inode(ino)?;
        let writers = self.files.has_writers(&i);
        if writers && !self.write_back_kernel_cache(ino) {
            return match whence {
                libc::SEEK_DATA => Ok(offset),
                _ => Ok(i64::MAX),
            };
        }
        let found = match whence {
            libc::SEEK_DATA => self.files.with_container(&i, |c| c.seek_data(off), "lseek")?,
            _ => self.files.with_container(&i, |c| c.seek_hole(off), "lseek")?,
        };
        found.map(|o| o as i64).ok_or(Errno::ENXIO)
    }

    /// Has the kernel write back (and drop) its cached pages of `ino`, so the container
    /// holds every byte written: a FUSE_NOTIFY_INVAL_INODE launders dirty pages, as WRITE
    /// requests that other daemon threads serve while this one waits. At most
    /// [`KERNEL_FLUSHES`] at once, so threads are always left to serve them; `false` when
    /// none could be made (or the kernel refused).
    fn write_back_kernel_cache(&self, ino: INodeNo) -> bool {
        let Some(n) = self.notifier.get() else {
            return false;
        };
        if self.kernel_flushes.fetch_add(1, Ordering::AcqRel) >= KERNEL_FLUSHES {
            self.kernel_flushes.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let r = n.inval_inode(ino, 0, 0);
        self.kernel_flushes.fetch_sub(1, Ordering::AcqRel);
        match r {
            Ok(()) => true,
            Err(e) => {
                warn!("inode {}: the kernel refused to write its cache back: {e}", ino.0);
                false
            }
        }
    }
}
