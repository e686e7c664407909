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
//! idle time (`/proc/stat`'s `cpuN` lines of the CPUs this process may use: idle + iowait,
//! in clock ticks) once an epoch
//! ([`EPOCH`]) while it spins, and calls the machine saturated when a whole epoch passed
//! without a tick of idle on any CPU.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// How long the governor watches idle time before judging: five clock ticks at the usual
/// 100 Hz, so a CPU idle a fifth of the time shows at least one.
pub const EPOCH: Duration = Duration::from_millis(50);

/// Reads the idle ticks of the CPUs this process may run on (a container's cpuset, not the
/// host's); `None` where `/proc/stat` is missing (then the spin never yields).
pub struct Idle {
    file: Option<File>,
    cpus: Vec<usize>,
    buf: Vec<u8>,
    last: Option<u64>,
}

impl Idle {
    pub fn new(cpus: Vec<usize>) -> Self {
        Idle {
            file: File::open("/proc/stat").ok(),
            cpus,
            buf: Vec::new(),
            last: None,
        }
    }

    /// Idle + iowait ticks of those CPUs since boot.
    fn ticks(&mut self) -> Option<u64> {
        let f = self.file.as_ref()?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            let n = f.read_at(&mut chunk, self.buf.len() as u64).ok()?;
            if n == 0 || self.buf.len() > 1 << 20 {
                break;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        idle_of(&self.buf, &self.cpus)
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

/// Idle + iowait summed over the `cpuN` lines of `/proc/stat` for N in `cpus` (all `cpuN`
/// lines when `cpus` is empty); `None` when none is found.
fn idle_of(text: &[u8], cpus: &[usize]) -> Option<u64> {
    let mut sum = None;
    for line in std::str::from_utf8(text).ok()?.lines() {
        let mut f = line.split_ascii_whitespace();
        let Some(n) = f
            .next()
            .and_then(|c| c.strip_prefix("cpu"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        if !cpus.is_empty() && !cpus.contains(&n) {
            continue;
        }
        let v: Vec<u64> = f.take(5).map(|x| x.parse().ok()).collect::<Option<_>>()?;
        *sum.get_or_insert(0) += v.get(3)? + v.get(4)?;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_iowait_are_read_from_proc_stat() {
        let stat = b"cpu  124324 0 61807 163325 6830 0 590 78 0 0\ncpu0 1 2 3 40 5 0\ncpu1 1 2 3 400 50 0\nintr 1 2\n";
        assert_eq!(idle_of(stat, &[]), Some(495));
        assert_eq!(idle_of(stat, &[1]), Some(450));
        assert_eq!(idle_of(stat, &[7]), None);
        assert_eq!(idle_of(b"cpu0 1 2 3\n", &[]), None);
        let cpus = crate::sys::cpu::allowed_cpus().unwrap();
        assert!(Idle::new(cpus).ticks().is_some(), "this machine has /proc/stat");
    }

    #[test]
    fn busy_cpus_read_as_saturated_and_idle_ones_do_not() {
        let allowed = crate::sys::cpu::allowed_cpus().unwrap();
        let cpus = allowed.len();
        let mut idle = Idle::new(allowed);
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
