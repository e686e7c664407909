//! Reclaiming garbage: a pack whose files were rewritten or deleted keeps their old bytes
//! (blocks are never overwritten). Reclaim moves a pack's live files into new blocks at the
//! end of the packs and removes the old pack.
//!
//! # Crash safety (the order of writes)
//! 1. Every live file's bytes are appended to new blocks, which are made durable.
//! 2. Each file's record is replaced (one `setxattr`, atomic) by one naming the new place,
//!    with the same generation and checksum: old and new record name the same bytes.
//! 3. The records are made durable (`sync_records`: `syncfs`, or an `fsync` per file).
//! 4. Only then, once every batch of files is moved, are the old packs removed.
//!
//! A crash before 4 leaves the old pack complete and every record naming either copy; the
//! new blocks are garbage or live, and the next reclaim sorts them out. A file whose bytes
//! cannot be read keeps its record, and its pack stays.
//!
//! # While mounted
//! Records are checked and replaced under [`Packs::records`] held exclusively, so a record a
//! container sets meanwhile is never overwritten with an older one. A file whose record
//! changed since the caller saw it no longer needs its old pack, unless the new record
//! names a victim too (then that pack stays). Before any pack is removed, `settle` runs under
//! the same lock: it says whether the caller's list of files is still complete (a rename
//! may have hidden a file from the walk) and which more packs must stay.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use squeezefs_codec::{Algorithm, CodecSpec};

use super::format::{Location, LOCATION_XATTR};
use super::record::read_record;
use super::{Lane, Packs, Placed, Slot};
use crate::storage::Storage;
use crate::{Error, Result};

/// A packed file reclaim moves: what to call it (and open it by), its current record.
#[derive(Debug, Clone)]
pub struct LiveFile {
    pub name: String,
    pub loc: Location,
    /// The walked inode (device, number), when the walk knows it: `open` must refuse a
    /// name that leads to another file now (one link of a hard-linked file replaced).
    pub id: Option<(u64, u64)>,
    /// The background pass's target for it (`tree::walk_records` with targets), `none`
    /// included; `None` when the walk was not asked for targets or the file has none.
    pub target: Option<CodecSpec>,
}

/// Where [`reclaim`] puts a file's bytes: the lane, and the codec and block size
/// (`1 << shift`) of the group it joins there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    pub lane: Lane,
    pub codec: CodecSpec,
    pub shift: u8,
}

/// How [`reclaim`] moves files; the defaults are a garbage reclaim's.
pub trait Mover {
    /// Where `f`'s bytes go, their block's header `was` (`None`: unreadable). By default
    /// the mount's own lane, its group's block size, at the codec and level its block
    /// has now (the file's own codec when that block was stored raw), so a file the
    /// background pass recompressed stays recompressed.
    fn destination(&self, f: &LiveFile, was: Option<&super::BlockHeader>) -> Destination {
        let codec = match was {
            Some(h) if h.codec != Algorithm::None => CodecSpec::new(h.codec, h.level).unwrap_or(f.loc.codec),
            _ => f.loc.codec,
        };
        // A block bigger than the file's group makes is the background pass's: its files
        // stay in big blocks of the pass's lane.
        if was.is_some_and(|h| u64::from(h.logical_len) > 1u64 << f.loc.extent_shift) {
            return Destination {
                lane: Lane::Repacked,
                codec,
                shift: REPACK_SHIFT,
            };
        }
        Destination {
            lane: Lane::Written,
            codec,
            shift: f.loc.extent_shift,
        }
    }

    /// Bytes a batch holds at least (with at least [`BATCH`] files, at most
    /// [`BATCH_MAX`]): each batch ends with a sync that writes every open block, so the
    /// background pass's 1 MiB blocks need batches of several MiB.
    fn batch_bytes(&self) -> u64 {
        0
    }

    /// Puts the files to move in the order they are appended in. By default their old
    /// order (directory order, as they were packed).
    fn order(&self, files: &mut [&LiveFile]) {
        files.sort_by_key(|f| (f.loc.pack, f.loc.block, f.loc.offset));
    }

