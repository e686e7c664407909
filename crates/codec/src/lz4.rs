//! lz4 through liblz4: levels 1–2 are the fast compressor, 3–12 LZ4HC.

use lz4::block::{self, CompressionMode};

use crate::{Algorithm, Codec, CodecError};

pub(crate) struct Lz4Codec;

impl Codec for Lz4Codec {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Lz4
    }

    fn compress(&self, level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError> {
        // liblz4 1.10's HC optimal parser (levels 10–12) reads through the source pointer
        // even for an empty input, and an empty Rust slice's pointer is dangling: empty
        // input always takes the fast compressor, whose output is the same one-byte block.
        let mode = if level >= 3 && !src.is_empty() {
            CompressionMode::HIGHCOMPRESSION(level)
        } else {
            CompressionMode::DEFAULT
        };
        dst.clear();
        dst.resize(limit, 0);
        // liblz4 returns an error when the output does not fit the buffer.
        match block::compress_to_buffer(src, Some(mode), false, dst) {
            Ok(n) => {
                dst.truncate(n);
                Ok(true)
            }
            Err(_) => {
                dst.clear();
                Ok(false)
            }
        }
    }

    fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
        let corrupt = |detail: String| CodecError::Corrupt {
            alg: Algorithm::Lz4,
            detail,
        };
        let want = i32::try_from(dst.len()).map_err(|_| corrupt("output too large".into()))?;
        // LZ4_decompress_safe never writes past `dst` and rejects malformed input.
        let n = block::decompress_to_buffer(src, Some(want), dst).map_err(|e| corrupt(e.to_string()))?;
        if n != dst.len() {
            return Err(corrupt(format!("decoded {n} bytes, expected {}", dst.len())));
        }
        Ok(())
    }
}
