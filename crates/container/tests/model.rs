//! Model-based tests: random operation sequences on a container over the in-memory disk,
//! checked byte for byte against a plain `Vec<u8>`; and crash simulation, where the disk
//! drops unsynced writes and tears the write in flight, then the file is reopened. Half of
//! the cases run with packs (format 4): files of at most one extent then live in a pack,
//! which crashes with the backing file.

use std::sync::Arc;

use proptest::prelude::*;
use squeezefs_codec::CodecSpec;
use squeezefs_container::adapt::Adaptive;
use squeezefs_container::format::KeptTimes;
use squeezefs_container::pack::format::ctime_parts;
use squeezefs_container::pack::reclaim::{reclaim, Garbage, LiveFile, Settle};
use squeezefs_container::pack::record::{record_state, RecordState};
use squeezefs_container::pack::{MemPackDir, Packs, DEFAULT_CACHE};
use squeezefs_container::sim::{Crash, MemDisk};
use squeezefs_container::{
    AheadPlan, Batch, Container, DirtyBudget, Error, Fetched, Options, ReadBytes, Relayout, RelayoutStep,
    StatTimes, Storage, WriteBack, DEFAULT_DIRTY_BYTES, WRITE_BATCH,
};

/// Options for a file on `disk`; with `packs`, the packs of its (simulated) backing
/// directory, crashing with it.
/// zstd:2 in [`config_strategy`] stands for `compress=zstd:adapt:1-4`, on a clock that
/// moves at every look so the level changes within a file.
fn options(codec: CodecSpec, shift: u8, packs: Option<&MemPackDir>, dirty: usize) -> Options {
    let adaptive = codec == "zstd:2".parse().unwrap();
    Options {
        codec,
        extent_shift: shift,
        packs: packs.map(|d| {
            let p = Packs::new(Box::new(d.clone()), true, DEFAULT_CACHE).unwrap();
            // Records moved by `Op::Reclaim` keep the change time (version 3).
            p.set_keep_ctime(true);
            Arc::new(p)
        }),
        dirty: DirtyBudget::new(dirty),
        adapt: adaptive.then(|| Adaptive::with_clock(1, 4, Arc::new(TickingClock::default()))),
        ..Default::default()
    }
}

/// A clock that moves at each read: a compression (begin and end are two reads) lasts
/// 61 ms and the gap after it 5 ms for 20 extents, then the other way round for 20, so the
/// level goes down and up within a file.
#[derive(Default)]
struct TickingClock(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64);

impl squeezefs_codec::workspace::Clock for TickingClock {
    fn now(&self) -> std::time::Duration {
        use std::sync::atomic::Ordering::Relaxed;
        // The controller's first read (its start) is not a compression's.
        let n = self.1.fetch_add(1, Relaxed);
        let Some(n) = n.checked_sub(1) else {
            return std::time::Duration::ZERO;
        };
        let busy_phase = (n / 40).is_multiple_of(2);
        let step = if n.is_multiple_of(2) == busy_phase { 61 } else { 5 };
        std::time::Duration::from_millis(self.0.fetch_add(step, Relaxed))
    }
}

/// The mount's dirty budget: spent by any partial write (0), after a few pages or an
/// extent or two, or never in these small files (the default).
fn dirty_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1 << 12),
        Just(3 << 16),
        Just(DEFAULT_DIRTY_BYTES)
    ]
}

/// How much larger extents a new file written whole from its start takes (`grow.rs`):
/// none (a mount with `extent_size=`), or 2 or 4 times the mount's, so that the small
/// files of these tests cross it.
fn grow_strategy() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![Just(None), Just(Some(1u8)), Just(Some(2u8))]
}

/// `options` with a new file growing its extents by `grow` (log2 steps over `shift`).
fn growing(opts: Options, shift: u8, grow: Option<u8>) -> Options {
    Options {
        grow_extent_shift: grow.map(|k| shift + k),
        ..opts
    }
}

thread_local! {
    /// Which way the next [`syncfs`] goes.
    static WHOLE_SYNC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What a group commit's `syncfs` does: every pack and the backing file durable, metadata
/// included. Taken two ways in turn: as the daemon's group commit does it (open blocks
/// written by `seal_all`, one sync of everything — every pack's bytes, and its name with
/// `synced` — then `synced`), and by `Packs::sync` (each pack synced, and its directory).
fn syncfs(disk: &MemDisk, opts: &Options) -> Result<(), Error> {
    if let Some(p) = &opts.packs {
        let whole = WHOLE_SYNC.with(|w| {
            w.set(!w.get());
            w.get()
        });
        if whole {
            let mark = p.seal_all()?;
            for id in p.dir().list()? {
                p.dir().open(id)?.sync_data()?;
            }
            disk.sync_all()?;
            p.synced(mark);
            return Ok(());
        }
        p.sync()?;
    }
    disk.sync_all()?;
    Ok(())
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        off: u64,
        len: usize,
        kind: u8,
        seed: u8,
    },
    /// `copy_file_range` from another container (made for it, `payload(src_len, kind, seed)`
    /// written whole and fsynced, at the file's extent size or grown): `len` bytes at
    /// `off_in` copied to `off_out`, whole extents as stored where aligned.
    CopyFrom {
        src_len: usize,
        kind: u8,
        seed: u8,
        off_in: u64,
        off_out: u64,
        len: u64,
    },
    Read {
        off: u64,
        len: usize,
    },
    SetSize(u64),
    Punch {
        off: u64,
        len: u64,
    },
    Flush,
    Fsync,
    Reopen,
    /// Sets (index into `PROP_CODECS`) or, past its end, removes the compression property.
    SetCodec(u8),
    /// `write_back` (the superblock may stay pending).
    WriteBack,
    /// A sync of the whole disk, then `commit` of the current ticket (a group commit).
    Commit,
    /// Gives the file the test's zstd dictionary, or removes its dictionary property
    /// (extents and inline data already written keep what they used).
    SetDict(bool),
    /// A sync of the whole disk, then `settle` (the group commit's second sync): what the
    /// written copies replaced is removed.
    Settle,
    /// Background recompression of the file's extents to `RECOMPRESS_TARGETS[i]` (bytes
    /// unchanged; durable when done), keeping [`KEPT_TIMES`] as the change time shown.
    Recompress(u8),
    /// What the filesystem does at a last close: `writer_closed` (a new file written whole
    /// may take larger extents), `write_back`; with nothing left to do the
    /// container is dropped unflushed and opened again; otherwise a sync, `commit`, a sync,
    /// `settle`.
    Close,
    /// Read-ahead, in three steps that other operations may separate (as the daemon's
    /// workers do, off the file's lock): plans the extents starting in `[off, off + len)`,
    PlanAhead {
        off: u64,
        len: u64,
    },
    /// reads and decodes every planned extent from the disk as it is now,
    FetchAhead,
    /// and installs what was fetched (the container must refuse what changed since).
    InstallAhead,
    /// Drops every clean cached extent (what the daemon does once a closed file's state is
    /// written back).
    DropCache,
    /// Plans a relayout to extents of `1 << shift` bytes at `RECOMPRESS_TARGETS[target]`
    /// (bytes unchanged), keeping [`KEPT_TIMES`]; steps may follow, with other operations
    /// between them,
    PlanRelayout {
        shift: u8,
        target: u8,
    },
    /// each writing up to this many extents of the new layout (the last one switches the
    /// file to it; a step on a file that changed since the plan drops it).
    RelayoutStep(u8),
    /// A reclaim round over every pack no record can newly name (a mount's garbage round,
    /// beside the open container): the file's bytes, if its record is current and they are
    /// loaded, move to a new block, and its record (version 3) keeps the change time the
    /// file showed. With `true`, the file is read first (its bytes loaded: a container
    /// whose bytes are not loaded pins its pack, and the round leaves it).
    Reclaim(bool),
    /// What a change of metadata through the mount does first (`drop_kept_times`): the
    /// kept times go, durably.
    ForgetTimes,
    /// Sets or removes the file's force property (superblock version 7, location record
    /// version 4).
    SetForce(bool),
    /// A WRITE as the daemon serves it: `write_deferring`; a batch of covered extents it
    /// takes out waits for [`Op::FinishBatches`], with other operations between (the
    /// daemon compresses it without the file's lock, `container/batch.rs`).
    WriteDeferred {
        off: u64,
        len: usize,
        kind: u8,
        seed: u8,
    },
    /// Compresses the batches taken out, in the order taken, and finishes each.
    FinishBatches,
}

/// Read-ahead steps under way ([`Op::PlanAhead`]).
#[derive(Default)]
struct Ahead {
    plans: Vec<AheadPlan>,
    fetched: Vec<Fetched>,
    /// A relayout under way ([`Op::PlanRelayout`]).
    relayout: Option<Relayout>,
    /// Batches taken out by [`Op::WriteDeferred`], not finished yet.
    batches: Vec<Batch>,
}

/// A zstd dictionary trained on text like the payloads' (registered once per process).
fn test_dict() -> u32 {
    static ID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        let samples: Vec<Vec<u8>> = (0..400u32)
            .map(|i| {
                format!(
                    "{i} the quick brown fox jumps over the lazy dog, record {}\n",
                    i % 13
                )
                .into_bytes()
            })
            .collect();
        let refs: Vec<&[u8]> = samples.iter().map(|v| v.as_slice()).collect();
        let d = squeezefs_codec::dict::train(&refs, 2048).unwrap();
        squeezefs_codec::dict::register(&d).unwrap()
    })
}

