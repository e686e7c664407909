//! Sizes as users write them in options and properties (`131072`, `128K`, `1M`), and
//! extent sizes, which are powers of two from 4 KiB to 1 MiB, kept as their log2.

use squeezefs_container::format::{MAX_EXTENT_SHIFT, MIN_EXTENT_SHIFT};

/// Parses a size such as `131072`, `128K`, `128KiB`, `1M`, `2G`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult) = if let Some(n) = lower.strip_suffix("kib").or_else(|| lower.strip_suffix('k')) {
        (n, 1024)
    } else if let Some(n) = lower.strip_suffix("mib").or_else(|| lower.strip_suffix('m')) {
        (n, 1 << 20)
    } else if let Some(n) = lower.strip_suffix("gib").or_else(|| lower.strip_suffix('g')) {
        (n, 1 << 30)
    } else {
        (lower.as_str(), 1)
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("`{t}` is not a size (examples: 131072, 128K, 1M)"))
}

/// An extent size (its log2) as [`parse_extent_size`] reads it back: `16K`, `1M`.
pub fn format_extent_size(shift: u8) -> String {
    if shift >= 20 {
        format!("{}M", 1u64 << (shift - 20))
    } else {
        format!("{}K", 1u64 << (shift.max(10) - 10))
    }
}

/// Parses an extent size into its log2, accepting powers of two from 4 KiB to 1 MiB.
pub fn parse_extent_size(s: &str) -> Result<u8, String> {
    let n = parse_size(s)?;
    if !n.is_power_of_two() || !(MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT).contains(&(n.trailing_zeros() as u8)) {
        return Err(format!("extent_size={s}: must be a power of two from 4K to 1M"));
    }
    Ok(n.trailing_zeros() as u8)
}
