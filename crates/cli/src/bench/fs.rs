//! `squeezefs bench fs`: the seeds' two workloads on squeezefs, kernel btrfs with
//! `compress-force=` the same codec, btrfs without compression and the host filesystem,
//! side by side in one run.
//!
//! * corpus: copy a directory in N times, make it durable (unmount + sync), mount again
//!   with cold caches, read everything back.
//! * tarball: copy a .tar in, extract it with tar(1) inside the filesystem, read the tree;
//!   each step made durable and the caches dropped before the next. With `--squashfs`,
//!   mksquashfs packs the same tree (extracted once on the host) for comparison.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use squeezefs_codec::CodecSpec;

use super::plot;
use super::report::{FsReport, FsRow, Tree};
use super::targets::{drop_caches, fresh_dir, run, squashfs_codec, syncfs, Kind, Target};
use super::util::{self, walk};
use crate::ui;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    sudo squeezefs bench fs --corpus bench-data/corpus --tarball bench-data/linux-source-6.1.tar.xz\n  \
    squeezefs bench fs --corpus ~/logs --codecs zstd:1,zstd:9 --no-btrfs\n  \
    sudo squeezefs bench fs --tarball linux.tar.xz --codecs zstd:19 --extent-size 1M \\\n      \
    --squeezefs-variants pack --squashfs --no-baselines\n\n\
    Ratio: logical bytes / bytes on disk (squeezefs and the host: du of the directory;\n\
    btrfs: data + metadata + system used, from `btrfs filesystem df`; squashfs: the image).\n\
    Tarball workloads also show the tree alone: disk used after extracting minus disk used\n\
    after copying the .tar in. Write times run until the data is durable on the host disk\n\
    (unmount, then syncfs); reads start from a fresh mount with the kernel caches dropped.\n\
    A compressed tarball (.xz, .gz, .zst) is decompressed once beforehand so the timings\n\
    measure the filesystems, not xz. squashfs's extract step is mksquashfs of the tree\n\
    extracted on the host (not timed). The btrfs and squashfs sides and cache dropping need\n\
    root; without it they are skipped, with a note.\n\
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
    /// squeezefs mounts per codec: plain (mount option `nopack`: a container per file; rows
    /// "squeezefs"), and pack (the default mount: small files stored whole in solid
    /// compressed blocks; rows "squeezefs+pack").
    #[arg(long, default_value = "plain,pack", value_delimiter = ',')]
    pub squeezefs_variants: Vec<Variant>,
    /// squeezefs extent size (mount option extent_size=), 4K..1M; also mksquashfs's block.
    #[arg(long, value_name = "SIZE", default_value = "128K", value_parser = util::parse_extent_size)]
    pub extent_size: u8,
    /// Also run mksquashfs on the extracted tree of --tarball with each codec (block size =
    /// --extent-size), and read the tree back from the image mounted (needs root).
    #[arg(long)]
    pub squashfs: bool,
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

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Variant {
    Plain,
    Pack,
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
        tree: None,
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
    let tar_disk = t.disk_bytes()?;
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
        workload: tar_workload(tar),
        method: name,
        logical_bytes: logical,
        disk_bytes: disk,
        ratio: logical as f64 / disk.max(1) as f64,
        tree: Some(Tree::new(tree, disk.saturating_sub(tar_disk))),
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

fn tar_workload(tar: &Path) -> String {
    let name = tar.file_name().map(|n| n.to_string_lossy());
    format!("tarball {}", name.unwrap_or_default())
}

/// The tarball's tree packed by mksquashfs at `codec` (block size = the extent size), then
/// read back from the image, loop-mounted with cold caches. `tree` was extracted on the host.
fn squashfs_run(ctx: &Ctx, codec: CodecSpec, tar: &Path, tree: &Path) -> Result<FsRow, String> {
    let comp = squashfs_codec(codec).ok_or_else(|| format!("squashfs has no {codec}"))?;
    let method = format!("squashfs {codec}");
    let dir = fresh_dir(&ctx.args.work, &method)?;
    let (img, mnt) = (dir.join("tree.sqfs"), dir.join("mnt"));
    std::fs::create_dir(&mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
    drop_caches();
    let ((), mk_s) = timed(|| {
        run(Command::new("mksquashfs")
            .arg(tree)
            .arg(&img)
            .args(["-noappend", "-quiet", "-no-progress", "-b"])
            .arg((1u32 << ctx.args.extent_size).to_string())
            .args(comp))?;
        syncfs(&dir)
    })?;
    let disk = std::fs::metadata(&img)
        .map_err(|e| format!("{}: {e}", img.display()))?
        .len();
    drop_caches();
    run(Command::new("mount")
        .args(["-t", "squashfs", "-o", "loop,ro"])
        .arg(&img)
        .arg(&mnt))?;
    let read = timed(|| read_tree(&mnt));
    run(Command::new("umount").arg(&mnt))?;
    let (bytes, read_s) = read?;
    std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    let mb = bytes as f64 / 1e6;
    Ok(FsRow {
        workload: tar_workload(tar),
        method,
        logical_bytes: bytes,
        disk_bytes: disk,
        ratio: f64::NAN,
        tree: Some(Tree::new(bytes, disk)),
        steps: vec![
            ("copy".into(), f64::NAN),
            ("extract".into(), mk_s),
            ("read tree".into(), read_s),
        ],
        write_mb_s: mb / mk_s,
        read_mb_s: mb / read_s,
        daemon_peak_rss: 0,
    })
}

fn num(x: f64, prec: usize) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.prec$}")
    }
}