    /// Asked before each batch with the live bytes it moves (the background pass waits for
    /// its turn here): `false` stops moving, and every pack with a file not moved stays.
    fn pace(&mut self, _bytes: u64) -> bool {
        true
    }

    /// Whether files with equal contents are stored once: a moved file whose bytes equal
    /// those of a file moved before it, or of a file staying where it is in a block at its
    /// destination's codec and level or stored raw, is given that place instead of a copy. (Files naming
    /// the same bytes before a move name the same bytes after it, whatever this says.)
    fn dedup(&self) -> bool {
        false
    }

    /// Whether a file that stays, in the block `h` describes, may give its place to equal
    /// contents ([`Mover::dedup`]): not when it waits to be moved itself.
    fn may_share(&self, _f: &LiveFile, _h: &super::BlockHeader) -> bool {
        true
    }

    /// `f`'s record names its new place now, durably.
    fn moved(&mut self, _f: &LiveFile) {}
}

/// Where a moved file's bytes are: a slot appended by this move, or a place that already
/// holds them durably (shared with another file).
#[derive(Clone)]
enum NewPlace {
    Slot(Arc<Slot>),
    At(Placed),
}

/// Places holding known contents, by length and checksum (which only nominate: the bytes
/// are compared), for [`Mover::dedup`].
#[derive(Default)]
struct Contents(HashMap<(u32, u64), Vec<Known>>);

/// A place holding known bytes, in a block at this codec and level.
type Known = (NewPlace, Algorithm, i32);

impl Contents {
    fn add(&mut self, len: u32, sum: u64, place: NewPlace, codec: CodecSpec) {
        self.0
            .entry((len, sum))
            .or_default()
            .push((place, codec.alg, codec.level));
    }

    /// A place holding exactly `bytes`, in a block at `codec` or stored raw (a raw block is
    /// never pending either, so a file sharing one converges).
    fn find(&self, packs: &Packs, f: &LiveFile, bytes: &[u8], codec: CodecSpec) -> Option<NewPlace> {
        let found = self.0.get(&(f.loc.len, f.loc.content_sum))?;
        found.iter().find_map(|(place, alg, level)| {
            if (*alg, *level) != (codec.alg, codec.level) && *alg != Algorithm::None {
                return None;
            }
            let there = match place {
                NewPlace::Slot(slot) => packs.read_slot(slot).ok()?,
                NewPlace::At(p) => packs
                    .read(&Location {
                        pack: p.pack,
                        block: p.block,
                        offset: p.offset,
                        ..f.loc
                    })
                    .ok()?,
            };
            (there == bytes).then(|| place.clone())
        })
    }
}

/// A garbage reclaim: [`Mover`]'s defaults.
pub struct Garbage;

impl Mover for Garbage {}

/// What a reclaim did.
#[derive(Debug, Default)]
pub struct Reclaimed {
    pub files_moved: u64,
    pub packs_removed: Vec<u32>,
    /// Bytes of the removed packs minus what their live files take in new blocks.
    pub bytes_freed: u64,
    /// Files left where they were (their pack stays), and why.
    pub left: Vec<(String, Error)>,
    /// `settle` stopped the removal of every pack, and why.
    pub aborted: Option<String>,
    /// [`Mover::pace`] stopped the move before every file was moved.
    pub stopped: bool,
    /// Files given the place of other bytes equal to theirs ([`Mover::dedup`]).
    pub files_shared: u64,
}

/// Whether `f`'s record is still the one the caller saw (it is moved); `false` when it
/// changed to one outside `victims` (the file does not need its old pack any more); an
/// error when it cannot be read or names a victim still (the pack stays).
fn still_there<S: Storage>(st: &S, f: &LiveFile, victims: &BTreeSet<u32>) -> Result<bool> {
    match read_record(st)? {
        Some(l) if l == f.loc => Ok(true),
        Some(l) if l.len > 0 && victims.contains(&l.pack) => {
            Err(Error::Invalid("its record changed meanwhile".into()))
        }
        _ => Ok(false),
    }
}

