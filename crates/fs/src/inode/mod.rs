//! The inode table: every inode the kernel knows, keyed by the backing file's (device,
//! inode) so hard links share one FUSE inode; lookup counts released on FORGET. Open
//! regular files share one container state, whatever the number of handles.
//!
//! Inode numbers are the backing files' own (`st_ino`), so `stat`, `readdir`'s `d_ino`,
//! `ls -i`, `find -inum` and `du`'s hard-link detection agree through the mount and with the
//! backing directory. The backing root is FUSE's inode 1; the few backing inodes whose
//! number cannot be used as is (on another filesystem mounted inside BACKING, number 1 or
//! numbers from [`table::REMAP_BASE`] up) get numbers from [`table::REMAP_BASE`] up instead.
//!
//! Each inode is reached through an `O_PATH` fd, and its fd is only cached: at most
//! [`FD_CACHE`] such fds are held (a quarter of the open-file limit when that is smaller),
//! the oldest closed first and reopened when needed again, so a tree of any size fits under
//! the open-file limit. How an inode is reopened:
//! * **By handle** when the daemon may (root: CAP_DAC_READ_SEARCH): it keeps its kernel file
//!   handle and comes back with `open_by_handle_at` (as virtiofsd does).
//! * **By name** otherwise (path mode, as libfuse's passthrough without handles): it keeps
//!   its parent inode and the name it was last seen under, and comes back with `openat` in
//!   its parent's fd (reopened the same way), checked to be the same file: (device, inode),
//!   type and file handle (`name_to_handle_at` needs no privilege; only opening by it
//!   does). Every change of names goes through this daemon (BACKING is ours alone): renames
//!   and unlinks hold the namespace lock for writing and update what they move
//!   ([`Inodes::renamed`]); lookups and creates hold it for reading while they record a name
//!   ([`Inodes::naming`]), and so does reopening by name. A hard link is reopened by the
//!   name it was last seen under; when that name goes (unlinked, or replaced by a rename)
//!   the inode keeps its fd outside the cache's budget until a lookup names it again or it
//!   is forgotten (an unlinked file still open, a link whose other name the kernel holds).
//!
//! Lock order: the namespace lock, then the table, then an inode's `fd` (its fd and, in path
//! mode, its place).
//!
//! An inode on another filesystem mounted inside the backing directory (handles do not
//! reach it) is reopened by name too, or keeps its fd in handle mode.

pub mod known;
mod node;
mod table;

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use node::Handle;
pub use node::Inode;
use table::Table;

use crate::sys;

/// Most `O_PATH` fds kept open for inodes that can be reopened (by handle or by name;
/// lowered to a quarter of the open-file limit when that is smaller).
pub const FD_CACHE: usize = 4096;

/// An `O_PATH` fd borrowed for one operation.
#[derive(Clone)]
pub struct PathFd(Arc<OwnedFd>);

impl AsFd for PathFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

pub struct Inodes {
    t: RwLock<Table>,
    /// The backing root opened for reading (`open_by_handle_at` and `syncfs` refuse
    /// `O_PATH` fds).
    pub root_dir: std::fs::File,
    /// Reopen by handle works here (root's mount id), or `None`.
    mount_id: Option<i32>,
    /// Inodes whose fd is cached, oldest first.
    cached: Mutex<VecDeque<Weak<Inode>>>,
    budget: AtomicUsize,
    /// Path mode: held for writing while a rename or unlink changes names and the inodes'
    /// recorded names with them, for reading while an inode is reopened by name.
    names: RwLock<()>,
    /// Inodes dropped from the table since the last [`Inodes::compact`].
    forgotten: AtomicU64,
}

