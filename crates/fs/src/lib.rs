//! squeezefs as a FUSE filesystem: a stacked filesystem over a backing directory where
//! every regular file is a container (see `squeezefs-container`).

#![deny(unsafe_code)]

pub mod background;
mod creds;
mod devfuse;
mod inode;
mod lifecycle;
pub mod lock;
pub mod mountinfo;
mod ops;
pub mod packing;
mod pagecache;
mod prefetch;
pub mod props;
mod readahead;
pub mod reclaim;
mod requests;
pub mod rules;
mod space;
mod spin;
pub mod statsfile;
/// The one module with `unsafe`: raw system calls behind safe wrappers that take
/// `AsFd`, each block justified by a `SAFETY:` comment.
#[allow(unsafe_code)]
pub mod sys;

use std::io;
use std::path::{Path, PathBuf};

use fuser::{Config, MountOption, SessionACL};
use squeezefs_codec::CodecSpec;
use squeezefs_container::format::{
    DEFAULT_EXTENT_SHIFT, FORMAT_VERSION_DICT, MAX_EXTENT_SHIFT, MIN_EXTENT_SHIFT,
};
use squeezefs_container::pack::format::PACKS_FORMAT_VERSION;
use squeezefs_container::{DirtyBudget, Options, DEFAULT_DIRTY_BYTES};

pub use ops::SqueezeFs;

/// Seconds between background pack reclaim rounds (`pack_gc=`).
pub const DEFAULT_PACK_GC: u64 = 60;

/// Everything `-o` can say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountConfig {
    pub codec: CodecSpec,
    /// `compress=zstd:adapt[:MIN-MAX]`: the level range of the adaptive controller
    /// (`squeezefs_container::adapt`); `codec` is then zstd at its starting level.
    pub adapt: Option<(i32, i32)>,
    /// `compress-force=`: compress every extent, without the heuristic, the per-file
    /// backoff or the early abort.
    pub force: bool,
    pub extent_shift: u8,
    pub allow_other: bool,
    pub default_permissions: bool,
    pub read_only: bool,
    /// `pack` (default) / `nopack`: files of at most one extent go to packs (format 4), on
    /// a backing filesystem that keeps a location record for free (probed at mount).
    pub pack: bool,
    /// `pack_cache=SIZE`: bytes of decompressed pack blocks kept (default 32M).
    pub pack_cache: usize,
    /// `pack_reclaim` (default) / `nopack_reclaim`: at unmount, while the backing directory
    /// is still locked, packs with too much garbage are rewritten (the daemon's
    /// `after_unmount` hook does it; bounded per unmount).
    pub pack_reclaim: bool,
    /// `pack_gc=SECS` (default 60; 0: off): while mounted, a background round reclaims
    /// packs above 25 % garbage every SECS seconds when files were packed, removed or
    /// renamed since the last round (see `reclaim.rs`).
    pub pack_gc: u64,
    /// `fill_cache` (default) / `nofill_cache`: after a READ decoded an extent, the rest of
    /// the extent is handed to the kernel's page cache (`pagecache.rs`), as btrfs keeps
    /// every page it decompressed.
    pub fill_cache: bool,
    /// `max_dirty=SIZE`: decompressed bytes written but not yet compressed that all files
    /// together may hold in the daemon's memory (partial extents, as a random writer leaves
    /// them) before a writer compresses its own; `None`: [`default_max_dirty`].
    pub max_dirty: Option<usize>,
    /// `dirty_expire=SECS` (default 30): dirty bytes held that long are written out to the
    /// backing file while their file stays open (`lifecycle::behind`).
    pub dirty_expire: u64,
    /// `spin=MICROS` (default [`spin::DEFAULT_SPIN_US`], off; 0: off): after a request, a
    /// session thread keeps reading /dev/fuse instead of sleeping until that long passes
    /// without one (`spin.rs`).
    pub spin_us: u64,
    /// `background_compression=CODEC[:LEVEL]`, `background_idle=SECS`,
    /// `background_rate=SIZE` (a second): the background pass (`background.rs`).
    pub background: background::Config,
    /// `rules=`: compression rules by file name where no directory has its own
    /// (`crate::rules`).
    pub rules: Option<std::sync::Arc<rules::Rules>>,
    /// `create`: make BACKING and MOUNTPOINT when they do not exist (otherwise a missing
    /// one is refused: a typo, or a disk not mounted yet, must not put data elsewhere).
    pub create: bool,
    /// The kernel's own options, passed to it as they are ([`KERNEL_OPTIONS`]).
    pub other: Vec<String>,
    /// Per-mount flags fuser cannot pass to mount(2) (`nodiratime`, `diratime`,
    /// `strictatime`), in the order given: set with mount_setattr(2) once the mount exists.
    pub mount_attrs: Vec<String>,
}

/// Options that are the kernel's (the VFS's mount flags, FUSE's `max_read`, the security
/// module's labels): passed through. Any other name is refused before mounting, instead
/// of by the kernel's FUSE option parser, whose EINVAL names nothing.
pub const KERNEL_OPTIONS: &[&str] = &[
    "noatime",
    "atime",
    "relatime",
    "strictatime",
    "nodiratime",
    "diratime",
    "sync",
    "async",
    "dirsync",
    "nodev",
    "dev",
    "nosuid",
    "suid",
    "noexec",
    "exec",
];

