//! One inode the kernel knows ([`Inode`]) and the small types it is made of. A million
//! of them stay in memory while the kernel remembers a tree (`scripts/bench-memory`), so
//! every field is sized for that: a directory's fields are boxed ([`DirState`]; most
//! inodes are files), the file handle is kept inline when it is small ([`Handle`]), what
//! path mode alone needs is boxed, and a closed file's state is compact
//! (`lifecycle::state`). `tests::an_inode_stays_small` holds the sizes.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::lifecycle::state::FileState;

/// Extended attributes known to be absent from an inode's backing entry (bits named in
/// `ops::xattr`), with a generation that every change of its xattrs through the mount
/// moves: an absence learnt by a query that began before a change is never remembered
/// after it (a setfacl racing a create or an `ls -l` cannot leave a stale "none").
#[derive(Default)]
pub struct Absent(AtomicU64);

impl Absent {
    /// Whether `bit` is known absent.
    pub fn has(&self, bit: u8) -> bool {
        self.0.load(Ordering::Acquire) & u64::from(bit) != 0
    }

    /// The generation to hand [`Absent::learn`], taken before the backing entry is asked.
    pub fn generation(&self) -> u64 {
        self.0.load(Ordering::Acquire) >> 8
    }

    /// Remembers `bit` absent, as a query begun at `generation` found it, unless the
    /// xattrs changed since.
    pub fn learn(&self, bit: u8, generation: u64) {
        let _ = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            (v >> 8 == generation).then_some(v | u64::from(bit))
        });
    }

    /// After a change of the entry's xattrs: every absence is forgotten, the generation
    /// moves.
    pub fn changed(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| Some(((v >> 8) + 1) << 8));
    }
}

/// A kernel file handle as `sys::file_handle` gives it (its type as 4 bytes, then its
/// bytes): 16 bytes inline when its type fits a byte and its bytes [`Handle::INLINE`]
/// (ext4's 8, xfs's and tmpfs's 12), boxed otherwise (btrfs's 20).
#[derive(Clone, PartialEq, Eq)]
pub enum Handle {
    Inline {
        kind: u8,
        len: u8,
        bytes: [u8; Handle::INLINE],
    },
    /// A `Vec` boxed for a thin pointer: the enum stays 16 bytes (a `Box<[u8]>` is two
    /// words), for the rare handle that does not fit inline.
    #[allow(clippy::box_collection)]
    Boxed(Box<Vec<u8>>),
}

impl Handle {
    /// Handle bytes (after the type) kept inline at most.
    pub const INLINE: usize = 13;

    pub fn new(h: &[u8]) -> Handle {
        let kind = h.get(..4).map(|k| i32::from_ne_bytes(k.try_into().unwrap()));
        match kind.map(u8::try_from) {
            Some(Ok(kind)) if h.len() - 4 <= Handle::INLINE => {
                let mut bytes = [0; Handle::INLINE];
                bytes[..h.len() - 4].copy_from_slice(&h[4..]);
                Handle::Inline {
                    kind,
                    len: (h.len() - 4) as u8,
                    bytes,
                }
            }
            _ => Handle::Boxed(Box::new(h.to_vec())),
        }
    }

    /// The handle as `sys::file_handle` gave it.
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match self {
            Handle::Inline { kind, len, bytes } => {
                let mut h = Vec::with_capacity(4 + usize::from(*len));
                h.extend_from_slice(&i32::from(*kind).to_ne_bytes());
                h.extend_from_slice(&bytes[..usize::from(*len)]);
                h.into()
            }
            Handle::Boxed(b) => b.as_slice().into(),
        }
    }
}

/// A directory's own fields (boxed in its [`Inode`]: most inodes are files).
#[derive(Default)]
pub struct DirState {
    /// Its compression properties, once read (we are the only writer).
    pub props: Mutex<Option<crate::props::DirProps>>,
    /// Its count of entries made, removed or renamed through the mount: a listing taken at
    /// an older count is stale (see `DirHandle`).
    pub gen: AtomicU64,
    /// All its names, while known (LOOKUP misses from memory).
    pub names: super::known::KnownNames,
    /// Whether its names may be known at all (`ops::names` `names_exact`), once asked:
    /// casefolding and encryption are set on empty directories only, so it stays.
    pub exact: std::sync::OnceLock<bool>,
}

impl DirState {
    /// An entry was made, removed or renamed through the mount (after the backing call
    /// succeeded): open listings are stale, and the known names follow.
    pub fn names_changed(&self, c: super::known::Change<'_>) {
        self.gen.fetch_add(1, Ordering::AcqRel);
        self.names.change(c);
    }

    /// `names` are all the directory's names, as a listing begun at generation `gen` read
    /// them: remembered unless an entry changed since.
    pub fn learn_names<'a>(&self, gen: u64, names: impl ExactSizeIterator<Item = &'a [u8]>) {
        self.names
            .learn(|| self.gen.load(Ordering::Acquire) == gen, names);
    }
}

/// Path mode: an inode's parent and its name there.
pub(super) type Place = (Arc<Inode>, CString);

/// What an inode's `fd` lock guards.
#[derive(Default)]
pub(super) struct FdPlace {
    /// Its `O_PATH` fd, while the fd cache keeps it.
    pub(super) fd: Option<Arc<OwnedFd>>,
    /// Path mode: its parent and the name it was last seen under, to reopen it by name
    /// (`None`: no way back by name — the root, or a name that went). Boxed: handle mode
    /// never has one.
    pub(super) place: Option<Box<Place>>,
}

