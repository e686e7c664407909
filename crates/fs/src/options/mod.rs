//! The mount options: everything `-o` can say ([`MountConfig`]), how a list is parsed
//! and checked (an unknown name refused here, naming what is known, rather than by the
//! kernel's FUSE parser, whose EINVAL names nothing), and what they become: the
//! container's options, the FUSE mount request and fuser's session configuration.

use std::path::Path;

use fuser::{Config, SessionACL};
use squeezefs_codec::CodecSpec;
use squeezefs_container::format::DEFAULT_EXTENT_SHIFT;
use squeezefs_container::{DirtyBudget, Options};

use crate::fuse_mount::{self, MountRequest};
use crate::memory::default_max_dirty;
use crate::sizes::{parse_extent_size, parse_size};
use crate::{background, rules, spin, sys};

#[cfg(test)]
mod tests;

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
    /// `extent_size=` was given: every new file keeps `extent_shift`. Otherwise a new file
    /// written whole from its start past 1 MiB takes 1 MiB extents (the container's
    /// `grow.rs`).
    pub extent_size_given: bool,
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
    /// `spin=auto|MICROS` (default auto: measured at mount; 0: off): after a request, a
    /// session thread keeps reading /dev/fuse instead of sleeping until that long passes
    /// without one (`spin/`).
    pub spin: spin::SpinChoice,
    /// `dirops=sync|behind` (default sync): a new file's name made on the backing inside
    /// the CREATE, or behind it from a file made ahead (`crate::ns`; measured not to pay
    /// on 2-CPU machines, where the applier has no CPU of its own).
    pub dirops_behind: bool,
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
                           pack_gc=, pack_reclaim, nopack_reclaim, fill_cache, nofill_cache, dedupe, nodedupe, max_dirty=, dirty_expire=, spin=, dirops=behind|sync, background_compression=, background_idle=, \
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
            extent_size_given: false,
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
            spin: spin::SpinChoice::Auto,
            dirops_behind: false,
            background: Default::default(),
            rules: None,
            create: false,
            other: Vec::new(),
            mount_attrs: Vec::new(),
        }
    }
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
                    self.extent_size_given = true;
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
                ("dedupe", None) => self.background.dedupe = true,
                ("nodedupe", None) => self.background.dedupe = false,
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
                ("spin", Some(v)) => self.spin = v.parse()?,
                ("dirops", Some(v)) => {
                    self.dirops_behind = match v {
                        "behind" => true,
                        "sync" => false,
                        _ => {
                            return Err(format!(
                                "dirops={v}: `behind` (a new file's name made on the backing after \
                                 the create is answered) or `sync` (inside it)"
                            ))
                        }
                    }
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
                | ("dirty_expire" | "dirty-expire" | "spin" | "rules" | "dirops", None)
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
                    | "dedupe"
                    | "nodedupe"
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

    /// The extent size (log2) a new file written whole takes (`container/grow.rs`): 1 MiB,
    /// unless `extent_size=` was given.
    pub fn grow_extent_shift(&self) -> Option<u8> {
        (!self.extent_size_given).then_some(squeezefs_container::format::MAX_EXTENT_SHIFT)
    }

    pub fn container_options(&self) -> Options {
        Options {
            codec: self.codec,
            adapt: self
                .adapt
                .map(|(min, max)| squeezefs_container::adapt::Adaptive::new(min, max)),
            extent_shift: self.extent_shift,
            grow_extent_shift: self.grow_extent_shift(),
            // Set by the filesystem, which knows the backing's type (`ops::SqueezeFs::new`).
            extend_first: false,
            force: self.force,
            stats: Default::default(),
            packs: None,
            dirty: DirtyBudget::with_expire(
                self.max_dirty.unwrap_or_else(default_max_dirty),
                std::time::Duration::from_secs(self.dirty_expire),
            ),
        }
    }

    /// What to mount (`fuse_mount::mount`): the source, the mount(2) flags, and the FUSE
    /// options for the kernel and for fusermount3.
    pub(crate) fn mount_request(&self, backing: &Path) -> MountRequest {
        let fsname = format!("squeezefs:{}", backing.display());
        let root = sys::euid() == 0;
        // The type is `fuse.squeezefs` (the kernel's `subtype=`), so mount(8) finds our
        // helper (for `mount -o remount,ro`) and `findmnt -t fuse.squeezefs` finds the mount.
        let mut kernel = vec![format!("subtype={}", fuse_mount::SUBTYPE)];
        let mut helper = vec![
            format!("fsname={fsname}"),
            format!("subtype={}", fuse_mount::SUBTYPE),
        ];
        let given = |w: &str| self.other.iter().any(|o| o == w);
        // Root's mounts are suid and dev unless asked otherwise, as mount(8) makes any
        // filesystem root mounts; others' are always nosuid,nodev (fusermount3 sees to it).
        let mut flags: libc::c_ulong = 0;
        // (`nosuid` and `nodev` given add their flags below.)
        if !root && !given("suid") {
            flags |= libc::MS_NOSUID;
        }
        if !root && !given("dev") {
            flags |= libc::MS_NODEV;
        }
        if self.default_permissions {
            kernel.push("default_permissions".into());
            helper.push("default_permissions".into());
        }
        if self.read_only {
            flags |= libc::MS_RDONLY;
            helper.push("ro".into());
        }
        for o in &self.other {
            match fuse_mount::flag_of(o) {
                Some(f) => flags |= f,
                // The options with a value (`max_read=`, the security labels).
                None => kernel.push(o.clone()),
            }
            helper.push(o.clone());
        }
        if self.allow_other {
            kernel.push("allow_other".into());
            helper.push("allow_other".into());
        }
        MountRequest {
            fsname,
            flags,
            kernel,
            helper,
        }
    }

    /// fuser's configuration of the session serving the mount: its threads (one fd each).
    pub(crate) fn session_config(&self) -> Config {
        let mut c = Config::default();
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
