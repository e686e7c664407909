//! Background recompression (`background_compression=`, issue 30): data is written at the
//! mount's codec, fast; while the mount is idle a low-priority thread rewrites the extents
//! stored at another codec or level than the background target, so cold data ends at
//! archive density without the writer ever waiting for a slow level (bcachefs's
//! `background_compression`, ZFS's `zfs rewrite`).
//!
//! This module is the pass's governor: when it may run, how fast, and what it reports. The
//! walk itself (which files, which target, one file's extents a chunk at a time) is
//! `ops::background`; a file's extents are rewritten by
//! `squeezefs_container::Container::recompress_extents`, crash-safely (the other half
//! written and made durable before the old copy goes), keeping the file's change time
//! (`SB_FLAG_TIMES`) and modification time.
//!
//! The rules:
//! 1. **Idle only.** A walk starts, and each chunk of it goes on, only once no change came
//!    through the mount (a WRITE, CREATE, SETATTR, …) for `background_idle=` seconds. A
//!    change pauses the walk where it is; it goes on when the mount is idle again.
//! 2. **A user's request always wins.** A chunk is at most [`CHUNK_BYTES`] of a file, under
//!    the file's lock; a file in use (open, holding bytes not written out, a commit queued)
//!    is skipped and looked at again at a later walk (`Files::quiet`).
//! 3. **Low priority, rate-limited.** The thread runs at nice 19 in the idle I/O class, and
//!    rewrites at most `background_rate=` bytes a second.
//! 4. **Converges.** Raw extents, files flagged incompressible, dictionary extents and
//!    damaged extents are never pending (`container::recompress`), so a walk that found
//!    nothing to do is the last until something changes.
//! 5. **Walks only when there may be work**: at mount when a target may be set (the mount
//!    option, or the backing root's `props::BACKGROUND_SEEN`), and after changes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use squeezefs_codec::CodecSpec;

/// Seconds without a change through the mount before the pass runs (`background_idle=`).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(5);
/// Logical bytes a second the pass rewrites at most (`background_rate=`).
pub const DEFAULT_RATE: u64 = 64 << 20;
/// Logical bytes of one file rewritten under its lock at a time: the longest a request on
/// that file waits for the pass is one chunk's compression.
pub const CHUNK_BYTES: u64 = 1 << 20;
/// A walk that left files in use waits this long before the next (doubling up to
/// [`RETRY_MAX`]) unless something changes meanwhile.
const RETRY_FIRST: Duration = Duration::from_secs(10);
const RETRY_MAX: Duration = Duration::from_secs(600);

/// A chunk's permission to run, from [`Pass::wait_turn`]: the changes counted then.
#[derive(Clone, Copy, Debug)]
pub struct Turn(u64);

/// What `-o` said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `background_compression=CODEC[:LEVEL]`: the mount's target (`None`: only where a
    /// directory or file property names one).
    pub target: Option<CodecSpec>,
    pub idle: Duration,
    /// Logical bytes a second.
    pub rate: u64,
    /// `background_extent_size=SIZE` (log2): cold files in smaller extents are rewritten
    /// into extents this large (1 MiB unless the mount's `extent_size=` chose a size).
    pub extent_shift: u8,
    /// `background_extent_size=` was given: `extent_size=` leaves it.
    pub extent_shift_given: bool,
    /// `dedupe` (default) / `nodedupe`: where the backing shares blocks (XFS with reflinks,
    /// btrfs), the walk has equal stored extents of large files share them
    /// (`crate::dedupe`).
    pub dedupe: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            target: None,
            idle: DEFAULT_IDLE,
            rate: DEFAULT_RATE,
            extent_shift: squeezefs_container::format::MAX_EXTENT_SHIFT,
            extent_shift_given: false,
            dedupe: true,
        }
    }
}

/// What the pass did and does, for the statistics file.
#[derive(Clone, Debug, Default)]
struct Status {
    state: &'static str,
    walks: u64,
    /// Logical bytes of pending extents the current (or last) walk found, and of those
    /// rewritten.
    found: u64,
    rewritten_in_walk: u64,
    /// Since the mount: extents rewritten, and the logical bytes of the chunks done.
    extents: u64,
    bytes: u64,
    /// Since the mount: packed files moved into blocks at their target.
    repacked_files: u64,
    /// Files skipped by the last walk because they were in use, or failed in it.
    busy: u64,
    /// Files with pending extents the daemon may not write (their mode keeps a non-root
    /// daemon out): left, not retried until they change.
    read_only: u64,
    walk_errors: u64,
    errors: u64,
    last_walk_seconds: f64,
    last_walk_files: u64,
}

