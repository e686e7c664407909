//! What the commands show people: byte counts in binary units and progress bars on stderr.
//! Shared by every command (bench included); depends on nothing else in the crate.

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar on stderr (hidden when stderr is not a terminal), `{counts}` filling in
/// what it counts.
fn styled_bar(len: u64, what: &str, counts: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(&format!("{what} [{{bar:30}}] {counts}"))
            .expect("valid template")
            .progress_chars("=> "),
    );
    b
}

/// A progress bar counting items.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    styled_bar(len, what, "{pos}/{len} {msg} ({elapsed})")
}

/// A progress bar counting bytes, with the rate and the time left.
pub fn bytes_bar(len: u64, what: &str) -> ProgressBar {
    styled_bar(
        len,
        what,
        "{binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {msg} ({elapsed}, {eta} left)",
    )
}

/// 1536 -> "1.5 KiB".
pub fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 20), "3.0 MiB");
    }
}
