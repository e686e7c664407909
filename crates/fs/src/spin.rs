//! Spinning on /dev/fuse while requests are coming, instead of sleeping between them.
//!
//! A program that walks a tree (`tar x`, `cp -r`, `git status`) sends its requests one after
//! another: it waits for each reply, works a few µs, and sends the next. Between two of them
//! a session thread blocked in `read(/dev/fuse)` goes to sleep, and its vCPU halts; the next
//! request must wake both (an IPI, a VM exit on a virtual machine), which costs more than the
//! daemon's answer to many requests. Session 11 measured it with a prototype that polled the
//! device before each blocking read: −14 to −17 % on an extract (docs/BENCHMARKS.md).
//!
//! fuser 0.18 reads the device in its own loop, with no hook; but that loop retries a read
//! that fails with `EAGAIN` at once. So while requests are coming, the session's own channel
//! (the descriptor `Session` owns, read by one of the session threads; the others read
//! clones, which stay blocking) is made non-blocking: that thread then spins in `read`, and
//! picks up the next request without sleeping. A governor thread watches a request counter
//! and makes the channel blocking again once a whole window has passed without a request,
//! so an idle mount spins for at most about two windows after its last request, and then
//! sleeps until the next request starts spinning again (`touch`).
//!
//! Mount option `spin=MICROS` sets the window; 0, the default, never spins. Measured on the
//! 2-core VMs (docs/BENCHMARKS.md, session 13) it takes 5–15 % off an extract, a small-file
//! create, a cold `ls -l` and `git status`, but adds 4–11 % to a cold read of a tree, and
//! it spends CPU that a CPU-bound program on the same machine would otherwise have — the
//! daemon's own compressing threads included, during a large write — so it is offered, not
//! imposed. The session threads on the cloned channels still sleep, and the kernel still
//! wakes one of them for each request (the spinning thread usually takes it first).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// The default window: none (see the module's documentation).
pub const DEFAULT_SPIN_US: u64 = 0;

/// The window to try, in µs: session 11's prototype gained most at 30–100 µs and lost the
/// gain at 300 µs.
pub const SUGGESTED_SPIN_US: u64 = 100;

/// The spin of one mount; does nothing until [`Spin::attach`]ed to the session's channel.
#[derive(Default)]
pub struct Spin {
    shared: OnceLock<Arc<Shared>>,
    governor: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    window: Duration,
    /// Requests seen; the governor stops the spin when a window passes without one.
    requests: AtomicU64,
    /// Mirror of `state.spinning`, read without the lock on every request.
    spinning: AtomicBool,
    /// Lock order: taken alone.
    state: Mutex<State>,
    wake: Condvar,
    /// Times the channel went non-blocking (for the statistics file and tests).
    spins: AtomicU64,
}

struct State {
    /// A duplicate of the session's channel: the same open file description, whose
    /// `O_NONBLOCK` flag is what is switched. Closed by [`Spin::stop`], so that nothing
    /// holds the device open after the session.
    fd: Option<OwnedFd>,
    spinning: bool,
    stop: bool,
}

impl Spin {
    /// Starts spinning for `window` after each burst of requests on the channel `fd` (the
    /// session's own). A zero window attaches nothing.
    pub fn attach(&self, fd: BorrowedFd<'_>, window: Duration) -> io::Result<()> {
        if window.is_zero() {
            return Ok(());
        }
        let shared = Arc::new(Shared {
            window,
            requests: AtomicU64::new(0),
            spinning: AtomicBool::new(false),
            state: Mutex::new(State {
                fd: Some(fd.try_clone_to_owned()?),
                spinning: false,
                stop: false,
            }),
            wake: Condvar::new(),
            spins: AtomicU64::new(0),
        });
        if self.shared.set(shared.clone()).is_err() {
            return Err(io::Error::other("the spin is attached already"));
        }
        let handle = std::thread::Builder::new()
            .name("squeezefs-spin".into())
            .spawn(move || shared.govern());
        match handle {
            Ok(h) => {
                *self.governor.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
                Ok(())
            }
            Err(e) => {
                // No governor: never spin (a spin nobody ends would take a core).
                if let Some(s) = self.shared.get() {
                    let mut st = s.lock();
                    st.stop = true;
                    st.fd = None;
                }
                Err(e)
            }
        }
    }

