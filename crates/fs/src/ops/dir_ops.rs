//! Entries made and removed: mknod, mkdir, symlink, link, unlink, rmdir, rename — each
//! through the [`At`](super::names::At) funnel — with the mode a new entry is made with
//! (umask or default ACL), its owner (the caller, when the daemon is root), and the
//! properties it inherits from its directory.

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Errno, FileAttr, INodeNo, RenameFlags};
use squeezefs_container::{Container, FileStorage};

use super::xattr::NO_DEFAULT_ACL;
use super::Core;
use super::Who;
use crate::inode::known::Change;
use crate::inode::Inode;
use crate::props::{self, DirProps, Prop};
use crate::sys;

impl Core {
    /// The mode to create an entry in `parent` with. The kernel leaves the umask to us
    /// (FUSE_POSIX_ACL with FUSE_DONT_MASK): a directory with a default ACL gets the mode
    /// unmasked, and the backing filesystem applies the ACL to it (this daemon's own umask
    /// is 0), as POSIX says; elsewhere the caller's umask applies.
    pub(super) fn creation_mode(&self, parent: INodeNo, mode: u32, umask: u32) -> u32 {
        let default_acl = self.inode(parent).is_ok_and(|p| self.has_default_acl(&p));
        if default_acl {
            mode
        } else {
            mode & !umask
        }
    }

