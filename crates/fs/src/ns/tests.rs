//! The pool of files made ahead: made in the private directory, removed, and what an
//! earlier daemon left removed at the next mount, nothing else touched. (The queue and its
//! barriers are proven on real mounts: `crates/cli/tests/names_behind.rs`, and the random
//! name changes of `namespace.rs` with `dirops=behind`.)

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;

use super::pool::{recover, Pool, POOL_MODE};

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("squeezefs-ns-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn pool_files_are_made_in_the_private_directory_and_removed() {
    let root = scratch("pool");
    let pool = Pool::open(&std::fs::File::open(&root).unwrap()).unwrap();
    let private = root.join(".squeezefs-packs");
    assert_eq!(std::fs::metadata(&private).unwrap().mode() & 0o777, 0o700);
    let r = pool.make().unwrap();
    let name = r.name.to_str().unwrap().to_string();
    assert!(name.starts_with(".new-"), "{name}");
    let md = std::fs::metadata(private.join(&name)).unwrap();
    assert_eq!(md.mode() & 0o7777, POOL_MODE);
    assert_eq!(md.len(), 0);
    assert_eq!(r.file.metadata().unwrap().ino(), md.ino());
    let second = pool.make().unwrap();
    assert_ne!(second.name, r.name);
    pool.remove(&r.name);
    assert!(!private.join(&name).exists());
    // Removing one already gone is quiet.
    pool.remove(&CString::new(name).unwrap());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn recovery_removes_only_files_made_ahead() {
    let root = scratch("recover");
    let private = root.join(".squeezefs-packs");
    std::fs::create_dir(&private).unwrap();
    for n in [".new-12-1", ".new-12-2", "1.pack", ".probe-x-3", "new-1"] {
        std::fs::write(private.join(n), b"x").unwrap();
    }
    let dir = std::fs::File::open(&private).unwrap();
    assert_eq!(recover(&dir).unwrap(), 2);
    let mut left: Vec<String> = std::fs::read_dir(&private)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, [".probe-x-3", "1.pack", "new-1"]);
    // And at a mount: the pool opens after removing them.
    std::fs::write(private.join(".new-9-9"), b"").unwrap();
    let _pool = Pool::open(&std::fs::File::open(&root).unwrap()).unwrap();
    assert!(!private.join(".new-9-9").exists());
    std::fs::remove_dir_all(&root).unwrap();
}
