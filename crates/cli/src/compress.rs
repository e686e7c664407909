//! `squeezefs compress PATH… [--codec C] [--extent-size S]`: rewrite files with another codec
//! or extent size, like `btrfs filesystem defragment -c`, and turn the plain files of an
//! adopted backing directory into containers.
//!
//! Two ways, each safe to interrupt (every file is left old or new, never mixed bytes):
//! * **In place** (a container keeping its extent size): each extent is rewritten into its
//!   other half, the old copy kept until the new one is durable ([`Container::rewrite`]).
//!   On a mount the daemon does it (the `user.squeezefs.rewrite` request), so no write can
//!   slip between reading an extent and rewriting it.
//! * **Copy and rename** (a plain file, or a new extent size): a new container is written
//!   beside the file, made durable, given the file's owner, mode, times and xattrs, and
//!   renamed over it. On a mount the copy goes through the mount, and the rename is skipped
//!   when the file changed meanwhile. Files with several hard links are left alone (a copy
//!   would split them).
//!
//! On a backing directory that is not mounted the files are handled directly; the command
//! refuses a directory a daemon serves (use the mount path instead).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::unistd::{lseek, Whence};
use rayon::prelude::*;
use serde_json::json;
use squeezefs_codec::CodecSpec;
use squeezefs_container::convert::copy_into;
use squeezefs_container::usage::{usage, Kind};
use squeezefs_container::{Container, FileStorage, Options};
use squeezefs_fs::props::Prop;
use squeezefs_fs::{props, sys};

use crate::ui::{bytes_bar, human};

pub struct Args {
    pub paths: Vec<PathBuf>,
    pub codec: Option<CodecSpec>,
    pub extent_shift: Option<u8>,
    pub json: bool,
}

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Done {
    Rewritten,
    Converted,
    /// Already as asked (nothing to do), or empty.
    Skipped,
    /// Left as it is, with a warning (hard links).
    LeftAlone,
    /// Copied into this new container beside it, not yet durable: renamed over the file
    /// after one `syncfs` for a whole batch of them.
    Copied(PathBuf),
}

#[derive(Default)]
struct Summary {
    rewritten: u64,
    converted: u64,
    skipped: u64,
    left_alone: u64,
    failed: u64,
    bytes: u64,
    disk_before: u64,
    disk_after: u64,
    /// Directories on a mount where copies were renamed (synced at the end).
    renamed_in: std::collections::BTreeSet<PathBuf>,
}

/// Files per batch of copies made durable together.
const BATCH: usize = 256;

/// One file to do: its path to act on (mount path or backing path) and its backing file.
struct Job {
    path: PathBuf,
    backing: PathBuf,
    size: u64,
    links: u64,
    /// The codec in force for a file without its own property: the mount's `compress=`
    /// (offline: zstd:3, what a mount uses by default).
    default_codec: CodecSpec,
}

impl Job {
    /// Copy and rename would give each name its own file: such files are left alone.
    fn splits_links(&self, pb: &indicatif::ProgressBar) -> bool {
        if self.links > 1 {
            pb.suspend(|| {
                eprintln!(
                    "squeezefs compress: {}: has {} hard links; converting it (a plain file, or a new \
                     extent size) would split them, so it is left as it is",
                    self.path.display(),
                    self.links
                )
            });
            pb.inc(self.size);
        }
        self.links > 1
    }
}

/// The name of a copy in progress: `.NAME.squeezefs-compress.PID.N`.
fn temp_pid(name: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(name).ok()?;
    let (_, tail) = s.rsplit_once(".squeezefs-compress.")?;
    tail.split('.').next()?.parse().ok()
}

