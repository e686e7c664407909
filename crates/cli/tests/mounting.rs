//! Mounting like any other filesystem (mount -t fuse.squeezefs, /etc/fstab, --daemon with
//! syslog, squeezefs umount) and the finish of the command line (--version, --help examples,
//! man pages, completions). Needs root: it installs the mount helper for the test.

#![deny(unsafe_code)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{is_mounted, require_fuse, scratch, squeezefs, squeezefs_mount};

const HELPER: &str = "/usr/sbin/mount.fuse.squeezefs";

/// Puts this build at /usr/sbin/mount.fuse.squeezefs (what scripts/install does) and puts
/// back whatever was there when dropped.
struct Helper {
    before: Option<PathBuf>,
    /// One test at a time has the helper: another's drop would remove it (or put back what
    /// was there before either began) while this one still mounts through it; mount(8)
    /// then falls back to mount.fuse3, which finds no `squeezefs` on its PATH.
    _only: std::sync::MutexGuard<'static, ()>,
}

static HELPER_IN_USE: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Helper {
    fn install() -> Helper {
        common::require_root("mount(8) helpers need root: run the tests as root");
        require_fuse();
        let only = HELPER_IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        let before = fs::read_link(HELPER).ok();
        let _ = fs::remove_file(HELPER);
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_squeezefs"), HELPER).unwrap();
        Helper { before, _only: only }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = fs::remove_file(HELPER);
        if let Some(b) = &self.before {
            let _ = std::os::unix::fs::symlink(b, HELPER);
        }
    }
}

fn os<P: AsRef<OsStr> + ?Sized>(p: &P) -> &OsStr {
    p.as_ref()
}

