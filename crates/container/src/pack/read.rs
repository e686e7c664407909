//! Reading packed files back: a block's decoded bytes through the shared cache (read
//! ahead into it too, [`Packs::prefetch_block`]), its header, a file's bytes from its record
//! or its slot, each checked against its checksum.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

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

/// One read of a block into the cache, which callers wanting the same block wait for
/// ([`Packs::cached_or_claim`]): its outcome, `Some(None)` when it failed.
#[derive(Default)]
pub(super) struct Flight {
    outcome: Mutex<Option<Option<BlockBytes>>>,
    done: Condvar,
}

/// The claim to read one block: [`Loading::landed`] hands the bytes to whoever waits
/// (whether or not the cache keeps them: a cache smaller than the block, `pack_cache=0`);
/// dropped without them (an error, a panic), it tells the waiters to look again.
struct Loading<'a> {
    packs: &'a Packs,
    id: BlockId,
    flight: Arc<Flight>,
}

impl Loading<'_> {
    fn landed(&self, bytes: &BlockBytes) {
        *self.flight.outcome.lock().unwrap() = Some(Some(bytes.clone()));
    }
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        let mut loading = self.packs.loading.lock().unwrap_or_else(|e| e.into_inner());
        loading.remove(&self.id);
        drop(loading);
        let mut outcome = self.flight.outcome.lock().unwrap_or_else(|e| e.into_inner());
        outcome.get_or_insert(None);
        drop(outcome);
        self.flight.done.notify_all();
    }
}

impl Packs {
    /// The decoded bytes of the block at `block` in pack `pack`, through the cache. A block
    /// another caller is reading is waited for, not read again: a walk's workers
    /// (`squeezefs_fs`'s `siblings.rs`) and its reader load the files of one block at once,
    /// and each read and decoded it (measured: a walk of 708 packed files in 483 blocks
    /// read 552).
    pub fn block(&self, pack: u32, block: u64) -> Result<BlockBytes> {
        match self.cached_or_claim((pack, block), true) {
            Found::Cached(b) => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                Ok(b)
            }
            Found::Claimed(claim) => self.load_block(pack, block, &claim),
            Found::Busy => {
                // (Only a caller that does not wait is told another is reading.)
                debug_assert!(false, "a waiting caller was told another is reading");
                self.load_block_uncached(pack, block)
            }
        }
    }

    /// Reads and decodes the block at `block` of pack `pack` into the cache for a load
    /// that will want it soon (a walk's read-ahead, without the file's lock: blocks never
    /// change). Nothing when it is cached, or being read by another caller (a load then
    /// waits for that one); never counted as a cache hit; an error is left for the load to
    /// report. The caller holds a [`Pin`] on the pack (so reclaim cannot remove it
    /// meanwhile and a block of a later pack of that id be taken for it).
    pub fn prefetch_block(&self, _pin: &Pin, pack: u32, block: u64) {
        if let Found::Claimed(claim) = self.cached_or_claim((pack, block), false) {
            let _ = self.load_block(pack, block, &claim);
        }
    }

    /// The block from the cache; else, when nobody else is reading it, the claim to read
    /// it ([`Loading`]). When another caller is reading it: with `wait`, its bytes once it
    /// has them (a read that failed leaves it to this caller: it looks again); without,
    /// [`Found::Busy`].
    fn cached_or_claim(&self, id: BlockId, wait: bool) -> Found<'_> {
        loop {
            // (A hit takes the cache's lock alone.)
            if let Some(b) = self.cache.lock().unwrap().get(id) {
                return Found::Cached(b);
            }
            // Lock order: `loading`, then `cache` (see the module): looked at again under
            // `loading`, so a read that ended since is found, not repeated.
            let mut loading = self.loading.lock().unwrap();
            if let Some(b) = self.cache.lock().unwrap().get(id) {
                return Found::Cached(b);
            }
            let flight = match loading.get(&id) {
                None => {
                    let flight = Arc::new(Flight::default());
                    loading.insert(id, flight.clone());
                    return Found::Claimed(Loading {
                        packs: self,
                        id,
                        flight,
                    });
                }
                Some(_) if !wait => return Found::Busy,
                Some(f) => f.clone(),
            };
            drop(loading);
            let mut outcome = flight.outcome.lock().unwrap();
            while outcome.is_none() {
                outcome = flight.done.wait(outcome).unwrap();
            }
            if let Some(Some(b)) = outcome.as_ref() {
                return Found::Cached(b.clone());
            }
        }
    }

    /// [`Packs::block`] from disk, into the cache, for the callers waiting on `claim`.
    fn load_block(&self, pack: u32, block: u64, claim: &Loading) -> Result<BlockBytes> {
        let bytes = self.load_block_uncached(pack, block)?;
        self.cache.lock().unwrap().insert((pack, block), bytes.clone());
        claim.landed(&bytes);
        Ok(bytes)
    }

    /// A block read and decoded from disk (counted in `blocks_read`).
    fn load_block_uncached(&self, pack: u32, block: u64) -> Result<BlockBytes> {
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
        Ok(Arc::new(out.into_boxed_slice()))
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
