//! The zstd workspace pool, after the btrfs zstd level patch (fs/btrfs/zstd.c, Dennis Zhou,
//! 2019): compression contexts are kept per level and shared by all threads, with a bound.
//!
//! * One idle list per level. A request takes an idle workspace of its level; otherwise a new
//!   one is allocated, as long as fewer than `max_workspaces` exist; otherwise (at the bound,
//!   or when allocating fails) it borrows an idle one of a **higher** level, which has room
//!   for any lower level's tables. btrfs borrows before allocating; we allocate first while
//!   under the bound, because libzstd (unlike the kernel's static workspaces) shrinks and
//!   regrows a context used far below its size, which would undo the reuse.
//! * Still at the bound, the least recently used idle workspace of another level is freed
//!   to make room; when every workspace is busy the request waits for one to come back. A thread
//!   holds at most one workspace at a time (a [`Lease`] lives for one compression call), so
//!   at most `max_workspaces` threads compress with zstd at once and memory is bounded.
//! * Idle workspaces carry a last-used time, refreshed only when used **at their own
//!   level** (a workspace only ever borrowed by lower levels ages out, and the right-sized
//!   one replaces it). [`Pool::reclaim`] frees those idle for `reclaim_after` (45 s).
//! * One max-level workspace is allocated up front and hidden from reclaim and eviction: a
//!   writer always finds a workspace that can serve any level, even when allocating fails.
//! * Time comes from a [`Clock`], so tests drive reclaim without sleeping (`clock.rs`);
//!   contexts are made by an [`Allocator`], so tests can make allocation fail, and priced by
//!   libzstd's estimate ([`estimate`]) (`sizing.rs`). This file is the pool itself: the
//!   idle lists, the bound, borrowing, eviction, reclaim and the leases.
//!
//! Memory per level is what libzstd says a context needs for an extent of the configured
//! size (`ZSTD_estimateCCtxSize_usingCParams(ZSTD_getCParams(level, size))`), and each live
//! workspace reports its real size (`ZSTD_sizeof_CCtx`) after every use.

mod clock;
mod sizing;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use zstd::bulk::Compressor;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use sizing::{estimate, measure, Allocator, ZstdAllocator};

/// The highest zstd level squeezefs accepts; the reserved workspace is of this level.
pub const MAX_LEVEL: i32 = 19;
/// Idle time after which a workspace is freed (the btrfs patch's value).
pub const RECLAIM_AFTER: Duration = Duration::from_secs(45);

#[derive(Clone, Copy, Debug)]
pub struct PoolConfig {
    /// Most workspaces alive at once, the reserved one included (≥ 1).
    pub max_workspaces: usize,
    pub reclaim_after: Duration,
    /// Input size the estimates assume (the extent size): libzstd sizes its tables to it.
    pub input_size: usize,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            max_workspaces: std::thread::available_parallelism().map_or(2, |n| n.get()) + 1,
            reclaim_after: RECLAIM_AFTER,
            input_size: 128 << 10,
        }
    }
}

struct Ws {
    level: i32,
    ctx: Compressor<'static>,
    /// Level the context is currently set to.
    set_to: i32,
    bytes: usize,
    last_used: Duration,
    /// Subject to reclaim (false: the hidden max-level workspace).
    in_lru: bool,
}

#[derive(Default)]
struct State {
    /// Idle workspaces by their own level; the most recently returned last.
    idle: BTreeMap<i32, Vec<Ws>>,
    /// Busy workspaces by their own level: count and bytes.
    busy: BTreeMap<i32, (usize, usize)>,
    total: usize,
    peak_total: usize,
    peak_bytes: usize,
    counters: Counters,
}

impl State {
    fn bytes(&self) -> usize {
        self.idle.values().flatten().map(|w| w.bytes).sum::<usize>()
            + self.busy.values().map(|b| b.1).sum::<usize>()
    }

    fn note_peaks(&mut self) {
        self.peak_total = self.peak_total.max(self.total);
        self.peak_bytes = self.peak_bytes.max(self.bytes());
    }

    /// An idle workspace of `level`, or (`higher`) of the lowest higher level.
    fn take_idle(&mut self, level: i32, higher: bool) -> Option<Ws> {
        let own = if higher {
            *self.idle.range(level + 1..).find(|(_, v)| !v.is_empty())?.0
        } else {
            level
        };
        self.idle.get_mut(&own)?.pop()
    }

