//! Regular files opened, created, read, written and closed. The handlers only translate:
//! what happens to the file's container at each step is `crate::lifecycle`'s.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Errno, FileAttr, INodeNo, WriteFlags};
use squeezefs_container::{Container, FileStorage};

use super::xattr::{NO_ACCESS_ACL, NO_DEFAULT_ACL};
use super::Core;
use super::Who;
use crate::inode::known::Change;
use crate::inode::Inode;
use crate::lifecycle::{Spill, WriteLater};
use crate::sys;

/// The file handle of a lazy open (rule 9 of `lifecycle::state`); every other open of a
/// backing file has handle 0.
pub(super) const FH_LAZY: u64 = 1;

impl Core {
    /// Returns whether the kernel may keep its cached pages of the file (FOPEN_KEEP_CACHE):
    /// yes, since this daemon is the only writer of BACKING and the kernel drops the pages
    /// a truncate, punch or write of its own changes — unless an error of ours may have
    /// left them wrong (rule 8 of `lifecycle::state`).
    ///
    /// Also returns whether the handle is lazy (rule 9: read-only, no state, nothing
    /// opened; its file handle is then [`FH_LAZY`]).
    ///
    /// An open for writing first holds off stores into the kernel's page cache (rule 11 of
    /// `lifecycle::state`); with one under way it waits for it when `wait`, and answers
    /// `EWOULDBLOCK` otherwise (the dispatch then calls again, waiting, on a thread of its
    /// own).
    pub(super) fn do_open(
        &self,
        req: &Who,
        ino: INodeNo,
        flags: i32,
        wait: bool,
    ) -> Result<(bool, bool), Errno> {
        let inode = self.inode(ino)?;
        if !inode.is_reg {
            return Err(Errno::EINVAL);
        }
        let acc = flags & libc::O_ACCMODE;
        if self.read_only && acc != libc::O_RDONLY {
            return Err(Errno::EROFS);
        }
        let writable = acc != libc::O_RDONLY;
        let truncate = flags & libc::O_TRUNC != 0 && writable;
        if !writable {
            // A reader walking its directory: the next files go to the page cache ahead.
            self.siblings.queue(self.siblings.opened(inode.key));
        }
        if !writable && self.files.open_lazy(&inode) {
            return Ok((inode.file.keep_cache(), true));
        }
        let _hold = if writable {
            Some(self.files.hold_spills(&inode, wait)?)
        } else {
            None
        };
        self.files.attach(&inode, truncate, writable)?;
        if truncate {
            self.kill_privs(req, ino, &inode)?;
        }
        Ok((inode.file.keep_cache(), false))
    }

    /// A new regular file: created and opened for I/O in one `openat`, given to the caller,
    /// registered, and its (empty) container attached without reading anything back.
    fn create_new(&self, req: &Who, parent: INodeNo, name: &OsStr, mode: u32) -> Result<FileAttr, Errno> {
        let at = self.at_new(parent, name)?;
        // Whether the new file can have an access ACL (from a default ACL of its directory),
        // read before the create: a setfacl through the mount moves the directory's
        // generation before it sets anything (`xattr.rs`).
        let parent_gen = at.parent.no_xattrs.generation();
        let no_acl = at.parent.no_xattrs.has(NO_DEFAULT_ACL);
        let file = sys::create_rw(&at.dir, &at.name, mode)?;
        // The name exists from here on, whatever follows fails.
        self.dir_changed(parent, Change::Made(name.as_bytes()));
        let made = (|| {
            let mut st = sys::fstat(&file)?;
            if self.as_root && self.give_to_caller(req, &at.parent, file.as_fd(), &st)? {
                st = sys::fstat(&file)?;
            }
            let path = sys::open_path(&at.dir, &at.name)?;
            Ok((path, st))
        })();
        let (path, st) = match made {
            Ok(x) => x,
            Err(e) => {
                let gone = sys::unlinkat(&at.dir, &at.name, 0).is_ok();
                self.dir_changed(
                    parent,
                    if gone {
                        Change::Gone(name.as_bytes())
                    } else {
                        Change::Unknown
                    },
                );
                return Err(e);
            }
        };
        let naming = self.inodes.naming();
        let (ino, inode) = self.inodes.insert(path, &st, &at.parent, &at.name);
        drop(naming);
        inode.no_caps.store(true, Ordering::Relaxed);
        if no_acl && at.parent.no_xattrs.generation() == parent_gen {
            inode.no_xattrs.learn(NO_ACCESS_ACL, inode.no_xattrs.generation());
        }
        self.attach_created(&inode, file, &at.parent, at.name.as_bytes())?;
        self.attr_with(ino, &inode, &st)
    }

