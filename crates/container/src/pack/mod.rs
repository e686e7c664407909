//! Packs (format 4): small files stored whole, back to back, in solid blocks shared by many
//! files, so a file of a few KiB costs a few hundred bytes of a compressed block instead of
//! a 4 KiB block of its own. The idea is squashfs's fragments and EROFS's
//! fragments/ztailpacking, which are read-only; here files are added and replaced while the
//! filesystem is mounted, crash-safely.
//!
//! * `format.rs` — the bytes: pack header, block header, the location record.
//! * `dir.rs` — where packs live ([`PackDir`]: a real directory, or crashing test disks).
//! * `cache.rs` — the shared cache of decompressed blocks.
//! * this file — [`Packs`]: appending files to open blocks, writing blocks, making them
//!   durable.
//! * `read.rs` — reading a file back through the cache (and a block read ahead into it).
//!
//! # How a file gets into a pack
//! 1. [`Packs::append`] copies the file's bytes into the open block of its group (same codec
//!    and extent size) and returns a [`Slot`]. A block is written (compressed, checksummed,
//!    appended to the current pack) as soon as the next file would not fit, so a batch of
//!    closes fills blocks; files never straddle blocks.
//! 2. [`Packs::durable`] writes the slot's block if it is still open and syncs its pack if
//!    that block is not yet durable: only then may the file's location record point at it.
//!    A group commit calls [`Packs::seal_all`] before its `syncfs` and [`Packs::synced`]
//!    after it, so no file needs a sync of its own.
//! 3. The container writes the location record (see `container/packing.rs`).
//!
//! Blocks are never overwritten: a rewritten or deleted file leaves its old bytes as
//! garbage. `audit.rs` measures it against the records of a walked tree; `reclaim.rs` moves
//! a pack's live files into new blocks and removes the pack; `tree.rs` does both for a whole
//! backing directory (`squeezefs check --repair`, offline `compress`, unmount, and a mount's
//! background rounds).
//!
//! # Lock order
//! `writer` → `handles` → `cache`. Readers take `handles` (read) and `cache` only.
//! `loading` → `cache`: a block's readers claim it under `loading` after looking in the
//! cache (`read.rs`); a read in flight is waited for with no lock of this struct held.
//! `records` is taken alone (never while holding another lock of this struct): containers
//! hold it shared while they set or remove a location record, reclaim holds it exclusively
//! while it checks and replaces records, so neither replaces a record the other just set.

pub mod audit;
pub mod cache;
pub mod clean;
pub mod dir;
pub mod format;
pub mod moves;
mod read;
pub mod reclaim;
pub mod record;
pub mod tree;

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use squeezefs_codec::{compress, Algorithm, CodecSpec};
use xxhash_rust::xxh3::xxh3_64;

use crate::storage::Storage;
use crate::{Error, Result};
use cache::BlockCache;
pub use dir::{FsPackDir, MemPackDir, PackDir};
pub use format::{BlockHeader, Location, PackHeader, BLOCK_HEADER_LEN, LOCATION_XATTR, PACK_HEADER_LEN};
pub use read::Shared;

/// A pack takes no more blocks once it is this long; the next block starts a new pack.
pub const PACK_MAX: u64 = 64 << 20;
/// Default size of the cache of decompressed blocks.
pub const DEFAULT_CACHE: usize = 32 << 20;

/// Where a file's bytes ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub pack: u32,
    /// Offset of the block's header in the pack.
    pub block: u64,
    /// Offset of the file's bytes in the block's decoded bytes.
    pub offset: u32,
}

#[derive(Debug, Clone)]
enum SlotState {
    /// In the open block of this group.
    Open(Group),
    /// Written (not necessarily durable); the block's decoded bytes stay with the slot.
    Placed(Placed, cache::BlockBytes),
    /// Its block could not be written: why, and the block's bytes (the file's are at the
    /// slot's offset), so its owner can write them again.
    Lost(String, cache::BlockBytes, u32),
}

