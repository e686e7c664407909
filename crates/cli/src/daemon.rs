//! Mounting and unmounting like any other filesystem: `squeezefs mount`, the mount-helper
//! form `squeezefs BACKING MOUNTPOINT -o OPTS` that `mount -t fuse.squeezefs` (through
//! mount.fuse3) and /etc/fstab use, detaching with `--daemon` (logging to syslog from
//! then on), and `squeezefs umount`.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::mount::{MntFlags, MsFlags};
use squeezefs_fs::MountConfig;

use crate::args::MountArgs;
use crate::sys::Forked;

/// What the mount-helper form asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct HelperArgs {
    pub target: MountArgs,
    /// `-f`: stay in the foreground (otherwise detach once mounted, as mount(8) expects).
    pub foreground: bool,
}

/// Recognises `squeezefs [-fnsv] BACKING MOUNTPOINT [-o OPTS]…` (mount.fuse3 runs the
/// program named by the type's subtype that way; `mount.fuse.squeezefs` as argv[0] too).
/// `None`: an ordinary command line, for clap.
pub fn helper_form(args: &[OsString], subcommands: &[&str]) -> Option<Result<HelperArgs, String>> {
    let argv0 = args.first().map(|a| {
        Path::new(a)
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    });
    let as_helper = argv0.as_deref().is_some_and(|a| a.starts_with("mount."));
    let first = args.get(1)?.to_string_lossy().into_owned();
    if !as_helper && (first.starts_with('-') || subcommands.contains(&first.as_str())) {
        return None;
    }
    let (mut positional, mut options, mut foreground) = (Vec::new(), Vec::new(), false);
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "-o" {
            match it.next() {
                Some(o) => options.push(o.to_string_lossy().into_owned()),
                None => return Some(Err("-o needs a list of options".into())),
            }
        } else if let Some(o) = s.strip_prefix("-o") {
            options.push(o.to_string());
        } else if s == "-f" {
            foreground = true;
        } else if ["-n", "-s", "-v"].contains(&s.as_ref()) {
            // mount(8)'s "no mtab", "sloppy", "verbose": nothing to do here.
        } else if s.starts_with('-') {
            return Some(Err(format!(
                "unknown flag {s} (the mount form takes -o OPTIONS and -f)"
            )));
        } else {
            positional.push(PathBuf::from(a));
        }
    }
    if positional.len() != 2 {
        if !as_helper && positional.len() < 2 {
            return None; // e.g. a mistyped subcommand: let clap explain
        }
        return Some(Err(
            "the mount form is: squeezefs BACKING MOUNTPOINT [-o OPTIONS] [-f]".into(),
        ));
    }
    let mountpoint = positional.pop().expect("two");
    let mut backing = positional.pop().expect("two");
    // The old `fs#source` spelling of FUSE fstab lines, and the source name mountinfo shows
    // (`squeezefs:BACKING`, which is what tools that remount by source pass back).
    if let Some(rest) = backing.to_str().and_then(|b| {
        b.strip_prefix("squeezefs#")
            .or_else(|| b.strip_prefix("squeezefs:"))
    }) {
        backing = PathBuf::from(rest);
    }
    Some(Ok(HelperArgs {
        target: MountArgs {
            backing,
            mountpoint,
            options,
        },
        foreground,
    }))
}

/// Applies `-o` lists to a configuration, creating BACKING if needed, then mounts. With
/// `remount` among the options (`mount -o remount,ro MOUNTPOINT` runs the helper so), changes
/// the live mount's flags instead.
/// Live bytes of packed files one unmount moves at most while reclaiming pack garbage
/// (bounds the time an unmount takes: about a second per 100 MiB here).
pub const RECLAIM_BUDGET: u64 = 256 << 20;

