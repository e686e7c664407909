//! `squeezefs bench fs`: the seeds' two workloads on squeezefs, kernel btrfs with
//! `compress-force=` the same codec, btrfs without compression and the host filesystem,
//! side by side in one run.
//!
//! * corpus: copy a directory in N times, make it durable (unmount + sync), mount again
//!   with cold caches, read everything back.
//! * tarball: copy a .tar in, extract it with tar(1) inside the filesystem, read the tree;
//!   each step made durable and the caches dropped before the next.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use squeezefs_codec::CodecSpec;

use super::plot;
use super::report::{FsReport, FsRow};
use super::targets::{syncfs, Kind, Target};
use super::util::{self, walk};
use crate::ui;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    sudo squeezefs bench fs --corpus bench-data/corpus --tarball bench-data/linux-source-6.1.tar.xz\n  \
    squeezefs bench fs --corpus ~/logs --codecs zstd:1,zstd:9 --no-btrfs\n\n\
    Ratio: logical bytes / bytes on disk (squeezefs and the host: du of the directory;\n\
    btrfs: data + metadata + system used, from `btrfs filesystem df`). Write times run until\n\
    the data is durable on the host disk (unmount, then syncfs); reads start from a fresh\n\
    mount with the kernel caches dropped. A compressed tarball (.xz, .gz, .zst) is\n\
    decompressed once beforehand so the timings measure the filesystems, not xz.\n\
    The btrfs side and cache dropping need root; without it they are skipped, with a note.\n\
    scripts/bench-data builds the corpus and fetches the Linux tarball (see docs/BENCHMARKS.md).")]
pub struct FsArgs {
    /// A directory of mixed files, copied in --copies times.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// How many copies of the corpus to write.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub copies: u32,
    /// A source tarball (.tar, .tar.xz, .tar.gz, .tar.zst) to copy in and extract.
    #[arg(long)]
    pub tarball: Option<PathBuf>,
    /// Codecs to compare (each runs on squeezefs, and on btrfs when btrfs has it).
    #[arg(long, default_value = "zstd:1,zstd:3", value_delimiter = ',')]
    pub codecs: Vec<CodecSpec>,
    /// Scratch directory for backing directories and btrfs images (on the host filesystem).
    #[arg(long, default_value = "/var/tmp/squeezefs-bench")]
    pub work: PathBuf,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "bench-fs.json")]
    pub json: PathBuf,
    /// Where to draw the plot (ratio against write and read MB/s).
    #[arg(long, default_value = "bench-fs.png")]
    pub png: PathBuf,
    /// Skip kernel btrfs.
    #[arg(long)]
    pub no_btrfs: bool,
    /// Skip btrfs without compression and the host filesystem.
    #[arg(long)]
    pub no_baselines: bool,
}

const BUF: usize = 1 << 20;

/// Copies a tree like `cp -r` without reflinks or copy offload: read and write 1 MiB at a
/// time. Returns bytes copied.
pub fn copy_tree(src: &Path, dst: &Path) -> Result<u64, String> {
    let mut buf = vec![0u8; BUF];
    let mut total = 0;
    let mut stack = vec![(src.to_path_buf(), dst.to_path_buf())];
    while let Some((s, d)) = stack.pop() {
        let md = std::fs::symlink_metadata(&s).map_err(|e| format!("{}: {e}", s.display()))?;
        if md.is_dir() {
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            for e in std::fs::read_dir(&s).map_err(|e| format!("{}: {e}", s.display()))? {
                let e = e.map_err(|e| format!("{}: {e}", s.display()))?;
                stack.push((e.path(), d.join(e.file_name())));
            }
        } else if md.file_type().is_symlink() {
            let t = std::fs::read_link(&s).map_err(|e| format!("{}: {e}", s.display()))?;
            std::os::unix::fs::symlink(t, &d).map_err(|e| format!("{}: {e}", d.display()))?;
        } else if md.is_file() {
            total += copy_file(&s, &d, &mut buf)?;
        }
    }
    Ok(total)
}

