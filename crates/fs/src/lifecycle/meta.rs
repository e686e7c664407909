//! Times, owner and mode set through the mount (rule 7 of [`state`](super::state)): kept in
//! memory while a file is being written, shown by `stat`, and put on the backing file at
//! the next of our calls on it.

use std::sync::Arc;

use fuser::Errno;

use super::commit::keep_times;
use super::state::OpenFile;
use super::Files;
use crate::inode::Inode;
use crate::sys;

impl Files {
    /// `utimens` on a regular file (`UTIME_OMIT`, `UTIME_NOW` or a time for each), and, if
    /// it has a state, the times it set remembered there to be kept over our write-outs
    /// (rule 7). Both under the file's lock, so no write-out comes in between.
    pub fn set_times(
        &self,
        inode: &Arc<Inode>,
        atime: libc::timespec,
        mtime: libc::timespec,
    ) -> Result<(), Errno> {
        {
            let mut open = inode.file.open.lock().unwrap();
            if let Some(of) = open.as_mut().filter(|of| of.writers > 0) {
                // A file being written (`tar` sets times, owner and mode before its close):
                // the times wait in memory, shown by `stat`, and go on the backing file at
                // the next of our calls on it, its last close or an fsync (rule 7), so the
                // caller does not wait for the backing filesystem.
                let now = wall_clock();
                let set = |t: libc::timespec| match t.tv_nsec {
                    libc::UTIME_OMIT => None,
                    libc::UTIME_NOW => Some(now),
                    _ => Some((t.tv_sec, t.tv_nsec)),
                };
                let (a, m) = (set(atime), set(mtime));
                if a.is_some() || m.is_some() {
                    of.times.atime = a.or(of.times.atime);
                    of.times.mtime = m.or(of.times.mtime);
                    of.times.ctime = Some(now);
                }
                return Ok(());
            }
        }
        let fd = self.inodes.fd(inode)?;
        let mut open = inode.file.open.lock().unwrap();
        sys::utimens(&fd, atime, mtime)?;
        let Some(of) = open.as_mut() else {
            return Ok(());
        };
        let now = [atime, mtime].iter().any(|t| t.tv_nsec == libc::UTIME_NOW);
        let st = if now { Some(sys::fstat(&fd)?) } else { None };
        let set = |t: libc::timespec, (sec, nsec): (i64, i64)| match t.tv_nsec {
            libc::UTIME_OMIT => None,
            libc::UTIME_NOW => Some((sec, nsec)),
            _ => Some((t.tv_sec, t.tv_nsec)),
        };
        let (a, m) = st.map_or(((0, 0), (0, 0)), |st| {
            ((st.st_atime, st.st_atime_nsec), (st.st_mtime, st.st_mtime_nsec))
        });
        of.times.atime = set(atime, a).or(of.times.atime);
        of.times.mtime = set(mtime, m).or(of.times.mtime);
        Ok(())
    }

