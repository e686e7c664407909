//! A directory's names, while the daemon knows every one of them: LOOKUP misses answered
//! from memory (issue 44, point 4).
//!
//! `tar x`, `cp -r`, `git checkout` and compilers look every name up before they make it;
//! each such LOOKUP is a miss, and without this a backing `openat` that fails. BACKING is
//! this daemon's alone while mounted (issue 16's lock; docs/ARCHITECTURE.md), so a directory
//! whose names it has seen all of — one it made (empty at birth), or one it listed whole —
//! stays known as long as every change of its names goes through the mount, which tells
//! the set ([`super::DirState::names_changed`]).
//!
//! The set holds 64-bit keyed hashes of the names, not the names: ~9–18 bytes a name. A
//! hash present says only "maybe" (the backing is asked, as before); a hash absent is a
//! certain miss. So a collision must never make a present name look absent: a name known
//! to be new whose hash is already there drops the whole set (a collision; odds ~n²/2⁶⁵
//! for n names), and so does anything the daemon cannot account for exactly (a change that
//! failed half-way). A set neither changed through the mount nor learnt for [`FRESH`] (the
//! kernel's entry timeout) is dropped at its next use. Editing BACKING behind a mount is
//! against the rules (docs/ARCHITECTURE.md): a name made so in a directory the mount keeps
//! changing may stay unseen until the directory goes unchanged that long or is forgotten.
//! Sets are learnt only on backing filesystems that look names up exactly as they list
//! them, and not in casefolded or encrypted directories (`ops::names` `names_exact`). The names held across
//! all directories are bounded ([`BUDGET`]); past it, no new set is learnt.

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a set stays in use without a change or a listing.
pub const FRESH: Duration = Duration::from_secs(60);

/// Names held in all sets at most (~36 MB at worst).
pub const BUDGET: usize = 2_000_000;

/// Names held now, over every set of the process.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Names held in all sets (for the statistics file and tests).
pub fn held() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// The hasher of the sets' keys: they are hashes already.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Hashes = HashSet<u64, BuildHasherDefault<Identity>>;

/// A name's key: SipHash with keys random per process, so nobody can make names collide
/// on purpose.
fn key(name: &[u8]) -> u64 {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    KEYS.get_or_init(Default::default).hash_one(name)
}

/// What happened to a directory's names through the mount.
#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    /// A name that did not exist was made (create, mkdir, mknod, symlink, link, a rename
    /// onto a free name).
    Made(&'a [u8]),
    /// A name went (unlink, rmdir, a rename's source).
    Gone(&'a [u8]),
    /// Entries changed but the names stayed (an exchange; a rename onto a name that
    /// existed).
    Kept,
    /// Something the set cannot follow exactly: it is dropped.
    Unknown,
}

struct Names {
    hashes: Hashes,
    touched: Instant,
}

/// One directory's set (`None`: its names are not all known).
#[derive(Default)]
pub struct KnownNames(Mutex<Option<Names>>);

impl KnownNames {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Names>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `name` is certainly not in the directory.
    pub fn absent(&self, name: &[u8]) -> bool {
        let mut g = self.lock();
        match g.as_ref() {
            Some(n) if n.touched.elapsed() < FRESH => !n.hashes.contains(&key(name)),
            Some(_) => {
                drop_set(&mut g);
                false
            }
            None => false,
        }
    }

    /// Whether the set is in use.
    #[cfg(test)]
    pub fn known(&self) -> bool {
        self.lock().is_some()
    }

    /// The names are exactly `names`, if `still` says, under the set's lock, that no change
    /// went between the caller's reading them and now (`DirState`'s generation: a change
    /// moves it before it tells the set). Collisions among them, or a full budget, leave
    /// the directory unknown.
    pub(super) fn learn<'a>(
        &self,
        still: impl FnOnce() -> bool,
        names: impl ExactSizeIterator<Item = &'a [u8]>,
    ) {
        let n = names.len();
        if HELD.fetch_add(n, Ordering::Relaxed) + n > BUDGET {
            HELD.fetch_sub(n, Ordering::Relaxed);
            return;
        }
        // Hashed before the lock: LOOKUPs in a large directory do not wait for it.
        let mut hashes = Hashes::with_capacity_and_hasher(n, Default::default());
        for name in names {
            if !hashes.insert(key(name)) {
                HELD.fetch_sub(n, Ordering::Relaxed);
                return; // a collision (or a name listed twice): stays unknown
            }
        }
        let mut g = self.lock();
        if !still() {
            HELD.fetch_sub(n, Ordering::Relaxed);
            return;
        }
        drop_set(&mut g);
        *g = Some(Names {
            hashes,
            touched: Instant::now(),
        });
    }

    /// Follows a change made through the mount (after the backing call succeeded, and
    /// after the directory's generation moved: see `DirState::names_changed`).
    pub(super) fn change(&self, c: Change<'_>) {
        let mut g = self.lock();
        let Some(n) = g.as_mut() else { return };
        match c {
            Change::Made(name) => {
                if HELD.fetch_add(1, Ordering::Relaxed) >= BUDGET || !n.hashes.insert(key(name)) {
                    HELD.fetch_sub(1, Ordering::Relaxed);
                    drop_set(&mut g); // over budget, or a collision
                    return;
                }
            }
            Change::Gone(name) => {
                if n.hashes.remove(&key(name)) {
                    HELD.fetch_sub(1, Ordering::Relaxed);
                }
                // A directory emptied gives its memory back.
                if n.hashes.capacity() > 64 && n.hashes.len() * 4 < n.hashes.capacity() {
                    n.hashes.shrink_to_fit();
                }
            }
            Change::Kept => {}
            Change::Unknown => {
                drop_set(&mut g);
                return;
            }
        }
        n.touched = Instant::now();
    }
}

fn drop_set(g: &mut Option<Names>) {
    if let Some(n) = g.take() {
        HELD.fetch_sub(n.hashes.len(), Ordering::Relaxed);
    }
}

impl Drop for KnownNames {
    fn drop(&mut self) {
        drop_set(&mut self.lock());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_directory_answers_misses_and_follows_changes() {
        let k = KnownNames::default();
        assert!(!k.absent(b"a"), "unknown: ask the backing");
        k.learn(|| true, [&b"a"[..], b"b"].into_iter());
        assert!(!k.absent(b"a") && !k.absent(b"b"));
        assert!(k.absent(b"c"));
        k.change(Change::Made(b"c"));
        assert!(!k.absent(b"c"));
        k.change(Change::Gone(b"a"));
        assert!(k.absent(b"a"));
        k.change(Change::Unknown);
        assert!(!k.absent(b"zzz") && !k.known());
    }

    #[test]
    fn a_name_made_twice_is_a_collision_and_drops_the_set() {
        let k = KnownNames::default();
        k.learn(|| true, [&b"a"[..]].into_iter());
        k.learn(|| false, [&b"b"[..]].into_iter());
        assert!(k.absent(b"b"), "a listing that raced a change is not learnt");
        // "Made" means new: its hash present can only be another name's.
        k.change(Change::Made(b"a"));
        assert!(!k.known());
        // Listed twice: never learnt.
        k.learn(|| true, [&b"x"[..], b"x"].into_iter());
        assert!(!k.known());
    }
}
