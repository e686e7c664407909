//! New files named behind the caller (`crate::ns`): the CREATE that takes a file made
//! ahead, the LOOKUP of a name still pending, the waits of everything that looks at the
//! backing directory's names, and the backing calls the applier makes for us.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Errno, FileAttr, INodeNo};

use super::names::is_dict_dir;
use super::xattr::{NO_ACCESS_ACL, NO_DEFAULT_ACL};
use super::{Core, Who};
use crate::inode::known::Change;
use crate::inode::Inode;
use crate::ns::pool::POOL_MODE;
use crate::ns::{PoolName, Target, Why};
use crate::sys;

impl Core {
    /// Waits until every name pending now is on the backing (before anything that reads
    /// or changes the backing directory's names itself).
    pub(super) fn drain_names(&self) {
        if let Some(ns) = &self.ns {
            ns.drain();
        }
    }

    /// A CREATE answered with a file made ahead, its name applied behind (`crate::ns`), or
    /// `None` where that cannot be told apart from a create in place (see `ns`'s doc): the
    /// caller then creates it in place.
    pub(super) fn create_pending(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
    ) -> Result<Option<FileAttr>, Errno> {
        let Some(ns) = &self.ns else { return Ok(None) };
        let b = name.as_bytes();
        let not = |why: Why| {
            ns.stats.not_behind[why as usize].fetch_add(1, Ordering::Relaxed);
            Ok(None)
        };
        if mode & (libc::S_ISUID | libc::S_ISGID) != 0 || is_dict_dir(parent.0, b) {
            return not(Why::Mode);
        }
        let p = self.inode(parent)?;
        let cname = sys::entry_name(name)?;
        // Absent: all the directory's names are known and this is not one, or a LOOKUP
        // just found it absent on the backing (`Namespace::absent`).
        let known_absent = p.dir.as_ref().is_some_and(|d| d.names.absent(b)) || ns.absent(&p, b);
        if !known_absent {
            return not(Why::Unknown);
        }
        if Some(p.key.0) != self.inodes.get(1).map(|r| r.key.0) || !p.no_xattrs.has(NO_DEFAULT_ACL) {
            return not(Why::Directory);
        }
        let dir = self.fd(&p)?;
        // A setgid directory gives its group to what is made in it; a pool file was made
        // elsewhere, and the rename into a directory of another project (project quotas'
        // inheritance) or an encrypted one would be refused behind (EXDEV).
        if sys::fstat(&dir)?.st_mode & libc::S_ISGID != 0
            || sys::dir_flags(&dir).map_or_else(
                // (A filesystem without inode flags has neither.)
                |e| {
                    !matches!(
                        e.raw_os_error(),
                        Some(libc::ENOTTY | libc::EOPNOTSUPP | libc::EINVAL)
                    )
                },
                |f| f & (FS_PROJINHERIT_FL | FS_ENCRYPT_FL) != 0,
            )
        {
            return not(Why::Directory);
        }
        if self.space.low(|| self.free_space()) {
            return not(Why::Space);
        }
        let Some(ready) = ns.take() else {
            return not(Why::NoFile);
        };
        let pool = PoolName {
            name: ready.name.clone(),
        };
        // The file as the caller would have made it: its mode, made now, the caller's.
        let made = (|| -> Result<libc::stat, Errno> {
            if mode != POOL_MODE {
                sys::fchmod(&ready.file, mode)?;
            }
            sys::utimens(ready.file.as_fd(), now_ts(), now_ts())?;
            let st = sys::fstat(&ready.file)?;
            if self.as_root && self.give_to_caller(req, &p, ready.file.as_fd(), &st)? {
                return Ok(sys::fstat(&ready.file)?);
            }
            Ok(st)
        })();
        let st = match made {
            Ok(st) => st,
            Err(e) => {
                ns.discard(&pool);
                return Err(e);
            }
        };
        let (ino, inode) = self.inodes.insert_made(ready.path, &st, ready.handle);
        inode.no_caps.store(true, Ordering::Relaxed);
        // (Its directory has no default ACL, so neither has it an access ACL.)
        inode.no_xattrs.learn(NO_ACCESS_ACL, inode.no_xattrs.generation());
        if let Err(e) = self.attach_created(&inode, ready.file, &p, b) {
            self.inodes.forget(ino, 1);
            ns.discard(&pool);
            return Err(e);
        }
        ns.queue(pool, inode.clone(), p.clone(), cname);
        self.dir_changed(parent, Change::Made(b));
        self.attr_with(ino, &inode, &st).map(Some)
    }

