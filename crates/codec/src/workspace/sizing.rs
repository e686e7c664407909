//! Making zstd compression contexts and knowing what they cost: the [`Allocator`] the pool
//! calls (a trait so tests can make allocation fail), libzstd's own estimate of a context's
//! size per level ([`estimate`]) and a measurement on real data ([`measure`], for `squeezefs
//! bench`). Apart from the pool because it is the part that talks to libzstd about memory.

use zstd::bulk::Compressor;

/// Makes compression contexts; tests substitute one that fails.
pub trait Allocator: Send + Sync {
    fn alloc(&self, level: i32) -> Option<Compressor<'static>>;
}

/// libzstd's allocator: a context at `level` without a frame checksum (the container keeps
/// its own checksums).
pub struct ZstdAllocator;

impl Allocator for ZstdAllocator {
    fn alloc(&self, level: i32) -> Option<Compressor<'static>> {
        let mut c = Compressor::new(level).ok()?;
        c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(false))
            .ok()?;
        Some(c)
    }
}

/// libzstd's estimate of a context's size at `level` for inputs of `input_size` bytes.
// The crate's only `unsafe`: zstd-safe has no wrapper for these two functions of libzstd's
// experimental API, and nothing else gives the estimate.
#[allow(unsafe_code)]
pub fn estimate(level: i32, input_size: usize) -> usize {
    use zstd::zstd_safe::zstd_sys::{ZSTD_estimateCCtxSize_usingCParams, ZSTD_getCParams};
    // SAFETY: both functions take and return plain values (integers, and the
    // `ZSTD_compressionParameters` struct by value): no pointers, no global state. Any level
    // is accepted (`ZSTD_getCParams` clamps it to libzstd's range) and a dictionary size of
    // 0 means "no dictionary", so no argument can make either read or write memory.
    unsafe { ZSTD_estimateCCtxSize_usingCParams(ZSTD_getCParams(level, input_size as u64, 0)) }
}

/// The real size of a fresh context at `level` after compressing `sample` (for `squeezefs
/// bench`: what one workspace of this level costs on this data).
pub fn measure(level: i32, sample: &[u8]) -> usize {
    let Some(mut ctx) = ZstdAllocator.alloc(level) else {
        return 0;
    };
    let mut dst = Vec::with_capacity(zstd::zstd_safe::compress_bound(sample.len()));
    let _ = ctx.compress_to_buffer(sample, &mut dst);
    ctx.context_mut().sizeof()
}
