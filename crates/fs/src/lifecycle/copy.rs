//! `copy_file_range` within a mount (issue 45): the bytes of one file copied into another
//! (or within one) by their containers, whole extents as they are stored
//! (`squeezefs_container` `container/copy.rs`), so nothing crosses the FUSE channel and
//! nothing is decoded or compressed again.
//!
//! The destination has a handle open for writing (the kernel sends the request on one),
//! so it has a state and no store into the page cache is under way or starts (rule 11);
//! the kernel wrote back the pages of both ranges before sending it and drops the
//! destination's after our reply. The source may have only a lazy handle (rule 9): it is
//! given a kept state first, as its first READ would. Both files' locks are then held for
//! the copy, taken in the order of their inodes' addresses (the lock order of
//! `state.rs`); a request copies at most [`MAX_COPY`] bytes (`cat` asks again for the rest):
//! extents copied as stored take little time, but where they cannot be (other extent sizes,
//! offsets not equally far into an extent) the bytes are decoded and compressed with both
//! locks held, and the source's READs wait meanwhile. The destination's times follow rule 7 as for a WRITE:
//! the kernel's mtime stands until it sends one.

use std::sync::Arc;

use fuser::Errno;

use super::Files;
use crate::inode::Inode;

/// The most one request copies (a short count makes the caller ask again).
pub const MAX_COPY: u64 = 64 << 20;

impl Files {
    /// Copies up to `len` bytes at `off_in` of `src` (number `src_ino`) to `off_out` of
    /// `dst`; returns the bytes copied.
    pub fn copy_range(
        &self,
        src_ino: u64,
        src: &Arc<Inode>,
        off_in: u64,
        dst: &Arc<Inode>,
        off_out: u64,
        len: u64,
    ) -> Result<u64, Errno> {
        let len = len.min(MAX_COPY);
        // The source's batches compressed after their WRITEs' answers end first (the copy
        // writes its dirty extents out, and would compress them a second time).
        self.wait_batches(src, false);
        if Arc::ptr_eq(src, dst) {
            return self.run(
                dst,
                super::access::Change::KernelWrite,
                |c| c.copy_within(off_in, off_out, len),
                "copy",
            );
        }
        // A state of its own for the source (a kept one may be let go by the time both
        // locks are held: then once more).
        for _ in 0..3 {
            if src.file.open.lock().unwrap().is_none() {
                self.with_kept(src_ino, src, |_| Ok(()), "copy")?;
            }
            let src_first = Arc::as_ptr(src) < Arc::as_ptr(dst);
            let (first, second) = if src_first { (src, dst) } else { (dst, src) };
            let mut a = first.file.open.lock().unwrap();
            let mut b = second.file.open.lock().unwrap();
            let (s, d) = if src_first {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            let Some(sof) = s.as_mut() else { continue };
            // (The kernel sends the request on a handle open for writing.)
            let Some(dof) = d.as_mut() else {
                return Err(Errno::EBADF);
            };
            dof.pin_kernel_mtime();
            let r = dof.container.copy_from(&mut sof.container, off_in, off_out, len);
            self.keep_times(dst, dof);
            return r.map_err(|e| {
                if e.is_corruption() {
                    self.error(src, "copy from", e)
                } else {
                    self.error(dst, "copy", e)
                }
            });
        }
        // (Not EAGAIN, which `cp` and `cat` do not retry: the kernel copies by reads and
        // writes instead.)
        Err(Errno::EOPNOTSUPP)
    }
}