pub struct Inode {
    pub key: (u64, u64),
    /// Its `O_PATH` fd while cached, and its place in path mode: one lock for both.
    pub(super) fd: Mutex<FdPlace>,
    /// Its file handle: to reopen it by when `by_handle` (root: CAP_DAC_READ_SEARCH), else
    /// (path mode) only to tell it from a new file given its backing inode number once it
    /// is gone.
    pub(super) handle: Option<Handle>,
    /// The kernel's lookup references (changed under the table's write lock). At
    /// `u32::MAX` it stays there and the inode is never forgotten (4 billion lookups of
    /// one inode without a FORGET: a leak, never an inode dropped while the kernel holds it).
    pub(super) lookups: AtomicU32,
    /// Other xattrs the kernel or `ls -l` keep asking for, known to be absent (bits of
    /// `ops::xattr`: the access and default ACLs, the SELinux label): answered from memory.
    pub no_xattrs: Absent,
    pub is_reg: bool,
    /// `handle` reopens the inode.
    pub(super) by_handle: bool,
    /// Its backing inode number went to a new file, which has an inode of its own: lookups
    /// no longer find this one (kept until FORGET). Changed under the table's write lock.
    pub(super) replaced: AtomicBool,
    /// Known to have no `security.capability` xattr (the kernel asks before every write).
    pub no_caps: AtomicBool,
    /// A regular file's container state (see `lifecycle::state` for the rules).
    pub file: FileState,
    /// A directory's own fields.
    pub dir: Option<Box<DirState>>,
}

impl Inode {
    /// A regular file's inode with no fd, place or handle (unit tests of other modules).
    #[cfg(test)]
    pub(crate) fn for_tests() -> Inode {
        Inode::new((1, 99), libc::S_IFREG, None, None, None, false, 0)
    }

    /// A new inode for backing file `key` of type `fmt` (`S_IFMT` bits), with its `O_PATH`
    /// fd, its place in path mode, and its file handle (`by_handle`: to reopen it by).
    pub(super) fn new(
        key: (u64, u64),
        fmt: u32,
        fd: Option<Arc<OwnedFd>>,
        loc: Option<(Arc<Inode>, CString)>,
        handle: Option<Handle>,
        by_handle: bool,
        lookups: u32,
    ) -> Inode {
        let is_dir = fmt == libc::S_IFDIR;
        Inode {
            key,
            fd: Mutex::new(FdPlace {
                fd,
                place: loc.map(Box::new),
            }),
            by_handle: by_handle && handle.is_some(),
            handle,
            lookups: AtomicU32::new(lookups),
            no_xattrs: Absent::default(),
            is_reg: fmt == libc::S_IFREG,
            replaced: AtomicBool::new(false),
            no_caps: AtomicBool::new(false),
            file: FileState::default(),
            dir: is_dir.then(Box::default),
        }
    }

    /// The handle to reopen the inode by, if it has one.
    pub(super) fn open_handle(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        self.handle.as_ref().filter(|_| self.by_handle).map(Handle::bytes)
    }

    /// Its recorded place (path mode).
    pub(super) fn place(&self) -> Option<(Arc<Inode>, CString)> {
        self.fd.lock().unwrap().place.as_deref().cloned()
    }

    /// A directory (it has a directory's fields).
    pub fn is_dir(&self) -> bool {
        self.dir.is_some()
    }

    /// A directory's count of changes of its entries (0 for anything else).
    pub fn dir_gen(&self) -> u64 {
        self.dir.as_ref().map_or(0, |d| d.gen.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An absence learnt by a query that began before a change of the xattrs is not
    /// remembered; one learnt after it is, and the next change forgets it.
    #[test]
    fn an_absence_learnt_before_a_change_is_not_remembered() {
        let a = Absent::default();
        let g = a.generation();
        // The query ran, then a setxattr changed the entry before the answer was kept.
        a.changed();
        a.learn(2, g);
        assert!(!a.has(2));
        let g = a.generation();
        a.learn(2, g);
        a.learn(1, g);
        assert!(a.has(2) && a.has(1) && !a.has(4));
        a.changed();
        assert!(!a.has(2) && !a.has(1));
    }

    #[test]
    fn handles_come_back_as_given() {
        let mut ext4 = 1i32.to_ne_bytes().to_vec();
        ext4.extend_from_slice(&[9, 8, 7, 6, 5, 4, 3, 2]);
        let mut btrfs = 0x4di32.to_ne_bytes().to_vec();
        btrfs.extend_from_slice(&[1; 20]);
        let mut odd = 0x1234i32.to_ne_bytes().to_vec();
        odd.extend_from_slice(&[1; 4]);
        for h in [ext4, btrfs, odd, vec![1, 0, 0, 0]] {
            let k = Handle::new(&h);
            assert_eq!(&*k.bytes(), &h[..]);
        }
        assert!(matches!(
            Handle::new(&[1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
            Handle::Inline { .. }
        ));
        assert!(matches!(Handle::new(&[0x4d; 24]), Handle::Boxed(_)));
    }

    /// What a remembered inode costs is mostly this struct (`scripts/bench-memory`; issue
    /// 43 asked for at most 200 bytes an inode at a million files, its allocation, file
    /// handle and table bucket included).
    #[test]
    fn an_inode_stays_small() {
        assert_eq!(std::mem::size_of::<Option<Handle>>(), 16);
        assert_eq!(std::mem::size_of::<Option<crate::lifecycle::state::Closed>>(), 32);
        let n = std::mem::size_of::<Inode>();
        eprintln!(
            "Inode: {n} bytes, FileState: {}",
            std::mem::size_of::<FileState>()
        );
        // An `Arc<Inode>` of 152 bytes is a 176-byte malloc chunk (16 of counts, 8 of
        // header); 8 more bytes would make it 192.
        assert!(n <= 152, "an Inode takes {n} bytes");
        assert!(std::mem::size_of::<FileState>() <= 72);
    }
}
