//! `squeezefs estimate DIR…`: which codec pays off on this data, before committing to one.
//!
//! Sampling, stratified. Files are grouped by type (their extension) and, within a type,
//! into small files (one extent or less: the unit is the file) and large ones (the unit is
//! one of their extents). Each stratum gets a share of the sample budget in proportion to
//! its bytes, at least [`MIN_PER_TYPE`] units; one with no more units than its share is
//! taken whole (its part of the prediction is then exact). Units are drawn by systematic
//! sampling in tree order (a random start, then every k-th), so the sample is spread over
//! the whole tree.
//!
//! Prediction. Each sampled unit is encoded exactly as the filesystem would write it
//! (heuristic, early abort, inline small files, 4 KiB blocks, superblock; see
//! `squeezefs_container::predict`), with each codec, and decoded again for the speeds. A
//! stratum's disk usage is its number of units times their mean, with the usual variance
//! of that estimate (finite-population corrected); strata add up. The ± is two standard
//! errors (about 95 %).
//!
//! Packing (format 4, the mount's default). The sampled files of each small-file stratum are also
//! packed together, in tree order, into solid blocks as a mount would
//! (`predict::packed`): the stratum's bytes times the blocks' stored/logical quotient is
//! its disk when packed; large files are unchanged. Sampled files of one type stand in for
//! the neighbours they would share blocks with, so this is an estimate, not a bound.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde_json::json;
use squeezefs_codec::CodecSpec;
use squeezefs_container::encode::Policy;
use squeezefs_container::predict;
use squeezefs_container::{Container, FileStorage, Options};

use crate::ui::human;

/// Extents every type gets at least (when it has that many).
pub const MIN_PER_TYPE: usize = 8;

/// Codecs compared when none are named.
/// (zstd:19 is left out: it is slow enough to dominate the run; name it to include it.)
pub const DEFAULT_CODECS: &str = "lz4,lzo,zlib:6,zstd-fast:1,zstd:1,zstd:3,zstd:6,zstd:9,zstd:15";

pub struct Args {
    pub paths: Vec<PathBuf>,
    pub codecs: Vec<CodecSpec>,
    pub extent_shift: u8,
    /// Bytes of extents to sample in all.
    pub budget: u64,
    pub seed: u64,
    pub json: bool,
}

struct File {
    path: PathBuf,
    size: u64,
}

/// Options to open backing files with: packed files need their packs (read only).
fn read_options(packs: &Option<std::sync::Arc<squeezefs_container::pack::Packs>>) -> Options {
    Options {
        packs: packs.clone(),
        ..Options::default()
    }
}

/// One drawn extent.
struct Draw {
    file: usize,
    index: u64,
}

/// Files of one type and size class; `ends[i]` is the number of units in its first i+1
/// files (a unit is a whole file when small, an extent when large).
#[derive(Default)]
struct Stratum {
    files: Vec<usize>,
    ends: Vec<u64>,
    bytes: u64,
    units: u64,
    draws: Vec<Draw>,
    /// Every unit was drawn once: its total is exact.
    census: bool,
}

impl Stratum {
    fn unit(&self, k: u64, files: &[File], e: u64) -> Draw {
        let i = self.ends.partition_point(|&end| end <= k);
        let before = if i == 0 { 0 } else { self.ends[i - 1] };
        let f = self.files[i];
        let index = if files[f].size <= e { 0 } else { k - before };
        Draw { file: f, index }
    }
}

fn type_of(p: &Path) -> String {
    match p.extension().and_then(|e| e.to_str()) {
        Some(e) if e.len() <= 12 => format!(".{}", e.to_ascii_lowercase()),
        _ => "(none)".into(),
    }
}

/// splitmix64: a reproducible stream for the sampling offsets (`--seed`).
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Logical size of a file that may be a container or packed (a backing directory) or plain.
fn logical_size(path: &Path, opts: &Options) -> Option<u64> {
    let f = std::fs::File::open(path).ok()?;
    Container::open(FileStorage::new(f), opts).ok()?.size().ok()
}

