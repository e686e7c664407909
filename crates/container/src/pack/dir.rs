//! Where pack files live: [`PackDir`], a directory of pack files named by their id —
//! `BACKING/.squeezefs-packs/ID.pack` on a real backing directory ([`FsPackDir`]), or
//! simulated disks that crash with the backing files in tests ([`MemPackDir`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::sim::{Crash, MemDisk};
use crate::storage::{FileStorage, Storage};

/// The directory of packs, at the backing root. Hidden from the mount.
pub const DIR_NAME: &str = ".squeezefs-packs";

/// A set of pack files, each a [`Storage`], named by a non-zero id.
pub trait PackDir: Send + Sync {
    /// Ids of the packs present, ascending.
    fn list(&self) -> io::Result<Vec<u32>>;
    /// Opens pack `id` (`NotFound` when there is none).
    fn open(&self, id: u32) -> io::Result<Arc<dyn Storage>>;
    /// Creates pack `id`, empty (`AlreadyExists` when there is one). Its directory entry
    /// is not durable yet: a crash may take the pack away until the next
    /// [`PackDir::sync_names`] or a sync of the whole backing filesystem, so nothing may
    /// point at it before one of them (`Packs::durable`, `Packs::synced`).
    fn create(&self, id: u32) -> io::Result<Arc<dyn Storage>>;
    /// Makes the directory entries of the packs created so far durable.
    fn sync_names(&self) -> io::Result<()>;
    /// A sync of the whole backing filesystem made the entries of packs `ids` durable
    /// (nothing to do on a real directory: the sync did it; the crash tests' packs record
    /// it).
    fn names_synced(&self, _ids: &[u32]) {}
    /// Removes pack `id`, durably.
    fn remove(&self, id: u32) -> io::Result<()>;
    /// What to call pack `id` in messages.
    fn describe(&self, id: u32) -> String;
    /// The clean mark's bytes (`super::clean`), `None` when there is none.
    fn read_mark(&self) -> io::Result<Option<Vec<u8>>>;
    /// Replaces the clean mark with `mark`, or removes it (`None`), durably and atomically:
    /// after a crash the directory holds the old mark or the new one (or none), whole.
    fn write_mark(&self, mark: Option<&[u8]>) -> io::Result<()>;
}

/// Packs as files `ID.pack` in a directory (created at the first pack).
#[derive(Debug)]
pub struct FsPackDir {
    path: PathBuf,
    writable: bool,
}

