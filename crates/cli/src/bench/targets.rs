//! The filesystems a workload runs on: squeezefs (this binary, mounted as a child), kernel
//! btrfs on a loop image, and the host filesystem itself. Each can be written, made durable
//! and unmounted, mounted again with cold caches, measured and removed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use squeezefs_codec::{Algorithm, CodecSpec};

#[derive(Clone, Debug)]
pub enum Kind {
    /// squeezefs mounted with `compress=codec`, `extent_size=` and the mount option `pack`
    /// (small files stored whole in solid compressed blocks, the default) or `nopack`.
    Squeezefs {
        codec: CodecSpec,
        pack: bool,
        extent_shift: u8,
    },
    /// Kernel btrfs; `Some(codec)` mounts with compress-force=codec.
    Btrfs(Option<CodecSpec>),
    Host,
}

impl Kind {
    pub fn name(&self, host_fs: &str) -> String {
        match self {
            Kind::Squeezefs { codec, pack, .. } => {
                format!("squeezefs{} {codec}", if *pack { "+pack" } else { "" })
            }
            Kind::Btrfs(Some(c)) => format!("btrfs {c}"),
            Kind::Btrfs(None) => "btrfs (no compression)".into(),
            Kind::Host => format!("{host_fs} (host)"),
        }
    }

    /// The `compress-force=` value kernel btrfs accepts for `c`, if it has that codec.
    pub fn btrfs_codec(c: CodecSpec) -> Option<String> {
        match c.alg {
            Algorithm::Zstd if (1..=15).contains(&c.level) => Some(format!("zstd:{}", c.level)),
            Algorithm::Zlib => Some(format!("zlib:{}", c.level)),
            Algorithm::Lzo => Some("lzo".into()),
            _ => None,
        }
    }
}

/// The `mksquashfs` options for `c`, if squashfs has that codec.
pub fn squashfs_codec(c: CodecSpec) -> Option<Vec<String>> {
    let level = |name: &str| {
        vec![
            "-comp".to_string(),
            name.into(),
            "-Xcompression-level".into(),
            c.level.to_string(),
        ]
    };
    match c.alg {
        Algorithm::Zstd if (1..=22).contains(&c.level) => Some(level("zstd")),
        Algorithm::Zlib => Some(level("gzip")),
        Algorithm::Lzo => Some(vec!["-comp".into(), "lzo".into()]),
        Algorithm::Lz4 => Some(vec!["-comp".into(), "lz4".into()]),
        _ => None,
    }
}

pub struct Target {
    pub kind: Kind,
    /// Where the workload reads and writes.
    pub mnt: PathBuf,
    /// squeezefs: the backing directory; btrfs: the image file; host: the directory.
    store: PathBuf,
    exe: PathBuf,
    daemon: Option<Child>,
    /// Peak resident memory of the squeezefs daemon, read before each unmount.
    pub peak_rss: u64,
}

pub fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn is_mountpoint(p: &Path) -> bool {
    let (Ok(a), Ok(b)) = (std::fs::metadata(p), std::fs::metadata(p.join(".."))) else {
        return false;
    };
    a.dev() != b.dev()
}

/// Makes everything written on the filesystem holding `p` durable (`syncfs`).
pub fn syncfs(p: &Path) -> Result<(), String> {
    let f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    nix::unistd::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f))
        .map_err(|e| format!("syncfs {}: {}", p.display(), std::io::Error::from(e)))
}

/// Drops the kernel's page, dentry and inode caches (root only), so reads hit the disk.
pub fn drop_caches() -> bool {
    nix::unistd::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Bytes allocated on disk under `p` (like `du -s --block-size=1`), counting each inode once.
pub fn du(p: &Path) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(md) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        if seen.insert((md.dev(), md.ino())) {
            total += md.blocks() * 512;
        }
        if md.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(rd.filter_map(|e| e.ok().map(|e| e.path())));
            }
        }
    }
    total
}

