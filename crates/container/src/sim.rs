//! An in-memory disk for tests that can crash: at a chosen operation it tears the write in
//! flight at a random byte and fails everything after it; [`MemDisk::reboot`] then builds
//! what a real disk could hold afterwards — the last synced state, plus any subset of the
//! completed-but-unsynced operations (in their order, which models a page cache: a later
//! write to a page wins), plus a prefix of the torn write.
//!
//! Several disks (a backing file and the packs its location records point into) can share
//! one [`Crash`], so the crash stops them all at once. Extended attributes are kept apart
//! from the data: [`Storage::sync_data`] makes only data durable (as `fdatasync` on ext4,
//! which skips a pure xattr change), [`Storage::sync_all`] everything; after a crash any
//! in-order subset of the unsynced xattr changes survives.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use crate::storage::Storage;

#[derive(Clone, Debug)]
enum Op {
    Write(u64, Vec<u8>),
    Punch(u64, u64),
    SetLen(u64),
}

fn apply(data: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write(off, buf) => {
            let end = *off as usize + buf.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[*off as usize..end].copy_from_slice(buf);
        }
        Op::Punch(off, len) => {
            let start = (*off as usize).min(data.len());
            let end = (*off as usize).saturating_add(*len as usize).min(data.len());
            data[start..end].fill(0);
        }
        Op::SetLen(len) => data.resize(*len as usize, 0),
    }
}

/// The page size a killed write is cut at.
const PAGE: u64 = 4096;

type Xattrs = BTreeMap<String, Vec<u8>>;

#[derive(Debug, Default)]
struct Inner {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Op>,
    torn: Option<Op>,
    syncs: u64,
    xattrs: Xattrs,
    durable_xattrs: Xattrs,
    /// Unsynced xattr changes, in order (`None`: removal).
    pending_xattrs: Vec<(String, Option<Vec<u8>>)>,
    /// The change time (`Storage::change_time`): moved by every change of data, length or
    /// xattr, to a value of [`CLOCK`]; kept by a reboot (a test reads it back only to
    /// compare it with what a record keeps).
    ctime: u64,
    /// Bytes [`Storage::share_from`] shared into this disk.
    shared: u64,
}

/// The simulated clock behind [`MemDisk`] change times: strictly increasing, so a moved
/// ctime never equals an earlier one.
static CLOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1_700_000_000_000_000_000);

fn tick() -> u64 {
    CLOCK.fetch_add(1_000, std::sync::atomic::Ordering::Relaxed) + 1_000
}

#[derive(Debug, Default)]
struct World {
    /// Mutating operations (write/punch/set_len/xattr/sync) still allowed before the crash.
    countdown: Option<u64>,
    crashed: bool,
}

/// One crash shared by several disks: counting down, it stops all of them at the same
/// operation.
#[derive(Clone, Debug, Default)]
pub struct Crash(Arc<Mutex<World>>);

impl Crash {
    pub fn new() -> Crash {
        Crash::default()
    }

    /// Crash on the `n`-th mutating operation from now, on any disk of this crash.
    pub fn after(&self, n: u64) {
        self.0.lock().unwrap().countdown = Some(n);
    }

    pub fn has_crashed(&self) -> bool {
        self.0.lock().unwrap().crashed
    }
}

/// Shared handle to one simulated file; clones see the same disk.
#[derive(Clone, Debug, Default)]
pub struct MemDisk {
    inner: Arc<Mutex<Inner>>,
    crash: Crash,
}

fn crashed() -> io::Error {
    io::Error::other("simulated crash")
}

impl MemDisk {
    pub fn new() -> MemDisk {
        MemDisk::default()
    }

    /// A new empty disk that crashes with `crash`.
    pub fn with_crash(crash: &Crash) -> MemDisk {
        MemDisk {
            inner: Arc::default(),
            crash: crash.clone(),
        }
    }

    /// The crash this disk shares.
    pub fn crash(&self) -> &Crash {
        &self.crash
    }

    /// Crash on the `n`-th mutating operation from now (0 = the next one).
    pub fn crash_after(&self, n: u64) {
        self.crash.after(n);
    }

    pub fn has_crashed(&self) -> bool {
        self.crash.has_crashed()
    }