impl Inodes {
    /// The table of the backing directory `backing`: its root opened (an O_PATH fd for
    /// the `*at()` calls, a directory fd for `syncfs`), with the root's `stat`.
    pub fn open(backing: &std::path::Path) -> io::Result<(Inodes, libc::stat)> {
        let root = sys::open_root(backing)?;
        let st = sys::fstat(&root)?;
        let root_dir = sys::reopen(&root, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok((Inodes::new(root, root_dir, &st), st))
    }

    fn new(root: OwnedFd, root_dir: std::fs::File, st: &libc::stat) -> Inodes {
        let key = (st.st_dev, st.st_ino);
        // Handles are used only if one round trip through them works here.
        let mount_id = sys::file_handle(&root)
            .and_then(|(id, h)| sys::open_handle(&root_dir, &h).map(|_| id))
            .ok();
        let root = Arc::new(root);
        let root_inode = Arc::new(Inode::new(
            key,
            libc::S_IFDIR,
            Some(root.clone()),
            None,
            None,
            false,
            u32::MAX,
        ));
        let t = Table::new(key, root_inode);
        Inodes {
            t: RwLock::new(t),
            root_dir,
            mount_id,
            cached: Mutex::new(VecDeque::new()),
            budget: AtomicUsize::new(FD_CACHE),
            names: RwLock::new(()),
            forgotten: AtomicU64::new(0),
        }
    }

    /// Fits the fd cache to the process's open-file limit.
    pub fn fit_fd_cache(&self, fd_limit: u64) {
        let n = (fd_limit / 4).clamp(16, FD_CACHE as u64) as usize;
        self.budget.store(n, Ordering::Relaxed);
    }

    /// Whether inodes are reopened by handle (false: by name, path mode).
    pub fn uses_handles(&self) -> bool {
        self.mount_id.is_some()
    }

    /// The number of a known inode.
    pub fn number(&self, inode: &Arc<Inode>) -> Option<u64> {
        let t = self.t.read().unwrap();
        t.number_of(inode.key)
            .filter(|&i| t.get(i).is_some_and(|x| Arc::ptr_eq(x, inode)))
    }

    pub fn get(&self, ino: u64) -> Option<Arc<Inode>> {
        self.t.read().unwrap().get(ino).cloned()
    }

    /// The inode's `O_PATH` fd, reopened from its handle or by name if it was closed.
    pub fn fd(&self, inode: &Arc<Inode>) -> io::Result<PathFd> {
        if let Some(fd) = inode.fd.lock().unwrap().fd.as_ref() {
            return Ok(PathFd(fd.clone()));
        }
        if let Some(handle) = inode.open_handle() {
            let mut slot = inode.fd.lock().unwrap();
            if let Some(fd) = slot.fd.as_ref() {
                return Ok(PathFd(fd.clone()));
            }
            let fd = Arc::new(sys::open_handle(&self.root_dir, &handle)?);
            slot.fd = Some(fd.clone());
            drop(slot);
            self.remember(inode);
            return Ok(PathFd(fd));
        }
        let _names = self.names.read().unwrap();
        self.reopen_by_name(inode).map(PathFd)
    }

    /// Path mode: the inode's fd, reopened in its parent's (reopened likewise) under the
    /// name it was last seen under, if it was closed. The caller holds `names`.
    fn reopen_by_name(&self, inode: &Arc<Inode>) -> io::Result<Arc<OwnedFd>> {
        if let Some(fd) = inode.fd.lock().unwrap().fd.as_ref() {
            return Ok(fd.clone());
        }
        let stale = || io::Error::from_raw_os_error(libc::ESTALE);
        let (parent, name) = inode.place().ok_or_else(stale)?;
        // The parent as the table knows it now: if the kernel forgot it and looked it up
        // again, renames went to the new object.
        let parent = self.current(&parent);
        let dir = self.reopen_by_name(&parent)?;
        let fd = sys::open_path(&*dir, &name)?;
        let st = sys::fstat(&fd)?;
        // Never another file under a name that went stale: the same (device, inode), type
        // and file handle, or ESTALE (a handle that cannot be read counts as another).
        if (st.st_dev, st.st_ino) != inode.key || !Self::same_object(inode, &fd, &st, false) {
            return Err(stale());
        }
        let mut slot = inode.fd.lock().unwrap();
        if let Some(fd) = slot.fd.as_ref() {
            return Ok(fd.clone());
        }
        let fd = Arc::new(fd);
        slot.fd = Some(fd.clone());
        drop(slot);
        self.remember(inode);
        Ok(fd)
    }

    /// The table's object for `inode`'s backing file (`inode` itself unless it was forgotten
    /// and looked up again).
    fn current(&self, inode: &Arc<Inode>) -> Arc<Inode> {
        self.t
            .read()
            .unwrap()
            .inode_of(inode.key)
            .unwrap_or_else(|| inode.clone())
    }

    /// Whether the inode's fd may be closed by the cache: it has a way back.
    fn reopenable(&self, inode: &Inode) -> bool {
        self.reopenable_with(inode, &inode.fd.lock().unwrap())
    }

    /// [`Inodes::reopenable`] with the inode's `fd` lock held (`s`).
    fn reopenable_with(&self, inode: &Inode, s: &node::FdPlace) -> bool {
        inode.by_handle || (self.mount_id.is_none() && s.place.is_some())
    }

    /// Opens the inode's file for I/O with `flags`: by handle where possible (no path walk
    /// through `/proc/self/fd`), else by reopening its `O_PATH` fd.
    pub fn reopen(&self, inode: &Arc<Inode>, flags: i32) -> io::Result<std::fs::File> {
        self.reopen_with(inode, flags, true)
    }

    /// [`Inodes::reopen`], `as_owner`: with owner access added for the open if the mode
    /// refuses it (a chmod and back, which moves the file's ctime); else refused.
    pub fn reopen_with(&self, inode: &Arc<Inode>, flags: i32, as_owner: bool) -> io::Result<std::fs::File> {
        if let (Some(h), Some(_)) = (inode.open_handle(), self.mount_id) {
            if let Ok(fd) = sys::open_handle_with(&self.root_dir, &h, flags) {
                return Ok(std::fs::File::from(fd));
            }
        }
        let fd = self.fd(inode)?;
        match sys::reopen(&fd, flags) {
            Err(e) if as_owner && e.raw_os_error() == Some(libc::EACCES) => {
                Self::reopen_as_owner(&fd, flags).ok_or(e)
            }
            r => r,
        }
    }

    /// A daemon without root opening one of its own files whose mode denies its owner
    /// (`tar` makes placeholders with mode 0; a file may be chmod 0 or 0200), with
    /// [`squeezefs_container::with_owner_access`]. The open fd keeps working whatever the
    /// mode. `None`: not ours, or still refused.
    fn reopen_as_owner(fd: &PathFd, flags: i32) -> Option<std::fs::File> {
        squeezefs_container::with_owner_access(
            || sys::fstat(fd).map(|st| (st.st_uid, st.st_mode)),
            |mode| sys::chmod(fd, mode),
            || sys::reopen(fd, flags),
        )
        .ok()
        .flatten()
    }

    /// Notes a newly cached fd; closes the oldest cached fds beyond the budget. An open
    /// file's fd is kept (an unlinked open file may have no handle to come back by).
    fn remember(&self, inode: &Arc<Inode>) {
        let mut q = self.cached.lock().unwrap();
        q.push_back(Arc::downgrade(inode));
        let mut spins = q.len();
        let budget = self.budget.load(Ordering::Relaxed);
        while q.len() > budget && spins > 0 {
            spins -= 1;
            let Some(w) = q.pop_front() else { break };
            let Some(old) = w.upgrade() else { continue };
            let busy = old
                .file
                .open
                .try_lock()
                .map_or(true, |o| o.is_some() || o.lazy > 0)
                || !self.reopenable(&old);
            if busy {
                q.push_back(w);
                continue;
            }
            old.fd.lock().unwrap().fd = None;
        }
    }

    /// Registers a looked-up file, found as `name` in `parent` (one more lookup reference),
    /// and returns its number. `fd` replaces a closed cached fd of a known file, or is
    /// dropped; in path mode the name is the one it is reopened by from now on.
    pub fn insert(
        &self,
        fd: OwnedFd,
        st: &libc::stat,
        parent: &Arc<Inode>,
        name: &CStr,
    ) -> (u64, Arc<Inode>) {
        let at = (self.mount_id.is_none()).then(|| (parent.clone(), name.to_owned()));
        let key = (st.st_dev, st.st_ino);
        let mut t = self.t.write().unwrap();
        if let Some(ino) = t.number_of(key) {
            let inode = t.get(ino).expect("a numbered inode is in the table").clone();
            if !Self::still_the_same(&inode, &fd, st) {
                // The backing file this inode stood for is gone and its number went to a
                // new file (ext4 and xfs reuse numbers at once). The kernel may still hold
                // the old inode (until FORGET): it keeps its number; the new file gets
                // one of its own below.
                inode.replaced.store(true, Ordering::Relaxed);
                t.unmap(key);
                return self.insert_new(t, fd, st, at);
            }
            // (Under the table's write lock; stays at the maximum: `Inode::lookups`.)
            let l = inode.lookups.load(Ordering::Relaxed);
            inode.lookups.store(l.saturating_add(1), Ordering::Relaxed);
            drop(t);
            let mut slot = inode.fd.lock().unwrap();
            // A pinned inode (its recorded name went) named again: its fd may be cached.
            let named_again = match at {
                Some(at) => slot.place.replace(Box::new(at)).is_none(),
                None => false,
            };
            let refill = slot.fd.is_none() && self.reopenable_with(&inode, &slot);
            if refill {
                slot.fd = Some(Arc::new(fd));
            }
            drop(slot);
            if refill || named_again {
                self.remember(&inode);
            }
            return (ino, inode);
        }
        self.insert_new(t, fd, st, at)
    }

    /// Whether `fd` (found under `inode`'s (device, inode) key) is the backing file `inode`
    /// stands for. While the inode's own fd is open its backing inode cannot be freed, so
    /// its number cannot have been reused; once that fd was closed (the fd cache), the
    /// number may now name another file: the type, then the file handle (which carries the
    /// inode's generation) tell.
    fn still_the_same(inode: &Inode, fd: &OwnedFd, st: &libc::stat) -> bool {
        if inode.fd.lock().unwrap().fd.is_some() {
            let fmt = st.st_mode & libc::S_IFMT;
            return inode.is_dir() == (fmt == libc::S_IFDIR) && inode.is_reg == (fmt == libc::S_IFREG);
        }
        Self::same_object(inode, fd, st, true)
    }

    /// Whether `fd` (of which `st` is the `fstat`), found under `inode`'s (device, inode),
    /// is the object `inode` stands for: the same type and, when `inode` recorded one, the
    /// same file handle (which carries the inode's generation, so a number reused for a new
    /// file tells). `lenient`: a handle that cannot be read now counts as the same.
    fn same_object(inode: &Inode, fd: &OwnedFd, st: &libc::stat, lenient: bool) -> bool {
        let fmt = st.st_mode & libc::S_IFMT;
        if inode.is_dir() != (fmt == libc::S_IFDIR) || inode.is_reg != (fmt == libc::S_IFREG) {
            return false;
        }
        match (&inode.handle, sys::file_handle(fd)) {
            (Some(old), Ok((_, new))) => *old.bytes() == *new,
            (Some(_), Err(_)) => lenient,
            (None, _) => true,
        }
    }

    /// Registers a file made ahead in the private directory (`ns::pool`), not named yet:
    /// one lookup reference, no place to reopen it by (in path mode its fd stays open
    /// until [`Inodes::placed`]). `handle` is the one read when it was made.
    pub fn insert_made(
        &self,
        fd: OwnedFd,
        st: &libc::stat,
        handle: Option<(i32, Box<[u8]>)>,
    ) -> (u64, Arc<Inode>) {
        let key = (st.st_dev, st.st_ino);
        let handle = handle.and_then(|(m, h)| match self.mount_id {
            Some(root_mount) => (m == root_mount).then(|| (Handle::new(&h), true)),
            None => Some((Handle::new(&h), false)),
        });
        let by_handle = handle.as_ref().is_some_and(|h| h.1);
        let inode = Arc::new(Inode::new(
            key,
            st.st_mode & libc::S_IFMT,
            Some(Arc::new(fd)),
            None,
            handle.map(|h| h.0),
            by_handle,
            1,
        ));
        let mut t = self.t.write().unwrap();
        if let Some(ino) = t.number_of(key) {
            // (A number freed and reused since an inode the kernel still holds had it.)
            if let Some(old) = t.get(ino) {
                old.replaced.store(true, Ordering::Relaxed);
            }
            t.unmap(key);
        }
        let ino = t.number_for(key);
        t.add(key, ino, inode.clone());
        drop(t);
        if by_handle {
            self.remember(&inode);
        }
        (ino, inode)
    }

    /// One more lookup reference on `inode`, if the table still holds it (a LOOKUP of a
    /// name pending in `ns`); its number.
    pub fn looked_up(&self, inode: &Arc<Inode>) -> Option<u64> {
        // (The write lock: lookup counts change under it only, `Inode::lookups`.)
        #[allow(clippy::readonly_write_lock)]
        let t = self.t.write().unwrap();
        let ino = t.number_of(inode.key)?;
        if !t.get(ino).is_some_and(|x| Arc::ptr_eq(x, inode)) {
            return None;
        }
        let l = inode.lookups.load(Ordering::Relaxed);
        inode.lookups.store(l.saturating_add(1), Ordering::Relaxed);
        Some(ino)
    }

    /// Path mode: `inode` (made by [`Inodes::insert_made`]) was named `name` in `parent`
    /// (with [`Inodes::change_names`] held): it is reopened by that name from now on.
    pub fn placed(&self, inode: &Arc<Inode>, parent: &Arc<Inode>, name: &CStr) {
        if self.mount_id.is_none() {
            self.set_place(inode, parent, name);
        }
    }

    /// Path mode: `inode` is reopened by `name` in `parent` from now on; an inode that was
    /// pinned (no name to come back by) may have its fd cached again.
    fn set_place(&self, inode: &Arc<Inode>, parent: &Arc<Inode>, name: &CStr) {
        let mut slot = inode.fd.lock().unwrap();
        let pinned = slot
            .place
            .replace(Box::new((parent.clone(), name.to_owned())))
            .is_none();
        let cached = slot.fd.is_some();
        drop(slot);
        if pinned && cached {
            self.remember(inode);
        }
    }

    /// [`Inodes::insert`] of a backing file not known yet.
    fn insert_new(
        &self,
        mut t: std::sync::RwLockWriteGuard<'_, Table>,
        fd: OwnedFd,
        st: &libc::stat,
        at: Option<(Arc<Inode>, CString)>,
    ) -> (u64, Arc<Inode>) {
        let key = (st.st_dev, st.st_ino);
        let handle = match self.mount_id {
            Some(root_mount) => sys::file_handle(&fd)
                .ok()
                .filter(|(m, _)| *m == root_mount)
                .map(|(_, h)| Handle::new(&h)),
            None => None,
        };
        let by_handle = handle.is_some();
        let cached = by_handle || at.is_some();
        let handle = match (handle, &at) {
            (None, Some(_)) => sys::file_handle(&fd).ok().map(|(_, h)| Handle::new(&h)),
            (h, _) => h,
        };
        let inode = Arc::new(Inode::new(
            key,
            st.st_mode & libc::S_IFMT,
            Some(Arc::new(fd)),
            at,
            handle,
            by_handle,
            1,
        ));
        let ino = t.number_for(key);
        t.add(key, ino, inode.clone());
        drop(t);
        if cached {
            self.remember(&inode);
        }
        (ino, inode)
    }

    /// Drops `n` lookup references; the inode goes when none are left and nothing is open.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == 1 {
            return;
        }
        let mut t = self.t.write().unwrap();
        let Some(inode) = t.get(ino).cloned() else {
            return;
        };
        // (Changed under the table's write lock only.)
        let l = match inode.lookups.load(Ordering::Relaxed) {
            u32::MAX => u32::MAX,
            l => l.saturating_sub(u32::try_from(n).unwrap_or(u32::MAX)),
        };
        inode.lookups.store(l, Ordering::Relaxed);
        if l == 0 && inode.file.open.lock().unwrap().is_none() {
            t.remove(ino, inode.key);
            // Its fd closes when the last operation using it ends.
            inode.fd.lock().unwrap().fd = None;
            self.forgotten.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives back the room of the inodes forgotten since the last call, and returns how
    /// many they were. Hash maps never shrink by themselves (after a million inodes were
    /// forgotten, the table's buckets alone held 84 MiB): one that fills under a quarter
    /// of its capacity is shrunk to twice its length, so the rehash is paid once per
    /// halving. The fd cache's queue lets go of forgotten inodes (a `Weak` keeps its
    /// inode's allocation). Called from the daemon's housekeeping thread, not per request.
    pub fn compact(&self) -> u64 {
        let forgotten = self.forgotten.swap(0, Ordering::Relaxed);
        if forgotten == 0 {
            return 0;
        }
        let shrink = self.t.read().unwrap().sparse();
        if shrink {
            self.t.write().unwrap().shrink();
        }
        let mut q = self.cached.lock().unwrap();
        q.retain(|w| w.strong_count() > 0);
        if q.len() < q.capacity() / 4 {
            let n = q.len() * 2;
            q.shrink_to(n);
        }
        forgotten
    }

    /// Path mode: holds the namespace lock for a change of names (a rename, an unlink, an
    /// rmdir) and what [`Inodes::going`] and [`Inodes::renamed`] record with it. `None` in
    /// handle mode (nothing is reopened by name).
    pub fn change_names(&self) -> Option<std::sync::RwLockWriteGuard<'_, ()>> {
        self.mount_id.is_none().then(|| self.names.write().unwrap())
    }