    /// Frees the least recently used idle workspace that is subject to reclaim.
    fn evict_lru(&mut self) -> bool {
        let victim = self
            .idle
            .iter()
            .flat_map(|(l, v)| v.iter().enumerate().map(move |(i, w)| (*l, i, w)))
            .filter(|(_, _, w)| w.in_lru)
            .min_by_key(|(_, _, w)| w.last_used)
            .map(|(l, i, _)| (l, i));
        let Some((l, i)) = victim else { return false };
        self.idle.get_mut(&l).expect("found above").remove(i);
        self.total -= 1;
        self.counters.evicted += 1;
        true
    }
}

/// Event counts since the pool was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Contexts allocated.
    pub allocated: u64,
    /// Requests served by an idle workspace of their own level.
    pub reused: u64,
    /// Requests served by an idle workspace of a higher level.
    pub borrowed: u64,
    /// Requests that had to wait for a workspace to come back.
    pub waited: u64,
    /// Allocations that failed.
    pub alloc_failed: u64,
    /// Idle workspaces freed after `reclaim_after`.
    pub reclaimed: u64,
    /// Idle workspaces freed to make room for another level.
    pub evicted: u64,
}

/// One level's line in [`PoolStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelStats {
    pub level: i32,
    pub idle: usize,
    pub busy: usize,
    /// Real bytes of this level's live workspaces.
    pub bytes: usize,
    /// libzstd's estimate for one workspace of this level.
    pub estimate: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStats {
    pub max_workspaces: usize,
    pub total: usize,
    pub bytes: usize,
    pub peak_total: usize,
    pub peak_bytes: usize,
    pub levels: Vec<LevelStats>,
    pub counters: Counters,
}

/// The pool; see the module documentation.
pub struct Pool {
    cfg: PoolConfig,
    clock: Arc<dyn Clock>,
    alloc: Box<dyn Allocator>,
    state: Mutex<State>,
    returned: Condvar,
}

impl Pool {
    /// A pool with one max-level workspace allocated and reserved.
    pub fn new(cfg: PoolConfig, clock: Arc<dyn Clock>, alloc: Box<dyn Allocator>) -> Pool {
        let pool = Pool {
            cfg: PoolConfig {
                max_workspaces: cfg.max_workspaces.max(1),
                ..cfg
            },
            clock,
            alloc,
            state: Mutex::new(State::default()),
            returned: Condvar::new(),
        };
        if let Some(mut ctx) = pool.alloc.alloc(MAX_LEVEL) {
            // Make libzstd allocate the tables now, while memory is there: compress one
            // extent-sized input (zeros: fast at any level).
            let src = vec![0u8; pool.cfg.input_size];
            let mut dst = Vec::with_capacity(zstd::zstd_safe::compress_bound(src.len()));
            let _ = ctx.compress_to_buffer(&src, &mut dst);
            let bytes = ctx.context_mut().sizeof();
            let mut st = pool.state.lock().unwrap();
            st.idle.entry(MAX_LEVEL).or_default().push(Ws {
                level: MAX_LEVEL,
                ctx,
                set_to: MAX_LEVEL,
                bytes,
                last_used: pool.clock.now(),
                in_lru: false,
            });
            st.total = 1;
            st.counters.allocated = 1;
            st.note_peaks();
        }
        pool
    }

    pub fn config(&self) -> PoolConfig {
        self.cfg
    }