/// Opens `f`'s backing file and checks that it is still the file the caller saw, with the
/// record the caller saw: `Ok(None)` when its record changed to one outside `victims` (it
/// needs its old pack no more), an error when it cannot be moved (its pack stays).
/// Also returns the file's (device, inode), when known.
fn open_checked<S: Storage>(
    open: &impl Fn(&LiveFile) -> Result<S>,
    f: &LiveFile,
    victims: &BTreeSet<u32>,
) -> Result<Option<(S, Option<super::moves::FileId>)>> {
    let st = open(f)?;
    // The name must still lead to the file the caller saw: if it is another file now, the
    // walked one may live on under another link (its pack stays).
    let id = match (f.id, st.identity()) {
        (Some(want), Ok(Some(got))) if want != got => {
            return Err(Error::Invalid("its name leads to another file now".into()))
        }
        (_, Err(e)) => return Err(e.into()),
        (want, Ok(got)) => got.or(want),
    };
    Ok(still_there(&st, f, victims)?.then_some((st, id)))
}

/// Files whose records one `sync_records` makes durable (their backing files are open
/// together meanwhile); a garbage reclaim's batch.
pub const BATCH: usize = 256;

/// Files in one batch at most, whatever [`Mover::batch_bytes`] asks (open files).
pub const BATCH_MAX: usize = 2048;

/// Block size of the background pass's repacked blocks: 1 MiB (`1 << 20`), the most a
/// block holds, squashfs's and mksquashfs `-b 1M`'s.
pub const REPACK_SHIFT: u8 = 20;

/// Cuts `files` into batches: at least [`BATCH`] files and `min_bytes` bytes each, at most
/// [`BATCH_MAX`] files; returns each batch's range.
fn batches(files: &[&LiveFile], min_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, f) in files.iter().enumerate() {
        bytes += u64::from(f.loc.len);
        let n = i + 1 - start;
        if (n >= BATCH && bytes >= min_bytes) || n >= BATCH_MAX {
            out.push(start..i + 1);
            start = i + 1;
            bytes = 0;
        }
    }
    if start < files.len() {
        out.push(start..files.len());
    }
    out
}

/// What [`reclaim`]'s `settle` says, just before packs would be removed.
#[derive(Debug, Default)]
pub enum Settle {
    /// The list of files was complete: remove the victims, except these.
    #[default]
    Remove,
    RemoveExcept(BTreeSet<u32>),
    /// The list may have missed a file: remove nothing (the moved files stay moved).
    Abort(String),
}

