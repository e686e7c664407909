//! The clean mark: `.squeezefs-packs/.probe-clean`, written at unmount to say "no pack was above
//! the reclaim threshold when this daemon stopped, and these were the packs", so the next
//! unmount may leave the walk of the whole tree out when its mount made no garbage.
//!
//! Why: reclaiming garbage at unmount means reading every file's record (a walk of the
//! tree). On a network backing that is a round trip a file — seconds for a tree that was
//! only extracted, when the walk finds nothing to do. A mount knows what it did: the pack
//! counters say whether any bytes it appended were left unnamed, whether a commit replaced
//! or removed a record, and the filesystem whether a file that may have been packed lost
//! its last name ([`super::Packs::made_no_garbage`]). What it cannot know is what came
//! before it: a crash (slots appended and never named, torn tails), an unmount whose walk
//! was cut by its budget or could not read a record, an offline tool that rewrote files.
//! The mark says the state it started from was clean.
//!
//! The rules, so a mark is never stale:
//! - Every process that may change records or packs takes the mark away first, durably,
//!   before it changes anything ([`super::Packs::take_clean_mark`]): a read-write mount
//!   before it serves a request, `compress` and `check --repair` of a backing directory.
//!   A crash after that leaves no mark.
//! - Only an unmount writes it, after its last file is written out, when its walk ran to
//!   the end (every record read, every pack above the threshold reclaimed) or when its
//!   mount started from a valid mark and made no garbage.
//! - A mark is valid only when it names exactly the packs present with their lengths (a
//!   pack appended to, torn, added or removed since makes it stale).
//!
//! What it does not see: files removed from or written into BACKING directly while nothing
//! is mounted. Their garbage is reclaimed by the next unmount that walks (any mount that
//! removes or rewrites a packed file) or by `squeezefs check --repair`.

use std::io;
use std::sync::atomic::Ordering;

use xxhash_rust::xxh3::xxh3_64;

/// The mark's file name in the pack directory. A probe file's name (`dir::PROBE_PREFIX`):
/// every older squeezefs skips those there (a name it did not know would make its tree
/// walks take the pack directory for a directory of files, and an offline `compress`
/// rewrite the packs themselves).
pub const MARK_NAME: &str = ".probe-clean";

/// How the name of a mark being written begins (`.probe-clean-PID`, renamed over
/// [`MARK_NAME`] once synced; one a crash left is never read).
pub const TMP_PREFIX: &str = ".probe-clean-";

/// Whether `name` in the pack directory is the mark or a mark being written.
pub fn is_mark_name(name: &str) -> bool {
    name == MARK_NAME || name.starts_with(TMP_PREFIX)
}

const MAGIC: &[u8; 8] = b"SQZCLEAN";
const VERSION: u16 = 1;
/// Header: magic, version, reserved (2), count (4).
const HEAD: usize = 16;
/// A pack: id (4), reserved (4), length (8).
const ENTRY: usize = 16;
/// More packs than any backing directory holds (64 MiB each: 64 PiB): a longer mark is not
/// one this code wrote, and is not read.
pub const MAX_PACKS: usize = 1 << 30;

/// The mark naming `packs` (id, length), ascending by id.
pub fn encode(packs: &[(u32, u64)]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEAD + ENTRY * packs.len() + 8);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    for (id, len) in packs {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&len.to_le_bytes());
    }
    let sum = xxh3_64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    b
}

