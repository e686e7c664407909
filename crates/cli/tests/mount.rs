//! Tests on a real FUSE mount of the built `squeezefs` binary. They need /dev/fuse and
//! fusermount3 (`.ci/run` and `scripts/test` install them) and fail, not skip, without.
//!
//! Each test mounts its own backing directory under a fresh temporary directory.

#![deny(unsafe_code)]

use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{is_mounted, scratch, sys, Mount};

/// renameat2(2) with `flags`; returns its result (0 or -1, errno set).
fn rename2(from: &Path, to: &Path, flags: libc::c_uint) -> libc::c_int {
    sys::renameat2(from, to, flags)
}

fn du_bytes(path: &Path) -> u64 {
    let mut total = 0;
    let m = fs::symlink_metadata(path).unwrap();
    total += m.blocks() * 512;
    if m.is_dir() {
        for e in fs::read_dir(path).unwrap() {
            total += du_bytes(&e.unwrap().path());
        }
    }
    total
}

/// Regular files from the machine, by kind, up to `budget` bytes each. Files under 2 KiB
/// are left out so the tree stays under ~12,000 files: the daemon holds one fd per inode
/// the kernel remembers, and some sandboxes cap open files at 20,000 (docs/ARCHITECTURE.md).
fn pick_files(roots: &[&str], budget: u64, out: &mut Vec<PathBuf>) -> u64 {
    let mut total = 0;
    let mut stack: Vec<PathBuf> = roots.iter().map(PathBuf::from).collect();
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else { continue };
        if m.is_dir() {
            let Ok(rd) = fs::read_dir(&p) else { continue };
            let mut kids: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            kids.sort();
            stack.extend(kids.into_iter().rev());
        } else if m.is_file() && m.len() >= 2048 && fs::File::open(&p).is_ok() {
            if total + m.len() > budget {
                continue;
            }
            total += m.len();
            out.push(p);
        }
    }
    total
}