/// A file's bytes handed to [`Packs::append`]: where they are, once their block is written.
///
/// A slot holds its block's decoded bytes (shared with the block cache and the block's other
/// slots) until it is dropped, so [`Packs::read_slot`] never needs the disk and a file need
/// not keep its own copy while its record waits for a commit: memory per waiting file is its
/// share of a block, not an extent.
#[derive(Debug)]
pub struct Slot {
    pub len: u32,
    /// XXH3-64 of the bytes.
    pub sum: u64,
    state: Mutex<SlotState>,
}

/// A container's claim on a pack ([`Packs::pin`]).
#[derive(Debug)]
pub struct Pin {
    _alive: Arc<()>,
}

/// Which stream of packs a block goes to. Each lane appends to a pack of its own, so the
/// background pass's dense blocks (`tree::repack_tree`) never share a pack with the blocks
/// the mount writes meanwhile: a pack the pass made holds only blocks at their files'
/// targets, and is not picked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Files written through the mount (and moved by reclaim).
    Written = 0,
    /// Files the background pass repacks at their target level.
    Repacked = 1,
}

/// Files are packed with others of the same codec and block size, in the same lane.
type Group = (CodecSpec, u8, Lane);

#[derive(Debug, Default)]
struct OpenBlock {
    data: Vec<u8>,
    slots: Vec<(Arc<Slot>, u32)>,
}

struct Current {
    id: u32,
    st: Arc<dyn Storage>,
    end: u64,
}

#[derive(Default)]
struct Writer {
    next_id: u32,
    /// The pack each lane appends to.
    cur: [Option<Current>; 2],
    /// Per pack written to: bytes written, and bytes known durable.
    written: HashMap<u32, u64>,
    synced: HashMap<u32, u64>,
    open: HashMap<Group, OpenBlock>,
    /// Per pack, the slots placed in it: while one is alive, a record naming the pack may
    /// still be set (so the pack is not [`Packs::reclaimable`]).
    placed: HashMap<u32, Vec<Weak<Slot>>>,
    /// Packs created whose directory entries are not known durable ([`PackDir::create`]):
    /// synced before a record may name one of them.
    unnamed: BTreeSet<u32>,
}

/// Counters of a mount's packs (for `squeezefs stats --live`).
#[derive(Debug, Default)]
pub struct PackCounters {
    pub files_packed: AtomicU64,
    pub blocks_written: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_stored: AtomicU64,
    pub blocks_read: AtomicU64,
    pub cache_hits: AtomicU64,
    pub bytes_reclaimed: AtomicU64,
    /// Location records set or removed by files' own commits (not by reclaim's moves):
    /// when the bytes a file replaced become garbage a reclaim round can see. (Appends
    /// come before: a round between a file's append and its commit sees no garbage yet.)
    pub records_changed: AtomicU64,
    /// Slots whose record a commit set (beside `files_packed`, the slots appended: a slot
    /// appended and never named is garbage, [`Packs::made_no_garbage`]).
    pub slots_recorded: AtomicU64,
    /// Changes that may have left bytes in a pack that no record names: a record replaced
    /// or removed by a commit, a packed file's last name removed (told by the filesystem,
    /// [`Packs::note_garbage`]), files moved by reclaim or the background pass.
    pub garbage_events: AtomicU64,
}

/// What a [`Packs::seal_all`] wrote: the length of every pack with writes not yet known
/// durable. Handed back to [`Packs::synced`] after a sync of the whole backing filesystem.
#[derive(Debug, Default)]
pub struct SyncMark(Vec<(u32, u64)>, Vec<u32>);

