//! Helpers shared by the real-mount tests: a scratch directory, and a `squeezefs mount`
//! child that is unmounted (and checked to exit cleanly) at the end.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use squeezefs_fs::mountinfo;

pub mod gluster;
pub mod strace;
#[allow(unsafe_code)]
pub mod sys;

pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: these tests need FUSE (modprobe fuse)"
    );
    let ok = Command::new("fusermount3")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "fusermount3 is missing: install Debian's fuse3 package (scripts/test does)"
    );
}

pub fn scratch(name: &str) -> PathBuf {
    let base = std::env::var_os("SQUEEZEFS_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!("squeezefs-test-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(d.join("backing")).unwrap();
    fs::create_dir_all(d.join("mnt")).unwrap();
    d
}

pub fn is_mounted(mnt: &Path) -> bool {
    let canon = mnt.canonicalize().unwrap_or_else(|_| mnt.to_path_buf());
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo::mount_points(&info).contains(&canon)
}

/// The squeezefs mount at `mnt` (mountinfo's fields for it, through the product's parser).
pub fn squeezefs_mount(mnt: &Path) -> Option<mountinfo::Mount> {
    let canon = mnt.canonicalize().unwrap();
    mountinfo::current().into_iter().find(|m| m.mountpoint == canon)
}

pub struct Mount {
    pub mnt: PathBuf,
    pub child: Option<Child>,
    /// Where the daemon's stderr goes (shown when it exits badly).
    pub log: PathBuf,
}

impl Mount {
    pub fn new(dir: &Path, opts: &str) -> Mount {
        Mount::spawn(dir, opts, None)
    }

    /// Mounts with the daemon's open-file limit (soft and hard) set to `fd_limit`.
    pub fn spawn(dir: &Path, opts: &str, fd_limit: Option<u64>) -> Mount {
        Mount::spawn_env(dir, opts, fd_limit, &[])
    }

    /// [`Mount::spawn`] with variables added to the daemon's environment.
    pub fn spawn_env(dir: &Path, opts: &str, fd_limit: Option<u64>, env: &[(&str, &str)]) -> Mount {
        require_fuse();
        let mnt = dir.join("mnt");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_squeezefs"));
        cmd.envs(env.iter().copied());
        cmd.arg("mount").arg(dir.join("backing")).arg(&mnt);
        if !opts.is_empty() {
            cmd.arg("-o").arg(opts);
        }
        if let Some(n) = fd_limit {
            sys::limit_open_files(&mut cmd, n);
        }
        Mount::launch(dir, cmd)
    }

    /// Mounts as the unprivileged `user` (through fusermount3, as such a user must):
    /// BACKING and MOUNTPOINT are given to that user first.
    pub fn as_user(dir: &Path, opts: &str, user: &str) -> Mount {
        Mount::as_user_limited(dir, opts, user, None)
    }

    /// [`Mount::as_user`] with the daemon's open-file limit (soft and hard) set to `fd_limit`.
    pub fn as_user_limited(dir: &Path, opts: &str, user: &str, fd_limit: Option<u64>) -> Mount {
        require_fuse();
        let mnt = dir.join("mnt");
        for d in [dir.join("backing"), mnt.clone()] {
            let st = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(&d)
                .status()
                .unwrap();
            assert!(st.success(), "chown {user} {}", d.display());
        }
        let mut cmd = Command::new("setpriv");
        cmd.args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--clear-groups",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_squeezefs"))
        .arg("mount")
        .arg(dir.join("backing"))
        .arg(&mnt);
        if !opts.is_empty() {
            cmd.arg("-o").arg(opts);
        }
        if let Some(n) = fd_limit {
            sys::limit_open_files(&mut cmd, n);
        }
        Mount::launch(dir, cmd)
    }

    /// Starts the daemon `cmd` and waits for its mount at `DIR/mnt` (log: `DIR/daemon.log`).
    fn launch(dir: &Path, cmd: Command) -> Mount {
        let log = dir.join("daemon.log");
        Mount::try_launch(cmd, &dir.join("mnt"), &log)
            .unwrap_or_else(|said| panic!("squeezefs exited: {said}"))
    }

    /// `squeezefs mount BACKING MNT` in the foreground (log: `log`): the mount, or what the
    /// daemon said when it exited instead (a refusal a test expects).
    pub fn try_spawn_at(backing: &Path, mnt: &Path, log: &Path) -> Result<Mount, String> {
        require_fuse();
        fs::create_dir_all(mnt).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_squeezefs"));
        cmd.arg("mount").arg(backing).arg(mnt);
        Mount::try_launch(cmd, mnt, log)
    }

    fn try_launch(mut cmd: Command, mnt: &Path, log: &Path) -> Result<Mount, String> {
        let err = fs::File::create(log).unwrap();
        let mut child = cmd.stdout(Stdio::null()).stderr(err).spawn().unwrap();
        let start = Instant::now();
        while !is_mounted(mnt) {
            if let Some(st) = child.try_wait().unwrap() {
                return Err(format!("{st}: {}", fs::read_to_string(log).unwrap()));
            }
            assert!(start.elapsed() < Duration::from_secs(30), "mount did not appear");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Mount {
            mnt: mnt.to_path_buf(),
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }

    /// Unmounts and checks the daemon exits cleanly.
    pub fn unmount(mut self) {
        unmount(&self.mnt);
        let st = self.child.take().unwrap().wait().unwrap();
        self.exited_cleanly(st);
    }

    /// Checks the daemon's exit status, showing what it said when it is not success.
    fn exited_cleanly(&self, st: std::process::ExitStatus) {
        assert!(
            st.success(),
            "daemon exited with {st}; it said:\n{}",
            fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Waits for the daemon to exit by itself (after a lazy unmount and the last close),
    /// at most 60 s (then it is killed and the test fails), and checks it exited cleanly.
    pub fn wait_exit(mut self) {
        let mut child = self.child.take().unwrap();
        let start = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the daemon did not exit within 60 s; it said:\n{}",
                    fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.exited_cleanly(st);
    }

    /// Kills the daemon (SIGKILL), as a crash would, and clears its dead mount.
    pub fn kill(mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
        let st = Command::new("umount").arg("-l").arg(&self.mnt).status().unwrap();
        assert!(st.success(), "umount -l {}", self.mnt.display());
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("fusermount3").arg("-uz").arg(&self.mnt).status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether a process still runs (exited: a zombie with no thread left), as `squeezefs umount` decides.
#[allow(unused_imports)]
pub use squeezefs_fs::lock::running;

/// Tries to mount the scratch directory's backing directory a second time, at `DIR/mnt2`,
/// while it is mounted: returns what `squeezefs mount` said (it must refuse).
pub fn mount_again_elsewhere(dir: &Path) -> String {
    let other = dir.join("mnt2");
    fs::create_dir_all(&other).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_squeezefs"))
        .arg("mount")
        .arg(dir.join("backing"))
        .arg(&other)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a second mount of one backing directory is refused"
    );
    assert!(!is_mounted(&other));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Opens (creating, emptying) a file for reading and writing.
pub fn open_rw_new(p: &Path) -> fs::File {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(p)
        .unwrap()
}

/// Unmounts `mnt` like a careful admin on a loaded machine: a mount can stay busy for a
/// moment after its last user exits (the kernel releases closed files asynchronously), so
/// EBUSY is retried for up to 20 s; after that the test fails with what holds the mount,
/// as `squeezefs umount` reports it.
pub fn unmount(mnt: &Path) {
    let start = Instant::now();
    loop {
        let out = Command::new("fusermount3").arg("-u").arg(mnt).output().unwrap();
        if out.status.success() {
            return;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let why = squeezefs(&[std::ffi::OsStr::new("umount"), mnt.as_os_str()]);
            panic!(
                "fusermount3 -u {} failed for 20 s: {}; squeezefs umount says: {}",
                mnt.display(),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&why.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A small tmpfs holding a scratch directory's backing directory (root only: CI runs as
/// root), unmounted (lazily) when dropped.
pub struct SmallFs(PathBuf);

impl SmallFs {
    /// Mounts a tmpfs of `mib` MiB at `DIR/small` and makes `DIR/backing` a link to a
    /// directory on it.
    pub fn backing_of(dir: &Path, mib: u64) -> SmallFs {
        let at = dir.join("small");
        fs::create_dir_all(&at).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(
            st.success(),
            "mounting a {mib} MiB tmpfs at {} needs root",
            at.display()
        );
        let _ = fs::remove_dir_all(dir.join("backing"));
        fs::create_dir(at.join("backing")).unwrap();
        std::os::unix::fs::symlink(at.join("backing"), dir.join("backing")).unwrap();
        SmallFs(at)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Lets other users walk from `/` to `dir` (adds o+rx up the path, to the temp directory).
pub fn open_to_others(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut p = dir.to_path_buf();
    while p.parent().is_some() {
        let mode = fs::metadata(&p).unwrap().permissions().mode();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode | 0o005)).unwrap();
        if p == std::env::temp_dir() {
            break;
        }
        p = p.parent().unwrap().to_path_buf();
    }
}

/// Runs `cmd` as the unprivileged user `tests` (scripts/test-deps creates it), without
/// supplementary groups and without capabilities.
pub fn as_tests(cmd: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=tests", "--regid=tests", "--clear-groups", "--"])
        .args(cmd)
        .output()
        .unwrap()
}

/// The uid and gid of the user `tests`.
pub fn tests_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, "tests"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// Runs `squeezefs ARGS…` and returns its output.
pub fn squeezefs(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_squeezefs"))
        .args(args)
        .output()
        .unwrap()
}

/// `squeezefs check BACKING` finds nothing wrong (`what` says which case failed).
pub fn check_clean(backing: &Path, what: &str) {
    let out = squeezefs(&["check".as_ref(), backing.as_os_str()]);
    assert!(
        out.status.success(),
        "{what}: check: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A file's change time as (seconds, nanoseconds).
pub fn ctime(md: &fs::Metadata) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (md.ctime(), md.ctime_nsec())
}

/// The test runs as root (`why` says what for; CI runs as root).
pub fn require_root(why: &str) {
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "{why}");
}

/// Runs `squeezefs ARGS… --json`, insists on success, and parses what it printed.
pub fn squeezefs_json(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json".as_ref());
    let out = squeezefs(&a);
    assert!(
        out.status.success(),
        "squeezefs {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The type labels (`zstd:3`, `inline+dict`, …) of a `squeezefs stats --json` document.
pub fn types(v: &serde_json::Value) -> Vec<String> {
    v["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap().to_string())
        .collect()
}

/// Every regular file under `root` (symlinks not followed), with its metadata.
pub fn files_under(root: &Path) -> Vec<(PathBuf, fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p);
            } else if md.is_file() {
                out.push((p, md));
            }
        }
    }
    out
}

/// A real tree to work on: this repository's sources, copied (every regular file, with its
/// relative path), so the tests see real code and text, not generated data.
pub fn real_tree(into: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates");
    let mut out: Vec<(PathBuf, Vec<u8>)> = files_under(&root)
        .into_iter()
        .map(|(p, _)| {
            let rel = p.strip_prefix(&root).unwrap().to_path_buf();
            let data = fs::read(&p).unwrap();
            let dst = into.join(&rel);
            fs::create_dir_all(dst.parent().unwrap()).unwrap();
            fs::write(&dst, &data).unwrap();
            (rel, data)
        })
        .collect();
    out.sort();
    out
}

/// A bigger real tree: crate sources from cargo's registry (downloaded by the build), copied
/// whole crate by crate in name order until `max_bytes`. Returns the bytes copied.
pub fn registry_tree(into: &Path, max_bytes: u64) -> u64 {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    let src = home.join("registry/src");
    let mut crates: Vec<PathBuf> = fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e} (cargo's registry sources)", src.display()))
        .flat_map(|idx| fs::read_dir(idx.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    crates.sort();
    let mut copied = 0;
    for c in crates {
        if copied >= max_bytes {
            break;
        }
        let st = Command::new("cp").arg("-r").arg(&c).arg(into).status().unwrap();
        assert!(st.success());
        let du = Command::new("du").args(["-sb"]).arg(&c).output().unwrap();
        copied += String::from_utf8_lossy(&du.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap();
    }
    copied
}

/// The value of xattr `name` on `path` (`getfattr`), or `None` when it has none.
pub fn getfattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(path)
        .output()
        .unwrap();
    out.status.success().then_some(out.stdout)
}

/// Asks the mount at `mnt` for a pack reclaim round now (`setfattr user.squeezefs.reclaim`
/// on its root: the round runs before the call returns) and returns the round's report
/// (`getfattr` of the same attribute).
pub fn reclaim_round(mnt: &Path) -> serde_json::Value {
    let ok = Command::new("setfattr")
        .args(["-n", "user.squeezefs.reclaim", "-v", "1"])
        .arg(mnt)
        .status()
        .unwrap()
        .success();
    assert!(ok, "setfattr user.squeezefs.reclaim failed");
    serde_json::from_slice(&getfattr(mnt, "user.squeezefs.reclaim").expect("getfattr")).unwrap()
}

/// xorshift64: the random choices of the crash and full-disk tests, replayable by seed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the files under `root` occupy (allocated blocks), each inode once.
pub fn allocated(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    files_under(root)
        .into_iter()
        .filter(|(_, m)| seen.insert(m.ino()))
        .map(|(_, m)| m.blocks() * 512)
        .sum()
}

/// Disk used under `dir`, directories included: what `du -s` shows, in bytes.
pub fn du(dir: &Path) -> u64 {
    let out = Command::new("du")
        .args(["-s", "--block-size=1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The lines of a daemon's log at WARN or ERROR (an unmount that worked has none).
pub fn alarming(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

/// What the directories of a tree occupy (allocated blocks): `root` and every directory
/// below it, but squeezefs's own at the root (packs, dictionaries), as `stats` and `du`
/// count them.
pub fn directories_allocated(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let own = [
        squeezefs_container::pack::dir::DIR_NAME,
        squeezefs_container::dicts::DIR_NAME,
    ];
    let mut total = fs::metadata(root).unwrap().blocks() * 512;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() && !(d == root && own.iter().any(|n| e.file_name() == *n)) {
                total += md.blocks() * 512;
                stack.push(e.path());
            }
        }
    }
    total
}

/// fsx (crates.io) with every operation enabled (tests/fsx.toml), `total` operations split
/// over one run per seed, all at once, each on its own file `fsx-K.data` in `mnt` (logs in
/// `logs/fsx-K`); panics with fsx's output unless every run ends A-OK.
pub fn run_fsx(mnt: &Path, logs: &Path, total: u64, seeds: &[u64]) {
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fsx.toml");
    let runs: Vec<_> = seeds
        .iter()
        .enumerate()
        .map(|(k, seed)| {
            let log = logs.join(format!("fsx-{k}"));
            fs::create_dir_all(&log).unwrap();
            Command::new("fsx")
                .arg("-f")
                .arg(&cfg)
                .args([
                    "-N",
                    &(total / seeds.len() as u64).to_string(),
                    "-S",
                    &seed.to_string(),
                    "-P",
                ])
                .arg(&log)
                .arg(mnt.join(format!("fsx-{k}.data")))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("fsx is missing: cargo install fsx (scripts/test-deps does)")
        })
        .collect();
    for (k, run) in runs.into_iter().enumerate() {
        let out = run.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("All operations completed A-OK"),
            "fsx seed {} failed in {}:\n{text}",
            seeds[k],
            mnt.display()
        );
    }
}

/// Makes `path` as `tar -x` as root makes a file: created (0644 less the umask), `data`
/// written, `fchown` to root, `fchmod` to `mode_for(the mode it was made with)`, `futimens`
/// to `mtime` (seconds), closed. Returns the mode it was made with and the one set.
pub fn extract_the_tar_way(
    path: &Path,
    data: &[u8],
    mtime: i64,
    mode_for: impl FnOnce(u32) -> u32,
) -> (u32, u32) {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .unwrap();
    (&f).write_all(data).unwrap();
    std::os::unix::fs::fchown(&f, Some(0), Some(0)).unwrap();
    let made = f.metadata().unwrap().mode() & 0o7777;
    let mode = mode_for(made);
    f.set_permissions(fs::Permissions::from_mode(mode)).unwrap();
    let t = std::time::UNIX_EPOCH + Duration::from_secs(mtime as u64);
    f.set_times(fs::FileTimes::new().set_accessed(t).set_modified(t))
        .unwrap();
    (made, mode)
}

/// While alive, the machine's DAMON proactive reclaim is paused (root only; put back as it
/// was when dropped). A kdamond with a `pageout` scheme over physical memory evicts page
/// cache pages no one has touched yet, within milliseconds of their arrival: the pages a
/// store put there ahead of a reader are exactly those (seen on these VMs: pages of a file
/// stored ahead went, `kdamond.0` in the page cache's delete tracepoint). A test that counts
/// what the page cache serves holds one.
pub struct DamonPaused(Vec<std::path::PathBuf>);

impl DamonPaused {
    pub fn new() -> DamonPaused {
        let mut paused = Vec::new();
        if let Ok(dirs) = std::fs::read_dir("/sys/kernel/mm/damon/admin/kdamonds") {
            for d in dirs.flatten() {
                let state = d.path().join("state");
                let on = std::fs::read_to_string(&state).is_ok_and(|s| s.trim() == "on");
                if on && std::fs::write(&state, "off").is_ok() {
                    paused.push(state);
                }
            }
        }
        DamonPaused(paused)
    }
}

impl Drop for DamonPaused {
    fn drop(&mut self) {
        for state in &self.0 {
            if let Err(e) = std::fs::write(state, "on") {
                eprintln!("cannot turn DAMON back on ({}): {e}", state.display());
            }
        }
    }
}

/// Bytes in use on the filesystem holding `path` (`df`).
pub fn used(path: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["--output=used", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Runs `cmd` with `args`; it must succeed.
pub fn run(cmd: &str, args: &[&std::ffi::OsStr]) {
    let st = std::process::Command::new(cmd).args(args).status().unwrap();
    assert!(st.success(), "{cmd} {args:?} failed");
}

/// `dir/backing` as a loop-mounted 1 GiB XFS image with reflinks (root; `scripts/test-deps`
/// installs xfsprogs), unmounted when the returned guard goes (declare it before the
/// squeezefs mount over it, which then goes first).
pub fn xfs_backing(dir: &Path) -> LoopMount {
    require_root("this test loop-mounts an XFS image");
    let img = dir.join("xfs.img");
    std::fs::File::create(&img).unwrap().set_len(1 << 30).unwrap();
    run(
        "mkfs.xfs",
        &[
            "-q".as_ref(),
            "-m".as_ref(),
            "reflink=1".as_ref(),
            img.as_os_str(),
        ],
    );
    let backing = dir.join("backing");
    std::fs::create_dir_all(&backing).unwrap();
    run(
        "mount",
        &[
            "-o".as_ref(),
            "loop".as_ref(),
            img.as_os_str(),
            backing.as_os_str(),
        ],
    );
    LoopMount(backing)
}

/// A loop-mounted image at this path, unmounted (lazily, so a failed test's leftovers
/// cannot hold it) when dropped.
pub struct LoopMount(pub PathBuf);

impl std::ops::Deref for LoopMount {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// `sync -f`: the filesystem holding `path` made durable (its `df` then counts what the
/// last changes freed).
pub fn sync_fs(path: &Path) {
    run("sync", &["-f".as_ref(), path.as_os_str()]);
}

/// `mibs` MiB compressible as a mix of files is (about 2:1): each MiB half text, half noise
/// (noise seeded by the MiB's index).
pub fn half_text_mibs(mibs: u64) -> Vec<u8> {
    (0..mibs)
        .flat_map(|i| {
            let mut mib = squeezefs_testdata::text(512 << 10);
            mib.extend_from_slice(&squeezefs_testdata::random(512 << 10, i));
            mib
        })
        .collect()
}
