//! `compress=zstd:adapt[:MIN-MAX]`: a zstd level that follows what the writer waits for.
//!
//! A writer that fills extents faster than the daemon compresses them waits for the
//! compressor; one fed from a slow source (a network, a program that computes) does not,
//! and a higher level costs it nothing. The controller measures how much of the wall time
//! the write path is compressing at all — the union of the compressions' intervals, however
//! many run at once — in samples of at least [`WINDOW`], and keeps a moving average of it
//! over about [`TAU`] (`busy`), gaps between writes counting as idle time. FUSE hands the
//! daemon written data in bursts (the kernel's write-back), each of which keeps the
//! compressor busy while it lasts; the average over seconds is what tells a stream the
//! compressor cannot keep up with from bursts it absorbs. It moves the level by one at a
//! time, at most once per [`SETTLE`]:
//!
//! * down while the compressor is busy more than [`HIGH`] of the time,
//! * up while it is busy less than [`LOW`], never within [`COOLDOWN`] of a decrease,
//! * never outside `MIN..=MAX` (default [`DEFAULT_RANGE`]: no higher than zstd:9, as the
//!   issue and Cassandra's compressor advise).
//!
//! Between [`LOW`] and [`HIGH`] it holds. A level it had to leave because it was too slow
//! is barred from being climbed back to for a penalty that doubles each time (from
//! [`PENALTY_MIN`] to [`PENALTY_MAX`]): where one level is too fast and the next too slow,
//! the level settles instead of swinging between the two (zstd's contrib controller skipped
//! a change after stable rounds for the same reason). Extents the backoff stores raw
//! without trying are not timed: incompressible data never moves the level. The measure is
//! of the compressor, not of a writer: several writers whose compressions overlap count as
//! one busy compressor, and spare cores do not count.
//!
//! The clock is injected ([`Clock`]): tests move it by hand with a codec whose cost per
//! level is known (`tests/adapt.rs`).

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use squeezefs_codec::workspace::{Clock, MonotonicClock};

/// The levels `zstd:adapt` moves between when no range is given.
pub const DEFAULT_RANGE: (i32, i32) = (1, 9);
/// The level it starts at (the mount default's), within the range ([`start_level`]).
pub const START_LEVEL: i32 = 3;

/// The level a controller over `min..=max` starts at (and the mount's codec names).
pub fn start_level(min: i32, max: i32) -> i32 {
    START_LEVEL.clamp(min, max)
}
/// How long a sample lasts at least (zstd `--adapt` looks every 1/6 s).
pub const WINDOW: Duration = Duration::from_millis(167);
/// The moving average's time constant: a sample `t` long weighs `1 - e^(-t/TAU)`.
pub const TAU: Duration = Duration::from_secs(1);
/// At most one change of level per this much time (the average then reflects the new one).
pub const SETTLE: Duration = Duration::from_secs(1);
/// Above this share of wall time with a compression under way, the level goes down.
pub const HIGH: f64 = 0.8;
/// Below this share, it goes up.
pub const LOW: f64 = 0.5;
/// No increase this soon after a decrease.
pub const COOLDOWN: Duration = Duration::from_secs(2);
/// The first bar on climbing back to a level left for being too slow; doubles at each
/// further decrease from that level, up to [`PENALTY_MAX`].
pub const PENALTY_MIN: Duration = Duration::from_secs(2);
pub const PENALTY_MAX: Duration = Duration::from_secs(120);

/// What a decision did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Lowered(i32),
    Raised(i32),
}

/// The controller's state, without locking or clocks of its own (`now` is passed in).
#[derive(Debug, Clone)]
pub struct Controller {
    min: i32,
    max: i32,
    level: i32,
    window_start: Duration,
    busy: Duration,
    /// Compressions under way, and since when at least one has been.
    inflight: u32,
    busy_since: Duration,
    /// The moving average of the busy share, and the last sample.
    average: f64,
    sample: f64,
    /// When the level last changed.
    changed: Duration,
    /// No increase before this time.
    cooldown_until: Duration,
    /// Per level from `min`: (barred until, the bar's current length).
    bars: Vec<(Duration, Duration)>,
}

