//! `squeezefs dict train|list`: zstd dictionaries for directories of small files.
//!
//! `train DIR` learns a dictionary from the small files under DIR (on a mount), stores it in
//! the backing directory's `.squeezefs-dicts/` and sets DIR's `dictionary` property (and its
//! subdirectories'), so small zstd data written there from then on is compressed with it.
//! It reports what the dictionary does on files it did not learn from: every 8th file is
//! held out of training and each is encoded, with and without the dictionary, as the
//! filesystem would store it (`container::predict`).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;
use squeezefs_codec::dict::{self, DICT_MAX_INPUT, MAX_DICT_SIZE, MIN_DICT_SIZE};
use squeezefs_codec::{Algorithm, CodecSpec};
use squeezefs_container::dicts;
use squeezefs_container::encode::Policy;
use squeezefs_container::format::DEFAULT_EXTENT_SHIFT;
use squeezefs_container::predict;
use squeezefs_fs::props::{self, Prop};

use crate::args::Output;
use crate::dictdir::dict_dir;
use crate::locate;
use crate::ui::human;

#[derive(Subcommand)]
pub enum DictCmd {
    /// Learn a zstd dictionary from the small files under DIR and make DIR use it.
    #[command(
        long_about = "Trains a zstd dictionary from the files of at most --max-file bytes under \
                      DIR (a directory on a squeezefs mount), stores it in the backing directory \
                      (.squeezefs-dicts/ID.zdict, checksummed), and sets the `dictionary` \
                      property on DIR and every directory below it: small zstd extents and \
                      inline files written there from then on are compressed with it. On a \
                      mount that packs (the default), files of at most one extent go to its \
                      packs instead, which take less than a container per file with the \
                      dictionary: there it serves the extents of larger files. Files \
                      already written keep what they have (`squeezefs compress` rewrites them). \
                      Every 8th file is held out of training; the report compares, on those, the \
                      space taken with and without the dictionary. Dictionaries help files of a \
                      few KiB the most, where zstd alone has too little history to find repeats.",
        after_help = "Examples:\n  squeezefs dict train /mnt/configs\n  \
        squeezefs dict train /mnt/json --size 64K --max-file 16K --json\n  \
        squeezefs compress /mnt/json          # rewrite what is there with it"
    )]
    Train {
        dir: PathBuf,
        /// Largest dictionary size (zstd's default is 110K; 16K … 1M).
        #[arg(long, value_name = "SIZE", default_value = "112K", value_parser = squeezefs_fs::parse_size)]
        size: u64,
        /// Only files up to this size are learnt from (larger ones gain little).
        #[arg(long, value_name = "SIZE", default_value = "128K", value_parser = squeezefs_fs::parse_size)]
        max_file: u64,
        /// Bytes of samples to train on at most (spread over the tree).
        #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = squeezefs_fs::parse_size)]
        sample: u64,
        /// Store the dictionary but set no property.
        #[arg(long)]
        no_set: bool,
        #[command(flatten)]
        out: Output,
    },
    /// List the dictionaries of the squeezefs that PATH is on (mount or backing directory),
    /// with how many files need each (a header scan of the whole backing directory).
    #[command(
        after_help = "Examples:\n  squeezefs dict list /mnt\n  squeezefs dict list /srv/data.sqz --json"
    )]
    List {
        path: PathBuf,
        #[command(flatten)]
        out: Output,
    },
}

/// The zstd codec small files under `dir` get: its compression property, else the mount's.
fn codec_of(dir: &Path, mount: &Path) -> Option<CodecSpec> {
    let own = crate::property::own(dir, Prop::Compression)
        .ok()
        .flatten()
        .and_then(|v| props::parse(Prop::Compression, v.as_bytes()).ok());
    match own {
        Some(props::Value::Codec(c)) => Some(c),
        _ => crate::statsfile::read(mount).ok()?["mount"]["compress"]
            .as_str()?
            .parse()
            .ok(),
    }
}

struct Sample {
    data: Vec<u8>,
    held_out: bool,
}

