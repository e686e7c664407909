//! While the session's own channel spins, the other session threads stand aside.
//!
//! Every session thread but the spinning one sleeps in `read(/dev/fuse)` on a clone of the
//! channel, in the connection's one wait queue. The kernel wakes one of them for every
//! request it queues, whether or not the spinning thread takes the request first: a wake-up
//! and a context switch on a CPU that the caller (tar) or the spinner needs, for nothing.
//! Session 22 measured it on the 2-vCPU VMs: one session thread instead of four took 8 % off
//! an extract and a cold read and 31 % off a warm re-read, and the three sleeping threads
//! had still served ~40 % of the requests.
//!
//! One thread cannot serve a mount alone (an `fsync` or a cold READ would hold up every other
//! request), so the others are parked only while the spin lasts: a session thread other
//! than the spinner that has answered a request while spinning waits on a condition variable
//! instead of going back to `read` ([`Serving`]'s drop, after the reply went). Parked, it is
//! in no wait queue of the kernel's, and the kernel has nobody to wake: the spinner takes
//! every request. They go back to reading
//! - all, when the spin ends ([`Shared::set`]): after a window without a request — which is
//!   also what happens within about two windows when the spinner is stuck in a request that
//!   waits (an fsync, a read from a cold disk) while nobody else reads —, a yield to other
//!   work, or the mount's end;
//! - one more per window, while the spinner has been in one request for longer than a window
//!   and requests still come (the governor's [`Shared::help_if_stuck`]): two programs
//!   reading cold files are then served side by side. A helper parks again after its request
//!   unless the spinner is still stuck;
//! - one at once when the spinner takes a request it knows will wait (an fsync:
//!   [`Serving::will_wait`]).
//!
//! Nothing here can hold a request forever: a parked thread holds no lock and no request,
//! and with every helper parked and the spinner stuck, no request is counted, so the
//! governor ends the spin, which releases them all. Threads that are not session threads
//! (those `defer` starts, the applier, the tests') never park.
//!
//! The spinner is the thread that reads the session's own channel: fuser 0.18 starts one
//! thread per channel, named `fuser-{i}`, and gives the session's own channel to the last
//! one (`Session::run`), the one [`super::Spin::attach`] makes non-blocking. Should a fuser
//! release name them otherwise, no thread is taken for the spinner and every helper parks
//! at most until the spin ends for want of requests — slower, never stuck; the statistics
//! file's `spin.parked` and `spin.released` say whether parking happens.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use super::Shared;

/// What a thread is to the spin, decided at its first request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Role {
    /// Reads the session's own channel, the one that spins.
    Spinner,
    /// Another session thread: parks while the spin lasts.
    Helper,
    /// Not a session thread.
    Other,
}

thread_local! {
    /// This thread's role, once known (the name of a thread never changes).
    static ROLE: Cell<Option<Role>> = const { Cell::new(None) };
}

/// The prefix of fuser 0.18's session threads' names.
const SESSION_THREAD: &str = "fuser-";

/// The name of the thread that reads the session's own channel, among `threads` session
/// threads (fuser 0.18's `Session::run`).
pub(super) fn spinner_name(threads: usize) -> String {
    format!("{SESSION_THREAD}{}", threads.max(1) - 1)
}

fn role(spinner: &str) -> Role {
    ROLE.with(|r| {
        if let Some(role) = r.get() {
            return role;
        }
        let role = match std::thread::current().name() {
            Some(n) if n == spinner => Role::Spinner,
            Some(n) if n.starts_with(SESSION_THREAD) => Role::Helper,
            _ => Role::Other,
        };
        r.set(Some(role));
        role
    })
}

/// Held by a session thread while it serves one request ([`super::Spin::serving`]): the
/// spinner's marks when it began (the governor releases a helper when it takes long); a
/// helper parks when it is dropped, after the reply, if the spin still lasts.
pub struct Serving<'a> {
    shared: Option<&'a Shared>,
    role: Role,
}

impl<'a> Serving<'a> {
    pub(super) fn new(shared: Option<&'a Shared>) -> Self {
        let Some(s) = shared else {
            return Serving {
                shared: None,
                role: Role::Other,
            };
        };
        let role = role(&s.spinner);
        if role == Role::Spinner {
            s.busy_since_us.store(s.now_us().max(1), Ordering::Relaxed);
        }
        Serving { shared, role }
    }
}

impl Serving<'_> {
    /// Whether this is the spinning thread, while it spins: it serves every request
    /// alone, so work nobody waits for is better handed on.
    pub fn spinning_here(&self) -> bool {
        self.role == Role::Spinner && self.shared.is_some_and(|s| s.spinning.load(Ordering::Relaxed))
    }
}

