//! The adaptive zstd level (`compress=zstd:adapt`) on an injected clock, with a fake codec
//! whose cost per level is known: a writer that produces one extent every `gap` and then
//! waits for its compression, which costs `cost(level)`.

use std::sync::Arc;
use std::time::Duration;

use squeezefs_codec::workspace::{Clock, ManualClock};
use squeezefs_container::adapt::{Adaptive, HIGH, LOW, PENALTY_MAX, WINDOW};

struct Writer {
    clock: Arc<ManualClock>,
    adapt: Arc<Adaptive>,
    /// Cost of one extent at a level.
    cost: fn(i32) -> Duration,
    changes: u64,
}

impl Writer {
    fn new(min: i32, max: i32, cost: fn(i32) -> Duration) -> Writer {
        let clock = Arc::new(ManualClock::default());
        clock.advance(Duration::from_secs(1));
        let adapt = Adaptive::with_clock(min, max, clock.clone());
        Writer {
            clock,
            adapt,
            cost,
            changes: 0,
        }
    }

    /// Writes for `span` of simulated time with `gap` between extents; calls `each` with
    /// the level after every extent.
    fn write_for(&mut self, span: Duration, gap: Duration, mut each: impl FnMut(i32)) {
        let end = self.clock.now() + span;
        while self.clock.now() < end {
            self.clock.advance(gap);
            let before = self.adapt.level();
            let c = (self.cost)(before);
            let compressing = self.adapt.compressing();
            self.clock.advance(c);
            drop(compressing);
            let after = self.adapt.level();
            if after != before {
                assert_eq!((after - before).abs(), 1, "one level per decision");
                self.changes += 1;
            }
            each(after);
        }
    }

    fn level(&self) -> i32 {
        self.adapt.level()
    }
}

/// 100 µs × 1.35^level: each level a third slower than the one below.
fn gentle(level: i32) -> Duration {
    Duration::from_secs_f64(100e-6 * 1.35f64.powi(level))
}

/// 100 µs × 5^level: a level too fast beside one too slow.
fn steep(level: i32) -> Duration {
    Duration::from_secs_f64(100e-6 * 5f64.powi(level))
}

const SLOW_SOURCE: Duration = Duration::from_millis(5);
const FAST_SOURCE: Duration = Duration::from_micros(200);

/// The share of time the compressor is busy at `level` with `gap` between extents.
fn busy(cost: fn(i32) -> Duration, level: i32, gap: Duration) -> f64 {
    let c = cost(level).as_secs_f64();
    c / (c + gap.as_secs_f64())
}

#[test]
fn a_slow_source_climbs_to_the_top_and_a_fast_one_brings_it_down_and_back() {
    let mut w = Writer::new(1, 9, gentle);
    assert_eq!(w.level(), 3, "starts at the mount default's level");
    // Compression costs the writer at most 1.5 ms of each 6.5 ms (23 %): up to the top,
    // one level a second.
    w.write_for(Duration::from_secs(10), SLOW_SOURCE, |_| {});
    assert_eq!(w.level(), 9);
    let before = w.changes;
    w.write_for(Duration::from_secs(5), SLOW_SOURCE, |l| assert_eq!(l, 9));
    assert_eq!(w.changes, before, "holds at the top");

    // A step: the source now waits 0.2 ms per extent. Coming down from 9, the level stops
    // at the first one whose compressor is busy at most HIGH of the time (6 here: 75 %;
    // 7 is 80.3 %).
    let settle = (1..=9)
        .rev()
        .find(|&l| busy(gentle, l, FAST_SOURCE) <= HIGH)
        .unwrap();
    assert_eq!(settle, 6);
    assert!(busy(gentle, settle, FAST_SOURCE) >= LOW, "and holds there");
    w.write_for(Duration::from_secs(8), FAST_SOURCE, |_| {});
    assert_eq!(w.level(), settle, "converged within 8 s");
    let before = w.changes;
    w.write_for(Duration::from_secs(30), FAST_SOURCE, |l| assert_eq!(l, settle));
    assert_eq!(w.changes, before, "holds once converged");

    // Faster still: nothing but compression, down to the floor.
    w.write_for(Duration::from_secs(10), Duration::ZERO, |_| {});
    assert_eq!(w.level(), 1);

    // And back: up again, one level a second once the cooldown and bars have passed.
    w.write_for(Duration::from_secs(15), SLOW_SOURCE, |_| {});
    assert_eq!(w.level(), 9);
    let s = w.adapt.snapshot();
    assert_eq!((s.min, s.max, s.level), (1, 9, 9));
    assert!(s.lowered >= 8 && s.raised >= 14, "{s:?}");
}

