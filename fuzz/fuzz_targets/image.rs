//! Arbitrary bytes as a backing file: the superblock and extent-header parsers, the
//! "never committed" and "decayed magic" rules, reads and `check`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    common::exercise(data);
});
