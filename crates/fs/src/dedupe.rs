//! Identical large files stored once where the backing shares blocks (issue 45): the
//! background pass's walk hands each large file's stored extents here, and an extent equal
//! to one seen before is made to share that one's blocks (`FIDEDUPERANGE` on XFS with
//! reflinks and btrfs: `Storage::dedupe_from`).
//!
//! Why here and not at write time: files written with the same bytes (a second download, a
//! build output produced twice, a copy made by reading and writing) compress to the same
//! payloads; at write time the earlier copy is not known, and comparing would put reads on
//! the writer's path. The walk already visits changed files when the mount is idle.
//!
//! **Checksums nominate, bytes decide.** An extent's header (FORMAT.md) carries its payload
//! checksum, stored and logical lengths and codec: equal ones nominate two halves. The
//! backing then compares the bytes itself, with both files locked, and shares only equal
//! blocks, so nothing any reader sees can change — not when a nomination is stale (the half
//! was rewritten since), not when a half is torn, not when a file is written meanwhile (the
//! write lands before the comparison, which then fails, or after it, as the backing's
//! copy-on-write). No lock of the daemon is held during it, nothing is written, no time of
//! either file moves, and the format is unchanged: a shared half is a half like any.
//!
//! **Which blocks.** A half starts on a block boundary with its 48-byte header; the payload
//! follows. Two files written alike (same extent index and generation: the usual case)
//! have equal headers, and the whole half is shared; otherwise the header's block is left
//! and the rest shared. The rest of the half's slot, which is part of no copy, goes with it
//! where it reads the same (zeros in a file written once): on XFS it may hold blocks the
//! backing allocated ahead of a write at the file's end (speculative preallocation),
//! stranded inside the file once it grew past them; shared, they no longer count twice.
//! Else the half's last block goes with it where the bytes after the payload are equal,
//! else its whole blocks alone; and then, separately, the rest of its slot where that
//! reads the same.
//!
//! **Bounds.** Files smaller than [`MIN_FILE`] on the backing are not looked at (small files
//! live in packs, deduplicated by `squeezefs_container::pack`); the halves remembered are
//! at most [`MAX_HALVES`], the files they point into at most [`MAX_FILES`] (the oldest
//! file's descriptor is closed first; its halves then nominate nothing). The memory is the
//! mount's: a new mount's first walk reads every large file's extent headers again.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use log::{info, warn};
use serde_json::{json, Value};
use squeezefs_container::format::ExtentHeader;
use squeezefs_container::{Dedupe as Outcome, FileStorage, Storage, StoredHalf};

/// Backing filesystems that share blocks (`FIDEDUPERANGE`). XFS without reflinks answers
/// that it cannot at the first try, and the mount's sharing turns itself off.
#[allow(clippy::unnecessary_cast)] // (`c_long`: 32 bits on some targets)
pub const SHARING_FILESYSTEMS: [i64; 2] = [libc::XFS_SUPER_MAGIC as i64, libc::BTRFS_SUPER_MAGIC as i64];
/// Backing files smaller than this are not looked at.
pub const MIN_FILE: u64 = 256 << 10;
/// Extent halves remembered at most (about 80 bytes each).
pub const MAX_HALVES: usize = 1 << 18;
/// Files whose halves are remembered (one open descriptor each) at most.
pub const MAX_FILES: usize = 256;
/// The backing's block: ranges start on one.
const BLOCK: u64 = 4096;

/// What nominates two halves: payload checksum, stored and logical lengths, codec id; and
/// the backing file's owner and device (files of different owners never share: the space
/// `df` shows would tell one whether the other holds the same bytes; and sharing across
/// filesystems is impossible).
type Key = (u64, u32, u32, u8, u32, u64);
/// Errors logged at most (they are counted all the same).
const LOGGED_ERRORS: u64 = 8;

/// A file: its backing (device, inode).
pub type FileId = (u64, u64);

struct Seen {
    file: FileId,
    half: StoredHalf,
}

#[derive(Default)]
struct Memory {
    halves: HashMap<Key, Seen>,
    /// Each remembered file's descriptor and the keys its halves hold.
    files: HashMap<FileId, (Arc<FileStorage>, Vec<Key>)>,
    /// `files` in the order they came, oldest first.
    order: VecDeque<FileId>,
}

/// The mount's block sharing: whether it is on, what it remembers, what it did.
pub struct Dedupe {
    on: AtomicBool,
    /// Lock order: taken alone (by the background pass's thread).
    memory: Mutex<Memory>,
    extents: AtomicU64,
    bytes: AtomicU64,
    differed: AtomicU64,
    errors: AtomicU64,
    /// Halves in `memory` (read without its lock). (`bytes` counts every sharing the
    /// backing confirmed: a file walked again after a change counts again.)
    remembered: AtomicU64,
}

