//! `squeezefs stats`: how much space files take, per codec and level (`path`, like
//! compsize), or with `--live` what a running daemon has done (`live`).

mod live;
pub mod path;

use std::path::PathBuf;

/// The whole command: `--live MOUNTPOINT` reads the daemon's counters, otherwise the files
/// under `paths` are counted.
pub fn main(live: bool, paths: &[PathBuf], dict_gain: bool, json: bool) -> Result<u8, String> {
    if live {
        match paths {
            [m] => live::main(m, json).map(|()| 0),
            _ => Err("--live takes exactly one MOUNTPOINT".into()),
        }
    } else {
        path::main(paths, dict_gain, json)
    }
}
