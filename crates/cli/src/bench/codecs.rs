//! `squeezefs bench codecs`: every codec and level over the user's own files, cut into
//! extents exactly as the filesystem cuts them and run through the filesystem's own encode
//! and decode path (checksums, the "compression must pay" rule, the per-thread contexts).
//! One thread: the figures are per core.

use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use squeezefs_codec::CodecSpec;
use squeezefs_container::encode::{compressed_limit, decode_half, encode_half};

use super::util::{self, median, Corpus};
use crate::ui;

/// The default set: what the users choose between.
pub const DEFAULT_CODECS: &str =
    "none,lz4,lzo,zlib:1,zlib:3,zlib:6,zlib:9,zstd-fast:5,zstd-fast:1,zstd:1,zstd:3,zstd:5,zstd:9,zstd:15,zstd:19";

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    squeezefs bench codecs /var/log\n  \
    squeezefs bench codecs ~/data --codecs lz4,zstd:1,zstd:3 --extent-size 1M --rounds 5\n  \
    squeezefs bench codecs /usr/lib --json > codecs.json\n\n\
    Ratio is logical bytes / stored payload bytes; \"disk\" also counts the 48-byte extent\n\
    header and rounds each extent up to 4 KiB blocks, as it lands on the backing filesystem.\n\
    Speeds are MB/s (10^6 bytes) of logical data on one core, the median of the rounds.\n\
    Workspace is the memory one compression context of that level takes (measured).")]
pub struct CodecsArgs {
    /// Files or directories to read (directories are walked; symlinks are not followed).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Comma-separated ALG[:LEVEL] list.
    #[arg(long, default_value = DEFAULT_CODECS, value_delimiter = ',')]
    pub codecs: Vec<CodecSpec>,
    /// Extent size, as the filesystem's extent_size= option (4K..1M).
    #[arg(long, default_value = "128K", value_parser = util::parse_extent_size)]
    pub extent_size: u8,
    /// Timed rounds per codec (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Read at most this much data from PATHs (K/M/G suffixes).
    #[arg(long, default_value = "64M", value_parser = util::parse_bytes)]
    pub max_bytes: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Clone, Debug)]
pub struct CodecRow {
    pub codec: String,
    pub ratio: f64,
    pub disk_ratio: f64,
    pub compress_mb_s: f64,
    pub decompress_mb_s: f64,
    pub workspace_bytes: u64,
}

#[derive(Serialize)]
pub struct CodecReport {
    pub files: usize,
    pub bytes: u64,
    pub extents: usize,
    pub extent_size: u64,
    pub rounds: u32,
    pub rows: Vec<CodecRow>,
}

/// Bytes the C heap holds right now (all arenas and mmapped chunks).
fn heap_in_use() -> u64 {
    crate::sys::heap_in_use()
}

/// The memory a fresh compression context of `spec` takes: a new thread (so no context is
/// cached yet) compresses one extent into a buffer allocated beforehand.
fn workspace_bytes(spec: CodecSpec, sample: &[u8]) -> u64 {
    if spec.alg == squeezefs_codec::Algorithm::Zstd {
        // zstd contexts come from the shared pool: measure a fresh one directly.
        return squeezefs_codec::workspace::measure(spec.level, sample) as u64;
    }
    let sample = sample.to_vec();
    std::thread::spawn(move || {
        let limit = compressed_limit(sample.len()).unwrap_or(sample.len());
        let mut dst = Vec::with_capacity(limit + 4096);
        let before = heap_in_use();
        let _ = squeezefs_codec::compress(spec, &sample, &mut dst, limit);
        heap_in_use().saturating_sub(before)
    })
    .join()
    .unwrap_or(0)
}

