//! The inode table: one O_PATH fd per inode the kernel knows, keyed by the backing file's
//! (device, inode) so hard links share one FUSE inode; lookup counts released on FORGET.
//! Open regular files share one container state, whatever the number of handles.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, RwLock};

use squeezefs_container::{Container, FileStorage};

/// The state all handles of one open regular file share.
pub struct OpenFile {
    pub container: Container<FileStorage>,
    pub handles: u32,
}

pub struct Inode {
    pub fd: OwnedFd,
    pub key: (u64, u64),
    pub is_dir: bool,
    pub is_reg: bool,
    pub lookups: Mutex<u64>,
    pub open: Mutex<Option<OpenFile>>,
    /// Logical size of a closed container, remembered (we are the only writer).
    pub size_cache: Mutex<Option<u64>>,
}

impl Inode {
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[derive(Default)]
struct Table {
    by_ino: HashMap<u64, Arc<Inode>>,
    by_key: HashMap<(u64, u64), u64>,
    next: u64,
}

pub struct Inodes {
    t: RwLock<Table>,
}

impl Inodes {
    pub fn new(root: OwnedFd, st: &libc::stat) -> Inodes {
        let key = (st.st_dev, st.st_ino);
        let root = Arc::new(Inode {
            fd: root,
            key,
            is_dir: true,
            is_reg: false,
            lookups: Mutex::new(u64::MAX / 2),
            open: Mutex::new(None),
            size_cache: Mutex::new(None),
        });
        let mut t = Table {
            next: 2,
            ..Table::default()
        };
        t.by_ino.insert(1, root);
        t.by_key.insert(key, 1);
        Inodes { t: RwLock::new(t) }
    }

    pub fn get(&self, ino: u64) -> Option<Arc<Inode>> {
        self.t.read().unwrap().by_ino.get(&ino).cloned()
    }

    /// Registers a looked-up file (one more lookup reference) and returns its number.
    /// `fd` is dropped when the file is already known.
    pub fn insert(&self, fd: OwnedFd, st: &libc::stat) -> (u64, Arc<Inode>) {
        let key = (st.st_dev, st.st_ino);
        let mut t = self.t.write().unwrap();
        if let Some(&ino) = t.by_key.get(&key) {
            let inode = t.by_ino[&ino].clone();
            *inode.lookups.lock().unwrap() += 1;
            return (ino, inode);
        }
        let fmt = st.st_mode & libc::S_IFMT;
        let inode = Arc::new(Inode {
            fd,
            key,
            is_dir: fmt == libc::S_IFDIR,
            is_reg: fmt == libc::S_IFREG,
            lookups: Mutex::new(1),
            open: Mutex::new(None),
            size_cache: Mutex::new(None),
        });
        let ino = t.next;
        t.next += 1;
        t.by_ino.insert(ino, inode.clone());
        t.by_key.insert(key, ino);
        (ino, inode)
    }

    /// Drops `n` lookup references; the inode goes when none are left and nothing is open.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == 1 {
            return;
        }
        let mut t = self.t.write().unwrap();
        let Some(inode) = t.by_ino.get(&ino).cloned() else {
            return;
        };
        let mut l = inode.lookups.lock().unwrap();
        *l = l.saturating_sub(n);
        if *l == 0 && inode.open.lock().unwrap().is_none() {
            drop(l);
            t.by_ino.remove(&ino);
            if t.by_key.get(&inode.key) == Some(&ino) {
                t.by_key.remove(&inode.key);
            }
        }
    }

    /// Every inode with open file state (for flushing at unmount).
    pub fn all(&self) -> Vec<Arc<Inode>> {
        self.t.read().unwrap().by_ino.values().cloned().collect()
    }
}
