//! strace attached to a daemon: the system calls a request makes on the backing
//! filesystem, counted (tests/backing_calls.rs, tests/distributed.rs).

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// strace attached to every thread of process `pid`, tracing `calls` into `out`.
pub struct Strace(Child);

impl Strace {
    pub fn attach(pid: u32, calls: &str, out: &Path) -> Strace {
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
    pub fn finish(mut self, out: &Path) -> String {
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
pub fn count(trace: &str, name: &str) -> usize {
    trace
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|c| c.starts_with(&format!("{name}(")))
        })
        .count()
}