pub fn run_codecs(
    corpus: &Corpus,
    specs: &[CodecSpec],
    shift: u8,
    rounds: u32,
) -> Result<Vec<CodecRow>, String> {
    let extents: Vec<&[u8]> = corpus.extents(shift).collect();
    let logical: u64 = extents.iter().map(|e| e.len() as u64).sum();
    let bar = ui::bar((specs.len() as u64) * rounds as u64, "codecs");
    let mut rows = Vec::new();
    let mut out = vec![0u8; 1 << shift];
    for &spec in specs {
        bar.set_message(spec.to_string());
        let mut halves: Vec<Vec<u8>> = Vec::with_capacity(extents.len());
        let (mut ctimes, mut dtimes) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Compress: what a flush does per extent.
            let t = Instant::now();
            let fresh: Vec<Vec<u8>> = extents
                .iter()
                .enumerate()
                .map(|(i, e)| encode_half(spec, i as u64, 1, e))
                .collect();
            ctimes.push(t.elapsed().as_secs_f64());
            if round == 0 {
                halves = fresh;
            } else {
                drop(fresh);
            }
            // Decompress: what a read of an extent not in the cache does.
            let t = Instant::now();
            for (i, h) in halves.iter().enumerate() {
                decode_half(h, i as u64, shift, &mut out).map_err(|d| format!("{spec}: {d}"))?;
            }
            dtimes.push(t.elapsed().as_secs_f64());
            bar.inc(1);
        }
        // Untimed: every extent must come back byte for byte.
        for (i, (h, e)) in halves.iter().zip(&extents).enumerate() {
            let n =
                decode_half(h, i as u64, shift, &mut out).map_err(|d| format!("{spec}: extent {i}: {d}"))?;
            if &out[..n] != *e {
                return Err(format!("{spec}: extent {i} did not round-trip"));
            }
        }
        let stored: u64 = halves.iter().map(|h| (h.len() - 48) as u64).sum();
        let disk: u64 = halves
            .iter()
            .map(|h| (h.len() as u64).div_ceil(4096) * 4096)
            .sum();
        let mb = logical as f64 / 1e6;
        rows.push(CodecRow {
            codec: spec.to_string(),
            ratio: logical as f64 / stored.max(1) as f64,
            disk_ratio: logical as f64 / disk.max(1) as f64,
            compress_mb_s: mb / median(&mut ctimes),
            decompress_mb_s: mb / median(&mut dtimes),
            workspace_bytes: workspace_bytes(spec, extents.first().copied().unwrap_or(&[])),
        });
    }
    bar.finish_and_clear();
    Ok(rows)
}

pub fn main(args: CodecsArgs) -> Result<(), String> {
    let corpus = Corpus::load(&args.paths, args.max_bytes)?;
    if corpus.bytes() == 0 {
        return Err("no data found under the given paths (empty files and symlinks are skipped)".into());
    }
    let rows = run_codecs(&corpus, &args.codecs, args.extent_size, args.rounds)?;
    let report = CodecReport {
        files: corpus.files(),
        bytes: corpus.bytes(),
        extents: corpus.extents(args.extent_size).count(),
        extent_size: 1 << args.extent_size,
        rounds: args.rounds,
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("serializable"));
        return Ok(());
    }
    println!(
        "{} files, {:.1} MB in {} extents of {} KiB; {} rounds, one thread, median shown",
        report.files,
        report.bytes as f64 / 1e6,
        report.extents,
        report.extent_size / 1024,
        report.rounds
    );
    let mut t = util::Table::new(&[
        "codec",
        "ratio",
        "disk ratio",
        "compress MB/s",
        "decompress MB/s",
        "workspace",
    ]);
    for r in &report.rows {
        t.row(vec![
            r.codec.clone(),
            format!("{:.3}", r.ratio),
            format!("{:.3}", r.disk_ratio),
            format!("{:.1}", r.compress_mb_s),
            format!("{:.1}", r.decompress_mb_s),
            ui::human(r.workspace_bytes),
        ]);
    }
    print!("{t}");
    Ok(())
}
