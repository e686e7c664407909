//! A real container built from the input (extent size, codec, writes, truncation), then
//! damaged at positions the input chooses, then read, sought and scrubbed: reaches deep
//! states that random images never would.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use squeezefs_codec::{Algorithm, CodecSpec};
use squeezefs_container::format::KeptTimes;
use squeezefs_container::sim::MemDisk;
use squeezefs_container::{Container, Options};

#[path = "common.rs"]
mod common;

fn build(u: &mut Unstructured) -> Result<Vec<u8>> {
    let shift = u.int_in_range(12u8..=17)?;
    let alg = *u.choose(&Algorithm::ALL)?;
    let level: i32 = match alg {
        Algorithm::Zstd => u.int_in_range(-5..=9)?,
        Algorithm::Zlib => u.int_in_range(1..=9)?,
        Algorithm::Lz4 => u.int_in_range(1..=12)?,
        _ => 0,
    };
    let codec = CodecSpec::new(alg, if level == 0 && alg == Algorithm::Zstd { 1 } else { level })
        .unwrap_or(CodecSpec::DEFAULT);
    let opts = Options {
        codec,
        extent_shift: shift,
        force: u.arbitrary()?,
        ..Options::default()
    };
    let disk = MemDisk::new();
    let mut c = Container::open(disk.clone(), &opts).expect("empty disk");
    for _ in 0..u.int_in_range(0..=6)? {
        match u.int_in_range(0..=5)? {
            0..=2 => {
                let off = u.int_in_range(0u64..=300_000)?;
                let len = u.int_in_range(0usize..=40_000)?;
                let seed: u8 = u.arbitrary()?;
                let repeat = u.int_in_range(1usize..=64)?;
                let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add((i / repeat) as u8)).collect();
                let _ = c.write(off, &data);
            }
            3 => {
                let _ = c.set_size(u.int_in_range(0u64..=400_000)?);
            }
            4 => {
                // The background pass: extents to another level, the times kept
                // (a version 5 superblock).
                let target = CodecSpec::new(Algorithm::Zstd, u.int_in_range(1..=9)?).unwrap_or(CodecSpec::DEFAULT);
                let kept = KeptTimes {
                    ctime: (u.arbitrary()?, u.int_in_range(0..=999_999_999)?),
                    mtime: (u.arbitrary()?, u.int_in_range(0..=999_999_999)?),
                };
                if let Ok(todo) = c.pending_for(target) {
                    let _ = c.recompress_extents(target, &todo, Some(kept));
                }
            }
            _ => {
                let _ = c.fsync();
            }
        }
    }
    let _ = c.fsync();
    drop(c);
    let mut image = disk.contents();
    // Damage it: flips, a cut, or garbage appended.
    for _ in 0..u.int_in_range(0..=4)? {
        if image.is_empty() {
            break;
        }
        let at = u.int_in_range(0..=image.len() - 1)?;
        image[at] ^= u.int_in_range(1u8..=255)?;
    }
    if u.ratio(1u8, 8)? {
        let cut = u.int_in_range(0..=image.len())?;
        image.truncate(cut);
    }
    Ok(image)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(image) = build(&mut u) {
        common::exercise(&image);
    }
});