/// The packs of one backing directory.
pub struct Packs {
    dir: Box<dyn PackDir>,
    writable: bool,
    writer: Mutex<Writer>,
    handles: RwLock<HashMap<u32, Arc<dyn Storage>>>,
    cache: Mutex<BlockCache>,
    /// Block headers read by [`Packs::block_header`] (tools accounting packed files; the
    /// daemon never asks). A block is never rewritten in place, so a header stays true while
    /// its pack exists; [`Packs::forget`] drops a pack's.
    headers: Mutex<HashMap<cache::BlockId, BlockHeader>>,
    /// Serialises location-record writes against reclaim (see the lock order above).
    records: RwLock<()>,
    /// Per pack, the [`Pin`]s of containers whose bytes are there and not loaded (taken
    /// alone, like `records`).
    pins: Mutex<HashMap<u32, Vec<Weak<()>>>>,
    /// Blocks being read and decoded into the cache, by a load or a read ahead: a second
    /// caller for one of them waits for that read's bytes rather than reading it too
    /// (`read.rs`).
    loading: Mutex<HashMap<cache::BlockId, Arc<read::Flight>>>,
    /// Whether reclaim keeps a moved file's change time in its record (version 3, 64
    /// bytes): set by the mount when the backing filesystem keeps such a record for free.
    keep_ctime: std::sync::atomic::AtomicBool,
    /// Moves of records by reclaim so far ([`Packs::moves`]).
    moves: AtomicU64,
    /// Which files the last batches moved ([`Packs::moved_since`]). Taken alone; `moves`
    /// is raised under it.
    moved: Mutex<moves::MoveLog>,
    pub counters: PackCounters,
}

impl std::fmt::Debug for Packs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packs").field("writable", &self.writable).finish()
    }
}

/// A block's payload: `data` compressed with `codec`, or `None` (stored raw, codec `None`)
/// when that is not smaller.
pub fn encode_block(codec: CodecSpec, data: &[u8]) -> (Algorithm, Option<Vec<u8>>) {
    let mut payload = Vec::new();
    if codec.alg != Algorithm::None
        && !data.is_empty()
        && compress(codec, data, &mut payload, data.len() - 1).unwrap_or(false)
    {
        (codec.alg, Some(payload))
    } else {
        (Algorithm::None, None)
    }
}

/// How [`Packs::append`] cuts files arriving in this order into blocks of at most
/// `1 << shift` bytes: the index of each block's first file (files never straddle).
pub fn block_starts(lens: impl IntoIterator<Item = usize>, shift: u8) -> Vec<usize> {
    let target = 1usize << shift;
    let (mut starts, mut fill) = (Vec::new(), 0usize);
    for (i, n) in lens.into_iter().enumerate() {
        if i == 0 || starts_block(fill, n, target) {
            starts.push(i);
            fill = 0;
        }
        fill += n;
    }
    starts
}

/// The packs that still have a live claim in `claims` (slots awaiting their record, or
/// pins), forgetting the dead ones.
fn live_packs<T>(claims: &mut HashMap<u32, Vec<Weak<T>>>) -> BTreeSet<u32> {
    claims.retain(|_, v| {
        v.retain(|w| w.strong_count() > 0);
        !v.is_empty()
    });
    claims.keys().copied().collect()
}

/// Adds claims to one pack's list, first dropping the dead ones when the list is full, so
/// it holds at most about twice its live claims between reclaim rounds (a `Weak` keeps its
/// allocation: a million small files packed kept some 100 MiB until the next round). The
/// list doubles when at least half survive, so each claim is looked at O(1) times.
fn add_claims<T>(v: &mut Vec<Weak<T>>, new: impl ExactSizeIterator<Item = Weak<T>>) {
    if v.len() + new.len() > v.capacity() {
        v.retain(|w| w.strong_count() > 0);
        if (v.len() + new.len()) * 2 > v.capacity() {
            v.reserve(v.len() + new.len());
        } else if v.len() * 4 < v.capacity() {
            v.shrink_to((v.len() + new.len()) * 2);
        }
    }
    v.extend(new);
}

/// Whether a file of `n` bytes starts a new block when the open one holds `fill` bytes of
/// at most `target`: the one rule of [`Packs::append`] and [`block_starts`].
fn starts_block(fill: usize, n: usize, target: usize) -> bool {
    fill > 0 && (fill + n > target || fill >= target)
}

fn corrupt(pack: u32, block: u64, detail: impl Into<String>) -> Error {
    Error::CorruptPack {
        pack,
        block,
        detail: detail.into(),
    }
}

