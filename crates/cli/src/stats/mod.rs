//! `squeezefs stats`: how much space files take, per codec and level (`path`, like
//! compsize; `--by rule` also per compression rule), or with `--live` what a running daemon
//! has done (`live`).

mod live;
pub mod path;

use std::path::PathBuf;

/// What `--by` groups the files by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// The compression rule that applies to each file's name now (its directory's `rules`,
    /// else the mount's `rules=`; files no rule matches are one group).
    Rule,
}

/// The whole command: `--live MOUNTPOINT` reads the daemon's counters, otherwise the files
/// under `paths` are counted (`by`: also in groups).
pub fn main(
    live: bool,
    paths: &[PathBuf],
    dict_gain: bool,
    by: Option<By>,
    json: bool,
) -> Result<u8, String> {
    if live {
        match paths {
            [m] => live::main(m, json).map(|()| 0),
            _ => Err("--live takes exactly one MOUNTPOINT".into()),
        }
    } else {
        path::main(paths, dict_gain, by == Some(By::Rule), json)
    }
}
