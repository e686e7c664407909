//! One zstd compression call on a context from the workspace pool, with the codecs' "fits in
//! `limit` or not" answer: the step plain zstd compression (`zstd.rs`) and compression with a
//! dictionary (`dict.rs`) share. A module of its own so that both depend on it rather than
//! one on the other (`zstd.rs` needs `dict.rs` to find a frame's dictionary).

use zstd::zstd_safe::{self, CCtx};

use crate::{Algorithm, CodecError};

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
