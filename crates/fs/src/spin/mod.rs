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
//! Whether spinning pays is the machine's to say, not ours (issue 44). Measured on the 2-core
//! VMs it took 5–20 % off an extract, a small-file create, a cold `ls -l` and `git status`
//! on all of them, but it added 4–11 % to a cold read of a tree on one (session 13) and took
//! 10–25 % off it on another (session 20); and it spends CPU that other threads — the
//! daemon's own read-ahead and compressors, a CPU-bound program beside — would otherwise
//! have. So by default (`spin=auto`):
//! - the mount measures what a wake-up costs here ([`probe`]: a blocking and a spinning
//!   ping-pong between two CPUs, ~0.1 s on the governor's thread, after the mount is up) and
//!   spins, with a window of [`SUGGESTED_SPIN_US`], only where spinning saves a request at
//!   least [`probe::MIN_SAVING_US`] and a quarter of its round trip; never with one CPU;
//! - while spinning, the governor yields the CPU when other work saturates the machine
//!   ([`load`]: two 50 ms epochs in a row without a tick of idle on any CPU — a CPU-bound
//!   program beside the mount), and does not spin again for a hold that doubles while that
//!   lasts (0.1 s up to 1.6 s).
//!
//! `spin=MICROS` spins with that window whatever the probe would say (the yielding to
//! saturating work still applies); `spin=0` never spins. The session threads on the cloned
//! channels stand aside while the spin lasts ([`park`]), so the kernel has no sleeping
//! reader to wake for each request. An idle mount spins for at most about two windows
//! after its last request.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod load;
mod park;
pub mod probe;

pub use park::Serving;

/// The window to spin for where the probe says it pays, and the one to try by hand, in
/// µs: session 11's prototype gained most at 30–100 µs and lost the gain at 300 µs.
pub const SUGGESTED_SPIN_US: u64 = 100;

/// The shortest and longest hold after the governor yielded to other work, in epochs
/// (0.1 s and 1.6 s).
const HOLD_MIN: u32 = 2;
const HOLD_MAX: u32 = 32;

/// What the mount option `spin=` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpinChoice {
    /// Measure the machine at mount and spin (for [`SUGGESTED_SPIN_US`]) where it pays.
    #[default]
    Auto,
    /// Spin for this window after each request; zero: never.
    Window(Duration),
}

impl std::str::FromStr for SpinChoice {
    type Err = String;
    fn from_str(v: &str) -> Result<Self, String> {
        if v == "auto" {
            return Ok(SpinChoice::Auto);
        }
        v.parse::<u64>()
            .ok()
            .filter(|n| *n <= 1_000_000)
            .map(|n| SpinChoice::Window(Duration::from_micros(n)))
            .ok_or_else(|| {
                format!(
                    "spin={v}: auto (the default: measure this machine and spin where it pays), \
                     or µs a session thread spins after a request (0: off, at most 1000000; try {SUGGESTED_SPIN_US})"
                )
            })
    }
}

impl SpinChoice {
    /// What `auto` comes to for a backing directory on a filesystem of mountinfo type
    /// `backing_type`: on a FUSE filesystem (`fuse.glusterfs`, `fuse.sshfs`, …) no spinning,
    /// with why. Every backing call there is served by that filesystem's own daemon, which
    /// needs the CPU a spinning thread would take: on a GlusterFS backing (2 vCPUs, its
    /// client and brick daemons busy) a `tar xf` took 44.7–53.7 s without spinning against
    /// 54.8–58.2 s with (docs/BENCHMARKS.md, session 25). A window asked for is kept.
    pub fn for_backing(self, backing_type: Option<&str>) -> (SpinChoice, Option<String>) {
        match (self, backing_type) {
            (SpinChoice::Auto, Some(t)) if t == "fuse" || t.starts_with("fuse.") || t.starts_with("fuseblk") => (
                SpinChoice::Window(Duration::ZERO),
                Some(format!(
                    "BACKING is on a FUSE filesystem ({t}), whose daemon needs the CPU a spinning thread would take: not spinning on /dev/fuse (spin=100 asks for it)"
                )),
            ),
            (c, _) => (c, None),
        }
    }
}

