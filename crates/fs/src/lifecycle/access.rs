//! How an operation reaches a file's container: the shared one in memory
//! ([`Files::with_container`], [`Files::change_data`]), one opened for the operation alone
//! and dropped (`stateless`), or one opened now and kept like a lookup's (`with_kept`,
//! rule 6); and the background pass's access ([`Files::scan`], [`Files::quiet`]).

use std::sync::Arc;

use fuser::Errno;
use squeezefs_container::{Container, FileStorage, WriteBack};

use super::commit::Ticketed;
use super::state::{Closed, OpenFile};
use super::Files;
use crate::inode::Inode;

impl Files {
    /// Runs `f` on the file's container: the shared one in memory (rule 2 of
    /// [`state`](super::state) when nobody has it open), or a temporary one flushed and
    /// closed afterwards. `f` must not change the file's data (that is
    /// [`Files::change_data`]): times set explicitly are put back if it writes (rule 7).
    pub fn with_container<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        self.run(inode, Change::None, f, what)
    }

    /// [`Files::with_container`] for a change of the file's data (a write, a truncate, an
    /// fallocate): times set explicitly before it are forgotten (rule 7).
    pub fn change_data<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        self.run(inode, Change::Data, f, what)
    }

    pub(super) fn run<T>(
        &self,
        inode: &Arc<Inode>,
        change: Change,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        let changes_data = !matches!(change, Change::None);
        let mut open = inode.file.open.lock().unwrap();
        if changes_data {
            // Rule 11. Returns at once: a writer's WRITE finds no store (none is taken while
            // a writer exists), and a truncate came through `hold_spills` first.
            open = self.wait_spills(inode, open);
        }
        if let Some(of) = open.as_mut() {
            if matches!(change, Change::Data) {
                of.times = of.times.forgotten(of.meta.is_set());
            } else if matches!(change, Change::KernelWrite) {
                of.pin_kernel_mtime();
            } else if of.meta_waits() {
                // Times, owner and mode waiting to go on the backing file go first: an
                // fsync then makes them durable with the rest (rule 7).
                self.keep_times(inode, of);
            }
            let r = f(&mut of.container).map_err(|e| self.error(inode, what, e));
            let mut queue = None;
            let mut flushed = Ok(());
            if r.is_ok() && of.handles == 0 && !of.container.commit_pending() {
                match of.container.write_back() {
                    Ok(WriteBack::Commit(t)) => {
                        of.container.drop_cache();
                        queue = Some(Ticketed::Commit(t));
                    }
                    // Replaced copies to remove after a sync: the group commit does it
                    // (kept containers are not closed while they wait: `Kept::trim`).
                    Ok(WriteBack::Settle(t)) => queue = Some(Ticketed::Settle(t)),
                    Ok(WriteBack::Done) => {}
                    Err(e) => flushed = Err(self.error(inode, "flush", e)),
                }
            }
            self.keep_times(inode, of);
            drop(open);
            if let (Some(t), Some(ino)) = (queue, self.inodes.number(inode)) {
                self.committer.push(ino, inode.clone(), t);
            }
            let r = r?;
            flushed?;
            return Ok(r);
        }
        drop(open);
        let _private = inode.file.share();
        let before = inode.file.open.lock().unwrap().closed.clone();
        let (r, closed) = self.stateless(inode, f, what);
        #[cfg(test)]
        tests_pause::at(inode);
        if let Some(closed) = closed {
            let mut slot = inode.file.open.lock().unwrap();
            // A state may have come and gone meanwhile (an open, a write, a close), and
            // said what `stat` shows since: this container's word, from before, must not
            // replace it, nor may that one stay if it did not see this change. Then the
            // next `stat` reads the file again.
            slot.closed = if slot.closed == before { closed } else { None };
        }
        r
    }

    /// `f` on a container opened for it alone (the file has no state), flushed and dropped
    /// afterwards; with what its superblock says then, for the caller to remember for
    /// `stat`, even after an error (the superblock may keep times by then): `Some(None)`
    /// when that cannot be read (forget what was remembered), `None` when no container
    /// opened (what was remembered stays). The caller holds
    /// [`FileState::share`](super::state::FileState::share) or `exclusive` (the
    /// background pass also holds the file's lock, `open`, which this never takes).
    fn stateless<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> (Result<T, Errno>, Option<Option<Closed>>) {
        let mut c = match self.open_container(inode) {
            Ok(c) => c,
            Err(e) => return (Err(e), None),
        };
        let r = f(&mut c)
            .and_then(|r| c.flush().map(|()| r))
            .map_err(|e| self.error(inode, what, e));
        (r, Some(Closed::of(&c)))
    }

    /// The background pass's look at a file (`crate::background`): `f` on its container,
    /// read only, with the pass's exclusion (`FileState::exclusive`) and the file's lock held,
    /// whether or not the file is in use. A file with no state gets a container for `f`
    /// alone.
    pub fn scan<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&Container<FileStorage>) -> T,
    ) -> Result<T, Errno> {
        let _private = inode.file.exclusive();
        let mut open = inode.file.open.lock().unwrap();
        if let Some(of) = open.as_ref() {
            return Ok(f(&of.container));
        }
        // (`open` stays held: no state appears beside this container.)
        let (r, closed) = self.stateless(inode, |c| Ok(f(c)), "look");
        if let Some(closed) = closed {
            open.closed = closed;
        }
        r
    }

    /// The background pass's access to a file (`crate::background`): `f` on its
    /// container while nobody else can use it, or `None`, doing nothing, when the file is
    /// in use: open (a writer, a reader, a lazy handle), holding bytes not written out, or
    /// with a commit or settle queued. No handle can come while `f` runs (attaching takes
    /// the file's lock), and no container of its own either (`FileState::share`). A file
    /// with no state gets a container for `f` alone, dropped after it.
    pub fn quiet<T>(
        &self,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<Option<T>, Errno> {
        let _private = inode.file.exclusive();
        let mut open = inode.file.open.lock().unwrap();
        if open.lazy > 0 {
            return Ok(None);
        }
        if let Some(of) = open.as_mut() {
            let c = &of.container;
            if of.handles > 0 || c.dirty_bytes() > 0 || c.commit_pending() || c.settle_pending() {
                return Ok(None);
            }
            let r = f(&mut of.container).map_err(|e| self.error(inode, what, e));
            self.keep_times(inode, of);
            if of.container.needs_reopen() {
                // A relayout's switch failed half way: only the disk says which layout is
                // current. Nothing is held (no handle, nothing dirty or queued), so the
                // state goes and the next use opens the file again. What `stat` remembers
                // of the closed file goes too: it came from memory, or from before.
                open.closed = None;
                **open = None;
            }
            return r.map(Some);
        }
        // (`open` stays held: no state appears beside this container.)
        let (r, closed) = self.stateless(inode, f, what);
        if let Some(closed) = closed {
            open.closed = closed;
        }
        r.map(Some)
    }

    /// `f` on a container opened now for a file with no state; its size is remembered and
    /// the container kept like a lookup's (rule 6) for the `open` or READ that follows.
    ///
    /// The file's lock (`open`) is held from the opening to the keeping: any other call on
    /// the file meanwhile waits, then finds this container as the file's state. (It was
    /// taken only to keep the container: a `run` on the file in between found no state
    /// and opened a second container, whose change — kept times dropped by a chmod — the
    /// first did not see, and `stat` showed the stale kept change time from then on.)
    pub(super) fn with_kept<T>(
        &self,
        ino: u64,
        inode: &Arc<Inode>,
        f: impl FnOnce(&mut Container<FileStorage>) -> Result<T, squeezefs_container::Error>,
        what: &str,
    ) -> Result<T, Errno> {
        // Until the container is a state (or dropped): what it knows of the halves must
        // not go stale under a background pass.
        let private = inode.file.share();
        let mut open = inode.file.open.lock().unwrap();
        if open.is_some() {
            // A state came since the caller looked: it is the file's container.
            drop(open);
            drop(private);
            return self.with_container(inode, f, what);
        }
        let mut c = self.open_container(inode)?;
        let r = f(&mut c).map_err(|e| self.error(inode, what, e))?;
        #[cfg(test)]
        tests_pause::at(inode);
        open.closed = Closed::of(&c);
        **open = Some(OpenFile::new(c, 0, 0));
        drop(open);
        drop(private);
        self.idle
            .queue
            .lock()
            .unwrap()
            .push_back((ino, Arc::downgrade(inode)));
        self.idle
            .trim(self.idle.max.load(std::sync::atomic::Ordering::Relaxed));
        Ok(r)
    }
}