/// Bytes that compress (text-like), don't (noise), or are zeros: all three paths.
fn payload(len: usize, kind: u8, seed: u8) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|i| match kind % 3 {
            0 => b"the quick brown fox jumps over the lazy dog "[(i + seed as usize) % 44],
            1 => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            }
            _ => 0,
        })
        .collect()
}

/// Targets of background recompression.
const RECOMPRESS_TARGETS: [&str; 4] = ["zstd:15", "zstd:3", "lz4", "zlib:9"];
/// The backing file's times the background pass hands [`Op::Recompress`].
const KEPT_TIMES: KeptTimes = KeptTimes {
    ctime: (1_600_000_000, 123),
    mtime: (1_500_000_000, 456),
};

/// The times a file keeps after `op`, given those it kept before and the backing file's
/// change time before it: a change of the file drops them (`SB_FLAG_TIMES` and a record's
/// change time last only until then), a recompression may set them (when it had extents
/// to rewrite), a reclaim may keep the change time in the record it moves, anything else
/// keeps them.
fn kept_after(before: Option<StatTimes>, op: &Op, size_before: u64, ctime: u64) -> Vec<Option<StatTimes>> {
    match op {
        Op::Write { len, .. } | Op::WriteDeferred { len, .. } if *len > 0 => vec![None],
        Op::CopyFrom {
            src_len, off_in, len, ..
        } if (*off_in as usize) < *src_len && *len > 0 => vec![None],
        Op::SetSize(_) | Op::SetCodec(_) | Op::SetDict(_) | Op::SetForce(_) | Op::ForgetTimes => {
            vec![None]
        }
        Op::Punch { off, len } if *off < size_before && *len > 0 => vec![None],
        Op::Recompress(_) | Op::PlanRelayout { .. } if before.is_none() => {
            vec![None, Some(KEPT_TIMES.into())]
        }
        Op::Reclaim(_) if before.is_none() => vec![
            None,
            Some(StatTimes {
                ctime: ctime_parts(ctime),
                mtime: None,
            }),
        ],
        _ => vec![before],
    }
}

/// Whether `kept`, read after a crash, is times the file could keep: none, the pass's, or
/// a change time a record kept (one the backing file had, so not later than its own).
fn plausible_kept(kept: Option<StatTimes>, disk: &MemDisk) -> bool {
    match kept {
        None => true,
        Some(k) if k == KEPT_TIMES.into() => true,
        Some(k) => k.mtime.is_none() && k.ctime <= ctime_parts(disk.change_time().unwrap().unwrap()),
    }
}

/// Codecs a property may switch a file to mid-sequence (files mix codecs across extents).
const PROP_CODECS: [&str; 5] = ["zstd:9", "lz4", "none", "zlib:1", "zstd-fast:1"];

fn op_strategy(max: u64) -> impl Strategy<Value = Op> {
    let off = 0..max;
    let extent = max / 6;
    prop_oneof![
        6 => (off.clone(), 0..(max as usize / 2), any::<u8>(), any::<u8>())
            .prop_map(|(off, len, kind, seed)| Op::Write { off, len, kind, seed }),
        // Inside the first extent: files that stay small enough to be packed.
        3 => (0..extent, 0..(extent as usize), any::<u8>(), any::<u8>())
            .prop_map(|(off, len, kind, seed)| Op::Write { off, len, kind, seed }),
        // From the start: a file written whole (`cp`, `tar`), which may grow its extents.
        2 => (1..max as usize, any::<u8>(), any::<u8>())
            .prop_map(|(len, kind, seed)| Op::Write { off: 0, len, kind, seed }),
        // Whole extents, the path that starts from zeros instead of the old bytes.
        2 => (0..6u64, 1..3u64, any::<u8>(), any::<u8>()).prop_map(move |(i, n, kind, seed)| {
            Op::Write { off: i * extent, len: (n * extent) as usize, kind, seed }
        }),
        // The daemon's WRITEs: batches of covered extents compressed later.
        2 => (0..6u64, 1..5u64, any::<u8>(), any::<u8>(), any::<bool>()).prop_map(move |(i, n, kind, seed, odd)| {
            let off = i * extent + u64::from(odd) * (extent / 3);
            Op::WriteDeferred { off, len: (n * extent) as usize, kind, seed }
        }),
        2 => Just(Op::FinishBatches),
        // Copies from another file: mostly extent aligned (copied as stored), some not;
        // to the source's end or not.
        2 => (2..7u64, 0..2u8, 0..6u64, 0..6u64, 0..3u8, 0..8u64, (any::<u8>(), any::<u8>()))
            .prop_map(move |(n_src, cut, i, j, skew, n, (kind, seed))| {
                let src_len = (n_src * extent - u64::from(cut) * (extent / 3)) as usize;
                let (a, b) = match skew { 0 | 1 => (0, 0), _ => (100 % extent, 0) };
                Op::CopyFrom {
                    src_len,
                    kind,
                    seed,
                    off_in: i * extent + a,
                    off_out: j * extent + b,
                    len: n * extent + u64::from(skew == 1) * (extent / 2),
                }
            }),
        3 => (off.clone(), 0..(max as usize)).prop_map(|(off, len)| Op::Read { off, len }),
        2 => (0..max).prop_map(Op::SetSize),
        1 => Just(Op::SetSize(0)),
        1 => (off, 0..max).prop_map(|(off, len)| Op::Punch { off, len }),
        1 => Just(Op::Flush),
        1 => Just(Op::Fsync),
        1 => Just(Op::Reopen),
        1 => Just(Op::WriteBack),
        1 => Just(Op::Commit),
        1 => (0..PROP_CODECS.len() as u8 + 1).prop_map(Op::SetCodec),
        1 => any::<bool>().prop_map(Op::SetDict),
        1 => Just(Op::Settle),
        1 => (0..RECOMPRESS_TARGETS.len() as u8).prop_map(Op::Recompress),
        2 => Just(Op::Close),
        2 => (0..max, 0..max).prop_map(|(off, len)| Op::PlanAhead { off, len }),
        1 => Just(Op::FetchAhead),
        2 => Just(Op::InstallAhead),
        1 => Just(Op::DropCache),
        2 => (13u8..=20, 0..RECOMPRESS_TARGETS.len() as u8).prop_map(|(shift, target)| Op::PlanRelayout { shift, target }),
        3 => (1u8..4).prop_map(Op::RelayoutStep),
        2 => any::<bool>().prop_map(Op::Reclaim),
        1 => Just(Op::ForgetTimes),
        1 => any::<bool>().prop_map(Op::SetForce),
    ]
}

fn config_strategy() -> impl Strategy<Value = (u8, CodecSpec, u64)> {
    let codecs = prop_oneof![
        Just(CodecSpec::NONE),
        Just("lz4".parse().unwrap()),
        Just("lzo".parse().unwrap()),
        Just("zlib:6".parse().unwrap()),
        Just("zstd:1".parse().unwrap()),
        Just("zstd:3".parse().unwrap()),
        Just("zstd:9".parse().unwrap()),
        Just("zstd-fast:5".parse().unwrap()),
        // The adaptive level (see `options`).
        Just("zstd:2".parse().unwrap()),
    ];
    // (extent shift, codec, largest offset used)
    (prop_oneof![Just(12u8), Just(13u8), Just(17u8)], codecs).prop_map(|(shift, codec)| {
        let max = (1u64 << shift) * 6;
        (shift, codec, max)
    })
}

fn apply_model(model: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { off, len, kind, seed } | Op::WriteDeferred { off, len, kind, seed } => {
            if *len == 0 {
                return;
            }
            let data = payload(*len, *kind, *seed);
            let end = *off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[*off as usize..end].copy_from_slice(&data);
        }
        Op::CopyFrom {
            src_len,
            kind,
            seed,
            off_in,
            off_out,
            len,
        } => {
            let src = payload(*src_len, *kind, *seed);
            let from = (*off_in as usize).min(src.len());
            let n = (*len as usize).min(src.len() - from);
            if n == 0 {
                return;
            }
            let end = *off_out as usize + n;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[*off_out as usize..end].copy_from_slice(&src[from..from + n]);
        }
        Op::SetSize(n) => model.resize(*n as usize, 0),
        Op::Punch { off, len } => {
            let start = (*off as usize).min(model.len());
            let end = (*off + *len).min(model.len() as u64) as usize;
            model[start..end.max(start)].fill(0);
        }
        _ => {}
    }
}