    /// A workspace for `level` (1 … [`MAX_LEVEL`], or a negative fast level), waiting for
    /// one when all are busy and none can be allocated.
    ///
    /// Panics if this thread already holds a lease: a second one could wait forever for
    /// workspaces held by threads that wait likewise, and the bound assumes one per thread.
    pub fn get(&self, level: i32) -> Lease<'_> {
        HOLDING.with(|h| {
            assert!(
                !h.replace(true),
                "a thread asked for a second zstd workspace while holding one"
            )
        });
        let mut st = self.state.lock().unwrap();
        loop {
            // 1. An idle workspace of this very level.
            if let Some(ws) = st.take_idle(level, false) {
                st.counters.reused += 1;
                return self.lend(&mut st, ws, level);
            }
            // 2. Room for a new one.
            if st.total < self.cfg.max_workspaces {
                st.total += 1;
                drop(st);
                let made = self.alloc.alloc(level);
                st = self.state.lock().unwrap();
                if let Some(ctx) = made {
                    st.counters.allocated += 1;
                    st.busy.entry(level).or_default().0 += 1;
                    st.note_peaks();
                    let ws = Ws {
                        level,
                        ctx,
                        set_to: level,
                        bytes: 0,
                        last_used: self.clock.now(),
                        in_lru: true,
                    };
                    return Lease {
                        pool: self,
                        ws: Some(ws),
                        level,
                        _not_send: PhantomData,
                    };
                }
                st.total -= 1;
                st.counters.alloc_failed += 1;
                // Allocation failed: fall through to borrowing, or wait for a workspace to
                // come back (the reserved one serves any level).
            } else if st.idle.get(&level).is_some_and(|v| !v.is_empty()) {
                continue;
            }
            // 3. Borrow an idle higher-level workspace.
            if let Some(ws) = st.take_idle(level, true) {
                st.counters.borrowed += 1;
                return self.lend(&mut st, ws, level);
            }
            // 4. At the bound: free the least recently used idle one (another level) and
            //    allocate in its place.
            if st.total >= self.cfg.max_workspaces && st.evict_lru() {
                continue;
            }
            // 5. Everything is busy: wait.
            st.counters.waited += 1;
            st = self.returned.wait(st).unwrap();
        }
    }

    fn lend(&self, st: &mut State, ws: Ws, level: i32) -> Lease<'_> {
        let b = st.busy.entry(ws.level).or_default();
        b.0 += 1;
        b.1 += ws.bytes;
        Lease {
            pool: self,
            ws: Some(ws),
            level,
            _not_send: PhantomData,
        }
    }

    fn put(&self, mut ws: Ws, req_level: i32) {
        let bytes_before = ws.bytes;
        ws.bytes = ws.ctx.context_mut().sizeof();
        let mut st = self.state.lock().unwrap();
        if let Some(b) = st.busy.get_mut(&ws.level) {
            b.0 -= 1;
            b.1 -= bytes_before.min(b.1);
        }
        if req_level == ws.level {
            // Used at its own level: it is wanted. The only idle max-level workspace is
            // kept back from reclaim (btrfs "hides" it the same way).
            let no_idle_max = st.idle.get(&MAX_LEVEL).is_none_or(|v| v.is_empty());
            if ws.level == MAX_LEVEL && no_idle_max {
                ws.in_lru = false;
            } else {
                ws.in_lru = true;
                ws.last_used = self.clock.now();
            }
        }
        st.idle.entry(ws.level).or_default().push(ws);
        st.note_peaks();
        drop(st);
        self.returned.notify_all();
    }

    /// Frees workspaces idle for at least `reclaim_after`; returns how many.
    pub fn reclaim(&self) -> usize {
        let now = self.clock.now();
        let mut st = self.state.lock().unwrap();
        let mut freed = 0;
        for v in st.idle.values_mut() {
            let before = v.len();
            v.retain(|w| !(w.in_lru && now.saturating_sub(w.last_used) >= self.cfg.reclaim_after));
            freed += before - v.len();
        }
        st.total -= freed;
        st.counters.reclaimed += freed as u64;
        freed
    }

    pub fn stats(&self) -> PoolStats {
        let st = self.state.lock().unwrap();
        let mut levels: BTreeMap<i32, LevelStats> = BTreeMap::new();
        let line = |l: i32| LevelStats {
            level: l,
            idle: 0,
            busy: 0,
            bytes: 0,
            estimate: estimate(l, self.cfg.input_size),
        };
        for (l, v) in &st.idle {
            if v.is_empty() {
                continue;
            }
            let e = levels.entry(*l).or_insert_with(|| line(*l));
            e.idle += v.len();
            e.bytes += v.iter().map(|w| w.bytes).sum::<usize>();
        }
        for (l, (n, b)) in &st.busy {
            if *n == 0 {
                continue;
            }
            let e = levels.entry(*l).or_insert_with(|| line(*l));
            e.busy += n;
            e.bytes += b;
        }
        PoolStats {
            max_workspaces: self.cfg.max_workspaces,
            total: st.total,
            bytes: st.bytes(),
            peak_total: st.peak_total,
            peak_bytes: st.peak_bytes,
            levels: levels.into_values().collect(),
            counters: st.counters,
        }
    }
}

thread_local! {
    /// This thread holds a lease (at most one busy workspace per thread).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// A workspace lent to one compression call; it goes back to the pool when dropped, on the
/// thread that took it (hence not `Send`).
pub struct Lease<'a> {
    pool: &'a Pool,
    ws: Option<Ws>,
    level: i32,
    _not_send: PhantomData<*const ()>,
}

