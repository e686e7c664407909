//! `stat` through the mount: the backing entry's attributes with a regular file's logical
//! size and extent-sized blocks, type conversion, getattr/setattr/statfs/readlink/access,
//! and the clearing of setuid/setgid that changes to a file's data or ACL cause.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};
use log::warn;

use super::xattr::NO_ACCESS_ACL;
use super::Core;
use super::Who;
use crate::creds;
use crate::inode::Inode;
use crate::lifecycle::Deferred;
use crate::sys;

/// What `setattr` was asked to change.
#[derive(Clone, Copy)]
pub(super) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub(super) fn dtype_kind(d: u8) -> FileType {
    match d {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs((-sec) as u64) + Duration::from_nanos(nsec as u64)
    }
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut s = -(d.as_secs() as i64);
                    let mut n = -(d.subsec_nanos() as i64);
                    if n < 0 {
                        s -= 1;
                        n += 1_000_000_000;
                    }
                    (s, n)
                }
            };
            libc::timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            }
        }
    }
}

impl Core {
    pub(super) fn attr(&self, ino: u64, inode: &Arc<Inode>) -> Result<FileAttr, Errno> {
        let st = sys::fstat(self.fd(inode)?)?;
        self.attr_with(ino, inode, &st)
    }

    /// The attributes from a `stat` the caller just took (no second `fstat`).
    pub(super) fn attr_with(&self, ino: u64, inode: &Arc<Inode>, st: &libc::stat) -> Result<FileAttr, Errno> {
        // A regular file's times set explicitly are the state's while it has one (a write-out
        // may have moved the backing file's a moment ago: `lifecycle::state`, rule 7).
        let (size, set, meta) = if inode.is_reg {
            self.files.size_and_times(ino, inode)?
        } else {
            (st.st_size as u64, Default::default(), Default::default())
        };
        // An owner and mode waiting in memory (rule 7) are the file's.
        let mut st = *st;
        (st.st_mode, st.st_uid, st.st_gid) = meta.over(&st);
        if inode.is_dir() {
            self.pending_times(inode, &mut st);
        }
        let st = &st;
        // A regular file's I/O and allocation unit is its extent: what holes, SEEK_HOLE and
        // efficient I/O sizes are measured in (as seek tests and `cp` read st_blksize).
        let blksize = if inode.is_reg {
            self.files
                .extent_size(inode)
                .unwrap_or(1 << self.opts().extent_shift)
        } else {
            4096
        };
        // A packed file's backing file holds no block: what it takes is its share of its
        // pack block (so `du` through the mount adds up to what `squeezefs stats` counts).
        let stored = if inode.is_reg && size > 0 && st.st_blocks == 0 {
            self.files.packed_stored(ino, inode).ok().flatten()
        } else {
            None
        };
        Ok(stat_attr(ino, st, size, set, blksize, inode.is_reg, stored))
    }

    /// The attributes of a file whose logical size could not be read: the backing file's
    /// own (a listing shows the entry; the `stat` after it gets the error).
    pub(super) fn backing_attr(&self, ino: u64, st: &libc::stat) -> FileAttr {
        stat_attr(ino, st, st.st_size as u64, Default::default(), 4096, false, None)
    }

    pub(super) fn do_getattr(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let i = self.inode(ino)?;
        self.attr(ino.0, &i)
    }