/// Runs `op` on the container; `Ok(Some(bytes))` for reads.
fn apply_container(
    c: &mut Container<MemDisk>,
    disk: &MemDisk,
    opts: &Options,
    ahead: &mut Ahead,
    op: &Op,
) -> Result<Option<ReadBytes>, Error> {
    match op {
        Op::PlanAhead { off, len } => {
            ahead.plans.extend(c.plan_ahead(*off, off + len));
            Ok(None)
        }
        Op::FetchAhead => {
            for plan in std::mem::take(&mut ahead.plans) {
                ahead.fetched.extend(plan.fetch(disk)?);
            }
            Ok(None)
        }
        Op::DropCache => {
            c.drop_cache();
            Ok(None)
        }
        Op::InstallAhead => {
            for f in std::mem::take(&mut ahead.fetched) {
                c.install(f);
            }
            Ok(None)
        }
        Op::Reclaim(load) => {
            let Some(packs) = &opts.packs else { return Ok(None) };
            if *load {
                c.read(0, 1)?;
            }
            let RecordState::Current { loc, .. } = record_state(disk)? else {
                return Ok(None);
            };
            let ids = packs.dir().list()?.into_iter().collect();
            packs.retire_any(&ids);
            let victims = packs.reclaimable()?;
            let live = [LiveFile {
                name: "f".into(),
                loc,
                id: disk.identity()?,
                target: None,
            }];
            let r = reclaim(
                packs,
                &victims,
                &live,
                &mut Garbage,
                |_| Ok(disk.clone()),
                // (A mount's `syncfs`: the file's record durable whatever the batch.)
                |_: &[MemDisk]| Ok(disk.sync_all()?),
                Settle::default,
            )?;
            assert!(r.left.is_empty(), "{:?}", r.left);
            Ok(None)
        }
        Op::ForgetTimes => {
            c.forget_kept_times()?;
            c.fsync().map(|_| None)
        }
        Op::Write { off, len, kind, seed } => c.write(*off, &payload(*len, *kind, *seed)).map(|_| None),
        Op::WriteDeferred { off, len, kind, seed } => {
            if let Some(b) = c.write_deferring(*off, &payload(*len, *kind, *seed))? {
                assert!(b.len() >= WRITE_BATCH, "a batch of {} extents", b.len());
                ahead.batches.push(b);
            }
            Ok(None)
        }
        Op::FinishBatches => {
            for b in std::mem::take(&mut ahead.batches) {
                c.finish_batch(b.compress())?;
            }
            Ok(None)
        }
        Op::CopyFrom {
            src_len,
            kind,
            seed,
            off_in,
            off_out,
            len,
        } => {
            // The source: a file of its own (no packs: a file of one extent would go to
            // one, and the packs are the test file's), written whole and durable.
            let so = Options {
                packs: None,
                ..opts.clone()
            };
            let mut src = Container::create(MemDisk::new(), &so);
            src.write(0, &payload(*src_len, *kind, *seed))?;
            src.writer_closed();
            src.fsync()?;
            c.copy_from(&mut src, *off_in, *off_out, *len).map(|_| None)
        }
        Op::Read { off, len } => c.read_bytes(*off, *len).map(Some),
        Op::SetSize(n) => c.set_size(*n).map(|_| None),
        Op::Punch { off, len } => c.punch_hole(*off, *len).map(|_| None),
        Op::Flush => c.flush().map(|_| None),
        Op::Fsync => c.fsync().map(|_| None),
        Op::WriteBack => c.write_back().map(|_| None),
        Op::SetCodec(i) => c
            .set_compression_property(PROP_CODECS.get(*i as usize).map(|s| s.parse().unwrap()))
            .map(|_| None),
        Op::SetDict(on) => c.set_dictionary_property(on.then(test_dict)).map(|_| None),
        Op::SetForce(on) => c.set_force_property(*on).map(|_| None),
        Op::Recompress(i) => {
            let target = RECOMPRESS_TARGETS[*i as usize].parse().unwrap();
            let todo = c.pending_for(target)?;
            c.recompress_extents(target, &todo, Some(KEPT_TIMES))
                .map(|_| None)
        }
        Op::PlanRelayout { shift, target } => {
            let target = RECOMPRESS_TARGETS[*target as usize].parse().unwrap();
            ahead.relayout = c.plan_relayout(target, *shift, KEPT_TIMES)?;
            Ok(None)
        }
        Op::RelayoutStep(n) => {
            if let Some(mut plan) = ahead.relayout.take() {
                if c.relayout_step(&mut plan, *n as u64)? == RelayoutStep::Progress {
                    ahead.relayout = Some(plan);
                }
            }
            Ok(None)
        }
        Op::Settle => {
            let ticket = c.ticket();
            syncfs(disk, opts)?;
            c.settle(ticket).map(|_| None)
        }
        Op::Commit => {
            syncfs(disk, opts)?;
            c.commit(c.ticket()).map(|_| None)
        }
        Op::Close => {
            c.writer_closed();
            match c.write_back()? {
                WriteBack::Done => {}
                WriteBack::Commit(t) => {
                    syncfs(disk, opts)?;
                    if let Some(t) = c.commit(t)? {
                        syncfs(disk, opts)?;
                        c.settle(t)?;
                    }
                }
                WriteBack::Settle(t) => {
                    syncfs(disk, opts)?;
                    c.settle(t)?;
                }
            }
            if !c.commit_pending() && c.dirty_bytes() == 0 {
                // Dropped without a flush: whatever is not on disk now is lost.
                *c = Container::open(disk.clone(), opts)?;
            }
            Ok(None)
        }
        Op::Reopen => {
            c.flush()?;
            *c = Container::open(disk.clone(), opts)?;
            Ok(None)
        }
    }
}

/// Runs `ops` on the container and on a model until the disk crashes (or the ops end);
/// returns every state the file had since its last successful fsync, the empty file first
/// (the caller made it durable, or it is new). An error without a crash fails the case.
fn until_crash(
    c: &mut Container<MemDisk>,
    disk: &MemDisk,
    opts: &Options,
    ops: &[Op],
) -> Result<(Vec<Vec<u8>>, Vec<bool>), TestCaseError> {
    let mut model: Vec<u8> = Vec::new();
    let mut since_sync = vec![model.clone()];
    // The force property's values since the last fsync (a new file has none).
    let mut forces = vec![false];
    let mut ahead = Ahead::default();
    for op in ops {
        apply_model(&mut model, op);
        since_sync.push(model.clone());
        if let Op::SetForce(on) = op {
            forces.push(*on);
        }
        match apply_container(c, disk, opts, &mut ahead, op) {
            Ok(_) => {
                if matches!(op, Op::Fsync) {
                    since_sync = vec![model.clone()];
                    forces = vec![c.force_property()];
                }
            }
            Err(_) => {
                prop_assert!(disk.has_crashed(), "error without a crash");
                break;
            }
        }
    }
    Ok((since_sync, forces))
}

/// Whether byte `o` was `b` in one of `states` (zero past a state's end).
/// When the packs' counters say nothing was left unnamed (`Packs::made_no_garbage`, which
/// lets an unmount leave its walk out), no pack holds a byte the file's record does not
/// name: every slot appended got its record, and no record was replaced or removed unseen.
fn garbage_is_told(dir: &MemPackDir, packs: &Packs, disk: &MemDisk) -> Result<(), TestCaseError> {
    use squeezefs_container::pack::audit::{check_pack, LiveMap};
    use squeezefs_container::pack::dir::PackDir;
    if !packs.made_no_garbage() {
        return Ok(());
    }
    // As the walk judges: only a record that is the file (not one a superblock outranks).
    let mut live = LiveMap::default();
    if let RecordState::Current { loc, .. } = record_state(disk).unwrap() {
        live.add(&loc);
    }
    for id in dir.list().unwrap() {
        let r = check_pack(packs, id, &live, false).unwrap();
        prop_assert_eq!(r.garbage, 0, "pack {} holds garbage no counter told: {:?}", id, r);
    }
    Ok(())
}

fn had(states: &[Vec<u8>], o: usize, b: u8) -> bool {
    states.iter().any(|s| s.get(o).copied().unwrap_or(0) == b)
}

/// A seeded xorshift generator for the reboots.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = seed | 1;
    move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    }
}

