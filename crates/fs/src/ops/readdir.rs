//! Directory handles: the first readdir takes a listing (and starts reading the files
//! ahead), readdir serves it by offset, relisting at a rewind when it is stale, releasedir
//! drops it.
//!
//! The kernel keeps what readdir returned for a large directory in the directory's page
//! cache (`FOPEN_CACHE_DIR` with `FOPEN_KEEP_CACHE` at opendir) and serves later listings
//! from it until the directory changes through the mount (the kernel's own
//! `fuse_dir_changed` resets it; this daemon is the only writer of the backing directory).
//! A warm `ls -l` of it then sends no READDIR(PLUS) — and, with no READDIRPLUS dropping the
//! kernel's cached ACL of every entry it lists (`fuse_direntplus_link`), no GETXATTR per
//! file either. Small directories are listed by the daemon each time: a READDIRPLUS
//! refreshes their entries' attributes in one request, which a reader that closed the
//! files before would otherwise ask for one GETATTR each (on a writeback-cache mount the
//! kernel marks `st_blocks` stale at every close, and `cat`'s `fstat` wants it): a warm
//! re-read of the Linux tree sent one GETATTR per file with every directory cached.
//! "Large" is the backing directory's size (`LARGE_DIR`). So opendir reads nothing but
//! that: the listing is taken at the first readdir.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileType, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use super::attrs::dtype_kind;
use super::names::is_dict_dir;
use super::Core;
use crate::inode::Inode;
use crate::prefetch;
use crate::sys;

/// A backing directory at least this large (`st_size`) is "large": its listing stays in
/// the kernel's cache. About a thousand entries on ext4 (4 KiB blocks of ~20-byte
/// entries), xfs, btrfs (twice the names' bytes) and tmpfs (20 bytes an entry).
const LARGE_DIR: i64 = 16 << 10;

/// A directory's entries as read at the first readdir (and again at a rewind): name, inode number
/// (as `stat` through the mount gives it) and type; `..`'s number apart.
pub(super) struct DirList {
    entries: Vec<(Vec<u8>, u64, FileType)>,
    dotdot: u64,
}

/// An open directory: its listing (none before the first `readdir`), the directory's
/// `dir_gen` when it was taken, and whether a `readdir` has used it yet. A `readdir` from
/// offset 0 (a `rewinddir`, or the first one) lists the directory again if the listing
/// was used or entries were made or removed since: names made after `opendir` appear after
/// a rewind, as POSIX asks.
#[derive(Default)]
pub(super) struct DirHandle {
    list: Option<Arc<DirList>>,
    gen: u64,
    used: bool,
}

impl Core {
    /// A directory listing as `readdir` reports it: the dictionary directory hidden, inode
    /// numbers as `stat` through the mount gives them.
    fn dir_list(&self, ino: u64, dir: &Arc<Inode>, entries: Vec<(Vec<u8>, u64, u8)>) -> DirList {
        let dev = dir.key.0;
        let mut list = DirList {
            entries: Vec::with_capacity(entries.len()),
            // The backing root's parent is outside the mount: the root is its own parent.
            dotdot: ino,
        };
        for (name, d_ino, t) in entries {
            if name == b".." {
                if ino != 1 {
                    list.dotdot = self.inodes.entry_number(dev, d_ino);
                }
            } else if !is_dict_dir(ino, &name) {
                list.entries
                    .push((name, self.inodes.entry_number(dev, d_ino), dtype_kind(t)));
            }
        }
        list
    }

    /// A directory handle, and whether the kernel may keep the directory's listing (a
    /// large directory: see the module's comment); nothing is listed until the first
    /// `readdir`.
    pub(super) fn do_opendir(&self, ino: INodeNo) -> Result<(u64, bool), Errno> {
        let inode = self.inode(ino)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let large = sys::fstat(&self.fd(&inode)?)?.st_size >= LARGE_DIR;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().unwrap().insert(fh, DirHandle::default());
        Ok((fh, large))
    }