    /// Path mode (with [`Inodes::change_names`] held): the known inode that `name` in `dir`
    /// names now, with an fd of it.
    pub fn named(&self, dir: impl AsFd, name: &CStr) -> Option<(Arc<Inode>, OwnedFd)> {
        if self.mount_id.is_some() {
            return None;
        }
        let fd = sys::open_path(dir, name).ok()?;
        let st = sys::fstat(&fd).ok()?;
        let inode = self.t.read().unwrap().inode_of((st.st_dev, st.st_ino))?;
        Some((inode, fd))
    }

    /// Path mode: `name` in `parent` went (unlinked, or replaced by a rename: called after
    /// the call succeeded, with [`Inodes::change_names`] still held); `named` is what it
    /// named ([`Inodes::named`], before). If that inode was recorded under this name, it
    /// keeps its fd from now on and is no longer reopened by name (another name of a hard
    /// link, or none: an unlinked file still open), until a lookup names it again.
    pub fn going(&self, named: Option<(Arc<Inode>, OwnedFd)>, parent: &Arc<Inode>, name: &CStr) {
        let Some((inode, fd)) = named else { return };
        let mut slot = inode.fd.lock().unwrap();
        if slot
            .place
            .as_ref()
            .is_some_and(|pn| pn.0.key == parent.key && pn.1.as_c_str() == name)
        {
            if slot.fd.is_none() {
                slot.fd = Some(Arc::new(fd));
            }
            slot.place = None;
        }
    }

