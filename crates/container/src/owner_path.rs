//! The owner-access rule of `storage` ([`crate::with_owner_access`]) for tools that go
//! through a user's tree by path (`check`, `stats`, `compress`): a path is opened, stat-ed
//! or listed even when its mode, or that of a directory on the way, refuses its owner and
//! the caller is that owner (a squeezefs without root keeps the user's mode-0 files and
//! directories as they are). The daemon's pack walk goes beneath a root fd instead
//! (`open_at::open_beneath_as_owner`); below the nearest directory of the path that opens,
//! this follows the path the same way, one name at a time.

use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io;
use std::path::Path;

use crate::open_at::{list_dir_as_owner, open_by_steps, open_with_flags, reopen_as_owner};

fn refused(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EACCES)
}

/// Opens `path` with `flags` (`open(2)`'s), and when that is refused (`EACCES`), again by
/// the owner-access rule: when the file's own mode refuses its owner, it is found with
/// `O_PATH` and reopened with the access it needs; when a directory on the way refuses its
/// owner the search (even `O_PATH` is refused), the path is followed one name at a time
/// from the nearest directory above that opens, each such directory given owner search for
/// its one lookup (no symlink is followed there). Not the caller's own: the first refusal
/// stands.
fn open_path_as_owner(path: &Path, flags: i32) -> io::Result<File> {
    let e = match open_with_flags(path, flags) {
        Err(e) if refused(&e) => e,
        r => return r,
    };
    match open_with_flags(path, libc::O_PATH | (flags & libc::O_NOFOLLOW)) {
        Ok(found) => {
            if let Some(f) = reopen_as_owner(&found, flags & !libc::O_NOFOLLOW)? {
                return Ok(f);
            }
            // Its own mode does not refuse its owner: a directory on the way refused the
            // first open and let the second through (its search granted a moment for
            // another thread's call: `stats` opens a mode-0 directory's files in
            // parallel; seen in CI as `stats` erring on such a file). The fd needs no
            // search of the path: reopened through it.
            if flags & libc::O_PATH != 0 {
                return Ok(found);
            }
            let proc = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&found));
            return match open_with_flags(Path::new(&proc), flags & !libc::O_NOFOLLOW) {
                Err(e2) if refused(&e2) => Err(e),
                r => r,
            };
        }
        Err(e2) if !refused(&e2) => return Err(e2),
        Err(_) => {}
    }
    for above in path.ancestors().skip(1) {
        let at = if above.as_os_str().is_empty() {
            Path::new(".")
        } else {
            above
        };
        let Ok(dir) = open_with_flags(at, libc::O_PATH | libc::O_DIRECTORY) else {
            continue;
        };
        let rel = path.strip_prefix(above).unwrap_or(path);
        return match open_by_steps(&dir, rel, flags) {
            Err(e3) if refused(&e3) => Err(e),
            r => r,
        };
    }
    Err(e)
}

/// Opens the file at `path` for reading (and writing with `write`), by the owner-access
/// rule when its mode or a directory on the way refuses its owner.
pub fn open_as_owner(path: &Path, write: bool) -> io::Result<File> {
    open_path_as_owner(path, if write { libc::O_RDWR } else { libc::O_RDONLY })
}

/// `lstat(2)` of `path`; when a directory on the way refuses its owner the search, the
/// metadata of an `O_PATH | O_NOFOLLOW` fd opened by the owner-access rule.
pub fn symlink_metadata_as_owner(path: &Path) -> io::Result<Metadata> {
    match std::fs::symlink_metadata(path) {
        Err(e) if refused(&e) => open_path_as_owner(path, libc::O_PATH | libc::O_NOFOLLOW)?.metadata(),
        r => r,
    }
}

/// The names in the directory `path`; when it or a directory on the way refuses its owner,
/// listed through an fd opened by the owner-access rule ([`list_dir_as_owner`]: owner read
/// and search for the one listing).
pub fn dir_names_as_owner(path: &Path) -> io::Result<Vec<OsString>> {
    let names = |list: Vec<std::fs::DirEntry>| list.iter().map(|d| d.file_name()).collect();
    match std::fs::read_dir(path).and_then(|rd| rd.collect::<io::Result<Vec<_>>>()) {
        Err(e) if refused(&e) => {
            let dir = open_path_as_owner(path, libc::O_PATH | libc::O_DIRECTORY)?;
            list_dir_as_owner(&dir).map(names)
        }
        r => r.map(names),
    }
}
