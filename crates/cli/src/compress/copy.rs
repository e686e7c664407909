//! The helpers of a copy and rename: the copy's temporary name beside the file, its data
//! (holes skipped) and metadata (owner, mode, xattrs, times), the rename over the file,
//! and the `syncfs` that makes a batch durable.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{lseek, Whence};
use squeezefs_fs::{props, sys};

use super::err::err;

/// The name of a copy in progress: `.NAME.squeezefs-compress.PID.N`.
pub(super) fn temp_pid(name: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(name).ok()?;
    let (_, tail) = s.rsplit_once(".squeezefs-compress.")?;
    tail.split('.').next()?.parse().ok()
}

/// Copies owner, mode, xattrs (all but squeezefs requests/properties) and, `with_times`,
/// times (a staged copy gets them once committed).
pub(super) fn copy_metadata(from: &File, to: &File, with_times: bool) -> Result<(), String> {
    let md = from.metadata().map_err(|e| e.to_string())?;
    let (f, t) = (from, to);
    if let Ok(list) = sys::xattr_list(f, 64 << 10) {
        for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            // (A file's own background_compression is an xattr of its own: kept.)
            if name.starts_with(b"user.squeezefs.") && name != props::BACKGROUND.as_bytes() {
                continue;
            }
            let c = CString::new(name).expect("no NUL");
            if let Ok(v) = sys::xattr_get(f, &c, 64 << 10) {
                sys::xattr_set(t, &c, &v, 0)
                    .map_err(|e| format!("copying xattr {}: {e}", String::from_utf8_lossy(name)))?;
            }
        }
    }
    let own = |id: u32, cur: u32| (id != cur).then_some(id);
    let tmd = to.metadata().map_err(|e| e.to_string())?;
    sys::chown(t, own(md.uid(), tmd.uid()), own(md.gid(), tmd.gid()))
        .map_err(|e| format!("giving the copy its owner: {e}"))?;
    sys::chmod(t, md.mode() & 0o7777).map_err(|e| format!("giving the copy its mode: {e}"))?;
    if !with_times {
        return Ok(());
    }
    let ts = |s: i64, ns: i64| libc::timespec {
        tv_sec: s,
        tv_nsec: ns,
    };
    sys::utimens(
        t,
        ts(md.atime(), md.atime_nsec()),
        ts(md.mtime(), md.mtime_nsec()),
    )
    .map_err(|e| format!("giving the copy its times: {e}"))
}

/// A new file beside `path` for the copy.
pub(super) fn temp_beside(path: &Path) -> Result<(PathBuf, File), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let mut n = 0u32;
    loop {
        let tmp = dir.join(format!(".{name}.squeezefs-compress.{}.{n}", std::process::id()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => {
                return Err(format!(
                    "cannot create the copy {}: {e} (compress writes a copy beside each file it \
                     converts: it needs write access to the directory and room for one file)",
                    tmp.display()
                ))
            }
        }
    }
}

/// Publishes a durable copy. The directory is not synced here: a rename lost in a crash
/// leaves the original, which is as good; one `syncfs` at the end makes the run durable.
pub(super) fn rename_over(tmp: &Path, path: &Path) -> Result<(), String> {
    std::fs::rename(tmp, path).map_err(|e| err(path, format!("replacing it with the copy: {e}")))
}

/// `syncfs` of the filesystem holding `path`.
pub(super) fn syncfs(path: &Path) -> Result<(), String> {
    let f = File::open(path).map_err(|e| err(path, e))?;
    nix::unistd::syncfs(f.as_raw_fd()).map_err(|e| err(path, std::io::Error::from(e)))
}

/// Copies `len` bytes, skipping holes (SEEK_DATA/SEEK_HOLE), and sets the length.
pub(super) fn copy_data(
    src: &mut File,
    dst: &mut File,
    len: u64,
    pb: &indicatif::ProgressBar,
) -> Result<(), String> {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < len {
        let fd = src.as_raw_fd();
        let Ok(data) = lseek(fd, off as i64, Whence::SeekData) else {
            break; // only a hole is left
        };
        let hole = lseek(fd, data, Whence::SeekHole).unwrap_or(-1).max(data) as u64;
        let end = hole.min(len);
        src.seek(SeekFrom::Start(data as u64))
            .map_err(|e| e.to_string())?;
        dst.seek(SeekFrom::Start(data as u64))
            .map_err(|e| e.to_string())?;
        let mut pos = data as u64;
        while pos < end {
            let want = ((end - pos) as usize).min(buf.len());
            let n = src.read(&mut buf[..want]).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            dst.write_all(&buf[..n]).map_err(|e| e.to_string())?;
            pos += n as u64;
            pb.inc(n as u64);
        }
        off = end.max(data as u64 + 1);
    }
    dst.set_len(len).map_err(|e| e.to_string())
}
