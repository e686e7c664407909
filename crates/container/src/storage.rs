//! The narrow I/O interface a container needs, and its implementation over a real file.
//! Everything above this trait is testable on [`crate::sim::MemDisk`], which can lose
//! unsynced writes and tear a write.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::open_at::{open_with_flags, reopen_as_owner, with_owner_access};
use crate::sys;

/// What [`Storage::dedupe_from`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dedupe {
    /// This many bytes now share the source's blocks (the kernel reports the range's
    /// length).
    Shared(u64),
    /// The bytes were not equal: nothing was done.
    Differ,
    /// The backing would not share this range (its alignment, its ends): nothing was done.
    Refused,
    /// The backing cannot share blocks at all (ext4, tmpfs, a network filesystem).
    Unsupported,
}

/// Positioned I/O on one backing file. Methods take `&self` so extents can be written from
/// several threads at once (pwrite is safe to call concurrently on distinct ranges).
#[allow(clippy::len_without_is_empty)] // a file length, not a collection
pub trait Storage: Send + Sync {
    /// Reads up to `buf.len()` bytes at `off`; returns the bytes read, short only at EOF.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Up to `len` bytes at `off` in a new buffer (`read_full`'s answer: short only at EOF).
    /// Backing files read into the buffer without zeroing it first.
    fn read_vec(&self, len: usize, off: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let n = read_full(self, &mut buf, off)?;
        buf.truncate(n);
        Ok(buf)
    }
    /// Writes all of `buf` at `off`, extending the file when needed.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Deallocates `[off, off+len)` without changing the file length; reads there return zeros.
    fn punch(&self, off: u64, len: u64) -> io::Result<()>;
    /// Makes every completed write, punch and length change durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Sets the file length.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The file length.
    fn len(&self) -> io::Result<u64>;
    /// The first offset ≥ `off` that may hold data (`None`: only holes from `off` to EOF).
    /// The default knows nothing about holes and answers `off`.
    fn next_data(&self, off: u64) -> io::Result<Option<u64>> {
        Ok(if off < self.len()? { Some(off) } else { None })
    }
    /// The value of the file's extended attribute `name` (`None`: not set). Storage that
    /// has no xattrs answers `None`.
    fn get_xattr(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let _ = name;
        Ok(None)
    }
    /// Sets extended attribute `name` (atomically: a reader sees the old or the new value).
    /// Made durable by [`Storage::sync_all`], not by [`Storage::sync_data`].
    fn set_xattr(&self, name: &str, value: &[u8]) -> io::Result<()> {
        let _ = (name, value);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
    /// Removes extended attribute `name`; absent is not an error.
    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        let _ = name;
        Ok(())
    }
    /// Makes everything durable: data, length and metadata (xattrs) — `fsync(2)`.
    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
    /// Makes `[dst_off, dst_off + len)` of this file share the bytes of `[src_off, src_off +
    /// len)` of `src` where the storage can without copying them (a backing filesystem with
    /// reflinks: XFS, btrfs), both offsets block aligned and `len` too unless the range ends
    /// at `src`'s end. `Ok(false)`: it cannot here (nothing was done; the caller writes the
    /// bytes). The shared blocks are written like any write: durable at the next sync.
    fn share_from(&self, src: &Self, src_off: u64, len: u64, dst_off: u64) -> io::Result<bool>
    where
        Self: Sized,
    {
        let _ = (src, src_off, len, dst_off);
        Ok(false)
    }
    /// Makes `[dst_off, dst_off + len)` of this file share the blocks of `[src_off, src_off +
    /// len)` of `src` where the two hold equal bytes (`FIDEDUPERANGE`: XFS with reflinks,
    /// btrfs). The backing compares the bytes under its own locks before it shares a block,
    /// so nothing a reader of either file sees changes, whatever the caller believed about
    /// them; nor do the files' times. Offsets block aligned; `len` too unless the ranges end
    /// at both files' ends.
    fn dedupe_from(&self, src: &Self, src_off: u64, len: u64, dst_off: u64) -> io::Result<Dedupe>
    where
        Self: Sized,
    {
        let _ = (src, src_off, len, dst_off);
        Ok(Dedupe::Unsupported)
    }
    /// Which file this is (device and inode number), when the storage can tell: pack reclaim
    /// checks that a name still leads to the file a walk found there.
    fn identity(&self) -> io::Result<Option<(u64, u64)>> {
        Ok(None)
    }
    /// The file's change time (ctime) in nanoseconds since the epoch, when the storage
    /// has one: a reclaim keeps it in the location record it replaces
    /// (`Location::kept_ctime`), so `stat` goes on showing it.
    fn change_time(&self) -> io::Result<Option<u64>> {
        Ok(None)
    }
}