fn key(h: &ExtentHeader, owner: u32, dev: u64) -> Key {
    (
        h.payload_sum,
        h.stored_len,
        h.logical_len,
        h.codec.id(),
        owner,
        dev,
    )
}

impl Memory {
    /// Forgets file `id`: its descriptor (a removed file's space is the backing's again)
    /// and the halves it nominated.
    fn forget(&mut self, id: FileId) {
        if let Some((_, keys)) = self.files.remove(&id) {
            for k in keys {
                if self.halves.get(&k).is_some_and(|s| s.file == id) {
                    self.halves.remove(&k);
                }
            }
        }
        self.order.retain(|f| *f != id);
    }
}

impl Dedupe {
    /// `on`: the mount allows it (`dedupe`, read-write) and its backing is a filesystem that
    /// shares blocks. It turns itself off at the first answer that the backing cannot.
    pub fn new(on: bool) -> Dedupe {
        Dedupe {
            on: AtomicBool::new(on),
            memory: Mutex::default(),
            extents: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            differed: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            remembered: AtomicU64::new(0),
        }
    }

    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Halves of file `id`, owned by `owner` (read through `storage`): each shares the
    /// blocks of an equal half remembered from another file (or another place of this one)
    /// where the backing finds them equal; the others are remembered. `first`: the file's
    /// first slice in this walk — what it nominated before is forgotten first (its halves
    /// may have moved, its owner changed). `pace` is asked before each comparison with the
    /// bytes the backing may compare (the pass's turn: an idle mount, its rate); `false`
    /// stops here, and so does the end of sharing (everything is forgotten then).
    pub fn file(
        &self,
        id: FileId,
        owner: u32,
        storage: Arc<FileStorage>,
        halves: &[StoredHalf],
        first: bool,
        mut pace: impl FnMut(u64) -> bool,
    ) {
        let mut m = self.memory.lock().unwrap();
        if first {
            m.forget(id);
        }
        let mut keys = Vec::new();
        for h in halves {
            if !self.on() {
                break;
            }
            let k = key(&h.header, owner, id.0);
            let src = m
                .halves
                .get(&k)
                .filter(|s| !(s.file == id && s.half.at == h.at))
                .and_then(|s| Some((m.files.get(&s.file)?.0.clone(), s.half)));
            if let Some((from, half)) = src {
                if !pace(4 * h.slot) {
                    break;
                }
                if self.share(&from, &half, &storage, h) {
                    continue;
                }
            }
            // Not shared: this half nominates from now on (a stale one is replaced). Full:
            // the oldest file makes room.
            if m.halves.len() >= MAX_HALVES && !m.halves.contains_key(&k) {
                match m.order.front().copied() {
                    Some(old) if old != id => m.forget(old),
                    _ => continue,
                }
                if m.halves.len() >= MAX_HALVES {
                    continue;
                }
            }
            m.halves.insert(k, Seen { file: id, half: *h });
            keys.push(k);
        }
        if !self.on() {
            // The backing cannot share: nothing is kept, descriptors included.
            *m = Memory::default();
        } else if !keys.is_empty() {
            if !m.files.contains_key(&id) {
                if m.order.len() >= MAX_FILES {
                    if let Some(old) = m.order.front().copied() {
                        m.forget(old);
                    }
                }
                m.order.push_back(id);
                m.files.insert(id, (storage, Vec::new()));
            }
            if let Some((_, held)) = m.files.get_mut(&id) {
                held.extend(keys);
            }
        }
        self.remembered.store(m.halves.len() as u64, Ordering::Relaxed);
    }

