//! "Is this worth compressing?" without compressing: the btrfs heuristic
//! (fs/btrfs/compression.c, `btrfs_compress_heuristic`), ported step by step.
//!
//! 1. Sample 16 bytes of every 256 (1/16 of the input).
//! 2. Repeated data (the sample's two halves equal) → compress.
//! 3. Fewer than 64 distinct byte values → compress (text, sparse binaries).
//! 4. Core byte set (the most frequent values covering 90 % of the sample): ≤ 64 values →
//!    compress, ≥ 200 → don't (data spread evenly over the byte values).
//! 5. Shannon entropy (integer approximation, as btrfs computes it) ≤ 65 % of 8 bits →
//!    compress; 65–80 % → compress (btrfs gives the benefit of the doubt); ≥ 80 % → don't.
//!
//! The verdict costs one pass over 1/16 of the data and a 256-entry sort, so it is cheap next
//! to any compressor; compressed formats (JPEG, xz, zstd) and random data end in step 4 or 5.

const SAMPLING_READ_SIZE: usize = 16;
const SAMPLING_INTERVAL: usize = 256;
const BUCKET_SIZE: usize = 256;
const ENTROPY_LVL_ACEPTABLE: u32 = 65;
const ENTROPY_LVL_HIGH: u32 = 80;
const BYTE_CORE_SET_LOW: usize = 64;
const BYTE_CORE_SET_HIGH: usize = 200;
const BYTE_SET_THRESHOLD: usize = 64;

/// Why the heuristic decided as it did (the steps above; useful in tests and statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Too little data to judge: compress.
    Small,
    Repeated,
    SmallByteSet,
    SmallCoreSet,
    LowEntropy,
    MediumEntropy,
    /// Incompressible: the core byte set covers ≥ 200 values.
    WideCoreSet,
    /// Incompressible: entropy ≥ 80 %.
    HighEntropy,
}

impl Verdict {
    pub fn compress(self) -> bool {
        !matches!(self, Verdict::WideCoreSet | Verdict::HighEntropy)
    }
}

/// `ilog2(n⁴)`: btrfs's integer log with 2 extra bits of precision.
fn ilog2_w(n: u64) -> u32 {
    let n4 = (n as u128).pow(4);
    127 - n4.leading_zeros()
}

/// Judges `data` the way btrfs does before compressing an extent.
pub fn judge(data: &[u8]) -> Verdict {
    // Inputs shorter than one sampling interval would give a sample too small to judge;
    // btrfs never sees them (it works on whole pages).
    if data.len() < SAMPLING_INTERVAL {
        return Verdict::Small;
    }
    let mut sample =
        Vec::with_capacity(data.len() / SAMPLING_INTERVAL * SAMPLING_READ_SIZE + SAMPLING_READ_SIZE);
    for chunk in data.chunks(SAMPLING_INTERVAL) {
        sample.extend_from_slice(&chunk[..chunk.len().min(SAMPLING_READ_SIZE)]);
    }
    let half = sample.len() / 2;
    if sample[..half] == sample[half..2 * half] {
        return Verdict::Repeated;
    }
    let mut bucket = [0u32; BUCKET_SIZE];
    for &b in &sample {
        bucket[b as usize] += 1;
    }
    let byte_set = bucket.iter().filter(|&&c| c > 0).count();
    if byte_set < BYTE_SET_THRESHOLD {
        return Verdict::SmallByteSet;
    }
    bucket.sort_unstable_by(|a, b| b.cmp(a));
    // Core set: the fewest most frequent values that cover 90 % of the sample.
    let threshold = sample.len() as u64 * 90 / 100;
    let mut sum: u64 = bucket[..BYTE_CORE_SET_LOW].iter().map(|&c| c as u64).sum();
    let core = if sum > threshold {
        BYTE_CORE_SET_LOW
    } else {
        let mut i = BYTE_CORE_SET_LOW;
        while i < BYTE_CORE_SET_HIGH && bucket[i] > 0 {
            sum += bucket[i] as u64;
            if sum > threshold {
                break;
            }
            i += 1;
        }
        i
    };
    if core <= BYTE_CORE_SET_LOW {
        return Verdict::SmallCoreSet;
    }
    if core >= BYTE_CORE_SET_HIGH {
        return Verdict::WideCoreSet;
    }
    // Shannon entropy in percent of 8 bits, with btrfs's integer logarithms.
    let entropy_max = 8 * ilog2_w(2);
    let sz_base = ilog2_w(sample.len() as u64);
    let mut entropy_sum: u64 = 0;
    for &c in bucket.iter().take_while(|&&c| c > 0) {
        entropy_sum += c as u64 * (sz_base - ilog2_w(c as u64)) as u64;
    }
    entropy_sum /= sample.len() as u64;
    let entropy = (entropy_sum * 100 / entropy_max as u64) as u32;
    if entropy <= ENTROPY_LVL_ACEPTABLE {
        Verdict::LowEntropy
    } else if entropy < ENTROPY_LVL_HIGH {
        Verdict::MediumEntropy
    } else {
        Verdict::HighEntropy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_testdata::random;

    #[test]
    fn integer_log_matches_btrfs() {
        assert_eq!(ilog2_w(1), 0);
        assert_eq!(ilog2_w(2), 4);
        assert_eq!(ilog2_w(3), 6); // 81 → 6
        assert_eq!(ilog2_w(8192), 52);
    }

    #[test]
    fn random_data_is_judged_incompressible() {
        for seed in 1..20 {
            let v = judge(&random(131072, seed));
            assert!(!v.compress(), "seed {seed}: {v:?}");
        }
    }

    #[test]
    fn text_zeros_and_repeats_are_judged_compressible() {
        let src = include_bytes!("heuristic.rs");
        let text: Vec<u8> = src.iter().cycle().take(131072).copied().collect();
        assert!(judge(&text).compress());
        assert_eq!(judge(&[0u8; 131072]), Verdict::Repeated);
        // A repeated block of random bytes: the heuristic sees the repetition.
        let block = random(4096, 7);
        let rep: Vec<u8> = block.iter().cycle().take(131072).copied().collect();
        assert!(judge(&rep).compress());
        assert_eq!(judge(&[1, 2, 3]), Verdict::Small);
    }

    #[test]
    fn machine_code_is_judged_compressible() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let mid = &exe[exe.len() / 3..][..131072.min(exe.len() / 2)];
        assert!(judge(mid).compress(), "{:?}", judge(mid));
    }

    #[test]
    fn compressed_data_is_judged_incompressible() {
        let src = include_bytes!("heuristic.rs");
        let text: Vec<u8> = src.iter().cycle().take(1 << 20).copied().collect();
        let mixed: Vec<u8> = text
            .iter()
            .zip(random(1 << 20, 3))
            .map(|(a, b)| a ^ (b & 0x0f))
            .collect();
        let z = zstd::bulk::compress(&mixed, 19).unwrap();
        let v = judge(&z[..131072.min(z.len())]);
        assert!(!v.compress(), "{v:?}");
    }
}
