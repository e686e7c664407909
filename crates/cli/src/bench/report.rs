//! The results of `bench fs`: one row per workload and method, and the report around them
//! (written as JSON, printed as tables by `fs`, drawn by `plot`).

use serde::Serialize;

#[derive(Serialize, Clone, Debug)]
pub struct FsRow {
    pub workload: String,
    pub method: String,
    pub logical_bytes: u64,
    pub disk_bytes: u64,
    pub ratio: f64,
    /// Seconds per timed step, in order (corpus: write, read; tarball: copy, extract, read).
    pub steps: Vec<(String, f64)>,
    pub write_mb_s: f64,
    pub read_mb_s: f64,
    /// Peak resident memory of the squeezefs daemon (0 for kernel filesystems).
    pub daemon_peak_rss: u64,
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
