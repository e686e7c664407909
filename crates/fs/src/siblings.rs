//! Read-ahead across files: a reader walking a directory in the order it was listed (`tar`,
//! `cp -r`, `rsync`, `grep -r`, `sha256sum *`) finds the next files' first bytes already in
//! the kernel's page cache (issue 45).
//!
//! Why: a tree of files of a few hundred KiB read cold spent most of its time on each
//! file's first READ (docs/BENCHMARKS.md, "Reading a tree"): the kernel asks for a file's
//! bytes only once its reader asks, the daemon then reads and decodes the file's first
//! extent (up to 1 MiB: `container/grow.rs`) while the reader waits, and the in-file
//! read-ahead (`readahead.rs`) only starts at the second READ. The reader's process, the
//! copy into the pipe and the next program in it meanwhile leave the other core idle. A
//! kernel filesystem has the same wait, but no round trip around it.
//!
//! What: the first readdir of a directory records the order of its regular files
//! ([`Siblings::listed`], the last [`LISTINGS`] directories). When files of one listing are
//! opened read-only in that order ([`Siblings::opened`]: the first one, or one at most
//! [`STEP`] places after the previous open), the next [`AHEAD_FILES`] files are queued for
//! [`WORKERS`] workers, which decode the first [`FILE_BYTES`] of each through its container and
//! hand them to the kernel's page cache (`FUSE_NOTIFY_STORE`, `pagecache.rs`), under rule
//! 11 of `lifecycle::state` like any store: never from a file with a writer, never over
//! bytes the kernel may hold newer. Its reader then finds them cached: no READ for a file
//! that fits, and the in-file read-ahead starts at the first READ past them.
//!
//! Bounded and a hint only: a full queue drops work; a file stored ahead once is not
//! stored again until a writer opens it (a warm re-read decodes nothing); nothing is stored
//! while memory is short or with `nofill_cache`. A walk in another order stores nothing
//! but, at most, the first files of each directory it opens first.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Mutex, Weak};

/// Directories whose listing order is remembered.
pub const LISTINGS: usize = 16;
/// Regular files remembered of one listing at most (the rest are not read ahead).
pub const LISTED_FILES: usize = 1 << 16;
/// Files stored ahead of the one a walk opens. Two were too few: a walker caught up with
/// the one worker and waited at its OPEN for the file being prepared (its container opened,
/// its pack block read, under the file's lock); with six ahead on four workers a cold walk
/// of the W1 mix's 750 files under 4 MiB took 0.66 s instead of 0.74 (median of four,
/// docs/BENCHMARKS.md, session 32).
pub const AHEAD_FILES: usize = 6;
/// Threads that store files ahead. Most of a file's preparation is waiting for the backing
/// filesystem (its inode, superblock, location record, pack block), so more threads than
/// cores pay, as for the in-file read-ahead (`readahead.rs`).
pub const WORKERS: usize = 4;
/// An open this many places after the previous one of its listing (or fewer) continues the
/// walk: files it skipped (unreadable, or opened by another program) do not stop it.
pub const STEP: usize = 2;
/// Bytes of each file stored ahead: its first 1 MiB (one extent of a file written whole, a
/// whole packed file; a larger file's in-file read-ahead takes over from there).
pub const FILE_BYTES: u64 = 1 << 20;
/// Files waiting for the workers, beyond which new ones are dropped.
const QUEUE: usize = 16;

/// A file to store ahead: its backing key (device, inode), as the listing had it.
pub type Key = (u64, u64);

/// One directory's regular files in listing order, and how far a walk has come.
struct Listing {
    dir: u64,
    files: Vec<Key>,
    at: HashMap<Key, usize>,
    /// The place of the last file opened from it.
    last: Option<usize>,
    /// Places below this are stored ahead (or queued) already.
    ahead_to: usize,
}

/// What stores a file ahead (the mount's core).
pub trait Load: Send + Sync {
    fn load_ahead(&self, key: Key);
}

/// The listings remembered, and the worker's queue.
#[derive(Default)]
pub struct Siblings {
    /// Lock order: taken alone.
    recent: Mutex<VecDeque<Listing>>,
    tx: Mutex<Option<SyncSender<Key>>>,
}

impl Siblings {
    /// Starts the workers; they hold `to` weakly (the core holds this). Until started (and
    /// with `nofill_cache`, where they are never started) nothing is queued.
    pub fn start(&self, to: Weak<dyn Load>) -> std::io::Result<()> {
        let (tx, rx): (SyncSender<Key>, Receiver<Key>) = sync_channel(QUEUE);
        // A panic (a decoder's) ends that file's preparation, not the worker.
        crate::workers::spawn("squeezefs-siblings", WORKERS, rx, move |key| match to.upgrade() {
            Some(l) => {
                l.load_ahead(key);
                true
            }
            None => false,
        })?;
        *self.tx.lock().unwrap() = Some(tx);
        Ok(())
    }