fn err(p: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", p.display())
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// Copies owner, mode, xattrs (all but squeezefs requests/properties) and times.
fn copy_metadata(from: &File, to: &File) -> Result<(), String> {
    let md = from.metadata().map_err(|e| e.to_string())?;
    let (f, t) = (from.as_raw_fd(), to.as_raw_fd());
    if let Ok(list) = sys::xattr_list(f, 64 << 10) {
        for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            if name.starts_with(b"user.squeezefs.") {
                continue;
            }
            let c = CString::new(name).expect("no NUL");
            if let Ok(v) = sys::xattr_get(f, &c, 64 << 10) {
                sys::xattr_set(t, &c, &v, 0)
                    .map_err(|e| format!("copying xattr {}: {e}", String::from_utf8_lossy(name)))?;
            }
        }
    }
    let own = |id: u32, cur: u32| (id != cur).then_some(id);
    let tmd = to.metadata().map_err(|e| e.to_string())?;
    sys::chown(t, own(md.uid(), tmd.uid()), own(md.gid(), tmd.gid()))
        .map_err(|e| format!("giving the copy its owner: {e}"))?;
    sys::chmod(t, md.mode() & 0o7777).map_err(|e| format!("giving the copy its mode: {e}"))?;
    let ts = |s: i64, ns: i64| libc::timespec {
        tv_sec: s,
        tv_nsec: ns,
    };
    sys::utimens(
        t,
        ts(md.atime(), md.atime_nsec()),
        ts(md.mtime(), md.mtime_nsec()),
    )
    .map_err(|e| format!("giving the copy its times: {e}"))
}

/// A new file beside `path` for the copy.
fn temp_beside(path: &Path) -> Result<(PathBuf, File), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let mut n = 0u32;
    loop {
        let tmp = dir.join(format!(".{name}.squeezefs-compress.{}.{n}", std::process::id()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => {
                return Err(format!(
                    "cannot create the copy {}: {e} (compress writes a copy beside each file it \
                     converts: it needs write access to the directory and room for one file)",
                    tmp.display()
                ))
            }
        }
    }
}

/// Publishes a durable copy. The directory is not synced here: a rename lost in a crash
/// leaves the original, which is as good; one `syncfs` at the end makes the run durable.
fn rename_over(tmp: &Path, path: &Path) -> Result<(), String> {
    std::fs::rename(tmp, path).map_err(|e| err(path, format!("replacing it with the copy: {e}")))
}

/// `syncfs` of the filesystem holding `path`.
fn syncfs(path: &Path) -> Result<(), String> {
    let f = File::open(path).map_err(|e| err(path, e))?;
    nix::unistd::syncfs(f.as_raw_fd()).map_err(|e| err(path, std::io::Error::from(e)))
}

/// Whether the backing file is a container written with `codec` already: every extent is,
/// or is inline or raw (whose codec and level are not recorded) in a file whose codec —
/// its compression property, or `default` when it has none — is `codec`.
fn already(backing: &Path, codec: CodecSpec, default: CodecSpec) -> bool {
    let Ok(f) = File::open(backing) else { return false };
    let st = FileStorage::new(f);
    let Ok(u) = usage(&st) else { return false };
    let none = squeezefs_codec::Algorithm::None;
    let level = if codec.alg == none { 0 } else { codec.level as i16 };
    let want = Kind::Extent(codec.alg, level);
    let unrecorded = |k: &Kind| *k == Kind::Inline || *k == Kind::Extent(none, 0);
    // (Extents with a dictionary count as their codec: the dictionary is the file's.)
    let kinds: Vec<Kind> = u.parts.keys().map(|k| k.without_dict()).collect();
    if u.plain || !kinds.iter().all(|k| *k == want || unrecorded(k)) {
        return false;
    }
    !kinds.iter().any(unrecorded)
        || Container::open(st, &Options::default())
            .is_ok_and(|c| c.compression_property().unwrap_or(default) == codec)
}

/// Plain, or its extent shift when it is a container.
fn layout(backing: &Path) -> Result<Option<u8>, String> {
    let f = File::open(backing).map_err(|e| err(backing, e))?;
    let u = usage(&FileStorage::new(f)).map_err(|e| err(backing, e))?;
    Ok((!u.plain).then(|| u.extent_size.max(1).trailing_zeros() as u8))
}

/// A file's own compression property, read through the mount.
fn own_codec(path: &Path) -> Option<CodecSpec> {
    let c = cstring(props::COMPRESSION);
    File::open(path)
        .ok()
        .and_then(|f| sys::xattr_get(f.as_raw_fd(), &c, 64).ok())
        .and_then(|v| String::from_utf8_lossy(&v).trim().parse().ok())
}

