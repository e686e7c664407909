//! Deterministic test data for squeezefs's tests (a dev-dependency only): incompressible
//! bytes, compressible text, and variants of them. The same call always returns the same
//! bytes, on every machine and in every run, so a failing test can be replayed.
//!
//! * [`random`]: xorshift64 noise, incompressible (the compression heuristic says so, and
//!   no codec gains on it).
//! * [`text`]: Rust source with its comments (a frozen copy of squeezefs code,
//!   `sample_source.txt`, 16 KiB) repeated: compressible like real code, with a period
//!   longer than a small extent so a 4 KiB extent does not see itself repeat.
//! * [`text_salted`]: the same text with every byte XORed with a salt, so files made with
//!   different salts differ everywhere and yet compress as well.
//! * [`log_lines`]: numbered log lines (`00000042 some log line`), text that changes all
//!   along (no period), for data whose every extent must be distinct.

/// The text [`text`] repeats: a copy of a squeezefs source file, frozen here so that the
/// data does not change when the tests themselves are edited.
pub const SAMPLE_SOURCE: &[u8] = include_bytes!("sample_source.txt");

/// `len` bytes of xorshift64 noise (shifts 13, 7, 17; bits 24..32 of each state) from
/// `seed` (an even seed is made odd, so 0 works).
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `len` bytes of source text: [`SAMPLE_SOURCE`] repeated.
pub fn text(len: usize) -> Vec<u8> {
    SAMPLE_SOURCE.iter().cycle().take(len).copied().collect()
}

/// [`text`] with each byte XORed with `salt` (salt 0 gives [`text`] itself).
pub fn text_salted(len: usize, salt: u8) -> Vec<u8> {
    SAMPLE_SOURCE.iter().cycle().take(len).map(|b| b ^ salt).collect()
}

/// `len` bytes of log lines numbered from 0, each `{i:08} some log line\n` (24 bytes).
pub fn log_lines(len: usize) -> Vec<u8> {
    (0..)
        .flat_map(|i: u32| format!("{i:08} some log line\n").into_bytes())
        .take(len)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_deterministic_and_as_documented() {
        assert_eq!(random(64, 5), random(64, 5));
        assert_ne!(random(64, 5), random(64, 6));
        assert_eq!(random(16, 0), random(16, 1), "an even seed is made odd");
        // The first bytes of xorshift64 from 1 (bits 24..32).
        let mut x = 1u64;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        assert_eq!(random(1, 1)[0], (x >> 24) as u8);
        let t = text(3 * SAMPLE_SOURCE.len() + 5);
        assert_eq!(&t[..SAMPLE_SOURCE.len()], SAMPLE_SOURCE);
        assert_eq!(&t[SAMPLE_SOURCE.len()..2 * SAMPLE_SOURCE.len()], SAMPLE_SOURCE);
        assert_eq!(t.len(), 3 * SAMPLE_SOURCE.len() + 5);
        assert_eq!(text_salted(100, 0), text(100));
        assert!(text_salted(100, 0x55)
            .iter()
            .zip(text(100))
            .all(|(a, b)| *a == b ^ 0x55));
        assert_eq!(
            &log_lines(50)[..],
            &b"00000000 some log line\n00000001 some log line\n0000"[..]
        );
    }
}