    /// A size change first holds off stores into the kernel's page cache, as an open for
    /// writing does (`wait`: see `do_open`).
    pub(super) fn do_setattr(
        &self,
        req: &Who,
        ino: INodeNo,
        a: SetAttr,
        wait: bool,
    ) -> Result<FileAttr, Errno> {
        self.check_writable()?;
        let inode = self.inode(ino)?;
        // A directory's new times or mode wait for the names pending in it (`crate::ns`):
        // applied after, they would move its times again, or meet a mode that refuses them.
        if inode.is_dir() && self.ns.as_ref().is_some_and(|ns| ns.pending_in(&inode)) {
            self.drain_names();
        }
        let _hold = if a.size.is_some() && inode.is_reg {
            Some(self.files.hold_spills(&inode, wait)?)
        } else {
            None
        };
        let owner = (a.uid, a.gid);
        let meta = a.mode.is_some() || owner.0.is_some() || owner.1.is_some();
        if meta && inode.is_reg {
            // A file being written: owner and mode wait in memory when they can (rule 7
            // of `lifecycle::state`); whatever waits goes first when they cannot.
            let no_acl = inode.no_xattrs.has(NO_ACCESS_ACL);
            let only_meta = a.size.is_none() && a.atime.is_none() && a.mtime.is_none();
            if only_meta {
                match self
                    .files
                    .defer_meta(&inode, a.mode, owner, no_acl, self.as_root)?
                {
                    Deferred::Waits(st) => {
                        let mut st = match st {
                            Some(st) => st,
                            None => sys::fstat(self.fd(&inode)?)?,
                        };
                        // What this SETATTR set, in its answer whatever happened since:
                        // a last RELEASE may have put it on the backing file and dropped
                        // the state in between (the stat above is then from before, and
                        // no state overlays it: the answer, which the kernel caches,
                        // showed the old mode — pjdfstest `chmod::change_perm` once in CI).
                        if let Some(m) = a.mode {
                            st.st_mode = (st.st_mode & libc::S_IFMT) | (m & 0o7777);
                        }
                        if let Some(u) = owner.0 {
                            st.st_uid = u;
                        }
                        if let Some(g) = owner.1 {
                            st.st_gid = g;
                        }
                        return self.attr_with(ino.0, &inode, &st);
                    }
                    Deferred::No => {}
                }
            }
            self.files.apply_meta(&inode);
        }
        if meta || a.atime.is_some() || a.mtime.is_some() {
            // The backing file's ctime moves now: a change time kept from before a
            // background recompression is no longer the file's.
            self.files.drop_kept_times(&inode)?;
        }
        if let Some(m) = a.mode {
            sys::chmod(self.fd(&inode)?, m & 0o7777)?;
        }
        if owner.0.is_some() || owner.1.is_some() {
            sys::chown(self.fd(&inode)?, a.uid, a.gid)?;
        }
        if let Some(s) = a.size {
            if !inode.is_reg {
                return Err(if inode.is_dir() {
                    Errno::EISDIR
                } else {
                    Errno::EINVAL
                });
            }
            self.files.change_data(&inode, |c| c.set_size(s), "truncate")?;
            self.kill_privs(req, ino, &inode)?;
            // The backing file's mtime/ctime follow a size change like a kernel
            // filesystem's do (the kernel may also send explicit times).
            if a.mtime.is_none() {
                let now = timespec(Some(TimeOrNow::Now));
                sys::utimens(self.fd(&inode)?, timespec(None), now)?;
            }
        }
        if a.atime.is_some() || a.mtime.is_some() {
            let (at, mt) = (timespec(a.atime), timespec(a.mtime));
            if inode.is_reg {
                // Kept over the daemon's later write-outs of the file (`lifecycle::state`,
                // rule 7).
                self.files.set_times(&inode, at, mt)?;
            } else {
                sys::utimens(self.fd(&inode)?, at, mt)?;
            }
        }
        if meta || a.atime.is_some() || a.mtime.is_some() {
            self.files.drop_kept_times_after(&inode);
        }
        self.attr(ino.0, &inode)
    }

    pub(super) fn do_readlink(&self, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let i = self.inode(ino)?;
        sys::readlink(self.fd(&i)?).map_err(Errno::from)
    }

    /// The backing filesystem's figures.
    pub(super) fn do_statfs(&self) -> Result<libc::statvfs, Errno> {
        let r = self.inode(INodeNo(1))?;
        sys::statvfs(self.fd(&r)?).map_err(Errno::from)
    }

    /// Permission checks are the kernel's (default_permissions); existence is ours.
    pub(super) fn do_access(&self, ino: INodeNo) -> Result<(), Errno> {
        self.inode(ino).map(drop)
    }