    /// Whether directory `dir` has a default ACL. Its absence is remembered per inode, as
    /// GETXATTR remembers it (`xattr.rs`, forgotten at any setxattr or removexattr through
    /// the mount): a tree extracted into one directory asks once, not once per file.
    fn has_default_acl(&self, dir: &Arc<Inode>) -> bool {
        if dir.no_xattrs.has(NO_DEFAULT_ACL) {
            return false;
        }
        let generation = dir.no_xattrs.generation();
        let Ok(fd) = self.fd(dir) else { return false };
        match sys::xattr_size(fd, c"system.posix_acl_default") {
            Ok(n) => n > 0,
            Err(e) => {
                // (No such attribute, or no ACLs at all on this backing filesystem.)
                if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) {
                    dir.no_xattrs.learn(NO_DEFAULT_ACL, generation);
                }
                false
            }
        }
    }

    /// Chowns the new entry open as `fd`, whose attributes are `st`, to the caller (group:
    /// the parent's when setgid); true when it changed anything. An entry this daemon made
    /// is its own, with the group of a setgid parent already given by the backing
    /// filesystem: when that is already the caller's (root extracting as root), nothing is
    /// done.
    pub(super) fn give_to_caller(
        &self,
        req: &Who,
        parent: &Arc<Inode>,
        fd: BorrowedFd,
        st: &sys::Stat,
    ) -> Result<bool, Errno> {
        if st.st_uid == req.uid() && st.st_gid == req.gid() {
            return Ok(false);
        }
        let pst = sys::fstat(self.fd(parent)?)?;
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            pst.st_gid
        } else {
            req.gid()
        };
        let before = st.st_mode;
        sys::chown(fd, Some(req.uid()), Some(gid))?;
        // chown clears setuid, and setgid on a group-executable file, even for root: the
        // bits the entry was made with (the kernel already dropped what the caller may not
        // have) are put back. Symlinks have none.
        let special = before & (libc::S_ISUID | libc::S_ISGID);
        if special != 0 && before & libc::S_IFMT != libc::S_IFLNK {
            let after = sys::fstat(fd)?.st_mode;
            if after & special != special {
                sys::chmod(fd, (after | special) & 0o7777)?;
            }
        }
        Ok(true)
    }

    /// Notes that entries of directory `dir` were made, removed or renamed, as `c` says
    /// (open listings of it are stale from now on; its known names follow).
    pub(super) fn dir_changed(&self, dir: INodeNo, c: Change<'_>) {
        let Ok(i) = self.inode(dir) else { return };
        if let Some(d) = i.dir.as_ref() {
            d.names_changed(c);
        }
        if let Some(ns) = &self.ns {
            ns.names_changed(&i);
        }
    }

    /// After a call that may have made or removed `name` in `dir` and then failed: what
    /// it left is not known exactly (a clean-up that failed too), unless it failed because
    /// the name existed.
    pub(super) fn dir_maybe_changed(&self, dir: INodeNo, e: Errno) {
        if e != Errno::EEXIST {
            self.dir_changed(dir, Change::Unknown);
        }
    }

    /// Makes entry `name` in `parent` with `make`, gives it to the caller, and looks it up.
    fn new_entry(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        make: impl FnOnce(BorrowedFd, &CStr) -> io::Result<()>,
    ) -> Result<FileAttr, Errno> {
        self.check_writable()?;
        // Every change of names but a new file's waits for the pending ones (`crate::ns`).
        self.drain_names();
        let at = self.at_new(parent, name)?;
        if let Err(e) = make(at.dir.as_fd(), &at.name) {
            let e = Errno::from(e);
            self.dir_maybe_changed(parent, e);
            return Err(e);
        }
        if self.as_root {
            let given = sys::open_path(&at.dir, &at.name)
                .map_err(Errno::from)
                .and_then(|fd| {
                    let st = sys::fstat(&fd)?;
                    self.give_to_caller(req, &at.parent, fd.as_fd(), &st).map(|_| ())
                });
            if let Err(e) = given {
                let _ = sys::unlinkat(&at.dir, &at.name, 0)
                    .or_else(|_| sys::unlinkat(&at.dir, &at.name, libc::AT_REMOVEDIR));
                self.dir_changed(parent, Change::Unknown);
                return Err(e);
            }
        }
        self.dir_changed(parent, Change::Made(name.as_bytes()));
        self.lookup_name(&at.parent, name).map(|(_, attr)| attr)
    }

    pub(super) fn do_mknod(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<FileAttr, Errno> {
        let mode = self.creation_mode(parent, mode, umask);
        if mode & libc::S_IFMT != libc::S_IFREG {
            return self.new_entry(req, parent, name, |p, c| sys::mknodat(p, c, mode, rdev as u64));
        }
        // A regular file made by mknod is an empty container, like any other, and
        // inherits its directory's properties (written into its superblock now).
        let dp = self
            .inode(parent)
            .map(|p| self.new_file_props(&p, std::os::unix::ffi::OsStrExt::as_bytes(name)))
            .unwrap_or_default();
        self.new_entry(req, parent, name, |p, c| {
            sys::mknodat(p, c, mode, 0)?;
            if dp == DirProps::default() {
                return Ok(());
            }
            let inherit = || -> Result<(), squeezefs_container::Error> {
                let path = sys::open_path(p, c)?;
                let file = sys::reopen(&path, libc::O_RDWR)?;
                let mut ct = Container::open(FileStorage::new(file), self.opts())?;
                ct.set_compression_property(dp.codec)?;
                ct.set_extent_size_property(dp.shift)?;
                ct.set_dictionary_property(dp.dict)?;
                ct.set_force_property(dp.force)?;
                ct.fsync()
            };
            inherit().map_err(|e| {
                let _ = sys::unlinkat(p, c, 0);
                io::Error::from_raw_os_error(e.errno())
            })
        })
    }

    /// A new directory inherits its parent's properties.
    pub(super) fn do_mkdir(
        &self,
        req: &Who,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, Errno> {
        let dp = self.inode(parent).map(|p| self.dir_props(&p)).unwrap_or_default();
        let mode = self.creation_mode(parent, mode, umask);
        let attr = self.new_entry(req, parent, name, |p, c| {
            sys::mkdirat(p, c, mode)?;
            if dp != DirProps::default() {
                let fd = sys::open_path(p, c)?;
                // (Not `background_compression`: the pass carries a directory's down the
                // tree, so a copy here would stop a later change of it reaching below.)
                for prop in Prop::ALL.into_iter().filter(|p| *p != Prop::Background) {
                    if let Some(v) = dp.get(prop) {
                        if let Err(e) = props::write_xattr(&fd, prop, Some(v), 0) {
                            let _ = sys::unlinkat(p, c, libc::AT_REMOVEDIR);
                            return Err(e);
                        }
                    }
                }
            }
            Ok(())
        })?;
        // Made here and empty: all its names are known. Nothing else can have reached it
        // yet — the kernel holds the parent's lock until this MKDIR is answered, so no
        // LOOKUP of its name (nor a listing of the parent) has gone through.
        if let Ok(new) = self.inode(attr.ino) {
            if let Some(d) = new.dir.as_ref().filter(|_| self.names_exact(&new)) {
                d.learn_names(d.gen.load(Ordering::Acquire), std::iter::empty());
            }
        }
        Ok(attr)
    }

    pub(super) fn do_symlink(
        &self,
        req: &Who,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
    ) -> Result<FileAttr, Errno> {
        let t = sys::cstr(target.as_os_str())?;
        self.new_entry(req, parent, link_name, |p, c| sys::symlinkat(&t, p, c))
    }

    /// unlink (`flags` 0) or rmdir (`AT_REMOVEDIR`).
    pub(super) fn do_remove(&self, parent: INodeNo, name: &OsStr, flags: i32) -> Result<(), Errno> {
        self.check_writable()?;
        self.drain_names();
        let at = self.at(parent, name)?;
        // (rmdir removes an empty directory: no file's bytes.)
        let (stays, last_link) = if flags == 0 {
            let e = self.entry_changes(&at, true)?;
            (e.file, e.last_link)
        } else {
            (None, false)
        };
        let names = self.inodes.change_names();
        let going = self.inodes.named(&at.dir, &at.name);
        sys::unlinkat(&at.dir, &at.name, flags)?;
        self.inodes.going(going, &at.parent, &at.name);
        drop(names);
        if let Some(i) = stays {
            self.files.drop_kept_times_after(&i);
        }
        if let Some(r) = &self.reclaimer {
            r.note_removed();
        }
        if last_link {
            self.files.note_pack_garbage();
        }
        self.dir_changed(parent, Change::Gone(name.as_bytes()));
        Ok(())
    }

    pub(super) fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        self.drain_names();
        let from = self.at_new(parent, name)?;
        let to = self.at_new(newparent, newname)?;
        let from_file = self.entry_changes(&from, false)?.file;
        let to_entry = self.entry_changes(&to, !flags.contains(RenameFlags::RENAME_EXCHANGE))?;
        let (to_exists, replaced_last_link) = (to_entry.exists, to_entry.last_link);
        let moved = [from_file, to_entry.file];
        // Background pack reclaim must see every file that moves (`reclaim.rs`, rule 3).
        let guard = self.reclaimer.as_ref().map(|r| r.namespace_guard());
        // Path mode: the inodes that move get their new names with the rename, under the
        // namespace lock; one whose name is replaced keeps its fd (`inode.rs`).
        let names = self.inodes.change_names();
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        let (moving, target) = (
            self.inodes.named(&from.dir, &from.name),
            self.inodes.named(&to.dir, &to.name),
        );
        sys::renameat2(&from.dir, &from.name, &to.dir, &to.name, flags.bits())?;
        if exchange {
            self.inodes.renamed(target, &from.parent, &from.name);
        } else {
            self.inodes.going(target, &to.parent, &to.name);
        }
        self.inodes.renamed(moving, &to.parent, &to.name);
        drop(names);
        if let Some(r) = &self.reclaimer {
            r.note_moved(&to.dir, &to.name);
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                r.note_moved(&from.dir, &from.name);
            }
        }
        drop(guard);
        if replaced_last_link {
            self.files.note_pack_garbage();
        }
        for i in moved.iter().flatten() {
            self.files.drop_kept_times_after(i);
        }
        if exchange {
            self.dir_changed(parent, Change::Kept);
            self.dir_changed(newparent, Change::Kept);
        } else {
            // RENAME_WHITEOUT leaves a whiteout (a device node) under the source name.
            let whiteout = flags.contains(RenameFlags::RENAME_WHITEOUT);
            self.dir_changed(
                parent,
                if whiteout {
                    Change::Kept
                } else {
                    Change::Gone(name.as_bytes())
                },
            );
            // (The kernel holds both directories' locks through the RENAME: whether the
            // target existed, read above, still held at the call.)
            self.dir_changed(
                newparent,
                match to_exists {
                    Some(true) => Change::Kept,
                    Some(false) => Change::Made(newname.as_bytes()),
                    None => Change::Unknown,
                },
            );
        }
        Ok(())
    }

    pub(super) fn do_link(
        &self,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
    ) -> Result<FileAttr, Errno> {
        self.check_writable()?;
        self.drain_names();
        let to = self.at_new(newparent, newname)?;
        let inode = self.inode(ino)?;
        self.files.drop_kept_times(&inode)?;
        let guard = self.reclaimer.as_ref().map(|r| r.namespace_guard());
        sys::linkat(self.fd(&inode)?, &to.dir, &to.name)?;
        if let Some(r) = &self.reclaimer {
            r.note_moved(&to.dir, &to.name);
        }
        drop(guard);
        self.files.drop_kept_times_after(&inode);
        self.dir_changed(newparent, Change::Made(newname.as_bytes()));
        self.lookup_name(&to.parent, newname).map(|(_, attr)| attr)
    }

    /// Before a rename or unlink of entry `at`: the regular file it names will have its
    /// backing ctime moved, so a change time its superblock keeps goes
    /// (`Files::drop_kept_times`). `other_links_only`: an unlink or a rename's replaced
    /// target, which leaves the file visible only when it has another link.
    /// A directory's rename also tells the background pass: what is below it may inherit
    /// another target now, without a ctime of its own moving.
    ///
    /// Returns whether the entry exists, whether it is a regular file that may go (with
    /// `other_links_only`), and the file, for [`Files::drop_kept_times_after`] once the
    /// call is made.
    fn entry_changes(&self, at: &super::names::At, other_links_only: bool) -> Result<Entry, Errno> {
        let st = match sys::stat_at(&at.dir, &at.name) {
            Ok(st) => st,
            // (The call itself reports ENOENT.)
            Err(e) => {
                let missing = e.kind() == io::ErrorKind::NotFound;
                return Ok(Entry {
                    exists: missing.then_some(false),
                    file: None,
                    // Not known: it may be a packed file's last link.
                    last_link: other_links_only && !missing,
                });
            }
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR && !other_links_only {
            self.background.moved();
        }
        let is_reg = st.st_mode & libc::S_IFMT == libc::S_IFREG;
        let mut e = Entry {
            exists: Some(true),
            file: None,
            // Whatever its link count: two links removed at once by two requests both see
            // two here, and the file goes.
            last_link: other_links_only && is_reg,
        };
        if !is_reg || (other_links_only && st.st_nlink < 2) {
            return Ok(e);
        }
        let Some(i) = self.inodes.known((st.st_dev, st.st_ino)) else {
            return Ok(e);
        };
        self.files.drop_kept_times(&i)?;
        e.file = Some(i);
        Ok(e)
    }
}

/// What [`SqueezeFs::entry_changes`] found of an entry about to be renamed or removed.
struct Entry {
    /// `None`: its `stat` failed otherwise than with ENOENT.
    exists: Option<bool>,
    /// A regular file (with another link, when only those count) the table knows.
    file: Option<Arc<Inode>>,
    /// A regular file that goes or may go (whatever its links), or one that could not be
    /// looked at.
    last_link: bool,
}
