//! From a `do_x` result to the fuser reply: one place that knows how each reply type is
//! sent, so handlers in `dispatch.rs` stay one line.

use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyXattr,
};

use super::TTL;

pub(super) fn empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

pub(super) fn entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

/// A lookup's reply. A name that does not exist is answered as an entry of inode 0 with
/// the usual timeout: the kernel caches the miss as a negative dentry (an ENOENT error is
/// not cached), so tools that look for a name again and again (compilers probing include
/// paths, `stat` before `create`) ask once. This daemon is the only writer of the backing
/// directory, and every name made through the mount replaces the kernel's negative dentry.
pub(super) fn lookup(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Err(e) if e == Errno::ENOENT => {
            let t = std::time::UNIX_EPOCH;
            let none = FileAttr {
                ino: fuser::INodeNo(0),
                size: 0,
                blocks: 0,
                atime: t,
                mtime: t,
                ctime: t,
                crtime: t,
                kind: fuser::FileType::RegularFile,
                perm: 0,
                nlink: 0,
                uid: 0,
                gid: 0,
                rdev: 0,
                blksize: 0,
                flags: 0,
            };
            reply.entry(&TTL, &none, Generation(0))
        }
        r => entry(reply, r),
    }
}

pub(super) fn attr(reply: ReplyAttr, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.attr(&TTL, &a),
        Err(e) => reply.error(e),
    }
}

/// The statistics file's entry and attributes: never cached (on a mount with no OPEN,
/// each read asks for them, which renders the document it reads: `virtual_file.rs`).
pub(super) fn stats_entry(reply: ReplyEntry, attr: FileAttr) {
    reply.entry(&std::time::Duration::ZERO, &attr, Generation(0))
}

pub(super) fn stats_attr(reply: ReplyAttr, attr: FileAttr) {
    reply.attr(&std::time::Duration::ZERO, &attr)
}

pub(super) fn data(reply: ReplyData, r: Result<Vec<u8>, Errno>) {
    match r {
        Ok(d) => reply.data(&d),
        Err(e) => reply.error(e),
    }
}

pub(super) fn ioctl(reply: fuser::ReplyIoctl, r: Result<Vec<u8>, Errno>) {
    match r {
        Ok(d) => reply.ioctl(0, &d),
        Err(e) => reply.error(e),
    }
}

pub(super) fn opened(reply: ReplyOpen, r: Result<(u64, FopenFlags), Errno>) {
    match r {
        Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
        Err(e) => reply.error(e),
    }
}

/// An xattr value, or only its length (a size query: the caller's buffer size was 0).
pub(super) enum Xattr {
    Value(Vec<u8>),
    Size(usize),
}

impl Xattr {
    /// `v` as getxattr/listxattr answer a caller whose buffer holds `size` bytes.
    pub(super) fn fitted(v: Vec<u8>, size: u32) -> Result<Xattr, Errno> {
        match size as usize {
            0 => Ok(Xattr::Size(v.len())),
            n if n < v.len() => Err(Errno::ERANGE),
            _ => Ok(Xattr::Value(v)),
        }
    }
}

pub(super) fn xattr(reply: ReplyXattr, r: Result<Xattr, Errno>) {
    match r {
        Ok(Xattr::Value(v)) => reply.data(&v),
        Ok(Xattr::Size(n)) => reply.size(n as u32),
        Err(e) => reply.error(e),
    }
}