impl Packs {
    /// The packs in `dir`; `writable` lets files be added. `cache` bytes of decompressed
    /// blocks are kept.
    pub fn new(dir: Box<dyn PackDir>, writable: bool, cache: usize) -> io::Result<Packs> {
        let next_id = dir.list()?.last().map_or(1, |m| m.saturating_add(1));
        Ok(Packs {
            dir,
            writable,
            writer: Mutex::new(Writer {
                next_id,
                ..Writer::default()
            }),
            handles: RwLock::new(HashMap::new()),
            cache: Mutex::new(BlockCache::new(cache)),
            headers: Mutex::new(HashMap::new()),
            records: RwLock::new(()),
            keep_ctime: std::sync::atomic::AtomicBool::new(false),
            moves: AtomicU64::new(0),
            moved: Mutex::new(moves::MoveLog::default()),
            pins: Mutex::new(HashMap::new()),
            loading: Mutex::default(),
            counters: PackCounters::default(),
        })
    }

    /// Held shared by a container setting or removing a location record, exclusively by
    /// reclaim checking and replacing records.
    pub fn records(&self) -> &RwLock<()> {
        &self.records
    }

    /// Whether a record that reclaim replaces keeps the file's change time (version 3,
    /// [`Location::kept_ctime`]).
    pub fn keeps_ctime(&self) -> bool {
        self.keep_ctime.load(Ordering::Relaxed)
    }

    /// Records replaced by reclaim keep the file's change time from now on: the backing
    /// filesystem holds a 64-byte record without a block of its own (the mount's probe).
    pub fn set_keep_ctime(&self, keep: bool) {
        self.keep_ctime.store(keep, Ordering::Relaxed);
    }

    /// How many times reclaim has started replacing records: raised, under [`Packs::records`]
    /// held exclusively, before each batch of records it replaces. What was read of a
    /// record when this was `n` may be stale once it is no longer `n` (read this before
    /// reading the record).
    pub fn moves(&self) -> u64 {
        self.moves.load(Ordering::Acquire)
    }

    /// See [`Packs::moves`]; called by reclaim under the exclusive records lock before
    /// a batch. Returns the batch's number, for [`Packs::moved`].
    fn moving(&self) -> u64 {
        let mut log = self.moved.lock().unwrap();
        let n = self.moves.fetch_add(1, Ordering::AcqRel) + 1;
        log.begin(n);
        n
    }

    /// Batch `n` of reclaim, still under the exclusive records lock, replaced the records
    /// of the files `ids` (`None`: of a file it could not identify).
    fn moved(&self, n: u64, ids: Option<std::collections::HashSet<moves::FileId>>) {
        self.moved.lock().unwrap().finish(n, ids);
    }

    /// Whether reclaim may have replaced the record of backing file `id` (device, inode)
    /// since [`Packs::moves`] was `since`: `None` when it may have, else the count it is
    /// known unmoved up to (what was read of its record at `since` is still true then).
    /// Only when the count moved on does this take a lock.
    pub fn unmoved_since(&self, id: moves::FileId, since: u64) -> Option<u64> {
        let now = self.moves();
        if now == since {
            return Some(now);
        }
        // `moves` is raised under the log's lock, with its batch begun: every batch up
        // to `now` is in the log (or forgotten, which answers "moved").
        let log = self.moved.lock().unwrap();
        (!log.moved(id, since, now)).then_some(now)
    }

    /// The packs no new record can name except one written by reclaim itself, and no
    /// container still reads: not the pack being appended to, no slot placed in them still
    /// waits for its record, none [`Packs::pinned`]. A
    /// mount's background reclaim picks its victims among these; a record seen naming one
    /// of them can only go away.
    pub fn reclaimable(&self) -> io::Result<BTreeSet<u32>> {
        let ids = self.dir.list()?;
        let mut w = self.writer.lock().unwrap();
        let current: Vec<u32> = w.cur.iter().flatten().map(|c| c.id).collect();
        let placed = live_packs(&mut w.placed);
        drop(w);
        let pinned = self.pinned();
        Ok(ids
            .into_iter()
            .filter(|id| !current.contains(id) && !placed.contains(id) && !pinned.contains(id))
            .collect())
    }