    /// The listing a `readdir` at `offset` reads from: taken at the first `readdir`, and
    /// again at a rewind when stale.
    pub(super) fn do_readdir(&self, ino: INodeNo, fh: u64, offset: u64) -> Result<Arc<DirList>, Errno> {
        let mut dirs = self.dirs.lock().unwrap();
        let h = dirs.get_mut(&fh).ok_or(Errno::EBADF)?;
        let inode = self.inode(ino)?;
        let gen = inode.dir_gen();
        let stale = offset == 0 && (h.used || gen != h.gen);
        let first = !h.used;
        h.used = true;
        match &h.list {
            Some(list) if !stale => return Ok(list.clone()),
            _ => {}
        }
        drop(dirs);
        // Names still pending in it are put on the backing first (`crate::ns`).
        if self.ns.as_ref().is_some_and(|ns| ns.pending_in(&inode)) {
            self.drain_names();
        }
        let dfd = self.fd(&inode)?;
        let entries = sys::read_dir(&dfd)?;
        // The whole directory was read: its names are known from now on (unless an entry
        // changed since `gen`, read before the listing), for LOOKUP misses.
        if let Some(d) = inode
            .dir
            .as_ref()
            .filter(|_| self.names_from_listings && self.names_exact(&inode))
        {
            let names: Vec<&[u8]> = entries
                .iter()
                .map(|(n, _, _)| n.as_slice())
                .filter(|n| *n != b"." && *n != b"..")
                .collect();
            d.learn_names(gen, names.into_iter());
        }
        if first {
            // A reader is about to walk this directory: start reading its files.
            let files: Vec<CString> = entries
                .iter()
                .filter(|(_, _, t)| *t == libc::DT_REG)
                .take(prefetch::FILES)
                .filter_map(|(n, _, _)| CString::new(n.clone()).ok())
                .collect();
            self.prefetch.directory(dfd, files);
        }
        // The order a walk will open its files in (`crate::siblings`).
        let dev = inode.key.0;
        self.siblings.listed(
            ino.0,
            entries
                .iter()
                .filter(|(_, _, t)| *t == libc::DT_REG)
                .map(|(_, d_ino, _)| (dev, *d_ino)),
        );
        let fresh = Arc::new(self.dir_list(ino.0, &inode, entries));
        if let Some(h) = self.dirs.lock().unwrap().get_mut(&fh) {
            h.list = Some(fresh.clone());
            h.gen = gen;
        }
        Ok(fresh)
    }

    pub(super) fn do_releasedir(&self, fh: u64) {
        self.dirs.lock().unwrap().remove(&fh);
    }

    /// fsync of a directory: its entries durable, every name pending applied first
    /// (`crate::ns`), and an error in naming one of them behind reported.
    pub(super) fn do_fsyncdir(&self, ino: INodeNo, datasync: bool) -> Result<(), Errno> {
        let i = self.inode(ino)?;
        if let Some(ns) = &self.ns {
            // Names pending anywhere, not only in this directory: one queue, applied in
            // order, so a prefix is all the backing ever holds.
            ns.drain();
        }
        sys::fsync_path(self.fd(&i)?, datasync).map_err(Errno::from)?;
        match i.file.take_unreported() {
            Some(e) => Err(Errno::from_i32(e)),
            None => Ok(()),
        }
    }
}

/// Fills `reply` with `list` from `offset`. Offsets: 1 = ".", 2 = "..", 3.. = entries.
pub(super) fn fill(list: &DirList, ino: INodeNo, offset: u64, mut reply: ReplyDirectory) {
    let mut off = offset;
    while off < 2 {
        let (name, n) = if off == 0 {
            (".", ino.0)
        } else {
            ("..", list.dotdot)
        };
        if reply.add(INodeNo(n), off + 1, FileType::Directory, name) {
            return reply.ok();
        }
        off += 1;
    }
    for (i, (name, n, kind)) in list.entries.iter().enumerate().skip((off - 2) as usize) {
        if reply.add(INodeNo(*n), i as u64 + 3, *kind, OsStr::from_bytes(name)) {
            break;
        }
    }
    reply.ok();
}

impl Core {
    /// Fills a READDIRPLUS reply with `list` from `offset`: each entry with its attributes,
    /// so a walk (`ls -l`, `find`, `du`, a tree read) sends no LOOKUP per file. The kernel
    /// counts every entry sent, except `.` and `..`, as a lookup (and later forgets it):
    /// an entry that does not fit in the reply is forgotten here at once.
    pub(super) fn fill_plus(&self, list: &DirList, ino: INodeNo, offset: u64, mut reply: ReplyDirectoryPlus) {
        let Ok(dir) = self.inode(ino) else {
            return reply.error(Errno::ESTALE);
        };
        let dir_attr = match self.attr(ino.0, &dir) {
            Ok(a) => a,
            Err(e) => return reply.error(e),
        };
        let mut off = offset;
        while off < 2 {
            // Not linked by the kernel (no lookup counted): only the number and type count.
            let (name, n) = if off == 0 {
                (".", ino)
            } else {
                ("..", INodeNo(list.dotdot))
            };
            let attr = fuser::FileAttr { ino: n, ..dir_attr };
            if reply.add(n, off + 1, name, &Duration::ZERO, &attr, fuser::Generation(0)) {
                return reply.ok();
            }
            off += 1;
        }
        for (i, (name, _, _)) in list.entries.iter().enumerate().skip((off - 2) as usize) {
            let Some((n, attr, ttl)) = self.lookup_listed(&dir, OsStr::from_bytes(name)) else {
                continue;
            };
            if reply.add(
                INodeNo(n),
                i as u64 + 3,
                OsStr::from_bytes(name),
                &ttl,
                &attr,
                fuser::Generation(0),
            ) {
                self.inodes.forget(n, 1);
                break;
            }
        }
        reply.ok();
    }
}
