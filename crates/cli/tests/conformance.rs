//! What the standard Linux filesystem suite (xfstests) found that pjdfstest and fsx did not
//! (issue 17): each answer a local filesystem gives, checked on a real mount as the user it
//! concerns. Needs root (other users, device nodes, tmpfs, setcap); CI runs as root.

#![deny(unsafe_code)]

mod common;

use std::fs;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::sys::{self, DirStream};
use common::{
    as_tests, mount_again_elsewhere, open_rw_new, open_to_others, scratch, tests_ids, unmount, Mount, SmallFs,
};

fn root_only() {
    common::require_root("this test needs root (CI runs as root)");
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn run(cmd: &str, args: &[&str]) -> std::process::Output {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

/// The mount's type and per-mount options, from mountinfo.
fn mount_line(mnt: &Path) -> (String, String) {
    let m = common::squeezefs_mount(mnt).expect("mounted");
    (m.fstype, m.options)
}

#[test]
fn xattr_size_queries_give_the_values_length_so_getfattr_getfacl_and_getcap_work() {
    root_only();
    let dir = scratch("xattr-size");
    let m = Mount::new(&dir, "");
    let f = m.path("f");
    fs::write(&f, b"x").unwrap();
    let fs_ = f.to_str().unwrap();
    run("setfattr", &["-n", "user.a", "-v", "hello", fs_]);
    // The size query the kernel and every tool ask first.
    let n = sys::getxattr(&f, c"user.a", &mut []);
    assert_eq!(n, 5, "getxattr(…, NULL, 0) is the value's length");
    let mut small = [0u8; 2];
    let n = sys::getxattr(&f, c"user.a", &mut small[..2]);
    assert_eq!((n, errno()), (-1, libc::ERANGE), "a buffer too small is ERANGE");
    assert!(text(&run("getfattr", &["-d", fs_])).contains("user.a=\"hello\""));
    // File capabilities (security.capability) round-trip, and stay when the daemon later
    // writes the file's container (the group commit, forced here by reading the statistics
    // file; the backing kernel strips a real security.capability at any write) and across
    // a remount.
    run("setcap", &["cap_setuid+ep", fs_]);
    assert!(text(&run("getcap", &[fs_])).contains("cap_setuid=ep"));
    fs::write(&f, b"written after setcap: the write clears the capabilities").unwrap();
    assert!(
        !text(&run("getcap", &[fs_])).contains("cap_setuid"),
        "a write clears them"
    );
    run("setcap", &["cap_net_raw+ep", fs_]);
    fs::read(m.path(".squeezefs-stats")).unwrap();
    assert!(text(&run("getcap", &[fs_])).contains("cap_net_raw=ep"));
    // An access ACL is found by getfacl.
    run("setfacl", &["-m", "u:tests:r", fs_]);
    assert!(text(&run("getfacl", &["-c", fs_])).contains("user:tests:r--"));
    m.unmount();
    let m = Mount::new(&dir, "");
    assert!(text(&run("getcap", &[m.path("f").to_str().unwrap()])).contains("cap_net_raw=ep"));
    m.unmount();
}

#[test]
fn entries_made_setuid_or_setgid_keep_those_bits_when_given_to_their_owner() {
    root_only();
    let dir = scratch("create-sgid");
    open_to_others(&dir);
    let m = Mount::new(&dir, "allow_other");
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o777)).unwrap();
    // Root, in a setgid directory: a group-executable setgid file (chown would clear it).
    let d = m.path("sgid");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o2777)).unwrap();
    use std::os::unix::fs::OpenOptionsExt;
    let made = |p: &Path, mode: u32| {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(p)
            .unwrap();
    };
    made(&d.join("f"), 0o2755);
    assert_eq!(mode(&d.join("f")), 0o2755);
    fs::create_dir(d.join("sub")).unwrap();
    assert_eq!(
        mode(&d.join("sub")) & 0o2000,
        0o2000,
        "directories inherit setgid"
    );
    // Another user, in its own directory: setuid and setgid files of its own.
    let own = m.path("own");
    let o = own.to_str().unwrap();
    let out = as_tests(&[
        "sh",
        "-c",
        &format!("mkdir {o} && cd {o} && touch u g && chmod 4755 u && chmod 2755 g"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = as_tests(&[
        "perl",
        "-MFcntl",
        "-e",
        &format!("sysopen(F, '{o}/c', O_CREAT|O_WRONLY, 04755) or die $!"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(mode(&own.join("u")), 0o4755);
    assert_eq!(mode(&own.join("g")), 0o2755);
    assert_eq!(mode(&own.join("c")), 0o4755, "made setuid by open(O_CREAT)");
    assert_eq!(fs::metadata(own.join("c")).unwrap().uid(), tests_ids().0);
    m.unmount();
}

#[test]
fn root_mounts_are_suid_and_dev_as_mount_8_makes_them_and_other_users_mounts_are_not() {
    root_only();
    let dir = scratch("suid-dev");
    let m = Mount::new(&dir, "");
    let (fstype, opts) = mount_line(&m.mnt);
    assert_eq!(fstype, "fuse.squeezefs", "the type names the filesystem");
    assert!(!opts.contains("nosuid") && !opts.contains("nodev"), "{opts}");
    // A device node made on the mount opens as the device.
    let null = m.path("null");
    assert_eq!(sys::mknod(&null, libc::S_IFCHR | 0o666, libc::makedev(1, 3)), 0);
    fs::write(&null, b"into the void").unwrap();
    assert!(fs::read(&null).unwrap().is_empty());
    // copy_file_range to a device is EINVAL (a device, not a permission problem).
    fs::write(m.path("src"), b"data").unwrap();
    let src = fs::File::open(m.path("src")).unwrap();
    let dst = fs::OpenOptions::new().write(true).open(&null).unwrap();
    let r = sys::copy_file_range(&src, &dst, 4);
    assert_eq!((r, errno()), (-1, libc::EINVAL));
    drop((src, dst));
    m.unmount();

    // Asked for, nosuid and nodev hold: the device no longer opens. (With relatime, as
    // fstab lines often say: the default, accepted.)
    let m = Mount::new(&dir, "nosuid,nodev,relatime");
    let (_, opts) = mount_line(&m.mnt);
    assert!(opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
    let e = fs::read(m.path("null")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES));
    m.unmount();

    // Another user's mount is nosuid,nodev whatever it asks (fusermount3).
    let dir = scratch("suid-dev-user");
    open_to_others(&dir);
    let m = Mount::as_user(&dir, "suid,dev", "tests");
    let (fstype, opts) = mount_line(&m.mnt);
    assert_eq!(fstype, "fuse.squeezefs");
    assert!(opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
    let made = as_tests(&[
        "sh",
        "-c",
        &format!("echo hi > {}/f && cat {}/f", m.mnt.display(), m.mnt.display()),
    ]);
    assert_eq!(text(&made), "hi\n", "{}", String::from_utf8_lossy(&made.stderr));
    m.unmount();
}

/// lseek(fd, off, whence) as (result, errno).
fn seek(fd: BorrowedFd, off: i64, whence: i32) -> (i64, i32) {
    let r = sys::lseek(fd, off, whence);
    (r, if r < 0 { errno() } else { 0 })
}

#[test]
fn seek_data_and_seek_hole_are_exact_even_before_written_data_reaches_the_daemon() {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileExt;
    let dir = scratch("seek");
    let m = Mount::new(&dir, "extent_size=64K");
    let f = open_rw_new(&m.path("f"));
    let fd = f.as_fd();
    let ext: u64 = 64 << 10;
    assert_eq!(
        f.metadata().unwrap().blksize(),
        ext,
        "st_blksize is the extent: the unit of holes"
    );
    // |data|  huge hole  |data| — written, not synced: the bytes sit in the kernel's cache.
    let big: u64 = 1 << 34;
    let block = vec![b'a'; ext as usize];
    f.write_all_at(&block, 0).unwrap();
    f.write_all_at(&block, big - ext).unwrap();
    let (e, x) = (ext as i64, big as i64);
    assert_eq!(
        seek(fd, -1, libc::SEEK_DATA),
        (-1, libc::ENXIO),
        "negative offset"
    );
    assert_eq!(seek(fd, -1, libc::SEEK_HOLE), (-1, libc::ENXIO));
    assert_eq!(seek(fd, 0, libc::SEEK_HOLE), (e, 0));
    assert_eq!(seek(fd, 1, libc::SEEK_DATA), (1, 0));
    assert_eq!(
        seek(fd, x / 2, libc::SEEK_DATA),
        (x - e, 0),
        "from the middle of the hole"
    );
    assert_eq!(seek(fd, x - 2 * e, libc::SEEK_DATA), (x - e, 0));
    assert_eq!(
        seek(fd, x - e, libc::SEEK_HOLE),
        (x, 0),
        "the end of file is a hole"
    );
    assert_eq!(seek(fd, x, libc::SEEK_DATA), (-1, libc::ENXIO));
    assert_eq!(seek(fd, x, libc::SEEK_HOLE), (-1, libc::ENXIO));
    // A hole punched into data that was written back, while more is written unsynced.
    f.set_len(0).unwrap();
    f.write_all_at(&vec![b'b'; 3 * ext as usize], 0).unwrap();
    f.sync_all().unwrap();
    f.write_all_at(b"cc", 0).unwrap();
    let r = sys::fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, e, e);
    assert_eq!(r, 0);
    assert_eq!(
        seek(fd, 0, libc::SEEK_HOLE),
        (e, 0),
        "the punched extent is a hole"
    );
    assert_eq!(seek(fd, e, libc::SEEK_DATA), (2 * e, 0));
    assert_eq!(seek(fd, 2 * e, libc::SEEK_HOLE), (3 * e, 0));
    let mut head = [0u8; 3];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(&head, b"ccb");
    let mut mid = vec![1u8; ext as usize];
    f.read_exact_at(&mut mid, ext).unwrap();
    assert!(mid.iter().all(|&b| b == 0));
    // A one-byte file whose byte only the kernel has seen.
    f.set_len(0).unwrap();
    f.write_all_at(b"X", 0).unwrap();
    assert_eq!(seek(fd, 0, libc::SEEK_DATA), (0, 0));
    assert_eq!(seek(fd, 0, libc::SEEK_HOLE), (1, 0));
    drop(f);
    m.unmount();
}

#[test]
fn rewinddir_lists_names_made_since_opendir_and_d_ino_is_st_ino() {
    let dir = scratch("readdir");
    let m = Mount::new(&dir, "");
    let d = m.path("d");
    fs::create_dir(&d).unwrap();
    for i in 0..50 {
        fs::write(d.join(format!("before-{i}")), b"x").unwrap();
    }
    // Opened, not read, then rewound (xfstests' rewinddir-test does just this).
    let unread = DirStream::open(&d);
    assert!(unread.is_some());
    let mut unread = unread.unwrap();
    fs::write(d.join("made-after-opendir"), b"").unwrap();
    unread.rewind();
    let names: Vec<Vec<u8>> = unread.read_all().into_iter().map(|(n, _)| n).collect();
    drop(unread);
    assert!(
        names.contains(&b"made-after-opendir".to_vec()),
        "a name made before the first readdir"
    );
    fs::remove_file(d.join("made-after-opendir")).unwrap();
    // Read, then names made, then rewound.
    let stream = DirStream::open(&d);
    assert!(stream.is_some());
    let mut stream = stream.unwrap();
    assert_eq!(stream.read_all().len(), 52);
    // Names made while the directory is open appear after a rewind.
    for i in 0..3000 {
        fs::write(d.join(format!("after-{i}")), b"").unwrap();
    }
    fs::hard_link(d.join("before-0"), d.join("link")).unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    stream.rewind();
    let all = stream.read_all();
    drop(stream);
    assert_eq!(all.len(), 3000 + 50 + 2 + 2, "every name, once");
    for (name, d_ino) in &all {
        let name = std::ffi::OsStr::from_bytes(name);
        let st = fs::symlink_metadata(d.join(name)).unwrap();
        assert_eq!(*d_ino, st.ino(), "d_ino of {name:?} is its st_ino");
    }
    let ino = |n: &str| fs::metadata(d.join(n)).unwrap().ino();
    assert_eq!(ino("before-0"), ino("link"), "hard links share a number");
    assert_eq!(ino(".."), fs::metadata(&m.mnt).unwrap().ino());
    // And through the same directory read again with std (getdents from offset 0).
    for e in fs::read_dir(d.join("sub")).unwrap() {
        let e = e.unwrap();
        assert_eq!(e.ino(), e.metadata().unwrap().ino());
    }
    m.unmount();
}

fn fallocate(f: &fs::File, mode: i32, off: u64, len: u64) -> i32 {
    let r = sys::fallocate(f, mode, off as i64, len as i64);
    if r == 0 {
        0
    } else {
        errno()
    }
}

#[test]
fn fallocate_of_more_than_the_free_space_is_enospc() {
    root_only();
    let dir = scratch("falloc-enospc");
    let _small = SmallFs::backing_of(&dir, 24);
    let m = Mount::new(&dir, "");
    let f = open_rw_new(&m.path("f"));
    let mib = 1u64 << 20;
    assert_eq!(
        fallocate(&f, 0, 0, 48 * mib),
        libc::ENOSPC,
        "twice the free space"
    );
    assert_eq!(f.metadata().unwrap().len(), 0, "and the size is unchanged");
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 48 * mib),
        libc::ENOSPC
    );
    assert_eq!(fallocate(&f, 0, 0, 4 * mib), 0, "what fits");
    assert_eq!(f.metadata().unwrap().len(), 4 * mib);
    // Over data already stored, nothing more is needed: no ENOSPC for it.
    let data: Vec<u8> = (0..8 * mib).map(|i| ((i * 2654435761) >> 13) as u8).collect();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&data, 0).unwrap();
    f.sync_all().unwrap();
    assert_eq!(fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 8 * mib), 0);
    drop(f);
    assert_eq!(fs::read(m.path("f")).unwrap(), data);
    m.unmount();
}

#[test]
fn posix_acls_are_enforced_default_acls_replace_the_umask_and_mode_changes_show_at_once() {
    root_only();
    let dir = scratch("acl");
    open_to_others(&dir);
    let m = Mount::new(&dir, "allow_other");
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    let (with, without) = (m.path("with"), m.path("without"));
    fs::create_dir(&with).unwrap();
    fs::create_dir(&without).unwrap();
    let make_named = |d: &Path, f: &str| {
        run(
            "sh",
            &[
                "-c",
                &format!("umask 077 && touch {0}/{f} && mkdir {0}/sub{f}", d.display()),
            ],
        );
    };
    // Made before the directory has a default ACL: the daemon remembers it has none, and
    // must forget that when one is set through the mount.
    make_named(&with, "before");
    assert_eq!(mode(&with.join("before")), 0o600);
    run(
        "setfacl",
        &["-d", "-m", "u::rwx,g::rwx,o::-", with.to_str().unwrap()],
    );
    let make = |d: &Path| make_named(d, "f");
    make(&with);
    make(&without);
    assert_eq!(mode(&with.join("f")), 0o660, "the default ACL, not the umask");
    assert_eq!(mode(&with.join("subf")), 0o770);
    assert!(
        text(&run("getfacl", &["-c", with.join("subf").to_str().unwrap()])).contains("default:group::rwx")
    );
    assert_eq!(mode(&without.join("f")), 0o600, "no default ACL: the umask");
    assert_eq!(mode(&without.join("subf")), 0o700);

    // The kernel enforces an access ACL.
    let secret = m.path("secret");
    fs::write(&secret, b"for tests only").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let s = secret.to_str().unwrap();
    assert!(!as_tests(&["cat", s]).status.success());
    run("setfacl", &["-m", "u:tests:r", s]);
    assert_eq!(
        mode(&secret),
        0o640,
        "the ACL mask shows as the group bits, at once"
    );
    let out = as_tests(&["cat", s]);
    assert_eq!(
        text(&out),
        "for tests only",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    run("setfacl", &["-m", "m::rwx", s]);
    assert_eq!(mode(&secret), 0o670);
    run("setfacl", &["-x", "u:tests", s]);
    assert!(!as_tests(&["cat", s]).status.success(), "taken away again");
    // chmod rewrites the mask, and stat shows it.
    run("setfacl", &["-m", "u:tests:rw", s]);
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(text(&run("getfacl", &["-c", s])).contains("mask::---"));
    assert!(!as_tests(&["cat", s]).status.success());
    m.unmount();
}

#[test]
fn another_users_write_truncate_fallocate_and_punch_clear_setuid_and_setgid_as_ext4_does() {
    root_only();
    let dir = scratch("killpriv");
    open_to_others(&dir);
    let m = Mount::new(&dir, "allow_other");
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    let f = m.path("f");
    let p = f.to_str().unwrap().to_string();
    let ops: [(&str, Vec<&str>); 4] = [
        ("write", vec!["sh", "-c", "printf x >> \"$0\"", &p]),
        ("truncate", vec!["truncate", "-s", "100", &p]),
        ("fallocate", vec!["fallocate", "-l", "1M", &p]),
        ("punch", vec!["fallocate", "-p", "-o", "0", "-l", "4096", &p]),
    ];
    // (mode before, after another user's change): setuid always goes; setgid goes with
    // group execute, or (2666) for a writer outside the file's group.
    let cases = [
        (0o4777, 0o777),
        (0o2666, 0o666),
        (0o2777, 0o777),
        (0o6777, 0o777),
        (0o0777, 0o777),
    ];
    for (op, cmd) in &ops {
        for (before, after) in cases {
            fs::write(&f, vec![7u8; 65536]).unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(before)).unwrap();
            let out = as_tests(cmd);
            assert!(
                out.status.success(),
                "{op}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(mode(&f), after, "{op} by another user on {before:o}");
        }
    }
    // Root (CAP_FSETID) keeps them.
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6777)).unwrap();
    run("sh", &["-c", "printf x >> \"$0\"", &p]);
    run("truncate", &["-s", "10", &p]);
    assert_eq!(mode(&f), 0o6777);
    // A member of the file's group keeps a group-non-executable setgid bit.
    let (_, gid) = tests_ids();
    std::os::unix::fs::chown(&f, None, Some(gid)).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o2666)).unwrap();
    assert!(as_tests(&["sh", "-c", "printf x >> \"$0\"", &p]).status.success());
    assert_eq!(mode(&f), 0o2666);
    m.unmount();
}