impl Serving<'_> {
    /// The request about to be served waits (an fsync): a parked helper goes back to
    /// reading now, rather than a window later when the governor sees the spinner stuck.
    pub fn will_wait(&self) {
        let Some(s) = self.shared else { return };
        if self.role == Role::Spinner && s.spinning.load(Ordering::Relaxed) {
            let mut st = s.lock();
            s.release_one(&mut st);
        }
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        let Some(s) = self.shared else { return };
        match self.role {
            Role::Spinner => s.busy_since_us.store(0, Ordering::Relaxed),
            Role::Helper => s.park_while_spinning(),
            Role::Other => {}
        }
    }
}

impl Shared {
    /// Whether the spinner has been in one request for longer than a window.
    fn spinner_stuck(&self) -> bool {
        let since = self.busy_since_us.load(Ordering::Relaxed);
        let window = self.window_us.load(Ordering::Relaxed).max(1);
        since != 0 && self.now_us().saturating_sub(since) >= window
    }

    /// A helper's request is answered: waits while the spin lasts, unless the spinner is
    /// stuck or the governor released it.
    pub(super) fn park_while_spinning(&self) {
        if !self.spinning.load(Ordering::Relaxed) || self.spinner_stuck() {
            return;
        }
        let mut st = self.lock();
        if !st.spinning || st.stop {
            return;
        }
        st.parked += 1;
        self.parks.fetch_add(1, Ordering::Relaxed);
        // The spin this helper parked in: it returns when that one ends, even if another
        // began before it got the lock back.
        let spin = st.ended;
        while st.ended == spin && !st.stop && st.release == 0 {
            st = self.unpark.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.ended == spin && st.release > 0 && !st.stop {
            st.release -= 1;
        }
        st.parked -= 1;
    }

    /// The governor's, once a window while spinning and requests come: releases one parked
    /// helper when the spinner has been in one request for longer than a window (and no
    /// released helper has yet to wake).
    pub(super) fn help_if_stuck(&self, st: &mut super::State) {
        if self.spinner_stuck() {
            self.release_one(st);
        }
    }

    /// Releases one parked helper, unless one released has yet to wake.
    fn release_one(&self, st: &mut super::State) {
        if st.parked > 0 && st.release == 0 {
            st.release += 1;
            self.released.fetch_add(1, Ordering::Relaxed);
            self.unpark.notify_one();
        }
    }

    /// The spin ended: every parked helper goes back to reading.
    pub(super) fn unpark_all(&self, st: &mut super::State) {
        st.ended += 1;
        st.release = 0;
        if st.parked > 0 {
            self.unpark.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Spin, SpinChoice};
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn the_spinner_is_the_last_session_thread() {
        assert_eq!(spinner_name(4), "fuser-3");
        assert_eq!(spinner_name(1), "fuser-0");
        assert_eq!(spinner_name(0), "fuser-0");
        let spinner = spinner_name(2);
        let of = |name: &str| {
            let s = spinner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || role(&s))
                .unwrap()
                .join()
                .unwrap()
        };
        assert_eq!(of("fuser-1"), Role::Spinner);
        assert_eq!(of("fuser-0"), Role::Helper);
        assert_eq!(of("squeezefs-wait"), Role::Other);
    }

    /// Runs `f` on a thread named `name`; returns a flag set when `f` returned.
    fn on_thread(name: &str, f: impl FnOnce() + Send + 'static) -> Arc<AtomicBool> {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                f();
                d.store(true, Ordering::SeqCst);
            })
            .unwrap();
        done
    }

    /// A spin attached to one end of a socket pair (both ends returned, to live as long as
    /// the test), with `window` and `threads` session threads.
    fn attached(window: Duration, threads: usize) -> (Arc<Spin>, [std::os::unix::net::UnixStream; 2]) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let spin = Arc::new(Spin::default());
        spin.attach_with(a.as_fd(), SpinChoice::Window(window), 2, || false, threads)
            .unwrap();
        (spin, [a, b])
    }

    /// A request served on a thread named `name` (its `Serving` guard dropped, as after a
    /// reply); the flag says it returned.
    fn served(spin: &Arc<Spin>, name: &str) -> Arc<AtomicBool> {
        let s = spin.clone();
        on_thread(name, move || drop(s.serving()))
    }

    fn wait_for(what: &str, limit: Duration, cond: impl Fn() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A helper that answered a request while the spin lasts stands aside until the spin
    /// ends; the spinner and other threads never do; a helper does not park when nothing
    /// spins.
    #[test]
    fn a_helper_parks_while_the_spin_lasts_and_returns_when_it_ends() {
        let window = Duration::from_millis(30);
        let (spin, _socket) = attached(window, 3);
        // Not spinning: a helper's request ends at once.
        let done = served(&spin, "fuser-0");
        wait_for("a helper without a spin", Duration::from_secs(5), || {
            done.load(Ordering::SeqCst)
        });
        spin.touch();
        assert!(spin.counts().1);
        let helper = served(&spin, "fuser-1");
        let spinner = served(&spin, "fuser-2");
        let other = served(&spin, "squeezefs-wait");
        wait_for(
            "the spinner's and another thread's requests",
            Duration::from_secs(5),
            || spinner.load(Ordering::SeqCst) && other.load(Ordering::SeqCst),
        );
        // Requests keep coming: the helper stays parked.
        for _ in 0..10 {
            spin.touch();
            std::thread::sleep(window / 3);
            assert!(!helper.load(Ordering::SeqCst), "the helper did not park");
        }
        assert_eq!(spin.to_json()["parked"], 1);
        // Quiet: the spin ends and the helper goes back to reading.
        wait_for("the parked helper's return", Duration::from_secs(5), || {
            helper.load(Ordering::SeqCst)
        });
        assert!(!spin.counts().1);
        assert_eq!(spin.to_json()["released"], 0);
        spin.stop();
    }

    /// A spinner held up in one request while requests still come gets a parked helper
    /// back (one per window); the unmount's stop releases the rest.
    #[test]
    fn a_stuck_spinner_releases_a_helper_and_stop_releases_all() {
        let window = Duration::from_millis(20);
        let (spin, _socket) = attached(window, 4);
        spin.touch();
        let helpers: Vec<_> = (0..3).map(|i| served(&spin, &format!("fuser-{i}"))).collect();
        // Requests keep coming for long enough for all three to park.
        let parked = |n: u64| spin.to_json()["parked"] == n;
        let t = Instant::now();
        while !parked(3) {
            spin.touch();
            assert!(t.elapsed() < Duration::from_secs(5), "{}", spin.to_json());
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(helpers.iter().all(|h| !h.load(Ordering::SeqCst)));
        // The spinner takes a request and is held up in it while others come.
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let s = spin.clone();
        let spinner = on_thread("fuser-3", move || {
            let _serving = s.serving();
            let _ = hold_rx.recv();
        });
        let released = |h: &[Arc<AtomicBool>]| h.iter().filter(|h| h.load(Ordering::SeqCst)).count();
        let t = Instant::now();
        while released(&helpers) == 0 {
            spin.touch();
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "no helper released: {}",
                spin.to_json()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(spin.counts().1, "still spinning: requests came");
        assert!(spin.to_json()["released"].as_u64().unwrap() >= 1);
        drop(hold_tx);
        wait_for("the spinner's request", Duration::from_secs(5), || {
            spinner.load(Ordering::SeqCst)
        });
        spin.stop();
        wait_for("every helper after stop", Duration::from_secs(5), || {
            released(&helpers) == 3
        });
    }

    /// A spinner about to wait (an fsync) releases a parked helper at once, long before the
    /// governor would see it stuck (a window of 2 s here).
    #[test]
    fn a_spinner_about_to_wait_releases_a_helper_at_once() {
        let (spin, _socket) = attached(Duration::from_secs(2), 2);
        spin.touch();
        let helper = served(&spin, "fuser-0");
        wait_for("the helper to park", Duration::from_secs(5), || {
            spin.to_json()["parked"] == 1
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(!helper.load(Ordering::SeqCst));
        let s = spin.clone();
        let t = Instant::now();
        on_thread("fuser-1", move || s.serving().will_wait());
        wait_for("the released helper", Duration::from_secs(5), || {
            helper.load(Ordering::SeqCst)
        });
        assert!(t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
        assert_eq!(spin.to_json()["released"], 1);
        spin.stop();
    }

    /// A spin that ends and begins again before a parked helper gets the lock back still
    /// sends it back to reading (it waits for the end of its own spin, not for no spin).
    #[test]
    fn a_helper_returns_when_its_spin_ended_even_if_another_began() {
        let (spin, _socket) = attached(Duration::from_secs(5), 2);
        spin.touch();
        let helper = served(&spin, "fuser-0");
        wait_for("the helper to park", Duration::from_secs(5), || {
            spin.to_json()["parked"] == 1
        });
        {
            let shared = spin.shared.get().unwrap();
            let mut st = shared.lock();
            shared.set(&mut st, false);
            shared.set(&mut st, true);
        }
        assert!(spin.counts().1);
        wait_for("the helper after its spin ended", Duration::from_secs(2), || {
            helper.load(Ordering::SeqCst)
        });
        spin.stop();
    }
}
