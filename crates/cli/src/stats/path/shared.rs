//! Blocks the backing filesystem shares between files, counted once (compsize counts btrfs
//! extents once the same way): a copy within an XFS or btrfs mount (`copy_file_range`), the
//! background pass's dedupe, or a reflink copy of backing files makes two files' extent
//! copies the same physical blocks. `usage::shared_blocks` names, per file, the blocks of
//! its current copies `FIEMAP` flags shared, at their physical addresses; the first file of
//! the scan that names a block counts it, every later one does not. Blocks are told apart by
//! device and address: btrfs subvolumes have devices of their own, so blocks shared across
//! them count once per subvolume (over, never under).

use std::collections::{BTreeMap, HashMap};

use squeezefs_container::usage::{Kind, Usage};

/// Physical byte ranges already counted, per device.
#[derive(Default)]
pub struct Claimed(HashMap<u64, Ranges>);

/// Disjoint ranges `start → end`, sorted.
#[derive(Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `[s, e)`; returns how much of it was already there.
    fn claim(&mut self, s: u64, e: u64) -> u64 {
        let (mut lo, mut hi, mut had) = (s, e, 0);
        // Ranges that meet or touch `[s, e)`: sorted and disjoint, so walking down from the
        // last one starting at or before `e`, the first one ending before `s` ends it.
        let meet: Vec<(u64, u64)> = self
            .0
            .range(..=e)
            .rev()
            .take_while(|(_, &end)| end >= s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in meet {
            self.0.remove(&a);
            had += b.min(e).saturating_sub(a.max(s));
            lo = lo.min(a);
            hi = hi.max(b);
        }
        self.0.insert(lo, hi);
        had
    }
}

impl Claimed {
    /// Claims the shared blocks of one file on device `dev` (`(kind, physical, length)`)
    /// and takes those an earlier file claimed out of its rows' disk. Returns those bytes.
    pub fn count_once(&mut self, dev: u64, shared: &[(Kind, u64, u64)], u: &mut Usage) -> u64 {
        let ranges = self.0.entry(dev).or_default();
        let mut again = 0;
        for &(kind, at, len) in shared {
            let had = ranges.claim(at, at + len);
            if had == 0 {
                continue;
            }
            if let Some(p) = u.parts.get_mut(&kind) {
                let had = had.min(p.disk);
                p.disk -= had;
                // What is left of a copy's rounding is in what is left of its disk.
                p.slack = p.slack.min(p.disk);
                again += had;
            }
        }
        again
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_codec::Algorithm;
    use squeezefs_container::usage::Part;

    #[test]
    fn a_range_counts_what_was_claimed_before_once() {
        let mut r = Ranges::default();
        assert_eq!(r.claim(100, 200), 0);
        assert_eq!(r.claim(100, 200), 100);
        assert_eq!(r.claim(150, 250), 50);
        assert_eq!(r.claim(300, 400), 0);
        // Across both, and the gap between them.
        assert_eq!(r.claim(0, 500), 250);
        assert_eq!(r.0.len(), 1, "merged: {:?}", r.0);
        assert_eq!(r.claim(500, 600), 0, "touching is not overlapping");
        assert_eq!(r.claim(0, 600), 600);
    }

    #[test]
    fn a_second_file_naming_the_same_blocks_counts_none_of_them() {
        let k = Kind::Extent(Algorithm::Zstd, 1);
        let usage = |disk, slack| Usage {
            parts: [(
                k,
                Part {
                    extents: 2,
                    disk,
                    uncompressed: 1 << 20,
                    slack,
                },
            )]
            .into(),
            ..Usage::default()
        };
        let mut c = Claimed::default();
        let blocks = [(k, 1 << 20, 8192), (k, 2 << 20, 4096)];
        let mut a = usage(12288, 100);
        assert_eq!(c.count_once(7, &blocks, &mut a), 0);
        assert_eq!(a.parts[&k].disk, 12288);
        let mut b = usage(12288, 100);
        assert_eq!(c.count_once(7, &blocks, &mut b), 12288);
        assert_eq!((b.parts[&k].disk, b.parts[&k].slack), (0, 0));
        // The same addresses on another device are other blocks.
        let mut d = usage(12288, 100);
        assert_eq!(c.count_once(8, &blocks, &mut d), 0);
    }
}
