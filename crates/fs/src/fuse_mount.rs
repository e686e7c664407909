//! The FUSE mount itself: made here (mount(2) as root, `fusermount3` otherwise), handed to
//! fuser as a bare `/dev/fuse` fd (`Session::from_fd`), and unmounted only while it is
//! still this daemon's.
//!
//! Why not fuser's own mounting: a fuser 0.18 session unmounts its mount point *by path*
//! when it ends, and its test of whether the mount is still there (`is_mounted`) says yes
//! exactly when the connection is dead. So a daemon whose mount the user unmounted
//! (`umount`, `fusermount3 -u`) unmounted, on its way out, whatever was mounted at that
//! path by then: a new mount of the same mount point, whose daemon then exited, leaving
//! programs writing into the bare directory underneath (issue 43). Upstream fixed the test
//! but has made no release with it; and an unmount by path is wrong after a lazy unmount
//! too, whatever the connection says.
//!
//! So this daemon keeps the identity of the mount it made — the kernel's mount ID, read
//! with `statx` right after mount(2), unique for the system's lifetime on Linux 6.8+ (the
//! device number beside it on older kernels) — and every way out (a clean end, a signal,
//! an error before serving, a panic) unmounts the path only when the mount there still has
//! that identity. The check and the umount2(2) are two calls: a new mount made in the
//! microseconds between them is the one race left, as for every unmount by path.

use std::ffi::{CString, OsString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys::mount::{self as msys, MountIdentity};

/// The type a FUSE mount of squeezefs shows (`fuse.squeezefs` in mountinfo).
pub const SUBTYPE: &str = "squeezefs";

/// What to mount: everything mount(2) and fusermount3 are told, decided from the mount
/// options (`MountConfig::mount_request`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountRequest {
    /// The source mountinfo shows (`squeezefs:BACKING`).
    pub fsname: String,
    /// `MS_*` flags for mount(2).
    pub flags: libc::c_ulong,
    /// FUSE options for the kernel beyond the `fd=`, `rootmode=`, `user_id=` and
    /// `group_id=` made here: `subtype=`, `default_permissions`, `allow_other`, `max_read=`,
    /// the security labels.
    pub kernel: Vec<String>,
    /// The same request in fusermount3's `-o` words (it adds nosuid,nodev itself).
    pub helper: Vec<String>,
}

/// Mounts a FUSE filesystem at `mountpoint` as `req` says: mount(2) where this process may
/// (root, or root of a user namespace), else through `fusermount3`, as libfuse does.
/// Returns the FUSE device's fd (for `fuser::Session::from_fd`) and the mount's guard.
pub fn mount(req: &MountRequest, mountpoint: &Path) -> io::Result<(OwnedFd, OwnMount)> {
    let path = mountpoint.canonicalize()?;
    let (fd, helper) = match direct(req, &path)? {
        Some(fd) => (fd, false),
        None => (through_fusermount(req, &path)?, true),
    };
    let id = match msys::mount_identity(&path) {
        Ok(id) => id,
        Err(e) => {
            // Mounted a moment ago by this very call: unmounting it by path is safe here,
            // and serving a mount we could not tell from another later is not.
            let _ = unmount_path(&path, helper, true);
            return Err(io::Error::new(
                e.kind(),
                format!("{}: cannot read the new mount's identity: {e}", path.display()),
            ));
        }
    };
    log::debug!(
        "mounted {} (mount ID {}, device {:?})",
        path.display(),
        id.mnt_id,
        id.dev
    );
    Ok((
        fd,
        OwnMount {
            path,
            id,
            helper,
            done: AtomicBool::new(false),
        },
    ))
}

/// mount(2) of a new FUSE connection: `Ok(None)` when this process may not (EPERM: not
/// root), for `fusermount3` to do it.
fn direct(req: &MountRequest, path: &Path) -> io::Result<Option<OwnedFd>> {
    let dev: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(crate::devfuse::PATH)?
        .into();
    let mode = std::fs::metadata(path)?.mode();
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={}",
        dev.as_raw_fd(),
        mode,
        crate::sys::euid(),
        crate::sys::egid()
    );
    for o in &req.kernel {
        data.push(',');
        data.push_str(o);
    }
    let source = CString::new(req.fsname.as_bytes())?;
    let data = CString::new(data)?;
    match msys::mount(&source, path, c"fuse", req.flags, &data) {
        Ok(()) => Ok(Some(dev)),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(None),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("mount(2) of {} ({}): {e}", path.display(), data.to_string_lossy()),
        )),
    }
}

/// The helper: `FUSERMOUNT_PATH` when set (as libfuse and fuser honour it), else
/// `fusermount3` from PATH.
fn fusermount() -> OsString {
    std::env::var_os("FUSERMOUNT_PATH").unwrap_or_else(|| "fusermount3".into())
}

/// Escapes `,` and `\` in an option's value for fusermount3's `-o` parser.
fn escape_option(s: &str) -> String {
    s.replace('\\', "\\\\").replace(',', "\\,")
}