impl Lease<'_> {
    /// The context, set to the requested level.
    pub fn compressor(&mut self) -> std::io::Result<&mut Compressor<'static>> {
        let ws = self.ws.as_mut().expect("lease holds a workspace until dropped");
        if ws.set_to != self.level {
            // A call that ran out of output space leaves the context mid-frame, where
            // parameters cannot change: end that session first.
            ws.ctx
                .context_mut()
                .reset(zstd::zstd_safe::ResetDirective::SessionOnly)
                .map_err(|c| std::io::Error::other(zstd::zstd_safe::get_error_name(c)))?;
            ws.ctx.set_compression_level(self.level)?;
            ws.set_to = self.level;
        }
        Ok(&mut ws.ctx)
    }

    /// The level of the workspace itself (≥ the requested level when borrowed).
    pub fn own_level(&self) -> i32 {
        self.ws.as_ref().map_or(self.level, |w| w.level)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(ws) = self.ws.take() {
            self.pool.put(ws, self.level);
        }
        HOLDING.with(|h| h.set(false));
    }
}

static GLOBAL: OnceLock<Pool> = OnceLock::new();

/// Sets up the process-wide pool (once, before the first compression); later calls and
/// calls after first use are ignored and return false.
pub fn configure(cfg: PoolConfig) -> bool {
    let mut set = false;
    GLOBAL.get_or_init(|| {
        set = true;
        Pool::new(cfg, Arc::new(MonotonicClock::new()), Box::new(ZstdAllocator))
    });
    set
}

