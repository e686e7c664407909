//! The one funnel from a request's (parent inode, name) to what the `*at()` calls need:
//! the parent's fd and the name checked to be a single component ([`At`]); the hiding of
//! `.squeezefs-dicts` and `.squeezefs-packs` at the mount root; and lookup.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileAttr, INodeNo};
use squeezefs_container::{dicts, pack};

use super::{Core, TTL};
use crate::inode::{Inode, PathFd};
use crate::sys;

/// The longest name a backing filesystem takes (Linux's NAME_MAX).
const NAME_MAX: usize = 255;

/// Backing filesystems whose LOOKUP finds exactly the names `getdents` lists, byte for
/// byte, outside casefolded and encrypted directories (checked per directory): ext4, xfs,
/// btrfs, tmpfs, f2fs, and GlusterFS's client ([`EXACT_NAME_FUSE`]). Elsewhere a name may
/// be found under another spelling (ZFS's case-insensitive datasets, CIFS) or without being
/// listed (ZFS's hidden `.zfs`, autofs), and no directory's names are learnt.
#[allow(clippy::unnecessary_cast)] // (`c_long`: 32 bits on some targets)
pub(super) const EXACT_NAME_FILESYSTEMS: [i64; 5] = [
    libc::EXT4_SUPER_MAGIC as i64,
    libc::XFS_SUPER_MAGIC as i64,
    libc::BTRFS_SUPER_MAGIC as i64,
    libc::TMPFS_MAGIC as i64,
    libc::F2FS_SUPER_MAGIC as i64,
];

/// FUSE filesystems (all `FUSE_SUPER_MAGIC` to `statfs`; told apart by their mountinfo
/// type) whose names are as exact: GlusterFS, whose bricks keep the names on ext4 or xfs
/// and whose client hashes each name byte for byte to the brick that holds it. There a
/// LOOKUP miss is a network round trip (~1 ms on tests/common/gluster.rs's volume) that a
/// directory squeezefs made and filled itself need not make. Only directories made through
/// the mount are known there, never one learnt from a listing: GlusterFS's distribute layer
/// lists a directory without the entries of a brick it cannot reach, and says nothing
/// (`Core::names_from_listings`); its root's `.meta` and `.gfid` are found without being
/// listed.
pub(super) const EXACT_NAME_FUSE: [&str; 1] = ["fuse.glusterfs"];

/// `FUSE_SUPER_MAGIC`.
pub(super) const FUSE_MAGIC: i64 = 0x6573_5546;

/// `FS_CASEFOLD_FL`: the directory's names are looked up case-insensitively.
const FS_CASEFOLD_FL: u32 = 0x4000_0000;
/// `FS_ENCRYPT_FL`: the directory is encrypted (its listed names change with the key).
const FS_ENCRYPT_FL: u32 = 0x0000_0800;

/// A directory entry named by a request: its parent, the parent's fd, the checked name.
pub(super) struct At {
    pub parent: Arc<Inode>,
    pub dir: PathFd,
    pub name: CString,
}

/// Whether `name` in directory `parent` is the dictionary or the pack directory, or the
/// backing lock file: hidden from the mount, and no entry may be made under its name.
pub(super) fn is_dict_dir(parent: u64, name: &[u8]) -> bool {
    parent == 1
        && (name == dicts::DIR_NAME.as_bytes()
            || name == pack::dir::DIR_NAME.as_bytes()
            || name == crate::lock::LOCK_FILE.as_bytes())
}

impl Core {
    /// The entry `name` of directory `parent` (`name` checked: one component, no NUL).
    pub(super) fn at(&self, parent: INodeNo, name: &OsStr) -> Result<At, Errno> {
        let p = self.inode(parent)?;
        self.at_in(p, name)
    }

    /// [`SqueezeFs::at`] for an entry about to be made or renamed onto: the dictionary
    /// directory's name is refused (EPERM).
    pub(super) fn at_new(&self, parent: INodeNo, name: &OsStr) -> Result<At, Errno> {
        if is_dict_dir(parent.0, name.as_bytes()) {
            return Err(Errno::EPERM);
        }
        self.at(parent, name)
    }

