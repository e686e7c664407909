//! Whether anything else wants the CPUs a spin would take.
//!
//! On two cores a spinning session thread is half the machine. While the program walking
//! the tree is the only other thread that runs, that is a good trade; once more threads
//! want a CPU than are left — the daemon's own read-ahead and compressing threads during a
//! cold read or a large write, or a CPU-bound program beside the mount — the spin takes
//! their time (session 13 measured +4–11 % on a cold read of a tree). The kernel's count of
//! runnable threads (`/proc/loadavg`'s fourth field, `nr_running()` at the moment of the
//! read, whole machine) says which case this is, for ~2 µs a read.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Reads the number of runnable threads; `None` where `/proc/loadavg` is missing (then the
/// spin never yields, as before this existed).
pub struct Load {
    file: Option<File>,
    cpus: usize,
}

impl Load {
    pub fn new(cpus: usize) -> Self {
        Load {
            file: File::open("/proc/loadavg").ok(),
            cpus,
        }
    }

    /// Runnable threads now, the caller included.
    pub fn running(&self) -> Option<usize> {
        let mut buf = [0u8; 128];
        let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        running_of(&buf[..n])
    }

    /// Whether threads other than the spinning one and the caller (the governor) want
    /// every CPU the spin leaves them — i.e. some thread waits for a CPU the spin holds.
    pub fn contended(&self) -> bool {
        self.running().is_some_and(|r| contended(r, self.cpus))
    }
}

/// Whether `running` runnable threads (the spinner and the governor among them) leave one
/// waiting on `cpus` CPUs.
pub fn contended(running: usize, cpus: usize) -> bool {
    running.saturating_sub(2) >= cpus
}

/// The `R` of `/proc/loadavg`'s `R/T` field.
fn running_of(text: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(text).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_count_is_read_from_loadavg() {
        assert_eq!(running_of(b"0.82 0.77 0.36 3/78 7451\n"), Some(3));
        assert_eq!(running_of(b"0.82 0.77 0.36\n"), None);
        assert_eq!(running_of(b"a b c x/78 1\n"), None);
        let l = Load::new(2);
        assert!(l.running().is_some_and(|r| r >= 1), "this thread runs");
    }

    #[test]
    fn contention_counts_threads_beyond_the_spinner_and_the_governor() {
        // Two CPUs: the spinner, the governor and the program it serves fit.
        assert!(!contended(3, 2));
        // A read-ahead worker besides: someone waits.
        assert!(contended(4, 2));
        assert!(!contended(1, 2));
        assert!(!contended(9, 8));
        assert!(contended(10, 8));
    }

    #[test]
    fn busy_threads_make_the_machine_contended() {
        let cpus = crate::sys::cpu::allowed_cpus().unwrap().len();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // As many busy threads as CPUs, plus this one and a pretend spinner.
        let busy: Vec<_> = (0..cpus + 1)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let l = Load::new(cpus);
        let t = std::time::Instant::now();
        let mut seen = false;
        while t.elapsed() < std::time::Duration::from_secs(5) && !seen {
            seen = l.contended();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for b in busy {
            b.join().unwrap();
        }
        assert!(
            seen,
            "{} busy threads on {cpus} CPUs never read as contended",
            cpus + 1
        );
    }
}
