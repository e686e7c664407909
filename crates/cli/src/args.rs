//! Command-line arguments that several commands take, declared once and flattened into
//! each (`#[command(flatten)]`), so their names and help stay the same everywhere.

use std::path::PathBuf;

// No doc comments on these structs: on a flattened struct they would become the about
// text of the command they are flattened into.

// What to mount where: `squeezefs mount` and the mount-helper form
// (`squeezefs BACKING MOUNTPOINT -o OPTIONS`, parsed by `daemon::helper_form`).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct MountArgs {
    /// Directory that holds the compressed files (must exist; `-o create` makes it).
    pub backing: PathBuf,
    /// Where the uncompressed view appears (a directory; `-o create` makes it).
    pub mountpoint: PathBuf,
    /// Mount options (see below).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
}

#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Output {
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Paths {
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}
