//! What a request costs on the backing filesystem, counted with strace on the daemon:
//! the system calls a request makes while its caller waits (issue 43: a SETATTR whose
//! change waits in memory read the backing file's attributes twice, a `statx` for the
//! decision and an `fstat` for the reply).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// strace attached to every thread of process `pid`, tracing `calls` into `out`.
struct Strace(Child);

impl Strace {
    fn attach(pid: u32, calls: &str, out: &Path) -> Strace {
        let child = Command::new("strace")
            .args(["-f", "-qq", "-e", &format!("trace={calls}"), "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("strace (scripts/test-deps installs it)");
        // Attached once every thread of the process names strace as its tracer.
        let tracer = child.id().to_string();
        let start = Instant::now();
        let attached = || {
            fs::read_dir(format!("/proc/{pid}/task")).unwrap().all(|t| {
                let status = fs::read_to_string(t.unwrap().path().join("status")).unwrap_or_default();
                status
                    .lines()
                    .any(|l| l.strip_prefix("TracerPid:").is_some_and(|v| v.trim() == tracer))
            })
        };
        while !attached() {
            assert!(start.elapsed() < Duration::from_secs(30), "strace did not attach");
            std::thread::sleep(Duration::from_millis(20));
        }
        Strace(child)
    }

    /// Stops tracing and returns the trace.
    fn finish(mut self, out: &Path) -> String {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let start = Instant::now();
        while self.0.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(20), "strace did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        fs::read_to_string(out).unwrap()
    }
}

/// Lines of `trace` that are calls of `name` (strace -f prefixes each with the thread id).
fn count(trace: &str, name: &str) -> usize {
    trace
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|c| c.starts_with(&format!("{name}(")))
        })
        .count()
}

/// chmod of a file being written waits in memory (rule 7), and its SETATTR reads the
/// backing file's attributes once: one `statx` for the decision, whose result is the
/// reply (it did a `statx` and an `fstat`).
#[test]
fn a_setattr_that_waits_reads_the_backing_file_once() {
    require_root("strace attaches to the daemon");
    let dir = scratch("calls-setattr");
    let m = Mount::new(&dir, "");
    let f = open_rw_new(&m.path("f"));
    use std::io::Write;
    (&f).write_all(b"being written").unwrap();
    const N: usize = 200;
    let out = dir.join("trace");
    let strace = Strace::attach(m.child.as_ref().unwrap().id(), "statx,newfstatat,fstat", &out);
    for i in 0..N {
        let mode = if i % 2 == 0 { 0o640 } else { 0o644 };
        f.set_permissions(fs::Permissions::from_mode(mode)).unwrap();
    }
    let trace = strace.finish(&out);
    let (statx, fstat) = (
        count(&trace, "statx"),
        count(&trace, "newfstatat") + count(&trace, "fstat"),
    );
    println!("FIGURES {N} chmods of a file being written: {statx} statx, {fstat} fstat on the backing");
    assert!(
        statx >= N,
        "each SETATTR decides with a statx: {statx} for {N}\n{trace}"
    );
    assert!(
        statx + fstat <= N + N / 10,
        "{N} chmods made {statx} statx and {fstat} fstat calls: one each is the most"
    );
    assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o644);
    drop(f);
    assert_eq!(
        fs::metadata(m.path("f")).unwrap().permissions().mode() & 0o777,
        0o644
    );
    m.unmount();
    assert_eq!(
        fs::metadata(dir.join("backing/f")).unwrap().permissions().mode() & 0o777,
        0o644,
        "on the backing file after the close"
    );
}

/// Lines of `trace` whose call failed with ENOENT (a LOOKUP miss that reached the backing).
fn enoent(trace: &str) -> usize {
    trace.lines().filter(|l| l.contains("= -1 ENOENT")).count()
}

/// LOOKUP misses in a directory the daemon made are answered from its known names: no
/// backing call (issue 44, point 4). In a directory it does not know (the root, not listed
/// since the mount), each miss is a failed `openat` on the backing — which shows that the
/// trace sees them.
#[test]
fn lookup_misses_in_a_known_directory_make_no_backing_call() {
    require_root("strace attaches to the daemon");
    let dir = scratch("calls-lookup");
    let m = Mount::new(&dir, "");
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/present"), b"x").unwrap();
    const N: usize = 300;
    let out = dir.join("trace");
    let strace = Strace::attach(m.child.as_ref().unwrap().id(), "openat,newfstatat,statx", &out);
    for i in 0..N {
        assert!(fs::symlink_metadata(m.path(&format!("d/missing{i}"))).is_err());
    }
    assert!(fs::symlink_metadata(m.path("d/present")).is_ok());
    let known = enoent(&strace.finish(&out));
    let out = dir.join("trace-root");
    let strace = Strace::attach(m.child.as_ref().unwrap().id(), "openat,newfstatat,statx", &out);
    for i in 0..N {
        assert!(fs::symlink_metadata(m.path(&format!("missing{i}"))).is_err());
    }
    let unknown = enoent(&strace.finish(&out));
    println!("FIGURES {N} LOOKUP misses: {known} failed backing calls in a known directory, {unknown} in an unknown one");
    assert!(
        unknown >= N,
        "the trace missed the unknown directory's misses: {unknown}"
    );
    assert!(
        known <= N / 30,
        "{known} failed backing calls for {N} misses in a known directory"
    );
}