fn expected_read(model: &[u8], off: u64, len: usize) -> &[u8] {
    let start = (off as usize).min(model.len());
    let end = (start + len).min(model.len());
    &model[start..end]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// Every operation sequence reads back exactly what a plain byte array holds.
    #[test]
    fn container_matches_model(
        (shift, codec, ops) in config_strategy().prop_flat_map(|(shift, codec, max)| {
            (Just(shift), Just(codec), prop::collection::vec(op_strategy(max), 1..40))
        }),
        packed in any::<bool>(),
        dirty in dirty_strategy(),
        grow in grow_strategy(),
    ) {
        let disk = MemDisk::new();
        let packs = packed.then(|| MemPackDir::new(disk.crash()));
        let opts = growing(options(codec, shift, packs.as_ref(), dirty), shift, grow);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        let mut model = Vec::new();
        // The file's own properties, kept by superblocks and location records alike (a
        // packed file keeps its dictionary property in a version 2 record).
        let (mut dict, mut codec_prop, mut force) = (None, None, false);
        let mut ahead = Ahead::default();
        // The last reads' bytes, held on while the file changes (a READ's reply shares the
        // extent's buffer): what they hold never changes.
        let mut held: Vec<(ReadBytes, Vec<u8>)> = Vec::new();
        for op in &ops {
            let ctime = disk.change_time().unwrap().unwrap();
            let kept = kept_after(c.kept_times(), op, c.size().unwrap(), ctime);
            let got = apply_container(&mut c, &disk, &opts, &mut ahead, op).unwrap();
            for (bytes, was) in &held {
                prop_assert_eq!(&bytes[..], &was[..], "a read held through {:?} changed", op);
            }
            prop_assert!(kept.contains(&c.kept_times()), "kept ctime {:?} after {:?}, expected one of {:?}", c.kept_times(), op, kept);
            apply_model(&mut model, op);
            match op {
                Op::SetDict(on) => dict = on.then(test_dict),
                Op::SetCodec(i) => codec_prop = PROP_CODECS.get(*i as usize).map(|s| s.parse::<CodecSpec>().unwrap()),
                Op::SetForce(on) => force = *on,
                _ => {}
            }
            if let (Op::Read { off, len }, Some(bytes)) = (op, got) {
                prop_assert_eq!(&bytes[..], expected_read(&model, *off, *len), "read after {:?}", op);
                if held.len() == 4 {
                    held.remove(0);
                }
                let was = bytes.to_vec();
                held.push((bytes, was));
            }
            prop_assert_eq!(c.size().unwrap(), model.len() as u64);
            prop_assert_eq!(c.dictionary_property(), dict, "dictionary after {:?}", op);
            prop_assert_eq!(c.compression_property(), codec_prop, "codec after {:?}", op);
            prop_assert_eq!(c.force_property(), force, "force after {:?}", op);
        }
        // Whole file, then after a final reopen.
        prop_assert_eq!(c.read(0, model.len() + 10).unwrap(), model.clone());
        c.flush().unwrap();
        if let (Some(dir), Some(p)) = (&packs, &opts.packs) {
            garbage_is_told(dir, p, &disk)?;
        }
        let kept = c.kept_times();
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        prop_assert_eq!(c.kept_times(), kept, "the kept change time is what the superblock says");
        prop_assert_eq!(c.size().unwrap(), model.len() as u64);
        prop_assert_eq!(c.dictionary_property(), dict);
        prop_assert_eq!(c.compression_property(), codec_prop);
        prop_assert_eq!(c.force_property(), force);
        prop_assert_eq!(c.read(0, model.len() + 10).unwrap(), model.clone());
        // SEEK_DATA / SEEK_HOLE agree with the model: never call data a hole.
        let mut pos = 0u64;
        while let Some(d) = c.seek_data(pos).unwrap() {
            prop_assert!(model[pos as usize..d as usize].iter().all(|&b| b == 0), "data skipped before {}", d);
            let h = c.seek_hole(d).unwrap().unwrap();
            prop_assert!(h > d);
            pos = h;
            if pos >= model.len() as u64 { break; }
        }
        if pos < model.len() as u64 {
            prop_assert!(model[pos as usize..].iter().all(|&b| b == 0));
        }
    }

    /// `Options::extend_first` (XFS): a new file, never synced, written out in batches and
    /// crashed at any storage operation. Its new length may reach the disk before the
    /// bytes written with it; it must never outlive the crash without the superblock that
    /// makes the file a container, or the file would read as a plain file of zeros.
    #[test]
    fn an_extended_new_file_never_becomes_a_plain_file_of_zeros(
        crash_at in 0u64..40,
        reboot_seed in any::<u64>(),
    ) {
        let disk = MemDisk::new();
        let opts = Options {
            extend_first: true,
            ..options("zstd:1".parse().unwrap(), 12, None, DEFAULT_DIRTY_BYTES)
        };
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        disk.crash_after(crash_at);
        let data = squeezefs_testdata::text(4096);
        // (Failures after the crash are the point.)
        for i in 0..12u64 {
            let _ = c.write(i * 4096, &data);
        }
        let _ = c.fsync();
        let crash2 = Crash::new();
        let disk2 = disk.reboot_into(&crash2, xorshift(reboot_seed));
        let len = disk2.len().unwrap();
        let u = squeezefs_container::usage::usage(&disk2, None).unwrap();
        prop_assert!(
            !(u.plain && len >= squeezefs_container::format::DATA_START),
            "a plain file of {} bytes after the crash", len
        );
    }

    /// Crash at a random storage operation, reboot, check, and keep going.
    #[test]
    fn crash_keeps_synced_bytes_and_tears_nothing_else(
        (shift, codec, ops, more) in config_strategy().prop_flat_map(|(shift, codec, max)| {
            (Just(shift), Just(codec),
             prop::collection::vec(op_strategy(max), 1..30),
             prop::collection::vec(op_strategy(max), 0..15))
        }),
        crash_at in 0u64..60,
        reboot_seed in any::<u64>(),
        packed in any::<bool>(),
        dirty in dirty_strategy(),
        grow in grow_strategy(),
        extend_first in any::<bool>(),
    ) {
        let disk = MemDisk::new();
        let packs = packed.then(|| MemPackDir::new(disk.crash()));
        let opts = Options {
            extend_first,
            ..growing(options(codec, shift, packs.as_ref(), dirty), shift, grow)
        };
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        // The file exists durably, empty (and may still grow its extents).
        c.fsync().unwrap();
        disk.crash_after(crash_at);
        let (since_sync, forces) = until_crash(&mut c, &disk, &opts, &ops)?;
        let mut rand = xorshift(reboot_seed);
        let crash2 = Crash::new();
        let disk2 = disk.reboot_into(&crash2, &mut rand);
        let packs2 = packs.map(|d| d.reboot_into(&crash2, &mut rand));
        let opts = Options {
            extend_first,
            ..growing(options(codec, shift, packs2.as_ref(), dirty), shift, grow)
        };
        let mut c = Container::open(disk2.clone(), &opts).expect("a synced container always opens");
        prop_assert!(plausible_kept(c.kept_times(), &disk2), "kept ctime {:?}", c.kept_times());
        prop_assert!(forces.contains(&c.force_property()), "force {} not had since the last fsync", c.force_property());
        let size = c.size().unwrap();
        prop_assert!(since_sync.iter().any(|s| s.len() as u64 == size), "size {} never existed", size);
        // (The file's own extent size: a file that grew its extents has larger ones.)
        let e = c.extent_size().unwrap_or(1 << shift);
        let mut recovered = Vec::new();
        let mut i = 0;
        while i * e < size {
            let (lo, hi) = (i * e, (size).min((i + 1) * e));
            match c.read(lo, (hi - lo) as usize) {
                Ok(bytes) => {
                    prop_assert_eq!(bytes.len() as u64, hi - lo);
                    for (k, &b) in bytes.iter().enumerate() {
                        let o = lo as usize + k;
                        prop_assert!(had(&since_sync, o, b), "byte {} = {} was never written there since the last fsync", o, b);
                    }
                    recovered.extend_from_slice(&bytes);
                }
                Err(err) => {
                    // Only an extent written since the last fsync may be unreadable.
                    // "Written" is the extent as a unit (bytes past the size recovered
                    // count): the first copy of an extent that was a hole has no older copy
                    // to fall back on; its payload and header are two writes, which a power
                    // failure may keep one of (unsynced writes reach the disk in any order,
                    // so this can hit every such extent, as a torn multi-page write on a
                    // real disk can), and a torn copy cannot be told from a rotted one, so
                    // it reads as EIO, never as guessed zeros (docs/FORMAT.md). A killed
                    // writer leaves none: `a_killed_writer_leaves_no_damaged_extent`.
                    let changed = since_sync.iter().any(|s| {
                        let get = |v: &Vec<u8>, o: u64| v.get(o as usize).copied().unwrap_or(0);
                        (lo..lo + e).any(|o| get(s, o) != get(&since_sync[0], o))
                    });
                    prop_assert!(changed && err.is_corruption(), "extent {} unreadable but untouched since fsync: {}", i, err);
                    // Continue with the extent rewritten: recovery by overwrite must work (a
                    // partial write into an unreadable extent is refused, so a damaged tail
                    // is cut first).
                    let fill = vec![0x5au8; (hi - lo) as usize];
                    if hi - lo < e {
                        prop_assert!(c.write(lo, &fill).is_err());
                        c.set_size(lo).unwrap();
                    }
                    c.write(lo, &fill).unwrap();
                    recovered.extend_from_slice(&fill);
                }
            }
            i += 1;
        }
        // The recovered file keeps working like a plain byte array.
        let mut model = recovered;
        let mut ahead = Ahead::default();
        for op in &more {
            let got = apply_container(&mut c, &disk2, &opts, &mut ahead, op).unwrap();
            apply_model(&mut model, op);
            if let (Op::Read { off, len }, Some(bytes)) = (op, got) {
                prop_assert_eq!(&bytes[..], expected_read(&model, *off, *len));
            }
        }
        c.flush().unwrap();
        let mut c = Container::open(disk2, &opts).unwrap();
        prop_assert_eq!(c.read(0, model.len() + 1).unwrap(), model);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// The writer killed (SIGKILL, not a power failure) at a random storage operation: what
    /// it wrote stays, the write in flight stops at a page boundary. Every extent must then
    /// read, each byte a value it had since the last fsync: a killed daemon leaves no
    /// damaged extent, not even the first copy of one that was a hole.
    #[test]
    fn a_killed_writer_leaves_no_damaged_extent(
        (shift, codec, ops) in config_strategy().prop_flat_map(|(shift, codec, max)| {
            (Just(shift), Just(codec), prop::collection::vec(op_strategy(max), 1..30))
        }),
        kill_at in 0u64..80,
        reboot_seed in any::<u64>(),
        packed in any::<bool>(),
        fresh in any::<bool>(),
        dirty in dirty_strategy(),
        grow in grow_strategy(),
    ) {
        let disk = MemDisk::new();
        let packs = packed.then(|| MemPackDir::new(disk.crash()));
        let opts = growing(options(codec, shift, packs.as_ref(), dirty), shift, grow);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        if !fresh {
            // The file exists durably, empty; a fresh one gets its first superblock below
            // (until then, the first data past the superblocks must say it is a container).
            c.fsync().unwrap();
        }
        disk.crash_after(kill_at);
        let (since_sync, forces) = until_crash(&mut c, &disk, &opts, &ops)?;
        let mut rand = xorshift(reboot_seed);
        let crash2 = Crash::new();
        let disk2 = disk.reboot_killed_into(&crash2, &mut rand);
        let packs2 = packs.map(|d| d.reboot_killed_into(&crash2, &mut rand));
        let opts = growing(options(codec, shift, packs2.as_ref(), dirty), shift, grow);
        let mut c = Container::open(disk2.clone(), &opts).expect("a synced container always opens");
        prop_assert!(plausible_kept(c.kept_times(), &disk2), "kept ctime {:?}", c.kept_times());
        prop_assert!(forces.contains(&c.force_property()), "force {} not had since the last fsync", c.force_property());
        let size = c.size().unwrap();
        prop_assert!(since_sync.iter().any(|s| s.len() as u64 == size), "size {} never existed", size);
        let e = c.extent_size().unwrap_or(1 << shift);
        let mut i = 0;
        while i * e < size {
            let (lo, hi) = (i * e, size.min((i + 1) * e));
            let bytes = c.read(lo, (hi - lo) as usize);
            prop_assert!(bytes.is_ok(), "extent {} unreadable after a kill: {:?}", i, bytes.err());
            for (k, &b) in bytes.unwrap().iter().enumerate() {
                let o = lo as usize + k;
                prop_assert!(had(&since_sync, o, b), "byte {} = {} was never written there since the last fsync", o, b);
            }
            i += 1;
        }
    }
}

/// The adaptive mount of the property tests does move its level within a file.
#[test]
fn the_model_tests_adaptive_clock_moves_the_level() {
    let opts = options("zstd:2".parse().unwrap(), 12, None, DEFAULT_DIRTY_BYTES);
    let mut c = Container::open(MemDisk::new(), &opts).unwrap();
    for i in 0..200u64 {
        c.write(i << 12, &payload(4096, 0, i as u8)).unwrap();
    }
    c.fsync().unwrap();
    let s = opts.adapt.as_ref().unwrap().snapshot();
    assert!(s.lowered > 0 && s.raised > 0, "{s:?}");
}

/// A fsync'ed file survives any crash afterwards, byte for byte, over many seeds.
#[test]
fn fsynced_content_survives_every_crash_point() {
    for crash_at in 0..40u64 {
        let disk = MemDisk::new();
        let opts = Options {
            codec: "zstd:1".parse().unwrap(),
            extent_shift: 12,
            ..Default::default()
        };
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        let a = payload(20_000, 0, 1);
        c.write(0, &a).unwrap();
        c.fsync().unwrap();
        disk.crash_after(crash_at);
        // Overwrite part, grow, shrink: none of it synced.
        let _ = c.write(5000, &payload(9000, 1, 2));
        let _ = c.set_size(30_000);
        let _ = c.write(25_000, &payload(3000, 0, 3));
        let _ = c.set_size(7000);
        let _ = c.flush();
        for seed in 1..20u64 {
            let mut r = seed;
            let d2 = disk.reboot(|| {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                r
            });
            let mut c2 = Container::open(d2, &opts).unwrap();
            let size = c2.size().unwrap();
            assert!([20_000, 30_000, 7000].contains(&size), "size {size}");
            // Bytes untouched by the unsynced writes are exactly as fsynced.
            let got = c2.read(0, 5000).unwrap();
            assert_eq!(&got[..], &a[..5000], "crash_at {crash_at} seed {seed}");
        }
    }
}

#[test]
fn small_files_are_inline_and_zero_extents_are_holes() {
    let disk = MemDisk::new();
    let opts = Options::default();
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, b"hello, inline world\n").unwrap();
    c.fsync().unwrap();
    assert!(disk.contents().len() <= 4096, "a small file is at most one block");
    // 10 MiB of zeros then a byte: only the last extent is stored.
    c.set_size(10 << 20).unwrap();
    c.write(10 << 20, b"x").unwrap();
    c.fsync().unwrap();
    let d = disk.contents();
    let nonzero_blocks = d.chunks(4096).filter(|b| b.iter().any(|&x| x != 0)).count();
    assert!(nonzero_blocks <= 4, "{nonzero_blocks} blocks hold data");
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    assert_eq!(c.read(0, 20).unwrap(), b"hello, inline world\n");
    assert_eq!(c.read(5 << 20, 4).unwrap(), vec![0; 4]);
    assert_eq!(c.read(10 << 20, 4).unwrap(), b"x");
    assert_eq!(c.seek_data(4096).unwrap(), Some(4096), "inside data extent 0");
    assert_eq!(c.seek_data(1 << 17).unwrap(), Some(10 << 20));
    assert_eq!(c.seek_hole(0).unwrap(), Some(1 << 17));
}