/// ≥ 100 MB of varied real files: shared libraries, text (headers, docs), already
/// compressed files (gzip'ed man pages); copied in, remounted, compared byte for byte.
#[test]
fn real_tree_round_trips_through_remount() {
    for codec in ["zstd:1", "zstd:3"] {
        let dir = scratch(&format!("tree-{}", codec.replace(':', "")));
        let mut files = Vec::new();
        let mut logical = 0;
        logical += pick_files(&["/usr/lib/x86_64-linux-gnu", "/usr/lib"], 45 << 20, &mut files);
        logical += pick_files(
            &[
                "/usr/include",
                "/usr/share/doc",
                "/usr/share/perl5",
                "/usr/share/common-licenses",
            ],
            40 << 20,
            &mut files,
        );
        logical += pick_files(&["/usr/share/man", "/usr/share/info"], 25 << 20, &mut files);
        assert!(
            logical >= 100 << 20,
            "only {logical} bytes of test files found on this machine"
        );

        let m = Mount::new(&dir, &format!("compress={codec}"));
        let t = Instant::now();
        for (i, src) in files.iter().enumerate() {
            let rel = src.strip_prefix("/").unwrap();
            let dst = m.path("tree").join(rel);
            fs::create_dir_all(dst.parent().unwrap()).unwrap();
            fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {} #{i}: {e}", src.display()));
        }
        let st = Command::new("sync")
            .arg("-f")
            .arg(m.path("tree"))
            .status()
            .unwrap();
        assert!(st.success());
        let write_s = t.elapsed().as_secs_f64();
        m.unmount();

        let disk = du_bytes(&dir.join("backing"));
        let m = Mount::new(&dir, "");
        let t = Instant::now();
        let mut buf_a = Vec::new();
        let mut buf_b = Vec::new();
        for src in &files {
            let dst = m.path("tree").join(src.strip_prefix("/").unwrap());
            buf_a.clear();
            buf_b.clear();
            fs::File::open(src).unwrap().read_to_end(&mut buf_a).unwrap();
            fs::File::open(&dst).unwrap().read_to_end(&mut buf_b).unwrap();
            assert!(buf_a == buf_b, "{} differs after remount", dst.display());
            assert_eq!(
                fs::metadata(&dst).unwrap().len(),
                buf_a.len() as u64,
                "st_size is the logical size"
            );
        }
        let read_s = t.elapsed().as_secs_f64();
        let mb = logical as f64 / 1e6;
        println!(
            "FIGURES {codec}: {} files, {:.1} MB logical, {:.1} MB on disk, ratio {:.2}, copy-in {:.1} MB/s, read-back {:.1} MB/s",
            files.len(),
            mb,
            disk as f64 / 1e6,
            logical as f64 / disk as f64,
            mb / write_s,
            mb / read_s
        );
        assert!(
            disk < logical,
            "compression saved nothing: {disk} on disk for {logical}"
        );
        // `du` through the mount shows the compressed size too (st_blocks of the backing file).
        let through = du_bytes(&m.path("tree"));
        assert!(through < logical);
        m.unmount();
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn posix_surface_on_a_real_mount() {
    let dir = scratch("posix");
    // A plain file already in the backing directory is served as it is (adoption).
    fs::write(dir.join("backing/plain.txt"), b"I was here before squeezefs").unwrap();
    let m = Mount::new(&dir, "compress=zstd:3,extent_size=64K");
    assert_eq!(
        fs::read(m.path("plain.txt")).unwrap(),
        b"I was here before squeezefs"
    );

    // Deep paths work (relative to directory fds, never by building long paths).
    let mut deep = m.path("deep");
    for i in 0..60 {
        deep = deep.join(format!("level-{i:02}-{}", "x".repeat(50)));
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("leaf"), b"deep").unwrap();
    assert_eq!(fs::read(deep.join("leaf")).unwrap(), b"deep");

    // Sparse files stay sparse; SEEK_DATA/SEEK_HOLE see the holes.
    let sparse = m.path("sparse");
    {
        let f = fs::File::create(&sparse).unwrap();
        f.set_len(64 << 20).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"tail", (64 << 20) - 4).unwrap();
        f.write_all_at(&[7u8; 1000], 1 << 20).unwrap();
    }
    let backing_sparse = dir.join("backing/sparse");
    assert!(
        fs::metadata(&backing_sparse).unwrap().blocks() * 512 < 1 << 20,
        "holes are not stored"
    );
    {
        let f = fs::File::open(&sparse).unwrap();
        let data = sys::lseek(&f, 0, libc::SEEK_DATA);
        assert_eq!(data, 1 << 20, "first data at 1 MiB");
        let hole = sys::lseek(&f, 1 << 20, libc::SEEK_HOLE);
        assert_eq!(hole, (1 << 20) + (64 << 10));
        let mut buf = vec![0u8; 8];
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut buf, 5 << 20).unwrap();
        assert_eq!(buf, [0; 8]);
    }
    // fallocate PUNCH_HOLE.
    {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&sparse)
            .unwrap();
        let r = sys::fallocate(
            &f,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            1 << 20,
            4096,
        );
        assert_eq!(r, 0);
        use std::os::unix::fs::FileExt;
        let mut buf = vec![1u8; 1000];
        f.read_exact_at(&mut buf, 1 << 20).unwrap();
        assert_eq!(buf, vec![0u8; 1000]);
        assert_eq!(f.metadata().unwrap().len(), 64 << 20);
    }

    // st_blocks reports real disk use: text compresses.
    let text: Vec<u8> = b"compressible line of text number "
        .iter()
        .cycle()
        .take(4 << 20)
        .copied()
        .collect();
    fs::write(m.path("text"), &text).unwrap();
    let md = fs::metadata(m.path("text")).unwrap();
    assert_eq!(md.len(), 4 << 20);
    assert!(
        md.blocks() * 512 < (1 << 20),
        "st_blocks {} not compressed",
        md.blocks()
    );

    // Small files are inline: one block in the backing directory.
    fs::write(m.path("small"), b"hello").unwrap();
    assert!(fs::metadata(dir.join("backing/small")).unwrap().len() <= 4096);

    // Rename: plain, NOREPLACE, EXCHANGE.
    fs::write(m.path("a"), b"A").unwrap();
    fs::write(m.path("b"), b"B").unwrap();
    let r = rename2(&m.path("a"), &m.path("b"), libc::RENAME_NOREPLACE);
    assert_eq!(r, -1);
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EEXIST));
    let r = rename2(&m.path("a"), &m.path("b"), libc::RENAME_EXCHANGE);
    assert_eq!(r, 0);
    assert_eq!(fs::read(m.path("a")).unwrap(), b"B");
    assert_eq!(fs::read(m.path("b")).unwrap(), b"A");
    fs::rename(m.path("a"), m.path("deep/a-moved")).unwrap();
    assert_eq!(fs::read(m.path("deep/a-moved")).unwrap(), b"B");

    // Hard links share content; symlinks; fifos; sockets; xattrs.
    fs::hard_link(m.path("b"), m.path("b-link")).unwrap();
    fs::write(m.path("b"), b"changed through one name").unwrap();
    assert_eq!(fs::read(m.path("b-link")).unwrap(), b"changed through one name");
    assert_eq!(fs::metadata(m.path("b")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("b", m.path("sym")).unwrap();
    assert_eq!(fs::read_link(m.path("sym")).unwrap(), Path::new("b"));
    assert_eq!(fs::read(m.path("sym")).unwrap(), b"changed through one name");
    let r = sys::mkfifo(&m.path("fifo"), 0o644);
    assert_eq!(r, 0);
    assert!(fs::metadata(m.path("fifo")).unwrap().file_type().is_fifo());
    let sock = std::os::unix::net::UnixListener::bind(m.path("sock")).unwrap();
    assert!(fs::symlink_metadata(m.path("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    drop(sock);
    let name = CString::new("user.note").unwrap();
    let r = sys::setxattr(&m.path("b"), &name, &b"v1"[..2]);
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
    let mut buf = [0u8; 16];
    let n = sys::getxattr(&m.path("b"), &name, &mut buf[..16]);
    assert_eq!(&buf[..n as usize], b"v1");

    // Truncate and append.
    let mut f = fs::OpenOptions::new().append(true).open(m.path("text")).unwrap();
    f.write_all(b"appended").unwrap();
    drop(f);
    assert_eq!(fs::metadata(m.path("text")).unwrap().len(), (4 << 20) + 8);
    fs::OpenOptions::new()
        .write(true)
        .open(m.path("text"))
        .unwrap()
        .set_len(100)
        .unwrap();
    assert_eq!(fs::read(m.path("text")).unwrap(), &text[..100]);

    // statfs answers.
    let sv = nix::sys::statvfs::statvfs(&m.path(""));
    assert!(sv.is_ok(), "statvfs: {sv:?}");
    assert!(sv.unwrap().blocks() > 0);

    // Everything survives a remount.
    let sparse_len = fs::metadata(&sparse).unwrap().len();
    m.unmount();
    let m = Mount::new(&dir, "");
    assert_eq!(fs::read(deep.join("leaf")).unwrap(), b"deep");
    assert_eq!(fs::metadata(m.path("sparse")).unwrap().len(), sparse_len);
    assert_eq!(fs::read(m.path("b-link")).unwrap(), b"changed through one name");
    assert_eq!(fs::read(m.path("text")).unwrap(), &text[..100]);
    assert_eq!(
        fs::read(m.path("plain.txt")).unwrap(),
        b"I was here before squeezefs"
    );
    assert_eq!(fs::read(m.path("small")).unwrap(), b"hello");
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// A tree with many more files than the daemon may hold open (the kernel remembers every
/// inode it looked up): inode fds are cached and reopened by handle, never exhausted.
#[test]
fn more_files_than_the_daemon_may_open() {
    common::require_root(
        "this test needs root: reopening files by handle needs CAP_DAC_READ_SEARCH (CI runs as root)",
    );
    let dir = scratch("fdlimit");
    let m = Mount::spawn(&dir, "", Some(256));
    let content = |d: usize, f: usize| format!("dir {d} file {f}\n").repeat(1 + f % 700).into_bytes();
    for d in 0..4 {
        fs::create_dir(m.path(&format!("d{d}"))).unwrap();
        for f in 0..600 {
            fs::write(m.path(&format!("d{d}/f{f}")), content(d, f)).unwrap();
        }
    }
    // Everything looked up stays known to the kernel: 2,400 inodes against 256 fds.
    let held: Vec<fs::Metadata> = (0..4)
        .flat_map(|d| (0..600).map(move |f| (d, f)))
        .map(|(d, f)| fs::metadata(m.path(&format!("d{d}/f{f}"))).unwrap())
        .collect();
    assert_eq!(held.len(), 2400);
    for d in 0..4 {
        for f in (0..600).rev() {
            let p = m.path(&format!("d{d}/f{f}"));
            assert_eq!(fs::read(&p).unwrap(), content(d, f), "{}", p.display());
            fs::set_permissions(&p, fs::Permissions::from_mode(0o600 + (f as u32 % 2) * 0o40)).unwrap();
        }
    }
    fs::rename(m.path("d0/f1"), m.path("d3/moved")).unwrap();
    m.unmount();
    let m = Mount::new(&dir, "");
    assert_eq!(fs::read(m.path("d3/moved")).unwrap(), content(0, 1));
    assert_eq!(fs::metadata(m.path("d2/f7")).unwrap().mode() & 0o777, 0o640);
    assert_eq!(fs::read_dir(m.path("d1")).unwrap().count(), 600);
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// A time as (seconds, nanoseconds).
type Ts = (i64, i64);

/// A file's (atime, mtime) as `stat` shows them, to the nanosecond.
fn times_of(p: &Path) -> (Ts, Ts) {
    let md = fs::symlink_metadata(p).unwrap();
    ((md.atime(), md.atime_nsec()), (md.mtime(), md.mtime_nsec()))
}

/// `utimensat` by path, as `tar -x` sets a file's times once it has closed it.
fn set_times_by_path(p: &Path, atime: Ts, mtime: Ts) {
    use nix::sys::stat::{utimensat, UtimensatFlags};
    use nix::sys::time::TimeSpec;
    let ts = |(s, n): Ts| TimeSpec::new(s, n);
    utimensat(None, p, &ts(atime), &ts(mtime), UtimensatFlags::NoFollowSymlink).unwrap();
}

/// A file made and given its times the way `how` says, in `dir` of a mount: written
/// (`size` bytes), then its times set by path once closed (`tar -x`), or on its fd before
/// the close (`cp -p`); returns the times set.
fn make_with_times(dir: &Path, size: usize, seed: u64, by_fd: bool) -> (PathBuf, (Ts, Ts)) {
    let p = dir.join(format!("{}-{size}", if by_fd { "fd" } else { "path" }));
    let data = squeezefs_testdata::text_salted(size, seed as u8);
    // Distinct times per file, with nanoseconds, long ago (atime after mtime, like tar's).
    let mtime = (1_000_000_000 + seed as i64 * 1000, 123_456_789 + seed as i64);
    let atime = (mtime.0 + 500, 987_654_321 - seed as i64);
    let mut f = fs::File::create(&p).unwrap();
    f.write_all(&data).unwrap();
    if by_fd {
        let t = |(s, n): Ts| std::time::UNIX_EPOCH + Duration::new(s as u64, n as u32);
        f.set_times(fs::FileTimes::new().set_accessed(t(atime)).set_modified(t(mtime)))
            .unwrap();
        drop(f);
    } else {
        drop(f);
        set_times_by_path(&p, atime, mtime);
    }
    (p, (atime, mtime))
}

/// Times set explicitly stay exactly as set whatever the daemon writes to the file
/// afterwards (the write-back at the last close, the group commit's superblock or location
/// record, the settle, the flush at unmount), through an unmount (the backing files hold
/// them) and a remount, with and without packing,
/// for empty, small, one-extent and several-extent files; a file written again afterwards
/// gets a new mtime, and one written with no time set keeps the mtime `stat` showed at its
/// close. (`tar -x` lost them: `tar -d` said "Mod time differs" after a remount.)
#[test]
fn times_set_explicitly_survive_the_daemons_write_outs_and_a_remount() {
    let sizes = [0usize, 100, 5000, 131072, 200_000, 3 * 131072 + 7];
    // Every time found wrong, of both mounts, so a failure shows the whole picture.
    let mut wrong = Vec::new();
    for opts in ["compress=zstd:1", "compress=zstd:1,pack"] {
        let dir = scratch(&format!("times-{}", opts.len()));
        let m = Mount::new(&dir, opts);
        let mut expected = Vec::new();
        let mut seed = 1;
        // `waited`: left for the group commit (2 s) to commit and settle while mounted;
        // `at_unmount`: still waiting when the mount goes.
        for sub in ["waited", "at_unmount"] {
            let d = m.path(sub);
            fs::create_dir(&d).unwrap();
            for &size in &sizes {
                for by_fd in [false, true] {
                    expected.push(make_with_times(&d, size, seed, by_fd));
                    seed += 1;
                }
            }
            if sub == "waited" {
                std::thread::sleep(Duration::from_secs(4));
            }
        }
        // Times set, then the data written again: the write moves mtime (to now).
        let again = m.path("written-again");
        fs::write(&again, squeezefs_testdata::text_salted(200_000, 99)).unwrap();
        set_times_by_path(&again, (1_200_000_000, 5), (1_100_000_000, 7));
        let before_write = std::time::SystemTime::now();
        fs::OpenOptions::new()
            .append(true)
            .open(&again)
            .unwrap()
            .write_all(b"more")
            .unwrap();
        // No time set: the mtime of the write, as `stat` showed it after the close.
        let plain = m.path("plain");
        fs::write(&plain, squeezefs_testdata::text_salted(200_000, 98)).unwrap();
        let plain_mtime = times_of(&plain).1;
        let mut check = |when: &str, p: &Path, got, want| {
            if got != want {
                wrong.push(format!("{opts}: {} {when}: {got:?}, set {want:?}", p.display()));
            }
        };
        for (p, want) in &expected {
            check("before the unmount", p, times_of(p), *want);
        }
        m.unmount();
        // What the unmount left on the backing files (atime too: nothing has read them).
        let backing = |p: &Path| dir.join("backing").join(p.strip_prefix(dir.join("mnt")).unwrap());
        for (p, want) in &expected {
            check("after the unmount", p, times_of(&backing(p)), *want);
        }

        let m = Mount::new(&dir, opts);
        for (p, (_, mtime)) in &expected {
            check(
                "after a remount (mtime)",
                p,
                ((0, 0), times_of(p).1),
                ((0, 0), *mtime),
            );
            let size = p
                .to_string_lossy()
                .rsplit('-')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap();
            assert_eq!(fs::metadata(p).unwrap().len(), size, "{}", p.display());
        }
        check(
            "after a remount (mtime)",
            &plain,
            ((0, 0), times_of(&plain).1),
            ((0, 0), plain_mtime),
        );
        let written = fs::metadata(&again).unwrap().modified().unwrap();
        assert!(
            written >= before_write - Duration::from_secs(1),
            "{opts}: a write after the times were set moves mtime ({written:?} < {before_write:?})"
        );
        m.unmount();
    }
    assert!(
        wrong.is_empty(),
        "{} times wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Times set on a file still open for writing (as `cp -p` and the kernel's own mtime flush
/// do) wait in memory (rule 7): `stat` shows them at once with a change time of that
/// moment, an fsync puts them on the backing file before it syncs, and the last close
/// puts later ones there too; a write after them still moves mtime.
#[test]
fn times_set_on_a_file_being_written_show_at_once_and_reach_the_backing_file_at_fsync_and_close() {
    let dir = scratch("times-open");
    let m = Mount::new(&dir, "compress=zstd:1");
    let p = m.path("f");
    let backing = dir.join("backing").join("f");
    let t = |(s, n): Ts| std::time::UNIX_EPOCH + Duration::new(s as u64, n as u32);
    let mut f = fs::File::create(&p).unwrap();
    f.write_all(&squeezefs_testdata::text_salted(300_000, 3)).unwrap();
    let before = std::time::SystemTime::now() - Duration::from_secs(1);
    let (a1, m1) = ((1_300_000_000, 11), (1_200_000_000, 22));
    f.set_times(fs::FileTimes::new().set_accessed(t(a1)).set_modified(t(m1)))
        .unwrap();
    assert_eq!(times_of(&p), (a1, m1), "stat shows the times at once");
    let ctime = fs::metadata(&p).unwrap().ctime();
    assert!(
        ctime >= before.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64,
        "the change time moved: {ctime}"
    );
    f.sync_all().unwrap();
    assert_eq!(times_of(&backing).1, m1, "an fsync puts them on the backing file");
    let (a2, m2) = ((1_310_000_000, 33), (1_210_000_000, 44));
    f.set_times(fs::FileTimes::new().set_accessed(t(a2)).set_modified(t(m2)))
        .unwrap();
    drop(f);
    // The last close (RELEASE, not waited for) puts them there.
    let start = std::time::Instant::now();
    while times_of(&backing).1 != m2 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(times_of(&backing).1, m2);
    assert_eq!(times_of(&p), (a2, m2));
    // Times set, then a write: mtime moves to the write's.
    let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.set_times(fs::FileTimes::new().set_modified(t(m1))).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let before_write = std::time::SystemTime::now() - Duration::from_millis(10);
    f.write_all(b"more").unwrap();
    drop(f);
    m.unmount();
    let m = Mount::new(&dir, "compress=zstd:1");
    let written = fs::metadata(m.path("f")).unwrap().modified().unwrap();
    assert!(written >= before_write, "{written:?} < {before_write:?}");
    m.unmount();
}

/// Owner and mode set on a file still open for writing (`tar -x` as root: fchown to the
/// owner it has, fchmod, before its close) wait in memory with its times (rule 7): `stat`
/// shows them at once with a change time of that moment; an fsync puts them on the backing
/// file, the last close too; what cannot wait is done at once and in order — a chown to
/// another owner, setuid bits, and an ACL set after a mode (it must see the mode first).
#[test]
fn owner_and_mode_set_on_a_file_being_written_show_at_once_and_reach_the_backing_file_in_order() {
    use std::os::unix::fs::fchown;
    common::require_root("chown to another owner");
    let dir = scratch("meta-open");
    let m = Mount::new(&dir, "compress=zstd:1");
    let mode_of = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let owner_of = |p: &Path| {
        let md = fs::symlink_metadata(p).unwrap();
        (md.uid(), md.gid())
    };
    let until = |what: &str, ok: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !ok() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let p = m.path("f");
    let backing = dir.join("backing").join("f");
    let f = common::open_rw_new(&p);
    (&f).write_all(&squeezefs_testdata::text_salted(50_000, 5))
        .unwrap();
    let ctime0 = fs::metadata(&p).unwrap().ctime_nsec() + fs::metadata(&p).unwrap().ctime() * 1_000_000_000;
    std::thread::sleep(Duration::from_millis(20));
    // tar's pattern: the owner it already has, then the mode.
    fchown(&f, Some(0), Some(0)).unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o751)).unwrap();
    assert_eq!(mode_of(&p), 0o751, "stat shows the mode at once");
    assert_eq!(owner_of(&p), (0, 0));
    // The caller did not wait for the backing filesystem: the kernel wrote the data back
    // before the SETATTR (writeback cache), and nothing since calls on the backing file.
    assert_ne!(mode_of(&backing), 0o751, "the mode waits in memory");
    let md = fs::metadata(&p).unwrap();
    assert!(
        md.ctime() * 1_000_000_000 + md.ctime_nsec() > ctime0,
        "the change time moved"
    );
    f.sync_all().unwrap();
    assert_eq!(
        mode_of(&backing),
        0o751,
        "an fsync puts the mode on the backing file"
    );
    // Later ones reach it at the last close (RELEASE, not waited for).
    f.set_permissions(fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(mode_of(&p), 0o640);
    drop(f);
    until("the last close puts the mode on the backing file", &|| {
        mode_of(&backing) == 0o640
    });
    assert_eq!(mode_of(&p), 0o640);

    // What cannot wait is done at once, after what waits.
    let q = m.path("g");
    let backing_q = dir.join("backing").join("g");
    let f = common::open_rw_new(&q);
    (&f).write_all(b"data").unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o600)).unwrap();
    // Another owner: may be refused, clears setuid/setgid bits: done now.
    fchown(&f, Some(65534), Some(65534)).unwrap();
    assert_eq!(
        owner_of(&backing_q),
        (65534, 65534),
        "a chown to another owner is done at once"
    );
    assert_eq!(mode_of(&backing_q), 0o600, "the mode set before it went first");
    // Setuid bits: done now.
    f.set_permissions(fs::Permissions::from_mode(0o4755)).unwrap();
    assert_eq!(mode_of(&backing_q), 0o4755, "setuid is set at once");
    assert_eq!(mode_of(&q), 0o4755);
    // A mode waiting, then an access ACL: the ACL sees the mode (mask from the group bits
    // the ACL entry needs, owner bits from the mode).
    f.set_permissions(fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new("setfacl")
        .args(["-m", "u:65534:r"])
        .arg(&q)
        .output()
        .expect("setfacl (package acl)");
    assert!(
        out.status.success(),
        "setfacl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode_of(&q), 0o640, "mode after the ACL (mask r)");
    drop(f);
    until("the backing file's mode", &|| mode_of(&backing_q) == 0o640);
    let acl = Command::new("getfacl").args(["-cpn"]).arg(&q).output().unwrap();
    let acl = String::from_utf8_lossy(&acl.stdout).to_string();
    assert!(
        acl.contains("user:65534:r--") && acl.contains("user::rw-"),
        "{acl}"
    );
    m.unmount();
    let m = Mount::new(&dir, "compress=zstd:1");
    assert_eq!(mode_of(&m.path("f")), 0o640);
    assert_eq!(mode_of(&m.path("g")), 0o640);
    assert_eq!(owner_of(&m.path("g")), (65534, 65534));
    m.unmount();
}

#[test]
fn small_files_rewritten_through_the_mount_take_one_block() {
    let dir = scratch("one-block");
    // Containers (a packed file's backing file holds no block at all: `packing.rs`).
    let m = Mount::new(&dir, "compress=zstd:3,nopack");
    let names: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    for round in 0..3 {
        for (i, n) in names.iter().enumerate() {
            // Closed without fsync: committed by the group commit.
            fs::write(m.path(n), format!("round {round} of file {i}\n").repeat(20 + i)).unwrap();
        }
        // Opening the statistics file commits every closed file now.
        fs::read(m.path(".squeezefs-stats")).unwrap();
    }
    // The kernel sends RELEASE without waiting for it, so the last close may still be
    // on its way when the statistics file is opened: a few more commits are allowed.
    let blocks = |n: &str| fs::metadata(dir.join("backing").join(n)).unwrap().blocks() * 512;
    for _ in 0..20 {
        if names.iter().all(|n| blocks(n) == 4096) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        fs::read(m.path(".squeezefs-stats")).unwrap();
    }
    for (i, n) in names.iter().enumerate() {
        assert_eq!(blocks(n), 4096, "{n}: both superblock copies kept");
        assert_eq!(
            fs::read(m.path(n)).unwrap(),
            format!("round 2 of file {i}\n").repeat(20 + i).into_bytes()
        );
    }
    m.unmount();
    let m = Mount::new(&dir, "");
    assert_eq!(
        fs::read(m.path("f7")).unwrap(),
        "round 2 of file 7\n".repeat(27).into_bytes()
    );
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// Big files written through a mount, several at once and one rewritten while written:
/// their batches of covered extents are compressed after the WRITEs are answered
/// (`container/batch.rs`), the copies are used (the statistics file counts them), and every
/// file reads back as written, before and after a remount, with `check` clean.
#[test]
fn big_files_compressed_after_their_writes_are_answered_read_back_as_written() {
    let dir = scratch("batches-after");
    let m = Mount::new(&dir, "compress=zstd:1");
    let text: Vec<u8> = (0..(24u32 << 20))
        .map(|i| {
            b"the batch is compressed after the write is answered, "[(i % 53) as usize]
                ^ ((i >> 20) as u8 & 1)
        })
        .collect();
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|k| {
            let mut d = text[..(9 + 5 * k) << 20].to_vec();
            d[k * 1000] = b'#';
            (format!("big{k}"), d)
        })
        .collect();
    std::thread::scope(|s| {
        for (name, data) in &files {
            let p = m.path(name);
            s.spawn(move || fs::write(p, data).unwrap());
        }
    });
    // One file's last 4 MiB overwritten right after its writer closed it, while its last
    // batch may still be compressing.
    let mut again = files[3].1.clone();
    {
        use std::io::{Seek, SeekFrom};
        let at = again.len() - (4 << 20);
        let mut f = fs::OpenOptions::new().write(true).open(m.path("big3")).unwrap();
        let patch = vec![b'~'; 4 << 20];
        f.seek(SeekFrom::Start(at as u64)).unwrap();
        f.write_all(&patch).unwrap();
        again[at..].copy_from_slice(&patch);
    }
    let stats: serde_json::Value =
        serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap();
    let used = stats["batch_copies_used"].as_u64().unwrap();
    assert!(used >= 8, "batches compressed without the lock were used: {used}");
    let expect = |name: &str| -> &Vec<u8> {
        if name == "big3" {
            &again
        } else {
            &files.iter().find(|f| f.0 == name).unwrap().1
        }
    };
    // From the daemon, not the kernel's page cache.
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    for (name, _) in &files {
        assert!(
            fs::read(m.path(name)).unwrap() == *expect(name),
            "{name} before the remount"
        );
    }
    m.unmount();
    common::check_clean(&dir.join("backing"), "after batches");
    let m = Mount::new(&dir, "");
    for (name, _) in &files {
        assert!(
            fs::read(m.path(name)).unwrap() == *expect(name),
            "{name} after the remount"
        );
    }
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// An inline file (its whole content in its superblock) overwritten by one whole-extent
/// write and fsynced keeps the new bytes across a remount. Before 7155884 the covered
/// extent went out at once and the inline superblock stayed current: the old bytes came
/// back (reproduced through a mount with `dd bs=128k conv=notrunc,fsync`).
#[test]
fn an_inline_file_overwritten_by_one_whole_extent_keeps_the_new_bytes() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = scratch("inline-overwrite");
    let m = Mount::new(&dir, "compress=zstd:3,nopack");
    fs::write(m.path("f"), vec![b'a'; 128 << 10]).unwrap();
    let f = fs::File::open(m.path("f")).unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs::read(m.path(".squeezefs-stats")).unwrap(); // (committed: an inline superblock)
    let new: Vec<u8> = (0..(128u32 << 10)).map(|i| (i % 251) as u8).collect();
    let mut f = fs::OpenOptions::new().write(true).open(m.path("f")).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(&new).unwrap();
    f.sync_all().unwrap();
    drop(f);
    m.unmount();
    let m = Mount::new(&dir, "");
    assert!(fs::read(m.path("f")).unwrap() == new, "the fsynced bytes");
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// Whether the first page of `path` is in the page cache (mincore).
fn first_page_cached(path: &Path) -> bool {
    let f = fs::File::open(path).unwrap();
    sys::first_page_cached(&f)
}

/// Opening a directory starts reading its files ahead (cold trees are latency-bound).
#[test]
fn opening_a_directory_reads_its_files_ahead() {
    common::require_root("this test needs root to drop the page cache");
    let dir = scratch("prefetch");
    // Containers: a packed file's bytes come in with its pack block (one read for dozens
    // of files), not from its backing file.
    let m = Mount::new(&dir, "nopack");
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..50 {
        fs::write(m.path(&format!("d/f{i}")), format!("file {i} ").repeat(3000)).unwrap();
    }
    m.unmount();
    nix::unistd::sync();
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let backing = dir.join("backing/d");
    let cached = |n: usize| {
        (0..n)
            .filter(|i| first_page_cached(&backing.join(format!("f{i}"))))
            .count()
    };
    assert!(cached(50) < 10, "caches were dropped");
    let m = Mount::new(&dir, "nopack");
    let names = fs::read_dir(m.path("d")).unwrap().count();
    assert_eq!(names, 50);
    let start = Instant::now();
    while cached(50) < 50 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cached(50), 50, "files read ahead after opendir");
    for i in 0..50 {
        assert_eq!(
            fs::read(m.path(&format!("d/f{i}"))).unwrap(),
            format!("file {i} ").repeat(3000).into_bytes()
        );
    }
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_mount_options_are_refused_with_a_clear_message() {
    let dir = scratch("badopts");
    let out = Command::new(env!("CARGO_BIN_EXE_squeezefs"))
        .args([
            "mount",
            dir.join("backing").to_str().unwrap(),
            dir.join("mnt").to_str().unwrap(),
            "-o",
            "compress=zstd:42",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("zstd:1 … zstd:19"), "{err}");
    assert!(!is_mounted(&dir.join("mnt")));
    fs::remove_dir_all(&dir).unwrap();
}

/// fsx (crates.io) with every operation enabled (tests/fsx.toml: truncate, punch hole,
/// fallocate, mmap, copy_file_range, close/open, fsync), a million operations in all.
#[test]
fn fsx_a_million_operations_over_four_seeds() {
    // SQUEEZEFS_FSX_OPS (default 1,000,000) operations in total, split over four seeds run
    // at once on four files of one mount.
    let total: u64 = std::env::var("SQUEEZEFS_FSX_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = scratch("fsx");
    let m = Mount::new(&dir, "");
    let started = Instant::now();
    common::run_fsx(&m.mnt, &dir, total, &[20261121, 20261122, 20261123, 20261124]);
    eprintln!(
        "fsx: {total} operations over 4 seeds in {:.0} s, all A-OK",
        started.elapsed().as_secs_f64()
    );
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// pjdfstest (crates.io), all of it, as root with allow_other (it switches users).
/// Expected failures, if any, are listed with their reasons in tests/pjdfstest.toml.
#[test]
fn pjdfstest_posix_suite() {
    common::require_root("pjdfstest needs root (it switches users); run the suite as root");
    let dir = scratch("pjd");
    let m = Mount::new(&dir, "allow_other");
    let root = m.path("pjd");
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/pjdfstest.toml");
    let out = Command::new("pjdfstest")
        .arg("-c")
        .arg(&cfg)
        .arg("-p")
        .arg(&root)
        .output()
        .expect("pjdfstest is missing: cargo install pjdfstest (scripts/test does)");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let summary = text
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or("no summary");
    println!("pjdfstest {summary}");
    assert!(
        out.status.success() && summary.contains(" 0 failed"),
        "pjdfstest failed:\n{text}"
    );
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}

/// The same without root, as users without CAP_DAC_READ_SEARCH have it (no reopening by
/// handle): a user extracts with tar a tree of more than ten times the daemon's open-file
/// limit (read-only and mode-0 files and a symlink `tar` makes through a placeholder
/// included: their data must survive, though the mode denies the daemon its own files),
/// reads it all back, renames directories and removes the other name of a hard link
/// while the kernel still knows every inode (inodes are reopened by name, `inode.rs`), and
/// renames race with creates inside the renamed directories.
#[test]
fn a_user_without_file_handles_extracts_a_tree_ten_times_the_fd_limit() {
    common::require_root("prepares the user `tests` and its mount (CI runs as root)");
    const LIMIT: u64 = 256;
    let dir = scratch("fdlimit-user");
    common::open_to_others(&dir);
    // The source tree and its tar, readable by the user.
    let src = dir.join("src");
    let content = |d: usize, f: usize| format!("dir {d} file {f}\n").repeat(1 + f % 300);
    for d in 0..8 {
        fs::create_dir_all(src.join(format!("tree/d{d}"))).unwrap();
        for f in 0..400 {
            fs::write(src.join(format!("tree/d{d}/f{f}")), content(d, f)).unwrap();
        }
    }
    // Modes that deny the owner (a read-only file like git's objects; mode 0), and a
    // symlink `tar` extracts through a mode-0 placeholder file (its target has "..").
    use std::os::unix::fs::PermissionsExt;
    fs::write(src.join("tree/d7/ro"), b"read-only data").unwrap();
    fs::set_permissions(src.join("tree/d7/ro"), fs::Permissions::from_mode(0o444)).unwrap();
    fs::write(src.join("tree/d7/none"), b"no access").unwrap();
    fs::set_permissions(src.join("tree/d7/none"), fs::Permissions::from_mode(0o000)).unwrap();
    std::os::unix::fs::symlink("../d6/f1", src.join("tree/d7/up")).unwrap();
    let tar = dir.join("tree.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&src)
        .arg("-cf")
        .arg(&tar)
        .arg("tree")
        .status()
        .unwrap();
    assert!(st.success());
    for p in [&src, &tar] {
        assert!(Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(p)
            .status()
            .unwrap()
            .success());
    }
    let m = Mount::as_user_limited(&dir, "", "tests", Some(LIMIT));
    let log = fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert!(
        log.contains("reopened by name"),
        "the test must run without file handles: {log}"
    );
    let mnt = m.mnt.display().to_string();
    let sh = |script: String| {
        let out = common::as_tests(&["sh", "-c", &script]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{script}: {text}");
        text
    };
    // 3,202 files and 9 directories against 256 fds, all of them known to the kernel.
    sh(format!(
        "tar -C {mnt} -xf {} && diff -r -x none {}/tree {mnt}/tree && \
         test \"$(stat -c %a:%s {mnt}/tree/d7/none)\" = 0:9 && \
         test \"$(readlink {mnt}/tree/d7/up)\" = ../d6/f1",
        tar.display(),
        src.display()
    ));
    let n = sh(format!("find {mnt}/tree -type f | wc -l"));
    assert_eq!(n.trim(), "3202");
    // Renames move inodes the kernel holds: they are reopened under their new names.
    sh(format!(
        "mv {mnt}/tree/d0 {mnt}/tree/d0x && mv {mnt}/tree/d1/f7 {mnt}/tree/d2/moved && \
         ln {mnt}/tree/d3/f5 {mnt}/tree/d3/link && rm {mnt}/tree/d3/link && \
         cat {mnt}/tree/d4/* {mnt}/tree/d5/* {mnt}/tree/d6/* >/dev/null && \
         cmp {mnt}/tree/d3/f5 {src}/tree/d3/f5 && cmp {mnt}/tree/d0x/f399 {src}/tree/d0/f399 && \
         cmp {mnt}/tree/d2/moved {src}/tree/d1/f7 && chmod 600 {mnt}/tree/d0x/f3",
        src = src.display()
    ));
    // A name replaced by a rename, again and again, while another process stats both names.
    sh(format!(
        "mkdir {mnt}/r; \
         (i=0; while [ $i -lt 200 ]; do echo $i > {mnt}/r/x; mv {mnt}/r/x {mnt}/r/y; \
            cat {mnt}/r/y >/dev/null || exit 1; i=$((i+1)); done) & \
         j=0; while [ $j -lt 400 ]; do stat {mnt}/r/x {mnt}/r/y >/dev/null 2>&1; j=$((j+1)); done; \
         wait $! && test \"$(cat {mnt}/r/y)\" = 199"
    ));
    // Renames racing with creates inside the renamed directories.
    let made = sh(format!(
        "mkdir {mnt}/a {mnt}/b; \
         (i=0; while [ $i -lt 400 ]; do mv {mnt}/a {mnt}/t; mv {mnt}/b {mnt}/a; mv {mnt}/t {mnt}/b; i=$((i+1)); done) & \
         n=0; i=0; while [ $i -lt 500 ]; do for d in a b; do \
           if {{ echo x > {mnt}/$d/f$i-$d; }} 2>/dev/null; then n=$((n+1)); fi; done; i=$((i+1)); done; \
         wait; echo $n"
    ));
    let made: usize = made
        .trim()
        .lines()
        .last()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|_| panic!("{made}"));
    assert!(made > 0);
    m.unmount();
    let backing = dir.join("backing");
    // The unmount's pack round read every record, the mode-0 file's too (it stopped there
    // with "Permission denied" before), and the user's own `check` reads that file.
    let log = fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert!(!log.contains("not reclaimed"), "{log}");
    let b = backing.display().to_string();
    let bin = env!("CARGO_BIN_EXE_squeezefs");
    for args in [
        &[bin, "check", &b][..],
        &[bin, "compress", &b, "--codec", "zstd:5"],
    ] {
        let out = common::as_tests(args);
        assert!(
            out.status.success(),
            "{args:?} as the user: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let inside: usize = ["a", "b", "t"]
        .iter()
        .filter_map(|d| fs::read_dir(backing.join(d)).ok())
        .map(|rd| rd.count())
        .sum();
    assert_eq!(inside, made, "every file created landed in a renamed directory");
    common::check_clean(&backing, "after the non-root tree");
    let m = Mount::new(&dir, "");
    assert_eq!(
        fs::read_to_string(m.path("tree/d0x/f399")).unwrap(),
        content(0, 399)
    );
    assert_eq!(fs::metadata(m.path("tree/d0x/f3")).unwrap().mode() & 0o777, 0o600);
    assert_eq!(fs::read_dir(m.path("tree/d1")).unwrap().count(), 399);
    assert_eq!(fs::read(m.path("tree/d7/ro")).unwrap(), b"read-only data");
    assert_eq!(fs::read(m.path("tree/d7/none")).unwrap(), b"no access");
    assert_eq!(fs::metadata(m.path("tree/d7/ro")).unwrap().mode() & 0o777, 0o444);
    assert_eq!(fs::metadata(m.path("tree/d7/none")).unwrap().mode() & 0o777, 0);
    m.unmount();
    fs::remove_dir_all(&dir).unwrap();
}
