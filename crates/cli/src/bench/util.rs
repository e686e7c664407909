//! Shared pieces of the benchmarks: the corpus in memory, tables.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use squeezefs_fs::{parse_extent_size, parse_size as parse_bytes};

/// Files read into memory, in walk order, up to a byte budget.
pub struct Corpus {
    files: Vec<Vec<u8>>,
}

/// Every regular file under `paths` (sorted per directory, symlinks not followed).
pub fn walk(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    fn visit(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
        let md = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if md.is_dir() {
            let mut names: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            names.sort();
            for n in names {
                visit(&n, out)?;
            }
        } else if md.is_file() {
            out.push(p.to_path_buf());
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        visit(p, &mut out)?;
    }
    Ok(out)
}

impl Corpus {
    /// Reads the files under `paths`; past `max_bytes` in all, a sample spread evenly over
    /// the whole tree (systematic, by size), so every kind of file is represented.
    pub fn load(paths: &[PathBuf], max_bytes: u64) -> Result<Corpus, String> {
        let all: Vec<(PathBuf, u64)> = walk(paths)?
            .into_iter()
            .filter_map(|p| std::fs::metadata(&p).ok().map(|m| (p, m.len())))
            .filter(|(_, n)| *n > 0)
            .collect();
        let total: u64 = all.iter().map(|(_, n)| n).sum();
        let mut files = Vec::new();
        let (mut seen, mut taken) = (0u64, 0u64);
        for (p, n) in all {
            seen += n;
            // Take a file while the sample is behind its share of what was walked so far.
            let share = (seen as u128 * max_bytes as u128 / total.max(1) as u128) as u64;
            if taken >= max_bytes || (total > max_bytes && taken >= share) {
                continue;
            }
            let mut data = Vec::new();
            let f = match std::fs::File::open(&p) {
                Ok(f) => f,
                // Unreadable files (permissions) are skipped, not fatal: say so.
                Err(e) => {
                    eprintln!("squeezefs: skipping {}: {e}", p.display());
                    continue;
                }
            };
            f.take(max_bytes - taken)
                .read_to_end(&mut data)
                .map_err(|e| format!("{}: {e}", p.display()))?;
            if !data.is_empty() {
                taken += data.len() as u64;
                files.push(data);
            }
        }
        Ok(Corpus { files })
    }

    pub fn files(&self) -> usize {
        self.files.len()
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len() as u64).sum()
    }

    /// Each file cut into extents of `1 << shift` bytes (the last one shorter), as the
    /// filesystem cuts it.
    pub fn extents(&self, shift: u8) -> impl Iterator<Item = &[u8]> {
        self.files.iter().flat_map(move |f| f.chunks(1 << shift))
    }
}

pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// A plain text table with right-aligned numbers.
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w: Vec<usize> = self.head.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, r: &[String]| -> fmt::Result {
            for (i, c) in r.iter().enumerate() {
                if i == 0 {
                    write!(f, "{c:<width$}", width = w[0])?;
                } else {
                    write!(f, "  {c:>width$}", width = w[i])?;
                }
            }
            writeln!(f)
        };
        line(f, &self.head)?;
        let total: usize = w.iter().sum::<usize>() + 2 * (w.len() - 1);
        writeln!(f, "{}", "-".repeat(total))?;
        for r in &self.rows {
            line(f, r)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["codec", "ratio"]);
        t.row(vec!["zstd:19".into(), "3.1".into()]);
        let s = t.to_string();
        assert!(s.contains("zstd:19    3.1"), "{s}");
    }
}