    /// Makes `lane`'s next block start a new pack: the pack it appends to now becomes
    /// [`Packs::reclaimable`] once its slots have their records. The background pass does
    /// this before it repacks, so the files just written are not kept out of it until their
    /// pack is full.
    pub fn retire(&self, lane: Lane) {
        self.writer.lock().unwrap().cur[lane as usize] = None;
    }

    /// Makes each lane whose current pack is one of `ids` start a new pack
    /// ([`Packs::retire`]).
    pub fn retire_any(&self, ids: &BTreeSet<u32>) {
        for c in self.writer.lock().unwrap().cur.iter_mut() {
            if c.as_ref().is_some_and(|c| ids.contains(&c.id)) {
                *c = None;
            }
        }
    }

    /// A claim on pack `pack` while a container may still read it: no reclaim round removes
    /// a pinned pack (dropping the pin lets it go).
    pub fn pin(&self, pack: u32) -> Pin {
        let alive = Arc::new(());
        add_claims(
            self.pins.lock().unwrap().entry(pack).or_default(),
            std::iter::once(Arc::downgrade(&alive)),
        );
        Pin { _alive: alive }
    }

    /// The packs some container has pinned now.
    pub fn pinned(&self) -> BTreeSet<u32> {
        live_packs(&mut self.pins.lock().unwrap())
    }

    /// Whether files may be added.
    pub fn writable(&self) -> bool {
        self.writable
    }

    pub fn dir(&self) -> &dyn PackDir {
        &*self.dir
    }

    /// Forgets pack `id`'s open handle and cached blocks (before it is removed).
    pub fn forget(&self, id: u32) {
        // (Its name need not be synced any more: a removed pack's id may be taken again.)
        self.writer.lock().unwrap().unnamed.remove(&id);
        self.handles.write().unwrap().remove(&id);
        self.cache.lock().unwrap().forget_pack(id);
        self.headers.lock().unwrap().retain(|k, _| k.0 != id);
    }

