//! Every codec's decompressor on hostile payloads, with the algorithm and the claimed
//! length from the input (capped at the largest extent, as the container caps it), and
//! compression round trips at levels from the input. zstd also with a registered dictionary
//! (frames naming it, or naming one that is not loaded), and dictionary files as
//! `.squeezefs-dicts` would hold them.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use squeezefs_codec::{compress, decompress, dict, Algorithm, CodecSpec};

/// A small dictionary, trained once per process.
fn dictionary() -> u32 {
    static ID: OnceLock<u32> = OnceLock::new();
    *ID.get_or_init(|| {
        let samples: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("{{\"id\": {i}, \"kind\": \"sample\", \"value\": {}}}\n", i * 7 % 31).into_bytes())
            .collect();
        let refs: Vec<&[u8]> = samples.iter().map(|s| s.as_slice()).collect();
        dict::register(&dict::train(&refs, 2048).expect("training")).expect("register")
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let id = dictionary();
    let alg = Algorithm::ALL[data[0] as usize % Algorithm::ALL.len()];
    let claimed = u32::from_le_bytes([data[1], data[2], data[3], data[4]]) as usize % ((1 << 20) + 1);
    let payload = &data[5..];
    let mut out = vec![0u8; claimed];
    let _ = decompress(alg, payload, &mut out);
    // The same bytes as a dictionary file: refused or accepted, never a panic.
    let _ = squeezefs_container::dicts::decode(payload);

    // Round trip: what compresses must come back exactly.
    let level = i8::from_le_bytes([data[1]]) as i32;
    if let Ok(spec) = CodecSpec::new(alg, level) {
        let mut packed = Vec::new();
        if compress(spec, payload, &mut packed, payload.len() + 64).unwrap_or(false) {
            let mut back = vec![0u8; payload.len()];
            decompress(alg, &packed, &mut back).expect("own output decodes");
            assert!(back == payload, "{spec}: round trip differs");
        }
        if alg == Algorithm::Zstd {
            let d = dict::get(id).expect("registered");
            if dict::compress(&d, spec.level, payload, &mut packed, payload.len() + 64).unwrap_or(false) {
                assert_eq!(dict::frame_dict_id(&packed), Some(id));
                let mut back = vec![0u8; payload.len()];
                decompress(alg, &packed, &mut back).expect("own dictionary output decodes");
                assert!(back == payload, "{spec} with dictionary: round trip differs");
            }
        }
    }
});