/// After the last file is written out (the backing directory still locked): packs above
/// 25 % garbage are rewritten, as `check --repair` does, within [`RECLAIM_BUDGET`]. Only
/// when the directory has packs, the mount could write and `pack_reclaim` is on.
///
/// `clean`: the mount started from a valid clean mark and made no pack garbage, so the
/// walk (a round trip a file on a network backing) is left out. The mark is written again
/// after that, or after a walk that ran to the end (`squeezefs_container::pack::clean`).
fn reclaim(backing: &Path, cfg: &squeezefs_fs::MountConfig, clean: bool) {
    use squeezefs_container::pack::{FsPackDir, Packs};
    let dir = FsPackDir::new(backing, true);
    if cfg.read_only || !cfg.pack_reclaim || !dir.path().is_dir() {
        return;
    }
    let start = std::time::Instant::now();
    let packs = match Packs::new(Box::new(dir), true, cfg.pack_cache) {
        Ok(p) => p,
        Err(e) => return log::warn!("pack garbage not reclaimed: {e}"),
    };
    packs.set_keep_ctime(squeezefs_fs::packing::keeps_ctime(backing));
    let to_end = if clean {
        log::info!("no pack garbage made since the last complete reclaim: the tree is not walked");
        true
    } else {
        match crate::check::packs::reclaim_tree(backing, &packs, Some(RECLAIM_BUDGET)) {
            Ok((r, to_end)) => {
                if let Some(r) = r {
                    log::info!(
                        "reclaimed {} of pack garbage at unmount ({} files moved, {} packs removed) in {:.1} s",
                        crate::ui::human(r.bytes_freed),
                        r.files_moved,
                        r.packs_removed.len(),
                        start.elapsed().as_secs_f64()
                    );
                }
                to_end
            }
            Err(e) => {
                log::warn!(
                    "pack garbage not reclaimed at unmount: {e} (`squeezefs check --repair {}` does it)",
                    backing.display()
                );
                false
            }
        }
    };
    if to_end {
        if let Err(e) = packs.put_clean_mark() {
            log::warn!("the clean mark was not written ({e}): the next unmount walks the tree");
        }
    }
}

pub fn mount(backing: PathBuf, mountpoint: PathBuf, options: &[String], daemon: bool) -> ExitCode {
    if options
        .iter()
        .flat_map(|o| squeezefs_fs::split_options(o))
        .any(|o| o.trim() == "remount")
    {
        return match remount(&mountpoint, options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("squeezefs: remount {}: {e}", mountpoint.display());
                ExitCode::FAILURE
            }
        };
    }
    let mut cfg = MountConfig::default();
    for o in options {
        if let Err(e) = cfg.apply_options(o) {
            eprintln!("squeezefs: {e}");
            return ExitCode::from(2);
        }
    }
    if let Err((msg, code)) = prepare_targets(&backing, &mountpoint, cfg.create) {
        eprintln!("squeezefs: {msg}");
        return ExitCode::from(code);
    }
    run(backing, mountpoint, cfg, daemon)
}

/// Checks BACKING and MOUNTPOINT before anything is mounted: each must be a directory, and
/// a missing one is made only with `create` (a typo, or BACKING on a disk not mounted yet
/// at boot, must not send data to the root filesystem). A MOUNTPOINT that is not empty is
/// allowed, as FUSE 3 allows it, with a warning naming what the mount hides. The error is
/// one line and the exit status (2: a usage error, nothing changed).
fn prepare_targets(backing: &Path, mountpoint: &Path, create: bool) -> Result<(), (String, u8)> {
    for (what, dir) in [("BACKING", backing), ("MOUNTPOINT", mountpoint)] {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err((format!("{what} {} is not a directory", dir.display()), 2)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| (format!("cannot create {what} {}: {e}", dir.display()), 1))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err((
                    format!(
                        "{what} {} does not exist; create it (mkdir) or pass -o create",
                        dir.display()
                    ),
                    2,
                ))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                return Err((
                    format!(
                        "{what} {}: {e} (a FUSE filesystem there died: `fusermount3 -u {}` first)",
                        dir.display(),
                        dir.display()
                    ),
                    1,
                ))
            }
            Err(e) => return Err((format!("{what} {}: {e}", dir.display()), 1)),
        }
    }
    if let Ok(entries) = std::fs::read_dir(mountpoint) {
        let n = entries.count();
        if n > 0 {
            log::warn!(
                "MOUNTPOINT {} is not empty: its {n} entr{} hidden while squeezefs is mounted there",
                mountpoint.display(),
                if n == 1 { "y is" } else { "ies are" }
            );
        }
    }
    Ok(())
}