fn draw(strata: &mut BTreeMap<String, Stratum>, files: &[File], args: &Args) {
    let e = 1u64 << args.extent_shift;
    let total: u64 = strata.values().map(|t| t.bytes).sum();
    let budget = args.budget.max(e) as f64;
    let mut rng = Rng(args.seed);
    for t in strata.values_mut() {
        // Units this stratum can afford: its share of the budget, in its mean unit size.
        let mean_unit = t.bytes as f64 / t.units as f64;
        let share = (budget * t.bytes as f64 / total.max(1) as f64 / mean_unit).round() as u64;
        let n = share.max(MIN_PER_TYPE as u64);
        if n >= t.units {
            t.census = true;
            t.draws = (0..t.units).map(|k| t.unit(k, files, e)).collect();
            continue;
        }
        let stride = t.units as f64 / n as f64;
        let start = rng.unit() * stride;
        t.draws = (0..n)
            .map(|k| t.unit(((start + k as f64 * stride) as u64).min(t.units - 1), files, e))
            .collect();
    }
}

/// The bytes of one extent (through a container when the file is one).
fn read_extent(file: &File, index: u64, shift: u8, opts: &Options) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(&file.path).map_err(|e| format!("{}: {e}", file.path.display()))?;
    let mut c =
        Container::open(FileStorage::new(f), opts).map_err(|e| format!("{}: {e}", file.path.display()))?;
    c.read(index << shift, 1 << shift)
        .map_err(|e| format!("{}: {e}", file.path.display()))
}

/// One draw under one codec: (stratum, codec index, length, prediction).
type Sampled = (String, usize, u64, predict::Predicted);

#[derive(Clone, Copy, Default)]
struct Acc {
    n: f64,
    sum: f64,
    sum_sq: f64,
    exact: u64,
    bytes: u64,
    encode: Duration,
    decode: Duration,
}

/// The prediction for one codec.
pub struct Row {
    pub codec: CodecSpec,
    pub disk: f64,
    /// The disk with files of at most one extent packed (mount option `pack`).
    pub packed: f64,
    /// Standard error of `disk`.
    pub se: f64,
    pub compress_bps: f64,
    pub decompress_bps: f64,
}

