//! squeezefs as a FUSE filesystem: a stacked filesystem over a backing directory where
//! every regular file is a container (see `squeezefs-container`).
//!
//! The crate root only names the parts. Mounting: `options` (what `-o` says), `sizes`, `memory`
//! (the default dirty budget), `backing_check` (probes of BACKING), `fuse_mount` (the
//! FUSE mount made and unmounted only while it is this daemon's), `serve` (from the lock
//! to the last file written out). Serving: `ops` (the request handlers), the inode table,
//! file lifecycles, packs and the background work beside them.

#![deny(unsafe_code)]

pub mod background;
mod backing_check;
mod creds;
mod dedupe;
mod devfuse;
mod fuse_mount;
mod inode;
mod lifecycle;
pub mod lock;
mod memory;
pub mod mountinfo;
pub(crate) mod ns;
mod ops;
mod options;
pub mod packing;
mod pagecache;
mod prefetch;
pub mod props;
mod readahead;
pub mod reclaim;
mod requests;
pub mod rules;
mod serve;
mod siblings;
mod sizes;
mod space;
mod spin;
pub mod statsfile;
/// The one module with `unsafe`: raw system calls behind safe wrappers that take
/// `AsFd`, each block justified by a `SAFETY:` comment.
#[allow(unsafe_code)]
pub mod sys;
mod workers;

pub use backing_check::check_backing;
pub use memory::default_max_dirty;
pub use ops::SqueezeFs;
pub use options::{split_options, MountConfig, DEFAULT_PACK_GC, KERNEL_OPTIONS, KERNEL_VALUE_OPTIONS};
pub use serve::{mount, UNMOUNT_WAIT};
pub use sizes::{format_extent_size, parse_extent_size, parse_size};