/// The spin of one mount; does nothing until [`Spin::attach`]ed to the session's channel.
#[derive(Default)]
pub struct Spin {
    shared: OnceLock<Arc<Shared>>,
    governor: Mutex<Option<JoinHandle<()>>>,
    /// Why `auto` was not attached at all ([`SpinChoice::for_backing`]).
    declined: OnceLock<String>,
}

struct Shared {
    choice: SpinChoice,
    /// The window in µs once decided; 0 while the probe runs and where spinning is off.
    window_us: AtomicU64,
    /// Requests seen; the governor stops the spin when a window passes without one.
    requests: AtomicU64,
    /// Mirror of `state.spinning`, read without the lock on every request.
    spinning: AtomicBool,
    /// No spin starts before this many µs after `epoch` (the governor yielded).
    hold_until_us: AtomicU64,
    epoch: Instant,
    /// Lock order: taken alone.
    state: Mutex<State>,
    wake: Condvar,
    /// Times the channel went non-blocking (for the statistics file and tests).
    spins: AtomicU64,
    /// Times the governor ended a spin because other threads wanted the CPU.
    yields: AtomicU64,
    /// The probe's figures, once measured.
    probe: OnceLock<Option<probe::WakeUp>>,
    /// The name of the session thread that reads the channel that spins ([`park`]).
    spinner: String,
    /// When the spinner began the request it is serving, µs after `epoch`; 0: between
    /// requests.
    busy_since_us: AtomicU64,
    /// Parked helpers wait here for the spin's end or a release ([`park`]).
    unpark: Condvar,
    /// Times a helper parked, and was released while the spin lasted (statistics).
    parks: AtomicU64,
    released: AtomicU64,
}

struct State {
    /// A duplicate of the session's channel: the same open file description, whose
    /// `O_NONBLOCK` flag is what is switched. Closed by [`Spin::stop`], so that nothing
    /// holds the device open after the session.
    fd: Option<OwnedFd>,
    spinning: bool,
    stop: bool,
    /// Helpers parked while the spin lasts, and how many of them the governor released
    /// that have not yet woken.
    parked: u32,
    release: u32,
    /// Spins ended so far: a parked helper returns once it moved, even if a new spin
    /// began before it woke.
    ended: u64,
}

impl Spin {
    /// Spins on the session's channel `fd` after each burst of requests as `choice` says
    /// (the governor thread first measures the machine for [`SpinChoice::Auto`]), the
    /// session's other threads parked meanwhile ([`park`]; `threads`: how many the session
    /// runs). A zero window attaches nothing.
    pub fn attach(&self, fd: BorrowedFd<'_>, choice: SpinChoice, threads: usize) -> io::Result<()> {
        let allowed = crate::sys::cpu::allowed_cpus().unwrap_or_default();
        let cpus = allowed.len().max(1);
        self.attach_with(fd, choice, cpus, load::Idle::new(allowed), threads)
    }

    /// `auto` decided against spinning before anything was measured (`why`): the
    /// statistics file says so, as `mode` "auto" with `declined`.
    pub fn decline(&self, why: String) {
        let _ = self.declined.set(why);
    }