pub fn main(args: Args) -> Result<u8, String> {
    let start = Instant::now();
    let mut files = Vec::new();
    let mut packs = None;
    for p in &args.paths {
        let loc = crate::locate::locate(p)?;
        // The packs of the backing directory (packed files are read from them).
        let root = loc.root.clone().or_else(|| {
            loc.backing
                .ancestors()
                .find(|a| a.join(squeezefs_container::pack::dir::DIR_NAME).is_dir())
                .map(Path::to_path_buf)
        });
        if let (None, Some(root)) = (&packs, root) {
            packs = Some(std::sync::Arc::new(
                squeezefs_container::pack::Packs::new(
                    Box::new(squeezefs_container::pack::FsPackDir::new(&root, false)),
                    false,
                    squeezefs_container::pack::DEFAULT_CACHE,
                )
                .map_err(|e| format!("{}: its packs: {e}", root.display()))?,
            ));
        }
        // Backing files are read directly (also on a mount): those that used a dictionary
        // need it.
        for why in crate::dictdir::load_near(&loc) {
            eprintln!("warning: {why}");
        }
        let md = std::fs::symlink_metadata(&loc.backing).map_err(|e| format!("{}: {e}", p.display()))?;
        let found = if md.is_dir() {
            let mut v = crate::walk::entries(&loc.backing)?;
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        } else {
            vec![(loc.backing.clone(), md)]
        };
        // (An empty backing file may be packed: its size is in its record.)
        for (path, m) in found.into_iter().filter(|(_, m)| m.is_file()) {
            files.push(File { path, size: m.len() });
        }
    }
    let opts = read_options(&packs);
    // Containers' logical sizes (a backing directory): from their superblocks or records.
    files.par_iter_mut().for_each(|f| {
        if let Some(n) = logical_size(&f.path, &opts) {
            f.size = n;
        }
    });
    files.retain(|f| f.size > 0);
    if files.is_empty() {
        return Err("no data to sample: the paths hold no non-empty files".into());
    }
    let e = 1u64 << args.extent_shift;
    let mut types: BTreeMap<String, Stratum> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        let small = f.size <= e;
        let key = format!("{} {}", type_of(&f.path), if small { "small" } else { "large" });
        let t = types.entry(key).or_default();
        t.files.push(i);
        t.bytes += f.size;
        t.units += if small { 1 } else { f.size.div_ceil(e) };
        t.ends.push(t.units);
    }
    draw(&mut types, &files, &args);
    let total_bytes: u64 = types.values().map(|t| t.bytes).sum();
    let draws: Vec<(&str, &Draw)> = types
        .iter()
        .flat_map(|(k, t)| t.draws.iter().map(move |d| (k.as_str(), d)))
        .collect();
    let pb = crate::ui::bar(draws.len() as u64, "estimate");
    if args.json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    type Drawn = (Vec<Sampled>, Option<(String, Vec<u8>)>);
    let results: Vec<Result<Drawn, String>> = draws
        .par_iter()
        .map(|(ty, d)| {
            let f = &files[d.file];
            let data = read_extent(f, d.index, args.extent_shift, &opts)?;
            let out = args
                .codecs
                .iter()
                .enumerate()
                .map(|(ci, codec)| {
                    let policy = Policy::new(*codec, false);
                    let p = predict::extent(policy, args.extent_shift, f.size, d.index, &data);
                    (ty.to_string(), ci, data.len() as u64, p)
                })
                .collect();
            pb.inc(1);
            let small = f.size <= 1 << args.extent_shift;
            Ok((out, small.then(|| (ty.to_string(), data))))
        })
        .collect();
    pb.finish_and_clear();
    let mut acc: BTreeMap<(String, usize), Acc> = BTreeMap::new();
    let mut sampled_bytes = 0u64;
    // Sampled small files by stratum, in tree order (draws are).
    let mut small: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for r in results {
        let (sampled, data) = r?;
        if let Some((ty, d)) = data {
            small.entry(ty).or_default().push(d);
        }
        for (ty, ci, len, p) in sampled {
            if ci == 0 {
                sampled_bytes += len;
            }
            let a = acc.entry((ty, ci)).or_default();
            let y = p.disk as f64;
            a.n += 1.0;
            a.sum += y;
            a.sum_sq += y * y;
            a.exact += p.disk;
            a.bytes += len;
            a.encode += p.encode;
            a.decode += p.decode;
        }
    }
    let rows: Vec<Row> = args
        .codecs
        .iter()
        .enumerate()
        .map(|(ci, codec)| {
            let (mut disk, mut var, mut bytes) = (0.0, 0.0, 0u64);
            let mut packed = 0.0;
            let (mut enc, mut dec) = (Duration::ZERO, Duration::ZERO);
            for (name, t) in &types {
                let a = acc.get(&(name.clone(), ci)).copied().unwrap_or_default();
                bytes += a.bytes;
                enc += a.encode;
                dec += a.decode;
                let stratum_disk = if t.census {
                    a.exact as f64
                } else {
                    let mean = a.sum / a.n;
                    t.units as f64 * mean
                };
                packed += match small.get(name) {
                    Some(sampled) => {
                        let refs: Vec<&[u8]> = sampled.iter().map(Vec::as_slice).collect();
                        let logical: usize = refs.iter().map(|d| d.len()).sum();
                        let stored = predict::packed(*codec, args.extent_shift, &refs);
                        t.bytes as f64 * stored as f64 / logical.max(1) as f64
                    }
                    None => stratum_disk,
                };
                if t.census {
                    disk += a.exact as f64;
                    continue;
                }
                let (n, units) = (a.n, t.units as f64);
                let mean = a.sum / n;
                let s2 = if n > 1.0 {
                    (a.sum_sq - n * mean * mean).max(0.0) / (n - 1.0)
                } else {
                    mean * mean
                };
                disk += units * mean;
                var += units * units * (1.0 - n / units) * s2 / n;
            }
            Row {
                codec: *codec,
                disk,
                packed,
                se: var.sqrt(),
                compress_bps: bytes as f64 / enc.as_secs_f64().max(1e-9),
                decompress_bps: bytes as f64 / dec.as_secs_f64().max(1e-9),
            }
        })
        .collect();
    let secs = start.elapsed().as_secs_f64();
    report(&args, &files, &types, &rows, total_bytes, sampled_bytes, secs);
    Ok(0)
}