#[test]
fn plain_files_are_served_as_they_are() {
    let disk = MemDisk::new();
    use squeezefs_container::Storage;
    disk.write_at(b"not a container", 0).unwrap();
    let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
    assert!(c.is_plain());
    assert_eq!(c.read(0, 100).unwrap(), b"not a container");
    c.write(4, b"A").unwrap();
    c.flush().unwrap();
    assert_eq!(disk.contents(), b"not A container");
}

#[test]
fn corrupt_payload_is_an_error_naming_the_extent_and_others_still_read() {
    use squeezefs_container::Storage;
    let disk = MemDisk::new();
    let opts = Options {
        codec: "zstd:3".parse().unwrap(),
        extent_shift: 12,
        ..Default::default()
    };
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    let data = payload(4 * 4096, 0, 9);
    c.write(0, &data).unwrap();
    c.fsync().unwrap();
    // Flip a payload byte of extent 2's current half.
    let off = squeezefs_container::format::half_offset(12, 2, 0);
    let contents = disk.contents();
    let half = if contents[off as usize..off as usize + 4] == *b"SQZE" {
        0
    } else {
        1
    };
    let off = squeezefs_container::format::half_offset(12, 2, half) + 50;
    let mut b = [0u8; 1];
    disk.read_at(&mut b, off).unwrap();
    disk.write_at(&[b[0] ^ 0xff], off).unwrap();
    let mut c = Container::open(disk, &opts).unwrap();
    match c.read(2 * 4096, 10) {
        Err(Error::CorruptExtent {
            index: 2,
            offset: 8192,
            ..
        }) => {}
        other => panic!("expected a corruption error for extent 2, got {other:?}"),
    }
    assert_eq!(c.read(0, 8192).unwrap(), &data[..8192]);
    assert_eq!(c.read(3 * 4096, 4096).unwrap(), &data[3 * 4096..]);
}

/// A new file written back (extents on disk, synced) whose first superblock never landed,
/// as after a crash or kill -9 between write-back and the group commit: it opens as an
/// empty container, never as a plain file of zeros and extent bytes, and keeps working.
#[test]
fn a_container_whose_first_superblock_never_landed_opens_empty() {
    for shift in [12u8, 17, 20] {
        let disk = MemDisk::new();
        let opts = Options {
            codec: "zstd:1".parse().unwrap(),
            extent_shift: shift,
            ..Default::default()
        };
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        let data = payload(300_000, 1, 9);
        c.write(0, &data).unwrap();
        assert!(
            matches!(c.write_back().unwrap(), WriteBack::Commit(_)),
            "superblock left pending"
        );
        assert!(c.commit_pending());
        disk.sync_data().unwrap();
        let disk2 = disk.reboot(|| 0);
        let mut c = Container::open(disk2.clone(), &opts).unwrap();
        assert!(!c.is_plain(), "extent {shift}: opened as a plain file");
        assert_eq!(c.size().unwrap(), 0);
        c.write(0, b"again").unwrap();
        c.fsync().unwrap();
        let mut c = Container::open(disk2.clone(), &opts).unwrap();
        assert_eq!(c.read(0, 100).unwrap(), b"again");
        assert!(
            disk2.contents().len() < 3 * 4096,
            "old extents cut: {}",
            disk2.contents().len()
        );
    }
}

/// The group commit path: write-back, one sync, commit; a change in between defers the
/// commit to the next write-back.
#[test]
fn deferred_commit_writes_the_superblock_only_for_the_state_written_back() {
    let disk = MemDisk::new();
    let opts = Options::default();
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    let data = payload(400_000, 1, 3);
    c.write(0, &data).unwrap();
    let syncs = disk.syncs();
    let WriteBack::Commit(first) = c.write_back().unwrap() else {
        panic!("superblock left pending")
    };
    assert_eq!(disk.syncs(), syncs, "write_back does not sync");
    c.write(10, b"later").unwrap();
    disk.sync_data().unwrap();
    assert!(
        c.commit(first).unwrap().is_none(),
        "changed since write-back: no commit"
    );
    let WriteBack::Commit(second) = c.write_back().unwrap() else {
        panic!("superblock left pending")
    };
    disk.sync_data().unwrap();
    assert!(c.commit(second).unwrap().is_some());
    assert!(!c.commit_pending());
    disk.sync_data().unwrap();
    let mut want = data.clone();
    want[10..15].copy_from_slice(b"later");
    let mut c = Container::open(disk.reboot(|| 0), &opts).unwrap();
    assert_eq!(c.read(0, want.len()).unwrap(), want);
}

