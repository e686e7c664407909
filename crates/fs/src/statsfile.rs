//! The live statistics file: `MOUNTPOINT/.squeezefs-stats`, read-only, hidden from readdir,
//! answered from the daemon's counters at each open (read with `squeezefs stats --live`).
//! Its content is one JSON document; `STATS_FORMAT` versions its shape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};
use serde_json::{json, Value};
use squeezefs_codec::workspace;
use squeezefs_container::pack::{PackCounters, Packs};
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

/// The `packs` object: whether this mount packs new files, the counters of its packs
/// (reads count even when it does not pack: files packed before are read from them) and
/// their block cache (`cache_size`, the most it keeps; `cache_bytes`, what it holds now).
/// Without packs (never on a mount), all zero.
fn packs(packs: Option<&Packs>) -> Value {
    let none = PackCounters::default();
    let (packing, c, cache_size, cache_bytes) = match packs {
        Some(p) => (p.writable(), &p.counters, p.cache_capacity(), p.cache_bytes()),
        None => (false, &none, 0, 0),
    };
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    json!({
        "packing": packing,
        "files_packed": get(&c.files_packed),
        "blocks_written": get(&c.blocks_written),
        "bytes_in": get(&c.bytes_in),
        "bytes_stored": get(&c.bytes_stored),
        "blocks_read": get(&c.blocks_read),
        "cache_hits": get(&c.cache_hits),
        "bytes_reclaimed": get(&c.bytes_reclaimed),
        "cache_size": cache_size,
        "cache_bytes": cache_bytes,
    })
}

/// The document: mount settings, the container counters, the packs, the requests answered
/// (`requests`: how many of each kind, `request_us`: the daemon's time answering them), the
/// pages handed to the kernel (`page_cache`), the bytes written but not compressed yet
/// (`dirty`: held now, the mount's budget, the write-behind's delay), the group commit
/// (`commit`: superblocks committed, syncs issued), the adaptive level (`adapt`, null
/// unless `compress=zstd:adapt`: its range, level now, moves down and up, the share of
/// time spent compressing in its last deciding window), the daemon's own parts in `parts`
/// (`spin`, the spin on /dev/fuse: its window, how many bursts of requests started one,
/// whether one runs now; `background`, the background pass: `crate::background`) and the
/// workspace pool.
pub fn render(
    backing: &str,
    opts: &Options,
    read_only: bool,
    requests: (Value, Value),
    page_cache: Value,
    commit: Value,
    parts: Vec<(&'static str, Value)>,
) -> Vec<u8> {
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
    let mut doc = json!({
        "format": STATS_FORMAT,
        "mount": {
            "backing": backing,
            "compress": opts.compress_name(),
            "force": opts.force,
            "extent_size": 1u64 << opts.extent_shift,
            // What a new file written whole from its start takes past one such extent
            // (null: `extent_size=` was given).
            "whole_file_extent_size": opts.grow_extent_shift.map(|s| 1u64 << s),
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
            "content_type": s.raw_content_type,
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
            "grown_to_largest_extents": s.files_grown,
            "flagged_incompressible": s.files_flagged,
            "unflagged": s.files_unflagged,
        },
        "checksum_errors": s.checksum_errors,
        "batch_copies_used": s.batch_copies_used,
        "copied": {
            "extents": s.extents_copied,
            "bytes": s.copied_logical,
            "stored_bytes": s.copied_stored,
            "shared_bytes": s.copied_shared,
        },
        "reads": {
            "extents_loaded": s.extents_loaded,
            "ahead_installed": s.ahead_installed,
            "ahead_discarded": s.ahead_discarded,
        },
        "dictionaries": {
            "loaded": squeezefs_codec::dict::loaded(),
            "extents": s.dict_extents,
            "bytes_in": s.dict_bytes_in,
            "bytes_out": s.dict_bytes_out,
            "inline_files": s.dict_inline_files,
        },
        "codecs": codecs,
        "packs": packs(opts.packs.as_deref()),
        "requests": requests.0,
        "request_us": requests.1,
        "page_cache": page_cache,
        "commit": commit,
        "adapt": opts.adapt.as_ref().map(|a| {
            let a = a.snapshot();
            json!({
                "min": a.min, "max": a.max, "level": a.level,
                "lowered": a.lowered, "raised": a.raised,
                "busy": (a.busy * 1000.0).round() / 1000.0,
            })
        }),
        "dirty": {
            "bytes": opts.dirty.used(),
            "max": opts.dirty.limit(),
            "expire_s": opts.dirty.expire().as_secs(),
        },
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
    for (name, part) in parts {
        doc[name] = part;
    }
    let mut out = serde_json::to_vec_pretty(&doc).expect("json");
    out.push(b'\n');
    out
}

fn pool_reclaim_secs() -> u64 {
    workspace::global().config().reclaim_after.as_secs()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use squeezefs_codec::CodecSpec;
    use squeezefs_container::pack::MemPackDir;
    use squeezefs_container::sim::Crash;

    use super::*;

    fn doc(opts: &Options) -> Value {
        serde_json::from_slice(&render(
            "/b",
            opts,
            false,
            (Value::Null, Value::Null),
            Value::Null,
            Value::Null,
            vec![("spin", Value::Null)],
        ))
        .unwrap()
    }

    #[test]
    fn the_document_carries_the_pack_counters() {
        let packs = Arc::new(Packs::new(Box::new(MemPackDir::new(&Crash::new())), true, 1 << 20).unwrap());
        let opts = Options {
            packs: Some(packs.clone()),
            ..Options::default()
        };
        let p = doc(&opts)["packs"].clone();
        assert_eq!(p["packing"], true, "{p}");
        assert_eq!(p["cache_size"], 1 << 20, "{p}");
        assert_eq!(p["files_packed"], 0, "{p}");
        let slot = packs.append(CodecSpec::DEFAULT, 17, &[7u8; 5000]).unwrap();
        packs.durable(&slot).unwrap();
        let p = doc(&opts)["packs"].clone();
        assert_eq!(
            (&p["files_packed"], &p["blocks_written"], &p["bytes_in"]),
            (&1.into(), &1.into(), &5000.into())
        );
        assert!(p["bytes_stored"].as_u64().unwrap() < 5000, "{p}");
        for key in ["blocks_read", "cache_hits", "bytes_reclaimed"] {
            assert_eq!(p[key], 0, "{key}: {p}");
        }
        // The block just written is in the cache (what the next reads want).
        assert_eq!(p["cache_bytes"], 5000, "{p}");

        // Read-only packs: not packing, the same fields.
        let ro = Options {
            packs: Some(Arc::new(
                Packs::new(Box::new(MemPackDir::new(&Crash::new())), false, 4096).unwrap(),
            )),
            ..Options::default()
        };
        let p = doc(&ro)["packs"].clone();
        assert_eq!(
            (&p["packing"], &p["cache_size"]),
            (&false.into(), &4096.into()),
            "{p}"
        );
        let p = doc(&Options::default())["packs"].clone();
        assert_eq!(p["packing"], false, "{p}");
        assert_eq!(p.as_object().unwrap().len(), 10, "{p}");
    }
}