impl Controller {
    /// A controller between `min` and `max` (inclusive, `min <= max`), starting at
    /// [`START_LEVEL`] clamped into the range, its first window starting at `now`.
    pub fn new(min: i32, max: i32, now: Duration) -> Controller {
        assert!(min <= max, "adaptive range {min}-{max}");
        Controller {
            min,
            max,
            level: start_level(min, max),
            window_start: now,
            busy: Duration::ZERO,
            inflight: 0,
            busy_since: now,
            // Neutral: between LOW and HIGH, so the first samples decide.
            average: (LOW + HIGH) / 2.0,
            sample: 0.0,
            changed: now,
            cooldown_until: Duration::ZERO,
            bars: vec![(Duration::ZERO, Duration::ZERO); (max - min + 1) as usize],
        }
    }

    pub fn level(&self) -> i32 {
        self.level
    }

    pub fn range(&self) -> (i32, i32) {
        (self.min, self.max)
    }

    /// The moving average of the share of wall time with a compression under way.
    pub fn busy(&self) -> f64 {
        self.average
    }

    /// That share in the last sample alone.
    pub fn last_sample(&self) -> f64 {
        self.sample
    }

    /// A compression starts at `now`.
    pub fn begin(&mut self, now: Duration) {
        if self.inflight == 0 {
            self.busy_since = now.max(self.window_start);
        }
        self.inflight += 1;
    }

    /// A compression that began ends at `now`; takes a sample when [`WINDOW`] has passed
    /// since the last one (the time between writes counts as idle), and may change the
    /// level.
    pub fn end(&mut self, now: Duration) -> Option<Change> {
        self.inflight = self.inflight.saturating_sub(1);
        if self.inflight == 0 {
            self.busy += now.saturating_sub(self.busy_since);
        }
        let elapsed = now.saturating_sub(self.window_start);
        if elapsed < WINDOW {
            return None;
        }
        if self.inflight > 0 {
            // The interval under way so far counts in this sample, the rest in the next.
            self.busy += now.saturating_sub(self.busy_since);
        }
        self.sample = (self.busy.as_secs_f64() / elapsed.as_secs_f64()).min(1.0);
        let weight = 1.0 - (-elapsed.as_secs_f64() / TAU.as_secs_f64()).exp();
        self.average += weight * (self.sample - self.average);
        self.restart(now);
        if now < self.changed + SETTLE {
            return None;
        }
        if self.average > HIGH && self.level > self.min {
            let bar = &mut self.bars[(self.level - self.min) as usize];
            bar.1 = (bar.1 * 2).clamp(PENALTY_MIN, PENALTY_MAX);
            bar.0 = now + bar.1;
            self.level -= 1;
            self.changed = now;
            self.cooldown_until = now + COOLDOWN;
            return Some(Change::Lowered(self.level));
        }
        if self.average < LOW
            && self.level < self.max
            && now >= self.cooldown_until
            && now >= self.bars[(self.level + 1 - self.min) as usize].0
        {
            self.level += 1;
            self.changed = now;
            return Some(Change::Raised(self.level));
        }
        None
    }

    fn restart(&mut self, now: Duration) {
        self.window_start = now;
        self.busy = Duration::ZERO;
        self.busy_since = now;
    }
}

/// The controller seen from outside: its range and level, how often it moved, and the
/// moving average of the share of time a compression was under way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    pub min: i32,
    pub max: i32,
    pub level: i32,
    pub lowered: u64,
    pub raised: u64,
    pub busy: f64,
}

/// One compression under way ([`Adaptive::compressing`]).
pub struct Compressing<'a>(&'a Adaptive);

impl Drop for Compressing<'_> {
    fn drop(&mut self) {
        self.0.ended();
    }
}

/// A mount's adaptive level, shared by every container and compressing thread.
pub struct Adaptive {
    clock: Arc<dyn Clock>,
    /// Lock order: taken alone, after compressing (never held across codec work).
    controller: Mutex<Controller>,
    level: AtomicI32,
    lowered: AtomicU64,
    raised: AtomicU64,
}

impl std::fmt::Debug for Adaptive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adaptive")
            .field("level", &self.level())
            .field("range", &self.range())
            .finish()
    }
}

impl Adaptive {
    /// A controller on the real clock.
    pub fn new(min: i32, max: i32) -> Arc<Adaptive> {
        Adaptive::with_clock(min, max, Arc::new(MonotonicClock::new()))
    }