/// `fusermount3 -o OPTIONS -- MOUNTPOINT` with `_FUSE_COMMFD` naming one end of a socket
/// pair: the setuid helper mounts, and sends the FUSE device's fd back over it.
fn through_fusermount(req: &MountRequest, path: &Path) -> io::Result<OwnedFd> {
    let (ours, theirs) = UnixStream::pair()?;
    msys::set_inheritable(&theirs, true)?;
    let opts: Vec<String> = req.helper.iter().map(|o| escape_option(o)).collect();
    let mut cmd = Command::new(fusermount());
    cmd.arg("-o")
        .arg(opts.join(","))
        .arg("--")
        .arg(path)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let spawned = cmd.spawn();
    drop(theirs);
    let mut child = spawned.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "{}: {e} (not root, so the mount needs fusermount3: install fuse3)",
                fusermount().to_string_lossy()
            ),
        )
    })?;
    let received = msys::recv_fd(&ours);
    drop(ours);
    let mut said = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut said);
    }
    let status = child.wait()?;
    match received {
        Ok(Some(fd)) => {
            if !said.trim().is_empty() {
                log::info!("fusermount3: {}", said.trim());
            }
            Ok(fd)
        }
        Ok(None) | Err(_) => {
            let said = said.trim();
            let kind = if said.contains("user_allow_other") {
                io::ErrorKind::PermissionDenied
            } else {
                io::ErrorKind::Other
            };
            Err(io::Error::new(
                kind,
                format!(
                    "fusermount3 could not mount {} ({status}): {}",
                    path.display(),
                    if said.is_empty() { "it said nothing" } else { said }
                ),
            ))
        }
    }
}

/// The mount this daemon made, and the one way to unmount it: [`OwnMount::unmount`], also
/// done on drop (an error before serving, a panic, the end of serving), each time only if
/// the mount at its path is still this one.
#[derive(Debug)]
pub struct OwnMount {
    path: PathBuf,
    id: MountIdentity,
    /// Mounted through fusermount3: unmounted through it when umount2(2) is not allowed.
    helper: bool,
    done: AtomicBool,
}

impl OwnMount {
    /// The mount point (canonical).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the mount at the path is still this daemon's (false once the user
    /// unmounted it, and whatever was mounted there since).
    pub fn is_there(&self) -> bool {
        msys::mount_identity(&self.path).is_ok_and(|id| id == self.id)
    }

    /// Unmounts the mount point if the mount there is still this one: `Ok(true)` when it
    /// was, `Ok(false)` when it is not any more (unmounted by the user; another mount there
    /// is left alone). `lazy`: detach even while busy (`MNT_DETACH`, `fusermount3 -z`).
    pub fn unmount(&self, lazy: bool) -> io::Result<bool> {
        if !self.is_there() {
            log::debug!(
                "{} is not this daemon's mount any more (mount ID {}): not unmounted",
                self.path.display(),
                self.id.mnt_id
            );
            self.done.store(true, Ordering::Relaxed);
            return Ok(false);
        }
        unmount_path(&self.path, self.helper, lazy)?;
        self.done.store(true, Ordering::Relaxed);
        Ok(true)
    }
}

impl Drop for OwnMount {
    fn drop(&mut self) {
        if self.done.load(Ordering::Relaxed) {
            return;
        }
        match self.unmount(true) {
            Ok(true) => log::info!("unmounted {}", self.path.display()),
            Ok(false) => {}
            Err(e) => log::warn!(
                "{}: unmount failed: {e}; run `fusermount3 -u {}`",
                self.path.display(),
                self.path.display()
            ),
        }
    }
}

/// umount2(2) of `path` (not following a symlink there); when that is not allowed (not
/// root) and the mount was made through fusermount3, `fusermount3 -u` (`-z` if `lazy`).
fn unmount_path(path: &Path, helper: bool, lazy: bool) -> io::Result<()> {
    let flags = libc::UMOUNT_NOFOLLOW | if lazy { libc::MNT_DETACH } else { 0 };
    match msys::umount(path, flags) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && helper => {
            let mut cmd = Command::new(fusermount());
            cmd.arg("-u").arg("-q");
            if lazy {
                cmd.arg("-z");
            }
            let out = cmd.arg("--").arg(path).stdin(Stdio::null()).output()?;
            if out.status.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!(
                    "fusermount3 -u: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )))
            }
        }
        Err(e) => Err(e),
    }
}

/// The `MS_*` flag of a kernel option word, `Some(0)` for the words that only undo one
/// (`dev`, `exec`, …), `None` for a word that is not a flag.
pub fn flag_of(word: &str) -> Option<libc::c_ulong> {
    Some(match word {
        "nodev" => libc::MS_NODEV,
        "nosuid" => libc::MS_NOSUID,
        "noexec" => libc::MS_NOEXEC,
        "noatime" => libc::MS_NOATIME,
        "sync" => libc::MS_SYNCHRONOUS,
        "dirsync" => libc::MS_DIRSYNC,
        "dev" | "suid" | "exec" | "atime" | "async" => 0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusermount_options_escape_commas_and_backslashes() {
        assert_eq!(
            escape_option("fsname=squeezefs:/a,b\\c"),
            "fsname=squeezefs:/a\\,b\\\\c"
        );
        assert_eq!(escape_option("allow_other"), "allow_other");
        assert_eq!(flag_of("noexec"), Some(libc::MS_NOEXEC));
        assert_eq!(flag_of("exec"), Some(0));
        assert_eq!(flag_of("max_read=4096"), None);
    }

    /// The identity of a path's mount: the same for two paths on one mount, different
    /// across a mount point (here /proc, a mount of its own), and read without following a
    /// symlink.
    #[test]
    fn a_mount_identity_tells_mounts_apart() {
        let root = msys::mount_identity(Path::new("/")).unwrap();
        let proc_ = msys::mount_identity(Path::new("/proc")).unwrap();
        assert_ne!(root, proc_);
        assert_eq!(
            msys::mount_identity(Path::new("/proc/self")).unwrap().mnt_id,
            proc_.mnt_id
        );
        assert!(msys::mount_identity(Path::new("/nonexistent/x")).is_err());
    }
}
