//! squeezefs codecs: pure functions, no I/O.
//!
//! * [`CodecSpec`] names an algorithm and a level and parses/prints the `ALG[:LEVEL]` strings
//!   used on the command line, in mount options and (later) in properties.
//! * [`Codec`] is the one trait every algorithm implements; [`codec`] is the registry.
//! * [`compress`] / [`decompress`] are the entry points the container uses.
//!
//! * [`dict`] trains, holds and applies zstd dictionaries for small files.
//! * [`heuristic`] judges whether data is worth compressing without compressing it (btrfs).
//! * [`workspace`] is the bounded, per-level pool of zstd compression contexts (btrfs).

#![deny(unsafe_code)] // the one exception, a libzstd size estimate, is `workspace::sizing::estimate`

pub mod content;
pub mod dict;
pub mod heuristic;
mod lz4;
mod lzo;
mod none;
mod pooled;
mod registry;
mod spec;
pub mod workspace;
mod zlib;
mod zstd;

pub use registry::{codec, compress, decompress, decompress_padded};
pub use spec::{Algorithm, CodecSpec, ParseError, ZSTD_LEVELS};

/// Why a compression or decompression failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// The compressed input is damaged or does not decode to exactly the expected length.
    #[error("{alg} payload is corrupt: {detail}")]
    Corrupt { alg: Algorithm, detail: String },
    /// The library refused the input or level (should not happen for a validated spec).
    #[error("{alg} failed: {detail}")]
    Failed { alg: Algorithm, detail: String },
    /// A zstd frame names a dictionary that is not loaded.
    #[error("zstd payload needs dictionary {0}, which is not loaded (is its file in .squeezefs-dicts?)")]
    MissingDictionary(u32),
}

/// A compression algorithm. Implementations are stateless values; any per-level state
/// (compression contexts) is kept per thread inside the implementation and reused.
pub trait Codec: Send + Sync {
    fn algorithm(&self) -> Algorithm;

    /// Compresses `src` at `level` into `dst` (cleared first).
    ///
    /// Returns `Ok(false)` when the result would not fit in `limit` bytes: the caller then
    /// stores the data raw. Implementations stop early instead of producing more than
    /// `limit` bytes where the library allows it.
    fn compress(&self, level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError>;

    /// Decompresses `src` into exactly `dst.len()` bytes. Input that does not decode to
    /// exactly that many bytes is [`CodecError::Corrupt`]; nothing is allocated from
    /// lengths found in `src`.
    fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError>;

    /// Decompresses `src` into a new buffer of `len` bytes: exactly `n` (≤ `len`) decoded
    /// bytes, then zeros (an extent's buffer). The same checks as [`Codec::decompress`].
    /// Implementations that can write into uninitialised memory (zstd) leave out the
    /// zeroing of the decoded part: a read of a cold file decodes every extent into a new
    /// buffer, and zeroing 1 MiB first cost 5 % of the daemon's time.
    fn decompress_padded(&self, src: &[u8], n: usize, len: usize) -> Result<Vec<u8>, CodecError> {
        assert!(n <= len, "decoded length {n} beyond the buffer's {len}");
        let mut out = vec![0u8; len];
        self.decompress(src, &mut out[..n])?;
        Ok(out)
    }
}