/// What the pass walks: the mount's tree (`ops::background` implements it for the
/// filesystem's core). The governor here decides when; the walk does the work, asking
/// [`Pass::wait_turn`] before each chunk.
pub trait Walk: Send + Sync {
    /// One walk over the tree; returns how many regular files it looked at.
    fn background_walk(&self, pass: &Pass) -> u64;
}

/// The pass's shared state: the governor's clock and counters, and the thread's stop.
pub struct Pass {
    cfg: Config,
    start: Instant,
    /// Milliseconds since `start` of the last change through the mount.
    last_change: AtomicU64,
    /// Changes since the current walk began: another walk is wanted.
    changes: AtomicU64,
    /// Changes since the mount (never reset): a chunk goes on only if none came since its
    /// turn was given ([`Pass::still`]).
    epoch: AtomicU64,
    /// Logical bytes written since the current walk began (pending until a walk saw them).
    unscanned: AtomicU64,
    /// Whether there may be a target anywhere (rule 5).
    enabled: AtomicBool,
    /// Whether a target may be set somewhere (rule 5 without block sharing).
    targets: AtomicBool,
    /// Times the thread went to sleep with nothing to do (a test looks).
    naps: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
    /// When the rate allows the next chunk.
    next_slot: Mutex<Instant>,
    /// The wall-clock start of the last walk that left nothing behind (no file in use, no
    /// error) with the same targets everywhere since: a file whose backing ctime is older
    /// was at its target then and has not changed, so a walk skips it unopened.
    clean_since: Mutex<Option<SystemTime>>,
    /// Counts [`Pass::moved`]: a walk during which it moved leaves `clean_since` unset.
    moves: AtomicU64,
    status: Mutex<Status>,
}

impl Pass {
    /// `seen`: a background property was set through an earlier mount; `sharing`: the
    /// walk has blocks to share (`crate::dedupe`) even with no target anywhere.
    pub fn new(cfg: Config, seen: bool, sharing: bool) -> Pass {
        let targets = cfg.target.is_some() || seen;
        let enabled = targets || sharing;
        Pass {
            targets: AtomicBool::new(targets),
            naps: AtomicU64::new(0),
            cfg,
            start: Instant::now(),
            last_change: AtomicU64::new(0),
            changes: AtomicU64::new(u64::from(enabled)),
            epoch: AtomicU64::new(0),
            unscanned: AtomicU64::new(0),
            enabled: AtomicBool::new(enabled),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            next_slot: Mutex::new(Instant::now()),
            clean_since: Mutex::new(None),
            moves: AtomicU64::new(0),
            status: Mutex::new(Status {
                state: if enabled { "waiting" } else { "off" },
                ..Status::default()
            }),
        }
    }

    /// The mount's own target.
    pub fn target(&self) -> Option<CodecSpec> {
        self.cfg.target
    }

    /// The extent size (log2) the pass gives cold files (`background_extent_size=`).
    pub fn extent_shift(&self) -> u8 {
        self.cfg.extent_shift
    }

