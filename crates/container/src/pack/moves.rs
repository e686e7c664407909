//! Which files each batch of reclaim moved, for the last batches: what was read of a
//! record before some batches ran stays true when none of them moved that file.
//!
//! Reclaim replaces a file's location record when it moves the file's bytes (and may add
//! the change time it showed, version 3). Whoever read a record at [`super::Packs::moves`]
//! `= n` used to treat what it read as stale once the count moved on, whatever file the
//! move touched: every `stat` of an open packed file read its record again, and every
//! closed packed file's remembered state was dropped (its next `stat` opened a container).
//! The log answers the precise question instead: did a batch after `n` move *this* file
//! (its backing file's device and inode)?
//!
//! It forgets the oldest batches past [`LOG_BATCHES`] or [`LOG_FILES`] files: a question
//! reaching further back, about a batch not finished yet, or about a batch that moved a
//! file it could not identify, is answered "moved" (read the record again), never "not
//! moved" wrongly.

use std::collections::{HashSet, VecDeque};

/// Batches remembered at most.
pub const LOG_BATCHES: usize = 64;
/// Files remembered over all batches at most (some 1.5 MiB at worst).
pub const LOG_FILES: usize = 1 << 16;

/// A file's backing (device, inode).
pub type FileId = (u64, u64);

/// The moves of the last batches (see the module).
#[derive(Debug, Default)]
pub struct MoveLog {
    /// The batch number of `batches[0]` (batches are numbered from 1, as
    /// [`super::Packs::moves`] counts them).
    first: u64,
    /// Each batch's moved files from `first` on; `None` while the batch runs, or when it
    /// moved a file it could not identify.
    batches: VecDeque<Option<HashSet<FileId>>>,
    /// Files held over all batches.
    files: usize,
}

impl MoveLog {
    /// Batch `n` begins (`n` is one more than the last batch begun).
    pub fn begin(&mut self, n: u64) {
        if self.batches.is_empty() {
            self.first = n;
        }
        debug_assert_eq!(self.first + self.batches.len() as u64, n);
        self.batches.push_back(None);
        self.trim();
    }

    /// Batch `n` ended having moved `ids` (`None`: one it could not identify).
    pub fn finish(&mut self, n: u64, ids: Option<HashSet<FileId>>) {
        let Some(i) = n.checked_sub(self.first).map(|i| i as usize) else {
            return;
        };
        if let Some(slot) = self.batches.get_mut(i) {
            self.files += ids.as_ref().map_or(0, HashSet::len);
            *slot = ids;
            self.trim();
        }
    }

    /// Whether a batch numbered above `since`, up to `upto`, may have moved `id`.
    pub fn moved(&self, id: FileId, since: u64, upto: u64) -> bool {
        if upto <= since {
            return false;
        }
        if since + 1 < self.first || upto >= self.first + self.batches.len() as u64 {
            // Forgotten, or not begun here yet: unknown.
            return true;
        }
        let from = (since + 1 - self.first) as usize;
        let to = (upto - self.first) as usize;
        self.batches
            .range(from..=to)
            .any(|b| b.as_ref().is_none_or(|ids| ids.contains(&id)))
    }

    fn trim(&mut self) {
        while self.batches.len() > LOG_BATCHES || (self.files > LOG_FILES && self.batches.len() > 1) {
            let old = self.batches.pop_front().flatten();
            self.files -= old.map_or(0, |ids| ids.len());
            self.first += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        /// A batch that moves these files (of a small set), or an unidentified one.
        Batch(Option<Vec<u8>>),
        /// A batch begun and not finished when the next question comes.
        Running,
        /// Did a batch after `since` batches ago move this file?
        Ask(u8, u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => proptest::option::weighted(0.9, proptest::collection::vec(0u8..12, 0..6)).prop_map(Step::Batch),
            1 => Just(Step::Running),
            4 => (0u8..12, 0u8..80).prop_map(|(f, back)| Step::Ask(f, back)),
        ]
    }

    fn id(f: u8) -> FileId {
        (7, u64::from(f))
    }

    proptest! {
        /// Model: the full history of batches. The log never answers "not moved" for a
        /// file a batch in the range moved (or may have: unidentified, still running), and
        /// answers exactly within what it remembers.
        #[test]
        fn the_log_never_hides_a_move(steps in proptest::collection::vec(step(), 1..200)) {
            let mut log = MoveLog::default();
            // history[i]: batch i + 1; None = unknown (running or unidentified).
            let mut history: Vec<Option<HashSet<FileId>>> = Vec::new();
            let mut running: Option<u64> = None;
            for s in steps {
                match s {
                    Step::Batch(files) => {
                        if let Some(n) = running.take() {
                            log.finish(n, None);
                        }
                        let n = history.len() as u64 + 1;
                        log.begin(n);
                        let ids = files.map(|f| f.into_iter().map(id).collect::<HashSet<_>>());
                        history.push(ids.clone());
                        log.finish(n, ids);
                    }
                    Step::Running => {
                        if let Some(n) = running.take() {
                            log.finish(n, None);
                        }
                        let n = history.len() as u64 + 1;
                        log.begin(n);
                        history.push(None);
                        running = Some(n);
                    }
                    Step::Ask(f, back) => {
                        let upto = history.len() as u64;
                        let since = upto.saturating_sub(u64::from(back));
                        let truth = history[since as usize..upto as usize]
                            .iter()
                            .any(|b| b.as_ref().is_none_or(|ids| ids.contains(&id(f))));
                        let said = log.moved(id(f), since, upto);
                        prop_assert!(said || !truth, "a move hidden: file {f} since {since}");
                        if since + 1 >= log.first {
                            prop_assert_eq!(said, truth);
                        }
                        // A count read before a batch that has not begun in the log yet.
                        prop_assert!(log.moved(id(f), since, upto + 1));
                    }
                }
                prop_assert!(log.batches.len() <= LOG_BATCHES);
            }
        }
    }

    #[test]
    fn many_files_are_forgotten_oldest_first() {
        let mut log = MoveLog::default();
        let per = LOG_FILES / 4 + 1;
        for n in 1..=5u64 {
            log.begin(n);
            log.finish(n, Some((0..per as u64).map(|i| (n, i)).collect()));
        }
        assert!(log.files <= LOG_FILES);
        // The first batches are forgotten: anything read before them is stale.
        assert!(log.moved((9, 9), 0, 5));
        // The last ones are remembered exactly.
        assert!(!log.moved((9, 9), 3, 5));
        assert!(log.moved((5, 0), 3, 5));
        assert!(!log.moved((5, 0), 5, 5));
    }
}