    /// A LOOKUP of a name pending in `parent`: the file (one lookup counted) and its
    /// attributes, from memory. `None`: not pending (or forgotten by the kernel meanwhile:
    /// then the queue is drained and the backing asked as usual).
    pub(super) fn lookup_pending(
        &self,
        parent: &Arc<Inode>,
        name: &[u8],
    ) -> Option<Result<(u64, FileAttr), Errno>> {
        let ns = self.ns.as_ref()?;
        let obj = ns.pending(parent, name)?;
        let Some(ino) = self.inodes.looked_up(&obj) else {
            ns.drain();
            return None;
        };
        Some(
            self.attr(ino, &obj)
                .inspect_err(|_| self.inodes.forget(ino, 1))
                .map(|a| (ino, a)),
        )
    }

    /// A directory's `stat` while entries made in it are pending: the time of the newest
    /// as its mtime and ctime (the backing directory's move once they are applied).
    pub(super) fn pending_times(&self, dir: &Inode, st: &mut libc::stat) {
        let Some(t) = self.ns.as_ref().and_then(|ns| ns.changed(dir)) else {
            return;
        };
        if (t.tv_sec, t.tv_nsec) > (st.st_mtime, st.st_mtime_nsec) {
            st.st_mtime = t.tv_sec;
            st.st_mtime_nsec = t.tv_nsec;
        }
        if (t.tv_sec, t.tv_nsec) > (st.st_ctime, st.st_ctime_nsec) {
            st.st_ctime = t.tv_sec;
            st.st_ctime_nsec = t.tv_nsec;
        }
    }

    /// fsync of `inode`: its name (if it was pending) applied and durable.
    pub(super) fn settle_name(&self, inode: &Arc<Inode>) -> Result<(), Errno> {
        match &self.ns {
            Some(ns) => ns.settle_for(inode, self).map_err(Errno::from),
            None => Ok(()),
        }
    }
}

/// `FS_PROJINHERIT_FL`, `FS_ENCRYPT_FL` (linux/fs.h).
const FS_PROJINHERIT_FL: u32 = 0x2000_0000;
const FS_ENCRYPT_FL: u32 = 0x0000_0800;

fn now_ts() -> libc::timespec {
    libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    }
}

impl Target for Core {
    fn place(
        &self,
        from: (BorrowedFd, &CStr),
        obj: &Arc<Inode>,
        parent: &Arc<Inode>,
        name: &CString,
    ) -> io::Result<()> {
        // (The parent's fd before the namespace lock: reopening by name takes it.)
        let dir = self.inodes.fd(parent)?;
        // As a rename through the mount (`dir_ops.rs`): pack reclaim sees what moves.
        let guard = self.reclaimer.as_ref().map(|r| r.namespace_guard());
        let names = self.inodes.change_names();
        let r = match sys::renameat2(from.0, from.1, &dir, name, libc::RENAME_NOREPLACE) {
            // (A backing filesystem without RENAME_NOREPLACE: the name is known absent,
            // and BACKING is this daemon's alone.)
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => sys::renameat2(from.0, from.1, &dir, name, 0),
            r => r,
        };
        if r.is_ok() {
            self.inodes.placed(obj, parent, name);
        }
        drop(names);
        if let (Ok(()), Some(rc)) = (&r, &self.reclaimer) {
            rc.note_moved(&dir, name);
        }
        drop(guard);
        r
    }

    fn failed(&self, pool: &PoolName, obj: &Arc<Inode>, parent: &Arc<Inode>, name: &CString, e: &io::Error) {
        log::warn!(
            "{}/{}: the new file could not be named ({e}; it is still {}): its data is lost",
            self.describe(parent),
            name.to_string_lossy(),
            pool.name.to_string_lossy()
        );
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        // Its pool file goes (`ns`): bytes a commit packed for it are garbage.
        self.files.note_pack_garbage();
        obj.file.lost_write(errno);
        parent.file.lost_write(errno);
        if let Some(d) = parent.dir.as_ref() {
            d.names_changed(Change::Gone(name.as_bytes()));
        }
        // The kernel's entry goes, from a thread of its own: the kernel takes the
        // directory's lock for it, which a CREATE waiting for us may hold.
        if let (Some(n), Some(p)) = (self.notifier.get().cloned(), self.inodes.number(parent)) {
            let name = OsStr::from_bytes(name.as_bytes()).to_owned();
            std::thread::spawn(move || {
                let _ = n.inval_entry(INodeNo(p), &name);
            });
        }
    }

    fn sync_dir(&self, dir: &Arc<Inode>) -> io::Result<()> {
        sys::fsync_path(self.inodes.fd(dir)?, false)
    }

    fn syncfs(&self) -> io::Result<()> {
        self.inodes.syncfs()
    }
}
