//! The table of known inodes by FUSE number, and the numbering: a backing inode is
//! numbered as itself (`st_ino`) where it can be, from [`REMAP_BASE`] up where it cannot.
//!
//! Most inodes are numbered as themselves, and those are kept in a set keyed by their own
//! backing number (8 bytes a bucket: the number is read from the inode), not in a map
//! from number to inode (16 bytes a bucket: at a million inodes the buckets alone were
//! 36 bytes an inode). The few others (the root, remapped numbers) are in a map beside it.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::node::Inode;

/// First number given to a backing inode whose own number cannot be its FUSE number. Far
/// above what ext4, xfs, btrfs or tmpfs hand out (the statistics file is `u64::MAX - 1`).
pub const REMAP_BASE: u64 = 1 << 63;

/// An inode numbered as its own backing inode number (`key.1`), found in
/// [`Table::own`] by that number.
struct Own(Arc<Inode>);

impl Borrow<u64> for Own {
    fn borrow(&self) -> &u64 {
        &self.0.key.1
    }
}

impl Hash for Own {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.key.1.hash(h)
    }
}

impl PartialEq for Own {
    fn eq(&self, o: &Own) -> bool {
        self.0.key.1 == o.0.key.1
    }
}

impl Eq for Own {}

#[derive(Default)]
pub(super) struct Table {
    /// Inodes numbered as themselves (on the root's device).
    own: HashSet<Own>,
    /// Inodes under any other number: the root (1), remapped numbers.
    others: HashMap<u64, Arc<Inode>>,
    /// The number of each backing file (device, inode) whose inode is not found in
    /// `own` under its own `st_ino` on the root's device: the root, remapped numbers.
    /// Most inodes are numbered as themselves and have no entry here (a second map of
    /// every inode cost some 50 B each).
    remapped: HashMap<(u64, u64), u64>,
    /// The backing root's (device, inode): FUSE's inode 1.
    root: (u64, u64),
    /// Next number from [`REMAP_BASE`] up.
    next: u64,
}

impl Table {
    /// A table holding the backing root `root_inode` (device, inode `root`) as FUSE's 1.
    pub(super) fn new(root: (u64, u64), root_inode: Arc<Inode>) -> Table {
        let mut t = Table {
            root,
            next: REMAP_BASE,
            ..Table::default()
        };
        t.add(root, 1, root_inode);
        t
    }

    /// The inode numbered `ino`.
    pub(super) fn get(&self, ino: u64) -> Option<&Arc<Inode>> {
        self.own.get(&ino).map(|o| &o.0).or_else(|| self.others.get(&ino))
    }

    fn contains(&self, ino: u64) -> bool {
        self.own.contains(&ino) || self.others.contains_key(&ino)
    }

    /// Drops the inode numbered `ino`, of backing file `key`.
    pub(super) fn remove(&mut self, ino: u64, key: (u64, u64)) {
        if !self.own.remove(&ino) {
            self.others.remove(&ino);
        }
        if self.remapped.get(&key) == Some(&ino) {
            self.remapped.remove(&key);
        }
    }

    /// Backing file `key` is no longer the one its remapped number names (that inode was
    /// replaced: it keeps its number until FORGET, lookups no longer find it).
    pub(super) fn unmap(&mut self, key: (u64, u64)) {
        self.remapped.remove(&key);
    }

    /// Every known inode.
    pub(super) fn all(&self) -> impl Iterator<Item = &Arc<Inode>> {
        self.own.iter().map(|o| &o.0).chain(self.others.values())
    }

    /// Whether a map holds under a quarter of its room ([`Table::shrink`] pays).
    pub(super) fn sparse(&self) -> bool {
        fn sparse(len: usize, capacity: usize) -> bool {
            len < capacity / 4
        }
        sparse(self.own.len(), self.own.capacity())
            || sparse(self.others.len(), self.others.capacity())
            || sparse(self.remapped.len(), self.remapped.capacity())
    }

    /// Shrinks the maps to twice their length.
    pub(super) fn shrink(&mut self) {
        let n = self.own.len() * 2;
        self.own.shrink_to(n);
        let n = self.others.len() * 2;
        self.others.shrink_to(n);
        let n = self.remapped.len() * 2;
        self.remapped.shrink_to(n);
    }

    /// The FUSE number of a backing inode first seen now: its own `st_ino` when that is
    /// on the backing root's filesystem and free to use, else the next remapped number.
    pub(super) fn number_for(&mut self, key: (u64, u64)) -> u64 {
        let (dev, ino) = key;
        if dev == self.root.0 && ino > 1 && ino < REMAP_BASE && !self.contains(ino) {
            return ino;
        }
        while self.contains(self.next) {
            self.next += 1;
        }
        self.next += 1;
        self.next - 1
    }

    /// The number of the known inode of backing file `key` (not one [`Inode::replaced`]).
    pub(super) fn number_of(&self, key: (u64, u64)) -> Option<u64> {
        if let Some(&n) = self.remapped.get(&key) {
            return Some(n);
        }
        let own = &self.own.get(&key.1)?.0;
        (key.0 == self.root.0 && own.key == key && !own.replaced.load(Ordering::Relaxed)).then_some(key.1)
    }

    /// Records `key`'s new inode, numbered `ino` ([`Table::number_for`]).
    pub(super) fn add(&mut self, key: (u64, u64), ino: u64, inode: Arc<Inode>) {
        if key == (self.root.0, ino) {
            debug_assert_eq!(inode.key.1, ino);
            self.own.insert(Own(inode));
        } else {
            self.remapped.insert(key, ino);
            self.others.insert(ino, inode);
        }
    }

    /// The known inode of backing file `key`.
    pub(super) fn inode_of(&self, key: (u64, u64)) -> Option<Arc<Inode>> {
        self.number_of(key).and_then(|n| self.get(n)).cloned()
    }

    /// The number `readdir` reports for entry `d_ino` of a directory on device `dev`: the
    /// number a lookup gives (or gave) it.
    pub(super) fn entry_number(&self, dev: u64, d_ino: u64) -> u64 {
        if (dev, d_ino) == self.root {
            return 1;
        }
        self.number_of((dev, d_ino)).unwrap_or(d_ino)
    }
}
