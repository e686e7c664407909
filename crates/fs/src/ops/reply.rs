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

pub(super) fn attr(reply: ReplyAttr, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.attr(&TTL, &a),
        Err(e) => reply.error(e),
    }
}

pub(super) fn data(reply: ReplyData, r: Result<Vec<u8>, Errno>) {
    match r {
        Ok(d) => reply.data(&d),
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
