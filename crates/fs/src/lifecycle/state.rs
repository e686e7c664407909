//! The state of a regular file's container, as every inode carries it, and the rules that
//! govern it. Declared here, apart from the code that drives it (`lifecycle`), so the inode
//! table can hold it without depending on the lifecycle (no module cycle).
//!
//! # The states (of [`FileState::open`])
//! - **Closed** — `None`. No container in memory; the logical size may be remembered in
//!   [`FileState::size`] (this daemon is the only writer of the backing file).
//! - **Kept after a lookup** — `Some`, no handle, clean, not queued. Opened to answer a
//!   lookup's size and kept so the `open` that usually follows need not parse it again;
//!   at most `lifecycle::IDLE_MAX` are kept, the oldest clean one dropped first.
//! - **Open** — `Some`, `handles > 0`. All handles share this one container; `writers`
//!   counts the handles open for writing (while there are any, the kernel's writeback cache
//!   may hold data the container has not seen yet).
//! - **Queued** — `Some`, no handle, in the group commit's queue: written back at its last
//!   close, its superblock (or the removal of the copies it replaced) waits for the next
//!   group commit; the cache is emptied, the fd kept.
//!
//! # The rules (each implemented once, in `lifecycle`)
//! 1. **Last close** (`release`): the container is written back. If that leaves a ticket
//!    (a superblock to commit, or old copies to remove after a sync), the file is queued;
//!    otherwise its state is dropped and its size remembered. Errors reach `close`.
//! 2. **A change with no handle open** (a property set on a kept or queued file, an
//!    `lseek`, a `fallocate` through a path): written back at once like a close, and queued
//!    if a ticket is left — unless a superblock is already pending, which the queued commit
//!    will see is stale and redo.
//! 3. **Group commit** (`lifecycle::commit`): one `syncfs` makes a batch's extents
//!    durable; each file's pending superblock is then written (a file changed since its
//!    write-back is written back again and requeued); a second `syncfs` makes the
//!    superblocks durable, after which each file settles (older copies punched). A file
//!    with no handle left is dropped after its turn.
//! 4. **fsync**: everything written and synced at once, no ticket left behind.
//! 5. **Unmount**: the queue is committed, every container still in memory is fsynced,
//!    then the backing filesystem is synced.
//! 6. A kept container is dropped only when clean, unqueued and without a handle; a
//!    queued one only by the group commit.
//!
//! # Lock order
//! `lifecycle::Files::idle` → the inode table (`Inodes::forget` takes it, then looks at
//! [`FileState::open`]) → [`FileState::open`] → [`FileState::size`]. So `Inodes::forget`
//! is never called with `open` held (drop it first, as `lifecycle::commit` does). The fd
//! cache's queue and `Files::idle` look at another inode's `open` only with `try_lock`.
//! The group commit's queue lock is held alone.

use std::sync::Mutex;

use squeezefs_container::{Container, FileStorage};

/// The state all handles of one open (or kept, or queued) regular file share.
pub struct OpenFile {
    pub container: Container<FileStorage>,
    pub handles: u32,
    /// Handles open for writing. While there are any, the kernel's page cache may hold
    /// written data the container has not seen yet (writeback cache).
    pub writers: u32,
}

/// A regular file's lifecycle state, in its inode.
#[derive(Default)]
pub struct FileState {
    pub open: Mutex<Option<OpenFile>>,
    /// Logical size of a closed container, remembered (we are the only writer).
    pub size: Mutex<Option<u64>>,
}
