//! Reclaiming pack garbage while mounted: a background thread runs a round every
//! `pack_gc=SECS` when files were packed, removed or renamed since the last one; a
//! `setxattr user.squeezefs.reclaim` on the mount's root runs one at once.
//!
//! A round is [`squeezefs_container::pack::tree::reclaim_tree`] over the backing root (its
//! walk goes through `/proc/self/fd/N`, which works even when the mount covers the backing
//! directory), with three rules that make it safe beside the mount's own writes:
//!
//! 1. **Victims come from [`Packs::reclaimable`]**: not the pack being appended to, and no
//!    slot placed in them still waits for its record. A record naming such a pack can then
//!    only disappear (the file rewritten or removed), or be replaced by reclaim itself.
//! 2. **Records are replaced under [`Packs::records`] held exclusively** (see
//!    `pack/reclaim.rs`), and containers set theirs under it shared, so reclaim never puts
//!    back an older location over one a container just set. A container that read its
//!    record before the move finds the new one when the old pack is gone (same generation
//!    and checksum: `container/packing.rs`).
//! 3. **A rename or link could hide a file from the walk** (moved from a directory not yet
//!    read into one already read). Renames and links take [`Packs::records`] shared and,
//!    while a round runs, log what they moved: a regular file's pack is kept this round; a
//!    directory, or a file whose record cannot be read, aborts the round's removals. The
//!    round decides (`settle`) under the lock held exclusively, so no rename slips between
//!    the decision and the removal.
//!
//! 4. **A container whose bytes are not loaded pins its pack** (`Packs::pin`): the file may
//!    have no name the walk could find (open, then unlinked). Kept containers (opened for a
//!    lookup) are closed before a round so they do not hold packs back for nothing.
//!
//! I/O is bounded per round ([`BUDGET`] of live bytes moved, packs with the most garbage
//! first) and over time (background rounds wait [`PACE`] times the last one's duration);
//! writers wait for [`Packs::records`] only while one batch's records are replaced.

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLockReadGuard};
use std::time::{Duration, Instant};

use squeezefs_codec::CodecSpec;
use squeezefs_container::pack::reclaim::{Reclaimed, Settle};
use squeezefs_container::pack::record::read_record;
use squeezefs_container::pack::tree::{
    reclaim_tree, repack_tree, Repacked, Targets, TreeReclaim, TreeRepack, REPACK_BUDGET,
};
use squeezefs_container::pack::{Lane, Packs};
use squeezefs_container::FileStorage;

use crate::lifecycle::Kept;
use crate::sys;

/// Live bytes of packed files one round moves at most.
pub const BUDGET: u64 = 64 << 20;

/// Background rounds wait at least this many times the last round's duration.
pub const PACE: u32 = 20;

/// What renames and links did while a round ran.
#[derive(Default)]
struct Moved {
    packs: BTreeSet<u32>,
    /// Why the walk may have missed a file (a directory moved, a record unreadable).
    unsafe_why: Option<String>,
}

/// The last round, for `getxattr user.squeezefs.reclaim` and the log.
#[derive(Debug, Clone, Default)]
pub struct LastRound {
    pub at: Option<std::time::SystemTime>,
    pub seconds: f64,
    pub files_moved: u64,
    pub packs_removed: u64,
    pub bytes_freed: u64,
    /// Why nothing was removed although packs were picked (a rename during the round).
    pub note: Option<String>,
    pub error: Option<String>,
}

pub struct Reclaimer {
    packs: Arc<Packs>,
    /// Kept open: `root` names it through /proc.
    _root: std::fs::File,
    root: PathBuf,
    /// A round is under way (set and cleared under `packs.records()` held exclusively).
    active: AtomicBool,
    moved: Mutex<Moved>,
    /// One round at a time.
    running: Mutex<()>,
    /// Removals seen (a round is worth running when files were packed or removed since the
    /// last one).
    pub changes: AtomicU64,
    last_seen: AtomicU64,
    pub last: Mutex<LastRound>,
    stop: (Mutex<bool>, Condvar),
    /// Containers kept after a lookup: closed before a round (a kept container that has not
    /// read its bytes pins its pack).
    kept: Arc<Kept>,
    /// Called before each round picks its packs, with no lock held: new files whose names
    /// are pending (`crate::ns`) sit in the private directory, which the walk skips, so
    /// their names are applied first (a file packed after that goes to the open pack,
    /// which no round takes: rule 1).
    before_round: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Reclaimer {
    /// A reclaimer of `packs`, whose backing root `root` is (opened before the mount covers
    /// it).
    pub fn new(packs: Arc<Packs>, root: std::fs::File, kept: Arc<Kept>) -> Reclaimer {
        use std::os::fd::AsRawFd;
        let path = PathBuf::from(format!("/proc/self/fd/{}", root.as_raw_fd()));
        Reclaimer {
            packs,
            _root: root,
            root: path,
            active: AtomicBool::new(false),
            moved: Mutex::new(Moved::default()),
            running: Mutex::new(()),
            changes: AtomicU64::new(0),
            last_seen: AtomicU64::new(0),
            last: Mutex::new(LastRound::default()),
            stop: (Mutex::new(false), Condvar::new()),
            kept,
            before_round: std::sync::OnceLock::new(),
        }
    }

    /// Sets what runs before each round picks its packs (see `before_round`).
    pub fn set_before_round(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.before_round.set(f);
    }

    fn before_round(&self) {
        if let Some(f) = self.before_round.get() {
            f();
        }
    }

    /// Held by a rename or link around the system call and [`Reclaimer::note_moved`] (rule 3).
    pub fn namespace_guard(&self) -> RwLockReadGuard<'_, ()> {
        self.packs.records().read().unwrap()
    }