/// Tests: a pause in [`Files::with_kept`] between opening its container and keeping it,
/// for one inode (the window a call of the file from another thread raced into).
#[cfg(test)]
pub(super) mod tests_pause {
    use std::sync::{mpsc, Arc, Mutex};

    use crate::inode::Inode;

    /// The inode (its address) whose `with_kept` pauses, and whom to tell it has.
    static PAUSE: Mutex<Option<(usize, mpsc::Sender<()>)>> = Mutex::new(None);

    /// From now on `with_kept` of `inode` pauses for `PAUSE_FOR` after opening its
    /// container, and a no-state `run` after its call, and says so on the returned
    /// channel.
    pub fn arm(inode: &Arc<Inode>) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        *PAUSE.lock().unwrap() = Some((Arc::as_ptr(inode) as usize, tx));
        rx
    }

    pub const PAUSE_FOR: std::time::Duration = std::time::Duration::from_millis(300);

    pub(in crate::lifecycle) fn at(inode: &Arc<Inode>) {
        let tx = PAUSE
            .lock()
            .unwrap()
            .as_ref()
            .filter(|(p, _)| *p == Arc::as_ptr(inode) as usize)
            .map(|(_, tx)| tx.clone());
        if let Some(tx) = tx {
            let _ = tx.send(());
            std::thread::sleep(PAUSE_FOR);
        }
    }
}

/// What a call on a file's container changes, for its times (rule 7).
#[derive(Clone, Copy)]
pub(super) enum Change {
    /// Nothing: times set and not on the backing file yet go on it first.
    None,
    /// The data (a truncate, an fallocate): times set explicitly are forgotten.
    Data,
    /// The data, by a WRITE of the kernel's writeback cache: the kernel keeps the file's
    /// mtime and sends a new one (SETATTR) whenever its own moved, so the times are kept,
    /// the backing file's mtime pinned when none is set.
    KernelWrite,
}