/// Moves the live files of packs `victims` into new blocks (where and in which order
/// `mover` says) and removes those packs. `files` must hold every file whose current
/// record points into a victim (others are ignored); `open` opens a file's backing file
/// for writing; `sync_records` makes the records set on a batch of them durable; `settle`
/// (under [`Packs::records`]) has the last word on which packs go.
pub fn reclaim<S: Storage>(
    packs: &Packs,
    victims: &BTreeSet<u32>,
    files: &[LiveFile],
    mover: &mut dyn Mover,
    open: impl Fn(&LiveFile) -> Result<S>,
    mut sync_records: impl FnMut(&[S]) -> Result<()>,
    settle: impl FnOnce() -> Settle,
) -> Result<Reclaimed> {
    let mut out = Reclaimed::default();
    let mut keep: BTreeSet<u32> = BTreeSet::new();
    let mut moving: Vec<&LiveFile> = files
        .iter()
        .filter(|f| f.loc.len > 0 && victims.contains(&f.loc.pack))
        .collect();
    mover.order(&mut moving);
    let stored_before = packs.counters.bytes_stored.load(Ordering::Relaxed);
    // Where the bytes a file names went (and at which codec): files naming the same bytes
    // keep sharing them when they go to the same codec.
    let mut went: HashMap<(u32, u64, u32, u32, u64), Known> = HashMap::new();
    let mut contents = Contents::default();
    if mover.dedup() {
        // The files that stay, in blocks at the codec and level their header says, when
        // one that moves may have their contents and the mover lets them be shared.
        let wanted: HashSet<(u32, u64)> = moving.iter().map(|f| (f.loc.len, f.loc.content_sum)).collect();
        for f in files.iter().filter(|f| {
            f.loc.len > 0
                && !victims.contains(&f.loc.pack)
                && wanted.contains(&(f.loc.len, f.loc.content_sum))
        }) {
            if let Ok(h) = packs.block_header(f.loc.pack, f.loc.block) {
                if !mover.may_share(f, &h) {
                    continue;
                }
                let at = NewPlace::At(Placed {
                    pack: f.loc.pack,
                    block: f.loc.block,
                    offset: f.loc.offset,
                });
                let codec = CodecSpec {
                    alg: h.codec,
                    level: h.level,
                };
                contents.add(f.loc.len, f.loc.content_sum, at, codec);
            }
        }
    }
    for range in batches(&moving, mover.batch_bytes()) {
        let batch = &moving[range.clone()];
        if !mover.pace(batch.iter().map(|f| u64::from(f.loc.len)).sum()) {
            // Stopped: the packs of the files not moved stay.
            out.stopped = true;
            keep.extend(moving[range.start..].iter().map(|f| f.loc.pack));
            break;
        }
        // Each file is opened to be checked, then closed (a batch may hold thousands of
        // files), and opened again, checked again, when its record is replaced.
        let mut slots = Vec::new();
        for &f in batch {
            let mut leave = |e: Error| {
                keep.insert(f.loc.pack);
                out.left.push((f.name.clone(), e));
            };
            match open_checked(&open, f, victims) {
                Ok(Some(_st)) => {}
                Ok(None) => continue,
                Err(e) => {
                    leave(e);
                    continue;
                }
            }
            let range = (
                f.loc.pack,
                f.loc.block,
                f.loc.offset,
                f.loc.len,
                f.loc.content_sum,
            );
            let was = packs.block_header(f.loc.pack, f.loc.block).ok();
            let to = mover.destination(f, was.as_ref());
            let shares = |(_, alg, level): &Known| {
                (*alg, *level) == (to.codec.alg, to.codec.level) || *alg == Algorithm::None
            };
            if let Some(known) = went.get(&range).filter(|k| shares(k)) {
                slots.push((f, known.0.clone()));
                continue;
            }
            match packs.read(&f.loc) {
                Ok(bytes) => {
                    let same = mover
                        .dedup()
                        .then(|| contents.find(packs, f, &bytes, to.codec))
                        .flatten();
                    let place = match same {
                        Some(place) => {
                            out.files_shared += 1;
                            place
                        }
                        None => {
                            let slot = packs.append_in(to.lane, to.codec, to.shift, &bytes)?;
                            let place = NewPlace::Slot(slot);
                            if mover.dedup() {
                                contents.add(f.loc.len, f.loc.content_sum, place.clone(), to.codec);
                            }
                            place
                        }
                    };
                    went.insert(range, (place.clone(), to.codec.alg, to.codec.level));
                    slots.push((f, place));
                }
                Err(e) => leave(e),
            }
        }
        packs.sync()?;
        let mut placed = Vec::with_capacity(slots.len());
        for (f, place) in slots {
            let p = match &place {
                NewPlace::Slot(slot) => packs.durable(slot)?,
                NewPlace::At(p) => *p,
            };
            // (A slot lives until its record is set: its pack is not reclaimable meanwhile.)
            placed.push((f, p, place));
        }
        // Every slot of this batch is durable now: later batches share their places as
        // places (a record names each, or none and it is garbage a record may still name).
        for (place, _, _) in went.values_mut().chain(contents.0.values_mut().flatten()) {
            if let NewPlace::Slot(slot) = place {
                if let Ok(p) = packs.durable(slot) {
                    *place = NewPlace::At(p);
                }
            }
        }
        for chunk in placed.chunks(BATCH) {
            let mut opened = Vec::with_capacity(chunk.len());
            for (f, p, _slot) in chunk {
                match open_checked(&open, f, victims) {
                    Ok(Some((st, id))) => opened.push((*f, st, id, *p)),
                    Ok(None) => {}
                    Err(e) => {
                        keep.insert(f.loc.pack);
                        out.left.push((f.name.clone(), e));
                    }
                }
            }
            let mut done = Vec::with_capacity(opened.len());
            let mut moved = Vec::with_capacity(opened.len());
            {
                let _records = packs.records().write().unwrap();
                // Which files this batch moves, for those who read a record before it
                // (`Packs::unmoved_since`); unknown if it stops half-way.
                let batch = packs.moving();
                let mut ids = Some(HashSet::with_capacity(opened.len()));
                for (f, st, id, p) in opened {
                    match still_there(&st, f, victims) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => {
                            keep.insert(f.loc.pack);
                            out.left.push((f.name.clone(), e));
                            continue;
                        }
                    }
                    // The change time `stat` shows stays the file's: a record that
                    // keeps one keeps it, else the backing file's now (the setxattr
                    // moves it), where the backing filesystem keeps 64 bytes for free.
                    // (A ctime that cannot be read is not kept: the move goes on.)
                    let kept_ctime = match f.loc.kept_ctime {
                        Some(t) => Some(t),
                        None if packs.keeps_ctime() => st.change_time().ok().flatten(),
                        None => None,
                    };
                    let new = Location {
                        pack: p.pack,
                        block: p.block,
                        offset: p.offset,
                        kept_ctime,
                        ..f.loc
                    };
                    st.set_xattr(LOCATION_XATTR, &new.encode())?;
                    // The old bytes stay until their pack goes (not if a round is cut).
                    packs.note_garbage();
                    match (id, ids.as_mut()) {
                        (Some(id), Some(ids)) => {
                            ids.insert(id);
                        }
                        _ => ids = None,
                    }
                    done.push(st);
                    moved.push(f);
                }
                packs.moved(batch, ids);
            }
            sync_records(&done)?;
            out.files_moved += done.len() as u64;
            for f in moved {
                mover.moved(f);
            }
        }
    }
    // What the walk saw must be durable before a pack it judged unused goes (a record
    // removed or replaced, not yet synced, would come back in a crash).
    sync_records(&[])?;
    // Held while the packs go: no record naming one can appear, and no container can pin
    // one, before they are gone.
    let _records = packs.records().write().unwrap();
    keep.extend(packs.pinned());
    match settle() {
        Settle::Remove => {}
        Settle::RemoveExcept(more) => keep.extend(more),
        Settle::Abort(why) => {
            out.aborted = Some(why);
            return Ok(out);
        }
    }
    let mut removed_len = 0;
    for &id in victims.difference(&keep) {
        removed_len += packs.handle(id).and_then(|h| Ok(h.len()?)).unwrap_or(0);
        packs.forget(id);
        packs.dir().remove(id)?;
        // (Again: a reader may have opened it between the two.)
        packs.forget(id);
        out.packs_removed.push(id);
    }
    let written = packs.counters.bytes_stored.load(Ordering::Relaxed) - stored_before;
    out.bytes_freed = removed_len.saturating_sub(written);
    packs
        .counters
        .bytes_reclaimed
        .fetch_add(out.bytes_freed, Ordering::Relaxed);
    Ok(out)
}

/// The packs worth reclaiming among `reports`: garbage above `max` of their blocks.
pub fn victims(reports: &BTreeMap<u32, super::audit::PackReport>, max: f64) -> BTreeSet<u32> {
    reports
        .values()
        .filter(|r| !r.damaged() && r.live_files > 0 && r.garbage_fraction() > max)
        .map(|r| r.id)
        .collect()
}
