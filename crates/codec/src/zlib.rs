//! zlib (RFC 1950) through libdeflate, on whole buffers. Compressors are kept per thread and
//! per level.

use std::cell::RefCell;

use libdeflater::{CompressionLvl, Compressor, Decompressor};

use crate::{Algorithm, Codec, CodecError};

pub(crate) struct ZlibCodec;

thread_local! {
    static COMPRESSORS: RefCell<Vec<(i32, Compressor)>> = const { RefCell::new(Vec::new()) };
    static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
}

impl Codec for ZlibCodec {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Zlib
    }

    fn compress(&self, level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError> {
        let lvl = CompressionLvl::new(level).map_err(|e| CodecError::Failed {
            alg: Algorithm::Zlib,
            detail: format!("level {level}: {e:?}"),
        })?;
        COMPRESSORS.with(|cell| {
            let mut ctxs = cell.borrow_mut();
            let idx = match ctxs.iter().position(|(l, _)| *l == level) {
                Some(i) => i,
                None => {
                    ctxs.push((level, Compressor::new(lvl)));
                    ctxs.len() - 1
                }
            };
            dst.clear();
            dst.resize(limit, 0);
            // libdeflate fails with InsufficientSpace when the output would exceed `limit`.
            match ctxs[idx].1.zlib_compress(src, dst) {
                Ok(n) => {
                    dst.truncate(n);
                    Ok(true)
                }
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
            let d = slot.get_or_insert_with(Decompressor::new);
            let corrupt = |detail: String| CodecError::Corrupt {
                alg: Algorithm::Zlib,
                detail,
            };
            let n = d
                .zlib_decompress(src, dst)
                .map_err(|e| corrupt(format!("{e:?}")))?;
            if n != dst.len() {
                return Err(corrupt(format!("decoded {n} bytes, expected {}", dst.len())));
            }
            Ok(())
        })
    }
}