    /// Attaches a new (empty) container to a file just made, on its open fd `file`: it
    /// inherits its directory's properties, with those of the first rule matching its name
    /// over them.
    pub(super) fn attach_created(
        &self,
        inode: &Arc<Inode>,
        file: std::fs::File,
        parent: &Arc<Inode>,
        name: &[u8],
    ) -> Result<(), Errno> {
        let mut container = Container::create(FileStorage::new(file), self.opts());
        let dp = self.new_file_props(parent, name);
        if dp.codec.is_some() {
            container
                .set_compression_property(dp.codec)
                .map_err(|e| self.files.error(inode, "inherit compression", e))?;
        }
        if dp.shift.is_some() {
            container
                .set_extent_size_property(dp.shift)
                .map_err(|e| self.files.error(inode, "inherit extent size", e))?;
        }
        if dp.dict.is_some() {
            container
                .set_dictionary_property(dp.dict)
                .map_err(|e| self.files.error(inode, "inherit dictionary", e))?;
        }
        if dp.force {
            container
                .set_force_property(true)
                .map_err(|e| self.files.error(inode, "inherit force", e))?;
        }
        self.files.attach_new(inode, container);
        Ok(())
    }

    /// CREATE: `how` is the request's (mode, umask, open flags); `wait` as for `do_open`
    /// (an existing file opened for writing).
    pub(super) fn do_create(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        how: (u32, u32, i32),
        wait: bool,
    ) -> Result<FileAttr, Errno> {
        let (mode, umask, flags) = how;
        self.check_writable()?;
        let p = self.inode(parent)?;
        let excl = flags & libc::O_EXCL != 0;
        let mode = self.creation_mode(parent, mode, umask) & 0o7777;
        // Behind the caller where nothing can tell (`crate::ns`); otherwise in place, once
        // every pending name is on the backing. (Both tell the directory's known names
        // what they made.)
        if let Some(attr) = self.create_pending(req, parent, name, mode)? {
            return Ok(attr);
        }
        if let Some(ns) = &self.ns {
            ns.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            ns.drain();
        }
        match self.create_new(req, parent, name, mode) {
            Ok(attr) => return Ok(attr),
            Err(e) if e == Errno::EEXIST && !excl => {}
            Err(e) => return Err(e),
        }
        // It exists: open it like any other.
        let (ino, attr) = self.lookup_name(&p, name)?;
        let inode = self.inodes.get(ino).ok_or(Errno::ESTALE)?;
        if !inode.is_reg {
            self.inodes.forget(ino, 1);
            return Err(Errno::EISDIR);
        }
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncate = flags & libc::O_TRUNC != 0;
        // As `do_open`: no store of the file while it gets a writer (rule 11).
        let _hold = if writable || truncate {
            match self.files.hold_spills(&inode, wait) {
                Ok(h) => Some(h),
                Err(e) => {
                    self.inodes.forget(ino, 1);
                    return Err(e);
                }
            }
        } else {
            None
        };
        self.files.attach(&inode, truncate, writable)?;
        if truncate {
            self.kill_privs(req, INodeNo(ino), &inode)?;
        }
        Ok(self.attr(ino, &inode).unwrap_or(attr))
    }

    /// A READ: its bytes, and the rest of the extent it decoded for the kernel's page cache
    /// (rule 11 of `lifecycle::state`), to be sent once the READ is answered ([`Self::spill`]).
    pub(super) fn do_read(
        &self,
        ino: INodeNo,
        offset: u64,
        size: u32,
    ) -> Result<(squeezefs_container::ReadBytes, Option<Spill>), Errno> {
        let i = self.inode(ino)?;
        let r = self
            .files
            .read(ino.0, &i, offset, size as usize, || self.page_cache.may_store())?;
        if self.no_open.load(Ordering::Relaxed) {
            self.files.read_to(&i, offset + r.0.len() as u64);
        }
        Ok(r)
    }

