//! Turning one extent's bytes into a stored half (`header ‖ payload`) and back. Pure: no I/O.

use squeezefs_codec::{compress, decompress, Algorithm, CodecSpec};
use xxhash_rust::xxh3::xxh3_64;

use crate::format::{ExtentHeader, BLOCK, EXTENT_HEADER_LEN};

/// The largest compressed payload worth keeping for `logical` bytes: it must save at least
/// 12.5 % and at least one 4 KiB block on disk (the btrfs and ZFS rules); `None` when no
/// compressed size could (tiny extents are stored raw).
pub fn compressed_limit(logical: usize) -> Option<usize> {
    let raw_on_disk = (EXTENT_HEADER_LEN + logical).div_ceil(BLOCK as usize) * BLOCK as usize;
    let block_rule = raw_on_disk
        .checked_sub(BLOCK as usize)?
        .checked_sub(EXTENT_HEADER_LEN)?;
    let ratio_rule = logical - logical / 8;
    let limit = block_rule.min(ratio_rule);
    (limit > 0).then_some(limit)
}

/// Encodes `data` (the extent's logical bytes, non-empty) as a half: compressed with `codec`
/// when that pays, raw otherwise.
pub fn encode_half(codec: CodecSpec, index: u64, generation: u64, data: &[u8]) -> Vec<u8> {
    debug_assert!(!data.is_empty());
    let mut out = Vec::with_capacity(EXTENT_HEADER_LEN + data.len());
    out.resize(EXTENT_HEADER_LEN, 0);
    let mut payload = Vec::new();
    let compressed = codec.alg != Algorithm::None
        && compressed_limit(data.len())
            .is_some_and(|limit| compress(codec, data, &mut payload, limit).unwrap_or(false));
    let (alg, level) = if compressed {
        (codec.alg, codec.level as i16)
    } else {
        payload.clear();
        payload.extend_from_slice(data);
        (Algorithm::None, 0)
    };
    let h = ExtentHeader {
        codec: alg,
        flags: 0,
        level,
        index,
        generation,
        stored_len: payload.len() as u32,
        logical_len: data.len() as u32,
        payload_sum: xxh3_64(&payload),
    };
    out[..EXTENT_HEADER_LEN].copy_from_slice(&h.encode());
    out.extend_from_slice(&payload);
    out
}

/// Checks a payload against its header's checksum.
pub fn payload_ok(h: &ExtentHeader, payload: &[u8]) -> bool {
    payload.len() == h.stored_len as usize && xxh3_64(payload) == h.payload_sum
}

/// Decodes a verified payload into `dst[..logical_len]`.
pub fn decode_payload(h: &ExtentHeader, payload: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let n = h.logical_len as usize;
    if dst.len() < n {
        return Err("logical length exceeds extent".into());
    }
    decompress(h.codec, payload, &mut dst[..n]).map_err(|e| e.to_string())
}

/// Decodes a whole half (`header ‖ payload`) of extent `index` into `dst`, verifying both
/// checksums: the read path's steps, in one call (used by `squeezefs bench` and `check`).
/// Returns the logical length.
pub fn decode_half(half: &[u8], index: u64, extent_shift: u8, dst: &mut [u8]) -> Result<usize, String> {
    let h = ExtentHeader::decode(half, index, extent_shift).map_err(|e| format!("header {e}"))?;
    let payload = half
        .get(EXTENT_HEADER_LEN..EXTENT_HEADER_LEN + h.stored_len as usize)
        .ok_or("payload is truncated")?;
    if !payload_ok(&h, payload) {
        return Err("payload checksum mismatch".into());
    }
    decode_payload(&h, payload, dst)?;
    Ok(h.logical_len as usize)
}

/// Encodes a whole small file for the superblock's inline area: compressed when it fits in
/// `max`, raw when the raw bytes fit, `None` when neither does.
pub fn encode_inline(codec: CodecSpec, data: &[u8], max: usize) -> Option<(Algorithm, Vec<u8>)> {
    if data.is_empty() {
        return Some((Algorithm::None, Vec::new()));
    }
    let mut out = Vec::new();
    if codec.alg != Algorithm::None {
        let limit = max.min(data.len().saturating_sub(1));
        if limit > 0 && compress(codec, data, &mut out, limit).unwrap_or(false) {
            return Some((codec.alg, out));
        }
    }
    (data.len() <= max).then(|| (Algorithm::None, data.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_the_block_and_ratio_rules() {
        // 128 KiB: 12.5 % (16 KiB) dominates.
        assert_eq!(compressed_limit(131072), Some(131072 - 16384));
        // 4 KiB raw takes two blocks with the header; compression must fit one.
        assert_eq!(compressed_limit(4096), Some(4096 - 512));
        // 100 bytes: raw takes one block, nothing can save a block.
        assert_eq!(compressed_limit(100), None);
    }

    #[test]
    fn incompressible_data_is_stored_raw_and_round_trips() {
        let mut x = 7u64;
        let data: Vec<u8> = (0..131072)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let half = encode_half(CodecSpec::DEFAULT, 3, 1, &data);
        let h = ExtentHeader::decode(&half[..EXTENT_HEADER_LEN], 3, 17).unwrap();
        assert_eq!(h.codec, Algorithm::None);
        let payload = &half[EXTENT_HEADER_LEN..];
        assert!(payload_ok(&h, payload));
        let mut back = vec![0; 131072];
        decode_payload(&h, payload, &mut back).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn text_is_compressed() {
        let data: Vec<u8> = b"squeezefs compresses text. "
            .iter()
            .cycle()
            .take(131072)
            .copied()
            .collect();
        let half = encode_half(CodecSpec::DEFAULT, 0, 1, &data);
        assert!(half.len() < 4096);
        let h = ExtentHeader::decode(&half[..EXTENT_HEADER_LEN], 0, 17).unwrap();
        assert_eq!(h.codec, Algorithm::Zstd);
    }
}
