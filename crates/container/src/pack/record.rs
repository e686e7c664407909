//! A backing file's location record as every reader judges it: the container (`open`),
//! `check` and `stats` call [`record_state`], so they agree on which of record and
//! superblock is the file.

use super::format::{Location, LOCATION_XATTR};
use crate::format::FormatError;
use crate::layout::{current_superblock, read_head, superblock_copies, Head, Tie};
use crate::storage::Storage;
use crate::{Error, Result};

/// The file's location record, if it has one. A record written by a newer squeezefs is
/// [`Error::Unsupported`], a damaged one [`Error::CorruptLocation`].
pub fn read_record<S: Storage>(st: &S) -> Result<Option<Location>> {
    let Some(v) = st.get_xattr(LOCATION_XATTR)? else {
        return Ok(None);
    };
    decode_record(&v).map(Some)
}

/// A record's value judged as [`read_record`] judges it.
fn decode_record(v: &[u8]) -> Result<Location> {
    match Location::decode(v) {
        Ok(l) => Ok(l),
        Err(e @ (FormatError::Version(_) | FormatError::Flags(_) | FormatError::Props(_))) => {
            Err(Error::Unsupported(format!("location record: {e}")))
        }
        Err(e) => Err(Error::CorruptLocation(e.to_string())),
    }
}

/// [`record_state`] of an empty backing file whose record's value (`None`: it has none)
/// the caller read some other way (a tree walk, through an `O_PATH` fd: on a network
/// backing, opening each file for reading cost an OPEN and its close a FLUSH, two round
/// trips). An empty file holds no superblock to outrank a record, so the same answer as
/// [`record_state`] gives it (`Current` with no leftover bytes, `Absent`, `Unreadable`).
pub fn record_state_of_empty(value: Option<&[u8]>) -> RecordState {
    match value.map(decode_record) {
        None => RecordState::Absent,
        Some(Ok(loc)) => RecordState::Current { loc, leftover: 0 },
        Some(Err(e)) => RecordState::Unreadable(e),
    }
}

/// The generation of the current superblock in a container's head, if it has a valid copy
/// (equal generations are the same number whichever copy a reader prefers).
pub(crate) fn newest_superblock_gen(blocks: &[u8]) -> Option<u64> {
    current_superblock(&superblock_copies(blocks), Tie::First).map(|(_, sb)| sb.generation)
}

/// Whether a record is the file, given what the backing file's head is: it is unless a
/// valid superblock has at least its generation. A record beside no valid superblock wins
/// (the container bytes are then a first superblock torn by a crash, or a plain file's
/// bytes the record replaced).
pub(crate) fn record_wins(head: &Head, loc: &Location) -> bool {
    match head {
        Head::Container(b) => newest_superblock_gen(b).is_none_or(|g| g < loc.generation),
        _ => true,
    }
}

/// What a backing file's record means.
#[derive(Debug)]
pub enum RecordState {
    /// No record: the file is its backing file (a container or a plain file).
    Absent,
    /// The record is the file; the backing file still holds `leftover` bytes it replaced
    /// (a crash came before they were cut).
    Current { loc: Location, leftover: u64 },
    /// A superblock outranks the record: left over by a file that grew out of its pack.
    Stale(Location),
    /// The record cannot be read: damaged, or written by a newer squeezefs.
    Unreadable(Error),
}

/// Reads the record and the head of a backing file and says which is the file.
pub fn record_state<S: Storage>(st: &S) -> Result<RecordState> {
    let loc = match read_record(st) {
        Ok(Some(l)) => l,
        Ok(None) => return Ok(RecordState::Absent),
        Err(e @ (Error::Unsupported(_) | Error::CorruptLocation(_))) => {
            return Ok(RecordState::Unreadable(e))
        }
        Err(e) => return Err(e),
    };
    let head = read_head(st)?;
    Ok(if record_wins(&head, &loc) {
        RecordState::Current {
            loc,
            leftover: st.len()?,
        }
    } else {
        RecordState::Stale(loc)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::MemDisk;
    use proptest::prelude::*;
    use squeezefs_codec::{Algorithm, CodecSpec};

    fn valid() -> Vec<u8> {
        Location {
            props: 0,
            codec: CodecSpec::new(Algorithm::Zstd, 1).unwrap(),
            extent_shift: 17,
            pack: 3,
            block: 4096,
            offset: 10,
            len: 900,
            generation: 5,
            content_sum: 0x1234,
            dict_id: 0,
            kept_ctime: None,
        }
        .encode()
    }

    /// What a judgement says, comparable.
    fn said(s: &RecordState) -> String {
        match s {
            RecordState::Absent => "absent".into(),
            RecordState::Current { loc, leftover } => format!("current {loc:?} {leftover}"),
            RecordState::Stale(loc) => format!("stale {loc:?}"),
            RecordState::Unreadable(e) => format!("unreadable {e}"),
        }
    }

    proptest! {
        /// A tree walk judges an empty file from its record's value alone (read through an
        /// `O_PATH` fd): the same as [`record_state`] on the file, for no record, a valid
        /// one, one with bytes changed anywhere, cut short or grown, and random bytes.
        #[test]
        fn an_empty_files_record_is_judged_alike_without_opening_it(
            kind in 0u8..5,
            at in 0usize..64,
            byte in any::<u8>(),
            random in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let value = match kind {
                0 => None,
                1 => Some(valid()),
                2 => Some({ let mut v = valid(); let i = at % v.len(); v[i] ^= byte | 1; v }),
                3 => Some({ let mut v = valid(); v.truncate(at % v.len()); v }),
                _ => Some(random),
            };
            let disk = MemDisk::new();
            if let Some(v) = &value {
                disk.set_xattr(LOCATION_XATTR, v).unwrap();
            }
            let opened = record_state(&disk).unwrap();
            prop_assert_eq!(said(&record_state_of_empty(value.as_deref())), said(&opened));
        }
    }
}