    /// Clears the setuid/setgid bits a change to `inode`'s data by the request's caller
    /// clears on a local filesystem (see `creds`): after a write FUSE flags, a truncate, an
    /// fallocate.
    pub(super) fn kill_privs(&self, req: &Who, ino: INodeNo, inode: &Arc<Inode>) -> Result<(), Errno> {
        self.clear_mode_bits(
            req,
            ino,
            inode,
            libc::S_ISUID | libc::S_ISGID,
            creds::privs_to_kill,
        )
    }

    /// Clears what `rule` says of the bits `watched` of `inode`'s mode (nothing is read
    /// unless one of them is set), and has the kernel forget the mode it cached.
    pub(super) fn clear_mode_bits(
        &self,
        req: &Who,
        ino: INodeNo,
        inode: &Arc<Inode>,
        watched: u32,
        rule: fn(u32, u32, &creds::Caller) -> u32,
    ) -> Result<(), Errno> {
        let fd = self.fd(inode)?;
        let st = sys::fstat(&fd)?;
        if st.st_mode & watched == 0 {
            return Ok(());
        }
        let kill = rule(st.st_mode, st.st_gid, &creds::Caller::of(req.pid(), req.gid()));
        if kill != 0 {
            sys::chmod(&fd, st.st_mode & 0o7777 & !kill)?;
            self.invalidate_attr(ino);
        }
        Ok(())
    }

    /// After an access ACL is set: the setgid bit goes if the caller is outside the file's
    /// group without CAP_FSETID (the kernel cannot tell us without FUSE_SETXATTR_EXT).
    pub(super) fn kill_sgid_after_acl(
        &self,
        req: &Who,
        ino: INodeNo,
        inode: &Arc<Inode>,
    ) -> Result<(), Errno> {
        self.clear_mode_bits(req, ino, inode, libc::S_ISGID, creds::sgid_to_kill_on_acl)
    }

    /// Tells the kernel its cached attributes of `ino` are stale (a mode changed behind a
    /// request that does not return attributes). Only attributes: no page is touched, so
    /// this cannot wait on I/O.
    pub(super) fn invalidate_attr(&self, ino: INodeNo) {
        if let Some(n) = self.notifier.get() {
            if let Err(e) = n.inval_inode(ino, -1, 0) {
                // ENOENT: the kernel has already forgotten the inode; nothing is cached.
                if e.raw_os_error() != Some(libc::ENOENT) {
                    warn!("inode {}: cannot invalidate the kernel's attributes: {e}", ino.0);
                }
            }
        }
    }
}

/// A `FileAttr` from a backing `stat` with the logical size, times set explicitly and
/// I/O unit given.
fn stat_attr(
    ino: u64,
    st: &libc::stat,
    size: u64,
    set: crate::lifecycle::state::Times,
    blksize: u64,
    is_reg: bool,
    stored: Option<u64>,
) -> FileAttr {
    let (asec, ansec) = set.atime.unwrap_or((st.st_atime, st.st_atime_nsec));
    let (msec, mnsec) = set.mtime.unwrap_or((st.st_mtime, st.st_mtime_nsec));
    // Times set but not on the backing file yet changed the file then (rule 7).
    let (csec, cnsec) = set.ctime.unwrap_or((st.st_ctime, st.st_ctime_nsec));
    // A packed file's backing file holds no block: it reports its share of its pack
    // block (`stored`) in 512-byte units rounded to the nearest, so a tree's total is what
    // `squeezefs stats` counts; and never zero, which `tar --sparse`, `cp` and xfstests
    // read as "all holes, skip the data".
    let blocks = if is_reg && size > 0 && st.st_blocks == 0 {
        stored.map_or(1, |b| (b.saturating_add(256) / 512).max(1))
    } else {
        st.st_blocks as u64
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks,
        atime: time(asec, ansec),
        mtime: time(msec, mnsec),
        ctime: time(csec, cnsec),
        crtime: UNIX_EPOCH,
        kind: kind_of(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: blksize as u32,
        flags: 0,
    }
}