    pub(crate) fn handle(&self, id: u32) -> Result<Arc<dyn Storage>> {
        if let Some(h) = self.handles.read().unwrap().get(&id) {
            return Ok(h.clone());
        }
        let h = match self.dir.open(id) {
            Ok(h) => h,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(corrupt(id, 0, format!("{} is missing", self.dir.describe(id))))
            }
            Err(e) => return Err(e.into()),
        };
        Ok(self.handles.write().unwrap().entry(id).or_insert(h).clone())
    }

    /// Adds a file's bytes (at most `1 << shift`, not empty) to the open block of its group.
    /// Blocks that fill up are written at once (not synced).
    pub fn append(&self, codec: CodecSpec, shift: u8, data: &[u8]) -> Result<Arc<Slot>> {
        self.append_in(Lane::Written, codec, shift, data)
    }

    /// [`Packs::append`] into `lane`'s blocks of at most `1 << shift` bytes (up to 1 MiB,
    /// the most a block holds).
    pub fn append_in(&self, lane: Lane, codec: CodecSpec, shift: u8, data: &[u8]) -> Result<Arc<Slot>> {
        assert!(self.writable, "append to read-only packs");
        assert!(shift <= 20, "blocks hold at most 1 MiB");
        assert!(!data.is_empty() && data.len() <= 1 << shift, "packed file size");
        let group = (codec, shift, lane);
        let slot = Arc::new(Slot {
            len: data.len() as u32,
            sum: xxh3_64(data),
            state: Mutex::new(SlotState::Open(group)),
        });
        let mut w = self.writer.lock().unwrap();
        let target = 1usize << shift;
        if w.open
            .get(&group)
            .is_some_and(|b| starts_block(b.data.len(), data.len(), target))
        {
            self.seal(&mut w, group)?;
        }
        let b = w.open.entry(group).or_default();
        let at = b.data.len() as u32;
        b.data.extend_from_slice(data);
        b.slots.push((slot.clone(), at));
        self.counters.files_packed.fetch_add(1, Ordering::Relaxed);
        if b.data.len() >= target {
            // Full (`starts_block` holds for any next file): written now.
            self.seal(&mut w, group)?;
        }
        Ok(slot)
    }

    /// Writes the open block of `group`: compressed (or raw when that is not smaller),
    /// appended to the current pack; its files are placed.
    fn seal(&self, w: &mut Writer, group: Group) -> Result<()> {
        let Some(b) = w.open.remove(&group) else {
            return Ok(());
        };
        if b.data.is_empty() {
            return Ok(());
        }
        // (The block's own buffer, shared with its slots and the cache: moved, not copied —
        // at most shrunk to its length.)
        let slots = b.slots;
        let data: cache::BlockBytes = Arc::new(b.data.into_boxed_slice());
        let r = self.write_block(w, group.0, group.2, &data, slots.len());
        match &r {
            Ok(placed) => {
                for (slot, off) in &slots {
                    let at = Placed {
                        offset: *off,
                        ..*placed
                    };
                    *slot.state.lock().unwrap() = SlotState::Placed(at, data.clone());
                }
                add_claims(
                    w.placed.entry(placed.pack).or_default(),
                    slots.iter().map(|(s, _)| Arc::downgrade(s)),
                );
            }
            Err(e) => {
                for (slot, off) in &slots {
                    *slot.state.lock().unwrap() = SlotState::Lost(e.to_string(), data.clone(), *off);
                }
            }
        }
        r.map(|_| ())
    }

    fn write_block(
        &self,
        w: &mut Writer,
        codec: CodecSpec,
        lane: Lane,
        data: &cache::BlockBytes,
        files: usize,
    ) -> Result<Placed> {
        let logical = data.len();
        let (alg, encoded) = encode_block(codec, data);
        let payload = encoded.as_deref().unwrap_or(data);
        let lane = lane as usize;
        if w.cur[lane].as_ref().is_none_or(|c| c.end >= PACK_MAX) {
            w.cur[lane] = None;
            let id = w.next_id;
            if id == u32::MAX {
                return Err(Error::Invalid("no pack id left".into()));
            }
            w.next_id += 1;
            let st = self.dir.create(id)?;
            w.unnamed.insert(id);
            st.write_at(&PackHeader { id }.encode(), 0)?;
            self.handles.write().unwrap().insert(id, st.clone());
            w.cur[lane] = Some(Current {
                id,
                st,
                end: PACK_HEADER_LEN as u64,
            });
        }
        let cur = w.cur[lane].as_mut().expect("current pack");
        let h = BlockHeader {
            codec: alg,
            level: if alg == Algorithm::None { 0 } else { codec.level },
            pack: cur.id,
            files: files as u32,
            offset: cur.end,
            stored_len: payload.len() as u32,
            logical_len: logical as u32,
            payload_sum: xxh3_64(payload),
        };
        let mut buf = Vec::with_capacity(BLOCK_HEADER_LEN + payload.len());
        buf.extend_from_slice(&h.encode());
        buf.extend_from_slice(payload);
        let at = cur.end;
        if let Err(e) = cur.st.write_at(&buf, at) {
            // What was written may be torn: never append after it again.
            w.cur[lane] = None;
            return Err(e.into());
        }
        cur.end += buf.len() as u64;
        let (id, end) = (cur.id, cur.end);
        w.written.insert(id, end);
        self.counters.blocks_written.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_in
            .fetch_add(logical as u64, Ordering::Relaxed);
        self.counters
            .bytes_stored
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        // The new block is what the next reads of these files want.
        self.cache.lock().unwrap().insert((id, at), data.clone());
        Ok(Placed {
            pack: id,
            block: at,
            offset: 0,
        })
    }

    /// Writes the slot's block if it is still open and syncs its pack unless that block is
    /// known durable: afterwards a location record may point at it.
    pub fn durable(&self, slot: &Slot) -> Result<Placed> {
        let mut w = self.writer.lock().unwrap();
        let state = slot.state.lock().unwrap().clone();
        let placed = match state {
            SlotState::Placed(p, _) => p,
            SlotState::Lost(why, ..) => return Err(Error::Io(io::Error::other(why))),
            SlotState::Open(group) => {
                self.seal(&mut w, group)?;
                match slot.state.lock().unwrap().clone() {
                    SlotState::Placed(p, _) => p,
                    SlotState::Lost(why, ..) => return Err(Error::Io(io::Error::other(why))),
                    SlotState::Open(_) => unreachable!("sealed"),
                }
            }
        };
        let written = w.written.get(&placed.pack).copied().unwrap_or(0);
        let synced = w.synced.get(&placed.pack).copied().unwrap_or(0);
        if written > synced {
            self.handle(placed.pack)?.sync_data()?;
            w.synced.insert(placed.pack, written);
        }
        if w.unnamed.contains(&placed.pack) {
            self.dir.sync_names()?;
            w.unnamed.clear();
        }
        Ok(placed)
    }

    /// Writes every open block (before a sync of the whole backing filesystem); returns
    /// what that sync will make durable.
    pub fn seal_all(&self) -> Result<SyncMark> {
        let mut w = self.writer.lock().unwrap();
        let groups: Vec<Group> = w.open.keys().copied().collect();
        let mut first_err = None;
        for g in groups {
            if let Err(e) = self.seal(&mut w, g) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let mark = w
            .written
            .iter()
            .filter(|(id, end)| w.synced.get(id).is_none_or(|s| s < end))
            .map(|(id, end)| (*id, *end))
            .collect();
        Ok(SyncMark(mark, w.unnamed.iter().copied().collect()))
    }

    /// A sync of the whole backing filesystem finished after [`Packs::seal_all`] returned
    /// `mark`: what it wrote is durable, and so are the directory entries of the packs
    /// created before it.
    pub fn synced(&self, mark: SyncMark) {
        let mut w = self.writer.lock().unwrap();
        for (id, end) in mark.0 {
            let s = w.synced.entry(id).or_insert(0);
            *s = (*s).max(end);
        }
        for id in &mark.1 {
            w.unnamed.remove(id);
        }
        self.dir.names_synced(&mark.1);
    }

    /// Syncs every pack with writes not yet durable, and the names of new packs (unmount,
    /// `fsync` of many files).
    pub fn sync(&self) -> Result<()> {
        let mark = self.seal_all()?;
        for (id, _) in &mark.0 {
            self.handle(*id)?.sync_data()?;
        }
        if !mark.1.is_empty() {
            self.dir.sync_names()?;
        }
        self.synced(mark);
        Ok(())
    }

    /// What `len` bytes of files are expected to take once stored in a block: at the ratio
    /// of the blocks this [`Packs`] has written so far (header included), or `len` before
    /// the first. For a file whose block is not written yet (`du` right after `cp`).
    pub fn estimate_stored(&self, len: u64) -> u64 {
        let c = &self.counters;
        let (inp, stored) = (
            c.bytes_in.load(Ordering::Relaxed),
            c.bytes_stored.load(Ordering::Relaxed),
        );
        if inp == 0 {
            return len;
        }
        (len as u128 * stored as u128 / inp as u128) as u64
    }

    /// What to call pack `id` in messages (its path).
    pub fn describe(&self, id: u32) -> String {
        self.dir.describe(id)
    }

    /// Bytes of decompressed blocks the cache keeps at most (the mount option `pack_cache`).
    pub fn cache_capacity(&self) -> usize {
        self.cache.lock().unwrap().capacity()
    }

    /// The decompressed bytes the block cache holds now.
    pub fn cache_bytes(&self) -> usize {
        self.cache.lock().unwrap().bytes()
    }
}

#[cfg(test)]
mod audit_tests;
#[cfg(test)]
mod repack_tests;
#[cfg(test)]
pub(crate) mod tests;