/// Reads exactly `buf.len()` bytes unless EOF comes first; returns the count.
pub fn read_full<S: Storage + ?Sized>(s: &S, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = s.read_at(&mut buf[done..], off + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// A real backing file.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
    /// Set by every call that moves the file's mtime (a write, a punch, a length change;
    /// not an xattr, which moves only its ctime), cleared by [`FileStorage::take_modified`].
    modified: AtomicBool,
    /// Its (device, inode), once asked: an open file's never changes.
    identity: std::sync::OnceLock<(u64, u64)>,
    /// A file opened read-only because its mode keeps its owner from writing (a daemon
    /// without root; [`FileStorage::writable_later`]): opened for writing at the first
    /// write, with owner write added for the open if need be. `None`: `file` is the one
    /// written to.
    writer: Option<std::sync::OnceLock<File>>,
    /// Bytes written since the file's writeback was last started ([`KICK_BYTES`]), and how
    /// many times it was.
    unkicked: std::sync::atomic::AtomicU64,
    kicks: std::sync::atomic::AtomicU64,
}

/// Every this many bytes written to one backing file, its writeback is started
/// (`sys::start_writeback`, a hint that makes nothing durable and orders nothing): the
/// backing filesystem writes them out while the daemon compresses the next ones, rather
/// than all at a `sync` or an `fsync` at the end, when the daemon has nothing left to do
/// meanwhile (`cp -r` + `sync` of the W1 mix: `sync` 0.18–0.28 → 0.03–0.15 s, the whole
/// 2.31 → 2.23 s, docs/BENCHMARKS.md). A file written less than this never starts it;
/// packs, which take small files' bytes, start it every 8 MiB appended. The call may wait
/// where the backing throttles writers (a congested device queue, NFS write congestion),
/// as a write there would.
pub const KICK_BYTES: u64 = 8 << 20;

impl FileStorage {
    pub fn new(file: File) -> FileStorage {
        FileStorage {
            file,
            modified: AtomicBool::new(false),
            identity: std::sync::OnceLock::new(),
            writer: None,
            unkicked: std::sync::atomic::AtomicU64::new(0),
            kicks: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A file opened read-only because its mode refused writing to its owner (mode 0444:
    /// git objects, `cp -p`): it is opened for writing only when something is written,
    /// with [`with_owner_access`] if its mode still refuses. Opening it for writing at
    /// once would take a chmod and back, moving its ctime, for a `stat` or a read.
    pub fn writable_later(mut self) -> FileStorage {
        self.writer = Some(std::sync::OnceLock::new());
        self
    }

    /// The file to write to: `file`, or (see [`FileStorage::writable_later`]) the file
    /// opened again for writing.
    fn writer(&self) -> io::Result<&File> {
        use std::os::fd::AsRawFd;
        let Some(w) = &self.writer else {
            return Ok(&self.file);
        };
        if let Some(f) = w.get() {
            return Ok(f);
        }
        let proc = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let f = match open_with_flags(std::path::Path::new(&proc), libc::O_RDWR) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                reopen_as_owner(&self.file, libc::O_RDWR)?.ok_or(e)?
            }
            r => r?,
        };
        // (Two writers at once: one of the two files is kept.)
        let _ = w.set(f);
        Ok(w.get().expect("set just now"))
    }

    /// A file whose (device, inode) the caller knows already (spares a `stat` when it is
    /// asked).
    pub fn with_identity(self, id: (u64, u64)) -> FileStorage {
        let _ = self.identity.set(id);
        self
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether the file was written, punched or resized (so its mtime moved) since the last
    /// call. The FUSE layer puts times set through the mount back after such a write-out.
    pub fn take_modified(&self) -> bool {
        self.modified.swap(false, Ordering::Relaxed)
    }

    /// How many times the file's writeback was started ([`KICK_BYTES`]).
    pub fn writebacks_started(&self) -> u64 {
        self.kicks.load(Ordering::Relaxed)
    }

    fn modifies(&self) {
        self.modified.store(true, Ordering::Relaxed);
    }
}

impl FileStorage {
    /// Runs the xattr call `f`, again with [`with_owner_access`] if the mode refused it.
    fn as_owner<T>(&self, f: impl Fn() -> io::Result<T>) -> io::Result<T> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => with_owner_access(
                || self.file.metadata().map(|m| (m.uid(), m.mode())),
                |mode| self.file.set_permissions(std::fs::Permissions::from_mode(mode)),
                f,
            )?
            .ok_or(e),
            r => r,
        }
    }
}

impl Storage for FileStorage {
    fn identity(&self) -> io::Result<Option<(u64, u64)>> {
        use std::os::unix::fs::MetadataExt;
        if let Some(&id) = self.identity.get() {
            return Ok(Some(id));
        }
        let m = self.file.metadata()?;
        Ok(Some(*self.identity.get_or_init(|| (m.dev(), m.ino()))))
    }

    fn change_time(&self) -> io::Result<Option<u64>> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata()?;
        Ok(crate::pack::format::ctime_ns(m.ctime(), m.ctime_nsec()))
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, off) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn read_vec(&self, len: usize, off: u64) -> io::Result<Vec<u8>> {
        crate::sys::pread_vec(self.file.as_fd(), len, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let w = self.writer()?;
        self.modifies();
        w.write_all_at(buf, off)?;
        let n = buf.len() as u64;
        if self.unkicked.fetch_add(n, Ordering::Relaxed) + n >= KICK_BYTES {
            self.unkicked.store(0, Ordering::Relaxed);
            self.kicks.fetch_add(1, Ordering::Relaxed);
            // A hint: a backing that cannot (EINVAL, ENOSYS, ESPIPE) writes back later.
            let _ = crate::sys::start_writeback(w.as_fd());
        }
        Ok(())
    }

    fn share_from(&self, src: &Self, src_off: u64, len: u64, dst_off: u64) -> io::Result<bool> {
        if len == 0 {
            return Ok(true);
        }
        let w = self.writer()?;
        self.modifies();
        match sys::clone_range(w.as_fd(), dst_off, src.file.as_fd(), src_off, len) {
            Ok(()) => Ok(true),
            // No reflinks here (ext4, tmpfs, a network filesystem: EOPNOTSUPP, ENOTTY,
            // EXDEV across filesystems), or a range the filesystem will not share (EINVAL:
            // alignment, a range ending inside the destination past its last block).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EXDEV | libc::EINVAL | libc::ENOSYS)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn dedupe_from(&self, src: &Self, src_off: u64, len: u64, dst_off: u64) -> io::Result<Dedupe> {
        if len == 0 {
            return Ok(Dedupe::Shared(0));
        }
        // The descriptor this storage reads through: the kernel lets its owner (or root, or
        // a writer) dedupe into a file, and nothing is written through it.
        match sys::dedupe_range(self.file.as_fd(), dst_off, src.file.as_fd(), src_off, len) {
            Ok(Some(n)) => Ok(Dedupe::Shared(n)),
            Ok(None) => Ok(Dedupe::Differ),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::ENOSYS)
                ) =>
            {
                Ok(Dedupe::Unsupported)
            }
            // Alignment, a range past an end, a file busy as a swap file or being executed,
            // two files on different mounts (a bind mount inside the backing tree).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL | libc::ETXTBSY | libc::EPERM | libc::EACCES | libc::EXDEV)
                ) =>
            {
                Ok(Dedupe::Refused)
            }
            Err(e) => Err(e),
        }
    }

    fn punch(&self, off: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (Ok(o), Ok(l)) = (i64::try_from(off), i64::try_from(len)) else {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        };
        let w = self.writer()?;
        self.modifies();
        sys::punch_hole(w.as_fd(), o, l)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let w = self.writer()?;
        self.modifies();
        w.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn get_xattr(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.as_owner(|| sys::get_xattr(self.file.as_fd(), name))
    }

    fn set_xattr(&self, name: &str, value: &[u8]) -> io::Result<()> {
        self.as_owner(|| sys::set_xattr(self.file.as_fd(), name, value))
    }

    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        match self.as_owner(|| sys::remove_xattr(self.file.as_fd(), name)) {
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(()),
            r => r,
        }
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn next_data(&self, off: u64) -> io::Result<Option<u64>> {
        let Ok(o) = i64::try_from(off) else {
            return Ok(None);
        };
        let e = match sys::seek_data(self.file.as_fd(), o) {
            Ok(r) => return Ok(Some(r as u64)),
            Err(e) => e,
        };
        match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            // A host without SEEK_DATA: assume data.
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(Some(off)),
            _ => Err(e),
        }
    }
}