fn copy_file(s: &Path, d: &Path, buf: &mut [u8]) -> Result<u64, String> {
    let mut r = std::fs::File::open(s).map_err(|e| format!("{}: {e}", s.display()))?;
    let mut w = std::fs::File::create(d).map_err(|e| format!("{}: {e}", d.display()))?;
    let mut n = 0;
    loop {
        let k = r.read(buf).map_err(|e| format!("{}: {e}", s.display()))?;
        if k == 0 {
            return Ok(n);
        }
        w.write_all(&buf[..k])
            .map_err(|e| format!("{}: {e}", d.display()))?;
        n += k as u64;
    }
}

/// Reads every file under `root` once; returns the bytes read.
pub fn read_tree(root: &Path) -> Result<u64, String> {
    let mut buf = vec![0u8; BUF];
    let mut total = 0;
    for p in walk(&[root.to_path_buf()])? {
        let mut f = std::fs::File::open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        loop {
            let k = f.read(&mut buf).map_err(|e| format!("{}: {e}", p.display()))?;
            if k == 0 {
                break;
            }
            total += k as u64;
        }
    }
    Ok(total)
}

fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(T, f64), String> {
    let t = Instant::now();
    let r = f()?;
    Ok((r, t.elapsed().as_secs_f64()))
}

fn fs_name(p: &Path) -> String {
    let Ok(s) = nix::sys::statfs::statfs(p) else {
        return "host".into();
    };
    match s.filesystem_type().0 as u32 {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794C_7630 => "overlayfs",
        _ => "host",
    }
    .into()
}

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {} RAM, Linux {}",
        ui::human(mem),
        kernel.trim()
    )
}

fn today() -> String {
    let out = Command::new("date").arg("+%Y-%m-%d").output();
    out.ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A plain .tar to extract: the given one, or one decompressed once into `work`.
fn plain_tar(tarball: &Path, work: &Path) -> Result<PathBuf, String> {
    let name = tarball
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("source.tar");
    let tool = if name.ends_with(".xz") {
        "xz"
    } else if name.ends_with(".gz") {
        "gzip"
    } else if name.ends_with(".zst") {
        "zstd"
    } else {
        return Ok(tarball.to_path_buf());
    };
    let out = work.join(name.rsplit_once('.').map_or(name, |(a, _)| a));
    if out.exists() {
        return Ok(out);
    }
    eprintln!("decompressing {} once (not timed)", tarball.display());
    let tmp = out.with_extension("partial");
    let f = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let st = Command::new(tool)
        .args(["-dc"])
        .arg(tarball)
        .stdout(f)
        .status()
        .map_err(|e| format!("{tool}: {e}"))?;
    if !st.success() {
        return Err(format!("{tool} -dc {} failed: {st}", tarball.display()));
    }
    std::fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(out)
}

struct Ctx<'a> {
    args: &'a FsArgs,
    exe: PathBuf,
    host: String,
    image_size: u64,
}

fn corpus_run(ctx: &Ctx, kind: Kind, corpus: &Path) -> Result<FsRow, String> {
    let mut t = Target::create(kind, &ctx.args.work, &ctx.exe, ctx.image_size)?;
    let (logical, w) = timed(|| {
        let mut n = 0;
        for i in 0..ctx.args.copies {
            n += copy_tree(corpus, &t.mnt.join(format!("corpus-{i}")))?;
        }
        t.finish_writes()?;
        Ok(n)
    })?;
    t.remount_cold()?;
    let disk = t.disk_bytes()?;
    let (back, r) = timed(|| read_tree(&t.mnt))?;
    if back != logical {
        return Err(format!(
            "{}: read back {back} bytes of {logical}",
            t.kind.name(&ctx.host)
        ));
    }
    let name = t.kind.name(&ctx.host);
    let rss = {
        let r = t.peak_rss;
        t.destroy()?;
        r
    };
    let mb = logical as f64 / 1e6;
    Ok(FsRow {
        workload: format!("corpus x{}", ctx.args.copies),
        method: name,
        logical_bytes: logical,
        disk_bytes: disk,
        ratio: logical as f64 / disk.max(1) as f64,
        steps: vec![("write".into(), w), ("read".into(), r)],
        write_mb_s: mb / w,
        read_mb_s: mb / r,
        daemon_peak_rss: rss,
    })
}