    /// The durable-or-not current value of xattr `name` (what reads see now).
    pub fn xattr(&self, name: &str) -> Option<Vec<u8>> {
        self.inner.lock().unwrap().xattrs.get(name).cloned()
    }

    /// Bytes shared into this disk from others ([`Storage::share_from`], as a backing
    /// filesystem with reflinks would).
    pub fn shared_bytes(&self) -> u64 {
        self.inner.lock().unwrap().shared
    }

    /// Number of completed syncs (for tests that check syncing happens).
    pub fn syncs(&self) -> u64 {
        self.inner.lock().unwrap().syncs
    }

    /// Current contents (what reads see now).
    pub fn contents(&self) -> Vec<u8> {
        self.inner.lock().unwrap().current.clone()
    }

    /// A disk holding what survives a crash now: synced state, a random in-order subset
    /// of unsynced operations, and a random prefix of the torn one. `rand` yields random
    /// numbers (the caller's seeded generator).
    pub fn reboot(&self, rand: impl FnMut() -> u64) -> MemDisk {
        self.reboot_into(&Crash::new(), rand)
    }

    /// [`MemDisk::reboot`] with the survivors picked by a generator seeded from `seed`
    /// (tests that crash at every operation `n` pass `n`: each crash point gets its own
    /// choice, the same at every run).
    pub fn reboot_seeded(&self, seed: u64) -> MemDisk {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        self.reboot(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
    }

    /// [`MemDisk::reboot`], the new disk crashing with `crash` (shared with the other disks
    /// rebooted into it).
    pub fn reboot_into(&self, crash: &Crash, mut rand: impl FnMut() -> u64) -> MemDisk {
        let g = self.inner.lock().unwrap();
        let mut data = g.durable.clone();
        for op in &g.pending {
            if rand().is_multiple_of(2) {
                apply(&mut data, op);
            }
        }
        if let Some(op) = &g.torn {
            match op {
                Op::Write(off, buf) if !buf.is_empty() => {
                    let cut = (rand() % (buf.len() as u64 + 1)) as usize;
                    apply(&mut data, &Op::Write(*off, buf[..cut].to_vec()));
                }
                other => {
                    if rand().is_multiple_of(2) {
                        apply(&mut data, other);
                    }
                }
            }
        }
        let mut xattrs = g.durable_xattrs.clone();
        for (name, value) in &g.pending_xattrs {
            if rand().is_multiple_of(2) {
                match value {
                    Some(v) => xattrs.insert(name.clone(), v.clone()),
                    None => xattrs.remove(name),
                };
            }
        }
        MemDisk::rebooted(data, xattrs, g.ctime, crash)
    }

    /// A disk holding `data` and `xattrs`, all durable, crashing with `crash`.
    fn rebooted(data: Vec<u8>, xattrs: Xattrs, ctime: u64, crash: &Crash) -> MemDisk {
        MemDisk {
            inner: Arc::new(Mutex::new(Inner {
                durable: data.clone(),
                current: data,
                durable_xattrs: xattrs.clone(),
                xattrs,
                ctime,
                ..Inner::default()
            })),
            crash: crash.clone(),
        }
    }

    /// A disk holding what survives the writer being killed now (SIGKILL), not a power
    /// failure: every completed operation stays (the page cache keeps it), xattr changes
    /// too, and the write in flight stops at a page boundary (the kernel copies a write
    /// page by page and checks for a fatal signal between pages).
    pub fn reboot_killed_into(&self, crash: &Crash, mut rand: impl FnMut() -> u64) -> MemDisk {
        let g = self.inner.lock().unwrap();
        let mut data = g.current.clone();
        if let Some(op) = &g.torn {
            match op {
                Op::Write(off, buf) if !buf.is_empty() => {
                    // Possible cuts: 0, the end of the first page, each page after it, all.
                    let first = (PAGE - off % PAGE).min(buf.len() as u64);
                    let cuts: Vec<u64> = std::iter::once(0)
                        .chain((first..buf.len() as u64).step_by(PAGE as usize))
                        .chain(std::iter::once(buf.len() as u64))
                        .collect();
                    let cut = cuts[(rand() % cuts.len() as u64) as usize] as usize;
                    // A write stopped before its first byte did not happen (nor extend the
                    // file).
                    if cut > 0 {
                        apply(&mut data, &Op::Write(*off, buf[..cut].to_vec()));
                    }
                }
                other => {
                    if rand().is_multiple_of(2) {
                        apply(&mut data, other);
                    }
                }
            }
        }
        MemDisk::rebooted(data, g.xattrs.clone(), g.ctime, crash)
    }

    /// Counts one mutating operation against the crash; `Err` when the disk has crashed
    /// (now or before). `torn` is what was in flight when it crashes now.
    fn step(&self, g: &mut Inner, torn: Option<Op>) -> io::Result<()> {
        let mut w = self.crash.0.lock().unwrap();
        if w.crashed {
            return Err(crashed());
        }
        if let Some(n) = w.countdown {
            if n == 0 {
                w.crashed = true;
                g.torn = torn;
                return Err(crashed());
            }
            w.countdown = Some(n - 1);
        }
        Ok(())
    }

    fn mutate(&self, op: Option<Op>) -> io::Result<()> {
        let mut g = self.inner.lock().unwrap();
        self.step(&mut g, op.clone())?;
        match op {
            Some(op) => {
                apply(&mut g.current, &op);
                g.pending.push(op);
                g.ctime = tick();
            }
            None => {
                g.durable = g.current.clone();
                g.pending.clear();
                g.syncs += 1;
            }
        }
        Ok(())
    }

    fn mutate_xattr(&self, name: &str, value: Option<&[u8]>) -> io::Result<()> {
        let mut g = self.inner.lock().unwrap();
        // An xattr change is atomic: a crash on it either happened before it or not at all.
        self.step(&mut g, None)?;
        match value {
            Some(v) => g.xattrs.insert(name.to_owned(), v.to_vec()),
            None => g.xattrs.remove(name),
        };
        g.ctime = tick();
        g.pending_xattrs
            .push((name.to_owned(), value.map(<[u8]>::to_vec)));
        Ok(())
    }
}

impl Storage for MemDisk {
    /// One disk is one file (its clones share it).
    fn identity(&self) -> io::Result<Option<(u64, u64)>> {
        Ok(Some((0, Arc::as_ptr(&self.inner) as u64)))
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if self.has_crashed() {
            return Err(crashed());
        }
        let g = self.inner.lock().unwrap();
        let len = g.current.len() as u64;
        if off >= len {
            return Ok(0);
        }
        let n = ((len - off) as usize).min(buf.len());
        buf[..n].copy_from_slice(&g.current[off as usize..off as usize + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.mutate(Some(Op::Write(off, buf.to_vec())))
    }

    fn punch(&self, off: u64, len: u64) -> io::Result<()> {
        self.mutate(Some(Op::Punch(off, len)))
    }

    /// As XFS with reflinks: block-aligned offsets, a block-aligned length unless the range
    /// ends at the source's end, and then a destination range ending at or past its end;
    /// refused (`Ok(false)`) otherwise. The shared bytes land as one write (torn by a crash
    /// like any: stricter than a filesystem's remap, which is all or nothing per extent).
    fn share_from(&self, src: &Self, src_off: u64, len: u64, dst_off: u64) -> io::Result<bool> {
        const B: u64 = 4096;
        if self.has_crashed() {
            return Err(crashed());
        }
        let bytes = {
            let g = src.inner.lock().unwrap();
            let src_len = g.current.len() as u64;
            let end = src_off.saturating_add(len);
            if !src_off.is_multiple_of(B)
                || !dst_off.is_multiple_of(B)
                || end > src_len
                || (!len.is_multiple_of(B) && end != src_len)
            {
                return Ok(false);
            }
            g.current[src_off as usize..end as usize].to_vec()
        };
        if !len.is_multiple_of(B) && dst_off + len < self.inner.lock().unwrap().current.len() as u64 {
            return Ok(false);
        }
        self.mutate(Some(Op::Write(dst_off, bytes)))?;
        self.inner.lock().unwrap().shared += len;
        Ok(true)
    }

    /// As XFS with reflinks: the alignment of [`MemDisk::share_from`], the bytes compared;
    /// equal ones are counted as shared (`shared_bytes`) and nothing is written (a file
    /// reads the same either way, and a crash cannot tear a comparison).
    fn dedupe_from(
        &self,
        src: &Self,
        src_off: u64,
        len: u64,
        dst_off: u64,
    ) -> io::Result<crate::storage::Dedupe> {
        use crate::storage::Dedupe;
        const B: u64 = 4096;
        if self.has_crashed() {
            return Err(crashed());
        }
        let range = |g: &Inner, off: u64| -> Option<Vec<u8>> {
            let end = off.checked_add(len)?;
            (end <= g.current.len() as u64).then(|| g.current[off as usize..end as usize].to_vec())
        };
        let a = range(&src.inner.lock().unwrap(), src_off);
        let (b, dst_len) = {
            let g = self.inner.lock().unwrap();
            (range(&g, dst_off), g.current.len() as u64)
        };
        let src_len = src.inner.lock().unwrap().current.len() as u64;
        let (Some(a), Some(b)) = (a, b) else {
            return Ok(Dedupe::Refused);
        };
        let at_ends = src_off + len == src_len && dst_off + len == dst_len;
        if !src_off.is_multiple_of(B) || !dst_off.is_multiple_of(B) || (!len.is_multiple_of(B) && !at_ends) {
            return Ok(Dedupe::Refused);
        }
        if a != b {
            return Ok(Dedupe::Differ);
        }
        self.inner.lock().unwrap().shared += len;
        Ok(Dedupe::Shared(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.mutate(None)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.mutate(Some(Op::SetLen(len)))
    }

    fn len(&self) -> io::Result<u64> {
        if self.has_crashed() {
            return Err(crashed());
        }
        Ok(self.inner.lock().unwrap().current.len() as u64)
    }

    /// A sparse file's `SEEK_DATA`: the first 4 KiB block at or after the one holding
    /// `off` that holds a non-zero byte (a block never written or punched is a hole, and a
    /// disk this small keeps no other record of which blocks were written).
    fn next_data(&self, off: u64) -> io::Result<Option<u64>> {
        if self.has_crashed() {
            return Err(crashed());
        }
        let g = self.inner.lock().unwrap();
        let data = &g.current;
        let mut block = off - off % PAGE;
        while (block as usize) < data.len() {
            let end = (block + PAGE).min(data.len() as u64) as usize;
            if data[block as usize..end].iter().any(|&b| b != 0) {
                return Ok(Some(block.max(off)));
            }
            block += PAGE;
        }
        Ok(None)
    }

    fn get_xattr(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        if self.has_crashed() {
            return Err(crashed());
        }
        Ok(self.xattr(name))
    }

    fn set_xattr(&self, name: &str, value: &[u8]) -> io::Result<()> {
        self.mutate_xattr(name, Some(value))
    }

    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        self.mutate_xattr(name, None)
    }

    fn change_time(&self) -> io::Result<Option<u64>> {
        if self.has_crashed() {
            return Err(crashed());
        }
        let mut g = self.inner.lock().unwrap();
        if g.ctime == 0 {
            g.ctime = tick(); // (a new disk: made now)
        }
        Ok(Some(g.ctime))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.mutate(None)?;
        let mut g = self.inner.lock().unwrap();
        g.durable_xattrs = g.xattrs.clone();
        g.pending_xattrs.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_writes_may_vanish_synced_ones_stay() {
        let d = MemDisk::new();
        d.write_at(b"hello", 0).unwrap();
        d.sync_data().unwrap();
        d.write_at(b"J", 0).unwrap();
        d.crash_after(0);
        assert!(d.write_at(b"xx", 3).is_err());
        assert!(d.has_crashed());
        let mut seen = std::collections::HashSet::new();
        let mut x = 1u64;
        for _ in 0..200 {
            let r = d.reboot(|| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                x >> 33
            });
            seen.insert(r.contents());
        }
        for s in &seen {
            assert!(s.starts_with(b"hel") || s.starts_with(b"Jel"), "{s:?}");
        }
        assert!(seen.contains(b"hello".as_slice()));
        assert!(seen.contains(b"Jello".as_slice()));
        assert!(seen.contains(b"Jelxx".as_slice()));
        assert!(seen.contains(b"helxo".as_slice()));
    }
}
