//! squeezefs containers: one backing file holds one logical file as independently
//! compressed, checksummed extents, each replaced crash-safely through an A/B pair of
//! halves. The layout is in [`format`] and docs/FORMAT.md; all I/O goes through
//! [`Storage`], so every property is testable on the crash-simulating [`sim::MemDisk`].

// The only `unsafe` is the two system calls in `storage::sys` (allowed there).
#![deny(unsafe_code)]

pub mod adapt;
pub mod check;
mod container;
pub mod convert;
pub mod dicts;
pub mod encode;
pub mod format;
mod layout;
mod open_at;
mod owner_path;
pub mod pack;
pub mod predict;
pub mod sim;
pub mod stats;
mod storage;
#[allow(unsafe_code)]
mod sys;
pub mod usage;

pub use container::{
    give_up_at, give_up_dense_at, grow_at, AheadPlan, Batch, Compressed, Container, DirtyBudget, ExtentBuf,
    Fetched, Options, ReadBytes, Recompressed, Relayout, RelayoutStep, StatTimes, StoredHalf, Ticket,
    WriteBack, BACKOFF_AFTER, DEFAULT_DIRTY_BYTES, DEFAULT_DIRTY_EXPIRE, RETRY_EVERY, WRITE_BATCH,
};
pub use open_at::with_owner_access;
pub use owner_path::{dir_names_as_owner, open_as_owner, symlink_metadata_as_owner};
pub use stats::Stats;
pub use storage::{keeping_times, read_full, Dedupe, FileStorage, Storage};

use std::io;

/// What a container operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Io(#[from] io::Error),
    /// An extent's header or payload failed validation and no valid copy is left.
    #[error("extent {index} (file offset {offset}) is damaged: {detail}")]
    CorruptExtent { index: u64, offset: u64, detail: String },
    /// A packed file's block is damaged or missing, or its bytes fail their checksum.
    #[error("pack {pack}, block at {block}: {detail}")]
    CorruptPack { pack: u32, block: u64, detail: String },
    /// A packed file's location record is damaged.
    #[error("location record is damaged: {0}")]
    CorruptLocation(String),
    /// Neither superblock copy is valid.
    #[error("container superblock is damaged: {0}")]
    CorruptSuperblock(String),
    /// Written by a newer squeezefs (format version or flags this one does not know).
    #[error("container needs a newer squeezefs: {0}")]
    Unsupported(String),
    /// A property value or change the container cannot take.
    #[error("{0}")]
    Invalid(String),
    /// An offset or length beyond what a container can address.
    #[error("offset or length too large")]
    TooLarge,
}

impl Error {
    /// The errno a filesystem should answer with.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::CorruptExtent { .. }
            | Error::CorruptSuperblock(_)
            | Error::CorruptPack { .. }
            | Error::CorruptLocation(_) => libc::EIO,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::TooLarge => libc::EFBIG,
            Error::Invalid(_) => libc::EINVAL,
        }
    }

    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::CorruptExtent { .. }
                | Error::CorruptSuperblock(_)
                | Error::CorruptPack { .. }
                | Error::CorruptLocation(_)
        )
    }
}

pub type Result<T> = std::result::Result<T, Error>;