impl FsPackDir {
    /// The packs of backing directory `backing`.
    pub fn new(backing: &Path, writable: bool) -> FsPackDir {
        FsPackDir {
            path: backing.join(DIR_NAME),
            writable,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the directory (mode 0700: only the daemon reads packs) if it is missing, its
    /// entry durable. It is also squeezefs's private scratch directory (the mount's probes
    /// run there, [`PROBE_PREFIX`]), so making it leaves the backing root's atime and mtime
    /// as they were: the root is the mount's root, whose times are the user's.
    pub fn ensure(&self) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let parent = self.path.parent().filter(|p| !p.as_os_str().is_empty());
        let made = crate::storage::keeping_times(parent.unwrap_or(Path::new(".")), || {
            match fs::DirBuilder::new().mode(0o700).create(&self.path) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        if let (true, Some(parent)) = (made, parent) {
            sync_dir(parent)?;
        }
        Ok(())
    }

    fn file(&self, id: u32) -> PathBuf {
        self.path.join(format!("{id}.pack"))
    }
}

/// How the names of the mount's probe files in the pack directory begin
/// (`.probe-WHAT-PID`: scratch files, removed once probed; one a crash left behind is
/// neither a pack nor a file of the tree).
pub const PROBE_PREFIX: &str = ".probe-";

/// How the names of the files a mount makes ahead for new files begin (`.new-PID-SEQ`:
/// each becomes a file of the tree when its name is applied; one a crash left behind was
/// never named, and is removed at the next mount or by `check --repair`).
pub const POOL_PREFIX: &str = ".new-";

/// The id in a pack's file name (`ID.pack`, `ID` decimal without leading zeros, non-zero).
pub fn parse_name(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".pack")?;
    if digits.starts_with('0') || digits.is_empty() {
        return None;
    }
    digits.parse().ok()
}

fn sync_dir(p: &Path) -> io::Result<()> {
    File::open(p)?.sync_all()
}

impl PackDir for FsPackDir {
    fn list(&self) -> io::Result<Vec<u32>> {
        let rd = match fs::read_dir(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            r => r?,
        };
        let mut ids: Vec<u32> = rd
            .flatten()
            .filter_map(|e| parse_name(e.file_name().to_str()?))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    fn open(&self, id: u32) -> io::Result<Arc<dyn Storage>> {
        let f = OpenOptions::new()
            .read(true)
            .write(self.writable)
            .open(self.file(id))?;
        Ok(Arc::new(FileStorage::new(f)))
    }

    fn create(&self, id: u32) -> io::Result<Arc<dyn Storage>> {
        // Only the daemon reads and writes packs: they hold every packed file's bytes,
        // whatever the files' own modes (the daemon's umask may be 0).
        use std::os::unix::fs::OpenOptionsExt;
        self.ensure()?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(self.file(id))?;
        // (Its entry is made durable later, with the first sync that needs it: a sync of
        // the directory here cost a forced journal commit — 0.1 s under a `cp -r` — while
        // every pack append waited for the writer's lock.)
        Ok(Arc::new(FileStorage::new(f)))
    }

    fn sync_names(&self) -> io::Result<()> {
        sync_dir(&self.path)
    }

    fn remove(&self, id: u32) -> io::Result<()> {
        fs::remove_file(self.file(id))?;
        sync_dir(&self.path)
    }

    fn describe(&self, id: u32) -> String {
        self.file(id).display().to_string()
    }

    fn read_mark(&self) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let f = match File::open(self.path.join(super::clean::MARK_NAME)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            f => f?,
        };
        // Bounded: a mark this code wrote for the most packs a directory holds; anything
        // longer is not one (and reads as no mark).
        let mut b = Vec::new();
        f.take(1 << 24).read_to_end(&mut b)?;
        Ok(Some(b))
    }

    fn write_mark(&self, mark: Option<&[u8]>) -> io::Result<()> {
        use std::io::Write;
        let path = self.path.join(super::clean::MARK_NAME);
        let Some(mark) = mark else {
            return match fs::remove_file(&path) {
                Ok(()) => sync_dir(&self.path),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
        };
        // Written beside it, synced, renamed over it, the directory synced. A
        // `.probe-clean-PID` a crash left is a probe file's name: every reader skips it.
        let tmp = self
            .path
            .join(format!("{}{}", super::clean::TMP_PREFIX, std::process::id()));
        let mut f = File::create(&tmp)?;
        f.write_all(mark)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        sync_dir(&self.path)
    }
}

/// Simulated packs for the crash tests: one [`MemDisk`] per pack, crashing with the disks
/// of the files that point into them. Removing a pack is durable at once (the real
/// directory is synced before it returns); a pack created is lost by a crash until its
/// name is synced ([`PackDir::sync_names`], [`PackDir::names_synced`]).
#[derive(Clone, Debug, Default)]
pub struct MemPackDir {
    packs: Arc<Mutex<BTreeMap<u32, MemDisk>>>,
    /// The packs whose names are durable.
    named: Arc<Mutex<BTreeSet<u32>>>,
    /// The clean mark (written whole and durably: it survives a crash as it was).
    mark: Arc<Mutex<Option<Vec<u8>>>>,
    crash: Crash,
}

impl MemPackDir {
    pub fn new(crash: &Crash) -> MemPackDir {
        MemPackDir {
            packs: Arc::default(),
            named: Arc::default(),
            mark: Arc::default(),
            crash: crash.clone(),
        }
    }

    /// The packs as they could be after the crash (each disk rebooted into `crash`; a
    /// pack whose name was never synced is gone).
    pub fn reboot_into(&self, crash: &Crash, mut rand: impl FnMut() -> u64) -> MemPackDir {
        self.each_rebooted(crash, true, |d| d.reboot_into(crash, &mut rand))
    }

    /// Every pack's disk rebooted by `reboot`, into a directory crashing with `crash`;
    /// with `lose_unnamed`, without the packs whose names are not durable.
    fn each_rebooted(
        &self,
        crash: &Crash,
        lose_unnamed: bool,
        mut reboot: impl FnMut(&MemDisk) -> MemDisk,
    ) -> MemPackDir {
        let named = self.named.lock().unwrap().clone();
        let packs = self
            .packs
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _)| !lose_unnamed || named.contains(id))
            .map(|(id, d)| (*id, reboot(d)))
            .collect();
        MemPackDir {
            packs: Arc::new(Mutex::new(packs)),
            named: Arc::new(Mutex::new(named)),
            mark: Arc::new(Mutex::new(self.mark.lock().unwrap().clone())),
            crash: crash.clone(),
        }
    }

    /// The packs as they are after the writer was killed ([`MemDisk::reboot_killed_into`]):
    /// the system still has every name (those not synced stay so: a later crash of the
    /// machine may lose them).
    pub fn reboot_killed_into(&self, crash: &Crash, mut rand: impl FnMut() -> u64) -> MemPackDir {
        self.each_rebooted(crash, false, |d| d.reboot_killed_into(crash, &mut rand))
    }

    /// Whether pack `id`'s name is durable (tests).
    pub fn is_named(&self, id: u32) -> bool {
        self.named.lock().unwrap().contains(&id)
    }

    /// The disk of pack `id`, for tests that damage it.
    pub fn disk(&self, id: u32) -> Option<MemDisk> {
        self.packs.lock().unwrap().get(&id).cloned()
    }
}

impl PackDir for MemPackDir {
    fn list(&self) -> io::Result<Vec<u32>> {
        Ok(self.packs.lock().unwrap().keys().copied().collect())
    }

