//! How `squeezefs compress` words an error: the path it is about, then what happened. In a
//! file of its own because every other file of the command uses it.

use std::path::Path;

pub(super) fn err(p: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", p.display())
}
