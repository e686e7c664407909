//! `squeezefs bench`: the tables users pick a codec from, made on their own data.
//! `codecs` measures the codecs in memory through the filesystem's encode path; `fs` runs
//! whole workloads on squeezefs, kernel btrfs and the host filesystem side by side.

pub mod codecs;
pub mod fs;
mod plot;
mod report;
mod targets;
mod util;

#[derive(clap::Subcommand)]
pub enum BenchCmd {
    /// Ratio and speed of every codec and level on your files (in memory, one core).
    Codecs(codecs::CodecsArgs),
    /// Whole workloads through squeezefs, kernel btrfs (compress-force) and the host
    /// filesystem, side by side: table, JSON and a PNG plot.
    Fs(fs::FsArgs),
}

pub fn main(cmd: BenchCmd) -> Result<(), String> {
    match cmd {
        BenchCmd::Codecs(a) => codecs::main(a),
        BenchCmd::Fs(a) => fs::main(a),
    }
}
