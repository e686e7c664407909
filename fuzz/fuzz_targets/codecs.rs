//! Every codec's decompressor on hostile payloads, with the algorithm and the claimed
//! length from the input (capped at the largest extent, as the container caps it), and
//! compression round trips at levels from the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use squeezefs_codec::{compress, decompress, Algorithm, CodecSpec};

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let alg = Algorithm::ALL[data[0] as usize % Algorithm::ALL.len()];
    let claimed = u32::from_le_bytes([data[1], data[2], data[3], data[4]]) as usize % ((1 << 20) + 1);
    let payload = &data[5..];
    let mut out = vec![0u8; claimed];
    let _ = decompress(alg, payload, &mut out);

    // Round trip: what compresses must come back exactly.
    let level = i8::from_le_bytes([data[1]]) as i32;
    if let Ok(spec) = CodecSpec::new(alg, level) {
        let mut packed = Vec::new();
        if compress(spec, payload, &mut packed, payload.len() + 64).unwrap_or(false) {
            let mut back = vec![0u8; payload.len()];
            decompress(alg, &packed, &mut back).expect("own output decodes");
            assert!(back == payload, "{spec}: round trip differs");
        }
    }
});
