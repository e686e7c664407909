//! The results of `bench fs`: one row per workload and method, and the report around them
//! (written as JSON, printed as tables by `fs`, drawn by `plot`).

use serde::Serialize;

#[derive(Serialize, Clone, Debug)]
pub struct FsRow {
    pub workload: String,
    pub method: String,
    pub logical_bytes: u64,
    pub disk_bytes: u64,
    /// NaN (JSON null) where the method stores only part of the workload (squashfs: the tree).
    pub ratio: f64,
    /// Tarball workloads: the extracted tree alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<Tree>,
    /// Seconds per timed step, in order (corpus: write, read; tarball: copy, extract, read;
    /// NaN where a method has no such step).
    pub steps: Vec<(String, f64)>,
    pub write_mb_s: f64,
    pub read_mb_s: f64,
    /// Peak resident memory of the squeezefs daemon (0 for kernel filesystems).
    pub daemon_peak_rss: u64,
}

/// The tree a tarball extracts to: its file bytes, and what it added on disk (disk used after
/// the extraction minus disk used after the copy of the .tar; squashfs: the image's size).
#[derive(Serialize, Clone, Debug)]
pub struct Tree {
    pub logical_bytes: u64,
    pub disk_bytes: u64,
    pub ratio: f64,
}

impl Tree {
    pub fn new(logical_bytes: u64, disk_bytes: u64) -> Tree {
        Tree {
            logical_bytes,
            disk_bytes,
            ratio: logical_bytes as f64 / disk_bytes.max(1) as f64,
        }
    }
}

#[derive(Serialize)]
pub struct FsReport {
    pub date: String,
    pub machine: String,
    pub host_fs: String,
    pub caches_dropped: bool,
    pub notes: Vec<String>,
    pub rows: Vec<FsRow>,
}