    /// A request arrived: spin from now on, if not spinning already. One atomic add and
    /// load while spinning.
    pub fn touch(&self) {
        if let Some(s) = self.shared.get() {
            s.requests.fetch_add(1, Ordering::Relaxed);
            if !s.spinning.load(Ordering::Relaxed) {
                s.start();
            }
        }
    }

    /// How many times the channel went non-blocking, and whether it is now.
    pub fn counts(&self) -> (u64, bool) {
        self.shared.get().map_or((0, false), |s| {
            (
                s.spins.load(Ordering::Relaxed),
                s.spinning.load(Ordering::Relaxed),
            )
        })
    }

    /// `{"window_us", "bursts", "spinning"}` for the statistics file (`window_us` 0: off).
    pub fn to_json(&self) -> serde_json::Value {
        let (bursts, spinning) = self.counts();
        let window = self.shared.get().map_or(0, |s| s.window.as_micros() as u64);
        serde_json::json!({"window_us": window, "bursts": bursts, "spinning": spinning})
    }

    /// Stops the governor, leaving the channel blocking and its duplicate closed.
    pub fn stop(&self) {
        if let Some(s) = self.shared.get() {
            let mut st = s.lock();
            st.stop = true;
            s.set(&mut st, false);
            st.fd = None;
            s.wake.notify_all();
        }
        if let Some(h) = self.governor.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start(&self) {
        let mut st = self.lock();
        if !st.spinning && !st.stop {
            self.set(&mut st, true);
            self.spins.fetch_add(1, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// Makes the channel non-blocking (`on`) or blocking; a failure leaves it as it was
    /// (blocking is what fuser expects; a failed switch to it is logged).
    fn set(&self, st: &mut State, on: bool) {
        let Some(fd) = st.fd.as_ref() else { return };
        match crate::sys::set_nonblocking(fd.as_fd(), on) {
            Ok(()) => {
                st.spinning = on;
                self.spinning.store(on, Ordering::Relaxed);
            }
            Err(e) if !on => log::error!("cannot make /dev/fuse blocking again: {e}"),
            Err(e) => {
                // Do not try again at every request.
                log::warn!("cannot make /dev/fuse non-blocking, not spinning: {e}");
                st.stop = true;
            }
        }
    }

    /// The governor: sleeps while the channel blocks; while it spins, ends the spin after
    /// a window without a request.
    fn govern(&self) {
        loop {
            {
                let mut st = self.lock();
                while !st.spinning && !st.stop {
                    st = self.wake.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if st.stop {
                    return;
                }
            }
            loop {
                let seen = self.requests.load(Ordering::Relaxed);
                std::thread::sleep(self.window);
                let quiet = self.requests.load(Ordering::Relaxed) == seen;
                let mut st = self.lock();
                if quiet || st.stop {
                    if st.spinning {
                        self.set(&mut st, false);
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nonblocking(fd: BorrowedFd<'_>) -> bool {
        crate::sys::status_flags(fd).unwrap() & libc::O_NONBLOCK != 0
    }

    #[test]
    fn a_request_starts_the_spin_and_a_quiet_window_ends_it() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let spin = Spin::default();
        spin.touch(); // not attached: nothing
        spin.attach(a.as_fd(), Duration::from_millis(200)).unwrap();
        assert!(
            spin.attach(a.as_fd(), Duration::from_millis(200)).is_err(),
            "once"
        );
        assert!(!nonblocking(a.as_fd()));
        spin.touch();
        assert!(nonblocking(a.as_fd()));
        // Requests keep coming: still spinning after several windows.
        for _ in 0..16 {
            std::thread::sleep(Duration::from_millis(50));
            spin.touch();
        }
        assert!(nonblocking(a.as_fd()));
        assert_eq!(spin.counts(), (1, true));
        // Quiet: blocking again within about two windows.
        let t = std::time::Instant::now();
        while nonblocking(a.as_fd()) {
            assert!(t.elapsed() < Duration::from_secs(5), "the spin never ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(spin.counts(), (1, false));
        spin.touch();
        assert_eq!(spin.counts(), (2, true));
        spin.stop();
        assert!(!nonblocking(a.as_fd()), "stop leaves the channel blocking");
        spin.touch();
        assert_eq!(spin.counts(), (2, false));
    }

    #[test]
    fn a_zero_window_never_spins() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let spin = Spin::default();
        spin.attach(a.as_fd(), Duration::ZERO).unwrap();
        spin.touch();
        assert!(!nonblocking(a.as_fd()));
    }
}
