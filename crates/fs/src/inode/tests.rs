//! The inode table, checked on a backing directory in the temporary directory.

use std::ffi::CString;

use super::*;

/// An inode table over a fresh directory `name` in the temporary directory (removed by
/// the caller).
fn table(name: &str) -> (std::path::PathBuf, Inodes) {
    let dir = std::env::temp_dir().join(format!("squeezefs-inode-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (inodes, _) = Inodes::open(&dir).unwrap();
    (dir, inodes)
}

/// A file's backing inode number reused by a new file, after the daemon closed the old
/// one's cached fd: the new file gets an inode of its own, never the old one's (stress-ng
/// found `truncate` answered EISDIR when a new file was served as an old directory).
#[test]
fn a_reused_backing_inode_number_is_a_new_inode() {
    let (dir, inodes) = table("reuse");
    assert!(
        inodes.uses_handles(),
        "this test needs root (file handles: CAP_DAC_READ_SEARCH); CI runs as root"
    );
    let dirfd = inodes.fd(&inodes.get(1).unwrap()).unwrap();
    let make = |name: &str| {
        let c = CString::new(name).unwrap();
        drop(sys::create_rw(&dirfd, &c, 0o644).unwrap());
        let fd = sys::open_path(&dirfd, &c).unwrap();
        let st = sys::fstat(&fd).unwrap();
        (fd, st)
    };
    let (fd, st) = make("old");
    let root = inodes.get(1).unwrap();
    let (old_ino, old) = inodes.insert(fd, &st, &root, c"old");
    // The fd cache closed its fd; the file goes.
    old.fd.lock().unwrap().fd = None;
    std::fs::remove_file(dir.join("old")).unwrap();
    // New files until one gets the old backing number (ext4 reuses it at once).
    let mut reused = None;
    for i in 0..1000 {
        let (fd, st2) = make(&format!("new{i}"));
        if st2.st_ino == st.st_ino {
            reused = Some((fd, st2));
            break;
        }
    }
    let (fd, st2) = reused.expect("the backing filesystem never reused the inode number");
    let (ino, inode) = inodes.insert(fd, &st2, &root, c"new");
    assert_ne!(ino, old_ino, "a new file must not be served as the removed one");
    assert!(!Arc::ptr_eq(&inode, &old));
    // The old inode stays for the kernel's references until FORGET, then goes alone.
    assert!(inodes.get(old_ino).is_some());
    inodes.forget(old_ino, 1);
    assert!(inodes.get(old_ino).is_none());
    assert!(Arc::ptr_eq(&inodes.get(ino).unwrap(), &inode));
    assert_eq!(inodes.entry_number(st2.st_dev, st2.st_ino), ino);
    let _ = std::fs::remove_dir_all(&dir);
}
/// A lookup count at its maximum sticks there: the inode is never forgotten (rather
/// than dropped while the kernel may hold it), whatever FORGETs come.
#[test]
fn a_lookup_count_at_its_maximum_is_never_forgotten() {
    let (dir, inodes) = table("lookups");
    let root = inodes.get(1).unwrap();
    let dirfd = inodes.fd(&root).unwrap();
    drop(sys::create_rw(&dirfd, c"f", 0o644).unwrap());
    let look = || {
        let fd = sys::open_path(&dirfd, c"f").unwrap();
        let st = sys::fstat(&fd).unwrap();
        inodes.insert(fd, &st, &root, c"f")
    };
    let (ino, inode) = look();
    inode.lookups.store(u32::MAX - 1, Ordering::Relaxed);
    look();
    look();
    assert_eq!(inode.lookups.load(Ordering::Relaxed), u32::MAX);
    inodes.forget(ino, u64::MAX);
    inodes.forget(ino, 1);
    assert!(inodes.get(ino).is_some(), "kept");
    // An ordinary count goes to 0 and the inode goes.
    inode.lookups.store(2, Ordering::Relaxed);
    inodes.forget(ino, 2);
    assert!(inodes.get(ino).is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A listing learnt only if no entry changed since it began: a name made while it was being
/// read (and so perhaps missing from it) never looks absent.
#[test]
fn a_listing_that_raced_a_change_is_not_learnt() {
    use super::known::Change;
    let d = super::node::DirState::default();
    let before = d.gen.load(std::sync::atomic::Ordering::Acquire);
    d.names_changed(Change::Made(b"new"));
    d.learn_names(before, [&b"old"[..]].into_iter());
    assert!(!d.names.absent(b"new"), "a stale listing was learnt");
    let now = d.gen.load(std::sync::atomic::Ordering::Acquire);
    d.learn_names(now, [&b"old"[..], b"new"].into_iter());
    assert!(d.names.absent(b"other") && !d.names.absent(b"new"));
}
