//! `squeezefs compress`, one file: rewritten in place (offline through `Container::rewrite`,
//! on a mount by the daemon), or copied into a new container beside it that is renamed over
//! it once durable; the helpers for copies (metadata, temporary names, holes, `syncfs`).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{lseek, Whence};
use squeezefs_codec::CodecSpec;
use squeezefs_container::convert::copy_into;
use squeezefs_container::pack::record::{record_state, RecordState};
use squeezefs_container::pack::Packs;
use squeezefs_container::usage::{usage, Kind};
use squeezefs_container::{open_as_owner, Container, FileStorage, Options};
use squeezefs_fs::props::{DirProps, Prop, Value};
use squeezefs_fs::rules::Settings;
use squeezefs_fs::{props, sys};
use std::sync::Arc;

use super::stage::Staged;

/// What the command asks of every file (`--codec`, `--extent-size`, `--pack`/`--no-pack`),
/// or of one file, what the rule matching its name sets ([`Job::asked`]).
#[derive(Clone, Copy)]
pub(super) struct Asked {
    pub(super) codec: Option<CodecSpec>,
    pub(super) extent_shift: Option<u8>,
    /// A dictionary (only a rule asks for one).
    pub(super) dict: Option<u32>,
    /// The force property (only a rule asks for it).
    pub(super) force: bool,
    pub(super) pack: bool,
}

/// Where small files can go.
#[derive(Clone)]
pub(super) enum Packing {
    /// On a mount: whether it packs (then the daemon packs what it rewrites).
    Mount(bool),
    /// In a backing directory: its packs (writable when files are packed), if it has or
    /// gets any.
    Offline(Option<Arc<Packs>>),
}

/// The pack directory and packs of the backing directory `backing` is in (the nearest
/// ancestor holding a pack directory, else `backing` itself when `pack`), probed like a
/// mount does. A filesystem that cannot keep location records is an error when packing is
/// `required` (`--pack`); otherwise its packs are read-only (packed files still read, and
/// nothing new is packed).
pub(super) fn offline_packs(
    backing: &Path,
    pack: bool,
    required: bool,
) -> Result<Option<(PathBuf, Arc<Packs>)>, String> {
    let found = backing
        .ancestors()
        .find(|a| a.join(squeezefs_container::pack::dir::DIR_NAME).is_dir());
    let Some(root) = found.or(pack.then_some(backing)) else {
        return Ok(None);
    };
    // Writable only when asked to pack: with --no-pack the packs are only read (a pack
    // directory is there on every backing a mount wrote to, for its probes).
    let packs = squeezefs_fs::packing::open(root, pack, squeezefs_container::pack::DEFAULT_CACHE)
        .map_err(|e| err(root, format!("opening its packs: {e}")))?;
    if required && !packs.writable() {
        return Err(format!(
            "{}: files cannot be packed on this filesystem (see the warning above); run with --no-pack",
            root.display()
        ));
    }
    Ok(Some((root.join(squeezefs_container::pack::dir::DIR_NAME), packs)))
}

/// What happened to one file.
pub(super) enum Done {
    /// Recompressed in place; `packed`: it is stored in a pack now (it was, or it was a
    /// container of its own that went into one).
    Rewritten { packed: bool },
    /// A plain file or one of another extent size, copied into a new file; `packed` as above.
    Converted { packed: bool },
    /// Already as asked (nothing to do), or empty.
    Skipped,
    /// Empty, on a mount: only given the properties asked (its data is written with them).
    PropsSet,
    /// Left as it is, with a warning (hard links).
    LeftAlone,
    /// Copied into this new container beside it, not yet durable: renamed over the file
    /// after the batch's syncs (offline, the copy is staged: committed between them).
    Copied(PathBuf, Option<Box<Staged>>),
    /// Rewritten in place offline into the packs (it was packed, or a container of its
    /// own small enough), committed with the batch.
    Staging(Box<Staged>),
}