fn live(mnt: &Path) -> serde_json::Value {
    let out = squeezefs(&[os("stats"), os("--live"), mnt.as_os_str(), os("--json")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn umount(mnt: &Path) {
    let out = squeezefs(&[os("umount"), mnt.as_os_str()]);
    assert!(
        out.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(mnt));
}

/// The pid of the daemon serving `backing` (the holder of its lock).
fn daemon_pid(backing: &Path) -> Option<u32> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "grep -l -- '{}' /proc/[0-9]*/cmdline 2>/dev/null",
            backing.display()
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split('/').nth(2)?.parse().ok())
        .find(|&p: &u32| p != std::process::id())
}

#[test]
fn mount_t_fuse_squeezefs_and_fstab_lines_work_and_umount_waits_for_the_daemon() {
    let _h = Helper::install();
    let d = scratch("mount-t");
    let (backing, mnt) = (d.join("backing"), d.join("mnt"));
    let st = Command::new("mount")
        .args(["-t", "fuse.squeezefs"])
        .arg(&backing)
        .arg(&mnt)
        .args(["-o", "compress=zstd:9,nofail"])
        .status()
        .unwrap();
    assert!(st.success(), "mount -t fuse.squeezefs failed");
    assert!(is_mounted(&mnt), "mount(8) returns once the filesystem is there");
    assert_eq!(live(&mnt)["mount"]["compress"], "zstd:9");
    let text: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    fs::write(mnt.join("f"), &text).unwrap();
    let pid = daemon_pid(&backing).expect("a detached daemon");
    umount(&mnt);
    assert!(
        !common::running(pid),
        "umount returns after the daemon has exited"
    );
    // What it wrote is complete and clean at rest.
    common::check_clean(&backing, "after the daemon's writes");

    // An fstab line (here a private fstab file), mounted by its mount point.
    let fstab = d.join("fstab");
    fs::write(
        &fstab,
        format!(
            "# squeezefs\n{} {} fuse.squeezefs compress=lz4,noauto,nofail,x-systemd.automount 0 0\n",
            backing.display(),
            mnt.display()
        ),
    )
    .unwrap();
    let st = Command::new("mount")
        .arg("--fstab")
        .arg(&fstab)
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount from an fstab line failed");
    assert_eq!(live(&mnt)["mount"]["compress"], "lz4:1");
    assert_eq!(fs::read(mnt.join("f")).unwrap(), text);
    umount(&mnt);

    // Bad options are refused with the option named, and nothing is mounted.
    let out = Command::new("mount")
        .args(["-t", "fuse.squeezefs"])
        .arg(&backing)
        .arg(&mnt)
        .args(["-o", "compress=zstd:99"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("zstd:99") || !is_mounted(&mnt));
    assert!(!is_mounted(&mnt));
    // umount of something that is not a squeezefs says so.
    let out = squeezefs(&[os("umount"), d.as_os_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a squeezefs mount"));
}

#[test]
fn a_daemon_detaches_once_mounted_and_logs_to_syslog() {
    require_fuse();
    let d = scratch("daemon-syslog");
    let (backing, mnt) = (d.join("backing"), d.join("mnt"));
    let sock_path = d.join("log.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_squeezefs"))
        .env("SQUEEZEFS_SYSLOG_SOCKET", &sock_path)
        .args([os("mount"), backing.as_os_str(), mnt.as_os_str(), os("--daemon")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(is_mounted(&mnt), "--daemon returns only once mounted");
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    let mut recv_until = |want: &str, lines: &mut Vec<String>| {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let n = sock.recv(&mut buf).expect("a syslog line");
            let l = String::from_utf8_lossy(&buf[..n]).into_owned();
            lines.push(l.clone());
            if l.contains(want) {
                return l;
            }
        }
        panic!("no syslog line with {want:?}: {lines:?}");
    };
    let l = recv_until("serving", &mut lines);
    assert!(l.starts_with("<30>squeezefs["), "daemon.info, tagged: {l}");
    // A warning from the running daemon reaches syslog too, with its priority.
    fs::write(mnt.join("f"), b"x").unwrap();
    let st = Command::new("setfattr")
        .args(["-n", "user.squeezefs.compression", "-v", "zstd:99"])
        .arg(mnt.join("f"))
        .status()
        .unwrap();
    assert!(!st.success());
    let l = recv_until("zstd:99", &mut lines);
    assert!(l.starts_with("<28>squeezefs["), "daemon.warning: {l}");
    umount(&mnt);
}

#[test]
fn the_command_line_teaches_and_documents_itself() {
    let out = squeezefs(&[os("--version")]);
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(
        v.contains("container format 2, 3 for files with a dictionary, 5 for files whose times")
            && v.contains("6 for files it gave larger extents")
            && v.contains("7 for files with the force property")
            && v.contains("packed files format 4")
            && v.contains("reads 1–7"),
        "{v}"
    );
    let help = squeezefs(&[os("--help")]);
    let subs: Vec<String> = String::from_utf8_lossy(&help.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|s| s != "help")
        .collect();
    for want in [
        "mount", "umount", "stats", "compress", "estimate", "check", "property", "bench",
    ] {
        assert!(subs.iter().any(|s| s == want), "{want} not in {subs:?}");
    }
    for s in &subs {
        let out = squeezefs(&[os(s), os("--help")]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Example"),
            "`squeezefs {s} --help` has no example:\n{text}"
        );
    }
    // The mount options, packing's included, with their defaults.
    let out = squeezefs(&[os("mount"), os("--help")]);
    let text = String::from_utf8_lossy(&out.stdout);
    let cache = format!(
        "pack_cache=SIZE             memory for decompressed pack blocks (default {}M)",
        squeezefs_container::pack::DEFAULT_CACHE >> 20
    );
    for want in [
        "\n  pack  ",
        "\n  nopack  ",
        &cache,
        "solid compressed blocks",
        "the default; format 4",
        "nopack                      do not pack new files",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    let d = scratch("man");
    let out = squeezefs(&[os("man"), d.as_os_str()]);
    assert!(out.status.success());
    for page in [
        "squeezefs.1",
        "squeezefs-compress.1",
        "squeezefs-estimate.1",
        "squeezefs-property-set.1",
        "squeezefs-dict-train.1",
    ] {
        let text = fs::read_to_string(d.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page} is a man page");
    }
    assert!(fs::read_to_string(d.join("squeezefs-compress.1"))
        .unwrap()
        .contains("btrfs"));
    for shell in ["bash", "zsh", "fish"] {
        let out = squeezefs(&[os("completions"), os(shell)]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("estimate") && text.contains("extent-size"),
            "{shell}"
        );
    }
    // Errors name the path and what to do.
    let out = squeezefs(&[os("check"), os("/nonexistent/backing")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/backing"));
    let out = squeezefs(&[os("compress"), os("/tmp"), os("--codec"), os("zstd:99")]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("zstd:1 … zstd:19"), "{e}");
}

#[test]
fn remount_read_only_and_back_and_unmount_by_source_name_like_any_filesystem() {
    let _h = Helper::install();
    let d = scratch("remount");
    let (backing, mnt) = (d.join("backing"), d.join("mnt"));
    let source = format!("squeezefs:{}", backing.canonicalize().unwrap().display());
    // Mounted by the name mountinfo shows (what xfstests and scripts pass back).
    let st = Command::new("mount")
        .args(["-t", "fuse.squeezefs", &source])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount -t fuse.squeezefs {source}");
    let line = |mnt: &Path| squeezefs_mount(mnt).expect("mounted");
    let l = line(&mnt);
    assert!(l.fstype == "fuse.squeezefs" && l.source == source, "{l:?}");
    fs::write(mnt.join("kept"), b"before").unwrap();
    let remount = |how: &str| {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(&mnt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "remount,{how}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    remount("ro");
    assert!(line(&mnt).options.starts_with("ro"), "{:?}", line(&mnt));
    let e = fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    assert_eq!(fs::read(mnt.join("kept")).unwrap(), b"before");
    remount("rw");
    assert!(line(&mnt).options.starts_with("rw"));
    fs::write(mnt.join("new"), b"after").unwrap();
    // The flags a remount does not mention stay as they were.
    remount("nosuid");
    let opts = line(&mnt).options;
    assert!(opts.starts_with("rw") && opts.contains("nosuid"), "{opts}");
    let pid = daemon_pid(&backing).expect("a detached daemon");
    // umount(8) by source name.
    let st = Command::new("umount").arg(&source).status().unwrap();
    assert!(st.success(), "umount {source}");
    assert!(!is_mounted(&mnt));
    // And mounted again at once, while the old daemon may still be finishing.
    let st = Command::new("mount")
        .args(["-t", "fuse.squeezefs", &source])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount right after umount");
    // The old daemon had released the backing directory: it only has its exit left.
    let start = Instant::now();
    while common::running(pid) {
        assert!(start.elapsed() < Duration::from_secs(10), "the old daemon exits");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fs::read(mnt.join("new")).unwrap(), b"after");
    umount(&mnt);
    // A daemon started read-only (it opens no file) stays so: a remount asking for rw is
    // refused, saying why, and nothing can be changed or truncated there.
    let st = Command::new("mount")
        .args(["-t", "fuse.squeezefs", "-o", "ro", &source])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount -o ro");
    let out = Command::new("mount")
        .args(["-o", "remount,rw"])
        .arg(&mnt)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "remount,rw of a read-only daemon: {said}");
    assert!(said.contains("mounted read-only (-o ro) and stays so"), "{said}");
    let e = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(mnt.join("new"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    assert_eq!(fs::read(mnt.join("new")).unwrap(), b"after");
    umount(&mnt);
}

/// `nodiratime` and `strictatime` (xfstests generic/003 mounts with them) are per-mount
/// flags fuser cannot pass to mount(2) (the kernel's FUSE option parser refuses them): the
/// daemon sets them with mount_setattr(2) once the mount exists, so mountinfo shows them as
/// for any filesystem, and the last access-time mode given wins. `lazytime` (the
/// superblock's flag) is still refused, saying so.
#[test]
fn nodiratime_and_strictatime_are_set_on_the_new_mount() {
    common::require_root("mount_setattr(2) on a FUSE mount needs root (CI runs as root)");
    let d = scratch("atime-flags");
    // The flags as mountinfo shows them once `ok` holds, or after 5 s. (The daemon sets
    // them just after the mount appears: a moment in which mountinfo shows the defaults.)
    let flags_when = |m: &common::Mount, ok: &dyn Fn(&[String]) -> bool| {
        let start = std::time::Instant::now();
        loop {
            let o = squeezefs_mount(&m.mnt).expect("mounted").options;
            let f = o.split(',').map(str::to_string).collect::<Vec<_>>();
            if ok(&f) || start.elapsed() > std::time::Duration::from_secs(5) {
                return f;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    let m = common::Mount::new(&d, "nodiratime");
    let ok = |f: &[String]| f.contains(&"nodiratime".into()) && f.contains(&"relatime".into());
    let f = flags_when(&m, &ok);
    assert!(ok(&f), "{f:?}");
    fs::write(m.path("f"), b"kept").unwrap();
    m.unmount();
    // strictatime shows as neither relatime nor noatime; it overrides an earlier noatime.
    let m = common::Mount::new(&d, "noatime,strictatime,nodiratime");
    let ok = |f: &[String]| {
        f.contains(&"nodiratime".into()) && !f.contains(&"relatime".into()) && !f.contains(&"noatime".into())
    };
    let f = flags_when(&m, &ok);
    assert!(ok(&f), "{f:?}");
    assert_eq!(fs::read(m.path("f")).unwrap(), b"kept");
    m.unmount();
    // And a later noatime overrides strictatime.
    let m = common::Mount::new(&d, "strictatime,noatime");
    let ok = |f: &[String]| f.contains(&"noatime".into()) && !f.contains(&"nodiratime".into());
    let f = flags_when(&m, &ok);
    assert!(ok(&f), "{f:?}");
    m.unmount();
    let out = squeezefs(&[
        os("mount"),
        d.join("backing").as_os_str(),
        d.join("mnt").as_os_str(),
        os("-o"),
        os("lazytime"),
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("`lazytime` is not supported"),
        "{e}"
    );
    assert!(!is_mounted(&d.join("mnt")));
}

/// A user who may not open /dev/fuse is told so, and what to do — not a bare "Permission
/// denied (os error 13)". The device is hidden from the user `tests` in a mount namespace
/// of the test's own (a root-only file bound over it), so the host's stays as it is.
#[test]
fn a_mount_without_access_to_dev_fuse_says_so_and_what_to_do() {
    common::require_root("binds a file over /dev/fuse in a namespace of its own");
    require_fuse();
    let dir = scratch("no-dev-fuse");
    for d in ["backing", "mnt"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    common::open_to_others(&dir);
    let blocker = dir.join("not-fuse");
    fs::write(&blocker, b"").unwrap();
    let script = format!(
        "mount --bind {} /dev/fuse && exec setpriv --reuid=tests --regid=tests --clear-groups -- {} mount {} {}",
        blocker.display(),
        env!("CARGO_BIN_EXE_squeezefs"),
        dir.join("backing").display(),
        dir.join("mnt").display()
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted without /dev/fuse: {err}");
    assert!(!is_mounted(&dir.join("mnt")));
    for want in [
        "/dev/fuse: permission denied for uid",
        "chmod 0666 /dev/fuse",
        "--device /dev/fuse",
    ] {
        assert!(err.contains(want), "the message does not say {want:?}: {err}");
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// An unmount that worked — by `fusermount3 -u` or by SIGTERM — logs nothing above INFO
/// (the daemon does not try to unmount again a mount that is gone).
#[test]
fn an_unmount_that_worked_logs_nothing_alarming() {
    for by_signal in [false, true] {
        let dir = scratch("quiet-unmount");
        let mut m = common::Mount::new(&dir, "");
        fs::write(m.path("f"), b"data").unwrap();
        if by_signal {
            let pid = m.child.as_ref().unwrap().id();
            assert!(Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .unwrap()
                .success());
            let st = m.child.take().unwrap().wait().unwrap();
            assert!(st.success(), "daemon exited with {st}");
        } else {
            m.unmount();
        }
        let log = fs::read_to_string(dir.join("daemon.log")).unwrap();
        let alarming = common::alarming(&log);
        assert!(alarming.is_empty(), "by_signal {by_signal}: {alarming:?}");
        assert!(
            log.contains("every file written out"),
            "by_signal {by_signal}: {log}"
        );
        let m = common::Mount::new(&dir, "");
        assert_eq!(fs::read(m.path("f")).unwrap(), b"data", "by_signal {by_signal}");
        m.unmount();
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// A rootless container: the user `tests` in a user and mount namespace of its own
/// (`unshare -Urm`, as podman and bubblewrap make), root there without any capability on
/// the host. squeezefs mounts there without fusermount3, finds that file handles cannot be
/// opened (CAP_DAC_READ_SEARCH in a user namespace does not reach the host's inodes) and
/// reopens files by name; a tree with a mode-0 file and a chown to root-in-the-namespace
/// round-trips, and the host sees the data after a remount, `check` clean.
#[test]
fn a_rootless_container_mounts_and_round_trips_a_tree() {
    common::require_root("prepares the user `tests` (CI runs as root)");
    require_fuse();
    let dir = scratch("userns");
    common::open_to_others(&dir);
    let src = dir.join("src");
    for d in 0..4 {
        fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..50 {
            let body = format!("dir {d} file {f}\n").repeat(1 + f * 40);
            fs::write(src.join(format!("d{d}/f{f}")), body).unwrap();
        }
    }
    std::os::unix::fs::symlink("../d1/f1", src.join("d0/link")).unwrap();
    // The user's own files: root's would be unmapped (nobody) in the namespace.
    let st = Command::new("chown")
        .args(["-R", "tests:"])
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    fs::create_dir_all(dir.join("logs")).unwrap();
    for d in ["backing", "mnt", "logs"] {
        let st = Command::new("chown")
            .arg("tests:")
            .arg(dir.join(d))
            .status()
            .unwrap();
        assert!(st.success());
    }
    let (b, m, log) = (dir.join("backing"), dir.join("mnt"), dir.join("logs/daemon.log"));
    let script = format!(
        "set -e; test \"$(id -u)\" = 0; \
         {bin} mount {b} {m} >/dev/null 2>{log} & pid=$!; \
         trap 'umount -l {m} 2>/dev/null || true; kill $pid 2>/dev/null || true' EXIT; \
         i=0; until grep -q ' {m} ' /proc/self/mountinfo; do i=$((i+1)); test $i -lt 300; sleep 0.05; done; \
         cp -a {src}/. {m}/; echo secret > {m}/none; chmod 0 {m}/none; chown 0:0 {m}/d2/f3; \
         diff -r {src} {m}/ -x none; test \"$(cat {m}/none)\" = secret; \
         umount {m}; wait $pid",
        bin = env!("CARGO_BIN_EXE_squeezefs"),
        b = b.display(),
        m = m.display(),
        log = log.display(),
        src = src.display(),
    );
    let out = common::as_tests(&["unshare", "-Urm", "sh", "-c", &script]);
    let log_text = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success(),
        "{}{}\n{log_text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(log_text.contains("reopened by name"), "{log_text}");
    // The host: what the namespace's root owned is the user's; everything is there.
    let (uid, _) = common::tests_ids();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(b.join("d2/f3")).unwrap().uid(), uid);
    common::check_clean(&b, "after the rootless container");
    let mount = common::Mount::new(&dir, "");
    let diff = Command::new("diff")
        .arg("-r")
        .arg(&src)
        .arg(&mount.mnt)
        .args(["-x", "none"])
        .output()
        .unwrap();
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stdout));
    assert_eq!(fs::read(mount.path("none")).unwrap(), b"secret\n");
    mount.unmount();
    fs::remove_dir_all(&dir).unwrap();
}
