//! Turning one extent's bytes into a stored half (`header ‖ payload`) and back. Pure: no I/O.

use squeezefs_codec::{compress, decompress, decompress_padded, dict, heuristic, Algorithm, CodecSpec};
use xxhash_rust::xxh3::xxh3_64;

use crate::format::{ExtentHeader, BLOCK, EXTENT_FLAG_DICT, EXTENT_HEADER_LEN};

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

/// Why an extent was stored raw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawWhy {
    /// The codec is `none`.
    NoCodec,
    /// Too small for any compressed size to save a block.
    TooSmall,
    /// The file is flagged incompressible and this write is not a retry: not even judged.
    Backoff,
    /// The heuristic judged it incompressible and a fast lz4 pass agreed: the requested
    /// codec never ran.
    Heuristic,
    /// Early abort: neither lz4 nor zstd-1 saved enough, so the requested level never ran.
    EarlyAbort,
    /// Compressed, but the result did not save 12.5 % and one block.
    NoGain,
    /// The file's first bytes say it is already compressed (JPEG, ZIP, zstd, …:
    /// `squeezefs_codec::content`): not even judged.
    ContentType,
}

/// Which probe let the requested codec run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Early abort: lz4 saved enough.
    Lz4,
    /// Early abort: lz4 did not, zstd-1 did.
    Zstd1,
    /// The heuristic said incompressible, but lz4 saved enough: overruled.
    Overruled,
}

/// What happened to one extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `dict`: compressed with the file's dictionary.
    Compressed {
        codec: CodecSpec,
        probe: Option<Probe>,
        dict: bool,
    },
    Raw {
        why: RawWhy,
        probe: Option<Probe>,
    },
}

impl Outcome {
    /// For the per-file backoff: `Some(true)` the data resisted compression, `Some(false)` it
    /// compressed, `None` nothing was learnt (not tried, or tried only out of choice).
    pub fn failed(&self) -> Option<bool> {
        match self {
            Outcome::Compressed { .. } => Some(false),
            Outcome::Raw { why, .. } => match why {
                RawWhy::Heuristic | RawWhy::EarlyAbort | RawWhy::NoGain => Some(true),
                RawWhy::NoCodec | RawWhy::TooSmall | RawWhy::Backoff | RawWhy::ContentType => None,
            },
        }
    }
}

/// How extents are compressed: the codec, whether the rules that skip compression apply
/// (`compress=`) or not (`compress-force=`), and the file's zstd dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub codec: CodecSpec,
    pub force: bool,
    /// Dictionary id for small zstd data (`dict::DICT_MAX_INPUT`); used when it is loaded.
    pub dict: Option<u32>,
    /// The file's first bytes named an already-compressed format: without `force`, its
    /// extents are stored raw untried ([`RawWhy::ContentType`]).
    pub compressed_content: bool,
}

impl Policy {
    pub fn new(codec: CodecSpec, force: bool) -> Policy {
        Policy {
            codec,
            force,
            dict: None,
            compressed_content: false,
        }
    }
}