/// A ticket left queued by one container (a write-behind's, then the last close's own) is
/// not redeemed by the next container of the same file, whose epochs count from 0 again:
/// committing it there would write a superblock, and settle copies, for writes no sync
/// has covered.
#[test]
fn a_ticket_of_an_earlier_container_commits_nothing_in_a_later_one() {
    let disk = MemDisk::new();
    let opts = Options::default();
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, &payload(400_000, 1, 3)).unwrap();
    let WriteBack::Commit(stale) = c.write_back().unwrap() else {
        panic!("superblock left pending")
    };
    c.fsync().unwrap();
    drop(c);
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, &payload(500_000, 2, 3)).unwrap();
    let WriteBack::Commit(fresh) = c.write_back().unwrap() else {
        panic!("superblock left pending")
    };
    assert!(c.commit(stale).unwrap().is_none(), "another container's ticket");
    assert!(c.commit_pending());
    disk.sync_data().unwrap();
    assert!(c.commit(fresh).unwrap().is_some());
}

/// A file closed twice (the filesystem's `flush` then `release` both write back): the
/// second write-back still reports the record its bytes wait for.
#[test]
fn a_packed_file_written_back_twice_keeps_its_pending_record() {
    use std::sync::atomic::Ordering::Relaxed;
    let disk = MemDisk::new();
    let dir = MemPackDir::new(disk.crash());
    let opts = options("zstd:1".parse().unwrap(), 17, Some(&dir), DEFAULT_DIRTY_BYTES);
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, b"hello").unwrap();
    assert!(matches!(c.write_back().unwrap(), WriteBack::Commit(_)));
    let WriteBack::Commit(t) = c.write_back().unwrap() else {
        panic!("the record still waits")
    };
    syncfs(&disk, &opts).unwrap();
    let t = c.commit(t).unwrap().expect("committed");
    syncfs(&disk, &opts).unwrap();
    c.settle(t).unwrap();
    assert!(c.write_back().unwrap().is_done());
    // Opened by a later mount (its packs' cache empty).
    let opts = options("zstd:1".parse().unwrap(), 17, Some(&dir), DEFAULT_DIRTY_BYTES);
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    assert!(c.is_packed());
    // Not loaded at the open: its block is named (for a read into the packs' cache first).
    let (pin, pack, block) = c.unloaded_pack_block().expect("unloaded, in a pack");
    let packs = opts.packs.as_ref().unwrap();
    let (read, hits) = (&packs.counters.blocks_read, &packs.counters.cache_hits);
    let before = (read.load(Relaxed), hits.load(Relaxed));
    packs.prefetch_block(&pin, pack, block);
    packs.prefetch_block(&pin, pack, block);
    assert_eq!(
        (read.load(Relaxed), hits.load(Relaxed)),
        (before.0 + 1, before.1),
        "read once, no hit counted"
    );
    drop(pin);
    assert_eq!(c.read(0, 10).unwrap(), b"hello");
    assert_eq!(hits.load(Relaxed), before.1 + 1, "the load found it cached");
    assert!(c.unloaded_pack_block().is_none(), "loaded");
    assert_eq!(disk.contents().len(), 0, "nothing in the backing file");
}

/// A packed file that is all of its block holds the packs' cached block itself once loaded
/// (no copy), and a write to it changes its own copy only: another reader of that block
/// (here, a second container of the same file, as its last state on disk has it) still
/// reads the block's bytes.
#[test]
fn a_file_alone_in_its_block_shares_the_cached_block_and_a_write_copies_it() {
    // (A file shorter than its extent, whose first write makes its buffer whole, and one
    // exactly one extent long, whose write copies the shared buffer itself.)
    for len in [60_000u32, 1 << 17] {
        shares_the_cached_block(len);
    }
}

fn shares_the_cached_block(len: u32) {
    use std::sync::atomic::Ordering::Relaxed;
    let disk = MemDisk::new();
    let dir = MemPackDir::new(disk.crash());
    let opts = options("zstd:1".parse().unwrap(), 17, Some(&dir), DEFAULT_DIRTY_BYTES);
    let old: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, &old).unwrap();
    c.fsync().unwrap();
    // A later mount: its packs' cache empty.
    let opts = options("zstd:1".parse().unwrap(), 17, Some(&dir), DEFAULT_DIRTY_BYTES);
    let packs = opts.packs.clone().unwrap();
    let mut a = Container::open(disk.clone(), &opts).unwrap();
    assert!(a.is_packed());
    assert!(a.read(0, old.len() + 1).unwrap() == old);
    a.write(100, b"changed").unwrap();
    let mut new = old.clone();
    new[100..107].copy_from_slice(b"changed");
    assert!(a.read(0, old.len() + 1).unwrap() == new, "the write is read back");
    // The block in the cache is unchanged: the second container loads it from there.
    let read = packs.counters.blocks_read.load(Relaxed);
    let mut b = Container::open(disk.clone(), &opts).unwrap();
    assert!(
        b.read(0, old.len() + 1).unwrap() == old,
        "the cached block changed under a write"
    );
    assert_eq!(packs.counters.blocks_read.load(Relaxed), read, "from the cache");
    a.fsync().unwrap();
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    assert!(c.read(0, old.len() + 1).unwrap() == new);
}

/// A whole-extent overwrite of a packed file that was not loaded yet: the new bytes win,
/// the pack's old ones are never read over them.
#[test]
fn a_whole_extent_overwrite_of_an_unloaded_packed_file_keeps_the_new_bytes() {
    let disk = MemDisk::new();
    let dir = MemPackDir::new(disk.crash());
    let opts = options("zstd:1".parse().unwrap(), 12, Some(&dir), DEFAULT_DIRTY_BYTES);
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, &[1u8; 4096]).unwrap();
    c.fsync().unwrap();
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    assert!(c.is_packed());
    c.write(0, &[2u8; 4096]).unwrap();
    assert!(c.read(0, 4096).unwrap() == [2u8; 4096], "the old bytes came back");
    c.fsync().unwrap();
    assert!(c.read(0, 4096).unwrap() == [2u8; 4096], "the old bytes came back");
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    assert!(c.read(0, 4096).unwrap() == [2u8; 4096], "the old bytes came back");
}

/// a packed file truncated to 0 and then extended (or written past 0) must read
/// zeros where it was not written, not its old bytes from the pack.
#[test]
fn truncate_to_zero_of_a_packed_file_then_extend_reads_zeros() {
    for reopen in [true, false] {
        let disk = MemDisk::new();
        let dir = MemPackDir::new(disk.crash());
        let opts = options("zstd:1".parse().unwrap(), 12, Some(&dir), DEFAULT_DIRTY_BYTES);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        c.write(0, &[7u8; 100]).unwrap();
        c.fsync().unwrap();
        if reopen {
            c = Container::open(disk.clone(), &opts).unwrap();
        }
        c.set_size(0).unwrap();
        c.set_size(50).unwrap();
        let got = c.read(0, 50).unwrap();
        assert!(
            got == [0u8; 50],
            "reopen={reopen}: truncate 0 + extend read {:?}",
            &got[..8]
        );

        let mut c = Container::open(disk.clone(), &opts).unwrap();
        c.set_size(0).unwrap();
        c.write(40, b"xyz").unwrap();
        let got = c.read(0, 43).unwrap();
        assert!(
            got[..40] == [0u8; 40],
            "truncate 0 + write at 40 read {:?}",
            &got[..8]
        );
    }
}

/// A small file read back from its pack (or, without packs, its inline superblock) is
/// cached as its own bytes only, not a zeroed extent (`Ext::data`): grown by `set_size`,
/// shrunk, written into, written back, committed and read again, every byte is the
/// model's — zeros past the bytes it had, never anything else.
#[test]
fn a_small_file_cached_short_grows_shrinks_and_is_written_like_any_other() {
    for packed in [true, false] {
        let disk = MemDisk::new();
        let dir = MemPackDir::new(disk.crash());
        let opts = options(
            "zstd:1".parse().unwrap(),
            13,
            packed.then_some(&dir),
            DEFAULT_DIRTY_BYTES,
        );
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        let mut model: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8 + 1).collect();
        c.write(0, &model).unwrap();
        c.fsync().unwrap();
        let check = |c: &mut Container<MemDisk>, model: &[u8], what: &str| {
            let got = c.read(0, 1 << 14).unwrap();
            assert!(
                got == model,
                "packed={packed} {what}: {} bytes, want {}",
                got.len(),
                model.len()
            );
        };
        // Reopened: the file's bytes come back short; grown, they read as zeros past them.
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        check(&mut c, &model, "reopened");
        c.set_size(8000).unwrap();
        model.resize(8000, 0);
        check(&mut c, &model, "grown past the short buffer");
        c.set_size(2000).unwrap();
        model.truncate(2000);
        c.set_size(6000).unwrap();
        model.resize(6000, 0);
        check(&mut c, &model, "shrunk and grown again");
        c.write(5000, b"tail").unwrap();
        model[5000..5004].copy_from_slice(b"tail");
        check(&mut c, &model, "written past the short buffer");
        c.fsync().unwrap();
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        check(&mut c, &model, "after fsync and reopen");
        // Grown, then written back without a write: the grown size is kept, zeros read.
        c.set_size(7000).unwrap();
        model.resize(7000, 0);
        c.fsync().unwrap();
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        check(&mut c, &model, "grown, fsynced, reopened");
    }
}