    /// Hands the rest of an extent to the store thread (`FUSE_NOTIFY_STORE`), after the
    /// READ's reply; changes of the file wait until it has been sent.
    pub(super) fn spill(&self, ino: INodeNo, spill: Spill) {
        self.page_cache.send(ino, spill);
    }

    pub(super) fn do_write(
        &self,
        req: &Who,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
        wf: WriteFlags,
    ) -> Result<Option<WriteLater>, Errno> {
        self.check_writable()?;
        let i = self.inode(ino)?;
        // A caller without CAP_FSETID writing a setuid/setgid file (FUSE_HANDLE_KILLPRIV_V2).
        if wf.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            self.kill_privs(req, ino, &i)?;
        }
        // Near a full backing filesystem nothing is deferred past `close` (rule 10).
        let now = self.space.low(|| self.free_space());
        self.files.write(&i, offset, data, now)
    }

    /// copy_file_range(2) within the mount (`lifecycle/copy.rs`): the bytes copied.
    pub(super) fn do_copy_range(
        &self,
        ino_in: INodeNo,
        off_in: u64,
        ino_out: INodeNo,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> Result<u64, Errno> {
        self.check_writable()?;
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        let (src, dst) = (self.inode(ino_in)?, self.inode(ino_out)?);
        if !src.is_reg || !dst.is_reg {
            return Err(Errno::EINVAL);
        }
        // Near a full backing filesystem (rule 10): the kernel copies by reads and writes
        // instead, whose WRITEs report a full disk where it happens. A copy that failed
        // here after changing the destination would leave the kernel its old pages and
        // size (it drops them only after a success).
        if self.space.low(|| self.free_space()) {
            return Err(Errno::EOPNOTSUPP);
        }
        self.files.copy_range(ino_in.0, &src, off_in, &dst, off_out, len)
    }

    /// Bytes of the backing filesystem free for us, less what the dirty extents waiting in
    /// memory may take once written (at most their decompressed size).
    pub(super) fn free_space(&self) -> std::io::Result<u64> {
        let st = self
            .do_statfs()
            .map_err(|e| std::io::Error::from_raw_os_error(e.code()))?;
        let waiting = self.files.opts().dirty.used() as u64;
        Ok((st.f_bavail * st.f_frsize).saturating_sub(waiting))
    }

    /// `hand_on`: the spinning thread serves it, so the work goes to the closer
    /// (`closer.rs`) where its queue has room.
    pub(super) fn do_release(&self, ino: INodeNo, fh: u64, flags: i32, hand_on: bool) -> Result<(), Errno> {
        let inode = self.inode(ino)?;
        if fh == FH_LAZY {
            self.files.release_lazy(&inode);
            return Ok(());
        }
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let job = super::closer::Job {
            ino: ino.0,
            inode,
            writable,
        };
        let job = if hand_on {
            // Counted before it is queued: the count never misses it.
            self.files.handed_release();
            match self.closer.hand_on(job) {
                Ok(()) => return Ok(()),
                Err(job) => {
                    self.files.handed_release_done();
                    job
                }
            }
        } else {
            job
        };
        self.files.release(job.ino, &job.inode, job.writable)
    }

    /// fsync(2): everything written and durable, and an error no caller was told of since
    /// the last one reported (rule 10).
    ///
    /// Times, owner and mode waiting in memory go on the backing file first (rule 7); an
    /// fsync that is not a datasync then makes them durable too (the container's own sync
    /// may be a `fdatasync`, which need not commit an inode change without data).
    pub(super) fn do_fsync(&self, ino: INodeNo, datasync: bool) -> Result<(), Errno> {
        let i = self.inode(ino)?;
        // A new file's name first (`crate::ns`): on the backing and durable.
        self.settle_name(&i)?;
        // Batches compressed after their WRITEs' answers end first (else written twice).
        self.files.wait_batches(&i, false);
        self.files.with_container(
            &i,
            |c| {
                c.fsync()?;
                if !datasync {
                    c.storage().file().sync_all()?;
                }
                Ok(())
            },
            "fsync",
        )?;
        match i.file.take_unreported() {
            Some(e) => Err(Errno::from_i32(e)),
            None => Ok(()),
        }
    }
}