    /// Stops queueing (unmount, before the final write-out): the workers end once the
    /// files they took are done.
    pub fn stop(&self) {
        self.tx.lock().unwrap().take();
    }

    /// A fresh listing of directory `dir`: its regular files, in the order readdir returns
    /// them. Replaces the directory's earlier one.
    pub fn listed(&self, dir: u64, files: impl Iterator<Item = Key>) {
        if self.tx.lock().unwrap().is_none() {
            // Not started (`nofill_cache`): nothing would ever be stored.
            return;
        }
        let files: Vec<Key> = files.take(LISTED_FILES).collect();
        let mut recent = self.recent.lock().unwrap();
        recent.retain(|l| l.dir != dir);
        if files.is_empty() {
            return;
        }
        let at = files.iter().enumerate().map(|(i, k)| (*k, i)).collect();
        if recent.len() >= LISTINGS {
            recent.pop_back();
        }
        recent.push_front(Listing {
            dir,
            files,
            at,
            last: None,
            ahead_to: 0,
        });
    }

    /// A read-only open of file `key`: the files to store ahead, if it continues a walk of a
    /// listing (each returned once per walk).
    pub fn opened(&self, key: Key) -> Vec<Key> {
        let mut recent = self.recent.lock().unwrap();
        let Some(l) = recent.iter_mut().find(|l| l.at.contains_key(&key)) else {
            return Vec::new();
        };
        let i = l.at[&key];
        let walks = match l.last {
            None => i == 0,
            Some(j) => j < i && i - j <= STEP,
        };
        if l.last != Some(i) {
            l.last = Some(i);
        }
        if !walks {
            return Vec::new();
        }
        let from = (i + 1).max(l.ahead_to);
        let to = (i + 1 + AHEAD_FILES).min(l.files.len());
        if from >= to {
            return Vec::new();
        }
        l.ahead_to = to;
        l.files[from..to].to_vec()
    }

    /// Queues `keys` for the worker (dropped when it is behind, or not started).
    pub fn queue(&self, keys: Vec<Key>) {
        let tx = self.tx.lock().unwrap();
        let Some(tx) = tx.as_ref() else { return };
        for k in keys {
            match tx.try_send(k) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Siblings` whose queue exists (nothing reads it: the tests look at decisions).
    fn started() -> Siblings {
        let s = Siblings::default();
        let (tx, _) = sync_channel(QUEUE);
        *s.tx.lock().unwrap() = Some(tx);
        s
    }

    fn keys(n: u64) -> Vec<Key> {
        (0..n).map(|i| (7, 100 + i)).collect()
    }

    #[test]
    fn a_walk_in_listing_order_stores_the_next_files_once() {
        let s = started();
        let a = AHEAD_FILES;
        let k = keys(a as u64 + 4);
        s.listed(1, k.clone().into_iter());
        assert_eq!(s.opened(k[0]), k[1..=a].to_vec(), "the first file starts a walk");
        assert_eq!(s.opened(k[1]), vec![k[a + 1]]);
        assert_eq!(s.opened(k[2]), vec![k[a + 2]]);
        // A file skipped (not readable, say): the walk goes on.
        assert_eq!(s.opened(k[4]), vec![k[a + 3]]);
        assert_eq!(s.opened(k[5]), Vec::<Key>::new(), "the end of the listing");
        // Opened again: the same place, nothing new.
        assert_eq!(s.opened(k[5]), Vec::<Key>::new());
    }

    #[test]
    fn other_orders_store_nothing_past_the_first_files() {
        let s = started();
        let k = keys(10);
        s.listed(1, k.clone().into_iter());
        assert!(s.opened(k[5]).is_empty(), "not the first file, no walk before");
        assert!(s.opened(k[2]).is_empty(), "backwards");
        assert!(s.opened(k[9]).is_empty(), "a jump");
        assert!(s.opened((7, 999)).is_empty(), "not listed");
        // Two opens in order: a walk from there.
        let s2 = started();
        s2.listed(1, k.clone().into_iter());
        assert!(s2.opened(k[3]).is_empty());
        assert_eq!(s2.opened(k[4]), k[5..(5 + AHEAD_FILES).min(10)].to_vec());
    }

    #[test]
    fn a_new_listing_replaces_the_old_and_only_the_last_ones_are_kept() {
        let s = started();
        let k = keys(4);
        s.listed(1, k.clone().into_iter());
        assert_eq!(s.opened(k[0]), k[1..].to_vec());
        // Listed again (a rewind, or another walk): it starts over.
        s.listed(1, k.clone().into_iter());
        assert_eq!(s.opened(k[0]), k[1..].to_vec());
        for d in 2..2 + LISTINGS as u64 {
            s.listed(d, [(8, d)].into_iter());
        }
        assert!(s.opened(k[0]).is_empty(), "forgotten");
        assert_eq!(s.recent.lock().unwrap().len(), LISTINGS);
        // A listing with no regular file is not kept.
        s.listed(99, std::iter::empty());
        assert!(s.recent.lock().unwrap().iter().all(|l| l.dir != 99));
    }
}
