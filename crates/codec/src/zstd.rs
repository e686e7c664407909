//! zstd through libzstd. Compression contexts come from the shared, bounded workspace pool
//! (`workspace.rs`), so steady-state compression allocates nothing; decompression contexts
//! are small and kept per thread. A frame that names a dictionary is decoded with it
//! (`dict.rs`).

use std::cell::RefCell;

use zstd::zstd_safe::{self, CCtx, DCtx};

use crate::{Algorithm, Codec, CodecError};

pub(crate) struct ZstdCodec;

thread_local! {
    static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

fn failed(detail: impl ToString) -> CodecError {
    CodecError::Failed {
        alg: Algorithm::Zstd,
        detail: detail.to_string(),
    }
}

/// Runs one compression `call` on a pooled context at `level`, into `dst` with room for
/// `limit` bytes: `Ok(false)` when the result does not fit.
pub(crate) fn compress_with(
    level: i32,
    dst: &mut Vec<u8>,
    limit: usize,
    call: impl FnOnce(&mut CCtx<'static>, &mut Vec<u8>) -> zstd_safe::SafeResult,
) -> Result<bool, CodecError> {
    dst.clear();
    dst.reserve(limit);
    let mut lease = crate::workspace::global().get(level);
    let ctx = lease.compressor().map_err(failed)?;
    // libzstd writes into the Vec's spare capacity and stops when it is full, so
    // incompressible data costs at most `capacity` bytes of work before we give up.
    match call(ctx.context_mut(), dst) {
        Ok(n) if n <= limit => Ok(true),
        // Too big, or (the only way a valid level fails on in-memory input) an output
        // bound that is too small: "does not fit", the caller stores raw.
        Ok(_) | Err(_) => {
            dst.clear();
            Ok(false)
        }
    }
}

impl Codec for ZstdCodec {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Zstd
    }

    fn compress(&self, level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError> {
        compress_with(level, dst, limit, |cctx, out| cctx.compress2(out, src))
    }

    fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
        let dict = crate::dict::frame_dict_id(src);
        DCTX.with(|cell| {
            let mut slot = cell.borrow_mut();
            let d = slot.get_or_insert_with(DCtx::create);
            let corrupt = |detail: String| CodecError::Corrupt {
                alg: Algorithm::Zstd,
                detail,
            };
            let out: &mut [u8] = &mut dst[..];
            let r = match dict {
                None => d.decompress(out, src),
                Some(id) => crate::dict::with_ddict(id, |dd| d.decompress_using_ddict(out, src, dd))?,
            };
            let n = r.map_err(|c| corrupt(zstd_safe::get_error_name(c).to_string()))?;
            if n != dst.len() {
                return Err(corrupt(format!("decoded {n} bytes, expected {}", dst.len())));
            }
            Ok(())
        })
    }
}
