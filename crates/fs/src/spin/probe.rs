//! What a wake-up costs on this machine: the measurement behind `spin=auto`.
//!
//! A tree walk's requests come one at a time: the program (tar, git) sends one, blocks for
//! its reply, works a few µs, sends the next. Whether a session thread should spin between
//! them depends on how much a sleeping thread's wake-up costs here, and that differs from
//! machine to machine by several times: a VM whose vCPUs halt when idle (no guest
//! halt-polling) pays an IPI and a VM exit, ~20–40 µs, for every request; bare metal with
//! `cpuidle` polling pays a few µs. So the mount measures it instead of guessing:
//! two threads bounce a byte over a socket pair, the client blocking as tar does, the
//! server first blocking (as a session thread that sleeps), then spinning on a
//! non-blocking socket (as the spinning session thread does, `EAGAIN` retried at once).
//! Batches of the two alternate, so drift on a shared machine hits both alike; the medians
//! of the batches are compared.
//!
//! The two threads are kept on two different CPUs. Left to the scheduler, they sometimes
//! share one, and a round trip is then a plain context switch (measured on these VMs: 13–17
//! µs, against 33–40 µs across CPUs, from one run to the next): a spinning session thread is
//! on another CPU than the program by definition, so the cross-CPU wake-up is what it saves.
//! On a machine with one usable CPU nothing is measured: spinning there would take the CPU
//! from the very program waiting for the reply.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Round trips a batch (a few ms).
const ROUNDS: u32 = 200;
/// Batches of each kind, alternated (about 10 × 200 × 2 × ~40 µs ≈ 0.1–0.2 s in all, on the
/// governor's thread, not the mount's path).
const BATCHES: usize = 9;

/// A measurement: µs a round trip with a sleeping server and with a spinning one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WakeUp {
    pub blocking_us: f64,
    pub spinning_us: f64,
}

/// Spinning must save at least this much of a round trip (µs) to be worth a core while
/// requests stream: about what the daemon spends answering a request from memory.
pub const MIN_SAVING_US: f64 = 8.0;

impl WakeUp {
    /// Whether spinning pays here: it saves at least [`MIN_SAVING_US`] a request and a
    /// quarter of its round trip (a machine where both are cheap gains too little for the
    /// CPU it would spend).
    pub fn spin_pays(&self) -> bool {
        let saved = self.blocking_us - self.spinning_us;
        saved >= MIN_SAVING_US && saved * 4.0 >= self.blocking_us
    }
}

/// Measures (see the module's documentation). Takes about 0.1 s, a core of it spinning for
/// about a third. `None`: this process may use only one CPU.
pub fn measure() -> io::Result<Option<WakeUp>> {
    let cpus = crate::sys::cpu::allowed_cpus()?;
    let (Some(&a), Some(&b)) = (cpus.first(), cpus.last()) else {
        return Ok(None);
    };
    if a == b {
        return Ok(None);
    }
    // The client is a thread of its own too: the caller keeps its own CPUs.
    let client =
        std::thread::Builder::new()
            .name("squeezefs-probe".into())
            .spawn(move || -> io::Result<WakeUp> {
                crate::sys::cpu::pin_thread(a)?;
                let mut blocking = Vec::with_capacity(BATCHES);
                let mut spinning = Vec::with_capacity(BATCHES);
                for _ in 0..BATCHES {
                    blocking.push(batch(false, b)?);
                    spinning.push(batch(true, b)?);
                }
                Ok(WakeUp {
                    blocking_us: median(&mut blocking),
                    spinning_us: median(&mut spinning),
                })
            })?;
    client
        .join()
        .map_err(|_| io::Error::other("the probe's thread panicked"))?
        .map(Some)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// µs a round trip over [`ROUNDS`] of them, the server (on `cpu`) spinning or not.
fn batch(spin: bool, cpu: usize) -> io::Result<f64> {
    let (mut client, mut server) = UnixStream::pair()?;
    server.set_nonblocking(spin)?;
    let echo =
        std::thread::Builder::new()
            .name("squeezefs-probe".into())
            .spawn(move || -> io::Result<()> {
                crate::sys::cpu::pin_thread(cpu)?;
                let mut b = [0u8; 1];
                for _ in 0..=ROUNDS {
                    loop {
                        match server.read(&mut b) {
                            Ok(0) => return Ok(()),
                            Ok(_) => break,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    server.write_all(&b)?;
                }
                Ok(())
            })?;
    let mut b = [0u8; 1];
    // One round first, untimed: the server thread is running by then.
    let mut round = |c: &mut UnixStream| -> io::Result<()> {
        c.write_all(&b)?;
        c.read_exact(&mut b)
    };
    let result = round(&mut client).and_then(|()| {
        let t = Instant::now();
        for _ in 0..ROUNDS {
            round(&mut client)?;
        }
        Ok(t.elapsed())
    });
    drop(client); // ends the server's loop if a round failed
    echo.join()
        .map_err(|_| io::Error::other("the probe's thread panicked"))??;
    Ok(result?.as_secs_f64() * 1e6 / f64::from(ROUNDS))
}

/// How long a whole [`measure`] may take before its figures are not trusted (a machine so
/// loaded that the probe's threads wait for a CPU measures the load, not the wake-up).
pub const MAX_PROBE: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_needs_an_absolute_and_a_relative_saving() {
        let w = |b, s| WakeUp {
            blocking_us: b,
            spinning_us: s,
        };
        assert!(w(45.0, 20.0).spin_pays(), "these VMs");
        assert!(!w(12.0, 6.0).spin_pays(), "a machine with cheap wake-ups");
        assert!(!w(100.0, 90.0).spin_pays(), "a saving lost in the round trip");
        assert!(!w(20.0, 25.0).spin_pays(), "spinning slower");
    }

    #[test]
    fn a_measurement_gives_plausible_figures() {
        let Some(w) = measure().unwrap() else {
            assert_eq!(crate::sys::cpu::allowed_cpus().unwrap().len(), 1);
            return;
        };
        eprintln!("{w:?}");
        assert!(w.blocking_us > 0.0 && w.spinning_us > 0.0, "{w:?}");
        assert!(w.blocking_us < 100_000.0 && w.spinning_us < 100_000.0, "{w:?}");
    }
}