/// a packed file emptied, given a smaller extent size and grown: its old pack
/// bytes (one old extent) are copied into a smaller extent buffer.
#[test]
fn truncate_zero_then_smaller_extent_size_then_grow() {
    let disk = MemDisk::new();
    let dir = MemPackDir::new(disk.crash());
    let opts = options("zstd:1".parse().unwrap(), 13, Some(&dir), DEFAULT_DIRTY_BYTES);
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    c.write(0, &[7u8; 6000]).unwrap();
    c.fsync().unwrap();
    c.set_size(0).unwrap();
    c.set_extent_size_property(Some(12)).unwrap();
    c.set_size(8192).unwrap();
    let got = c.read(0, 8192).unwrap();
    assert!(got == vec![0u8; 8192]);
}

/// A random writer keeps its partial extents in memory until its write-back while the
/// mount's dirty budget lasts (each extent then compressed once, not once per page), and
/// writes its own out once the budget is spent, by itself or by another file sharing it.
#[test]
fn partial_writes_wait_for_the_write_back_while_the_shared_budget_lasts() {
    let shift = 13u8;
    let ext = 1usize << shift;
    let budget = DirtyBudget::new(10 * ext);
    let opts = Options {
        codec: "zstd:1".parse().unwrap(),
        extent_shift: shift,
        dirty: budget.clone(),
        ..Default::default()
    };
    let disk = MemDisk::new();
    let mut a = Container::create(disk.clone(), &opts);
    let page = vec![7u8; 512];
    // One page into each of 10 extents: all wait, nothing compressed yet.
    for i in 0..10u64 {
        a.write(i * ext as u64 + 100, &page).unwrap();
    }
    assert_eq!(a.dirty_bytes(), 10 * ext);
    assert_eq!(budget.used(), 10 * ext);
    // More pages into the same extents merge in memory.
    for i in 0..10u64 {
        a.write(i * ext as u64 + 3000, &page).unwrap();
    }
    assert_eq!(a.dirty_bytes(), 10 * ext, "the same extents, merged");
    // An eleventh extent spends the budget: the writer writes all of its own out.
    a.write(10 * ext as u64 + 5, &page).unwrap();
    assert_eq!(a.dirty_bytes(), 0);
    assert_eq!(budget.used(), 0);
    // Another file sharing the budget holds most of it; `a`'s next partial write finds the
    // budget spent and writes its own out, leaving `b`'s to `b`.
    let disk_b = MemDisk::new();
    let mut b = Container::create(disk_b.clone(), &opts);
    for i in 0..10u64 {
        b.write(i * ext as u64 + 1, &page).unwrap();
    }
    assert_eq!(b.dirty_bytes(), 10 * ext);
    a.write(3, &page).unwrap();
    assert_eq!(a.dirty_bytes(), 0, "over the shared budget: written out");
    assert_eq!(b.dirty_bytes(), 10 * ext);
    // A truncate drops dirty extents from the count; a dropped container gives its share
    // back.
    b.set_size(2 * ext as u64).unwrap();
    assert_eq!(b.dirty_bytes(), 2 * ext);
    drop(b);
    assert_eq!(budget.used(), 0);
    // And everything written reads back, after a flush and a reopen.
    a.fsync().unwrap();
    drop(a);
    let mut a = Container::open(disk, &opts).unwrap();
    for i in 0..10u64 {
        let at = i * ext as u64;
        assert_eq!(a.read(at + 100, 512).unwrap(), page, "extent {i}");
        assert_eq!(a.read(at + 3000, 512).unwrap(), page, "extent {i}");
    }
}

/// The extent cache stays within twice its budget of clean extents whatever writes leave
/// behind: a sequential writer's extents written out (entries it cannot drop until a sync
/// settles them), and a random writer's dirty extents once its fsync has written them.
#[test]
fn written_out_extents_leave_the_cache_within_its_budget() {
    let shift = 12u8;
    let ext = 1usize << shift;
    // Twice the cache's eight clean extents (trimmed back to eight past that), and the
    // covered extents that wait for a batch.
    let most = (16 + WRITE_BATCH - 1) * ext;
    let opts = Options {
        codec: "zstd:1".parse().unwrap(),
        extent_shift: shift,
        dirty: DirtyBudget::new(1 << 30),
        ..Default::default()
    };
    let mut c = Container::create(MemDisk::new(), &opts);
    let data: Vec<u8> = (0..ext).map(|i| (i % 97) as u8).collect();
    // Whole extents, written out a batch at a time.
    for i in 0..2000u64 {
        c.write(i * ext as u64, &data).unwrap();
        assert!(
            c.cached_bytes() <= most,
            "after extent {i}: {} bytes cached",
            c.cached_bytes()
        );
    }
    // Partial writes into every extent: all wait, then the fsync writes them out.
    for i in 0..600u64 {
        c.write(i * ext as u64 + 10, &data[..100]).unwrap();
    }
    assert_eq!(c.dirty_bytes(), 600 * ext);
    c.fsync().unwrap();
    assert_eq!(c.dirty_bytes(), 0);
    assert!(
        c.cached_bytes() <= most,
        "after the fsync: {} bytes cached",
        c.cached_bytes()
    );
}

/// Operations on a small packed file that reclaim rounds move (see
/// `packed_files_moved_by_reclaim_keep_their_change_time`).
fn reclaim_op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..8192u64, 0..8192usize, any::<u8>(), any::<u8>())
            .prop_map(|(off, len, kind, seed)| Op::Write { off, len, kind, seed }),
        3 => Just(Op::Fsync),
        1 => Just(Op::WriteBack),
        1 => Just(Op::Commit),
        4 => any::<bool>().prop_map(Op::Reclaim),
        2 => Just(Op::ForgetTimes),
        2 => Just(Op::Reopen),
        2 => Just(Op::Close),
        2 => (0..16384u64, 0..16384usize).prop_map(|(off, len)| Op::Read { off, len }),
        1 => (0..16384u64).prop_map(Op::SetSize),
        1 => (0..PROP_CODECS.len() as u8 + 1).prop_map(Op::SetCodec),
        1 => any::<bool>().prop_map(Op::SetForce),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    /// A small packed file whose record reclaim rounds replace (version 3, keeping the
    /// change time the file showed) between writes, reads, reopenings and changes of
    /// metadata: it reads as the model says, shows a kept change time exactly while the
    /// record keeps one and the file did not change since, and a crash at any storage
    /// operation leaves a file that opens, reads as a state it had since its last fsync,
    /// and keeps no change time it never showed.
    #[test]
    fn packed_files_moved_by_reclaim_keep_their_change_time(
        ops in prop::collection::vec(reclaim_op_strategy(), 1..40),
        crash_at in 0u64..200,
        reboot_seed in any::<u64>(),
    ) {
        let codec: CodecSpec = "zstd:1".parse().unwrap();
        let disk = MemDisk::new();
        let packs = MemPackDir::new(disk.crash());
        let opts = options(codec, 17, Some(&packs), DEFAULT_DIRTY_BYTES);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        let mut model = Vec::new();
        let mut ahead = Ahead::default();
        let mut moved = 0;
        for op in &ops {
            let ctime = disk.change_time().unwrap().unwrap();
            let kept = kept_after(c.kept_times(), op, c.size().unwrap(), ctime);
            let pack_before = record_state(&disk).unwrap();
            let got = apply_container(&mut c, &disk, &opts, &mut ahead, op).unwrap();
            prop_assert!(kept.contains(&c.kept_times()), "kept {:?} after {:?}, expected one of {:?}", c.kept_times(), op, kept);
            apply_model(&mut model, op);
            if let (Op::Read { off, len }, Some(bytes)) = (op, got) {
                prop_assert_eq!(&bytes[..], expected_read(&model, *off, *len), "read after {:?}", op);
            }
            if let (Op::Reclaim(_), RecordState::Current { loc, .. }, RecordState::Current { loc: now, .. }) =
                (op, pack_before, record_state(&disk).unwrap())
            {
                if now.pack != loc.pack {
                    moved += 1;
                    prop_assert!(now.kept_ctime.is_some(), "moved without keeping the ctime");
                    prop_assert_eq!(now.kept_ctime, loc.kept_ctime.or(Some(ctime)));
                }
            }
        }
        prop_assert_eq!(c.read(0, model.len() + 10).unwrap(), model.clone());
        c.fsync().unwrap();
        let kept = c.kept_times();
        let mut c2 = Container::open(disk.clone(), &opts).unwrap();
        prop_assert_eq!(c2.kept_times(), kept, "reopened");
        prop_assert_eq!(c2.read(0, model.len() + 10).unwrap(), model);
        // (About half of the cases move the file at least once.)
        let _ = moved;

        // The same operations again on a fresh file, crashing at `crash_at`.
        let disk = MemDisk::new();
        let packs = MemPackDir::new(disk.crash());
        let opts = options(codec, 17, Some(&packs), DEFAULT_DIRTY_BYTES);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        c.fsync().unwrap();
        disk.crash_after(crash_at);
        let (since_sync, forces) = until_crash(&mut c, &disk, &opts, &ops)?;
        let mut rand = xorshift(reboot_seed);
        let crash2 = Crash::new();
        let disk2 = disk.reboot_into(&crash2, &mut rand);
        let packs2 = packs.reboot_into(&crash2, &mut rand);
        let opts = options(codec, 17, Some(&packs2), DEFAULT_DIRTY_BYTES);
        let mut c = Container::open(disk2.clone(), &opts).expect("a synced container always opens");
        prop_assert!(plausible_kept(c.kept_times(), &disk2), "kept ctime {:?}", c.kept_times());
        prop_assert!(forces.contains(&c.force_property()), "force {} not had since the last fsync", c.force_property());
        let size = c.size().unwrap();
        prop_assert!(since_sync.iter().any(|s| s.len() as u64 == size), "size {} never existed", size);
        let bytes = c.read(0, size as usize).unwrap();
        prop_assert!(since_sync.contains(&bytes), "contents never existed since the last fsync");
    }
}