fn collect(dir: &Path, max_file: u64, budget: u64) -> Result<(Vec<Sample>, u64), String> {
    let mut small: Vec<(PathBuf, u64)> = crate::walk::entries(dir)?
        .into_iter()
        .filter(|(_, m)| m.is_file() && m.len() > 0 && m.len() <= max_file)
        .map(|(p, m)| (p, m.len()))
        .collect();
    small.sort();
    let total: u64 = small.iter().map(|(_, n)| n).sum();
    // Systematic subsample when the files exceed the budget: every k-th, spread over the tree.
    let step = total.div_ceil(budget.max(1)).max(1) as usize;
    let bar = crate::ui::bar((small.len() / step) as u64, "reading");
    let mut out = Vec::new();
    for (i, (p, _)) in small.iter().enumerate().step_by(step) {
        let data = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
        out.push(Sample {
            data,
            held_out: (i / step) % 8 == 7,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((out, small.len() as u64))
}

/// Disk the held-out files would take as containers, without and with dictionary `id`.
fn evaluate(samples: &[Sample], codec: CodecSpec, id: u32) -> (u64, u64, u64) {
    let (mut logical, mut without, mut with) = (0, 0, 0);
    for s in samples.iter().filter(|s| s.held_out) {
        let disk = |dict| {
            let policy = Policy {
                dict,
                ..Policy::new(codec, false)
            };
            let shift = DEFAULT_EXTENT_SHIFT;
            s.data
                .chunks(1 << shift)
                .enumerate()
                .map(|(i, c)| predict::extent(policy, shift, s.data.len() as u64, i as u64, c).disk)
                .sum::<u64>()
        };
        logical += s.data.len() as u64;
        without += disk(None);
        with += disk(Some(id));
    }
    (logical, without, with)
}

#[allow(clippy::too_many_arguments)]
fn train(
    dir: &Path,
    size: u64,
    max_file: u64,
    sample: u64,
    no_set: bool,
    as_json: bool,
) -> Result<(), String> {
    let size = size as usize;
    if !(MIN_DICT_SIZE.max(1024)..=MAX_DICT_SIZE).contains(&size) {
        return Err(format!("--size {size}: accepted 1K … 1M"));
    }
    if !(1..=DICT_MAX_INPUT as u64).contains(&max_file) {
        return Err(format!(
            "--max-file {max_file}: accepted up to {} (larger data is never compressed with a dictionary)",
            human(DICT_MAX_INPUT as u64)
        ));
    }
    if !std::fs::metadata(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .is_dir()
    {
        return Err(format!("{}: not a directory", dir.display()));
    }
    let l = locate::locate(dir)?;
    let (Some(mount), Some(dict_dir)) = (l.mount.clone(), dict_dir(&l)) else {
        return Err(format!(
            "{}: not on a squeezefs mount; mount the backing directory and train on the mounted \
             directory (the property is set through the mount)",
            dir.display()
        ));
    };
    let codec = codec_of(dir, &mount).unwrap_or(CodecSpec::DEFAULT);
    let (samples, small_files) = collect(dir, max_file, sample)?;
    let learn: Vec<&[u8]> = samples
        .iter()
        .filter(|s| !s.held_out)
        .map(|s| s.data.as_slice())
        .collect();
    if learn.len() < 16 {
        return Err(format!(
            "{}: only {} files of at most {} under it; a dictionary needs dozens of small files \
             to learn from",
            dir.display(),
            small_files,
            human(max_file)
        ));
    }
    let learnt: u64 = learn.iter().map(|s| s.len() as u64).sum();
    let spinner = crate::ui::bar(1, "training");
    let t = std::time::Instant::now();
    let bytes = dict::train(&learn, size).map_err(|e| format!("{}: {e}", dir.display()))?;
    spinner.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    let id = dicts::store(&dict_dir, &bytes).map_err(|e| format!("{}: {e}", dict_dir.display()))?;
    dict::register(&bytes).map_err(|e| e.to_string())?;
    let eval_codec = if codec.alg == Algorithm::Zstd {
        codec
    } else {
        CodecSpec::DEFAULT
    };
    let (held, without, with) = evaluate(&samples, eval_codec, id);
    let mut dirs_set = 0u64;
    if !no_set {
        let value = id.to_string();
        crate::property::set_one(dir, Prop::Dictionary, &value, false)?;
        dirs_set += 1;
        for (p, m) in crate::walk::entries(dir)? {
            if m.is_dir() {
                crate::property::set_one(&p, Prop::Dictionary, &value, true)?;
                dirs_set += 1;
            }
        }
    }
    let ratio = |disk: u64| if disk == 0 { 0.0 } else { held as f64 / disk as f64 };
    if as_json {
        let doc = json!({
            "id": id,
            "path": dict_dir.join(format!("{id}.zdict")).display().to_string(),
            "size": bytes.len(),
            "trained_on": { "files": learn.len(), "bytes": learnt, "seconds": secs },
            "held_out": { "files": samples.iter().filter(|s| s.held_out).count(), "bytes": held,
                          "codec": eval_codec.to_string(),
                          "disk_without": without, "disk_with": with,
                          "ratio_without": ratio(without), "ratio_with": ratio(with) },
            "directories_set": dirs_set,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    } else {
        println!(
            "dictionary {id}: {} learnt from {} files ({}) in {secs:.1} s",
            human(bytes.len() as u64),
            learn.len(),
            human(learnt)
        );
        println!("stored as {}", dict_dir.join(format!("{id}.zdict")).display());
        println!(
            "on {} files held out of training ({}), as {eval_codec}:",
            samples.iter().filter(|s| s.held_out).count(),
            human(held)
        );
        println!(
            "  without dictionary  {:>10}  ratio {:.2}",
            human(without),
            ratio(without)
        );
        println!(
            "  with dictionary     {:>10}  ratio {:.2}",
            human(with),
            ratio(with)
        );
        if codec.alg != Algorithm::Zstd {
            println!(
                "note: {} is compressed with {codec}; dictionaries apply to zstd only \
                 (squeezefs property set {} compression zstd:3)",
                dir.display(),
                dir.display()
            );
        }
        if no_set {
            println!("no property set (--no-set): squeezefs property set DIR dictionary {id}");
        } else {
            println!(
                "set as the dictionary of {} and {} directories below it: new files there use it \
                 (on a mount that packs, files of at most one extent are packed instead)",
                dir.display(),
                dirs_set - 1
            );
        }
    }
    Ok(())
}

fn list(path: &Path, as_json: bool) -> Result<(), String> {
    let l = locate::locate(path)?;
    let dir = dict_dir(&l);
    // Which files need each dictionary: a header scan of the whole squeezefs (like `stats`),
    // or of PATH when no dictionary directory is found above it.
    let root = match &dir {
        Some(d) => d.parent().unwrap_or(d).to_path_buf(),
        None => l.backing.clone(),
    };
    let users = crate::stats::path::scan(&[root], false, false)?.dict_users;
    let mut rows = Vec::new();
    let mut names: Vec<PathBuf> = dir
        .as_ref()
        .and_then(|d| std::fs::read_dir(d).ok())
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    for p in names
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "zdict"))
    {
        let file = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        // A damaged file is still known by its name.
        let named = p
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u32>().ok());
        let (id, size, state) = match dicts::decode(&file) {
            Ok((id, b)) => (Some(id), b.len(), "ok".to_string()),
            Err(e) => (named, file.len(), e),
        };
        let files = id.map_or(0, |i| users.get(&i).copied().unwrap_or(0));
        rows.push(json!({ "id": id, "size": size, "files": files, "path": p.display().to_string(), "state": state }));
    }
    // Dictionaries files need but that are not there (deleted, or files copied in from
    // another squeezefs).
    let missing: Vec<u32> = users
        .keys()
        .copied()
        .filter(|i| !rows.iter().any(|r| r["id"].as_u64() == Some(u64::from(*i))))
        .collect();
    for i in &missing {
        rows.push(json!({ "id": i, "size": 0, "files": users[i], "path": null, "state": "missing" }));
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
        return Ok(());
    }
    println!("{:>12}  {:>10}  {:>8}  state  path", "id", "size", "files");
    for r in &rows {
        println!(
            "{:>12}  {:>10}  {:>8}  {}  {}",
            r["id"].as_u64().map_or("?".into(), |i| i.to_string()),
            human(r["size"].as_u64().unwrap_or(0)),
            r["files"].as_u64().unwrap_or(0),
            r["state"].as_str().unwrap_or(""),
            r["path"].as_str().unwrap_or("")
        );
    }
    if !missing.is_empty() {
        println!(
            "MISSING: files need dictionaries that are not in {}: {} (they read as EIO; restore \
             the .zdict files from a backup)",
            dir.as_ref()
                .map_or_else(|| dicts::DIR_NAME.to_string(), |d| d.display().to_string()),
            missing
                .iter()
                .map(|i| format!("{i} ({} files)", users[i]))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!("A dictionary used by files must stay: without it they cannot be read.");
    Ok(())
}

pub fn main(cmd: DictCmd) -> Result<(), String> {
    match cmd {
        DictCmd::Train {
            dir,
            size,
            max_file,
            sample,
            no_set,
            out,
        } => train(&dir, size, max_file, sample, no_set, out.json),
        DictCmd::List { path, out } => list(&path, out.json),
    }
}