/// Compresses `data` with `codec`, with dictionary `dict` when the codec is zstd, the data
/// is small enough and the dictionary is loaded. Returns whether it fit in `limit`, and
/// whether the dictionary was used.
pub fn compress_with_dict(
    codec: CodecSpec,
    dict: Option<u32>,
    data: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> (bool, bool) {
    if codec.alg == Algorithm::Zstd && data.len() <= dict::DICT_MAX_INPUT {
        if let Some(d) = dict.and_then(dict::get) {
            return (
                dict::compress(&d, codec.level, data, out, limit).unwrap_or(false),
                true,
            );
        }
    }
    (compress(codec, data, out, limit).unwrap_or(false), false)
}

/// zstd levels from this one up are probed first (ZFS `zstd_earlyabort_pass`, cutoff level 3).
pub const EARLY_ABORT_LEVEL: i32 = 3;
/// …for extents of at least this size (ZFS `zstd_abort_size`, 128 KiB).
pub const EARLY_ABORT_MIN: usize = 128 << 10;

/// Whether `codec` gives up on data that does not compress about as fast as lz4 does, so
/// that trying it costs no more than an lz4 pass would: fast lz4 (levels 1–2; 3–12 are
/// LZ4HC), lzo, and zstd up to level 2 (fast levels included). Measured (`squeezefs bench
/// codecs`, 1 MiB extents, one core): on random bytes lz4 1,208 MB/s, zstd:1 1,079; on
/// shared libraries, whose machine code the heuristic often calls incompressible, lz4 395
/// and zstd:1 329, so the lz4 pass before zstd:1 added 83 % to such an extent's time (7 %
/// of a copy's compression time on issue 45's mix).
fn as_cheap_as_lz4(codec: CodecSpec) -> bool {
    match codec.alg {
        Algorithm::Lz4 | Algorithm::Zstd => codec.level <= 2,
        Algorithm::Lzo => true,
        _ => false,
    }
}

/// Compresses `data` under `policy` into `payload`; the outcome says whether the payload
/// holds the compressed bytes (else the caller stores `data` raw).
fn compress_extent(policy: Policy, skip: bool, data: &[u8], payload: &mut Vec<u8>) -> Outcome {
    let raw = |why| Outcome::Raw { why, probe: None };
    let codec = policy.codec;
    if codec.alg == Algorithm::None {
        return raw(RawWhy::NoCodec);
    }
    let Some(limit) = compressed_limit(data.len()) else {
        return raw(RawWhy::TooSmall);
    };
    let lz4 = CodecSpec {
        alg: Algorithm::Lz4,
        level: 1,
    };
    let mut probe = None;
    if !policy.force {
        if policy.compressed_content {
            return raw(RawWhy::ContentType);
        }
        if skip {
            return raw(RawWhy::Backoff);
        }
        if !heuristic::judge(data).compress() {
            // btrfs's byte statistics cannot see repeated strings: machine code often has
            // near-random byte frequencies yet compresses 2:1 (measured on the corpus:
            // 43 ELF extents, 2.7 MB of savings lost). A fast lz4 pass, cheap on data that
            // is really incompressible, confirms the verdict first…
            if as_cheap_as_lz4(codec) {
                // …unless the codec itself costs about as much there: then it is the pass.
                let (fits, dict) = compress_with_dict(codec, policy.dict, data, payload, limit);
                return if fits {
                    Outcome::Compressed {
                        codec,
                        probe: Some(Probe::Overruled),
                        dict,
                    }
                } else {
                    raw(RawWhy::Heuristic)
                };
            }
            if !compress(lz4, data, payload, limit).unwrap_or(false) {
                return raw(RawWhy::Heuristic);
            }
            probe = Some(Probe::Overruled);
        }
    }
    // ZFS early abort: a high zstd level costs many times lz4's time, so ask the cheap
    // compressors first whether this extent compresses at all.
    if !policy.force
        && probe.is_none()
        && codec.alg == Algorithm::Zstd
        && codec.level >= EARLY_ABORT_LEVEL
        && data.len() >= EARLY_ABORT_MIN
    {
        let zstd1 = CodecSpec {
            alg: Algorithm::Zstd,
            level: 1,
        };
        probe = if compress(lz4, data, payload, limit).unwrap_or(false) {
            Some(Probe::Lz4)
        } else if compress(zstd1, data, payload, limit).unwrap_or(false) {
            Some(Probe::Zstd1)
        } else {
            return raw(RawWhy::EarlyAbort);
        };
    }
    let (fits, dict) = compress_with_dict(codec, policy.dict, data, payload, limit);
    if fits {
        Outcome::Compressed { codec, probe, dict }
    } else {
        Outcome::Raw {
            why: RawWhy::NoGain,
            probe,
        }
    }
}

/// Encodes `data` (the extent's logical bytes, non-empty) as a half under `policy`:
/// compressed when that pays, raw otherwise. `skip`: the file's backoff says not to try.
pub fn encode_extent(
    policy: Policy,
    skip: bool,
    index: u64,
    generation: u64,
    data: &[u8],
) -> (Vec<u8>, Outcome) {
    debug_assert!(!data.is_empty());
    let mut out = Vec::with_capacity(EXTENT_HEADER_LEN + data.len());
    out.resize(EXTENT_HEADER_LEN, 0);
    let mut payload = Vec::new();
    let outcome = compress_extent(policy, skip, data, &mut payload);
    let (alg, level, flags) = match outcome {
        Outcome::Compressed { codec, dict, .. } => (
            codec.alg,
            codec.level as i16,
            if dict { EXTENT_FLAG_DICT } else { 0 },
        ),
        Outcome::Raw { .. } => {
            payload.clear();
            payload.extend_from_slice(data);
            (Algorithm::None, 0, 0)
        }
    };
    let h = ExtentHeader {
        codec: alg,
        flags,
        level,
        index,
        generation,
        stored_len: payload.len() as u32,
        logical_len: data.len() as u32,
        payload_sum: xxh3_64(&payload),
    };
    out[..EXTENT_HEADER_LEN].copy_from_slice(&h.encode());
    out.extend_from_slice(&payload);
    (out, outcome)
}

/// Encodes with `codec` on every extent, as `compress-force=` does (no heuristic, no early
/// abort): what `squeezefs bench codecs` measures.
pub fn encode_half(codec: CodecSpec, index: u64, generation: u64, data: &[u8]) -> Vec<u8> {
    encode_extent(Policy::new(codec, true), false, index, generation, data).0
}

/// Checks a payload against its header's checksum.
pub fn payload_ok(h: &ExtentHeader, payload: &[u8]) -> bool {
    payload.len() == h.stored_len as usize && xxh3_64(payload) == h.payload_sum
}

/// Decodes a verified payload into `dst[..logical_len]`. A zstd frame must name a
/// dictionary exactly when the header's dictionary flag says so.
pub fn decode_payload(h: &ExtentHeader, payload: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let n = h.logical_len as usize;
    if dst.len() < n {
        return Err("logical length exceeds extent".into());
    }
    check_dict_flag(h, payload)?;
    decompress(h.codec, payload, &mut dst[..n]).map_err(|e| e.to_string())
}

/// A zstd frame names a dictionary exactly when the header's `DICT` flag says so.
fn check_dict_flag(h: &ExtentHeader, payload: &[u8]) -> Result<(), String> {
    if h.codec == Algorithm::Zstd
        && dict::frame_dict_id(payload).is_some() != (h.flags & EXTENT_FLAG_DICT != 0)
    {
        return Err("the frame's dictionary does not match the header's dictionary flag".into());
    }
    Ok(())
}

/// [`decode_payload`] into a new extent buffer of `len` bytes (the decoded bytes, then
/// zeros), without zeroing what the codec writes (`Codec::decompress_padded`).
pub fn decode_payload_padded(h: &ExtentHeader, payload: &[u8], len: usize) -> Result<Box<[u8]>, String> {
    let n = h.logical_len as usize;
    if len < n {
        return Err("logical length exceeds extent".into());
    }
    check_dict_flag(h, payload)?;
    decompress_padded(h.codec, payload, n, len)
        .map(Vec::into_boxed_slice)
        .map_err(|e| e.to_string())
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
/// `max` (with the dictionary `dict` when it applies: the frame then names it), raw when the
/// raw bytes fit, `None` when neither does.
pub fn encode_inline(
    codec: CodecSpec,
    dict: Option<u32>,
    data: &[u8],
    max: usize,
) -> Option<(Algorithm, Vec<u8>)> {
    if data.is_empty() {
        return Some((Algorithm::None, Vec::new()));
    }
    let mut out = Vec::new();
    if codec.alg != Algorithm::None {
        let limit = max.min(data.len().saturating_sub(1));
        if limit > 0 && compress_with_dict(codec, dict, data, &mut out, limit).0 {
            return Some((codec.alg, out));
        }
    }
    (data.len() <= max).then(|| (Algorithm::None, data.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_testdata::{random, text};

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
    fn a_codec_as_cheap_as_lz4_is_its_own_check_of_the_heuristic() {
        // 3,000 random bytes over and over: near-random byte frequencies, and the sample's
        // halves differ, so the heuristic calls it incompressible; any codec finds it 40:1.
        let block = random(3000, 7);
        let misjudged: Vec<u8> = block.iter().cycle().take(131072).copied().collect();
        assert!(
            !heuristic::judge(&misjudged).compress(),
            "the heuristic is wrong here"
        );
        let rnd = random(131072, 5);
        let outcome = |codec, data: &[u8]| encode_extent(Policy::new(codec, false), false, 0, 1, data).1;
        // The codec ran although the heuristic said no.
        let overruled = |codec| Outcome::Compressed {
            codec,
            probe: Some(Probe::Overruled),
            dict: false,
        };
        let cheap = [
            CodecSpec::new(Algorithm::Zstd, 1).unwrap(),
            CodecSpec::new(Algorithm::Zstd, -1).unwrap(),
            CodecSpec::new(Algorithm::Lz4, 1).unwrap(),
            CodecSpec::new(Algorithm::Lzo, 0).unwrap(),
        ];
        for codec in cheap {
            assert!(as_cheap_as_lz4(codec), "{codec:?}");
            assert_eq!(outcome(codec, &misjudged), overruled(codec), "{codec:?}");
            assert_eq!(
                outcome(codec, &rnd),
                Outcome::Raw {
                    why: RawWhy::Heuristic,
                    probe: None
                },
                "{codec:?}"
            );
        }
        // Repeats farther apart than lz4's 64 KiB window: lz4 finds nothing, zstd (a 1 MiB
        // window for a 1 MiB extent) all of it. A cheap zstd level, its own check, keeps it;
        // a dear one is still turned away by the lz4 pass.
        let block = random(80 << 10, 9);
        let far: Vec<u8> = block.iter().cycle().take(1 << 20).copied().collect();
        assert!(
            !heuristic::judge(&far).compress(),
            "the heuristic is wrong here too"
        );
        for level in [1, -1] {
            let codec = CodecSpec::new(Algorithm::Zstd, level).unwrap();
            assert_eq!(outcome(codec, &far), overruled(codec));
        }
        assert_eq!(
            outcome(CodecSpec::new(Algorithm::Zstd, 3).unwrap(), &far),
            Outcome::Raw {
                why: RawWhy::Heuristic,
                probe: None
            }
        );
        // Dearer codecs keep the lz4 pass: it overrules the heuristic, then they run.
        for codec in [
            CodecSpec::new(Algorithm::Zstd, 3).unwrap(),
            CodecSpec::new(Algorithm::Zlib, 6).unwrap(),
            CodecSpec::new(Algorithm::Lz4, 9).unwrap(),
        ] {
            assert!(!as_cheap_as_lz4(codec), "{codec:?}");
            assert_eq!(outcome(codec, &misjudged), overruled(codec), "{codec:?}");
        }
    }

    #[test]
    fn each_rule_decides_as_documented() {
        let zstd9 = CodecSpec::new(Algorithm::Zstd, 9).unwrap();
        let zstd1 = CodecSpec::new(Algorithm::Zstd, 1).unwrap();
        let compress =
            |codec, force, skip, data: &[u8]| encode_extent(Policy::new(codec, force), skip, 0, 1, data).1;
        let rnd = random(131072, 5);
        let txt = text(131072);
        // compress=: random data never reaches a compressor.
        assert_eq!(
            compress(zstd9, false, false, &rnd),
            Outcome::Raw {
                why: RawWhy::Heuristic,
                probe: None
            }
        );
        // compress-force=: it is compressed, and fails to gain.
        assert_eq!(
            compress(zstd9, true, false, &rnd),
            Outcome::Raw {
                why: RawWhy::NoGain,
                probe: None
            }
        );
        // Backoff: not even judged, unless forced.
        assert_eq!(
            compress(zstd9, false, true, &txt),
            Outcome::Raw {
                why: RawWhy::Backoff,
                probe: None
            }
        );
        assert!(matches!(
            compress(zstd9, true, true, &txt),
            Outcome::Compressed { .. }
        ));
        // Text at zstd:9: lz4 passes the probe, then level 9 runs.
        assert_eq!(
            compress(zstd9, false, false, &txt),
            Outcome::Compressed {
                codec: zstd9,
                probe: Some(Probe::Lz4),
                dict: false,
            }
        );
        // Below level 3 (and below 128 KiB) there is no probe.
        assert_eq!(
            compress(zstd1, false, false, &txt),
            Outcome::Compressed {
                codec: zstd1,
                probe: None,
                dict: false,
            }
        );
        assert_eq!(
            compress(zstd9, false, false, &txt[..65536]),
            Outcome::Compressed {
                codec: zstd9,
                probe: None,
                dict: false,
            }
        );
        assert_eq!(
            compress(CodecSpec::NONE, false, false, &txt),
            Outcome::Raw {
                why: RawWhy::NoCodec,
                probe: None
            }
        );
    }

    #[test]
    fn early_abort_stores_raw_what_passes_the_heuristic_but_not_the_probes() {
        // Each 256 bytes: 16 zeros (all the heuristic samples, so it sees repetition),
        // then 240 random bytes: only ~6 % is compressible, below the 12.5 % rule.
        let rnd = random(131072, 11);
        let data: Vec<u8> = (0..131072)
            .map(|i| if i % 256 < 16 { 0 } else { rnd[i] })
            .collect();
        let v = heuristic::judge(&data);
        let zstd9 = CodecSpec::new(Algorithm::Zstd, 9).unwrap();
        let (_, out) = encode_extent(Policy::new(zstd9, false), false, 0, 1, &data);
        let (_, forced) = encode_extent(Policy::new(zstd9, true), false, 0, 1, &data);
        if v.compress()
            && forced
                == (Outcome::Raw {
                    why: RawWhy::NoGain,
                    probe: None,
                })
        {
            assert_eq!(
                out,
                Outcome::Raw {
                    why: RawWhy::EarlyAbort,
                    probe: None
                }
            );
        } else {
            panic!("test data must pass the heuristic and resist zstd:9: {v:?} {forced:?}");
        }
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
