//! How squeezefs opens what a backing tree holds: beneath a root, never through a symlink
//! (`openat2`), and as the owner where a mode refuses its owner (a daemon without root
//! opening or listing its user's own mode-0 files and directories, or writing a 0444 file:
//! the owner bits added for the one call, then put back).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use crate::sys;

/// Runs `f` on a file of this process whose mode denies its owner (stat: its owner and
/// mode), with owner read and write added for the call (`chmod`), then puts the mode back
/// if nothing changed it meanwhile (a chmod through the mount wins). `Ok(None)`: nothing
/// to add — not this process's file (a daemon without root owns all of its own), or its
/// owner has read and write already — so the refusal stands.
///
/// The kernel checks a `user.*` xattr against the mode at every call, whatever the fd was
/// opened for, and an open against the mode: without this a daemon without
/// CAP_DAC_OVERRIDE could not record where a read-only file's bytes are (mode 0444: git
/// objects, `cp -p`) and lost its data at the commit, nor open a mode-0 file (`tar`'s
/// placeholders for symlinks).
pub fn with_owner_access<T>(
    stat: impl Fn() -> io::Result<(u32, u32)>,
    chmod: impl Fn(u32) -> io::Result<()>,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<Option<T>> {
    with_owner_bits(0o600, stat, chmod, f)
}

/// [`with_owner_access`] for the owner bits `need`: read and write (0o600) for a file's
/// data and xattrs, read and search (0o500) to list a directory, search (0o100) to look up
/// a name in one.
///
/// One at a time in the process ([`DANCE`]): two threads granting the same bits on one
/// file or directory (`stats` opens the files of a mode-0 directory in parallel; the
/// daemon serves requests on several threads) would each see the other's grant, and the
/// first to finish would take the bits back while the second still needed them (its call
/// refused: seen in CI as `stats` erring on a file of a mode-0 directory).
fn with_owner_bits<T>(
    need: u32,
    stat: impl Fn() -> io::Result<(u32, u32)>,
    chmod: impl Fn(u32) -> io::Result<()>,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<Option<T>> {
    // (A dance inside another's `f` on the same thread already holds the lock.)
    let _one = (!IN_DANCE.get()).then(|| {
        IN_DANCE.set(true);
        (DANCE.lock().unwrap_or_else(|e| e.into_inner()), Leave)
    });
    let (uid, mode) = stat()?;
    let mode = mode & 0o7777;
    if uid != sys::euid() || mode & need == need {
        return Ok(None);
    }
    let granted = mode | need;
    chmod(granted)?;
    let r = f();
    if stat()?.1 & 0o7777 == granted {
        chmod(mode)?;
    }
    r.map(Some)
}

/// Held by a thread while it adds owner bits, runs its call and takes them back.
static DANCE: std::sync::Mutex<()> = std::sync::Mutex::new(());

thread_local! {
    /// This thread holds [`DANCE`].
    static IN_DANCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Clears [`IN_DANCE`] when the dance ends.
struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        IN_DANCE.set(false);
    }
}

/// [`with_owner_bits`] on the file or directory `found` (any fd, `O_PATH` too): its mode
/// is changed through the fd's magic link, which names it whatever is renamed meanwhile.
fn as_owner_of<T>(found: &File, need: u32, f: impl FnOnce() -> io::Result<T>) -> io::Result<Option<T>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let proc = format!("/proc/self/fd/{}", found.as_raw_fd());
    with_owner_bits(
        need,
        || found.metadata().map(|m| (m.uid(), m.mode())),
        |mode| std::fs::set_permissions(&proc, std::fs::Permissions::from_mode(mode)),
        f,
    )
}

/// Lists the directory `dir` (an fd opened on it), with owner read and search granted for
/// the listing when its mode refuses them (a mode-0 directory of a squeezefs without root).
pub fn list_dir_as_owner(dir: &File) -> io::Result<Vec<std::fs::DirEntry>> {
    use std::os::fd::AsRawFd;
    let list =
        || std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?.collect::<io::Result<Vec<_>>>();
    match list() {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => as_owner_of(dir, 0o500, list)?.ok_or(e),
        r => r,
    }
}

/// Opens `rel` (a relative path) below the directory `dir` with `flags` (plus `O_CLOEXEC`,
/// `O_NOCTTY`, `O_NONBLOCK`), refusing any symlink on the way and any escape from `dir`
/// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): a tool walking a tree that
/// users change meanwhile never opens what a swapped-in symlink names, and never blocks
/// on a fifo.
pub fn open_beneath(dir: &File, rel: &std::path::Path, flags: i32) -> io::Result<File> {
    sys::open_beneath(dir.as_fd(), rel, flags)
}