/// The kernel's options that take a value (`max_read=N`, SELinux's `context=` family).
pub const KERNEL_VALUE_OPTIONS: &[&str] = &["max_read", "context", "fscontext", "defcontext", "rootcontext"];

/// squeezefs's own option names, for the message that refuses an unknown one.
const OWN_OPTIONS: &str = "compress[=ALG[:LEVEL]] (or compress=zstd:adapt[:MIN-MAX]), compress-force=, extent_size=, pack, nopack, pack_cache=, \
                           pack_gc=, pack_reclaim, nopack_reclaim, fill_cache, nofill_cache, max_dirty=, dirty_expire=, spin=, background_compression=, background_idle=, \
                           background_rate=, background_extent_size=, rules=\"GLOBS=SETTINGS; ...\", allow_other, default_permissions, ro, rw, create";

/// Splits a `-o` list at the commas outside double quotes (libmount's rule: `rules="a,b"`
/// is one option), the quotes removed.
pub fn split_options(list: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in list.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

impl Default for MountConfig {
    fn default() -> MountConfig {
        MountConfig {
            codec: CodecSpec::DEFAULT,
            adapt: None,
            force: false,
            extent_shift: DEFAULT_EXTENT_SHIFT,
            allow_other: false,
            default_permissions: true,
            read_only: false,
            pack: true,
            pack_cache: squeezefs_container::pack::DEFAULT_CACHE,
            pack_reclaim: true,
            pack_gc: DEFAULT_PACK_GC,
            fill_cache: true,
            max_dirty: None,
            dirty_expire: squeezefs_container::DEFAULT_DIRTY_EXPIRE.as_secs(),
            spin_us: spin::DEFAULT_SPIN_US,
            background: Default::default(),
            rules: None,
            create: false,
            other: Vec::new(),
            mount_attrs: Vec::new(),
        }
    }
}

/// The dirty budget of a mount without `max_dirty=`: a tenth of the memory available
/// when it mounts, as the kernel starts writing its own dirty pages back at a tenth
/// (`vm.dirty_background_ratio`); at least 8 MiB, at most 4 GiB. Available is the
/// system's `MemAvailable`, or the daemon's memory cgroup limit when that is less (a
/// container's: the OOM killer would take the dirty bytes with the daemon).
pub fn default_max_dirty() -> usize {
    let avail = [mem_available(), cgroup_memory_limit()]
        .into_iter()
        .flatten()
        .min();
    let want = avail.map_or(DEFAULT_DIRTY_BYTES as u64, |a| a / 10);
    want.clamp(DEFAULT_DIRTY_BYTES as u64, 4 << 30) as usize
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    sys::meminfo_bytes(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemAvailable:")
}

/// The memory limit of this process's cgroup, the smallest along its ancestors.
fn cgroup_memory_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_memory_limit_in(Path::new("/sys/fs/cgroup"), &own)
}

/// [`cgroup_memory_limit`] under the cgroup mount `root`, for `/proc/self/cgroup` = `own`:
/// cgroup v1's memory controller (`N:memory:/path`, `memory.limit_in_bytes`, 2^62 or more
/// being no limit) or else v2's (`0::/path`, `memory.max`, "max" being none), the smallest
/// limit of the cgroup and its ancestors (a directory missing, as inside a container that
/// sees only its own part of the tree, has none).
fn cgroup_memory_limit_in(root: &Path, own: &str) -> Option<u64> {
    let read = |dir: &Path, name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name)).ok()?.trim().parse().ok()
    };
    let v1 = own.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (ctrls, path) = rest.split_once(':')?;
        ctrls.split(',').any(|c| c == "memory").then_some(path)
    });
    let (base, path, file) = match v1 {
        Some(path) => (root.join("memory"), path, "memory.limit_in_bytes"),
        None => (
            root.to_path_buf(),
            own.lines().find_map(|l| l.strip_prefix("0::"))?,
            "memory.max",
        ),
    };
    let mut dir = base.join(path.trim().trim_start_matches('/'));
    let mut least: Option<u64> = None;
    loop {
        if let Some(limit) = read(&dir, file).filter(|&l| l < 1 << 62) {
            least = Some(least.map_or(limit, |m| m.min(limit)));
        }
        if dir == base || !dir.pop() {
            break;
        }
    }
    least
}

/// Parses a size such as `131072`, `128K`, `128KiB`, `1M`, `2G`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult) = if let Some(n) = lower.strip_suffix("kib").or_else(|| lower.strip_suffix('k')) {
        (n, 1024)
    } else if let Some(n) = lower.strip_suffix("mib").or_else(|| lower.strip_suffix('m')) {
        (n, 1 << 20)
    } else if let Some(n) = lower.strip_suffix("gib").or_else(|| lower.strip_suffix('g')) {
        (n, 1 << 30)
    } else {
        (lower.as_str(), 1)
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("`{t}` is not a size (examples: 131072, 128K, 1M)"))
}

/// An extent size (its log2) as [`parse_extent_size`] reads it back: `16K`, `1M`.
pub fn format_extent_size(shift: u8) -> String {
    if shift >= 20 {
        format!("{}M", 1u64 << (shift - 20))
    } else {
        format!("{}K", 1u64 << (shift.max(10) - 10))
    }
}