/// Operations on a small file, none of which the filesystem would tell as garbage itself
/// (no reclaim, no unlink): whether it left pack garbage is the counters' to say.
fn small_file_op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..8192u64, 1..8192usize, any::<u8>(), any::<u8>())
            .prop_map(|(off, len, kind, seed)| Op::Write { off, len, kind, seed }),
        2 => Just(Op::Fsync),
        2 => Just(Op::Flush),
        2 => Just(Op::WriteBack),
        2 => Just(Op::Commit),
        1 => Just(Op::Settle),
        2 => Just(Op::Reopen),
        2 => Just(Op::Close),
        1 => (0..16384u64, 0..16384usize).prop_map(|(off, len)| Op::Read { off, len }),
        1 => (0..200_000u64).prop_map(Op::SetSize),
        1 => Just(Op::SetSize(0)),
        1 => (0..RECOMPRESS_TARGETS.len() as u8).prop_map(Op::Recompress),
        1 => (0..PROP_CODECS.len() as u8 + 1).prop_map(Op::SetCodec),
        1 => Just(Op::DropCache),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// A small file packed, rewritten, truncated, grown out of its pack and back, reopened
    /// and closed at random: whenever the packs' counters say no garbage was made (an
    /// unmount then skips its walk, `pack::clean`), no pack holds a byte its record does
    /// not name. (Each counter left out in turn made it fail.)
    #[test]
    fn the_packs_counters_tell_every_garbage_a_file_makes(
        ops in prop::collection::vec(small_file_op_strategy(), 1..30),
        shift in prop_oneof![Just(13u8), Just(17u8)],
        synced in any::<bool>(),
    ) {
        let disk = MemDisk::new();
        let packs = MemPackDir::new(disk.crash());
        let opts = options("zstd:1".parse().unwrap(), shift, Some(&packs), DEFAULT_DIRTY_BYTES);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        let mut ahead = Ahead::default();
        for op in &ops {
            apply_container(&mut c, &disk, &opts, &mut ahead, op).unwrap();
        }
        // Or dropped as it is: a file removed while its bytes wait for their record.
        if synced {
            c.fsync().unwrap();
        }
        drop(c);
        garbage_is_told(&packs, opts.packs.as_ref().unwrap(), &disk)?;
    }
}

/// An inline file overwritten by one whole extent: the write goes out at once (a covered
/// extent does not wait), and the superblock holding the old bytes inline must not stay
/// current (it did, and an fsync kept the old bytes: found by
/// `crash_keeps_synced_bytes_and_tears_nothing_else`).
#[test]
fn an_inline_file_overwritten_by_a_whole_extent_keeps_the_new_bytes() {
    for (codec, packed) in [
        ("zstd:1", false),
        ("zstd:2", false),
        ("lz4", true),
        ("none", false),
    ] {
        let codec: CodecSpec = codec.parse().unwrap();
        let disk = MemDisk::new();
        let packs = packed.then(|| MemPackDir::new(disk.crash()));
        let opts = options(codec, 12, packs.as_ref(), 0);
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        let mut ahead = Ahead::default();
        let ops = [
            Op::Write {
                off: 0,
                len: 4096,
                kind: 2,
                seed: 0,
            },
            Op::Fsync,
            Op::Write {
                off: 0,
                len: 4096,
                kind: 0,
                seed: 0,
            },
            Op::Fsync,
        ];
        for op in &ops {
            apply_container(&mut c, &disk, &opts, &mut ahead, op).unwrap();
        }
        let want = payload(4096, 0, 0);
        assert!(c.read(0, 4096).unwrap() == want, "{codec:?} in memory");
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        assert!(c.read(0, 4096).unwrap() == want, "{codec:?} {packed}: reopened");
        let after = Crash::new();
        let disk2 = disk.reboot_into(&after, xorshift(1));
        let opts2 = options(
            codec,
            12,
            packs.map(|d| d.reboot_into(&after, xorshift(2))).as_ref(),
            0,
        );
        let mut c = Container::open(disk2, &opts2).unwrap();
        assert!(
            c.read(0, 4096).unwrap() == want,
            "{codec:?} {packed}: after a crash"
        );
    }
}

/// The model's `Op::Reclaim` does move a loaded packed file and keep its change time (the
/// property test above checks what happens when it does, and counts on this).
#[test]
fn the_model_reclaim_moves_a_loaded_packed_file_keeping_its_change_time() {
    let codec: CodecSpec = "zstd:1".parse().unwrap();
    let disk = MemDisk::new();
    let packs = MemPackDir::new(disk.crash());
    let opts = options(codec, 17, Some(&packs), DEFAULT_DIRTY_BYTES);
    let mut c = Container::open(disk.clone(), &opts).unwrap();
    let mut ahead = Ahead::default();
    for op in [
        Op::Write {
            off: 0,
            len: 3000,
            kind: 0,
            seed: 1,
        },
        Op::Fsync,
    ] {
        apply_container(&mut c, &disk, &opts, &mut ahead, &op).unwrap();
    }
    let ctime = disk.change_time().unwrap().unwrap();
    let RecordState::Current { loc: before, .. } = record_state(&disk).unwrap() else {
        panic!("not packed")
    };
    apply_container(&mut c, &disk, &opts, &mut ahead, &Op::Reclaim(true)).unwrap();
    let RecordState::Current { loc: after, .. } = record_state(&disk).unwrap() else {
        panic!("not packed")
    };
    assert_ne!(after.pack, before.pack, "moved");
    assert_eq!(after.kept_ctime, Some(ctime));
    assert_ne!(disk.change_time().unwrap().unwrap(), ctime);
    assert_eq!(c.kept_times().map(|k| k.ctime), Some(ctime_parts(ctime)));
    assert_eq!(c.read(0, 3000).unwrap(), payload(3000, 0, 1));
    apply_container(&mut c, &disk, &opts, &mut ahead, &Op::ForgetTimes).unwrap();
    assert_eq!(c.kept_times(), None);
    let RecordState::Current { loc, .. } = record_state(&disk).unwrap() else {
        panic!("not packed")
    };
    assert_eq!((loc.kept_ctime, loc.pack), (None, after.pack));
}

/// A packed file emptied and synced, then grown with `SetSize` past bytes it held before
/// it went to its pack: after a crash, the grown tail must read as zeros (or as bytes
/// written since), never as the file's old halves. Found by
/// `crash_keeps_synced_bytes_and_tears_nothing_else`.
#[test]
fn a_packed_file_emptied_then_grown_never_shows_its_old_bytes_after_a_crash() {
    let codec: CodecSpec = "zstd:1".parse().unwrap();
    let shift = 13;
    let ops = [
        Op::Write {
            off: 24576,
            len: 16384,
            kind: 0,
            seed: 0,
        },
        Op::Write {
            off: 8192,
            len: 16384,
            kind: 0,
            seed: 0,
        },
        Op::Write {
            off: 0,
            len: 8192,
            kind: 0,
            seed: 0,
        },
        Op::SetSize(0),
        Op::Fsync,
        Op::SetSize(32769),
        Op::Reopen,
    ];
    for extend_first in [false, true] {
        for crash_at in 0..60u64 {
            for seed in 0..64u64 {
                let disk = MemDisk::new();
                let packs = MemPackDir::new(disk.crash());
                let opts = Options {
                    extend_first,
                    ..options(codec, shift, Some(&packs), DEFAULT_DIRTY_BYTES)
                };
                let mut c = Container::open(disk.clone(), &opts).unwrap();
                c.fsync().unwrap();
                disk.crash_after(crash_at);
                let (since_sync, _) = until_crash(&mut c, &disk, &opts, &ops).unwrap();
                let mut rand = xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let crash2 = Crash::new();
                let disk2 = disk.reboot_into(&crash2, &mut rand);
                let packs2 = packs.reboot_into(&crash2, &mut rand);
                let opts = Options {
                    extend_first,
                    ..options(codec, shift, Some(&packs2), DEFAULT_DIRTY_BYTES)
                };
                let mut c = Container::open(disk2, &opts).expect("a synced container always opens");
                let size = c.size().unwrap();
                assert!(
                    since_sync.iter().any(|s| s.len() as u64 == size),
                    "size {size} never existed"
                );
                if let Ok(bytes) = c.read(0, size as usize) {
                    for (o, &b) in bytes.iter().enumerate() {
                        assert!(
                            had(&since_sync, o, b),
                            "extend_first {extend_first} crash_at {crash_at} seed {seed}: byte {o} = {b} was never written there since the last fsync"
                        );
                    }
                }
            }
        }
    }
}