fn run(backing: PathBuf, mountpoint: PathBuf, cfg: MountConfig, daemon: bool) -> ExitCode {
    let fail = |e: std::io::Error| {
        log::error!(
            "mounting {} at {} failed: {e}",
            backing.display(),
            mountpoint.display()
        );
        ExitCode::FAILURE
    };
    // The "mounting … (format N)" line is squeezefs_fs::mount's: only it knows whether this
    // mount packs small files (format 4).
    if !daemon {
        return match squeezefs_fs::mount(
            &backing,
            &mountpoint,
            &cfg,
            || {},
            |b, clean| reclaim(b, &cfg, clean),
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        };
    }
    // --daemon: the child mounts and reports readiness through a pipe; the parent exits 0
    // only once the mount is live. Until then errors reach the terminal; after, syslog.
    let (rx, tx) = match nix::unistd::pipe() {
        Ok(p) => p,
        Err(e) => return fail(e.into()),
    };
    match crate::sys::fork() {
        Err(e) => fail(e),
        Ok(Forked::Child) => {
            drop(rx);
            let _ = nix::unistd::setsid();
            let mut tx = std::fs::File::from(tx);
            let r = squeezefs_fs::mount(
                &backing,
                &mountpoint,
                &cfg,
                || {
                    if let Err(e) = crate::logging::to_syslog() {
                        // A warning on the command line; as mount(8)'s helper, quiet unless
                        // RUST_LOG asks (a machine without syslog would see it at every mount).
                        log::info!("no syslog socket ({e}): the daemon's log is discarded once detached");
                    }
                    log::info!(
                        "serving {} at {} (pid {})",
                        backing.display(),
                        mountpoint.display(),
                        std::process::id()
                    );
                    let _ = tx.write_all(b"1");
                    let _ = std::env::set_current_dir("/");
                    detach_stdio();
                },
                |b, clean| reclaim(b, &cfg, clean),
            );
            match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Ok(Forked::Parent) => {
            drop(tx);
            let mut rx = std::fs::File::from(rx);
            let mut b = [0u8; 1];
            match rx.read(&mut b) {
                Ok(1) => ExitCode::SUCCESS,
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// What keeps a mount busy: the processes with an open file, a working or root directory,
/// or a mapped file under `mountpoint` (what `fuser -vm` shows), or a mount on top of it.
pub fn busy_because(mountpoint: &Path) -> String {
    let mut found: Vec<String> = Vec::new();
    let under = |p: &Path| p.starts_with(mountpoint);
    let procs = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    for e in procs {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let base = e.path();
        let mut how: Vec<String> = Vec::new();
        for (link, what) in [("cwd", "working directory"), ("root", "root directory")] {
            if std::fs::read_link(base.join(link)).is_ok_and(|t| under(&t)) {
                how.push(what.into());
            }
        }
        let fds = std::fs::read_dir(base.join("fd")).into_iter().flatten().flatten();
        for fd in fds {
            if let Ok(t) = std::fs::read_link(fd.path()) {
                if under(&t) {
                    how.push(format!("open {}", t.display()));
                }
            }
        }
        let maps = std::fs::read_to_string(base.join("maps")).unwrap_or_default();
        if let Some(m) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| under(Path::new(p)))
        {
            how.push(format!("mapped {m}"));
        }
        if !how.is_empty() {
            let comm = std::fs::read_to_string(base.join("comm")).unwrap_or_default();
            how.dedup();
            found.push(format!("pid {pid} ({}): {}", comm.trim(), how.join(", ")));
        }
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for mp in squeezefs_fs::mountinfo::mount_points(&info) {
        if mp != mountpoint && mp.starts_with(mountpoint) {
            found.push(format!("a mount at {}", mp.display()));
        }
    }
    if found.is_empty() {
        "nothing visible from here holds it (a process in another mount namespace, or a \
         file still being released: try again)"
            .into()
    } else {
        found.join("; ")
    }
}

/// The per-mount flags `mount(2)` takes, by option name: (flag, set by the name).
const REMOUNT_FLAGS: &[(&str, libc::c_ulong, bool)] = &[
    ("ro", libc::MS_RDONLY, true),
    ("rw", libc::MS_RDONLY, false),
    ("nosuid", libc::MS_NOSUID, true),
    ("suid", libc::MS_NOSUID, false),
    ("nodev", libc::MS_NODEV, true),
    ("dev", libc::MS_NODEV, false),
    ("noexec", libc::MS_NOEXEC, true),
    ("exec", libc::MS_NOEXEC, false),
    ("noatime", libc::MS_NOATIME, true),
    ("atime", libc::MS_NOATIME, false),
    ("nodiratime", libc::MS_NODIRATIME, true),
    ("diratime", libc::MS_NODIRATIME, false),
    ("relatime", libc::MS_RELATIME, true),
    ("norelatime", libc::MS_RELATIME, false),
    ("strictatime", libc::MS_STRICTATIME, true),
    ("sync", libc::MS_SYNCHRONOUS, true),
    ("async", libc::MS_SYNCHRONOUS, false),
];

/// `mount(2)` flags for a remount: the mount's current ones (a remount replaces them all)
/// with the asked-for changes applied. Options that cannot change on a live mount (the
/// codec, the extent size, FUSE's own) are ignored, as mount(8) passes fstab's along.
fn remount_flags(current: &str, asked: &[String]) -> libc::c_ulong {
    let mut flags = libc::MS_REMOUNT;
    let asked: Vec<String> = asked
        .iter()
        .flat_map(|o| squeezefs_fs::split_options(o))
        .collect();
    for o in current.split(',').map(str::to_string).chain(asked) {
        if let Some(&(_, f, set)) = REMOUNT_FLAGS.iter().find(|(n, _, _)| *n == o.trim()) {
            if set {
                flags |= f;
            } else {
                flags &= !f;
            }
        }
    }
    flags
}

/// `mount -o remount,OPTS MOUNTPOINT` on a squeezefs mount: read-only or read-write again,
/// suid, dev, exec and atime flags. The daemon keeps running; the kernel refuses writes
/// while the mount is read-only, after writing out what it had cached.
fn remount(mountpoint: &Path, options: &[String]) -> Result<(), String> {
    let canon = mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    let m = squeezefs_fs::mountinfo::current()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == canon)
        .ok_or_else(|| format!("{} is not a squeezefs mount point", canon.display()))?;
    let flags = remount_flags(&m.options, options);
    // A daemon started read-only stays so (it opens no file: `-o ro` in `mount --help`);
    // the kernel's mount made writable over it would only fail every write.
    if flags & libc::MS_RDONLY == 0 {
        let started_ro =
            crate::statsfile::read(&canon).is_ok_and(|d| d["mount"]["read_only"].as_bool() == Some(true));
        if started_ro {
            return Err(format!(
                "{} was mounted read-only (-o ro) and stays so: unmount it and mount it \
                 again without ro to write there",
                canon.display()
            ));
        }
    }
    let target = std::ffi::CString::new(canon.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // A remount names only the target; source, type and data are NULL for it.
    let r = nix::mount::mount(
        None::<&str>,
        target.as_c_str(),
        None::<&str>,
        MsFlags::from_bits_retain(flags),
        None::<&str>,
    );
    if let Err(e) = r {
        let e = std::io::Error::from(e);
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) => format!("{e} (only root can remount)"),
            Some(libc::EBUSY) => {
                format!("{e} (a file is open for writing there: close it, then remount read-only)")
            }
            _ => e.to_string(),
        });
    }
    Ok(())
}

/// Points stdin, stdout and stderr at /dev/null (a detached daemon keeps no terminal).
fn detach_stdio() {
    use nix::fcntl::{open, OFlag};
    // The descriptor is kept raw on purpose: when stdin, stdout or stderr was closed, /dev/null
    // is opened as that descriptor, and must stay open (and inheritable) as it.
    if let Ok(null) = open("/dev/null", OFlag::O_RDWR, nix::sys::stat::Mode::empty()) {
        for fd in 0..3 {
            let _ = nix::unistd::dup2(null, fd);
        }
        if null > 2 {
            let _ = nix::unistd::close(null);
        }
    }
}

/// `squeezefs umount MOUNTPOINT`: unmounts, then waits until the daemon has written
/// everything out and exited, so the backing directory is complete when this returns.
pub fn umount(mountpoint: &Path, lazy: bool, wait: Duration) -> Result<(), String> {
    let canon = mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if !crate::locate::squeezefs_mounts(&info).contains(&canon) {
        return Err(format!("{} is not a squeezefs mount point", canon.display()));
    }
    let daemon = crate::statsfile::read(&canon)
        .ok()
        .and_then(|v| v["mount"]["backing"].as_str().map(PathBuf::from))
        .and_then(|b| squeezefs_fs::lock::holder_of(&b));
    let root = nix::unistd::geteuid().is_root();
    let ok = if root {
        let c = std::ffi::CString::new(canon.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        let flags = if lazy {
            MntFlags::MNT_DETACH
        } else {
            MntFlags::empty()
        };
        if let Err(e) = nix::mount::umount2(c.as_c_str(), flags) {
            let e = std::io::Error::from(e);
            return Err(match e.raw_os_error() {
                Some(libc::EBUSY) => format!(
                    "{}: busy: {} (close those, or use --lazy)",
                    canon.display(),
                    busy_because(&canon)
                ),
                _ => format!("{}: {e}", canon.display()),
            });
        }
        true
    } else {
        let mut cmd = std::process::Command::new("fusermount3");
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        cmd.arg(&canon)
            .status()
            .map_err(|e| format!("fusermount3: {e} (install fuse3)"))?
            .success()
    };
    if !ok {
        return Err(format!(
            "{}: fusermount3 -u failed (see above); busy: {}",
            canon.display(),
            busy_because(&canon)
        ));
    }
    if let Some(pid) = daemon {
        let start = Instant::now();
        while squeezefs_fs::lock::running(pid) {
            if start.elapsed() > wait {
                return Err(format!(
                    "unmounted, but the daemon (pid {pid}) is still writing after {} s",
                    wait.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    const SUBS: &[&str] = &["mount", "stats"];

    #[test]
    fn recognises_the_mount_helper_form() {
        let h = helper_form(
            &args(&["squeezefs", "/srv/b", "/srv/m", "-o", "rw,compress=zstd:3"]),
            SUBS,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.target.backing, PathBuf::from("/srv/b"));
        assert_eq!(h.target.mountpoint, PathBuf::from("/srv/m"));
        assert_eq!(h.target.options, vec!["rw,compress=zstd:3".to_string()]);
        assert!(!h.foreground);
        let h = helper_form(
            &args(&[
                "/sbin/mount.fuse.squeezefs",
                "squeezefs#/b",
                "/m",
                "-oro",
                "-f",
                "-n",
            ]),
            SUBS,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (h.target.backing, h.target.options, h.foreground),
            (PathBuf::from("/b"), vec!["ro".to_string()], true)
        );
        assert!(helper_form(&args(&["squeezefs", "stats", "/m"]), SUBS).is_none());
        assert!(helper_form(&args(&["squeezefs", "--help"]), SUBS).is_none());
        assert!(helper_form(&args(&["squeezefs", "stast"]), SUBS).is_none());
        assert!(helper_form(&args(&["squeezefs", "/b", "/m", "-x"]), SUBS)
            .unwrap()
            .is_err());
        assert!(helper_form(&args(&["squeezefs", "/b", "/m", "/x"]), SUBS)
            .unwrap()
            .is_err());
    }
}