#[test]
fn the_level_stays_within_its_bounds() {
    let mut w = Writer::new(4, 6, gentle);
    assert_eq!(w.level(), 4, "the start level clamped into the range");
    // Nothing but compression (no gap): always too slow, never below the floor.
    w.write_for(Duration::from_secs(10), Duration::ZERO, |l| {
        assert!((4..=6).contains(&l))
    });
    assert_eq!(w.level(), 4);
    // A source far slower than any level: up to the ceiling, never above.
    w.write_for(Duration::from_secs(20), Duration::from_millis(50), |l| {
        assert!((4..=6).contains(&l))
    });
    assert_eq!(w.level(), 6);

    let mut w = Writer::new(5, 5, gentle);
    w.write_for(Duration::from_secs(5), Duration::ZERO, |l| assert_eq!(l, 5));
    w.write_for(Duration::from_secs(5), SLOW_SOURCE, |l| assert_eq!(l, 5));
    assert_eq!(w.changes, 0);
}

#[test]
fn a_level_too_fast_beside_one_too_slow_does_not_oscillate() {
    // With a 0.6 ms source: at level 1 the compressor is busy 45 % of the time (below LOW:
    // raise), at level 2 81 % (above HIGH: lower). Without the bars this would change level
    // every few seconds (the cooldown); with them the climb back to 2 waits 2, 4, 8 … 120 s.
    let mut w = Writer::new(1, 9, steep);
    let gap = Duration::from_micros(600);
    assert!(busy(steep, 1, gap) < LOW && busy(steep, 2, gap) > HIGH);
    let mut at_one = 0u64;
    let mut steps = 0u64;
    w.write_for(Duration::from_secs(600), gap, |l| {
        assert!((1..=2).contains(&l) || steps < 200, "level {l} after the start");
        steps += 1;
        at_one += u64::from(l == 1);
    });
    assert!(w.changes <= 30, "{} changes in 10 min", w.changes);
    assert!(
        at_one * 100 >= steps * 90,
        "at level 1 {at_one} of {steps} extents"
    );
    // The last five minutes: at most one climb and fall per bar of PENALTY_MAX.
    let before = w.changes;
    w.write_for(Duration::from_secs(300), gap, |_| {});
    let most = 2 * (300 / PENALTY_MAX.as_secs() + 1);
    assert!(
        w.changes - before <= most,
        "{} changes in 5 min",
        w.changes - before
    );
}

#[test]
fn a_pause_counts_as_idle_time_one_step_at_a_time() {
    let mut w = Writer::new(1, 9, gentle);
    w.write_for(Duration::from_secs(10), Duration::ZERO, |_| {});
    assert_eq!(w.level(), 1);
    // Ten seconds without a write: the compressor had time to spare, so the next sample
    // raises the level, by one step only.
    w.clock.advance(Duration::from_secs(10));
    w.write_for(WINDOW * 2, Duration::ZERO, |_| {});
    assert_eq!(w.level(), 2);
    // Writes that keep it busy bring it back down.
    w.write_for(Duration::from_secs(5), Duration::ZERO, |_| {});
    assert_eq!(w.level(), 1);
}

/// Bursts that keep the compressor busy while they last, a fifth of the time in all (the
/// kernel's write-back hands the daemon data this way): the level climbs, it is not pushed
/// down by every burst.
#[test]
fn bursts_the_compressor_absorbs_do_not_push_the_level_down() {
    let mut w = Writer::new(1, 9, gentle);
    let burst = |w: &mut Writer| {
        // 0.4 s of extents back to back, then 1.6 s of nothing.
        w.write_for(Duration::from_millis(400), Duration::ZERO, |_| {});
        w.clock.advance(Duration::from_millis(1600));
    };
    for _ in 0..30 {
        burst(&mut w);
    }
    assert_eq!(w.level(), 9, "{:?}", w.adapt.snapshot());
}