    /// chmod and chown of a file being written (`tar -x` sets owner and mode before its
    /// close, `cp -p` too): they wait in memory with its times, shown by `stat`, and go on
    /// the backing file at the next of our calls on it, its last close (or its last
    /// writer's) or an fsync (rule 7), so the caller does not wait for the backing
    /// filesystem. Returns false, having done nothing, for what must be done now: a file
    /// with no writer, one that may have an access ACL (`no_acl` false: a chmod rewrites
    /// it), setuid or setgid bits to set, a chown that changes the owner or group (it may
    /// be refused, and clears those bits), a backing file the daemon may not change (not
    /// its own, without root) or that refuses changes (append-only, immutable), or one
    /// whose attributes cannot be read. What is left to wait for is only ever a chown to
    /// the owner the file has (whose effect is the change time) and plain permission bits.
    /// A deferral hands back the backing file's attributes it read, for the reply
    /// ([`Deferred::Waits`]).
    pub fn defer_meta(
        &self,
        inode: &Arc<Inode>,
        mode: Option<u32>,
        owner: (Option<u32>, Option<u32>),
        no_acl: bool,
        as_root: bool,
    ) -> Result<Deferred, Errno> {
        if !no_acl || mode.is_some_and(|m| m & (libc::S_ISUID | libc::S_ISGID) != 0) {
            return Ok(Deferred::No);
        }
        let mut open = inode.file.open.lock().unwrap();
        let Some(of) = open.as_mut().filter(|of| of.writers > 0) else {
            return Ok(Deferred::No);
        };
        let Ok((st, fixed)) = sys::stat_and_fixed(of.container.storage().file()) else {
            return Ok(Deferred::No);
        };
        let (st_mode, st_uid, st_gid) = (st.st_mode, st.st_uid, st.st_gid);
        if fixed || !(as_root || st_uid == sys::euid()) {
            return Ok(Deferred::No);
        }
        let (now_mode, uid, gid) = of.meta.over_parts(st_mode, st_uid, st_gid);
        let chown = owner.0.is_some() || owner.1.is_some();
        if chown {
            let same = owner.0.is_none_or(|u| u == uid) && owner.1.is_none_or(|g| g == gid);
            if !same || now_mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
                return Ok(Deferred::No);
            }
        }
        // Times kept for `stat` are no longer the file's (its next superblock has none; a
        // location record is written again without its change time now); the
        // modification time a superblock kept stays, put on the backing file with the
        // rest (rule 7).
        let kept = of.container.kept_times();
        if kept.is_some() && of.container.forget_kept_times().is_err() {
            // (A record that cannot be written again now: the change is made at once
            // instead, and `drop_kept_times` says why.)
            return Ok(Deferred::No);
        }
        // Forgetting kept times wrote to the backing file: what was read before is stale.
        let st = kept.is_none().then_some(st);
        if chown {
            of.meta.owner = Some((uid, gid));
        }
        if let Some(m) = mode {
            of.meta.mode = Some(m & 0o7777);
        }
        of.meta.backing_mode = Some(st_mode & 0o7777);
        of.times.ctime = Some(wall_clock());
        if let Some(mtime) = kept.and_then(|k| k.mtime) {
            of.times.mtime = of.times.mtime.or(Some((mtime.0, i64::from(mtime.1))));
        }
        Ok(Deferred::Waits(st))
    }

    /// The owner, mode and times waiting in memory for `inode` go on the backing file now
    /// (before a change that must see them there: an xattr, an owner or mode done at once).
    pub fn apply_meta(&self, inode: &Arc<Inode>) {
        let mut open = inode.file.open.lock().unwrap();
        if let Some(of) = open.as_mut().filter(|of| of.meta_waits()) {
            self.keep_times(inode, of);
        }
    }

    /// Rule 7 after one of our calls on a file's container: an owner and mode waiting go on
    /// the backing file, and the times set explicitly go back on it if that call moved them
    /// (a failure is logged and kept for the next fsync: `commit::lost_meta`).
    pub fn keep_times(&self, inode: &Arc<Inode>, of: &mut OpenFile) {
        keep_times(&self.inodes, inode, of);
    }
}

/// What [`Files::defer_meta`] did.
pub enum Deferred {
    /// Nothing: the change is to be made on the backing file now.
    No,
    /// The change waits in memory. The backing file's attributes as read for the decision
    /// (`None` when the decision itself wrote to the file): with what waits laid over them
    /// (`attr_with`), they are what `stat` shows now.
    Waits(Option<sys::Stat>),
}

#[cfg(test)]
impl Deferred {
    /// Whether the change waits in memory.
    pub fn waits(&self) -> bool {
        matches!(self, Deferred::Waits(_))
    }
}

/// Now, as the backing filesystem's times are: seconds and nanoseconds since the epoch.
fn wall_clock() -> (i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, i64::from(d.subsec_nanos()))
}