/// One file to do: its path to act on (mount path or backing path) and its backing file.
pub(super) struct Job {
    pub(super) path: PathBuf,
    pub(super) backing: PathBuf,
    pub(super) size: u64,
    pub(super) links: u64,
    /// The codec in force for a file without its own property: the mount's `compress=`
    /// (offline: zstd:3, what a mount uses by default).
    pub(super) default_codec: CodecSpec,
    /// On a mount: its extent size (its `extent_size=`), what a file without the property
    /// gets.
    pub(super) default_shift: Option<u8>,
    pub(super) packs: Packing,
    /// What the rule matching its name sets, when this run applies rules (no `--codec`,
    /// `--extent-size` or `--no-rules`) and one matches.
    pub(super) rule: Option<Settings>,
    /// On a mount: the properties a file of its name made now gets (its directory's, and
    /// its rule's unless `--no-rules`), for a copy the daemon made under another name.
    pub(super) create: DirProps,
    /// Set when this run changed one of its properties (what `ruled` counts of a file
    /// rewritten in place: not one rewritten only to be packed).
    pub(super) changed: std::sync::atomic::AtomicBool,
    /// Set when its rule replaced a property set on the file itself (`replaced_own`).
    pub(super) replaced_own: std::sync::atomic::AtomicBool,
}

impl Job {
    /// Notes whether this file's rule replaces one of its own properties (`codec`, `dict`,
    /// `shift`: what it has now) with another value.
    fn note_own(&self, args: &Asked, codec: Option<CodecSpec>, dict: Option<u32>, shift: Option<u8>) {
        fn differs<T: PartialEq>(rule: Option<T>, own: Option<T>) -> bool {
            rule.is_some() && own.is_some() && rule != own
        }
        let replaced = self.rule.is_some()
            && (differs(args.codec, codec) || differs(args.dict, dict) || differs(args.extent_shift, shift));
        self.replaced_own
            .store(replaced, std::sync::atomic::Ordering::Relaxed);
    }

    /// [`Job::note_own`] for a file on a mount, its own properties read through it.
    pub(super) fn note_own_mounted(&self, args: &Asked) {
        if self.rule.is_none() {
            return;
        }
        self.note_own(
            args,
            own_codec(&self.path),
            own_dict(&self.path),
            own_shift(&self.path),
        );
    }
}

impl Job {
    /// What this run asks of this file: `args`, or what its rule sets.
    pub(super) fn asked(&self, args: &Asked) -> Asked {
        match self.rule {
            Some(r) => Asked {
                codec: r.codec,
                extent_shift: r.shift,
                dict: r.dict,
                force: r.force,
                pack: args.pack,
            },
            None => *args,
        }
    }

    /// The packs a container opened offline gets (packed files need them to be read).
    fn offline_packs(&self) -> Option<Arc<Packs>> {
        match &self.packs {
            Packing::Offline(p) => p.clone(),
            Packing::Mount(_) => None,
        }
    }

    /// Whether this run packs files (not `--no-pack`, and the mount or the backing
    /// filesystem can).
    fn packing(&self, asked: &Asked) -> bool {
        asked.pack
            && match &self.packs {
                Packing::Mount(p) => *p,
                Packing::Offline(p) => p.as_ref().is_some_and(|p| p.writable()),
            }
    }
}

/// The logical size of a packed backing file (0 for any other empty one).
pub(super) fn packed_len(backing: &Path) -> u64 {
    let Ok(f) = open_as_owner(backing, false) else {
        return 0;
    };
    match record_state(&FileStorage::new(f)) {
        Ok(RecordState::Current { loc, .. }) => loc.len as u64,
        _ => 0,
    }
}