    fn open(&self, id: u32) -> io::Result<Arc<dyn Storage>> {
        match self.packs.lock().unwrap().get(&id) {
            Some(d) => Ok(Arc::new(d.clone())),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn create(&self, id: u32) -> io::Result<Arc<dyn Storage>> {
        if self.crash.has_crashed() {
            return Err(io::Error::other("simulated crash"));
        }
        let mut g = self.packs.lock().unwrap();
        if g.contains_key(&id) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        let d = MemDisk::with_crash(&self.crash);
        g.insert(id, d.clone());
        Ok(Arc::new(d))
    }

    fn sync_names(&self) -> io::Result<()> {
        if self.crash.has_crashed() {
            return Err(io::Error::other("simulated crash"));
        }
        let ids: Vec<u32> = self.packs.lock().unwrap().keys().copied().collect();
        self.named.lock().unwrap().extend(ids);
        Ok(())
    }

    fn names_synced(&self, ids: &[u32]) {
        if self.crash.has_crashed() {
            return;
        }
        // (Only packs still there: a removed one's id may name a new pack, unsynced.)
        let packs = self.packs.lock().unwrap();
        let present = ids.iter().filter(|id| packs.contains_key(id));
        self.named.lock().unwrap().extend(present);
    }

    fn remove(&self, id: u32) -> io::Result<()> {
        if self.crash.has_crashed() {
            return Err(io::Error::other("simulated crash"));
        }
        self.named.lock().unwrap().remove(&id);
        match self.packs.lock().unwrap().remove(&id) {
            Some(_) => Ok(()),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn describe(&self, id: u32) -> String {
        format!("pack {id}")
    }

    fn read_mark(&self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.mark.lock().unwrap().clone())
    }

    fn write_mark(&self, mark: Option<&[u8]>) -> io::Result<()> {
        if self.crash.has_crashed() {
            return Err(io::Error::other("simulated crash"));
        }
        *self.mark.lock().unwrap() = mark.map(<[u8]>::to_vec);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_decimal_ids() {
        assert_eq!(parse_name("12.pack"), Some(12));
        assert_eq!(parse_name("012.pack"), None);
        assert_eq!(parse_name("0.pack"), None);
        assert_eq!(parse_name("x.pack"), None);
        assert_eq!(parse_name("12.pack.tmp"), None);
    }
}