/// Ratio and its ± from a disk estimate and its standard error.
fn ratio(total: u64, r: &Row) -> (f64, f64) {
    let ratio = total as f64 / r.disk.max(1.0);
    // d(T/D) = T/D² dD; two standard errors.
    (ratio, 2.0 * total as f64 * r.se / r.disk.max(1.0).powi(2))
}

fn report(
    args: &Args,
    files: &[File],
    types: &BTreeMap<String, Stratum>,
    rows: &[Row],
    total: u64,
    sampled: u64,
    secs: f64,
) {
    let draws: usize = types.values().map(|t| t.draws.len()).sum();
    if args.json {
        let v = json!({
            "files": files.len(),
            "bytes": total,
            "types": types.iter().map(|(k, t)| json!({
                "stratum": k, "files": t.files.len(), "bytes": t.bytes, "units": t.units,
                "sampled": t.draws.len(), "census": t.census,
            })).collect::<Vec<_>>(),
            "extent_size": 1u64 << args.extent_shift,
            "sampled_extents": draws,
            "sampled_bytes": sampled,
            "seconds": secs,
            "codecs": rows.iter().map(|r| {
                let (x, pm) = ratio(total, r);
                json!({
                    "codec": r.codec.to_string(), "disk": r.disk.round() as u64,
                    "disk_stderr": r.se.round() as u64, "ratio": x, "ratio_pm": pm,
                    "disk_packed": r.packed.round() as u64,
                    "ratio_packed": total as f64 / r.packed.max(1.0),
                    "compress_bytes_per_s": r.compress_bps, "decompress_bytes_per_s": r.decompress_bps,
                })
            }).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return;
    }
    println!(
        "Sampled {draws} extents ({}) of {} files ({}) in {} strata (type, small/large), {} extents, in {secs:.1} s.",
        human(sampled),
        files.len(),
        human(total),
        types.len(),
        human(1 << args.extent_shift)
    );
    println!(
        "{:<14} {:>16} {:>12} {:>18} {:>14} {:>14}",
        "codec", "ratio (±95%)", "on disk", "packed (ratio)", "compress/core", "decompress"
    );
    for r in rows {
        let (x, pm) = ratio(total, r);
        println!(
            "{:<14} {:>9.3} ± {:<5.3} {:>11} {:>10} ({:>5.2}) {:>12}/s {:>12}/s",
            r.codec.to_string(),
            x,
            pm,
            human(r.disk.round() as u64),
            human(r.packed.round() as u64),
            total as f64 / r.packed.max(1.0),
            human(r.compress_bps as u64),
            human(r.decompress_bps as u64)
        );
    }
    println!(
        "Speeds are per core on this machine, as the filesystem encodes (heuristic, checksums) \
         and decodes. Set one with `squeezefs property set DIR compression CODEC`. \
         \"packed\": small files packed into shared solid blocks (the mount's default; \
         -o nopack turns it off)."
    );
}