    /// [`SqueezeFs::at`] with the parent already in hand.
    pub(super) fn at_in(&self, parent: Arc<Inode>, name: &OsStr) -> Result<At, Errno> {
        let name = sys::entry_name(name)?;
        let dir = self.fd(&parent)?;
        Ok(At { parent, dir, name })
    }

    /// Whether `dir`'s names may be learnt (`inode::known`): on a backing filesystem that
    /// matches names exactly, on its device (not a mount inside BACKING), and neither
    /// casefolded nor encrypted (one `ioctl`, when a directory is made or listed).
    pub(super) fn names_exact(&self, dir: &Arc<Inode>) -> bool {
        let Some(d) = dir.dir.as_ref() else { return false };
        if self.exact_names_dev != Some(dir.key.0) {
            return false;
        }
        if let Some(&e) = d.exact.get() {
            return e;
        }
        let Some(flags) = self.fd(dir).ok().and_then(|fd| sys::dir_flags(&fd).ok()) else {
            return false; // (not remembered: a passing error)
        };
        *d.exact
            .get_or_init(|| flags & (FS_CASEFOLD_FL | FS_ENCRYPT_FL) == 0)
    }

    pub(super) fn is_root(&self, inode: &Arc<Inode>) -> bool {
        self.inodes.get(1).is_some_and(|r| Arc::ptr_eq(&r, inode))
    }

    /// The entry `name` of `parent` registered in the inode table (one lookup counted),
    /// with the backing file's `stat`.
    pub(super) fn register(
        &self,
        parent: &Arc<Inode>,
        name: &OsStr,
    ) -> Result<(u64, Arc<Inode>, libc::stat), Errno> {
        let at = self.at_in(parent.clone(), name)?;
        let naming = self.inodes.naming();
        let fd = sys::open_path(&at.dir, &at.name)?;
        let st = sys::fstat(&fd)?;
        let (ino, inode) = self.inodes.insert(fd, &st, &at.parent, &at.name);
        drop(naming);
        Ok((ino, inode, st))
    }

    /// Looks `name` up in `parent`: the inode (registered, one lookup counted) and its
    /// attributes.
    pub(super) fn lookup_name(&self, parent: &Arc<Inode>, name: &OsStr) -> Result<(u64, FileAttr), Errno> {
        if self.is_root(parent) && is_dict_dir(1, name.as_bytes()) {
            return Err(Errno::ENOENT);
        }
        // A miss in a directory whose names are all known: from memory (`inode::known`).
        // (A name the backing would refuse — empty, `.`, `..`, with a `/`, longer than
        // NAME_MAX — still goes there, for its own error.)
        let b = name.as_bytes();
        // A new file whose name is still pending (`crate::ns`).
        if let Some(r) = self.lookup_pending(parent, b) {
            return r;
        }
        if b.len() <= NAME_MAX
            && sys::entry_name(name).is_ok()
            && parent.dir.as_ref().is_some_and(|d| d.names.absent(b))
        {
            self.known_misses
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(Errno::ENOENT);
        }
        let (ino, inode, st) = match self.register(parent, name) {
            Ok(x) => x,
            Err(e) => {
                if let (Some(ns), true) = (&self.ns, e == Errno::ENOENT) {
                    ns.note_absent(parent, b);
                }
                return Err(e);
            }
        };
        match self.attr_with(ino, &inode, &st) {
            Ok(a) => Ok((ino, a)),
            Err(e) => {
                self.inodes.forget(ino, 1);
                Err(e)
            }
        }
    }

    /// [`SqueezeFs::lookup_name`] for an entry of a READDIRPLUS listing, which the kernel
    /// counts as a lookup: `None` for a name gone since the listing (left out). A file
    /// whose attributes cannot be read (a damaged superblock) is still listed, with its
    /// backing file's size and a timeout of zero, so the `stat` that follows asks again and
    /// gets the error itself.
    pub(super) fn lookup_listed(
        &self,
        parent: &Arc<Inode>,
        name: &OsStr,
    ) -> Option<(u64, FileAttr, Duration)> {
        let (ino, inode, st) = self.register(parent, name).ok()?;
        Some(match self.attr_with(ino, &inode, &st) {
            Ok(a) => (ino, a, TTL),
            Err(_) => (ino, self.backing_attr(ino, &st), Duration::ZERO),
        })
    }
}
