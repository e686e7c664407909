//! LZO1X-1 through the `lzo1x` crate (a safe-Rust port of liblzo2; its default level is
//! LZO1X-1 with the 14-bit dictionary, the classic `lzo1x_1_compress`).

use crate::{Algorithm, Codec, CodecError};

pub(crate) struct LzoCodec;

impl Codec for LzoCodec {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Lzo
    }

    fn compress(&self, _level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError> {
        // The crate has no bounded-output API; LZO1X-1 is fast enough that compressing in
        // full and then checking the bound costs little.
        let out = lzo1x::compress(src, lzo1x::CompressLevel::default());
        dst.clear();
        if out.len() > limit {
            return Ok(false);
        }
        dst.extend_from_slice(&out);
        Ok(true)
    }

    fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
        // The decoder is safe Rust; a panic on hostile input would be a bug in it, and is
        // turned into a corruption error rather than taking the filesystem down.
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lzo1x::decompress(src, dst)));
        match res {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(CodecError::Corrupt {
                alg: Algorithm::Lzo,
                detail: e.to_string(),
            }),
            Err(_) => Err(CodecError::Corrupt {
                alg: Algorithm::Lzo,
                detail: "decoder panicked on malformed input".into(),
            }),
        }
    }
}