    /// Held by a thread while it serves a request, from before anything is done for it
    /// until after its reply: a session thread other than the spinner parks when it is
    /// dropped, while the spin lasts ([`park`]).
    pub fn serving(&self) -> Serving<'_> {
        Serving::new(self.shared.get().map(|s| &**s))
    }

    /// [`Spin::attach`] with the machine's CPU count and its saturation given (the tests'
    /// own).
    fn attach_with(
        &self,
        fd: BorrowedFd<'_>,
        choice: SpinChoice,
        cpus: usize,
        saturation: impl Saturation + 'static,
        threads: usize,
    ) -> io::Result<()> {
        let window_us = match choice {
            SpinChoice::Window(w) if w.is_zero() => return Ok(()),
            SpinChoice::Window(w) => w.as_micros() as u64,
            SpinChoice::Auto => 0,
        };
        let shared = Arc::new(Shared {
            choice,
            window_us: AtomicU64::new(window_us),
            requests: AtomicU64::new(0),
            spinning: AtomicBool::new(false),
            hold_until_us: AtomicU64::new(0),
            epoch: Instant::now(),
            state: Mutex::new(State {
                fd: Some(fd.try_clone_to_owned()?),
                spinning: false,
                stop: false,
                parked: 0,
                release: 0,
                ended: 0,
            }),
            wake: Condvar::new(),
            spins: AtomicU64::new(0),
            yields: AtomicU64::new(0),
            probe: OnceLock::new(),
            spinner: park::spinner_name(threads),
            busy_since_us: AtomicU64::new(0),
            unpark: Condvar::new(),
            parks: AtomicU64::new(0),
            released: AtomicU64::new(0),
        });
        if self.shared.set(shared.clone()).is_err() {
            return Err(io::Error::other("the spin is attached already"));
        }
        let handle = std::thread::Builder::new()
            .name("squeezefs-spin".into())
            .spawn(move || {
                if shared.choice == SpinChoice::Auto {
                    shared.decide(cpus);
                }
                shared.govern(saturation)
            });
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

    /// A request arrived: spin from now on, if not spinning already (nor held off, nor
    /// off). One atomic add and load while spinning.
    pub fn touch(&self) {
        if let Some(s) = self.shared.get() {
            s.requests.fetch_add(1, Ordering::Relaxed);
            if !s.spinning.load(Ordering::Relaxed) && s.window_us.load(Ordering::Relaxed) != 0 && !s.held() {
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

    /// The probe's figures: `None` until measured (or with no probe), `Some(None)` where
    /// this process has one CPU.
    pub fn probed(&self) -> Option<Option<probe::WakeUp>> {
        self.shared.get().and_then(|s| s.probe.get().copied())
    }

    /// The statistics file's `spin`: `{"mode", "window_us", "bursts", "spinning", "yields",
    /// "parked", "released", "probe", "declined"}` (`mode` "auto", "fixed" or "off";
    /// `declined`: why `auto` did not spin at all, or null; `window_us` 0: not
    /// spinning, or not decided yet; `parked`: times a session thread stood aside while
    /// spinning, `released`: times one was called back because the spinner was held up
    /// ([`park`]); `probe` the wake-up measurement, `{"blocking_us", "spinning_us",
    /// "pays"}`, or null).
    pub fn to_json(&self) -> serde_json::Value {
        let (bursts, spinning) = self.counts();
        let s = self.shared.get();
        let mode = match s.map(|s| s.choice) {
            Some(SpinChoice::Auto) => "auto",
            Some(SpinChoice::Window(_)) => "fixed",
            None if self.declined.get().is_some() => "auto",
            None => "off",
        };
        let window = s.map_or(0, |s| s.window_us.load(Ordering::Relaxed));
        let probe = match self.probed() {
            Some(Some(w)) => serde_json::json!({
                "blocking_us": (w.blocking_us * 10.0).round() / 10.0,
                "spinning_us": (w.spinning_us * 10.0).round() / 10.0,
                "pays": w.spin_pays(),
            }),
            Some(None) => serde_json::json!({"cpus": 1, "pays": false}),
            None => serde_json::Value::Null,
        };
        serde_json::json!({
            "mode": mode,
            "window_us": window,
            "bursts": bursts,
            "spinning": spinning,
            "yields": s.map_or(0, |s| s.yields.load(Ordering::Relaxed)),
            "parked": s.map_or(0, |s| s.parks.load(Ordering::Relaxed)),
            "released": s.map_or(0, |s| s.released.load(Ordering::Relaxed)),
            "probe": probe,
            "declined": self.declined.get(),
        })
    }

    /// Stops the governor, leaving the channel blocking and its duplicate closed.
    pub fn stop(&self) {
        if let Some(s) = self.shared.get() {
            let mut st = s.lock();
            st.stop = true;
            s.set(&mut st, false);
            s.unpark_all(&mut st);
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

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn held(&self) -> bool {
        let until = self.hold_until_us.load(Ordering::Relaxed);
        until != 0 && self.now_us() < until
    }

    /// `spin=auto`: measures the machine and sets the window (or leaves it off).
    fn decide(&self, cpus: usize) {
        let measured = if cpus < 2 {
            Ok(None)
        } else {
            let t = Instant::now();
            probe::measure().map(|w| w.filter(|_| t.elapsed() <= probe::MAX_PROBE))
        };
        let w = match measured {
            Ok(w) => w,
            Err(e) => {
                log::warn!("cannot measure this machine's wake-ups, not spinning: {e}");
                None
            }
        };
        let pays = w.is_some_and(|w| w.spin_pays());
        match w {
            Some(w) => log::info!(
                "a request's round trip costs {:.1} µs with a sleeping thread, {:.1} µs with a spinning one: {}",
                w.blocking_us,
                w.spinning_us,
                if pays { "spinning on /dev/fuse while requests come" } else { "not spinning" }
            ),
            None => log::info!("one CPU (or no measurement): not spinning on /dev/fuse"),
        }
        let _ = self.probe.set(w);
        if pays {
            self.window_us.store(SUGGESTED_SPIN_US, Ordering::Relaxed);
        }
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
                if !on {
                    self.unpark_all(st);
                }
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
    /// a window without a request, or when other work saturates the CPUs for two epochs in
    /// a row (then holds the next spin off for a while, longer while that lasts).
    fn govern(&self, mut saturation: impl Saturation) {
        let mut hold = HOLD_MIN;
        let mut saturated_epochs = 0u32;
        let mut epoch: Option<Instant> = None;
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
            let window = Duration::from_micros(self.window_us.load(Ordering::Relaxed).max(1));
            // Epochs run on across short spins (under load, bursts are short): a reading
            // older than two epochs starts afresh.
            let mut began = match epoch {
                Some(e) if e.elapsed() <= load::EPOCH * 2 => e,
                _ => {
                    saturation.reset();
                    saturated_epochs = 0;
                    Instant::now()
                }
            };
            loop {
                let seen = self.requests.load(Ordering::Relaxed);
                std::thread::sleep(window);
                let quiet = self.requests.load(Ordering::Relaxed) == seen;
                if began.elapsed() >= load::EPOCH {
                    began = Instant::now();
                    saturated_epochs = if saturation.saturated() {
                        saturated_epochs + 1
                    } else {
                        0
                    };
                }
                let yields = saturated_epochs >= 2;
                let mut st = self.lock();
                if quiet || yields || st.stop {
                    if st.spinning {
                        self.set(&mut st, false);
                    }
                    if yields {
                        saturated_epochs = 0;
                        self.yields.fetch_add(1, Ordering::Relaxed);
                        let until = self.now_us() + (load::EPOCH * hold).as_micros() as u64;
                        self.hold_until_us.store(until, Ordering::Relaxed);
                        hold = (hold * 2).min(HOLD_MAX);
                    } else if quiet {
                        hold = HOLD_MIN;
                    }
                    epoch = Some(began);
                    break;
                }
                self.help_if_stuck(&mut st);
            }
        }
    }
}

/// Whether other work saturates the machine's CPUs, judged once an epoch while spinning
/// ([`load::Idle`]; the tests' own).
trait Saturation: Send {
    /// A spin starts: an epoch begins.
    fn reset(&mut self);
    /// An epoch ended: whether no CPU idled in it.
    fn saturated(&mut self) -> bool;
}

impl Saturation for load::Idle {
    fn reset(&mut self) {
        load::Idle::reset(self)
    }
    fn saturated(&mut self) -> bool {
        load::Idle::saturated(self)
    }
}

impl<F: FnMut() -> bool + Send> Saturation for F {
    fn reset(&mut self) {}
    fn saturated(&mut self) -> bool {
        self()
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
        let w = SpinChoice::Window(Duration::from_millis(200));
        // (No contention, whatever else the machine runs meanwhile.)
        spin.attach_with(a.as_fd(), w, 2, || false, 2).unwrap();
        assert!(spin.attach(a.as_fd(), w, 2).is_err(), "once");
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
        spin.attach(a.as_fd(), SpinChoice::Window(Duration::ZERO), 2)
            .unwrap();
        spin.touch();
        assert!(!nonblocking(a.as_fd()));
    }

    /// Other work saturating the CPUs ends a spin although requests keep coming (after two
    /// epochs), and holds the next one off; once it is gone, requests spin again.
    #[test]
    fn saturation_ends_the_spin_and_holds_the_next_off() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let busy = Arc::new(AtomicBool::new(false));
        let spin = Spin::default();
        let b = busy.clone();
        spin.attach_with(
            a.as_fd(),
            SpinChoice::Window(Duration::from_millis(20)),
            2,
            move || b.load(Ordering::Relaxed),
            2,
        )
        .unwrap();
        spin.touch();
        assert!(nonblocking(a.as_fd()));
        busy.store(true, Ordering::Relaxed);
        let t = std::time::Instant::now();
        while nonblocking(a.as_fd()) {
            spin.touch(); // requests keep coming
            assert!(t.elapsed() < Duration::from_secs(5), "the spin never yielded");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(spin.to_json()["yields"], 1);
        // Held off: a request right away does not spin again.
        spin.touch();
        assert!(!nonblocking(a.as_fd()), "a spin started within the hold");
        busy.store(false, Ordering::Relaxed);
        std::thread::sleep(load::EPOCH * HOLD_MIN + Duration::from_millis(50));
        spin.touch();
        assert!(nonblocking(a.as_fd()), "no spin once the hold passed");
        assert_eq!(spin.counts(), (2, true));
        spin.stop();
    }

    /// `spin=auto`: nothing spins before the probe has decided; afterwards a request spins
    /// exactly where the probe said spinning pays; the statistics say what was measured.
    #[test]
    fn auto_does_not_spin_on_a_fuse_backing_and_a_window_asked_for_stays() {
        use SpinChoice::{Auto, Window};
        let w = Window(Duration::from_micros(100));
        for t in ["fuse.glusterfs", "fuse.sshfs", "fuse", "fuseblk"] {
            let (c, why) = Auto.for_backing(Some(t));
            assert_eq!(c, Window(Duration::ZERO), "{t}");
            assert!(why.unwrap().contains(t));
            assert_eq!(w.for_backing(Some(t)), (w, None), "{t}: asked for");
        }
        for t in [Some("ext4"), Some("xfs"), Some("nfs4"), Some("fusectl"), None] {
            assert_eq!(Auto.for_backing(t), (Auto, None), "{t:?}");
        }
    }

    #[test]
    fn auto_spins_where_the_probe_says_it_pays() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let spin = Spin::default();
        spin.attach_with(a.as_fd(), SpinChoice::Auto, 2, || false, 2)
            .unwrap();
        let t = std::time::Instant::now();
        let probed = loop {
            if let Some(p) = spin.probed() {
                break p;
            }
            spin.touch();
            assert!(
                !nonblocking(a.as_fd()) || spin.probed().is_some(),
                "spinning before the probe decided"
            );
            assert!(t.elapsed() < Duration::from_secs(10), "the probe never ended");
            std::thread::sleep(Duration::from_millis(5));
        };
        spin.touch();
        let pays = probed.is_some_and(|w| w.spin_pays());
        assert_eq!(nonblocking(a.as_fd()), pays, "{probed:?}");
        let doc = spin.to_json();
        assert_eq!(doc["mode"], "auto");
        assert_eq!(doc["probe"]["pays"], pays, "{doc}");
        assert_eq!(
            doc["window_us"],
            if pays { SUGGESTED_SPIN_US } else { 0 },
            "{doc}"
        );
        spin.stop();
    }
}
