//! zstd through libzstd. Compression contexts come from the shared, bounded workspace pool
//! (through `pooled.rs`), so steady-state compression allocates nothing; decompression
//! contexts are small and kept per thread. A frame that names a dictionary is decoded with
//! it (`dict.rs`).

use std::cell::RefCell;

use zstd::zstd_safe::{self, DCtx};

use crate::dict::{frame_dict_id, with_ddict};
use crate::pooled::compress_with;
use crate::{Algorithm, Codec, CodecError};

pub(crate) struct ZstdCodec;

thread_local! {
    static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

impl Codec for ZstdCodec {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Zstd
    }

    fn compress(&self, level: i32, src: &[u8], dst: &mut Vec<u8>, limit: usize) -> Result<bool, CodecError> {
        compress_with(level, dst, limit, |cctx, out| cctx.compress2(out, src))
    }

    fn decompress(&self, src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
        let dict = frame_dict_id(src);
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
                Some(id) => with_ddict(id, |dd| d.decompress_using_ddict(out, src, dd))?,
            };
            let n = r.map_err(|c| corrupt(zstd_safe::get_error_name(c).to_string()))?;
            if n != dst.len() {
                return Err(corrupt(format!("decoded {n} bytes, expected {}", dst.len())));
            }
            Ok(())
        })
    }
}