/// Makes everything written to the filesystem holding `f` durable (metadata included).
pub fn syncfs(f: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    sys::syncfs(f.as_fd())
}

/// Runs `make`, which may add an entry of squeezefs's own (its lock file, its private
/// directory) to the directory `dir`, and puts `dir`'s access and modification times back
/// if that moved them. `dir` is a backing root, whose times are the mount root's: the
/// user's, which a mount must not change. (Its ctime moves: no call can set that.)
pub fn keeping_times<T>(dir: &std::path::Path, make: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let before = std::fs::metadata(dir).ok();
    let r = make()?;
    if let Some(before) = before {
        let moved = std::fs::metadata(dir).is_ok_and(|now| now.modified().ok() != before.modified().ok());
        if moved {
            let times = std::fs::FileTimes::new()
                .set_accessed(before.accessed()?)
                .set_modified(before.modified()?);
            if let Err(e) = File::open(dir).and_then(|d| d.set_times(times)) {
                log::debug!("{}: times not put back: {e}", dir.display());
            }
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new, empty backing file of its own (already unlinked) in the temporary directory.
    fn scratch(name: &str) -> FileStorage {
        let path = std::env::temp_dir().join(format!("sqz-{name}-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        FileStorage::new(file)
    }

    /// Writeback is started once per `KICK_BYTES` written to a file, never for less, and the
    /// bytes read back as written (the hint changes nothing a reader sees).
    #[test]
    fn writeback_is_started_every_kick_bytes_written() {
        let st = scratch("kick");
        let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        let per = (KICK_BYTES >> 20) as usize;
        for i in 0..per - 1 {
            st.write_at(&chunk, (i as u64) << 20).unwrap();
        }
        assert_eq!(st.writebacks_started(), 0, "less than KICK_BYTES starts nothing");
        st.write_at(&chunk, ((per - 1) as u64) << 20).unwrap();
        assert_eq!(st.writebacks_started(), 1);
        for i in per..2 * per + 3 {
            st.write_at(&chunk, (i as u64) << 20).unwrap();
        }
        assert_eq!(st.writebacks_started(), 2);
        for i in [0, per - 1, 2 * per + 2] {
            assert_eq!(st.read_vec(1 << 20, (i as u64) << 20).unwrap(), chunk, "MiB {i}");
        }
    }

    /// `read_vec` on a real file reads what `read_full` reads: whole ranges, ranges cut
    /// short by EOF, ranges past it, holes as zeros.
    #[test]
    fn read_vec_of_a_backing_file_is_read_full() {
        let st = scratch("read-vec");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        st.write_at(&data, 0).unwrap();
        st.write_at(&data[..1000], 1 << 20).unwrap(); // a hole between
        let len = st.len().unwrap();
        for (n, off) in [
            (0, 0),
            (1, 0),
            (4096, 5),
            (300_000, 0),
            (200_000, 250_000),
            (1 << 20, 100),
            (10, len),
            (10, len + 5),
        ] {
            let mut want = vec![0u8; n];
            let got_n = read_full(&st, &mut want, off).unwrap();
            want.truncate(got_n);
            assert_eq!(st.read_vec(n, off).unwrap(), want, "{n} bytes at {off}");
        }
    }
}
