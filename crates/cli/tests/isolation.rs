//! Reliability against hostile input on a real mount: symlinks and forged properties in
//! the backing directory never lead outside it, and other users get what the modes say.

#![deny(unsafe_code)]

use std::fs;

mod common;
use common::{as_tests, open_to_others, scratch, sys, tests_ids, Mount};

#[test]
fn nothing_through_the_mount_reaches_outside_the_backing_directory() {
    use std::os::unix::fs::symlink;
    let dir = scratch("inside");
    let outside = dir.join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("sentinel"), b"untouched").unwrap();
    let backing = dir.join("backing");
    symlink(&outside, backing.join("abs")).unwrap();
    symlink("../outside", backing.join("rel")).unwrap();
    fs::create_dir(backing.join("a")).unwrap();
    // A directory property forged around squeezefs: ignored with a warning, never trusted.
    let forged = backing.join("a");
    let n = std::ffi::CString::new("user.squeezefs.compression").unwrap();
    let v = b"zstd:99\0garbage";
    assert_eq!(sys::setxattr(&forged, &n, v), 0);

    let m = Mount::new(&dir, "");
    // Symlinks are served as symlinks: the daemon never follows them.
    assert!(fs::symlink_metadata(m.path("abs"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        fs::read_link(m.path("rel")).unwrap(),
        std::path::Path::new("../outside")
    );
    let fd = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(m.path("abs"))
    };
    assert!(fd.is_err());
    assert_eq!(fd.unwrap_err().raw_os_error(), Some(libc::ELOOP));
    // The forged property is not a property.
    let a = m.path("a");
    let mut buf = [0u8; 64];
    assert_eq!(sys::getxattr(&a, &n, &mut buf), -1);
    let mut list = [0u8; 256];
    let len = sys::listxattr(&a, &mut list);
    assert!(len >= 0 && !String::from_utf8_lossy(&list[..len as usize]).contains("squeezefs"));
    fs::write(m.path("a/file"), b"data").unwrap();
    assert_eq!(fs::read(m.path("a/file")).unwrap(), b"data");
    // The statistics file cannot be replaced or written.
    assert!(fs::write(m.path(".squeezefs-stats"), b"x").is_err());

    // Renames racing with creates inside the renamed directories.
    fs::create_dir(m.path("b")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renamer = {
        let (x, y, t, stop) = (m.path("a"), m.path("b"), m.path("t"), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fs::rename(&x, &t);
                let _ = fs::rename(&y, &x);
                let _ = fs::rename(&t, &y);
            }
        })
    };
    let mut made = 0;
    for i in 0..2000 {
        for d in ["a", "b"] {
            if fs::write(m.path(&format!("{d}/f{i}-{d}")), b"x").is_ok() {
                made += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    renamer.join().unwrap();
    m.unmount();
    // Everything created is inside BACKING; outside is as it was.
    let names: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("sentinel")]);
    assert_eq!(fs::read(outside.join("sentinel")).unwrap(), b"untouched");
    let inside = ["a", "b", "t"]
        .iter()
        .filter_map(|d| fs::read_dir(backing.join(d)).ok())
        .flat_map(|rd| rd.map(|e| e.unwrap().file_name()))
        .filter(|n| n.to_string_lossy().starts_with('f') && n != "file")
        .count();
    assert_eq!(inside, made, "every file created landed in the backing directory");
    let log = fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert!(log.contains("ignoring user.squeezefs.compression"), "{log}");
}

#[test]
fn other_users_get_the_permissions_the_modes_say() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    common::require_root("this test needs root (CI runs as root)");
    let dir = scratch("perms");
    // Let the unprivileged user walk to the mount point.
    open_to_others(&dir);
    let m = Mount::new(&dir, "allow_other");
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(m.path("secret"), b"root only").unwrap();
    fs::set_permissions(m.path("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(m.path("rootdir")).unwrap();
    fs::create_dir(m.path("shared")).unwrap();
    fs::set_permissions(m.path("shared"), fs::Permissions::from_mode(0o1777)).unwrap();
    let secret = m.path("secret");
    let out = as_tests(&["cat", secret.to_str().unwrap()]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    let x = m.path("rootdir/x");
    assert!(!as_tests(&["touch", x.to_str().unwrap()]).status.success());
    let mine = m.path("shared/mine");
    let out = as_tests(&["sh", "-c", &format!("echo hi > {}", mine.display())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (uid, _) = tests_ids();
    assert_eq!(fs::metadata(&mine).unwrap().uid(), uid, "created as the caller");
    assert_eq!(fs::metadata(dir.join("backing/shared/mine")).unwrap().uid(), uid);
    // Sticky directory: another user's file cannot be removed.
    fs::write(m.path("shared/roots"), b"x").unwrap();
    let roots = m.path("shared/roots");
    assert!(!as_tests(&["rm", "-f", roots.to_str().unwrap()]).status.success());
    assert!(roots.exists());
    m.unmount();
}
