//! zstd through libzstd. Compression contexts are kept per thread and per level and reused,
//! so steady-state compression allocates nothing (issue 4 replaces this with the bounded,
//! shared workspace pool).

use std::cell::RefCell;

use zstd::bulk::{Compressor, Decompressor};

use crate::{Algorithm, Codec, CodecError};

pub(crate) struct ZstdCodec;

thread_local! {
    static COMPRESSORS: RefCell<Vec<(i32, Compressor<'static>)>> = const { RefCell::new(Vec::new()) };
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
        COMPRESSORS.with(|cell| {
            let mut ctxs = cell.borrow_mut();
            let idx = match ctxs.iter().position(|(l, _)| *l == level) {
                Some(i) => i,
                None => {
                    let mut c = Compressor::new(level).map_err(failed)?;
                    // The container records lengths and checksums itself.
                    c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(false))
                        .map_err(failed)?;
                    ctxs.push((level, c));
                    ctxs.len() - 1
                }
            };
            // libzstd writes into the Vec's spare capacity and stops when it is full, so
            // incompressible data costs at most `capacity` bytes of work before we give up.
            let res = ctxs[idx].1.compress_to_buffer(src, dst);
            match res {
                Ok(n) if n <= limit => Ok(true),
                Ok(_) => {
                    dst.clear();
                    Ok(false)
                }
                // The only way a valid level fails on in-memory input is an output bound
                // that is too small: report "does not fit", the caller stores raw.
                Err(_) => {
                    dst.clear();
                    Ok(false)
                }
            }
        })
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
