//! Extended attributes through the mount: the backing entry's own, except the properties
//! (`properties.rs`) and file capabilities, which a root daemon keeps under a name the
//! backing kernel leaves alone.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;

use fuser::{Errno, INodeNo};

use super::reply::Xattr;
use super::Core;
use super::Who;
use crate::inode::PathFd;
use crate::props::{self, Prop};
use crate::sys;

/// File capabilities, as the mount shows them.
const CAPS: &[u8] = b"security.capability";
/// Where a root daemon keeps them on the backing file: the backing kernel strips a real
/// `security.capability` at any write to the file, and the daemon writes containers long
/// after the caller's `setcap` (the group commit); a trusted xattr only CAP_SYS_ADMIN can
/// set is left alone, and means nothing to the backing file (a container, not a program).
const CAPS_STORED: &CStr = c"trusted.squeezefs.capability";
/// A packed file's location record (format 4): the daemon's own, never seen through the
/// mount (a copy made with `cp -a` or set by hand would point a file at other bytes).
const LOCATION: &[u8] = squeezefs_container::pack::LOCATION_XATTR.as_bytes();

/// The SELinux label. A kernel running SELinux answers it from its own memory and never
/// asks a FUSE daemon; any other kernel asks on every `ls -l`, for every file (libselinux's
/// `lgetfilecon`), and caches nothing. Where the backing entry has none, the answer is
/// "not supported" rather than ENODATA: `ls` then remembers it for the whole device and
/// stops asking (coreutils' `getfilecon_cache` remembers EOPNOTSUPP, never ENODATA), which
/// halves the requests of an `ls -l` (docs/BENCHMARKS.md). A label the backing entry has is
/// shown as it is, and setting one works as before.
const SELINUX: &[u8] = b"security.selinux";

/// The bit of `Inode::no_xattrs` saying an entry has no access ACL (also learnt for a file
/// made in a directory with no default ACL: `open_create.rs`; and read before a chmod is
/// left to wait in memory: `attrs.rs`).
pub(super) const NO_ACCESS_ACL: u8 = 1;

/// The bit of `Inode::no_xattrs` saying a directory has no default ACL (also read when an
/// entry is made in it: `dir_ops.rs`).
pub(super) const NO_DEFAULT_ACL: u8 = 2;

/// Names asked of many files again and again (the kernel's ACL checks, `ls -l`), whose
/// absence is remembered per inode (`Inode::no_xattrs`) once the backing entry said so:
/// this daemon is the only writer of BACKING, and any setxattr or removexattr through the
/// mount forgets what was remembered of the inode.
fn remembered_absent(name: &[u8]) -> Option<u8> {
    match name {
        b"system.posix_acl_access" => Some(NO_ACCESS_ACL),
        b"system.posix_acl_default" => Some(NO_DEFAULT_ACL),
        SELINUX => Some(4),
        _ => None,
    }
}

/// The answer for a name known to be absent: "no such attribute", except the SELinux
/// label (see [`SELINUX`]).
fn absent(name: &[u8]) -> Errno {
    if name == SELINUX {
        Errno::EOPNOTSUPP
    } else {
        Errno::ENODATA
    }
}

/// Names of the backing entry's xattrs that belong to squeezefs itself.
fn reserved(name: &[u8]) -> bool {
    name == CAPS_STORED.to_bytes() || name == LOCATION || name == props::BACKGROUND_SEEN.as_bytes()
}

/// getxattr on an inode's fd, or its size query (`size` 0: the value's length, which
/// getfattr, getfacl and getcap ask first).
fn getxattr_at(fd: &PathFd, c: &CStr, size: u32) -> Result<Xattr, Errno> {
    if size == 0 {
        return sys::xattr_size(fd, c).map(Xattr::Size).map_err(Errno::from);
    }
    sys::xattr_get(fd, c, size as usize)
        .map(Xattr::Value)
        .map_err(Errno::from)
}

impl Core {
    pub(super) fn do_setxattr(
        &self,
        req: &Who,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        let i = self.inode(ino)?;
        if let Some(p) = Prop::from_xattr(name.as_bytes()) {
            return self.set_prop(&i, p, Some(value), flags);
        }
        if name.as_bytes() == props::REWRITE.as_bytes() {
            return self.rewrite(&i, value);
        }
        if name.as_bytes() == props::RECLAIM.as_bytes() && ino.0 == 1 {
            return self.reclaim_now(req);
        }
        if reserved(name.as_bytes()) {
            return Err(Errno::EPERM);
        }
        let c = sys::cstr(name)?;
        i.no_caps.store(false, Ordering::Relaxed);
        // Absences learnt from here on may be stale (`inode::Absent`, and a file made now
        // in a directory getting a default ACL: `create_new`); then an ACL rewrites the
        // mode, so a mode waiting in memory goes first (rule 7).
        i.no_xattrs.changed();
        if i.is_reg {
            self.files.apply_meta(&i);
            self.files.drop_kept_times(&i)?;
        }
        let fd = self.fd(&i)?;
        let caps = name.as_bytes() == CAPS && self.as_root;
        let r = if caps {
            sys::xattr_set(&fd, CAPS_STORED, value, flags).map(|()| {
                // A copy under the real name (stored by an older squeezefs) goes.
                let _ = sys::xattr_remove(&fd, &c);
            })
        } else {
            sys::xattr_set(&fd, &c, value, flags)
        };
        // Absences remembered are forgotten once the entry changed (`inode::Absent`).
        i.no_xattrs.changed();
        r?;
        if i.is_reg {
            self.files.drop_kept_times_after(&i);
        }
        if caps {
            return Ok(());
        }
        if name.as_bytes() == b"system.posix_acl_access" {
            self.kill_sgid_after_acl(req, ino, &i)?;
        }
        Ok(())
    }