/// A file's own dictionary property, and its directory's (`squeezefs dict train` sets it
/// on directories; a file written there afterwards gets it, and `compress` gives it to the
/// files that were there before). `path` may be on a mount or in a backing directory: both
/// show a directory's property as the same xattr.
fn dictionaries(path: &Path) -> (Option<u32>, Option<u32>) {
    let get = |p: &Path| {
        crate::property::own(p, Prop::Dictionary)
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
    };
    let dir = path.parent().and_then(&get);
    (get(path), dir)
}

/// A backing directory handled directly (no daemon).
fn offline(args: &Args, job: &Job, pb: &indicatif::ProgressBar) -> Result<Done, String> {
    let shape = layout(&job.backing)?;
    let codec = args.codec.unwrap_or(job.default_codec);
    // (Offline, a container's dictionary is in its superblock, not an xattr.)
    let (_, dir_dict) = dictionaries(&job.backing);
    let opts = Options {
        codec,
        extent_shift: args
            .extent_shift
            .or(shape)
            .unwrap_or(Options::default().extent_shift),
        ..Options::default()
    };
    if let Some(shift) = shape {
        if args.extent_shift.is_none_or(|s| s == shift) {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&job.backing)
                .map_err(|e| err(&job.backing, e))?;
            let mut c = Container::open(FileStorage::new(f), &opts).map_err(|e| err(&job.backing, e))?;
            let wants_dict = dir_dict.is_some() && c.dictionary_property().is_none();
            if (args.codec.is_none() || already(&job.backing, codec, job.default_codec)) && !wants_dict {
                return Ok(Done::Skipped);
            }
            if wants_dict {
                c.set_dictionary_property(dir_dict)
                    .map_err(|e| err(&job.backing, e))?;
            }
            if args.codec.is_some() {
                c.set_compression_property(Some(codec))
                    .map_err(|e| err(&job.backing, e))?;
            }
            c.rewrite(0..u64::MAX).map_err(|e| err(&job.backing, e))?;
            pb.inc(job.size);
            return Ok(Done::Rewritten);
        }
    }
    if job.splits_links(pb) {
        return Ok(Done::LeftAlone);
    }
    let src_file = File::open(&job.backing).map_err(|e| err(&job.backing, e))?;
    let mut src = Container::open(
        FileStorage::new(src_file.try_clone().map_err(|e| e.to_string())?),
        &opts,
    )
    .map_err(|e| err(&job.backing, e))?;
    // The copy gets `--codec`, else keeps the file's own property.
    let own = args.codec.or(src.compression_property());
    let opts = Options {
        codec: own.unwrap_or(job.default_codec),
        ..opts
    };
    let (tmp, tf) = temp_beside(&job.backing).map_err(|e| err(&job.backing, e))?;
    let r = (|| {
        let mut dst = Container::open(
            FileStorage::new(tf.try_clone().map_err(|e| e.to_string())?),
            &opts,
        )
        .map_err(|e| e.to_string())?;
        if own.is_some() {
            dst.set_compression_property(own).map_err(|e| e.to_string())?;
        }
        if args.extent_shift.is_some() {
            dst.set_extent_size_property(args.extent_shift)
                .map_err(|e| e.to_string())?;
        }
        let dict = src.dictionary_property().or(dir_dict);
        if dict.is_some() {
            dst.set_dictionary_property(dict).map_err(|e| e.to_string())?;
        }
        copy_into(&mut src, &mut dst, |n| pb.inc(n)).map_err(|e| e.to_string())?;
        copy_metadata(&src_file, &tf)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(&job.backing, e));
    }
    Ok(Done::Copied(tmp))
}

