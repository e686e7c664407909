//! Whether the CPUs a spin leaves are saturated by other work.
//!
//! On two cores a spinning session thread is half the machine. While the program walking
//! the tree is what else runs, that is a good trade: the program blocks on every request,
//! and the other CPU idles meanwhile. Beside a CPU-bound program it is not: that program
//! never blocks, so no CPU ever idles, the spin takes its share of a CPU from it and from
//! the walker alike, and there is nothing to gain anyway — a CPU that never idles wakes
//! nobody up from a halt. Measured (session 21, 2026-11-28, Linux `Documentation/` + `fs/`
//! extracted beside a one-thread busy loop): spinning without this made the extract 1.5×
//! slower and the busy loop 12–34 % slower than not spinning.
//!
//! The runnable count (`/proc/loadavg`) cannot tell that program from the walker, which is
//! runnable much of the time too (tried: yielding on it lost the spin's gain on a plain
//! extract). Idle time can: with the walker alone, the other CPUs idle while it waits for
//! each reply; beside a busy program they never do. So the governor reads the machine's
//! idle time (`/proc/stat`'s `cpu` line: idle + iowait, in clock ticks) once an epoch
//! ([`EPOCH`]) while it spins, and calls the machine saturated when a whole epoch passed
//! without a tick of idle on any CPU.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// How long the governor watches idle time before judging: five clock ticks at the usual
/// 100 Hz, so a CPU idle a fifth of the time shows at least one.
pub const EPOCH: Duration = Duration::from_millis(50);

/// Reads the machine's idle ticks; `None` where `/proc/stat` is missing (then the spin
/// never yields).
pub struct Idle {
    file: Option<File>,
    last: Option<u64>,
}

impl Idle {
    pub fn new() -> Self {
        Idle {
            file: File::open("/proc/stat").ok(),
            last: None,
        }
    }

    /// Idle + iowait ticks of all CPUs since boot.
    fn ticks(&self) -> Option<u64> {
        let mut buf = [0u8; 256];
        let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        idle_of(&buf[..n])
    }

    /// Starts an epoch (the spin starts).
    pub fn reset(&mut self) {
        self.last = self.ticks();
    }

    /// Ends an epoch and starts the next: whether no CPU idled in it (`false` when unknown).
    pub fn saturated(&mut self) -> bool {
        let now = self.ticks();
        let sat = matches!((self.last, now), (Some(a), Some(b)) if b <= a);
        self.last = now;
        sat
    }
}

/// Idle + iowait of `/proc/stat`'s first (`cpu`) line.
fn idle_of(text: &[u8]) -> Option<u64> {
    let line = std::str::from_utf8(text).ok()?.lines().next()?;
    let mut f = line.split_ascii_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.take(5).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    Some(v.get(3)? + v.get(4)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_iowait_are_read_from_proc_stat() {
        assert_eq!(
            idle_of(b"cpu  124324 0 61807 163325 6830 0 590 78 0 0\ncpu0 1 2"),
            Some(170155)
        );
        assert_eq!(idle_of(b"cpu0 1 2 3 4 5\n"), None);
        assert_eq!(idle_of(b"cpu  1 2 3\n"), None);
        assert!(Idle::new().ticks().is_some(), "this machine has /proc/stat");
    }

    #[test]
    fn busy_cpus_read_as_saturated_and_idle_ones_do_not() {
        let cpus = crate::sys::cpu::allowed_cpus().unwrap().len();
        let mut idle = Idle::new();
        // Idle (or nearly: other tests run beside): some epoch in a few shows idle ticks.
        let mut seen_idle = false;
        for _ in 0..20 {
            idle.reset();
            std::thread::sleep(EPOCH);
            if !idle.saturated() {
                seen_idle = true;
                break;
            }
        }
        assert!(seen_idle, "20 epochs without an idle tick on an idle test");
        // Every CPU busy: an epoch without idle.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy: Vec<_> = (0..cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        std::thread::sleep(EPOCH);
        let mut seen_saturated = false;
        for _ in 0..40 {
            idle.reset();
            std::thread::sleep(EPOCH);
            if idle.saturated() {
                seen_saturated = true;
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for b in busy {
            b.join().unwrap();
        }
        assert!(
            seen_saturated,
            "{cpus} busy threads on {cpus} CPUs never read as saturated"
        );
    }
}