    /// After a walk: files removed since (no name left) are forgotten, so their space is
    /// the backing's again (a removal is a change: a walk follows it once the mount is
    /// idle).
    pub fn walk_done(&self) {
        let mut m = self.memory.lock().unwrap();
        let gone: Vec<FileId> = m
            .files
            .iter()
            .filter(|(_, (st, _))| !st.file().metadata().is_ok_and(|md| md.nlink() > 0))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            m.forget(id);
        }
        self.remembered.store(m.halves.len() as u64, Ordering::Relaxed);
    }

    /// Has half `h` of `to` share the blocks of the equal half `src` of `from`: all of it
    /// when the headers are equal, from its second block otherwise; its last block only
    /// where the bytes after the payload are equal too. Whether any block is shared now.
    fn share(&self, from: &FileStorage, src: &StoredHalf, to: &FileStorage, h: &StoredHalf) -> bool {
        let same_header = src.header == h.header;
        let skip = if same_header { 0 } else { BLOCK };
        if h.len <= skip {
            return false;
        }
        let up = (h.len - skip).next_multiple_of(BLOCK);
        let down = (h.len - skip) / BLOCK * BLOCK;
        // First the extent's two slots, then the copy's own: what follows the copy in them
        // is part of no copy, and where it reads the same on both sides (zeros: never
        // written, or blocks the backing allocated ahead of a write at the file's end and
        // left there, XFS's speculative preallocation), the destination's become the
        // source's (a hole, or shared). Then the copy's blocks with the bytes after it in
        // its last one; then its whole blocks alone (that tail differs, or a range reaches
        // past a file's end).
        let mut tries: Vec<(u64, u64, u64)> = Vec::with_capacity(4);
        if same_header && src.at - src.pair == h.at - h.pair && src.slot == h.slot {
            tries.push((src.pair, h.pair, 2 * h.slot));
            tries.push((src.at, h.at, h.slot));
        }
        tries.push((src.at + skip, h.at + skip, up));
        if down != up && down > 0 {
            tries.push((src.at + skip, h.at + skip, down));
        }
        for (src_at, at, len) in tries {
            match to.dedupe_from(from, src_at, len, at) {
                Ok(Outcome::Shared(n)) if n > 0 => {
                    // (The copy's blocks: what the slots held besides was no copy's.)
                    self.extents.fetch_add(1, Ordering::Relaxed);
                    self.bytes
                        .fetch_add(n.min(h.len.next_multiple_of(BLOCK)), Ordering::Relaxed);
                    // The rest of the slot after what is shared now, where it reads the
                    // same on both sides (the headers differ, or the whole slot did not):
                    // part of no copy, its stranded blocks go too. Not counted.
                    let (end, slot_end) = (at + n, h.at + h.slot);
                    if end < slot_end && end % BLOCK == 0 {
                        let _ = to.dedupe_from(from, src_at + n, slot_end - end, end);
                    }
                    return true;
                }
                Ok(Outcome::Shared(_) | Outcome::Differ | Outcome::Refused) => {}
                Ok(Outcome::Unsupported) => {
                    info!("dedupe: the backing filesystem does not share blocks; equal files stay apart");
                    // (`file` then forgets everything, descriptors included.)
                    self.on.store(false, Ordering::Relaxed);
                    return false;
                }
                Err(e) => {
                    if self.errors.fetch_add(1, Ordering::Relaxed) < LOGGED_ERRORS {
                        warn!("dedupe: sharing an extent's blocks failed: {e}");
                    }
                    return false;
                }
            }
        }
        self.differed.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// The statistics file's `dedupe` object.
    pub fn to_json(&self) -> Value {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        json!({
            "on": self.on(),
            "extents": get(&self.extents),
            "bytes": get(&self.bytes),
            "differed": get(&self.differed),
            "errors": get(&self.errors),
            "remembered": get(&self.remembered),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_codec::Algorithm;

    fn half(i: u64) -> StoredHalf {
        StoredHalf {
            at: 8192 + i * 2 * 135_168,
            len: 48 + 1000,
            slot: 135_168,
            pair: 8192 + i * 2 * 135_168,
            header: ExtentHeader {
                codec: Algorithm::Zstd,
                flags: 0,
                level: 1,
                index: i,
                generation: 1,
                stored_len: 1000,
                logical_len: 4096,
                payload_sum: 1000 + i,
            },
        }
    }

    /// A file walked again nominates its halves once, not once more per walk; a file
    /// removed is forgotten after the walk (its descriptor closed: its space freed).
    #[test]
    fn a_file_walked_again_is_remembered_once_and_a_removed_one_forgotten() {
        let dir = std::env::temp_dir().join(format!("squeezefs-dedupe-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let d = Dedupe::new(true);
        let halves: Vec<StoredHalf> = (0..10).map(half).collect();
        for _ in 0..3 {
            let st = Arc::new(FileStorage::new(std::fs::File::create(&path).unwrap()));
            d.file((1, 7), 0, st.clone(), &halves[..5], true, |_| true);
            d.file((1, 7), 0, st, &halves[5..], false, |_| true);
            let m = d.memory.lock().unwrap();
            assert_eq!(m.halves.len(), 10);
            assert_eq!(m.files[&(1, 7)].1.len(), 10, "keys held once");
            assert_eq!(m.order.len(), 1);
        }
        d.walk_done();
        assert_eq!(d.memory.lock().unwrap().files.len(), 1, "still there");
        std::fs::remove_file(&path).unwrap();
        d.walk_done();
        let m = d.memory.lock().unwrap();
        assert!(m.files.is_empty() && m.halves.is_empty() && m.order.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