fn tarball_run(ctx: &Ctx, kind: Kind, tar: &Path) -> Result<FsRow, String> {
    let mut t = Target::create(kind, &ctx.args.work, &ctx.exe, ctx.image_size)?;
    let mut buf = vec![0u8; BUF];
    let inside = t.mnt.join("linux.tar");
    let (tar_len, copy_s) = timed(|| {
        let n = copy_file(tar, &inside, &mut buf)?;
        t.finish_writes()?;
        Ok(n)
    })?;
    t.remount_cold()?;
    let src = t.mnt.join("src");
    let ((), extract_s) = timed(|| {
        std::fs::create_dir(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let out = Command::new("tar")
            .arg("-xf")
            .arg(t.mnt.join("linux.tar"))
            .arg("-C")
            .arg(&src)
            .output()
            .map_err(|e| format!("tar: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "tar -xf in {}: {}",
                t.kind.name(&ctx.host),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        t.finish_writes()
    })?;
    t.remount_cold()?;
    let disk = t.disk_bytes()?;
    let (tree, read_s) = timed(|| read_tree(&t.mnt.join("src")))?;
    let name = t.kind.name(&ctx.host);
    let rss = t.peak_rss;
    t.destroy()?;
    let logical = tar_len + tree;
    Ok(FsRow {
        workload: "linux tarball".into(),
        method: name,
        logical_bytes: logical,
        disk_bytes: disk,
        ratio: logical as f64 / disk.max(1) as f64,
        steps: vec![
            ("copy".into(), copy_s),
            ("extract".into(), extract_s),
            ("read tree".into(), read_s),
        ],
        write_mb_s: (tar_len + tree) as f64 / 1e6 / (copy_s + extract_s),
        read_mb_s: tree as f64 / 1e6 / read_s,
        daemon_peak_rss: rss,
    })
}

fn print_rows(rows: &[FsRow]) {
    let mut workloads: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        let sel: Vec<&FsRow> = rows.iter().filter(|r| r.workload == w).collect();
        println!("\n{w}: {:.1} MB logical", sel[0].logical_bytes as f64 / 1e6);
        let mut head = vec!["method", "ratio"];
        let steps: Vec<String> = sel[0].steps.iter().map(|(n, _)| format!("{n} s")).collect();
        head.extend(steps.iter().map(|s| s.as_str()));
        head.extend(["write MB/s", "read MB/s", "daemon RSS"]);
        let mut t = util::Table::new(&head);
        for r in &sel {
            let mut cells = vec![r.method.clone(), format!("{:.3}", r.ratio)];
            cells.extend(r.steps.iter().map(|(_, s)| format!("{s:.2}")));
            cells.push(format!("{:.1}", r.write_mb_s));
            cells.push(format!("{:.1}", r.read_mb_s));
            cells.push(if r.daemon_peak_rss > 0 {
                ui::human(r.daemon_peak_rss)
            } else {
                "-".into()
            });
            t.row(cells);
        }
        print!("{t}");
        // squeezefs against btrfs with the same codec: > 1 is better for squeezefs.
        for r in sel.iter().filter(|r| r.method.starts_with("squeezefs ")) {
            let codec = &r.method["squeezefs ".len()..];
            if let Some(b) = sel.iter().find(|b| b.method == format!("btrfs {codec}")) {
                let speed: Vec<String> = r
                    .steps
                    .iter()
                    .zip(&b.steps)
                    .map(|((n, s), (_, bs))| format!("{n} x{:.2}", bs / s))
                    .collect();
                println!(
                    "  squeezefs/btrfs {codec}: ratio x{:.3}, speed (btrfs time / squeezefs time): {}",
                    r.ratio / b.ratio,
                    speed.join(", ")
                );
            }
        }
    }
}

pub fn main(args: FsArgs) -> Result<(), String> {
    if args.corpus.is_none() && args.tarball.is_none() {
        return Err("nothing to run: give --corpus DIR and/or --tarball FILE".into());
    }
    std::fs::create_dir_all(&args.work).map_err(|e| format!("{}: {e}", args.work.display()))?;
    let root = nix::unistd::geteuid().is_root();
    let mut notes = Vec::new();
    let mut use_btrfs = !args.no_btrfs;
    if use_btrfs && !root {
        notes.push("btrfs side skipped: mounting a loop image needs root (run with sudo)".to_string());
        use_btrfs = false;
    }
    if use_btrfs && Command::new("mkfs.btrfs").arg("--version").output().is_err() {
        notes.push("btrfs side skipped: mkfs.btrfs not found (install btrfs-progs)".to_string());
        use_btrfs = false;
    }
    if !root {
        notes.push("caches not dropped between writing and reading (needs root)".to_string());
    }
    let mut kinds = Vec::new();
    for &c in &args.codecs {
        kinds.push(Kind::Squeezefs(c));
        if use_btrfs {
            match Kind::btrfs_codec(c) {
                Some(_) => kinds.push(Kind::Btrfs(Some(c))),
                None => notes.push(format!("btrfs has no {c}: squeezefs only")),
            }
        }
    }
    if !args.no_baselines {
        if use_btrfs {
            kinds.push(Kind::Btrfs(None));
        }
        kinds.push(Kind::Host);
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding the squeezefs binary: {e}"))?;
    let host = fs_name(&args.work);
    // Inputs: sizes decide the btrfs image (sparse, so only what is used costs).
    let tar = match &args.tarball {
        Some(t) => Some(plain_tar(t, &args.work)?),
        None => None,
    };
    let corpus_bytes = match &args.corpus {
        Some(c) => walk(std::slice::from_ref(c))?
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum(),
        None => 0,
    };
    let tar_bytes = tar
        .as_ref()
        .and_then(|t| std::fs::metadata(t).ok())
        .map_or(0, |m| m.len());
    let need = (corpus_bytes * args.copies as u64).max(tar_bytes * 2);
    let ctx = Ctx {
        args: &args,
        exe,
        host: host.clone(),
        image_size: (need * 3).max(1 << 30),
    };
    for n in &notes {
        eprintln!("note: {n}");
    }
    let mut rows = Vec::new();
    let runs = kinds.len() * (args.corpus.is_some() as usize + tar.is_some() as usize);
    let bar = ui::bar(runs as u64, "bench fs");
    if let Some(c) = &args.corpus {
        for k in &kinds {
            bar.set_message(format!("corpus on {}", k.name(&host)));
            rows.push(corpus_run(&ctx, k.clone(), c)?);
            bar.inc(1);
        }
    }
    if let Some(t) = &tar {
        for k in &kinds {
            bar.set_message(format!("tarball on {}", k.name(&host)));
            rows.push(tarball_run(&ctx, k.clone(), t)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let _ = syncfs(&args.work);
    let report = FsReport {
        date: today(),
        machine: machine(),
        host_fs: host,
        caches_dropped: root,
        notes,
        rows,
    };
    println!("{} on {} ({})", report.date, report.machine, report.host_fs);
    for n in &report.notes {
        println!("note: {n}");
    }
    print_rows(&report.rows);
    let json = serde_json::to_string_pretty(&report).expect("serializable");
    std::fs::write(&args.json, json + "\n").map_err(|e| format!("{}: {e}", args.json.display()))?;
    plot::draw(&report, &args.png)?;
    println!("\nwrote {} and {}", args.json.display(), args.png.display());
    Ok(())
}