/// Parses an extent size into its log2, accepting powers of two from 4 KiB to 1 MiB.
pub fn parse_extent_size(s: &str) -> Result<u8, String> {
    let n = parse_size(s)?;
    if !n.is_power_of_two() || !(MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT).contains(&(n.trailing_zeros() as u8)) {
        return Err(format!("extent_size={s}: must be a power of two from 4K to 1M"));
    }
    Ok(n.trailing_zeros() as u8)
}

impl MountConfig {
    /// Applies one comma-separated `-o` list.
    pub fn apply_options(&mut self, list: &str) -> Result<(), String> {
        if list.matches('"').count() % 2 == 1 {
            return Err(format!("-o {list}: a `\"` is not closed"));
        }
        let pieces = split_options(list);
        for opt in pieces.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            match (key, value) {
                ("compress", Some(v)) | ("compress-force", Some(v)) | ("compress_force", Some(v)) => {
                    match squeezefs_container::adapt::parse(v) {
                        Some(range) => {
                            let (min, max) = range.map_err(|e| format!("{key}={v}: {e}"))?;
                            self.adapt = Some((min, max));
                            self.codec = CodecSpec::new(
                                squeezefs_codec::Algorithm::Zstd,
                                squeezefs_container::adapt::start_level(min, max),
                            )
                            .map_err(|e| format!("{key}={v}: {e}"))?;
                        }
                        None => {
                            self.adapt = None;
                            self.codec = v.parse().map_err(|e| format!("{key}={v}: {e}"))?;
                        }
                    }
                    self.force = key != "compress";
                }
                ("compress", None) => {
                    self.adapt = None;
                    self.codec = CodecSpec::DEFAULT;
                    self.force = false;
                }
                ("extent_size", Some(v)) | ("extent-size", Some(v)) => {
                    self.extent_shift = parse_extent_size(v)?;
                    // An extent size chosen for the mount is kept by the background pass
                    // too, unless `background_extent_size=` says otherwise.
                    if !self.background.extent_shift_given {
                        self.background.extent_shift = self.extent_shift;
                    }
                }
                ("background_extent_size" | "background-extent-size", Some(v)) => {
                    self.background.extent_shift =
                        parse_extent_size(v).map_err(|e| e.replace("extent_size=", &format!("{key}=")))?;
                    self.background.extent_shift_given = true;
                }
                ("rules", Some(v)) => {
                    let r = rules::Rules::shared(v).map_err(|e| {
                        format!("rules={v}: {e} (in -o, quote rules that hold commas: rules=\"*.log,*.txt=zstd:9; *.jpg=none\")")
                    })?;
                    self.rules = (!r.is_empty()).then_some(r);
                }
                ("allow_other", None) => self.allow_other = true,
                ("default_permissions", None) => self.default_permissions = true,
                ("ro", None) => self.read_only = true,
                ("pack", None) => self.pack = true,
                ("nopack", None) => self.pack = false,
                ("pack_reclaim", None) => self.pack_reclaim = true,
                ("nopack_reclaim", None) => self.pack_reclaim = false,
                ("fill_cache", None) => self.fill_cache = true,
                ("nofill_cache", None) => self.fill_cache = false,
                ("pack_cache" | "pack-cache", Some(v)) => {
                    self.pack_cache = usize::try_from(parse_size(v)?)
                        .ok()
                        .filter(|n| *n <= 1 << 40)
                        .ok_or_else(|| format!("pack_cache={v}: too large"))?
                }
                ("max_dirty" | "max-dirty", Some(v)) => {
                    self.max_dirty = Some(
                        usize::try_from(parse_size(v)?)
                            .ok()
                            .filter(|n| *n <= 1 << 40)
                            .ok_or_else(|| format!("max_dirty={v}: too large"))?,
                    )
                }
                ("dirty_expire" | "dirty-expire", Some(v)) => {
                    self.dirty_expire =
                        v.parse()
                            .ok()
                            .filter(|n| (1..=86400).contains(n))
                            .ok_or_else(|| {
                                format!(
                                    "dirty_expire={v}: seconds dirty data may wait in memory (1 to 86400)"
                                )
                            })?
                }
                ("spin", Some(v)) => {
                    self.spin_us = v.parse().ok().filter(|n| *n <= 1_000_000).ok_or_else(|| {
                        format!(
                            "spin={v}: µs a session thread spins after a request (0: off, at most 1000000; try {})",
                            spin::SUGGESTED_SPIN_US
                        )
                    })?
                }
                ("background_compression" | "background-compression", Some(v)) => {
                    let c: CodecSpec = v.parse().map_err(|e| format!("{key}={v}: {e}"))?;
                    // `none`: no pass, as when the option is not given.
                    self.background.target = Some(c).filter(|c| c.alg != squeezefs_codec::Algorithm::None);
                }
                ("background_idle" | "background-idle", Some(v)) => {
                    self.background.idle = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=86400).contains(n))
                        .map(std::time::Duration::from_secs)
                        .ok_or_else(|| {
                            format!("{key}={v}: seconds without a change before the background pass runs (1 to 86400)")
                        })?
                }
                ("background_rate" | "background-rate", Some(v)) => {
                    self.background.rate = parse_size(v)
                        .ok()
                        .filter(|n| *n >= 1 << 20)
                        .ok_or_else(|| format!("{key}={v}: bytes a second the background pass rewrites (at least 1M; e.g. 64M)"))?
                }
                ("pack_gc" | "pack-gc", Some(v)) => {
                    self.pack_gc = v
                        .parse()
                        .ok()
                        .filter(|n| *n <= 86400 * 365)
                        .ok_or_else(|| format!("pack_gc={v}: seconds between reclaim rounds (0: off)"))?
                }
                ("rw", None) => self.read_only = false,
                ("create", None) => self.create = true,
                // mount(8) and fstab noise that means nothing to a FUSE filesystem (mount(8)
                // passes `user=NAME` to the helper of a `user` fstab line).
                (
                    "defaults" | "auto" | "noauto" | "user" | "nouser" | "users" | "owner" | "group"
                    | "_netdev" | "nofail",
                    None,
                )
                | ("user", Some(_)) => {}
                // relatime is what a new mount gets anyway (the kernel's default); it and
                // noatime/atime undo an earlier strictatime, as the last access-time option wins.
                ("relatime", None) => self.mount_attrs.retain(|o| o != "strictatime"),
                ("noatime" | "atime", None) => {
                    self.mount_attrs.retain(|o| o != "strictatime");
                    self.other.push(opt.to_string());
                }
                // Per-mount flags fuser cannot pass to mount(2) (its data string would reach
                // the kernel's FUSE option parser: EINVAL): set with mount_setattr(2) once
                // the mount exists (`set_mount_attrs`), as mount(8) sets them on any mount.
                ("nodiratime" | "diratime" | "strictatime", None) => {
                    if opt == "strictatime" {
                        self.other.retain(|o| o != "noatime" && o != "atime");
                    }
                    self.mount_attrs.push(opt.to_string());
                }
                // Options whose flag has no per-mount form to set afterwards (lazytime is
                // the superblock's) or that a FUSE mount cannot honour: refused, clearly.
                ("norelatime" | "lazytime" | "nolazytime", None) => {
                    return Err(format!(
                        "mount option `{opt}` is not supported by squeezefs (atime, noatime, relatime, \
                         strictatime, nodiratime, sync, async and dirsync are); mount the backing \
                         filesystem with it instead"
                    ));
                }
                ("x-systemd.automount", _) => {}
                (k, _) if k.starts_with("x-") || k.starts_with("comment") => {}
                ("compress-force" | "compress_force" | "extent_size" | "extent-size", None)
                | ("pack_cache" | "pack-cache" | "pack_gc" | "pack-gc" | "max_dirty" | "max-dirty", None)
                | ("dirty_expire" | "dirty-expire" | "spin" | "rules", None)
                | (
                    "background_compression" | "background_idle" | "background_rate" | "background_extent_size",
                    None,
                )
                | (
                    "allow_other"
                    | "default_permissions"
                    | "ro"
                    | "rw"
                    | "pack"
                    | "nopack"
                    | "pack_reclaim"
                    | "nopack_reclaim"
                    | "fill_cache"
                    | "nofill_cache"
                    | "create",
                    Some(_),
                ) => {
                    return Err(format!("mount option `{opt}` is malformed"));
                }
                (k, None) if KERNEL_OPTIONS.contains(&k) => self.other.push(opt.to_string()),
                (k, Some(v)) if KERNEL_VALUE_OPTIONS.contains(&k) && !v.is_empty() => {
                    self.other.push(opt.to_string())
                }
                (k, Some(_)) if KERNEL_OPTIONS.contains(&k) => {
                    return Err(format!("mount option `{k}` takes no value (`{opt}`)"));
                }
                (k, _) if KERNEL_VALUE_OPTIONS.contains(&k) => {
                    return Err(format!("mount option `{k}` needs a value ({k}=…)"));
                }
                (k, _) => {
                    let values: Vec<String> = KERNEL_VALUE_OPTIONS.iter().map(|k| format!("{k}=…")).collect();
                    return Err(format!(
                        "unknown mount option `{k}`: squeezefs knows {OWN_OPTIONS}; the kernel's are {}, {} \
                         (`squeezefs mount --help` explains each)",
                        KERNEL_OPTIONS.join(", "),
                        values.join(", ")
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn container_options(&self) -> Options {
        Options {
            codec: self.codec,
            adapt: self
                .adapt
                .map(|(min, max)| squeezefs_container::adapt::Adaptive::new(min, max)),
            extent_shift: self.extent_shift,
            force: self.force,
            stats: Default::default(),
            packs: None,
            dirty: DirtyBudget::with_expire(
                self.max_dirty.unwrap_or_else(default_max_dirty),
                std::time::Duration::from_secs(self.dirty_expire),
            ),
        }
    }

    fn fuse_config(&self, backing: &Path) -> Config {
        let mut c = Config::default();
        c.mount_options
            .push(MountOption::FSName(format!("squeezefs:{}", backing.display())));
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = sys::euid() == 0;
        if root {
            // Root mounts with mount(2) itself, where fuser leaves the subtype out: passed to
            // the kernel, it makes the type `fuse.squeezefs`, so mount(8) finds our helper
            // (for `mount -o remount,ro`) and `findmnt -t fuse.squeezefs` finds the mount.
            c.mount_options
                .push(MountOption::CUSTOM("subtype=squeezefs".into()));
            // And, as mount(8) does for any filesystem root mounts, suid and dev unless
            // asked otherwise (others' mounts are always nosuid,nodev: fusermount3).
            if !self.other.iter().any(|o| o == "nosuid") {
                c.mount_options.push(MountOption::Suid);
            }
            if !self.other.iter().any(|o| o == "nodev") {
                c.mount_options.push(MountOption::Dev);
            }
        } else {
            c.mount_options.push(MountOption::Subtype("squeezefs".into()));
        }
        if self.default_permissions {
            c.mount_options.push(MountOption::DefaultPermissions);
        }
        if self.read_only {
            c.mount_options.push(MountOption::RO);
        }
        for o in &self.other {
            c.mount_options.push(match o.as_str() {
                "noatime" => MountOption::NoAtime,
                "atime" => MountOption::Atime,
                "sync" => MountOption::Sync,
                "async" => MountOption::Async,
                "dirsync" => MountOption::DirSync,
                "nodev" => MountOption::NoDev,
                "nosuid" => MountOption::NoSuid,
                "noexec" => MountOption::NoExec,
                "dev" => MountOption::Dev,
                "suid" => MountOption::Suid,
                "exec" => MountOption::Exec,
                _ => MountOption::CUSTOM(o.clone()),
            });
        }
        c.acl = if self.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(std::thread::available_parallelism().map_or(2, |n| n.get()).max(2) * 2);
        c.clone_fd = true;
        c
    }
}

/// Runs `probe` on a new scratch file in squeezefs's private directory of `backing`
/// (`.squeezefs-packs/.probe-WHAT-PID`, the directory made if missing), which is removed
/// afterwards whatever happened. Nothing the mount shows is touched: the root's entries and
/// times stay the user's.
pub(crate) fn with_probe_file<T>(
    backing: &Path,
    what: &str,
    probe: impl FnOnce(std::fs::File) -> io::Result<T>,
) -> io::Result<T> {
    use squeezefs_container::pack::dir::{FsPackDir, PROBE_PREFIX};
    let private = FsPackDir::new(backing, true);
    private.ensure()?;
    let path = private
        .path()
        .join(format!("{PROBE_PREFIX}{what}-{}", std::process::id()));
    let result = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(probe);
    let _ = std::fs::remove_file(&path);
    result
}

/// Refuses backing directories whose filesystem cannot punch holes: containers rely on it
/// (their unused halves are holes, and so are all-zero extents).
pub fn check_backing(backing: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(backing)
        .map_err(|e| io::Error::new(e.kind(), format!("backing directory {}: {e}", backing.display())))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", backing.display()),
        ));
    }
    let result = with_probe_file(backing, "punch", |f| {
        use std::os::unix::fs::FileExt;
        f.write_all_at(&[1u8; 16384], 0)?;
        let s = squeezefs_container::FileStorage::new(f);
        use squeezefs_container::Storage;
        s.punch(4096, 8192)
    });
    if let Err(e) = &result {
        if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
            // A full backing filesystem must still mount (to read, and to delete).
            log::warn!(
                "the filesystem holding {} is full ({e}): hole punching not probed; writes will fail with ENOSPC until space is freed",
                backing.display()
            );
            return Ok(());
        }
    }
    result.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "the filesystem holding {} cannot punch holes in files ({e}); squeezefs needs sparse \
                 files and FALLOC_FL_PUNCH_HOLE (ext4, xfs, btrfs, tmpfs, NFS 4.2 and CephFS have them)",
                backing.display()
            ),
        )
    })
}

