//! Rule 11 of [`super::state`]: the rest of an extent a READ decoded, handed to the kernel's
//! page cache (`FUSE_NOTIFY_STORE`) without ever overwriting newer bytes.
//!
//! The kernel copies a store into its page cache whatever the pages hold, dirty ones
//! included, so a store must never carry bytes older than what the kernel may have. The
//! kernel holds bytes the daemon has not seen only while a handle is open for writing
//! (its writeback cache writes every dirty page back before the last such handle's
//! RELEASE). So a store is taken only from a file with no writer, under the file's lock,
//! from the container's bytes of that moment, and until it has been sent no change of the
//! data and no new writer proceeds: such a request first holds further stores off and
//! waits for one under way ([`Files::hold_spills`]), so nothing can change the file
//! between the bytes being taken and the kernel holding them.
//!
//! The store is sent after the READ's reply by the store thread (`pagecache.rs`), with no
//! lock held: the kernel locks the pages it fills, and the READ's own pages stay locked
//! until its reply arrives, as may the pages of other READs under way, which only session
//! threads can answer. So no session thread ever waits for a store: a request that would
//! is served on a thread of its own (`ops/dispatch.rs`, `defer`).

use std::ops::Range;
use std::sync::Arc;

use squeezefs_container::ReadBytes;

use super::state::OpenFile;
use super::Files;
use crate::inode::Inode;

/// Page size: the kernel takes a store page by page, and only whole pages become valid.
const PAGE: u64 = 4096;

/// Bytes to hand the kernel for one file after a READ: the extent the READ decoded, less
/// the pages the READ itself returns. While it lives, the file's data cannot change.
pub struct Spill {
    inode: Arc<Inode>,
    start: u64,
    /// (The extent's cached buffer, shared: the file's data does not change meanwhile.)
    bytes: ReadBytes,
    /// The READ's own pages, left out (the kernel has them locked until the reply).
    skip: Range<u64>,
    /// Stored ahead of a reader (`crate::siblings`), not after a READ.
    ahead: bool,
}

impl Spill {
    /// Whether it was taken ahead of a reader (`crate::siblings`).
    pub fn ahead(&self) -> bool {
        self.ahead
    }

    /// The pieces to store: `(offset, bytes)`, at most two, none empty.
    pub fn pieces(&self) -> impl Iterator<Item = (u64, &[u8])> {
        around(self.start..self.start + self.bytes.len() as u64, &self.skip)
            .into_iter()
            .filter(|r| !r.is_empty())
            .map(move |r| {
                let from = (r.start - self.start) as usize;
                let to = (r.end - self.start) as usize;
                (r.start, &self.bytes[from..to])
            })
    }
}

/// What of `ext` lies before and after `skip` (a READ's range: page-aligned at its start,
/// and owning the page it ends in).
fn around(ext: Range<u64>, skip: &Range<u64>) -> [Range<u64>; 2] {
    let before = ext.start..skip.start.clamp(ext.start, ext.end);
    let after = skip.end.next_multiple_of(PAGE).clamp(ext.start, ext.end)..ext.end;
    [before, after]
}

/// See [`Files::hold_spills`].
pub struct Hold(Arc<Inode>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0
            .file
            .holds
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        let _open = self.inode.file.open.lock().unwrap();
        self.inode
            .file
            .spilling
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.inode.file.changed.notify_all();
    }
}

impl Files {
    /// After a READ of `len` bytes at `off` (page-aligned, as the kernel sends them) that
    /// does not continue a stream: the rest of the extent it read (decoded, in memory) to
    /// store, if the file has no writer and no request holds stores off, its cached pages
    /// are trusted (rule 8), and `may` (memory) allows. Called with the file's lock held;
    /// the returned [`Spill`] holds back changes until it is dropped.
    pub(super) fn spill(
        &self,
        inode: &Arc<Inode>,
        of: &mut OpenFile,
        off: u64,
        len: usize,
        may: impl FnOnce() -> bool,
    ) -> Option<Spill> {
        if of.writers > 0
            || inode.file.holds.load(std::sync::atomic::Ordering::Acquire) > 0
            || inode.file.cache_suspect()
        {
            return None;
        }
        let ext = of.container.cached_extent(off)?;
        let skip = off..off + len as u64;
        // Nothing left beyond the READ's own pages.
        if around(ext.clone(), &skip).iter().all(|r| r.is_empty()) {
            return None;
        }
        if !may() {
            return None;
        }
        let bytes = of
            .container
            .read_bytes(ext.start, (ext.end - ext.start) as usize)
            .ok()?;
        inode
            .file
            .spilling
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Some(Spill {
            inode: inode.clone(),
            start: ext.start,
            bytes,
            skip,
            ahead: false,
        })
    }