#[test]
fn unmount_then_mount_at_once_works_on_a_loaded_machine_and_a_live_mount_is_refused_at_once() {
    let dir = scratch("remount-fast");
    // Load both cores for the whole test.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let burners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            })
        })
        .collect();
    let mut m = Mount::new(&dir, "");
    for cycle in 0..12 {
        // Enough written that the daemon has something to write out after the unmount.
        for i in 0..200 {
            fs::write(
                m.path(&format!("c{cycle}-{i}")),
                format!("{cycle}:{i}").repeat(50),
            )
            .unwrap();
        }
        fs::write(m.path(&format!("big{cycle}")), vec![cycle as u8; 3 << 20]).unwrap();
        unmount(&m.mnt);
        let old = m.child.take().unwrap();
        // At once: the new daemon waits for the old one to finish instead of failing.
        m = Mount::new(&dir, "");
        let mut old = old;
        assert!(
            old.wait().unwrap().success(),
            "cycle {cycle}: the old daemon exits cleanly"
        );
        assert_eq!(fs::read(m.path(&format!("big{cycle}"))).unwrap().len(), 3 << 20);
    }
    // A backing directory that is mounted is refused at once, naming where.
    let start = Instant::now();
    let err = mount_again_elsewhere(&dir);
    assert!(
        err.contains(&format!("mounted at {}", m.mnt.canonicalize().unwrap().display())),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "no waiting for a live mount"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for b in burners {
        b.join().unwrap();
    }
    let n = fs::read_dir(&m.mnt).unwrap().count();
    assert_eq!(n, 12 * 201);
    m.unmount();
}