/// Raises the soft limit on open files (often 1024) to the hard limit, as libfuse's
/// passthrough_hp does: open files and, without handles, every known inode hold an fd.
/// Returns the limit in force.
fn raise_fd_limit() -> u64 {
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    sys::raise_fd_limit(nr_open.min(1 << 20))
}

/// How long a new mount waits for the previous daemon of its backing directory, unmounted
/// but still writing its files out.
pub const UNMOUNT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Mounts and serves until unmounted (or `stop` fires). Calls `ready` once the mount is live.
/// Serves `backing` at `mountpoint` until unmounted. `ready` runs once the mount is live;
/// `after_unmount` once every file is written out and the session is over, while this
/// process still holds the backing directory's lock (nothing else can touch it: pack
/// garbage is reclaimed there).
pub fn mount(
    backing: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
    after_unmount: impl FnOnce(&Path),
) -> io::Result<()> {
    let backing: PathBuf = backing.canonicalize()?;
    devfuse::check()?;
    // SIGINT/SIGTERM unmount cleanly, so dirty data is written: blocked here, before this
    // function starts any thread (a thread inherits the mask it is started with, and a
    // signal for the process goes to any thread that does not block it — whose default
    // action then ends the process with files unwritten), and waited for below.
    let wait_for_signal = sys::block_termination_signals();
    // One daemon per backing directory; held until this function returns. A daemon just
    // unmounted may still be writing its last files out (on a loaded machine, seconds):
    // wait for it, as long as it serves no mount.
    let _lock = lock::lock_wait(&backing, UNMOUNT_WAIT, |why| {
        log::info!(
            "{why}; its mount is gone, so waiting up to {} s for it to finish writing",
            UNMOUNT_WAIT.as_secs()
        )
    })?;
    if !cfg.read_only {
        check_backing(&backing)?;
    }
    let limit = raise_fd_limit();
    // The zstd workspace pool: one compressing thread per core (plus the reserved
    // max-level workspace), tables sized for this mount's extents.
    squeezefs_codec::workspace::configure(squeezefs_codec::workspace::PoolConfig {
        max_workspaces: std::thread::available_parallelism().map_or(2, |n| n.get()) + 1,
        input_size: 1 << cfg.extent_shift,
        ..Default::default()
    });
    let mut opts = cfg.container_options();
    let packs = packing::open(&backing, cfg.pack && !cfg.read_only, cfg.pack_cache)?;
    // Announced here, once the probe has said whether this mount packs (format 4).
    log::info!(
        "mounting {} at {} (compress={}, extent size {} KiB, format {})",
        backing.display(),
        mountpoint.display(),
        opts.compress_name(),
        (1u32 << cfg.extent_shift) / 1024,
        // (Versions 5 and 6 are only ever written by the background pass, for the files it
        // keeps the times of or gives larger extents.)
        if packs.writable() {
            PACKS_FORMAT_VERSION
        } else {
            FORMAT_VERSION_DICT
        }
    );
    opts.packs = Some(packs);
    let pack_gc = (cfg.pack_gc > 0).then(|| std::time::Duration::from_secs(cfg.pack_gc));
    let fs = SqueezeFs::new(
        &backing,
        opts,
        cfg.read_only,
        pack_gc,
        cfg.fill_cache,
        cfg.background.clone(),
        cfg.rules.clone(),
    )?;
    fs.fit_fd_limit(limit);
    if !fs.uses_handles() {
        log::info!("files are reopened by name (no CAP_DAC_READ_SEARCH for file handles)");
    }
    let notifier = fs.notifier_slot();
    let spin = fs.spin_handle();
    let mut session = fuser::Session::new(fs, mountpoint, &cfg.fuse_config(&backing))?;
    // Returning an error here drops the session, which unmounts.
    set_mount_attrs(mountpoint, &cfg.mount_attrs)?;
    let _ = notifier.set(session.notifier());
    {
        use std::os::fd::AsFd;
        if let Err(e) = spin.attach(session.as_fd(), std::time::Duration::from_micros(cfg.spin_us)) {
            log::warn!("not spinning on /dev/fuse: {e}");
        }
    }
    let mut unmounter = session.unmount_callable();
    std::thread::spawn(move || {
        let sig = wait_for_signal();
        log::info!("signal {sig}: unmounting");
        if let Err(e) = unmounter.unmount() {
            log::error!("unmount failed: {e}; run `fusermount3 -u` or `umount -l`");
        }
    });
    ready();
    // `run` returns once the filesystem is destroyed (every file written out and synced).
    let ended = session.run();
    spin.stop();
    session_ended(ended)?;
    log::info!("unmounted {}: every file written out", mountpoint.display());
    after_unmount(&backing);
    Ok(())
}