/// The packs a mark names; `None` for anything that is not a whole, valid version 1 mark
/// (a reader treats that as no mark: the next unmount walks).
pub fn decode(b: &[u8]) -> Option<Vec<(u32, u64)>> {
    if b.len() < HEAD + 8 || &b[..8] != MAGIC {
        return None;
    }
    let (body, sum) = b.split_at(b.len() - 8);
    if xxh3_64(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let u16_at = |o: usize| u16::from_le_bytes([body[o], body[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().unwrap());
    if u16_at(8) != VERSION || u16_at(10) != 0 {
        return None;
    }
    let n = u32_at(12) as usize;
    if n > MAX_PACKS || body.len() != HEAD + n * ENTRY {
        return None;
    }
    let mut packs = Vec::with_capacity(n);
    for i in 0..n {
        let o = HEAD + i * ENTRY;
        if u32_at(o + 4) != 0 {
            return None;
        }
        let len = u64::from_le_bytes(body[o + 8..o + 16].try_into().unwrap());
        packs.push((u32_at(o), len));
    }
    packs.windows(2).all(|w| w[0].0 < w[1].0).then_some(packs)
}

/// What the mark needs of a backing directory's packs: whether this process left garbage
/// (counted, not walked), and the packs' lengths the mark names.
impl super::Packs {
    /// Something may have left bytes in a pack that no record names (see
    /// [`super::PackCounters::garbage_events`]). Telling it when nothing was left costs only a walk
    /// at unmount; not telling it when something was would leave the garbage to `check
    /// --repair`: callers tell whenever they cannot rule it out.
    pub fn note_garbage(&self) {
        self.counters.garbage_events.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether everything this `Packs` saw leaves no pack byte unnamed: every slot appended
    /// got its record, and no record was replaced or removed, no packed file removed, no
    /// file moved. (Counts, not a walk: `clean`'s mark uses it at unmount.)
    pub fn made_no_garbage(&self) -> bool {
        let c = &self.counters;
        c.garbage_events.load(Ordering::Relaxed) == 0
            && c.files_packed.load(Ordering::Relaxed) == c.slots_recorded.load(Ordering::Relaxed)
    }

    /// The packs present and their lengths, ascending by id.
    pub fn lengths(&self) -> io::Result<Vec<(u32, u64)>> {
        let mut out = Vec::new();
        for id in self.dir.list()? {
            out.push((id, self.dir.open(id)?.len()?));
        }
        Ok(out)
    }

    /// Takes the clean mark away, durably (see `clean`): before anything that may change
    /// records or packs. Returns whether the state this process starts from is clean: the
    /// mark was valid for the packs as they are, or there is no pack at all (a new backing
    /// directory: no pack, no garbage).
    pub fn take_clean_mark(&self) -> io::Result<bool> {
        let now = self.lengths()?;
        let Some(b) = self.dir.read_mark()? else {
            return Ok(now.is_empty());
        };
        self.dir.write_mark(None)?;
        Ok(now.is_empty() || decode(&b).is_some_and(|p| now == p))
    }

    /// Writes the clean mark for the packs as they are (only after a walk that ran to the
    /// end, or a mount that started clean and [`Packs::made_no_garbage`]).
    pub fn put_clean_mark(&self) -> io::Result<()> {
        self.dir.write_mark(Some(&encode(&self.lengths()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// What is written reads back; any byte changed, any cut, or random bytes read as
        /// no mark.
        #[test]
        fn a_mark_reads_back_and_a_damaged_one_is_no_mark(
            ids in prop::collection::btree_set(1u32.., 0..20),
            lens in prop::collection::vec(any::<u64>(), 20),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
            cut in any::<prop::sample::Index>(),
            junk in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let packs: Vec<(u32, u64)> = ids.into_iter().zip(lens).collect();
            let b = encode(&packs);
            prop_assert_eq!(decode(&b), Some(packs.clone()));
            let mut bad = b.clone();
            bad[flip.index(b.len())] ^= 1 << bit;
            prop_assert_eq!(decode(&bad), None);
            prop_assert_eq!(decode(&b[..cut.index(b.len())]), None);
            prop_assert!(decode(&junk).is_none_or(|p| encode(&p) == junk));
        }
    }

    #[test]
    fn an_empty_mark_names_no_pack() {
        assert_eq!(decode(&encode(&[])), Some(vec![]));
        assert_eq!(decode(b""), None);
    }
}