    /// The first `max` bytes of a file no reader has asked for yet, to store ahead of a
    /// reader walking its directory (`crate::siblings`): under the conditions of
    /// [`Files::spill`] (no writer, no hold, a trusted cache, memory), and not when they
    /// were stored ahead before. Opens the file's container as a READ of a file without
    /// state does (kept, rule 9). The extent after them is decoded into its cache as well,
    /// and the in-file read-ahead of its reader continues from where these bytes end
    /// (`readahead.rs`).
    pub fn spill_ahead(
        &self,
        ino: u64,
        inode: &Arc<Inode>,
        max: u64,
        may: impl Fn() -> bool,
    ) -> Option<Spill> {
        let quiet = |open: &super::state::OpenGuard| {
            !open.stored_ahead
                && inode.file.holds.load(std::sync::atomic::Ordering::Acquire) == 0
                && !inode.file.cache_suspect()
        };
        let open = inode.file.open.lock().unwrap();
        if !quiet(&open) {
            return None;
        }
        if open.is_none() {
            drop(open);
            self.with_kept(ino, inode, |_| Ok(()), "read ahead").ok()?;
        } else {
            drop(open);
        }
        // A packed file's block read and decoded into the packs' cache without the file's
        // lock, which its reader's OPEN takes: read under it, a walker waited at a tenth
        // of its OPENs for the disk (blocks never change; the load below finds it cached).
        // Not for a file with a writer, nor while memory is short (nothing is stored then).
        let block = inode
            .file
            .open
            .lock()
            .unwrap()
            .as_ref()
            .filter(|of| of.writers == 0 && may())
            .and_then(|of| of.container.unloaded_pack_block());
        if let (Some((pin, pack, at)), Some(packs)) = (block, &self.opts().packs) {
            packs.prefetch_block(&pin, pack, at);
        }
        // The extents decoded on the read-ahead workers, without the file's lock (its
        // reader's OPEN and READs do not wait behind a decode), then taken under it.
        let mut open = inode.file.open.lock().unwrap();
        let of = open.as_mut()?;
        let size = of.container.size().ok()?;
        let len = size.min(max);
        if len == 0 || of.writers > 0 || !may() {
            return None;
        }
        // (Workers behind: nothing decoded here under the lock, for a file nobody opened.)
        if !self.ahead.load(inode, of, 0, len) {
            return None;
        }
        // A larger file's next extent too, into its cache only (best effort): its reader's
        // first READ, past the bytes stored here, then finds it decoded rather than
        // waiting for it, and its read-ahead goes on from there (`readahead.rs`).
        if size > len {
            let next = size.min(len + of.container.extent_size().unwrap_or(0));
            let _ = self.ahead.load(inode, of, len, next);
        }
        let mut open = self.ahead.wait_for(inode, open, 0, len as usize);
        if !quiet(&open) || !may() {
            return None;
        }
        let of = open.as_mut()?;
        if of.writers > 0 {
            return None;
        }
        let len = of.container.size().ok()?.min(max);
        if len == 0 {
            return None;
        }
        let bytes = of.container.read_bytes(0, len as usize).ok()?;
        if of.stream.next == 0 {
            of.stream.next = bytes.len() as u64;
        }
        open.stored_ahead = true;
        inode
            .file
            .spilling
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Some(Spill {
            inode: inode.clone(),
            start: 0,
            bytes,
            skip: 0..0,
            ahead: true,
        })
    }

    /// Before a request that changes the data or opens a writer: no store of the file
    /// starts while the returned [`Hold`] lives. A store under way is waited for when
    /// `wait` (on a thread of the request's own, never a session thread: rule 11);
    /// otherwise the answer is `EWOULDBLOCK`, and the caller serves the request on such a
    /// thread.
    pub fn hold_spills(&self, inode: &Arc<Inode>, wait: bool) -> Result<Hold, fuser::Errno> {
        let open = inode.file.open.lock().unwrap();
        let busy = inode.file.spilling.load(std::sync::atomic::Ordering::Acquire) > 0;
        if busy && !wait {
            return Err(fuser::Errno::EWOULDBLOCK);
        }
        inode.file.holds.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if busy {
            drop(self.wait_spills(inode, open));
        }
        Ok(Hold(inode.clone()))
    }

    /// Waits, with the file's lock released meanwhile, until no [`Spill`] of the file is
    /// under way (before a change of its data or a new writer: rule 11).
    pub(super) fn wait_spills<'a>(
        &self,
        inode: &'a Inode,
        mut open: crate::lifecycle::state::OpenGuard<'a>,
    ) -> crate::lifecycle::state::OpenGuard<'a> {
        while inode.file.spilling.load(std::sync::atomic::Ordering::Acquire) > 0 {
            open = inode.file.changed.wait(open).unwrap();
        }
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(start: u64, len: u64, skip: Range<u64>) -> Vec<(u64, u64)> {
        around(start..start + len, &skip)
            .into_iter()
            .filter(|r| !r.is_empty())
            .map(|r| (r.start, r.end - r.start))
            .collect()
    }

    #[test]
    fn the_reads_own_pages_are_left_out() {
        let e = 128 << 10;
        // A page in the middle: what is before and after it.
        assert_eq!(
            pieces(e, e, e + 8192..e + 12288),
            vec![(e, 8192), (e + 12288, e - 12288)]
        );
        // The first page, the last page.
        assert_eq!(pieces(0, 65536, 0..4096), vec![(4096, 61440)]);
        assert_eq!(pieces(0, 65536, 61440..65536), vec![(0, 61440)]);
        // A short last extent ending inside a page read to its end.
        assert_eq!(pieces(0, 10_000, 8192..10_000), vec![(0, 8192)]);
        // A READ ending short of a page boundary (at the end of the file as the kernel
        // saw it): the page it ends in is the READ's.
        assert_eq!(pieces(0, 20_000, 0..5000), vec![(8192, 20_000 - 8192)]);
    }
}