/// btrfs bytes used for data, metadata and system chunks (logical, as `btrfs filesystem
/// df -b` reports them: a DUP profile is not counted twice).
fn btrfs_used(mnt: &Path) -> Result<u64, String> {
    run(Command::new("btrfs").args(["filesystem", "sync"]).arg(mnt))?;
    let out = Command::new("btrfs")
        .args(["filesystem", "df", "-b"])
        .arg(mnt)
        .output()
        .map_err(|e| format!("btrfs filesystem df: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut used = 0;
    for line in text.lines() {
        if line.starts_with("GlobalReserve") {
            continue;
        }
        if let Some(u) = line.split("used=").nth(1) {
            used += u
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("btrfs df `{line}`: {e}"))?;
        }
    }
    Ok(used)
}

/// An empty directory under `work` named after `name`; whatever an interrupted run left
/// there (a mount included) is cleared first.
pub fn fresh_dir(work: &Path, name: &str) -> Result<PathBuf, String> {
    let slug: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = work.join(slug);
    if dir.exists() {
        let _ = Command::new("umount").arg("-l").arg(dir.join("mnt")).status();
        std::fs::remove_dir_all(&dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

impl Target {
    /// Creates the target's storage under `work` and mounts it.
    pub fn create(kind: Kind, work: &Path, exe: &Path, image_size: u64) -> Result<Target, String> {
        let dir = fresh_dir(work, &kind.name("host"))?;
        let (mnt, store) = match &kind {
            Kind::Host => (dir.join("data"), dir.join("data")),
            Kind::Squeezefs { .. } => (dir.join("mnt"), dir.join("backing")),
            Kind::Btrfs(_) => (dir.join("mnt"), dir.join("btrfs.img")),
        };
        std::fs::create_dir_all(&mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
        if let Kind::Btrfs(_) = kind {
            let f = std::fs::File::create(&store).map_err(|e| format!("{}: {e}", store.display()))?;
            f.set_len(image_size)
                .map_err(|e| format!("{}: {e}", store.display()))?;
            run(Command::new("mkfs.btrfs").args(["-q", "-f"]).arg(&store))?;
        }
        if let Kind::Squeezefs { .. } = kind {
            std::fs::create_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
        }
        let mut t = Target {
            kind,
            mnt,
            store,
            exe: exe.to_path_buf(),
            daemon: None,
            peak_rss: 0,
        };
        t.mount()?;
        Ok(t)
    }

    fn mount(&mut self) -> Result<(), String> {
        match &self.kind {
            Kind::Host => Ok(()),
            Kind::Btrfs(c) => {
                let mut opts = "loop".to_string();
                if let Some(c) = c {
                    let v = Kind::btrfs_codec(*c).ok_or_else(|| format!("btrfs has no {c}"))?;
                    opts.push_str(&format!(",compress-force={v}"));
                }
                run(Command::new("mount")
                    .args(["-t", "btrfs", "-o", &opts])
                    .arg(&self.store)
                    .arg(&self.mnt))
            }
            Kind::Squeezefs {
                codec,
                pack,
                extent_shift,
            } => {
                let mut opts = format!("compress={codec},extent_size={}", 1u32 << extent_shift);
                // Spelled out either way: packing is the default.
                opts.push_str(if *pack { ",pack" } else { ",nopack" });
                let child = Command::new(&self.exe)
                    .arg("mount")
                    .arg(&self.store)
                    .arg(&self.mnt)
                    .arg("-o")
                    .arg(opts)
                    .env("RUST_LOG", "warn,fuser=error")
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("starting {}: {e}", self.exe.display()))?;
                self.daemon = Some(child);
                let t = Instant::now();
                while !is_mountpoint(&self.mnt) {
                    if let Some(st) = self.daemon.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                        return Err(format!("squeezefs mount exited early: {st}"));
                    }
                    if t.elapsed() > Duration::from_secs(20) {
                        return Err("squeezefs mount did not come up in 20 s".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(())
            }
        }
    }

    fn daemon_rss(&self) -> u64 {
        let Some(c) = &self.daemon else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{}/status", c.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// Makes everything written durable on the host disk: unmounts (which writes out all
    /// the filesystem holds) and syncs the filesystem under the storage. The clock runs
    /// through this: a write is done when it is on disk.
    pub fn finish_writes(&mut self) -> Result<(), String> {
        match &self.kind {
            Kind::Host => syncfs(&self.mnt),
            Kind::Btrfs(_) => {
                run(Command::new("umount").arg(&self.mnt))?;
                syncfs(self.store.parent().expect("image in a directory"))
            }
            Kind::Squeezefs { .. } => {
                self.unmount_daemon()?;
                syncfs(&self.store)
            }
        }
    }

    /// Unmounts squeezefs and waits for its daemon, which writes everything out first;
    /// records the daemon's peak memory before it goes.
    fn unmount_daemon(&mut self) -> Result<(), String> {
        self.peak_rss = self.peak_rss.max(self.daemon_rss());
        run(Command::new("fusermount3").arg("-u").arg(&self.mnt))?;
        if let Some(mut c) = self.daemon.take() {
            let st = c.wait().map_err(|e| format!("waiting for squeezefs: {e}"))?;
            if !st.success() {
                return Err(format!("squeezefs daemon exited with {st}"));
            }
        }
        Ok(())
    }

    /// Mounts again after [`Target::finish_writes`] with cold caches (when root).
    pub fn remount_cold(&mut self) -> Result<bool, String> {
        let cold = drop_caches();
        self.mount()?;
        Ok(cold)
    }

    /// Bytes the stored data takes on disk (call while mounted, after writes are durable).
    pub fn disk_bytes(&self) -> Result<u64, String> {
        match &self.kind {
            Kind::Host | Kind::Squeezefs { .. } => Ok(du(&self.store)),
            Kind::Btrfs(_) => btrfs_used(&self.mnt),
        }
    }

    /// Unmounts and removes everything the target made.
    pub fn destroy(mut self) -> Result<(), String> {
        match &self.kind {
            Kind::Host => {}
            Kind::Btrfs(_) => run(Command::new("umount").arg(&self.mnt))?,
            Kind::Squeezefs { .. } => self.unmount_daemon()?,
        }
        let dir = self.mnt.parent().expect("target directory").to_path_buf();
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // On an error path: leave no mount behind.
        if let Some(mut c) = self.daemon.take() {
            let _ = Command::new("fusermount3").arg("-u").arg(&self.mnt).status();
            let _ = c.wait();
        }
    }
}