    pub(super) fn do_getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> Result<Xattr, Errno> {
        let i = self.inode(ino)?;
        if let Some(p) = Prop::from_xattr(name.as_bytes()) {
            let v = props::format(&self.get_prop(&i, p)?.ok_or(Errno::ENODATA)?).into_bytes();
            return Xattr::fitted(v, size);
        }
        if name.as_bytes() == props::RECLAIM.as_bytes() && ino.0 == 1 {
            return Xattr::fitted(self.last_reclaim()?.into_bytes(), size);
        }
        let caps = name.as_bytes() == CAPS;
        if caps && i.no_caps.load(Ordering::Relaxed) {
            return Err(Errno::ENODATA);
        }
        if reserved(name.as_bytes()) {
            return Err(Errno::ENODATA);
        }
        let remembered = remembered_absent(name.as_bytes());
        if let Some(bit) = remembered {
            if i.no_xattrs.has(bit) {
                return Err(absent(name.as_bytes()));
            }
        }
        let generation = i.no_xattrs.generation();
        let fd = self.fd(&i)?;
        let c = sys::cstr(name)?;
        let mut r = Err(Errno::ENODATA);
        if caps && self.as_root {
            r = getxattr_at(&fd, CAPS_STORED, size);
        }
        if !caps || matches!(r, Err(e) if e == Errno::ENODATA) {
            r = getxattr_at(&fd, &c, size);
        }
        if caps && matches!(r, Err(e) if e == Errno::ENODATA) {
            i.no_caps.store(true, Ordering::Relaxed);
        }
        if let (Some(bit), Err(e)) = (remembered, &r) {
            if *e == Errno::ENODATA {
                i.no_xattrs.learn(bit, generation);
                return Err(absent(name.as_bytes()));
            }
        }
        r
    }

    pub(super) fn do_listxattr(&self, ino: INodeNo, size: u32) -> Result<Xattr, Errno> {
        let i = self.inode(ino)?;
        let raw = sys::xattr_list(self.fd(&i)?, 65536)?;
        // Properties are listed as they are in force (a file's live in its container; a
        // value forged on the backing entry around squeezefs is not one), the rest as is.
        // Capabilities kept under their stored name are listed under their own, once.
        let names: Vec<&[u8]> = raw
            .split(|&b| b == 0)
            .filter(|n| {
                !n.is_empty()
                    && Prop::from_xattr(n).is_none()
                    && *n != LOCATION
                    && *n != props::BACKGROUND_SEEN.as_bytes()
            })
            .map(|n| if n == CAPS_STORED.to_bytes() { CAPS } else { n })
            .collect();
        let mut v: Vec<u8> = Vec::with_capacity(raw.len());
        for (k, n) in names.iter().enumerate() {
            if *n == CAPS && names[..k].contains(&CAPS) {
                continue;
            }
            v.extend_from_slice(n);
            v.push(0);
        }
        if i.is_reg || i.is_dir() {
            for p in Prop::ALL {
                if self.get_prop(&i, p)?.is_some() {
                    v.extend_from_slice(p.xattr().as_bytes());
                    v.push(0);
                }
            }
        }
        Xattr::fitted(v, size)
    }

    pub(super) fn do_removexattr(&self, ino: INodeNo, name: &OsStr) -> Result<(), Errno> {
        self.check_writable()?;
        let i = self.inode(ino)?;
        if let Some(p) = Prop::from_xattr(name.as_bytes()) {
            return self.set_prop(&i, p, None, 0);
        }
        if reserved(name.as_bytes()) {
            return Err(Errno::EPERM);
        }
        let c = sys::cstr(name)?;
        i.no_xattrs.changed();
        if i.is_reg {
            self.files.apply_meta(&i);
            self.files.drop_kept_times(&i)?;
        }
        let fd = self.fd(&i)?;
        let r = if name.as_bytes() == CAPS && self.as_root {
            let stored = sys::xattr_remove(&fd, CAPS_STORED);
            let real = sys::xattr_remove(&fd, &c);
            stored.or(real)
        } else {
            sys::xattr_remove(&fd, &c)
        };
        i.no_xattrs.changed();
        r?;
        if i.is_reg {
            self.files.drop_kept_times_after(&i);
        }
        Ok(())
    }
}
