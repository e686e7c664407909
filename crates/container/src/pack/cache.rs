//! The cache of decompressed pack blocks, shared by every packed file of a mount: reading
//! the files of a directory one by one decompresses each block once. Bounded in bytes,
//! least recently used block dropped first.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A block: (pack id, offset of its header).
pub type BlockId = (u32, u64);

/// A block's decoded bytes, shared: a packed file that is all of its block holds this very
/// buffer as its extent (`Packs::read_shared`) rather than a copy of it.
pub type BlockBytes = Arc<Box<[u8]>>;

#[derive(Debug)]
pub struct BlockCache {
    cap: usize,
    bytes: usize,
    clock: u64,
    map: HashMap<BlockId, (BlockBytes, u64)>,
    /// Use tick → block, oldest first.
    order: BTreeMap<u64, BlockId>,
}

impl BlockCache {
    /// A cache of at most `cap` decompressed bytes (0: caches nothing).
    pub fn new(cap: usize) -> BlockCache {
        BlockCache {
            cap,
            bytes: 0,
            clock: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    pub fn get(&mut self, id: BlockId) -> Option<BlockBytes> {
        self.clock += 1;
        let clock = self.clock;
        let (data, tick) = self.map.get_mut(&id)?;
        self.order.remove(tick);
        *tick = clock;
        self.order.insert(clock, id);
        Some(data.clone())
    }

    pub fn insert(&mut self, id: BlockId, data: BlockBytes) {
        if data.len() > self.cap {
            return;
        }
        self.remove(id);
        self.clock += 1;
        self.bytes += data.len();
        self.map.insert(id, (data, self.clock));
        self.order.insert(self.clock, id);
        while self.bytes > self.cap {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            if let Some((d, _)) = self.map.remove(&old) {
                self.bytes -= d.len();
            }
        }
    }

    pub fn remove(&mut self, id: BlockId) {
        if let Some((d, tick)) = self.map.remove(&id) {
            self.order.remove(&tick);
            self.bytes -= d.len();
        }
    }

    /// Drops every block of pack `pack` (removed by the garbage collector).
    pub fn forget_pack(&mut self, pack: u32) {
        let ids: Vec<BlockId> = self.map.keys().filter(|k| k.0 == pack).copied().collect();
        for id in ids {
            self.remove(id);
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most decompressed bytes kept (the mount option `pack_cache`).
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_within_its_budget_dropping_the_least_recently_used() {
        let mut c = BlockCache::new(300);
        c.insert((1, 64), Arc::new(vec![1u8; 100].into_boxed_slice()));
        c.insert((1, 200), Arc::new(vec![2u8; 100].into_boxed_slice()));
        c.insert((1, 400), Arc::new(vec![3u8; 100].into_boxed_slice()));
        assert!(c.get((1, 64)).is_some()); // now the newest
        c.insert((2, 64), Arc::new(vec![4u8; 100].into_boxed_slice()));
        assert!(c.get((1, 200)).is_none(), "the least recently used goes");
        assert!(c.get((1, 64)).is_some());
        assert_eq!((c.bytes(), c.capacity()), (300, 300));
        c.insert((9, 9), Arc::new(vec![0u8; 301].into_boxed_slice()));
        assert!(c.get((9, 9)).is_none(), "larger than the whole cache: not kept");
        c.forget_pack(1);
        assert_eq!(c.bytes(), 100);
    }
}
