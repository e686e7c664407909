//! Reading packed files back: a block's decoded bytes through the shared cache (read
//! ahead into it too, [`Packs::prefetch_block`]), its header, a file's bytes from its record
//! or its slot, each checked against its checksum.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use squeezefs_codec::{decompress_padded, Algorithm};
use xxhash_rust::xxh3::xxh3_64;

use super::cache::{BlockBytes, BlockId};
use super::{corrupt, BlockHeader, Location, Packs, Pin, Slot, SlotState, BLOCK_HEADER_LEN};
use crate::storage::{read_full, Storage};
use crate::{Error, Result};

/// What [`Packs::cached_or_claim`] found.
enum Found<'a> {
    Cached(BlockBytes),
    Claimed(Loading<'a>),
    Busy,
}

/// The claim to read one block into the cache: ends (whatever the read did, panic
/// included) by letting the callers waiting for that block look again.
struct Loading<'a> {
    packs: &'a Packs,
    id: BlockId,
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        let mut loading = self.packs.loading.lock().unwrap_or_else(|e| e.into_inner());
        loading.remove(&self.id);
        drop(loading);
        self.packs.loaded.notify_all();
    }
}

impl Packs {
    /// The decoded bytes of the block at `block` in pack `pack`, through the cache. A block
    /// another caller is reading is waited for, not read again: the files of one block are
    /// loaded at once by a walk's workers (`squeezefs_fs`'s `siblings.rs`), and each read
    /// and decoded the whole block (measured: 562 blocks read for a walk of 708 packed files
    /// in about 150 blocks).
    pub fn block(&self, pack: u32, block: u64) -> Result<BlockBytes> {
        match self.cached_or_claim((pack, block), true) {
            Found::Cached(b) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                Ok(b)
            }
            Found::Claimed(claim) => {
                let read = self.load_block(pack, block);
                drop(claim);
                read
            }
            // (Only a caller that does not wait is told another is reading.)
            Found::Busy => self.load_block(pack, block),
        }
    }

    /// Reads and decodes the block at `block` of pack `pack` into the cache for a load
    /// that will want it soon (a walk's read-ahead, without the file's lock: blocks never
    /// change). Nothing when it is cached, or being read by another caller (a load then
    /// waits for that one); never counted as a cache hit; an error is left for the load to
    /// report. The caller holds a [`Pin`] on the pack (so reclaim cannot remove it
    /// meanwhile and a block of a later pack of that id be taken for it).
    pub fn prefetch_block(&self, _pin: &Pin, pack: u32, block: u64) {
        if let Found::Claimed(_claim) = self.cached_or_claim((pack, block), false) {
            let _ = self.load_block(pack, block);
        }
    }

    /// The block from the cache; else, when nobody else is reading it, the claim to read
    /// it ([`Loading`]: the caller reads it into the cache, and the claim's end wakes whoever
    /// waits). When another caller is reading it: with `wait`, waits for that caller, then
    /// looks again (a read that failed, or a block dropped from the cache since, leaves it
    /// to this caller); without, [`Found::Busy`].
    fn cached_or_claim(&self, id: BlockId, wait: bool) -> Found<'_> {
        // Lock order: `loading`, then `cache` (see the module).
        let mut loading = self.loading.lock().unwrap();
        loop {
            if let Some(b) = self.cache.lock().unwrap().get(id) {
                return Found::Cached(b);
            }
            if loading.insert(id) {
                return Found::Claimed(Loading { packs: self, id });
            }
            if !wait {
                return Found::Busy;
            }
            loading = self.loaded.wait(loading).unwrap();
        }
    }

    /// [`Packs::block`] from disk, into the cache.
    fn load_block(&self, pack: u32, block: u64) -> Result<BlockBytes> {
        let (h, payload) = self.read_block(pack, block)?;
        let n = h.logical_len as usize;
        let out = if h.codec == Algorithm::None {
            // Stored as they are (and checked against their checksum): the payload read is
            // the block, not copied into another buffer.
            if payload.len() != n {
                return Err(corrupt(
                    pack,
                    block,
                    format!("a raw block of {n} bytes stores {}", payload.len()),
                ));
            }
            payload
        } else {
            // (Into a new buffer's spare capacity: nothing zeroed first, as for an extent.)
            decompress_padded(h.codec, &payload, n, n).map_err(|e| {
                corrupt(
                    pack,
                    block,
                    format!("{} payload passed its checksum but does not decode: {e}", h.codec),
                )
            })?
        };
        self.counters.blocks_read.fetch_add(1, Ordering::Relaxed);
        // (A boxed slice of the buffer itself: `Arc<[u8]>` from it would copy every byte.)
        let data: BlockBytes = Arc::new(out.into_boxed_slice());
        self.cache.lock().unwrap().insert((pack, block), data.clone());
        Ok(data)
    }

    /// Reads and validates the header of the block at `block` in pack `pack`.
    fn read_header(st: &dyn Storage, pack: u32, block: u64) -> Result<BlockHeader> {
        let mut hb = [0u8; BLOCK_HEADER_LEN];
        if read_full(st, &mut hb, block)? < BLOCK_HEADER_LEN {
            return Err(corrupt(pack, block, "block header beyond the end of the pack"));
        }
        BlockHeader::decode(&hb, pack, block).map_err(|e| corrupt(pack, block, format!("header {e}")))
    }

    /// The header of the block at `block` in pack `pack`, without its payload (`stats`:
    /// a packed file's share of its block). Its payload must lie inside the pack; it is not
    /// read. Each header is read from disk once per [`Packs`], however many files ask.
    pub fn block_header(&self, pack: u32, block: u64) -> Result<BlockHeader> {
        if let Some(h) = self.headers.lock().unwrap().get(&(pack, block)) {
            return Ok(*h);
        }
        let st = self.handle(pack)?;
        let h = Self::read_header(&*st, pack, block)?;
        if block + (BLOCK_HEADER_LEN as u64) + h.stored_len as u64 > st.len()? {
            return Err(corrupt(pack, block, "payload beyond the end of the pack"));
        }
        self.headers.lock().unwrap().insert((pack, block), h);
        Ok(h)
    }

    /// A block's header and verified payload, read from disk (no cache).
    pub fn read_block(&self, pack: u32, block: u64) -> Result<(BlockHeader, Vec<u8>)> {
        let st = self.handle(pack)?;
        let h = Self::read_header(&*st, pack, block)?;
        let payload = st.read_vec(h.stored_len as usize, block + BLOCK_HEADER_LEN as u64)?;
        if payload.len() < h.stored_len as usize {
            return Err(corrupt(pack, block, "payload beyond the end of the pack"));
        }
        if xxh3_64(&payload) != h.payload_sum {
            return Err(corrupt(pack, block, "payload checksum mismatch"));
        }
        Ok((h, payload))
    }

    /// The bytes handed to [`Packs::append`] for `slot`, from memory (its open block, or the
    /// block bytes the slot keeps), whether or not its block was written; verified against
    /// the slot's checksum.
    pub fn read_slot(&self, slot: &Slot) -> Result<Vec<u8>> {
        // Lock order: the writer, then the slot (as in `seal` and `durable`).
        let w = self.writer.lock().unwrap();
        let state = slot.state.lock().unwrap().clone();
        let (data, at): (&[u8], u32) = match &state {
            SlotState::Open(group) => {
                let b = w
                    .open
                    .get(group)
                    .expect("an open slot is in its group's open block");
                let at = b
                    .slots
                    .iter()
                    .find(|(s, _)| std::ptr::eq(Arc::as_ptr(s), slot))
                    .map(|(_, at)| *at)
                    .expect("an open slot is listed in its block");
                (&b.data, at)
            }
            SlotState::Placed(p, data) => (data, p.offset),
            SlotState::Lost(_, data, at) => (data, *at),
        };
        let bytes = &data[at as usize..at as usize + slot.len as usize];
        if xxh3_64(bytes) != slot.sum {
            return Err(Error::Invalid("a pack slot's bytes changed in memory".into()));
        }
        Ok(bytes.to_vec())
    }

    /// A packed file's bytes, verified against its record's checksum.
    pub fn read(&self, loc: &Location) -> Result<Vec<u8>> {
        Ok(match self.read_shared(loc)? {
            Shared::Block(b) => b.to_vec(),
            Shared::Copy(v) => v,
        })
    }

    /// [`Packs::read`], except that a file that is all of its block gets the cached block
    /// itself, shared, not a copy (most files over a few hundred KiB fill a block alone).
    pub fn read_shared(&self, loc: &Location) -> Result<Shared> {
        if loc.len == 0 {
            return Ok(Shared::Copy(Vec::new()));
        }
        let block = self.block(loc.pack, loc.block)?;
        let range = loc.offset as usize..loc.offset as usize + loc.len as usize;
        let bytes = block
            .get(range.clone())
            .ok_or_else(|| corrupt(loc.pack, loc.block, "the file's range is beyond the block"))?;
        if xxh3_64(bytes) != loc.content_sum {
            return Err(corrupt(
                loc.pack,
                loc.block,
                format!("the file's bytes at {} do not match its checksum", loc.offset),
            ));
        }
        Ok(if range == (0..block.len()) {
            Shared::Block(block)
        } else {
            Shared::Copy(bytes.to_vec())
        })
    }
}

/// A packed file's bytes ([`Packs::read_shared`]).
pub enum Shared {
    /// The whole cached block: the file is all of it.
    Block(BlockBytes),
    /// A copy of the file's range of its block.
    Copy(Vec<u8>),
}
