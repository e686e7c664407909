//! zstd through libzstd. Compression contexts come from the shared, bounded workspace pool
//! (`workspace.rs`), so steady-state compression allocates nothing; decompression contexts
//! are small and kept per thread.

use std::cell::RefCell;

use zstd::bulk::Decompressor;

use crate::{Algorithm, Codec, CodecError};

pub(crate) struct ZstdCodec;

thread_local! {
    static DECOMPRESSOR: RefCell<Option<Decompressor<'static>>> = const { RefCell::new(None) };
}

fn failed(detail: impl ToString) -> CodecError {
    CodecError::Failed {
        alg: Algorithm::Zstd,
        detail: detail.to_string(),
    }
}

impl Codec for ZstdCodec {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Zstd
    }

    fn compress(&self, level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError> {
        dst.clear();
        dst.reserve(limit);
        let mut lease = crate::workspace::global().get(level);
        let ctx = lease.compressor().map_err(failed)?;
        // libzstd writes into the Vec's spare capacity and stops when it is full, so
        // incompressible data costs at most `capacity` bytes of work before we give up.
        match ctx.compress_to_buffer(src, dst) {
            Ok(n) if n <= limit => Ok(true),
            // Too big, or (the only way a valid level fails on in-memory input) an output
            // bound that is too small: "does not fit", the caller stores raw.
            Ok(_) | Err(_) => {
                dst.clear();
                Ok(false)
            }
        }
    }

    fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
        DECOMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(Decompressor::new().map_err(failed)?);
            }
            let d = slot.as_mut().expect("just set");
            let corrupt = |detail: String| CodecError::Corrupt {
                alg: Algorithm::Zstd,
                detail,
            };
            let n = d
                .decompress_to_buffer(src, &mut dst[..])
                .map_err(|e| corrupt(e.to_string()))?;
            if n != dst.len() {
                return Err(corrupt(format!("decoded {n} bytes, expected {}", dst.len())));
            }
            Ok(())
        })
    }
}
