//! `none`: bytes stored as they are.

use crate::{Algorithm, Codec, CodecError};

pub(crate) struct NoneCodec;

impl Codec for NoneCodec {
    fn algorithm(&self) -> Algorithm {
        Algorithm::None
    }

    fn compress(&self, _level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError> {
        dst.clear();
        if src.len() > limit {
            return Ok(false);
        }
        dst.extend_from_slice(src);
        Ok(true)
    }

    fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
        if src.len() != dst.len() {
            return Err(CodecError::Corrupt {
                alg: Algorithm::None,
                detail: format!("stored {} bytes, expected {}", src.len(), dst.len()),
            });
        }
        dst.copy_from_slice(src);
        Ok(())
    }
}