    /// A change through the mount (rule 1): `bytes` of data written, if any.
    pub fn touched(&self, bytes: u64) {
        let now = self.start.elapsed().as_millis() as u64;
        // Relaxed: a late store only delays the pass by a moment.
        if self.last_change.load(Ordering::Relaxed) != now {
            self.last_change.store(now, Ordering::Relaxed);
        }
        // SeqCst: a chunk that checks `epoch` under the file's lock after this change
        // reached its handler must see it (`Pass::still`).
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.changes.fetch_add(1, Ordering::SeqCst) == 0 && self.enabled.load(Ordering::Relaxed) {
            // The first change since a walk began wakes a pass that found nothing to do
            // (it waits on `stop`'s lock: taken here, the wake cannot fall between its
            // look at `changes` and its wait).
            drop(self.stop.lock().unwrap());
            self.wake.notify_all();
        }
        if bytes > 0 {
            self.unscanned.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A background property was set through the mount: walk (rule 5), every file.
    pub fn configured(&self) {
        {
            // (The flags under `stop`'s lock: `sharing_off` cannot undo them.)
            let _stop = self.stop.lock().unwrap();
            self.targets.store(true, Ordering::Relaxed);
            self.enabled.store(true, Ordering::Relaxed);
        }
        self.moved();
        self.touched(0);
        // (Under `stop`'s lock: see `touched`.)
        drop(self.stop.lock().unwrap());
        self.wake.notify_all();
    }

    /// Block sharing turned itself off (the backing cannot): the pass walks again only
    /// where a target may be set (rule 5).
    pub fn sharing_off(&self) {
        let off = {
            let _stop = self.stop.lock().unwrap();
            let off = !self.targets.load(Ordering::Relaxed);
            if off {
                self.enabled.store(false, Ordering::Relaxed);
            }
            off
        };
        if off {
            self.set_state("off");
        }
    }

    /// A directory was renamed: files below it may now inherit another target without
    /// their ctime moving, so the next walk looks at every file.
    pub fn moved(&self) {
        let mut c = self.clean_since.lock().unwrap();
        self.moves.fetch_add(1, Ordering::Relaxed);
        *c = None;
    }

    /// Whether a file whose backing ctime is `ctime` (seconds) can be skipped unopened:
    /// it has not changed since a walk that left nothing behind (2 s of slack for coarse
    /// timestamps and a clock that moved).
    pub fn unchanged_since_clean_walk(&self, ctime: i64) -> bool {
        let since = *self.clean_since.lock().unwrap();
        since
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .is_some_and(|t| ctime + 2 < t.as_secs() as i64)
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_change.load(Ordering::Relaxed)))
    }

    /// Sleeps up to `d` (less if stopped); false once the pass is to stop.
    fn sleep(&self, d: Duration) -> bool {
        let stop = self.stop.lock().unwrap();
        if *stop {
            return false;
        }
        let (stop, _) = self.wake.wait_timeout(stop, d).unwrap();
        !*stop
    }

    /// [`Pass::sleep`], ending early at the first change through the mount
    /// ([`Pass::touched`] wakes it).
    fn sleep_until_changed(&self, d: Duration) -> bool {
        let stop = self.stop.lock().unwrap();
        if *stop {
            return false;
        }
        // (Changes count while the pass is off too: they wake nothing then.)
        if self.enabled.load(Ordering::Relaxed) && self.changes.load(Ordering::SeqCst) > 0 {
            return true;
        }
        self.naps.fetch_add(1, Ordering::Relaxed);
        let (stop, _) = self.wake.wait_timeout(stop, d).unwrap();
        !*stop
    }

    /// Waits until the mount has been idle for `background_idle` (rule 1); false once the
    /// pass is to stop.
    fn wait_idle(&self) -> bool {
        loop {
            let idle = self.idle_for();
            if idle >= self.cfg.idle {
                return !*self.stop.lock().unwrap();
            }
            if !self.sleep(self.cfg.idle - idle) {
                return false;
            }
        }
    }

    /// Before a chunk of `bytes` logical bytes (rules 1 and 3): waits for an idle mount and
    /// for the rate; `None` once the pass is to stop, else the turn to hand to
    /// [`Pass::still`] under the file's lock.
    pub fn wait_turn(&self, bytes: u64) -> Option<Turn> {
        loop {
            if self.idle_for() < self.cfg.idle {
                self.set_state("paused");
                if !self.wait_idle() {
                    return None;
                }
                self.set_state("walking");
            }
            if bytes > 0 {
                let slot = self.rate_slot(bytes);
                let now = Instant::now();
                if slot > now && !self.sleep(slot - now) {
                    return None;
                }
            }
            if self.stopping() {
                return None;
            }
            // Idle still after the rate's sleep: the turn is the changes counted now.
            let turn = Turn(self.epoch.load(Ordering::SeqCst));
            if self.idle_for() >= self.cfg.idle {
                return Some(turn);
            }
        }
    }

