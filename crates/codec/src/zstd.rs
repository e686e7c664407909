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
        let n = decode_into(src, dst)?;
        expect_len(n, dst.len())
    }

    /// Into the new buffer's spare capacity (zstd-safe's `WriteBuf` for `Vec`: no byte is
    /// read before libzstd wrote it), then only the tail is zeroed.
    fn decompress_padded(&self, src: &[u8], n: usize, len: usize) -> Result<Vec<u8>, CodecError> {
        assert!(n <= len, "decoded length {n} beyond the buffer's {len}");
        let mut out = Vec::with_capacity(len);
        // (A frame that decodes to more than `n` but fits `len` is caught by the length
        // check, as one that decodes to more than `len` is by libzstd.)
        let got = decode_into(src, &mut out)?;
        expect_len(got, n)?;
        out.resize(len, 0);
        Ok(out)
    }
}

/// Decodes the frame `src` into `dst` (with the dictionary it names) on this thread's
/// context; returns the decoded length.
fn decode_into<C: zstd_safe::WriteBuf + ?Sized>(src: &[u8], dst: &mut C) -> Result<usize, CodecError> {
    let dict = frame_dict_id(src);
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = slot.get_or_insert_with(DCtx::create);
        let r = match dict {
            None => d.decompress(dst, src),
            Some(id) => with_ddict(id, |dd| d.decompress_using_ddict(dst, src, dd))?,
        };
        r.map_err(|c| corrupt(zstd_safe::get_error_name(c).to_string()))
    })
}

fn corrupt(detail: String) -> CodecError {
    CodecError::Corrupt {
        alg: Algorithm::Zstd,
        detail,
    }
}

/// Input must decode to exactly the length its header promised.
fn expect_len(got: usize, want: usize) -> Result<(), CodecError> {
    if got != want {
        return Err(corrupt(format!("decoded {got} bytes, expected {want}")));
    }
    Ok(())
}
