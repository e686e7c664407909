//! What a container written now would allocate, extent by extent (`squeezefs estimate`):
//! the same encoder and the same layout rules as a real write, so a prediction over every
//! extent of a tree equals what `squeezefs compress` then occupies.

use std::time::{Duration, Instant};

use crate::encode::{decode_half, encode_extent, encode_inline, Policy};
use crate::format::{BLOCK, INLINE_MAX, SB_HEADER_LEN};

fn blocks(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

/// One extent's prediction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Predicted {
    /// Bytes allocated for it in a freshly written container (for extent 0 of a file that
    /// is not inline, the superblock block too; an inline file is only its superblock).
    pub disk: u64,
    /// Time to encode it as the filesystem does (heuristic, compression, checksum).
    pub encode: Duration,
    /// Time to decode it again (zero for a hole).
    pub decode: Duration,
}

/// Predicts what files of at most one extent take when packed (format 4) in this order:
/// the bytes of the blocks they fill (headers included), as [`crate::pack::Packs`] writes
/// them. Their backing files take no block.
pub fn packed(codec: squeezefs_codec::CodecSpec, extent_shift: u8, files: &[&[u8]]) -> u64 {
    use crate::pack::{block_starts, encode_block, BLOCK_HEADER_LEN};
    let files: Vec<&[u8]> = files.iter().copied().filter(|f| !f.is_empty()).collect();
    let starts = block_starts(files.iter().map(|f| f.len()), extent_shift);
    let mut total = 0;
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(files.len());
        let block: Vec<u8> = files[s..end].concat();
        let stored = match encode_block(codec, &block).1 {
            Some(p) => p.len(),
            None => block.len(),
        };
        total += (BLOCK_HEADER_LEN + stored) as u64;
    }
    total
}

/// Predicts extent `index` of a file of `file_size` bytes whose extents are
/// `1 << extent_shift` bytes, holding `data` (the extent's bytes, up to the end of file).
pub fn extent(policy: Policy, extent_shift: u8, file_size: u64, index: u64, data: &[u8]) -> Predicted {
    let mut p = Predicted::default();
    if data.is_empty() || data.iter().all(|&b| b == 0) && file_size > (1 << extent_shift) {
        return p; // a hole (all-zero extents are never stored)
    }
    let t = Instant::now();
    if file_size <= 1 << extent_shift {
        if let Some((_, payload)) = encode_inline(policy.codec, policy.dict, data, INLINE_MAX) {
            p.encode = t.elapsed();
            p.disk = blocks((SB_HEADER_LEN + payload.len()) as u64);
            return p;
        }
    }
    if data.iter().all(|&b| b == 0) {
        p.disk = if index == 0 { BLOCK } else { 0 };
        return p;
    }
    let (half, _) = encode_extent(policy, false, index, 1, data);
    p.encode = t.elapsed();
    let mut out = vec![0u8; 1 << extent_shift];
    let t = Instant::now();
    let decoded = decode_half(&half, index, extent_shift, &mut out);
    p.decode = t.elapsed();
    debug_assert_eq!(decoded, Ok(data.len()));
    p.disk = blocks(half.len() as u64) + if index == 0 { BLOCK } else { 0 };
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::MemDisk;
    use crate::{Container, Options};

    /// Writes `data` into a fresh container and returns the bytes it allocates (whole
    /// blocks holding anything non-zero: MemDisk has no holes of its own).
    fn real(opts: &Options, data: &[u8]) -> u64 {
        let disk = MemDisk::new();
        let mut c = Container::open(disk.clone(), opts).unwrap();
        c.write(0, data).unwrap();
        c.fsync().unwrap();
        let bytes = disk.contents();
        bytes
            .chunks(BLOCK as usize)
            .filter(|b| b.iter().any(|&x| x != 0))
            .count() as u64
            * BLOCK
    }

    #[test]
    fn packing_predictions_match_what_packs_write() {
        use crate::pack::{MemPackDir, Packs, PACK_HEADER_LEN};
        use crate::sim::Crash;
        let files: Vec<Vec<u8>> = (0..200u32)
            .map(|i| {
                (0..(i * 97 % 9000 + 1))
                    .flat_map(|j| format!("{} {j}\n", i % 7).into_bytes())
                    .take((i as usize * 331) % 20_000 + 1)
                    .collect()
            })
            .collect();
        for codec in ["zstd:1", "lz4", "none"] {
            let codec = codec.parse().unwrap();
            for shift in [12, 17] {
                let fits: Vec<&[u8]> = files.iter().map(|f| &f[..f.len().min(1 << shift)]).collect();
                let dir = MemPackDir::new(&Crash::new());
                let packs = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
                for f in &fits {
                    packs.append(codec, shift, f).unwrap();
                }
                packs.sync().unwrap();
                let real = dir.disk(1).unwrap().contents().len() as u64 - PACK_HEADER_LEN as u64;
                assert_eq!(packed(codec, shift, &fits), real, "{codec}, shift {shift}");
            }
        }
    }

    #[test]
    fn predictions_match_what_a_container_allocates() {
        let text: Vec<u8> = (0..90_000u32)
            .flat_map(|i| format!("{i} line\n").into_bytes())
            .collect();
        let mut noise = vec![0u8; 300_000];
        let mut x = 0x1234_5678u64;
        for b in noise.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let mut sparse = text.clone();
        sparse[131072..262144].fill(0);
        for codec in ["zstd:3", "lz4", "none", "zlib:6"] {
            let opts = Options {
                codec: codec.parse().unwrap(),
                ..Options::default()
            };
            let policy = Policy::new(opts.codec, false);
            for data in [
                &b"tiny"[..],
                &text[..3000],
                &text[..20_000],
                &text[..],
                &noise[..],
                &sparse[..],
            ] {
                let shift = opts.extent_shift;
                let predicted: u64 = data
                    .chunks(1 << shift)
                    .enumerate()
                    .map(|(i, d)| extent(policy, shift, data.len() as u64, i as u64, d).disk)
                    .sum();
                assert_eq!(predicted, real(&opts, data), "{codec}, {} bytes", data.len());
            }
        }
    }
}