    /// [`Pass::wait_turn`] for work that holds something others wait for (a repack round
    /// holds the reclaimer): `false`, at once, when the mount is not idle or the pass is to
    /// stop; else waits for the rate only.
    pub fn turn_if_idle(&self, bytes: u64) -> bool {
        if self.idle_for() < self.cfg.idle || self.stopping() {
            return false;
        }
        let slot = self.rate_slot(bytes);
        let now = Instant::now();
        if slot > now && !self.sleep(slot - now) {
            return false;
        }
        self.idle_for() >= self.cfg.idle && !self.stopping()
    }

    /// When work of `bytes` may start at the rate (`background_rate=`), booked now.
    fn rate_slot(&self, bytes: u64) -> Instant {
        let mut next = self.next_slot.lock().unwrap();
        let slot = (*next).max(Instant::now());
        *next = slot + Duration::from_secs_f64(bytes as f64 / self.cfg.rate.max(1) as f64);
        slot
    }

    /// Whether no change came through the mount since `turn` was given: checked by a
    /// chunk under the file's lock, so a change that reached its handler first (a chmod
    /// about to drop kept times) is never followed by a chunk keeping times from before it.
    pub fn still(&self, turn: Turn) -> bool {
        self.epoch.load(Ordering::SeqCst) == turn.0
    }

    /// Whether the pass is to stop (checked between files).
    pub fn stopping(&self) -> bool {
        *self.stop.lock().unwrap()
    }

    fn set_state(&self, state: &'static str) {
        self.status.lock().unwrap().state = state;
    }

    /// The walk found `bytes` logical bytes pending in a file.
    pub fn found(&self, bytes: u64) {
        self.status.lock().unwrap().found += bytes;
    }

    /// A chunk of `bytes` logical bytes (as [`Pass::found`] counted them) is done:
    /// `extents` of its extents were rewritten (the others were at the target by then).
    pub fn rewritten(&self, extents: u64, bytes: u64) {
        let mut s = self.status.lock().unwrap();
        s.rewritten_in_walk += bytes;
        s.extents += extents;
        s.bytes += bytes;
    }

    /// `files` packed files were moved into blocks at their target (`ops::background`'s
    /// repack rounds).
    pub fn repacked(&self, files: u64) {
        self.status.lock().unwrap().repacked_files += files;
    }

    /// `bytes` that [`Pass::found`] counted will not be rewritten in this walk (an error:
    /// the file is left until it changes, so they are not pending either).
    pub fn unfound(&self, bytes: u64) {
        let mut s = self.status.lock().unwrap();
        s.found = s.found.saturating_sub(bytes);
    }

    /// A file the daemon may not write (its mode) was left.
    pub fn read_only(&self) {
        self.status.lock().unwrap().read_only += 1;
    }

    /// A file was skipped: in use (`busy`), or an error (logged by the caller).
    pub fn skipped(&self, busy: bool) {
        let mut s = self.status.lock().unwrap();
        if busy {
            s.busy += 1;
        } else {
            s.errors += 1;
            s.walk_errors += 1;
        }
    }

    /// Logical bytes the pass may still have to rewrite: what the walk found and has not
    /// rewritten, and what was written since it began (no walk has looked at it yet); at
    /// least 1 while a walk runs or another is wanted (something changed, or files were in
    /// use). 0 exactly when a whole walk found nothing left to do and nothing changed since.
    pub fn pending_bytes(&self) -> u64 {
        if !self.enabled.load(Ordering::Relaxed) {
            return 0;
        }
        let s = self.status.lock().unwrap();
        let known = s.found.saturating_sub(s.rewritten_in_walk) + self.unscanned.load(Ordering::Relaxed);
        let unfinished =
            matches!(s.state, "walking" | "paused") || s.busy > 0 || self.changes.load(Ordering::Relaxed) > 0;
        if known == 0 && unfinished {
            1
        } else {
            known
        }
    }

    /// The `background` object of the statistics file.
    pub fn json(&self) -> Value {
        let pending = self.pending_bytes();
        let s = self.status.lock().unwrap().clone();
        json!({
            "target": self.cfg.target.map(|c| c.to_string()),
            "idle_seconds": self.cfg.idle.as_secs_f64(),
            "rate_bytes": self.cfg.rate,
            "state": s.state,
            "pending_bytes": pending,
            "walks": s.walks,
            "rewritten_extents": s.extents,
            "rewritten_bytes": s.bytes,
            "repacked_files": s.repacked_files,
            "busy_files": s.busy,
            "read_only_files": s.read_only,
            "errors": s.errors,
            "last_walk_seconds": s.last_walk_seconds,
            "last_walk_files": s.last_walk_files,
        })
    }