    /// Path mode: `moved` (from [`Inodes::named`] before a rename) is now `name` in `parent`.
    pub fn renamed(&self, moved: Option<(Arc<Inode>, OwnedFd)>, parent: &Arc<Inode>, name: &CStr) {
        if let Some((inode, _)) = moved {
            self.set_place(&inode, parent, name);
        }
    }

    /// Path mode: holds the namespace lock for reading while a lookup or create finds a
    /// name and records it ([`Inodes::insert`]), so no rename or unlink comes in between
    /// (the recorded name would be one that just went). Not while calling
    /// [`Inodes::fd`], which takes it itself. `None` in handle mode.
    pub fn naming(&self) -> Option<std::sync::RwLockReadGuard<'_, ()>> {
        self.mount_id.is_none().then(|| self.names.read().unwrap())
    }

    /// The inode number `readdir` reports for an entry with backing `d_ino` in a directory
    /// on device `dev`: the same as `stat` through the mount gives.
    pub fn entry_number(&self, dev: u64, d_ino: u64) -> u64 {
        self.t.read().unwrap().entry_number(dev, d_ino)
    }

    /// The known inode of backing file (device, inode) `key`, if the kernel or a pass
    /// holds one.
    pub fn known(&self, key: (u64, u64)) -> Option<Arc<Inode>> {
        self.t.read().unwrap().inode_of(key)
    }

    /// The number (as the kernel knows it) and inode of backing file `key`, if known.
    pub fn known_numbered(&self, key: (u64, u64)) -> Option<(u64, Arc<Inode>)> {
        let t = self.t.read().unwrap();
        let n = t.number_of(key)?;
        t.get(n).map(|i| (n, i.clone()))
    }

    /// Every known inode (for flushing at unmount).
    pub fn all(&self) -> Vec<Arc<Inode>> {
        self.t.read().unwrap().all().cloned().collect()
    }
}

impl Inodes {
    /// `syncfs` of the backing filesystem.
    pub fn syncfs(&self) -> io::Result<()> {
        sys::syncfs(&self.root_dir)
    }

    /// A path for log lines: where the inode lives in the backing directory.
    pub fn describe(&self, inode: &Arc<Inode>) -> String {
        self.fd(inode)
            .and_then(|fd| std::fs::read_link(std::ffi::OsStr::from_bytes(sys::proc_path(&fd).to_bytes())))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| format!("backing inode {}", inode.key.1))
    }
}

#[cfg(test)]
mod tests;
