//! The live statistics file: `MOUNTPOINT/.squeezefs-stats`, read-only, hidden from readdir,
//! answered from the daemon's counters at each open (read with `squeezefs stats --live`).
//! Its content is one JSON document; `STATS_FORMAT` versions its shape.

use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};
use serde_json::{json, Value};
use squeezefs_codec::workspace;
use squeezefs_container::Options;

/// The file's name at the mount root.
pub const NAME: &str = ".squeezefs-stats";
/// Its inode number: never handed out to a backing entry (those count up from 2).
pub const INO: u64 = u64::MAX - 1;
/// Version of the JSON document's shape.
pub const STATS_FORMAT: u32 = 1;

/// The attributes of the stats file (size 0, like /proc files: it is read with direct I/O).
pub fn attr(uid: u32, gid: u32) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(INO),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0o444,
        nlink: 1,
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The document: mount settings, the container counters and the workspace pool.
pub fn render(backing: &str, opts: &Options, read_only: bool) -> Vec<u8> {
    let s = opts.stats.snapshot();
    let pool = workspace::global().stats();
    let codecs: Vec<Value> = s
        .codecs
        .iter()
        .map(|(spec, c)| {
            json!({
                "codec": spec.to_string(),
                "extents": c.extents,
                "bytes_in": c.bytes_in,
                "bytes_out": c.bytes_out,
                "ratio": if c.bytes_out > 0 { c.bytes_in as f64 / c.bytes_out as f64 } else { 0.0 },
            })
        })
        .collect();
    let levels: Vec<Value> = pool
        .levels
        .iter()
        .map(|l| {
            json!({
                "level": l.level, "idle": l.idle, "busy": l.busy,
                "bytes": l.bytes, "estimate": l.estimate,
            })
        })
        .collect();
    let c = pool.counters;
    let doc = json!({
        "format": STATS_FORMAT,
        "mount": {
            "backing": backing,
            "compress": opts.codec.to_string(),
            "force": opts.force,
            "extent_size": 1u64 << opts.extent_shift,
            "read_only": read_only,
        },
        "extents": {
            "compressed": s.extents_compressed,
            "raw": s.extents_raw,
            "hole": s.extents_hole,
            "raw_bytes": s.raw_bytes,
        },
        "raw_because": {
            "no_gain": s.raw_no_gain,
            "heuristic": s.raw_heuristic,
            "backoff": s.raw_backoff,
            "early_abort": s.raw_early_abort,
            "no_codec_or_too_small": s.raw_by_choice,
        },
        "early_abort": {
            "lz4_pass": s.probe_lz4_pass,
            "zstd1_pass": s.probe_zstd1_pass,
            "aborted": s.raw_early_abort,
        },
        "heuristic_overruled": s.heuristic_overruled,
        "files": {
            "inline": s.inline_files,
            "flagged_incompressible": s.files_flagged,
            "unflagged": s.files_unflagged,
        },
        "checksum_errors": s.checksum_errors,
        "dictionaries": {
            "loaded": squeezefs_codec::dict::loaded(),
            "extents": s.dict_extents,
            "bytes_in": s.dict_bytes_in,
            "bytes_out": s.dict_bytes_out,
            "inline_files": s.dict_inline_files,
        },
        "codecs": codecs,
        "workspaces": {
            "max": pool.max_workspaces,
            "count": pool.total,
            "bytes": pool.bytes,
            "peak_count": pool.peak_total,
            "peak_bytes": pool.peak_bytes,
            "reclaim_after_s": pool_reclaim_secs(),
            "levels": levels,
            "allocated": c.allocated,
            "reused": c.reused,
            "borrowed": c.borrowed,
            "waited": c.waited,
            "alloc_failed": c.alloc_failed,
            "reclaimed": c.reclaimed,
            "evicted": c.evicted,
        },
    });
    let mut out = serde_json::to_vec_pretty(&doc).expect("json");
    out.push(b'\n');
    out
}

fn pool_reclaim_secs() -> u64 {
    workspace::global().config().reclaim_after.as_secs()
}