/// [`open_beneath`], and when a mode on the way refuses the owner and the caller is that
/// owner (a squeezefs without root and a mode-0 placeholder of `tar`, a `chmod 0` file or
/// directory), again with [`with_owner_access`]'s rule: the path is followed one name at a
/// time, a directory that refuses its owner the search gets it for the one lookup, and the
/// file or directory at the end is found with `O_PATH` (no access needed), then reopened
/// through `/proc/self/fd` with the access it needs. Without this a mount's pack rounds
/// (and its unmount's) stopped at such a file or directory, and `check` reported it as
/// damaged.
pub fn open_beneath_as_owner(dir: &File, rel: &std::path::Path, flags: i32) -> io::Result<File> {
    match open_beneath(dir, rel, flags) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => match open_by_steps(dir, rel, flags) {
            Err(e2) if e2.raw_os_error() == Some(libc::EACCES) => Err(e),
            r => r,
        },
        r => r,
    }
}

/// [`open_beneath_as_owner`]'s slow path: `rel` one name at a time (also
/// `owner_path`'s, below the nearest directory of a path that opens).
pub(crate) fn open_by_steps(dir: &File, rel: &std::path::Path, flags: i32) -> io::Result<File> {
    use std::path::Component;
    let refused = || io::Error::from_raw_os_error(libc::EACCES);
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(refused)?;
    let (last, parents) = names.split_last().ok_or_else(refused)?;
    let mut at = dir.try_clone()?;
    for name in parents {
        at = lookup_as_owner(&at, name, libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY)?;
    }
    match lookup_as_owner(&at, last, flags) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            let found = lookup_as_owner(&at, last, libc::O_PATH | libc::O_NOFOLLOW)?;
            reopen_as_owner(&found, flags & !libc::O_NOFOLLOW)?.ok_or(e)
        }
        r => r,
    }
}

/// `name` (one component) in the directory `dir` opened with `flags`, again with owner
/// search granted on `dir` for the call when its mode refuses it.
fn lookup_as_owner(dir: &File, name: &std::ffi::OsStr, flags: i32) -> io::Result<File> {
    let open = || open_beneath(dir, std::path::Path::new(name), flags);
    match open() {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => as_owner_of(dir, 0o100, open)?.ok_or(e),
        r => r,
    }
}

/// Reopens the file or directory `found` (an `O_PATH` fd) with `flags` under
/// [`with_owner_access`]; `None` when that has nothing to add.
pub(crate) fn reopen_as_owner(found: &File, flags: i32) -> io::Result<Option<File>> {
    use std::os::fd::AsRawFd;
    let m = found.metadata()?;
    let acc = flags & libc::O_ACCMODE;
    // A file: read and write; a directory (only ever opened to be read): read and search.
    let need = if m.is_file() {
        0o600
    } else if m.is_dir() && acc == libc::O_RDONLY {
        0o500
    } else {
        return Ok(None);
    };
    let proc = format!("/proc/self/fd/{}", found.as_raw_fd());
    as_owner_of(found, need, || {
        open_with_flags(std::path::Path::new(&proc), flags)
    })
}

/// `open(2)` of `path` with `flags`, their access mode included (`O_CLOEXEC` added).
pub(crate) fn open_with_flags(path: &std::path::Path, flags: i32) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let acc = flags & libc::O_ACCMODE;
    std::fs::OpenOptions::new()
        .read(acc != libc::O_WRONLY)
        .write(acc != libc::O_RDONLY)
        .custom_flags(flags & !libc::O_ACCMODE)
        .open(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// Threads adding the same owner bits to one directory at once: each call runs with
    /// the bits there, and the mode is put back after the last (the first to finish took
    /// them back from the others before `DANCE`).
    #[test]
    fn owner_access_at_once_from_several_threads_keeps_the_bits_for_each_call() {
        let dir = std::env::temp_dir().join(format!("squeezefs-dance-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o0)).unwrap();
        let d = File::open(&dir).unwrap();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let seen = as_owner_of(&d, 0o500, || Ok(d.metadata()?.permissions().mode() & 0o777))
                            .unwrap()
                            .expect("the directory is ours and refuses us");
                        assert_eq!(seen & 0o500, 0o500, "the bits were taken back during the call");
                    }
                });
            }
        });
        assert_eq!(d.metadata().unwrap().permissions().mode() & 0o777, 0);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