/// The process-wide pool the zstd codec uses.
pub fn global() -> &'static Pool {
    GLOBAL.get_or_init(|| {
        Pool::new(
            PoolConfig::default(),
            Arc::new(MonotonicClock::new()),
            Box::new(ZstdAllocator),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_testdata::text;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn compress_with(pool: &Pool, level: i32, src: &[u8]) -> usize {
        let mut lease = pool.get(level);
        let mut dst = Vec::with_capacity(src.len() + 1024);
        lease
            .compressor()
            .unwrap()
            .compress_to_buffer(src, &mut dst)
            .unwrap();
        dst.len()
    }

    fn pool(max: usize, clock: Arc<ManualClock>) -> Pool {
        Pool::new(
            PoolConfig {
                max_workspaces: max,
                reclaim_after: RECLAIM_AFTER,
                input_size: 16 << 10,
            },
            clock,
            Box::new(ZstdAllocator),
        )
    }

    #[test]
    fn estimates_grow_with_level() {
        assert!(estimate(1, 128 << 10) < estimate(9, 128 << 10));
        assert!(estimate(9, 128 << 10) < estimate(19, 128 << 10));
        assert!(estimate(3, 128 << 10) < estimate(3, 1 << 20));
    }

    #[test]
    fn the_reserved_max_level_workspace_exists_from_the_start() {
        let p = pool(4, Arc::new(ManualClock::default()));
        let s = p.stats();
        assert_eq!(s.total, 1);
        assert_eq!(s.levels.len(), 1);
        assert_eq!(s.levels[0].level, MAX_LEVEL);
        assert!(s.levels[0].bytes > 0, "tables were allocated up front");
    }

    #[test]
    fn many_threads_at_mixed_levels_never_exceed_the_bound() {
        let p = Arc::new(pool(3, Arc::new(ManualClock::default())));
        let src = text(16 << 10);
        let threads: Vec<_> = (0..12)
            .map(|t| {
                let (p, src) = (p.clone(), src.clone());
                std::thread::spawn(move || {
                    for i in 0..30 {
                        let level = [1, 3, 5, 9, -5, 12][(t + i) % 6];
                        assert!(compress_with(&p, level, &src) < src.len());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = p.stats();
        assert!(s.peak_total <= 3, "{s:?}");
        assert!(s.total <= 3);
        let worst = (1..=MAX_LEVEL).map(|l| estimate(l, 16 << 10)).max().unwrap();
        assert!(s.peak_bytes <= 3 * worst * 2, "{s:?}");
        assert_eq!(s.levels.iter().map(|l| l.busy).sum::<usize>(), 0);
    }

    #[test]
    fn steady_state_reuses_workspaces() {
        let p = pool(4, Arc::new(ManualClock::default()));
        let src = text(16 << 10);
        for level in [1, 3, 9] {
            compress_with(&p, level, &src);
        }
        let warm = p.stats().counters;
        for _ in 0..50 {
            for level in [1, 3, 9] {
                compress_with(&p, level, &src);
            }
        }
        let after = p.stats().counters;
        assert_eq!(after.allocated, warm.allocated, "no new contexts in steady state");
        assert_eq!(after.reused - warm.reused, 150);
    }

    #[test]
    fn a_lower_level_borrows_an_idle_higher_one() {
        let p = pool(1, Arc::new(ManualClock::default()));
        let src = text(16 << 10);
        // Only the reserved level-19 workspace may exist: level 1 borrows it.
        let n = compress_with(&p, 1, &src);
        assert!(n < src.len());
        let s = p.stats();
        assert_eq!(s.counters.borrowed, 1);
        assert_eq!(s.counters.allocated, 1);
        // Borrowed at level 1, the output is level 1's.
        let direct = zstd::bulk::compress(&src, 1).unwrap();
        let mut lease = p.get(1);
        assert_eq!(lease.own_level(), MAX_LEVEL);
        let mut dst = Vec::with_capacity(src.len());
        lease
            .compressor()
            .unwrap()
            .compress_to_buffer(&src, &mut dst)
            .unwrap();
        // (frame header differs only by the checksum flag)
        assert!(
            dst.len().abs_diff(direct.len()) <= 4,
            "{} vs {}",
            dst.len(),
            direct.len()
        );
    }

    #[test]
    fn idle_workspaces_are_reclaimed_after_45_seconds_but_not_the_reserved_one() {
        let clock = Arc::new(ManualClock::default());
        let p = pool(2, clock.clone());
        let src = text(16 << 10);
        compress_with(&p, 3, &src);
        compress_with(&p, 1, &src); // at the bound: borrows level 3's (idle, higher)
        assert_eq!(p.stats().counters.borrowed, 1);
        assert_eq!(p.stats().total, 2);
        clock.advance(Duration::from_secs(44));
        assert_eq!(p.reclaim(), 0);
        assert_eq!(p.stats().total, 2);
        clock.advance(Duration::from_secs(2));
        assert_eq!(p.reclaim(), 1);
        let s = p.stats();
        assert_eq!(s.total, 1);
        assert_eq!(s.levels[0].level, MAX_LEVEL, "the reserved workspace stays");
        assert_eq!(s.counters.reclaimed, 1);
        // Used at its own level, a workspace's idle time starts again.
        compress_with(&p, 5, &src);
        clock.advance(Duration::from_secs(30));
        compress_with(&p, 5, &src);
        clock.advance(Duration::from_secs(30));
        assert_eq!(p.reclaim(), 0);
        clock.advance(Duration::from_secs(16));
        assert_eq!(p.reclaim(), 1);
    }

    #[test]
    fn at_the_bound_an_idle_workspace_of_another_level_makes_room() {
        let p = Arc::new(pool(2, Arc::new(ManualClock::default())));
        let src = text(16 << 10);
        // Another thread keeps the reserved level-19 workspace busy meanwhile.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let p = p.clone();
            std::thread::spawn(move || {
                let _lease = p.get(MAX_LEVEL);
                held_tx.send(()).unwrap();
                done_rx.recv().unwrap();
            })
        };
        held_rx.recv().unwrap();
        // Level 3 is allocated (the second of two). Level 9 cannot borrow 3, and 19 is
        // busy: level 3's workspace is freed for it.
        compress_with(&p, 3, &src);
        compress_with(&p, 9, &src);
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        let s = p.stats();
        assert_eq!(s.total, 2);
        assert_eq!(s.counters.evicted, 1);
        assert!(s.levels.iter().any(|l| l.level == 9));
    }

    #[test]
    #[should_panic(expected = "second zstd workspace")]
    fn a_thread_holds_at_most_one_workspace() {
        let p = pool(4, Arc::new(ManualClock::default()));
        let _first = p.get(3);
        let _second = p.get(5);
    }

    struct FailingAllocator(Arc<AtomicBool>);
    impl Allocator for FailingAllocator {
        fn alloc(&self, level: i32) -> Option<Compressor<'static>> {
            if self.0.load(Ordering::SeqCst) {
                return None;
            }
            ZstdAllocator.alloc(level)
        }
    }

    #[test]
    fn writers_make_progress_on_the_reserved_workspace_when_allocation_fails() {
        let failing = Arc::new(AtomicBool::new(false));
        let p = Arc::new(Pool::new(
            PoolConfig {
                max_workspaces: 8,
                reclaim_after: RECLAIM_AFTER,
                input_size: 16 << 10,
            },
            Arc::new(ManualClock::default()),
            Box::new(FailingAllocator(failing.clone())),
        ));
        // From now on every allocation fails (memory pressure).
        failing.store(true, Ordering::SeqCst);
        let src = text(16 << 10);
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let (p, src) = (p.clone(), src.clone());
                std::thread::spawn(move || {
                    for i in 0..10 {
                        assert!(compress_with(&p, [1, 3, 9][(t + i) % 3], &src) < src.len());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = p.stats();
        assert_eq!(s.total, 1);
        assert_eq!(s.counters.borrowed, 60);
        assert!(s.counters.alloc_failed > 0);
    }
}