/// One line comparing row `a` with row `b` of the same workload.
fn compare(a: &FsRow, b: &FsRow) {
    let mut parts = Vec::new();
    if !(a.ratio / b.ratio).is_nan() {
        parts.push(format!("ratio x{:.3}", a.ratio / b.ratio));
    }
    if let (Some(ta), Some(tb)) = (&a.tree, &b.tree) {
        parts.push(format!(
            "tree ratio x{:.3} (disk x{:.3})",
            ta.ratio / tb.ratio,
            ta.disk_bytes as f64 / tb.disk_bytes.max(1) as f64
        ));
    }
    let speed: Vec<String> = (a.steps.iter().zip(&b.steps))
        .filter(|((_, s), (_, bs))| !(bs / s).is_nan())
        .map(|((n, s), (_, bs))| format!("{n} x{:.2}", bs / s))
        .collect();
    if !speed.is_empty() {
        parts.push(format!("speed (its time / this time): {}", speed.join(", ")));
    }
    println!("  {} against {}: {}", a.method, b.method, parts.join("; "));
}

fn print_rows(rows: &[FsRow]) {
    let mut workloads: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        let sel: Vec<&FsRow> = rows.iter().filter(|r| r.workload == w).collect();
        println!("\n{w}: {:.1} MB logical", sel[0].logical_bytes as f64 / 1e6);
        let trees = sel[0].tree.is_some();
        let mut head = vec!["method", "ratio"];
        if trees {
            head.extend(["tree ratio", "tree disk"]);
        }
        let steps: Vec<String> = sel[0].steps.iter().map(|(n, _)| format!("{n} s")).collect();
        head.extend(steps.iter().map(|s| s.as_str()));
        head.extend(["write MB/s", "read MB/s", "daemon RSS"]);
        let mut t = util::Table::new(&head);
        for r in &sel {
            let mut cells = vec![r.method.clone(), num(r.ratio, 3)];
            if let Some(t) = r.tree.as_ref().filter(|_| trees) {
                cells.extend([format!("{:.3}", t.ratio), ui::human(t.disk_bytes)]);
            }
            cells.extend(r.steps.iter().map(|(_, s)| num(*s, 2)));
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
        // squeezefs against btrfs, squashfs and plain squeezefs with the same codec.
        for r in sel.iter().filter(|r| r.method.starts_with("squeezefs")) {
            let (variant, codec) = r.method.split_once(' ').unwrap_or_default();
            let mut others = vec![format!("btrfs {codec}"), format!("squashfs {codec}")];
            if variant != "squeezefs" {
                others.push(format!("squeezefs {codec}"));
            }
            for o in others {
                if let Some(b) = sel.iter().find(|b| b.method == o) {
                    compare(r, b);
                }
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
    let mut use_squashfs = args.squashfs;
    if use_squashfs && args.tarball.is_none() {
        notes.push("squashfs side skipped: it packs the tree of --tarball".to_string());
        use_squashfs = false;
    }
    if use_squashfs && !root {
        notes.push("squashfs side skipped: mounting its image needs root (run with sudo)".to_string());
        use_squashfs = false;
    }
    if use_squashfs && Command::new("mksquashfs").arg("-version").output().is_err() {
        notes.push("squashfs side skipped: mksquashfs not found (install squashfs-tools)".to_string());
        use_squashfs = false;
    }
    if args.extent_size != 17 {
        notes.push(format!(
            "squeezefs extent size {}",
            ui::human(1 << args.extent_size)
        ));
    }
    let mut kinds = Vec::new();
    let mut squash = Vec::new();
    for &c in &args.codecs {
        for &v in &args.squeezefs_variants {
            kinds.push(Kind::Squeezefs {
                codec: c,
                pack: v == Variant::Pack,
                extent_shift: args.extent_size,
            });
        }
        if use_squashfs {
            match squashfs_codec(c) {
                Some(_) => squash.push(c),
                None => notes.push(format!("squashfs has no {c}")),
            }
        }
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
    let runs = kinds.len() * (args.corpus.is_some() as usize + tar.is_some() as usize) + squash.len();
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
        if !squash.is_empty() {
            bar.set_message("extracting the tree for mksquashfs (not timed)");
            let tree = fresh_dir(&args.work, "squashfs-tree")?;
            run(Command::new("tar").arg("-xf").arg(t).arg("-C").arg(&tree))?;
            for &c in &squash {
                bar.set_message(format!("tarball on squashfs {c}"));
                rows.push(squashfs_run(&ctx, c, t, &tree)?);
                bar.inc(1);
            }
            std::fs::remove_dir_all(&tree).map_err(|e| format!("removing {}: {e}", tree.display()))?;
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