/// A file on a mount, through the daemon.
fn mounted(args: &Args, job: &Job, pb: &indicatif::ProgressBar) -> Result<Done, String> {
    let shape = layout(&job.backing)?;
    // `--codec`, else the file's own property (new files take their directory's when
    // created), else the mount's.
    let own = args.codec.or_else(|| own_codec(&job.path));
    let codec = own.unwrap_or(job.default_codec);
    let (file_dict, dir_dict) = dictionaries(&job.path);
    let wants_dict = file_dict.is_none() && dir_dict.is_some();
    if let Some(shift) = shape {
        if args.extent_shift.is_none_or(|s| s == shift) {
            if already(&job.backing, codec, job.default_codec) && !wants_dict {
                return Ok(Done::Skipped);
            }
            let f = File::open(&job.path).map_err(|e| err(&job.path, e))?;
            if let (true, Some(d)) = (wants_dict, dir_dict) {
                sys::xattr_set(
                    f.as_raw_fd(),
                    &cstring(props::DICTIONARY),
                    d.to_string().as_bytes(),
                    0,
                )
                .map_err(|e| err(&job.path, format!("setting its dictionary {d}: {e}")))?;
            }
            if args.codec.is_some() {
                sys::xattr_set(
                    f.as_raw_fd(),
                    &cstring(props::COMPRESSION),
                    codec.to_string().as_bytes(),
                    0,
                )
                .map_err(|e| err(&job.path, format!("setting its compression property: {e}")))?;
            }
            // In pieces, so the progress bar moves on big files.
            const STEP: u64 = 64 << 20;
            let mut off = 0;
            while off < job.size {
                let v = format!("{off}:{STEP}");
                sys::xattr_set(f.as_raw_fd(), &cstring(props::REWRITE), v.as_bytes(), 0)
                    .map_err(|e| err(&job.path, format!("rewrite: {e} (the daemon's log says why)")))?;
                pb.inc(STEP.min(job.size - off));
                off += STEP;
            }
            return Ok(Done::Rewritten);
        }
    }
    if job.splits_links(pb) {
        return Ok(Done::LeftAlone);
    }
    let mut src = File::open(&job.path).map_err(|e| err(&job.path, e))?;
    let before = src.metadata().map_err(|e| err(&job.path, e))?;
    let (tmp, mut tf) = temp_beside(&job.path).map_err(|e| err(&job.path, e))?;
    let r = (|| {
        let t = tf.as_raw_fd();
        // The copy gets `--codec` or the file's own property; without either it keeps what
        // it inherited when created (its directory's property, or the mount's codec).
        if own.is_some() {
            sys::xattr_set(t, &cstring(props::COMPRESSION), codec.to_string().as_bytes(), 0)
                .map_err(|e| format!("setting the copy's compression: {e}"))?;
        }
        if let Some(s) = args.extent_shift {
            let v = props::format(props::Value::Shift(s));
            sys::xattr_set(t, &cstring(props::EXTENT_SIZE), v.as_bytes(), 0)
                .map_err(|e| format!("setting the copy's extent size: {e}"))?;
        }
        copy_data(&mut src, &mut tf, before.len(), pb)?;
        copy_metadata(&src, &tf)?;
        tf.sync_all().map_err(|e| e.to_string())?;
        let now = std::fs::symlink_metadata(&job.path).map_err(|e| e.to_string())?;
        if (now.ino(), now.len(), now.mtime(), now.mtime_nsec())
            != (before.ino(), before.len(), before.mtime(), before.mtime_nsec())
        {
            return Err("changed while being compressed; left as it was (run again)".into());
        }
        rename_over(&tmp, &job.path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(|e| err(&job.path, e))?;
    Ok(Done::Converted)
}

/// Copies `len` bytes, skipping holes (SEEK_DATA/SEEK_HOLE), and sets the length.
fn copy_data(src: &mut File, dst: &mut File, len: u64, pb: &indicatif::ProgressBar) -> Result<(), String> {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < len {
        let fd = src.as_raw_fd();
        let Ok(data) = lseek(fd, off as i64, Whence::SeekData) else {
            break; // only a hole is left
        };
        let hole = lseek(fd, data, Whence::SeekHole).unwrap_or(-1).max(data) as u64;
        let end = hole.min(len);
        src.seek(SeekFrom::Start(data as u64))
            .map_err(|e| e.to_string())?;
        dst.seek(SeekFrom::Start(data as u64))
            .map_err(|e| e.to_string())?;
        let mut pos = data as u64;
        while pos < end {
            let want = ((end - pos) as usize).min(buf.len());
            let n = src.read(&mut buf[..want]).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            dst.write_all(&buf[..n]).map_err(|e| e.to_string())?;
            pos += n as u64;
            pb.inc(n as u64);
        }
        off = end.max(data as u64 + 1);
    }
    dst.set_len(len).map_err(|e| e.to_string())
}

/// Refuses a backing directory a daemon serves (its lock is held), naming the holder.
fn not_served(dir: &Path) -> Result<(), String> {
    for a in dir.ancestors() {
        if let Err(e) = squeezefs_fs::lock::lock(a) {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Err(format!("{e}; run `squeezefs compress` on the mount instead"));
            }
        }
    }
    Ok(())
}

pub fn main(args: Args) -> Result<u8, String> {
    let start = Instant::now();
    let mut jobs: Vec<(Job, bool)> = Vec::new();
    for p in &args.paths {
        let loc = crate::locate::locate(p)?;
        // Backing files are read directly (also on a mount): those that used a dictionary
        // need it.
        for why in crate::dictdir::load_near(&loc) {
            eprintln!("warning: {why}");
        }
        let on_mount = loc.mount.is_some();
        let default_codec = match &loc.mount {
            Some(m) => crate::statsfile::read(m)?["mount"]["compress"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .unwrap_or(CodecSpec::DEFAULT),
            None => CodecSpec::DEFAULT,
        };
        if !on_mount {
            not_served(&loc.backing)?;
        }
        let top = if on_mount {
            p.canonicalize().map_err(|e| err(p, e))?
        } else {
            loc.backing.clone()
        };
        let md = std::fs::symlink_metadata(&top).map_err(|e| err(&top, e))?;
        let found = if md.is_dir() {
            crate::walk::entries(&top)?
        } else {
            vec![(top.clone(), md)]
        };
        let mut seen = std::collections::HashSet::new();
        for (path, m) in found.into_iter().filter(|(_, m)| m.is_file()) {
            if !seen.insert((m.dev(), m.ino())) {
                continue; // another name of a file already listed
            }
            if let Some(pid) = path.file_name().and_then(|n| temp_pid(n.as_bytes())) {
                // A copy an interrupted run left behind (its original is intact).
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    match std::fs::remove_file(&path) {
                        Ok(()) => eprintln!(
                            "squeezefs compress: removed {}, left by an interrupted run",
                            path.display()
                        ),
                        Err(e) => eprintln!("squeezefs compress: {}: {e}", path.display()),
                    }
                }
                continue;
            }
            let rel = path.strip_prefix(&top).unwrap_or(Path::new(""));
            let backing = if rel.as_os_str().is_empty() {
                loc.backing.clone()
            } else {
                loc.backing.join(rel)
            };
            if path
                .file_name()
                .is_some_and(|n| n.as_bytes().ends_with(b".squeezefs-stats"))
            {
                continue;
            }
            let links = m.nlink();
            jobs.push((
                Job {
                    path,
                    backing,
                    size: m.len(),
                    links,
                    default_codec,
                },
                on_mount,
            ));
        }
    }
    let total: u64 = jobs.iter().map(|(j, _)| j.size).sum();
    let pb = bytes_bar(total, "compress");
    // The ratio so far (logical bytes done / disk they now take), shown beside the file.
    let ratio_so_far = std::sync::Mutex::new(String::new());
    if args.json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let blocks = |p: &Path| {
        std::fs::symlink_metadata(p)
            .map(|m| m.blocks() * 512)
            .unwrap_or(0)
    };
    // Files in parallel (each one's own extents are compressed in parallel too), in
    // batches: the copies of a batch are made durable by one `syncfs` per filesystem, then
    // renamed over their files.
    let summary = std::sync::Mutex::new(Summary::default());
    for batch in jobs.chunks(BATCH) {
        let done: Vec<(Result<Done, String>, u64)> = batch
            .par_iter()
            .map(|(job, on_mount)| {
                pb.set_message(format!("{}{}", ratio_so_far.lock().unwrap(), job.path.display()));
                let disk_before = blocks(&job.backing);
                let r = if job.size == 0 {
                    Ok(Done::Skipped)
                } else if *on_mount {
                    mounted(&args, job, &pb)
                } else {
                    offline(&args, job, &pb)
                };
                (r, disk_before)
            })
            .collect();
        let mut devices = std::collections::BTreeMap::new();
        for (r, _) in &done {
            if let Ok(Done::Copied(tmp)) = r {
                if let Ok(m) = std::fs::metadata(tmp) {
                    devices.entry(m.dev()).or_insert_with(|| tmp.clone());
                }
            }
        }
        let synced: Result<(), String> = devices.values().try_for_each(|p| syncfs(p));
        let mut s = summary.lock().unwrap();
        for ((job, on_mount), (r, disk_before)) in batch.iter().zip(done) {
            let r = match (r, &synced) {
                (Ok(Done::Copied(tmp)), Ok(())) => rename_over(&tmp, &job.backing).map(|()| Done::Converted),
                (Ok(Done::Copied(tmp)), Err(e)) => {
                    let _ = std::fs::remove_file(&tmp);
                    Err(e.clone())
                }
                (r, _) => r,
            };
            match r {
                Ok(d) => {
                    s.bytes += job.size;
                    s.disk_before += disk_before;
                    s.disk_after += blocks(&job.backing);
                    match d {
                        Done::Rewritten => s.rewritten += 1,
                        Done::Converted => {
                            s.converted += 1;
                            if *on_mount {
                                s.renamed_in
                                    .insert(job.path.parent().unwrap_or(Path::new("/")).to_path_buf());
                            }
                        }
                        Done::Skipped => s.skipped += 1,
                        Done::LeftAlone => s.left_alone += 1,
                        Done::Copied(_) => unreachable!("renamed above"),
                    }
                }
                Err(e) => {
                    s.failed += 1;
                    pb.suspend(|| eprintln!("squeezefs compress: {e}"));
                }
            }
        }
        if s.disk_after > 0 {
            *ratio_so_far.lock().unwrap() = format!("ratio {:.2}  ", s.bytes as f64 / s.disk_after as f64);
        }
    }
    let mut s = summary.into_inner().unwrap();
    // Every rename durable before saying done: `syncfs` of backing filesystems, and on a
    // mount (where the kernel does not pass `syncfs` on) an fsync of each directory.
    let dirs = std::mem::take(&mut s.renamed_in);
    let synced = dirs
        .iter()
        .map(|d| File::open(d).and_then(|f| f.sync_all()).map_err(|e| err(d, e)))
        .chain(args.paths.iter().map(|p| syncfs(p)));
    for r in synced {
        if let Err(e) = r {
            s.failed += 1;
            eprintln!("squeezefs compress: {e}");
        }
    }
    pb.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let ratio = s.bytes as f64 / s.disk_after.max(1) as f64;
    if args.json {
        let v = json!({
            "files": jobs.len(), "rewritten": s.rewritten, "converted": s.converted,
            "skipped": s.skipped, "left_alone": s.left_alone, "failed": s.failed, "bytes": s.bytes,
            "disk_before": s.disk_before, "disk_after": s.disk_after, "ratio": ratio, "seconds": secs,
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        println!(
            "{} files: {} rewritten, {} converted into containers, {} already as asked or empty, \
             {} left alone (hard links), {} failed",
            jobs.len(),
            s.rewritten,
            s.converted,
            s.skipped,
            s.left_alone,
            s.failed
        );
        println!(
            "{} of data now takes {} on disk (was {}): ratio {:.2}, in {:.1} s ({}/s)",
            human(s.bytes),
            human(s.disk_after),
            human(s.disk_before),
            ratio,
            secs,
            human((s.bytes as f64 / secs.max(1e-9)) as u64)
        );
    }
    Ok(if s.failed > 0 { 1 } else { 0 })
}