    /// Starts the pass's thread, which walks with `core` until [`Pass::stop`] (or until
    /// `core` is gone).
    pub fn start(self: &Arc<Self>, core: Weak<dyn Walk>) -> std::io::Result<std::thread::JoinHandle<()>> {
        let pass = self.clone();
        std::thread::Builder::new()
            .name("sqzfs-background".into())
            .spawn(move || pass.run(core))
    }

    pub fn stop(&self) {
        *self.stop.lock().unwrap() = true;
        self.wake.notify_all();
    }

    fn run(&self, core: Weak<dyn Walk>) {
        crate::sys::lower_thread_priority();
        let mut retry = RETRY_FIRST;
        let mut retry_at: Option<Instant> = None;
        loop {
            // Work is wanted: something changed since the last walk began, or files were
            // in use then and the retry is due.
            let wanted = self.enabled.load(Ordering::Relaxed)
                && (self.changes.load(Ordering::Relaxed) > 0
                    || retry_at.is_some_and(|t| Instant::now() >= t));
            if !self.enabled.load(Ordering::Relaxed) {
                // Off (sharing turned itself off): no retry is due either.
                retry_at = None;
            }
            if !wanted {
                let wait = retry_at.map_or(Duration::from_secs(3600), |t| {
                    t.saturating_duration_since(Instant::now())
                });
                if !self.sleep_until_changed(wait.max(Duration::from_millis(100))) {
                    return;
                }
                continue;
            }
            if !self.wait_idle() {
                return;
            }
            let Some(core) = core.upgrade() else { return };
            {
                let mut s = self.status.lock().unwrap();
                s.state = "walking";
                s.found = 0;
                s.rewritten_in_walk = 0;
                s.busy = 0;
                s.read_only = 0;
                s.walk_errors = 0;
            }
            {
                // A clock stepped back: files written since could be older than the last
                // clean walk's start, and be skipped.
                let mut c = self.clean_since.lock().unwrap();
                if c.is_some_and(|t| t > SystemTime::now()) {
                    *c = None;
                }
            }
            self.changes.store(0, Ordering::Relaxed);
            self.unscanned.store(0, Ordering::Relaxed);
            let began = Instant::now();
            let began_wall = SystemTime::now();
            let moves = self.moves.load(Ordering::Relaxed);
            let files = core.background_walk(self);
            drop(core);
            let stopped = self.stopping();
            let mut s = self.status.lock().unwrap();
            s.walks += 1;
            s.last_walk_seconds = began.elapsed().as_secs_f64();
            s.last_walk_files = files;
            s.state = if self.enabled.load(Ordering::Relaxed) {
                "waiting"
            } else {
                "off" // (sharing turned itself off during the walk)
            };
            if stopped {
                return;
            }
            {
                // (A `moved` or `configured` during the walk leaves it cleared.)
                let mut c = self.clean_since.lock().unwrap();
                if s.busy == 0 && s.walk_errors == 0 && self.moves.load(Ordering::Relaxed) == moves {
                    *c = Some(began_wall);
                }
            }
            if s.busy > 0 {
                retry_at = Some(Instant::now() + retry);
                retry = (retry * 2).min(RETRY_MAX);
            } else {
                retry_at = None;
                retry = RETRY_FIRST;
            }
            log::info!(
                "background pass: walked {files} files in {:.1} s, rewrote {} MB ({} files in use left for later)",
                s.last_walk_seconds,
                s.rewritten_in_walk >> 20,
                s.busy
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(idle_ms: u64, rate: u64) -> Pass {
        Pass::new(
            Config {
                target: Some("zstd:15".parse().unwrap()),
                idle: Duration::from_millis(idle_ms),
                rate,
                ..Config::default()
            },
            false,
            false,
        )
    }

    #[test]
    fn a_change_pauses_the_pass_until_the_mount_is_idle_again() {
        let p = pass(200, u64::MAX);
        std::thread::sleep(Duration::from_millis(210));
        let t = Instant::now();
        let turn = p.wait_turn(1).unwrap();
        assert!(t.elapsed() < Duration::from_millis(100), "idle already");
        assert!(p.still(turn));
        p.touched(10);
        assert!(!p.still(turn), "a change since the turn stops its chunk");
        let t = Instant::now();
        let turn = p.wait_turn(1).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(190),
            "waited for idle: {:?}",
            t.elapsed()
        );
        assert!(p.still(turn));
    }

    #[test]
    fn the_rate_spaces_chunks() {
        let p = pass(0, 10 << 20);
        let t = Instant::now();
        for _ in 0..4 {
            assert!(p.wait_turn(1 << 20).is_some());
        }
        // Four 1 MiB chunks at 10 MiB/s: the last starts 0.3 s after the first.
        let e = t.elapsed();
        assert!(
            e >= Duration::from_millis(290) && e < Duration::from_secs(2),
            "{e:?}"
        );
    }

    /// A walk that found nothing leaves the pass asleep until the next change: that change
    /// wakes it (it used to sleep an hour), and a walk follows once the mount is idle.
    #[test]
    fn a_change_after_a_quiet_walk_brings_the_next_walk() {
        struct Count(AtomicU64);
        impl Walk for Count {
            fn background_walk(&self, _: &Pass) -> u64 {
                self.0.fetch_add(1, Ordering::SeqCst);
                0
            }
        }
        let walks = |c: &Count, n: u64| {
            let t = Instant::now();
            while c.0.load(Ordering::SeqCst) < n && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            c.0.load(Ordering::SeqCst)
        };
        let p = Arc::new(pass(50, u64::MAX));
        let c: Arc<Count> = Arc::new(Count(AtomicU64::new(0)));
        let w: Arc<dyn Walk> = c.clone();
        let h = p.start(Arc::downgrade(&w)).unwrap();
        assert_eq!(walks(&c, 1), 1, "the walk at mount");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(c.0.load(Ordering::SeqCst), 1, "no change, no walk");
        p.touched(4096);
        assert_eq!(walks(&c, 2), 2, "a change after a quiet walk");
        p.stop();
        h.join().unwrap();

        // A pass that is off (no target, no sharing) sleeps through changes: it neither
        // walks nor wakes for them.
        let off = Arc::new(Pass::new(Config::default(), false, false));
        let c: Arc<Count> = Arc::new(Count(AtomicU64::new(0)));
        let w: Arc<dyn Walk> = c.clone();
        let h = off.start(Arc::downgrade(&w)).unwrap();
        for _ in 0..100 {
            off.touched(4096);
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(c.0.load(Ordering::SeqCst), 0);
        let naps = off.naps.load(Ordering::Relaxed);
        assert!(naps <= 2, "the pass woke {naps} times while off");
        off.stop();
        h.join().unwrap();
    }

    #[test]
    fn stop_ends_a_wait() {
        let p = Arc::new(pass(60_000, u64::MAX));
        p.touched(0);
        let q = p.clone();
        let h = std::thread::spawn(move || q.wait_turn(1).is_some());
        std::thread::sleep(Duration::from_millis(50));
        p.stop();
        assert!(!h.join().unwrap());
    }

    #[test]
    fn pending_bytes_counts_what_no_walk_saw_yet() {
        let p = pass(0, u64::MAX);
        assert!(p.pending_bytes() > 0, "before the first walk");
        // A walk under way: unfinished, whatever it found so far.
        p.changes.store(0, Ordering::Relaxed);
        p.set_state("walking");
        assert_eq!(p.pending_bytes(), 1);
        p.found(1000);
        p.rewritten(1, 400);
        assert_eq!(p.pending_bytes(), 600);
        p.rewritten(1, 600);
        assert_eq!(p.pending_bytes(), 1);
        // Done: nothing left.
        p.set_state("waiting");
        assert_eq!(p.pending_bytes(), 0);
        p.touched(4096);
        assert_eq!(p.pending_bytes(), 4096);
        p.changes.store(0, Ordering::Relaxed);
        p.unscanned.store(0, Ordering::Relaxed);
        p.touched(0);
        assert_eq!(p.pending_bytes(), 1, "a change asks for a walk");
        let off = Pass::new(Config::default(), false, false);
        off.touched(5);
        assert_eq!(off.pending_bytes(), 0, "no target anywhere");
        assert_eq!(off.json()["state"], "off");
    }
}