/// Whether the backing file is packed now (its location record is current).
pub(super) fn is_packed(backing: &Path) -> bool {
    open_as_owner(backing, false).ok().is_some_and(|f| {
        matches!(
            record_state(&FileStorage::new(f)),
            Ok(RecordState::Current { .. })
        )
    })
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
pub(super) fn temp_pid(name: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(name).ok()?;
    let (_, tail) = s.rsplit_once(".squeezefs-compress.")?;
    tail.split('.').next()?.parse().ok()
}

pub(super) fn err(p: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", p.display())
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// Copies owner, mode, xattrs (all but squeezefs requests/properties) and, `with_times`,
/// times (a staged copy gets them once committed).
fn copy_metadata(from: &File, to: &File, with_times: bool) -> Result<(), String> {
    let md = from.metadata().map_err(|e| e.to_string())?;
    let (f, t) = (from, to);
    if let Ok(list) = sys::xattr_list(f, 64 << 10) {
        for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            // (A file's own background_compression is an xattr of its own: kept.)
            if name.starts_with(b"user.squeezefs.") && name != props::BACKGROUND.as_bytes() {
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
    if !with_times {
        return Ok(());
    }
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
pub(super) fn rename_over(tmp: &Path, path: &Path) -> Result<(), String> {
    std::fs::rename(tmp, path).map_err(|e| err(path, format!("replacing it with the copy: {e}")))
}

/// `syncfs` of the filesystem holding `path`.
pub(super) fn syncfs(path: &Path) -> Result<(), String> {
    let f = File::open(path).map_err(|e| err(path, e))?;
    nix::unistd::syncfs(f.as_raw_fd()).map_err(|e| err(path, std::io::Error::from(e)))
}

/// Whether the backing file is a container written with `codec` already: every extent is,
/// or is inline or raw (whose codec and level are not recorded) in a file whose codec —
/// its compression property, or `default` when it has none — is `codec`.
fn already(backing: &Path, codec: CodecSpec, default: CodecSpec) -> bool {
    let Ok(f) = open_as_owner(backing, false) else {
        return false;
    };
    let st = FileStorage::new(f);
    // A packed file: its record names the codec it was last written with.
    match record_state(&st) {
        Ok(RecordState::Current { loc, .. }) => return loc.codec == codec,
        Ok(RecordState::Unreadable(_)) | Err(_) => return false,
        Ok(_) => {}
    }
    let Ok(u) = usage(&st, None) else { return false };
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

/// Plain, or its extent shift when it is a container (or packed).
fn layout(backing: &Path) -> Result<Option<u8>, String> {
    let f = open_as_owner(backing, false).map_err(|e| err(backing, e))?;
    let st = FileStorage::new(f);
    if let Ok(RecordState::Current { loc, .. }) = record_state(&st) {
        return Ok(Some(loc.extent_shift));
    }
    let u = usage(&st, None).map_err(|e| err(backing, e))?;
    Ok((!u.plain).then(|| u.extent_size.max(1).trailing_zeros() as u8))
}

/// A file's own property `p`, read through the mount.
fn own_value(path: &Path, p: Prop) -> Option<Value> {
    let f = File::open(path).ok()?;
    let v = sys::xattr_get(&f, &p.cname(), p.max_len()).ok()?;
    props::parse(p, &v).ok()
}

/// A file's own compression property, read through the mount.
fn own_codec(path: &Path) -> Option<CodecSpec> {
    match own_value(path, Prop::Compression)? {
        Value::Codec(c) => Some(c),
        _ => None,
    }
}

/// A file's own extent size (log2), read through the mount.
fn own_shift(path: &Path) -> Option<u8> {
    match own_value(path, Prop::ExtentSize)? {
        Value::Shift(s) => Some(s),
        _ => None,
    }
}

/// A file's own dictionary, read through the mount.
fn own_dict(path: &Path) -> Option<u32> {
    match own_value(path, Prop::Dictionary)? {
        Value::Dict(d) => Some(d),
        _ => None,
    }
}

/// Sets property `p` of a file on a mount to `v` when it differs (`None`: removes it);
/// whether it changed.
fn set_prop(f: &File, p: Prop, v: Option<Value>) -> Result<bool, String> {
    let name = p.cname();
    let now = sys::xattr_get(f, &name, p.max_len())
        .ok()
        .and_then(|raw| props::parse(p, &raw).ok());
    if now == v {
        return Ok(false);
    }
    let what = p.xattr().trim_start_matches("user.squeezefs.");
    match v {
        Some(v) => sys::xattr_set(f, &name, props::format(&v).as_bytes(), 0)
            .map_err(|e| format!("setting its {what} to {}: {e}", props::format(&v)))?,
        None => match sys::xattr_remove(f, &name) {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => {
                return Err(format!("removing its {what}: {e}"))
            }
            _ => {}
        },
    }
    Ok(true)
}

/// An empty file on a mount gets the properties asked (its data, written later, uses
/// them; its extent size can be set only now); whether any changed.
pub(super) fn set_asked(path: &Path, args: &Asked) -> Result<bool, String> {
    let f = File::open(path).map_err(|e| err(path, e))?;
    let mut changed = false;
    for (p, v) in [
        (Prop::Compression, args.codec.map(Value::Codec)),
        (Prop::ExtentSize, args.extent_shift.map(Value::Shift)),
        (Prop::Dictionary, args.dict.map(Value::Dict)),
        (Prop::Force, args.force.then_some(Value::Force)),
    ] {
        if v.is_some() {
            changed |= set_prop(&f, p, v).map_err(|e| err(path, e))?;
        }
    }
    Ok(changed)
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
pub(super) fn offline(args: &Asked, job: &Job, pb: &indicatif::ProgressBar) -> Result<Done, String> {
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
        packs: job.offline_packs(),
        ..Options::default()
    };
    if let Some(shift) = shape {
        if args.extent_shift.is_none_or(|s| s == shift) {
            let f = open_as_owner(&job.backing, true).map_err(|e| err(&job.backing, e))?;
            let mut c = Container::open(FileStorage::new(f), &opts).map_err(|e| err(&job.backing, e))?;
            // The rule's dictionary, else the directory's for a file without one.
            let has = c.dictionary_property();
            let dict = args.dict.or(dir_dict.filter(|_| has.is_none()));
            let wants_dict = dict.is_some() && dict != has;
            let wants_force = args.force && !c.force_property();
            // The logical size: the backing file's (`job.size`) is larger when the current
            // copy of an extent is its second half.
            let logical = c.size().map_err(|e| err(&job.backing, e))?;
            // (A dictionary property does not keep a file out of a pack: its record keeps it.)
            let wants_pack = job.packing(args) && !c.is_packed() && logical <= 1 << shift;
            let has_codec = match c.location() {
                Some(l) => l.codec == codec,
                None => already(&job.backing, codec, job.default_codec),
            };
            let own_shift = c.extent_size_property().map(|b| b.trailing_zeros() as u8);
            job.note_own(args, c.compression_property(), has, own_shift);
            let wants_codec = args.codec.is_some() && c.compression_property() != args.codec;
            if (args.codec.is_none() || has_codec) && !wants_dict && !wants_force && !wants_pack {
                if !wants_codec {
                    return Ok(Done::Skipped);
                }
                // Stored with it already: it only becomes the file's own property.
                c.set_compression_property(args.codec)
                    .map_err(|e| err(&job.backing, e))?;
                return Ok(Done::PropsSet);
            }
            job.changed.store(
                wants_codec || wants_dict || wants_force,
                std::sync::atomic::Ordering::Relaxed,
            );
            // The file's properties before, put back when its rewrite fails (else a later
            // run would find them set and skip it, its extents still old).
            let before = (c.force_property(), has, c.compression_property());
            let undo = |c: &mut Container<FileStorage>, e: String| {
                let _ = c.set_force_property(before.0);
                let _ = c.set_dictionary_property(before.1);
                let _ = c.set_compression_property(before.2);
                err(&job.backing, e)
            };
            let set = (|| -> Result<(), String> {
                if wants_force {
                    c.set_force_property(true).map_err(|e| e.to_string())?;
                }
                if wants_dict {
                    c.set_dictionary_property(dict).map_err(|e| e.to_string())?;
                }
                if args.codec.is_some() {
                    c.set_compression_property(Some(codec))
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            })();
            if let Err(e) = set {
                return Err(undo(&mut c, e));
            }
            if wants_pack || c.is_packed() {
                // The whole file (one extent) written again goes to the packs at write-back,
                // committed with the batch so files share blocks.
                let data = (|| -> Result<_, String> {
                    let f = open_as_owner(&job.backing, false).map_err(|e| e.to_string())?;
                    let md = f.metadata().map_err(|e| e.to_string())?;
                    let data = c.read(0, logical as usize).map_err(|e| e.to_string())?;
                    c.write(0, &data).map_err(|e| e.to_string())?;
                    Ok((f, md))
                })();
                let (f, md) = data.map_err(|e| undo(&mut c, e))?;
                let staged = Staged::new(c, f, &md).map_err(|e| err(&job.backing, e))?;
                pb.inc(job.size);
                return Ok(Done::Staging(Box::new(staged)));
            }
            if let Err(e) = c.rewrite(0..u64::MAX) {
                return Err(undo(&mut c, e.to_string()));
            }
            pb.inc(job.size);
            return Ok(Done::Rewritten { packed: false });
        }
    }
    if job.splits_links(pb) {
        return Ok(Done::LeftAlone);
    }
    let src_file = open_as_owner(&job.backing, false).map_err(|e| err(&job.backing, e))?;
    let mut src = Container::open(
        FileStorage::new(src_file.try_clone().map_err(|e| e.to_string())?),
        &opts,
    )
    .map_err(|e| err(&job.backing, e))?;
    job.note_own(
        args,
        src.compression_property(),
        src.dictionary_property(),
        src.extent_size_property().map(|b| b.trailing_zeros() as u8),
    );
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
        let dict = args.dict.or(src.dictionary_property()).or(dir_dict);
        if dict.is_some() {
            dst.set_dictionary_property(dict).map_err(|e| e.to_string())?;
        }
        if args.force || src.force_property() {
            dst.set_force_property(true).map_err(|e| e.to_string())?;
        }
        copy_into(&mut src, &mut dst, |n| pb.inc(n)).map_err(|e| e.to_string())?;
        copy_metadata(&src_file, &tf, false)?;
        let md = src_file.metadata().map_err(|e| e.to_string())?;
        Staged::new(dst, tf.try_clone().map_err(|e| e.to_string())?, &md)
    })();
    match r {
        Ok(staged) => Ok(Done::Copied(tmp, Some(Box::new(staged)))),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(err(&job.backing, e))
        }
    }
}

/// A file on a mount, through the daemon.
pub(super) fn mounted(args: &Asked, job: &Job, pb: &indicatif::ProgressBar) -> Result<Done, String> {
    let shape = layout(&job.backing)?;
    // `--codec`, else the file's own property (new files take their directory's when
    // created), else the mount's.
    job.note_own_mounted(args);
    let file_codec = own_codec(&job.path);
    let own = args.codec.or(file_codec);
    let codec = own.unwrap_or(job.default_codec);
    let (file_dict, dir_dict) = dictionaries(&job.path);
    // The rule's dictionary, else the directory's for a file without one.
    let dict = args.dict.or(dir_dict.filter(|_| file_dict.is_none()));
    let wants_dict = dict.is_some() && dict != file_dict;
    let file_force = own_value(&job.path, Prop::Force).is_some();
    let wants_force = args.force && !file_force;
    if let Some(shift) = shape {
        if args.extent_shift.is_none_or(|s| s == shift) {
            let was_packed = is_packed(&job.backing);
            let wants_pack = job.packing(args) && job.size <= 1 << shift && !was_packed;
            let wants_codec = args.codec.is_some() && file_codec != args.codec;
            if already(&job.backing, codec, job.default_codec) && !wants_dict && !wants_force && !wants_pack {
                if !wants_codec {
                    return Ok(Done::Skipped);
                }
                // Stored with it already: it only becomes the file's own property.
                let f = File::open(&job.path).map_err(|e| err(&job.path, e))?;
                set_prop(&f, Prop::Compression, Some(Value::Codec(codec))).map_err(|e| err(&job.path, e))?;
                return Ok(Done::PropsSet);
            }
            job.changed.store(
                wants_codec || wants_dict || wants_force,
                std::sync::atomic::Ordering::Relaxed,
            );
            let f = File::open(&job.path).map_err(|e| err(&job.path, e))?;
            let r = (|| -> Result<(), String> {
                if wants_dict {
                    set_prop(&f, Prop::Dictionary, dict.map(Value::Dict))?;
                }
                if wants_force {
                    set_prop(&f, Prop::Force, Some(Value::Force))?;
                }
                if args.codec.is_some() {
                    set_prop(&f, Prop::Compression, Some(Value::Codec(codec)))?;
                }
                // In pieces, so the progress bar moves on big files.
                const STEP: u64 = 64 << 20;
                let mut off = 0;
                while off < job.size {
                    let v = format!("{off}:{STEP}");
                    sys::xattr_set(&f, &cstring(props::REWRITE), v.as_bytes(), 0)
                        .map_err(|e| format!("rewrite: {e} (the daemon's log says why)"))?;
                    pb.inc(STEP.min(job.size - off));
                    off += STEP;
                }
                Ok(())
            })();
            if let Err(e) = r {
                // The properties it had are put back (best effort): else a later run would
                // find them set and skip it, its extents still old.
                let _ = set_prop(&f, Prop::Dictionary, file_dict.map(Value::Dict));
                let _ = set_prop(&f, Prop::Force, file_force.then_some(Value::Force));
                let _ = set_prop(&f, Prop::Compression, file_codec.map(Value::Codec));
                return Err(err(&job.path, e));
            }
            // A packed file rewritten on a mount that packs stays packed; on one that does
            // not (nopack), it becomes a container of its own.
            let packed = wants_pack || (was_packed && matches!(job.packs, Packing::Mount(true)));
            return Ok(Done::Rewritten { packed });
        }
    }
    if job.splits_links(pb) {
        return Ok(Done::LeftAlone);
    }
    let mut src = File::open(&job.path).map_err(|e| err(&job.path, e))?;
    let before = src.metadata().map_err(|e| err(&job.path, e))?;
    let (tmp, mut tf) = temp_beside(&job.path).map_err(|e| err(&job.path, e))?;
    let r = (|| {
        // The daemon gave the copy what a file of its temporary name gets (a rule may match
        // that name, or none the real one): each property is set on it while it is empty
        // (an extent size can be set only then) to what is asked, else the file's own, else
        // what a file of its real name made now gets (its directory's, and its rule's).
        let own_shift = own_shift(&job.path);
        for (p, v) in [
            (Prop::Compression, own.or(job.create.codec).map(Value::Codec)),
            (
                Prop::ExtentSize,
                args.extent_shift
                    .or(own_shift)
                    .or(job.create.shift)
                    .map(Value::Shift),
            ),
            (
                Prop::Dictionary,
                args.dict.or(file_dict).or(job.create.dict).map(Value::Dict),
            ),
            (
                Prop::Force,
                (args.force || file_force || job.create.force).then_some(Value::Force),
            ),
        ] {
            if p == Prop::ExtentSize && v.is_none() {
                // Removing the property keeps the extent size the copy has (its temporary
                // name's rule may have given it one): the mount's first, then none.
                let has = sys::xattr_get(&tf, &p.cname(), p.max_len()).is_ok();
                if let (true, Some(d)) = (has, job.default_shift) {
                    set_prop(&tf, p, Some(Value::Shift(d)))?;
                }
            }
            set_prop(&tf, p, v)?;
        }
        // The file's own background_compression (not something a new file gets).
        set_prop(&tf, Prop::Background, own_value(&job.path, Prop::Background))?;
        copy_data(&mut src, &mut tf, before.len(), pb)?;
        copy_metadata(&src, &tf, true)?;
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
    // The copy was fsync'ed through the mount: if the daemon packed it, its record is there.
    Ok(Done::Converted {
        packed: is_packed(&job.backing),
    })
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
pub(super) fn not_served(dir: &Path) -> Result<(), String> {
    for a in dir.ancestors() {
        if let Err(e) = squeezefs_fs::lock::probe(a) {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Err(format!("{e}; run `squeezefs compress` on the mount instead"));
            }
        }
    }
    Ok(())
}