/// What `fuser::Session::run` returned, with the end of an unmount that raced a request
/// counted as the clean end it is. The kernel aborts the connection at unmount: it marks
/// each device's processing queue disconnected, then the input queue. A session thread
/// that takes a request off the input queue in between (a RELEASE of a file closed just
/// before, or one moved there by the abort itself from the background queue) is answered
/// `ECONNABORTED` (`fuse_dev_do_read`, fs/fuse/dev.c) instead of the `ENODEV` fuser 0.18
/// takes for the end, and `run` returns that error, although every thread ended and
/// `destroy` wrote every file out. Without `FUSE_ABORT_ERROR` (never asked for here) no
/// other read of /dev/fuse fails so: it only ever means the connection is gone. The
/// request is lost as every request still queued at an unmount is (a RELEASE's file is
/// written out by `destroy`).
fn session_ended(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {
            log::debug!("the session ended with {e} (an unmount that raced a request)");
            Ok(())
        }
        r => r,
    }
}

/// Sets the per-mount flags `attrs` (`nodiratime`, `diratime`, `strictatime`, in order) on
/// the new mount at `mountpoint` with mount_setattr(2). Needs root (CAP_SYS_ADMIN) for the
/// mount: without it the error says so. Nothing is done when `attrs` is empty.
fn set_mount_attrs(mountpoint: &Path, attrs: &[String]) -> io::Result<()> {
    let (mut set, mut clear) = (0u64, 0u64);
    for a in attrs {
        match a.as_str() {
            "nodiratime" => {
                set |= sys::MOUNT_ATTR_NODIRATIME;
                clear &= !sys::MOUNT_ATTR_NODIRATIME;
            }
            "diratime" => {
                clear |= sys::MOUNT_ATTR_NODIRATIME;
                set &= !sys::MOUNT_ATTR_NODIRATIME;
            }
            "strictatime" => {
                set = (set & !sys::MOUNT_ATTR__ATIME) | sys::MOUNT_ATTR_STRICTATIME;
                clear |= sys::MOUNT_ATTR__ATIME;
            }
            _ => {}
        }
    }
    if set == 0 && clear == 0 {
        return Ok(());
    }
    sys::mount_setattr(mountpoint, set, clear).map_err(|e| {
        let names = attrs.join(",");
        match e.raw_os_error() {
            Some(libc::EPERM) => io::Error::new(
                e.kind(),
                format!("mount option `{names}`: {e} (only root can set it on a FUSE mount)"),
            ),
            _ => io::Error::new(e.kind(), format!("mount option `{names}`: mount_setattr: {e}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_options_parse() {
        let mut c = MountConfig::default();
        assert_eq!((c.max_dirty, c.dirty_expire), (None, 30));
        c.apply_options("max_dirty=64M,dirty_expire=5").unwrap();
        assert_eq!((c.max_dirty, c.dirty_expire), (Some(64 << 20), 5));
        let o = c.container_options();
        assert_eq!(o.dirty.limit(), 64 << 20);
        assert_eq!(o.dirty.expire(), std::time::Duration::from_secs(5));
        assert!(c
            .apply_options("dirty_expire=0")
            .unwrap_err()
            .contains("1 to 86400"));
        assert!(c.apply_options("max_dirty").unwrap_err().contains("malformed"));
        assert!(c.apply_options("max_dirty=lots").is_err());
        let d = default_max_dirty();
        assert!((DEFAULT_DIRTY_BYTES..=4 << 30).contains(&d), "{d}");
    }

    #[test]
    fn adaptive_compression_parses() {
        let mut c = MountConfig::default();
        c.apply_options("compress=zstd:adapt").unwrap();
        assert_eq!(
            (c.adapt, c.codec.to_string()),
            (Some((1, 9)), "zstd:3".to_string())
        );
        assert_eq!(c.container_options().compress_name(), "zstd:adapt:1-9");
        c.apply_options("compress-force=zstd:adapt:5-12").unwrap();
        assert_eq!((c.adapt, c.codec.level, c.force), (Some((5, 12)), 5, true));
        c.apply_options("compress=lz4").unwrap();
        assert_eq!(c.adapt, None, "a later compress= replaces it");
        assert!(c.container_options().adapt.is_none());
        let e = c.apply_options("compress=zstd:adapt:12-5").unwrap_err();
        assert!(
            e.contains("compress=zstd:adapt:12-5") && e.contains("MIN <= MAX"),
            "{e}"
        );
    }

    #[test]
    fn rules_option_takes_a_quoted_list_and_refuses_a_bad_one_saying_where() {
        let mut c = MountConfig::default();
        c.apply_options(r#"compress=lz4,rules="*.log,*.txt=zstd:9; *.db=zstd:1,extent_size=16K",ro"#)
            .unwrap();
        let r = c.rules.as_ref().expect("rules");
        assert_eq!(r.to_string(), "*.log,*.txt=zstd:9; *.db=zstd:1,extent_size=16K");
        assert!(
            c.read_only && c.codec == "lz4".parse().unwrap(),
            "the options around it"
        );
        // Unquoted, the first comma ends it: one glob and one setting still work.
        c.apply_options("rules=*.jpg=none;*.log=zstd:7").unwrap();
        assert_eq!(c.rules.as_ref().unwrap().list.len(), 2);
        let e = c.apply_options(r#"rules="*.log=zstd:9; *.db""#).unwrap_err();
        assert!(e.contains("column 19") && e.contains("quote"), "{e}");
        assert!(c
            .apply_options(r#"rules="*.log=lz4"#)
            .unwrap_err()
            .contains("not closed"));
        // Unquoted with commas: the pieces after the first comma are refused by name.
        assert!(c.apply_options("rules=*.log,*.txt=zstd:9").is_err());
        c.apply_options(r#"rules="""#).unwrap();
        assert!(c.rules.is_none(), "empty: none");
    }

    #[test]
    fn background_options_parse() {
        let mut c = MountConfig::default();
        assert_eq!(
            c.background,
            background::Config::default(),
            "no pass unless asked"
        );
        c.apply_options("background_compression=zstd:15,background_idle=2,background_rate=16M")
            .unwrap();
        assert_eq!(c.background.target, Some("zstd:15".parse().unwrap()));
        assert_eq!(c.background.idle, std::time::Duration::from_secs(2));
        assert_eq!(c.background.rate, 16 << 20);
        c.apply_options("background_compression=none").unwrap();
        assert_eq!(c.background.target, None);
        // Cold files get 1 MiB extents, unless the mount chose an extent size, unless
        // `background_extent_size=` says otherwise (in any order).
        assert_eq!(c.background.extent_shift, 20);
        c.apply_options("extent_size=16K").unwrap();
        assert_eq!(c.background.extent_shift, 14);
        let mut c = MountConfig::default();
        c.apply_options("background_extent_size=512K,extent_size=16K")
            .unwrap();
        assert_eq!((c.extent_shift, c.background.extent_shift), (14, 19));
        c.apply_options("background_extent_size=16K").unwrap();
        assert_eq!(c.background.extent_shift, 14);
        for (bad, says) in [
            (
                "background_extent_size=2M",
                "background_extent_size=2M: must be a power of two",
            ),
            ("background_extent_size", "malformed"),
            ("background_compression=zstd:42", "background_compression=zstd:42"),
            ("background_compression", "malformed"),
            ("background_idle=0", "1 to 86400"),
            ("background_rate=4K", "at least 1M"),
        ] {
            let e = c.apply_options(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn spin_option_parses() {
        let mut c = MountConfig::default();
        assert_eq!(c.spin_us, 0, "off unless asked for");
        c.apply_options("spin=100").unwrap();
        assert_eq!(c.spin_us, spin::SUGGESTED_SPIN_US);
        c.apply_options("spin=0").unwrap();
        assert_eq!(c.spin_us, 0);
        c.apply_options("spin=250").unwrap();
        assert_eq!(c.spin_us, 250);
        assert!(c.apply_options("spin").unwrap_err().contains("malformed"));
        assert!(c.apply_options("spin=-1").unwrap_err().contains("0: off"));
        assert!(c.apply_options("spin=2000000").is_err());
    }

    #[test]
    fn a_memory_cgroup_limit_is_read_in_v1_and_v2() {
        let root = std::env::temp_dir().join(format!("sq-cgroup-{}", std::process::id()));
        let v1 = root.join("memory/outer/box");
        std::fs::create_dir_all(&v1).unwrap();
        let unlimited = "9223372036854771712\n";
        std::fs::write(root.join("memory/memory.limit_in_bytes"), unlimited).unwrap();
        std::fs::write(root.join("memory/outer/memory.limit_in_bytes"), "419430400\n").unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), unlimited).unwrap();
        let own = "9:name=systemd:/\n4:memory:/outer/box\n0::/\n";
        assert_eq!(
            cgroup_memory_limit_in(&root, own),
            Some(419430400),
            "an ancestor's limit"
        );
        std::fs::write(v1.join("memory.limit_in_bytes"), "1000\n").unwrap();
        assert_eq!(cgroup_memory_limit_in(&root, own), Some(1000), "the smallest");
        std::fs::write(root.join("memory/outer/memory.limit_in_bytes"), unlimited).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), unlimited).unwrap();
        assert_eq!(cgroup_memory_limit_in(&root, own), None, "v1 without a limit");
        let v2 = root.join("slice/box");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.max"), "600\n").unwrap();
        assert_eq!(cgroup_memory_limit_in(&root, "0::/slice/box\n"), Some(600));
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(
            cgroup_memory_limit_in(&root, "0::/slice/box\n"),
            None,
            "v2 without a limit"
        );
        assert_eq!(
            cgroup_memory_limit_in(&root, "0::/not/here\n"),
            None,
            "a path not visible"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn options_parse() {
        let mut c = MountConfig::default();
        c.apply_options("compress=zstd:9,extent_size=1M,allow_other,noatime,defaults")
            .unwrap();
        assert_eq!(c.codec, "zstd:9".parse().unwrap());
        assert_eq!(c.extent_shift, 20);
        assert!(c.allow_other && !c.force);
        assert_eq!(c.other, vec!["noatime".to_string()]);
        c.apply_options("compress-force=lz4,ro").unwrap();
        assert!(c.force && c.read_only);
        assert!(c
            .apply_options("compress=zstd:99")
            .unwrap_err()
            .contains("accepted"));
        assert!(c.apply_options("extent_size=3000").is_err());
        assert!(c.apply_options("extent_size=2M").is_err());
        assert_eq!(parse_extent_size("4K").unwrap(), 12);
        // Access-time options: relatime is the default; noatime and atime go to mount(2),
        // nodiratime and strictatime to mount_setattr(2); the last access-time mode wins.
        let mut c = MountConfig::default();
        c.apply_options("relatime,noatime,sync").unwrap();
        assert_eq!(c.other, vec!["noatime".to_string(), "sync".to_string()]);
        c.apply_options("strictatime,nodiratime").unwrap();
        assert_eq!(c.other, vec!["sync".to_string()]);
        assert_eq!(
            c.mount_attrs,
            vec!["strictatime".to_string(), "nodiratime".to_string()]
        );
        c.apply_options("relatime").unwrap();
        assert_eq!(c.mount_attrs, vec!["nodiratime".to_string()]);
        assert!(c.apply_options("lazytime").unwrap_err().contains("not supported"));
        assert!(c.apply_options("norelatime").is_err());
        assert_eq!(parse_extent_size("131072").unwrap(), 17);
    }

    /// An unknown name is refused here, naming what is known; the kernel's own options
    /// pass through; `create` is ours.
    #[test]
    fn unknown_options_are_refused_and_the_kernels_pass() {
        let mut c = MountConfig::default();
        let e = c.apply_options("compress=lz4,bogus=1").unwrap_err();
        assert!(e.starts_with("unknown mount option `bogus`"), "{e}");
        assert!(
            e.contains("compress-force=") && e.contains("noatime") && e.contains("--help"),
            "{e}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
        for bad in [
            "fsname=x",
            "auto_unmount",
            "rootmode=40000",
            "max_read",
            "noatime=1",
            "create=yes",
        ] {
            assert!(MountConfig::default().apply_options(bad).is_err(), "{bad}");
        }
        let mut c = MountConfig::default();
        c.apply_options("create,nosuid,max_read=131072,context=system_u:object_r:tmp_t:s0,user=alice")
            .unwrap();
        assert!(c.create);
        assert_eq!(
            c.other,
            ["nosuid", "max_read=131072", "context=system_u:object_r:tmp_t:s0"]
        );
    }

    /// An unmount racing a request ends the session with ECONNABORTED: a clean end.
    /// Any other error still fails the mount.
    #[test]
    fn an_unmount_that_raced_a_request_is_a_clean_end() {
        let aborted = io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert!(session_ended(Err(aborted)).is_ok());
        assert!(session_ended(Ok(())).is_ok());
        let e = session_ended(Err(io::Error::from_raw_os_error(libc::EIO))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        let panicked = io::Error::other("event loop thread panicked");
        assert!(session_ended(Err(panicked)).is_err());
    }

    #[test]
    fn hole_punching_backing_is_accepted() {
        let dir = std::env::temp_dir().join(format!("sqz-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        check_backing(&dir).unwrap();
        let private = dir.join(squeezefs_container::pack::dir::DIR_NAME);
        assert_eq!(
            std::fs::read_dir(&private).unwrap().count(),
            0,
            "probe file removed"
        );
        std::fs::remove_dir(&private).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert!(check_backing(Path::new("/nonexistent/squeezefs")).is_err());
    }
}