    pub fn with_clock(min: i32, max: i32, clock: Arc<dyn Clock>) -> Arc<Adaptive> {
        let c = Controller::new(min, max, clock.now());
        Arc::new(Adaptive {
            level: AtomicI32::new(c.level()),
            controller: Mutex::new(c),
            clock,
            lowered: AtomicU64::new(0),
            raised: AtomicU64::new(0),
        })
    }

    /// The zstd level to compress with now.
    pub fn level(&self) -> i32 {
        self.level.load(Ordering::Relaxed)
    }

    pub fn range(&self) -> (i32, i32) {
        self.lock().range()
    }

    /// A compression by the write path starts; it ends when the guard is dropped.
    pub fn compressing(&self) -> Compressing<'_> {
        self.lock().begin(self.clock.now());
        Compressing(self)
    }

    fn ended(&self) {
        let now = self.clock.now();
        let change = self.lock().end(now);
        match change {
            Some(Change::Lowered(l)) => {
                self.level.store(l, Ordering::Relaxed);
                self.lowered.fetch_add(1, Ordering::Relaxed);
            }
            Some(Change::Raised(l)) => {
                self.level.store(l, Ordering::Relaxed);
                self.raised.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }

    /// What the statistics file shows.
    pub fn snapshot(&self) -> Snapshot {
        let c = self.lock();
        let (min, max) = c.range();
        Snapshot {
            min,
            max,
            level: c.level(),
            lowered: self.lowered.load(Ordering::Relaxed),
            raised: self.raised.load(Ordering::Relaxed),
            busy: c.busy(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Controller> {
        self.controller.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Parses the part of `compress=zstd:adapt[:MIN-MAX]` after `zstd:`: `Some(range)` for
/// `adapt` or `adapt:MIN-MAX`, `None` when the value is not an adaptive one; an error
/// says what is expected.
pub fn parse(v: &str) -> Option<Result<(i32, i32), String>> {
    let rest = v.strip_prefix("zstd:adapt")?;
    if rest.is_empty() {
        return Some(Ok(DEFAULT_RANGE));
    }
    let range = || -> Option<(i32, i32)> {
        let (a, b) = rest.strip_prefix(':')?.split_once('-')?;
        let (a, b): (i32, i32) = (a.parse().ok()?, b.parse().ok()?);
        let levels = squeezefs_codec::ZSTD_LEVELS;
        (levels.contains(&a) && levels.contains(&b) && a <= b).then_some((a, b))
    };
    Some(range().ok_or_else(|| {
        format!(
            "`{v}`: expected zstd:adapt or zstd:adapt:MIN-MAX with zstd levels {}..={}, MIN <= MAX \
             (e.g. zstd:adapt:1-9)",
            squeezefs_codec::ZSTD_LEVELS.start(),
            squeezefs_codec::ZSTD_LEVELS.end()
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_compressions_count_once() {
        let ms = Duration::from_millis;
        let mut c = Controller::new(1, 9, Duration::ZERO);
        for _ in 0..4 {
            c.begin(Duration::ZERO);
        }
        for _ in 0..4 {
            assert_eq!(c.end(ms(100)), None, "the sample is not over");
        }
        c.begin(ms(200));
        assert_eq!(c.end(ms(200)), None, "within SETTLE of the start: no change");
        assert!((c.last_sample() - 0.5).abs() < 0.01, "{}", c.last_sample());
    }

    #[test]
    fn the_option_parses() {
        assert_eq!(parse("zstd:adapt"), Some(Ok((1, 9))));
        assert_eq!(parse("zstd:adapt:3-12"), Some(Ok((3, 12))));
        assert_eq!(parse("zstd:adapt:5-5"), Some(Ok((5, 5))));
        assert_eq!(parse("zstd:3"), None);
        assert_eq!(parse("lz4"), None);
        for bad in [
            "zstd:adapt:9-1",
            "zstd:adapt:0-9",
            "zstd:adapt:1-20",
            "zstd:adapt:x",
            "zstd:adapt1-9",
        ] {
            let e = parse(bad).unwrap().unwrap_err();
            assert!(e.contains("zstd:adapt:MIN-MAX"), "{bad}: {e}");
        }
    }
}
