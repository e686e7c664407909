//! Read-ahead across files. Reading a tree of small files cold is bound by disk latency:
//! each file's superblock read waits for the disk, one file after another. When a directory
//! is opened (a reader is about to walk it), a background thread asks the kernel to start
//! reading the first [`AHEAD`] bytes of its regular files (`posix_fadvise(WILLNEED)`), so
//! the reads that follow find them in the page cache. Bounded: at most [`FILES`] files per
//! directory and [`QUEUE`] directories waiting; when the thread is behind, work is dropped.

use std::ffi::CString;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};

use crate::inode::PathFd;
use crate::sys;

/// Bytes of each file to read ahead: the superblock and the first extents.
pub const AHEAD: i64 = 256 << 10;
/// Files per directory read ahead.
pub const FILES: usize = 512;
/// Directories waiting for the thread.
pub const QUEUE: usize = 64;

pub struct Prefetcher {
    tx: SyncSender<(PathFd, Vec<CString>)>,
}

impl Prefetcher {
    pub fn start() -> std::io::Result<Prefetcher> {
        let (tx, rx) = sync_channel::<(PathFd, Vec<CString>)>(QUEUE);
        std::thread::Builder::new()
            .name("squeezefs-prefetch".into())
            .spawn(move || {
                for (dir, names) in rx {
                    for n in names {
                        if let Ok(f) = sys::open_quietly(&dir, &n) {
                            sys::will_need(&f, AHEAD);
                        }
                    }
                }
            })?;
        Ok(Prefetcher { tx })
    }

    /// Reads ahead the regular files `names` of directory `dir` (dropped if busy).
    pub fn directory(&self, dir: PathFd, names: Vec<CString>) {
        if names.is_empty() {
            return;
        }
        match self.tx.try_send((dir, names)) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}
