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
    match Location::decode(&v) {
        Ok(l) => Ok(Some(l)),
        Err(e @ (FormatError::Version(_) | FormatError::Flags(_) | FormatError::Props(_))) => {
            Err(Error::Unsupported(format!("location record: {e}")))
        }
        Err(e) => Err(Error::CorruptLocation(e.to_string())),
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