    /// After a rename or link made `name` in `dir` (under [`Reclaimer::namespace_guard`]):
    /// while a round runs, what it moved is logged.
    pub fn note_moved(&self, dir: impl AsFd, name: &CStr) {
        // (A rename makes no garbage by itself: it does not count as a change.)
        if !self.active.load(Ordering::SeqCst) {
            return;
        }
        let why = match self.pack_of(dir, name) {
            Ok(Some(pack)) => {
                self.moved.lock().unwrap().packs.insert(pack);
                return;
            }
            Ok(None) => return,
            Err(why) => why,
        };
        self.moved.lock().unwrap().unsafe_why.get_or_insert(why);
    }

    /// The pack a moved entry's record names (`None`: not a packed file); an error when the
    /// walk may have missed files below it (a directory) or its record cannot be read.
    fn pack_of(&self, dir: impl AsFd, name: &CStr) -> Result<Option<u32>, String> {
        let what = name.to_string_lossy();
        let fd = sys::open_path(dir, name).map_err(|e| format!("{what} moved, then: {e}"))?;
        let st = sys::fstat(&fd).map_err(|e| format!("{what} moved, then: {e}"))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Err(format!("directory {what} was moved during the round")),
            libc::S_IFREG => {
                let f = sys::reopen(&fd, libc::O_RDONLY).map_err(|e| format!("{what} moved, then: {e}"))?;
                match read_record(&FileStorage::new(f)) {
                    Ok(r) => Ok(r.filter(|l| l.len > 0).map(|l| l.pack)),
                    Err(e) => Err(format!("{what} moved, its record: {e}")),
                }
            }
            _ => Ok(None),
        }
    }

    /// Files packed or removed so far.
    /// Changes that may have made pack garbage: removals and renames, files packed, and
    /// records set or removed by commits — which come after a file's append, so a round
    /// that ran between the two is followed by another once the commit made the file's
    /// old bytes garbage.
    fn activity(&self) -> u64 {
        let c = &self.packs.counters;
        self.changes.load(Ordering::Relaxed)
            + c.files_packed.load(Ordering::Relaxed)
            + c.records_changed.load(Ordering::Relaxed)
    }

    /// A file was removed (its pack bytes may be garbage now).
    pub fn note_removed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs one round now (waiting for one under way to finish).
    pub fn round(&self) -> LastRound {
        let _one = self.running.lock().unwrap();
        let seen = self.activity();
        let t = Instant::now();
        let r = self.run();
        // The round's own appends are not news for the next one.
        let moved = match &r {
            Ok(Some(rc)) => rc.files_moved,
            _ => 0,
        };
        self.last_seen.store(seen + moved, Ordering::Relaxed);
        let mut last = LastRound {
            at: Some(std::time::SystemTime::now()),
            seconds: t.elapsed().as_secs_f64(),
            ..LastRound::default()
        };
        match r {
            Ok(Some(rc)) => {
                last.files_moved = rc.files_moved;
                last.packs_removed = rc.packs_removed.len() as u64;
                last.bytes_freed = rc.bytes_freed;
                last.note = rc.aborted.clone();
                for (name, why) in &rc.left {
                    log::warn!("pack reclaim: {name} left in its pack ({why})");
                }
                if rc.files_moved > 0 || !rc.packs_removed.is_empty() {
                    log::info!(
                        "reclaimed {} B of pack garbage while mounted ({} files moved, {} packs removed) in {:.1} s",
                        rc.bytes_freed,
                        rc.files_moved,
                        rc.packs_removed.len(),
                        last.seconds
                    );
                }
                if let Some(why) = &rc.aborted {
                    log::info!("pack reclaim round kept its packs: {why}; the next round tries again");
                }
            }
            Ok(None) => {}
            Err(e) => {
                log::warn!("pack reclaim round failed: {e}");
                last.error = Some(e);
            }
        }
        *self.last.lock().unwrap() = last.clone();
        last
    }

    /// A round asked for (`setxattr user.squeezefs.reclaim` on the root, which `squeezefs
    /// compress` does at its end on a mount): the packs both lanes append to are retired
    /// first, so the garbage the files just rewritten left in the pack in use is reclaimed
    /// now, not once that pack is full or the mount ends. `commit_now` runs first: it
    /// writes the records of closed files, whose slots keep their pack out of a round.
    pub fn asked_round(&self, commit_now: impl FnOnce()) -> LastRound {
        commit_now();
        self.packs.retire(Lane::Written);
        self.packs.retire(Lane::Repacked);
        self.round()
    }

    fn run(&self) -> Result<Option<Reclaimed>, String> {
        self.before_round();
        self.kept.close_all();
        let only = self.packs.reclaimable().map_err(|e| e.to_string())?;
        if only.is_empty() {
            return Ok(None);
        }
        self.begin_round();
        let mut settle = || self.settle();
        let r = reclaim_tree(
            &self.root,
            &self.packs,
            TreeReclaim {
                only: Some(only),
                budget: Some(BUDGET),
                repair: false,
                settle: &mut settle,
            },
        );
        self.active.store(false, Ordering::SeqCst);
        r
    }

    /// The background pass's round (`tree::repack_tree`): packed files not at their
    /// target moved to 1 MiB blocks at it, under the same rules as a garbage round (a
    /// rename during it is logged, the lock is the same, one round at a time, and the packs
    /// it may take are asked before its walk). A pack being appended to that holds pending
    /// files is retired after it (`Packs::retire_any`), so the next round can take it.
    /// `pace` is asked before each batch.
    pub fn repack(
        &self,
        targets: &dyn Targets,
        mount_target: Option<CodecSpec>,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<Repacked>, String> {
        let _one = self.running.lock().unwrap();
        self.before_round();
        self.kept.close_all();
        // Rule 1: the packs a round may take are known before its walk.
        let free = self.packs.reclaimable().map_err(|e| e.to_string())?;
        self.begin_round();
        let mut settle = || self.settle();
        let r = repack_tree(
            &self.root,
            &self.packs,
            TreeRepack {
                targets,
                mount_target,
                free,
                budget: REPACK_BUDGET,
                pace,
                settle: &mut settle,
            },
        );
        self.active.store(false, Ordering::SeqCst);
        // The pack the pass appended to is done with (its garbage can be reclaimed), and
        // the files written last may be in the pack the mount appends to: both lanes'
        // next blocks start new packs, so the next round can take these.
        self.packs.retire(Lane::Repacked);
        if let Ok(Some(rp)) = &r {
            self.packs.retire_any(&rp.busy_packs);
        }
        if let Ok(Some(Repacked { moved: Some(rc), .. })) = &r {
            for (name, why) in &rc.left {
                log::warn!("background pass: {name} left in its pack ({why})");
            }
            if let Some(why) = &rc.aborted {
                log::info!("background pass: repacked packs kept this round: {why}");
            }
            // (Its own appends are not news for the garbage rounds.)
            self.last_seen.fetch_add(rc.files_moved, Ordering::Relaxed);
        }
        r
    }

    /// A round starts: renames and links log what they move from here on (rule 3), set
    /// under `packs.records()` held exclusively, so none is in flight.
    fn begin_round(&self) {
        let _records = self.packs.records().write().unwrap();
        *self.moved.lock().unwrap() = Moved::default();
        self.active.store(true, Ordering::SeqCst);
    }

    /// `settle` for a round: called with `packs.records()` held exclusively, so no rename
    /// is in flight.
    fn settle(&self) -> Settle {
        self.active.store(false, Ordering::SeqCst);
        let m = std::mem::take(&mut *self.moved.lock().unwrap());
        match m.unsafe_why {
            Some(why) => Settle::Abort(why),
            None => Settle::RemoveExcept(m.packs),
        }
    }

    /// Runs a round every `every` while something changed since the last one, until
    /// [`Reclaimer::stop`]; never more than 1/[`PACE`] of the time (a walk of a big tree
    /// takes a while).
    pub fn start(self: &Arc<Self>, every: Duration) -> std::io::Result<std::thread::JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("pack-reclaim".into())
            .spawn(move || loop {
                {
                    let last = Duration::from_secs_f64(me.last.lock().unwrap().seconds);
                    let wait = every.max(last * PACE);
                    let (lock, cv) = &me.stop;
                    let stopped = cv
                        .wait_timeout_while(lock.lock().unwrap(), wait, |s| !*s)
                        .unwrap()
                        .0;
                    if *stopped {
                        return;
                    }
                }
                if me.activity() != me.last_seen.load(Ordering::Relaxed) {
                    me.round();
                }
            })
    }

    /// Stops the background thread (it finishes a round under way first).
    pub fn stop(&self) {
        *self.stop.0.lock().unwrap() = true;
        self.stop.1.notify_all();
    }
}
