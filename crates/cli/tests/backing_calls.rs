//! What a request costs on the backing filesystem, counted with strace on the daemon:
//! the system calls a request makes while its caller waits (issue 43: a SETATTR whose
//! change waits in memory read the backing file's attributes twice, a `statx` for the
//! decision and an `fstat` for the reply).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::strace::{count, Strace};
use common::*;

/// chmod of a file being written waits in memory (rule 7), and its SETATTR reads the
/// backing file's attributes once: one `statx` for the decision, whose result is the
/// reply (it did a `statx` and an `fstat`).
#[test]
fn a_setattr_that_waits_reads_the_backing_file_once() {
    require_root("strace attaches to the daemon");
    let dir = scratch("calls-setattr");
    let m = Mount::new(&dir, "");
    let f = open_rw_new(&m.path("f"));
    use std::io::Write;
    (&f).write_all(b"being written").unwrap();
    // A mode of its own first, neither of the two below: what follows does not depend on
    // the umask the file was made with.
    f.set_permissions(fs::Permissions::from_mode(0o600)).unwrap();
    const N: usize = 200;
    let out = dir.join("trace");
    let strace = Strace::attach(m.child.as_ref().unwrap().id(), "statx,newfstatat,fstat", &out);
    for i in 0..N {
        let mode = if i % 2 == 0 { 0o640 } else { 0o644 };
        f.set_permissions(fs::Permissions::from_mode(mode)).unwrap();
    }
    let trace = strace.finish(&out);
    let (statx, fstat) = (
        count(&trace, "statx"),
        count(&trace, "newfstatat") + count(&trace, "fstat"),
    );
    println!("FIGURES {N} chmods of a file being written: {statx} statx, {fstat} fstat on the backing");
    assert!(
        statx >= N,
        "each SETATTR decides with a statx: {statx} for {N}\n{trace}"
    );
    assert!(
        statx + fstat <= N + N / 10,
        "{N} chmods made {statx} statx and {fstat} fstat calls: one each is the most"
    );
    assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o644);
    drop(f);
    assert_eq!(
        fs::metadata(m.path("f")).unwrap().permissions().mode() & 0o777,
        0o644
    );
    m.unmount();
    assert_eq!(
        fs::metadata(dir.join("backing/f")).unwrap().permissions().mode() & 0o777,
        0o644,
        "on the backing file after the close"
    );
}

/// Lines of `trace` whose call failed with ENOENT (a LOOKUP miss that reached the backing).
fn enoent(trace: &str) -> usize {
    trace.lines().filter(|l| l.contains("= -1 ENOENT")).count()
}

/// LOOKUP misses in a directory the daemon made are answered from its known names: no
/// backing call (issue 44, point 4). In a directory it does not know (the root, not listed
/// since the mount), each miss is a failed `openat` on the backing — which shows that the
/// trace sees them.
#[test]
fn lookup_misses_in_a_known_directory_make_no_backing_call() {
    require_root("strace attaches to the daemon");
    let dir = scratch("calls-lookup");
    let m = Mount::new(&dir, "");
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/present"), b"x").unwrap();
    const N: usize = 300;
    let out = dir.join("trace");
    let strace = Strace::attach(m.child.as_ref().unwrap().id(), "openat,newfstatat,statx", &out);
    for i in 0..N {
        assert!(fs::symlink_metadata(m.path(&format!("d/missing{i}"))).is_err());
    }
    assert!(fs::symlink_metadata(m.path("d/present")).is_ok());
    let known = enoent(&strace.finish(&out));
    let out = dir.join("trace-root");
    let strace = Strace::attach(m.child.as_ref().unwrap().id(), "openat,newfstatat,statx", &out);
    for i in 0..N {
        assert!(fs::symlink_metadata(m.path(&format!("missing{i}"))).is_err());
    }
    let unknown = enoent(&strace.finish(&out));
    println!("FIGURES {N} LOOKUP misses: {known} failed backing calls in a known directory, {unknown} in an unknown one");
    assert!(
        unknown >= N,
        "the trace missed the unknown directory's misses: {unknown}"
    );
    assert!(
        known <= N / 30,
        "{known} failed backing calls for {N} misses in a known directory"
    );
}

/// `tar -x`'s way with a file — write, fchown to the owner it has, fchmod, futimens, close —
/// costs the backing file one `utimensat` at the close and no chown or chmod whose only
/// effect is the change time the `utimensat` moves anyway (on GlusterFS each was a locked
/// transaction on both bricks). A chmod that changes the mode is still made; owner, mode
/// and times are the ones asked, on the mount and on the backing after the unmount.
#[test]
fn a_file_extracted_the_tar_way_gets_its_times_and_no_call_that_changes_nothing() {
    require_root("strace attaches to the daemon");
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("calls-tar-way");
    let m = Mount::new(&dir, "");
    fs::create_dir(m.path("d")).unwrap();
    const N: usize = 100;
    let out = dir.join("trace");
    let strace = Strace::attach(
        m.child.as_ref().unwrap().id(),
        "chmod,fchmod,fchmodat,chown,fchown,fchownat,lchown,utimensat",
        &out,
    );
    let mtime = |i: usize| 1_600_000_000 + i as i64;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut modes = Vec::new();
    for i in 0..N {
        // Half keep the mode they were made with (0644 less the umask), half change it.
        let (made, mode) = extract_the_tar_way(
            &m.path(&format!("d/f{i}")),
            b"a small file's bytes",
            mtime(i),
            |made| {
                if i % 2 == 0 {
                    made
                } else if made == 0o600 {
                    0o640
                } else {
                    0o600
                }
            },
        );
        modes.push((mode, mode != made));
    }
    let check = |root: &Path, whence: &str| {
        for (i, (mode, _)) in modes.iter().enumerate() {
            let md = fs::metadata(root.join(format!("d/f{i}"))).unwrap();
            assert_eq!(md.mode() & 0o7777, *mode, "f{i}'s mode {whence}");
            assert_eq!((md.uid(), md.gid()), (0, 0), "f{i}'s owner {whence}");
            assert_eq!(md.mtime(), mtime(i), "f{i}'s mtime {whence}");
            assert!(md.ctime() >= before, "f{i}'s ctime {whence}");
        }
    };
    check(&m.path(""), "on the mount");
    // The last closes are written out on a thread of their own: the unmount finishes them
    // (the daemon's exit ends the trace).
    m.unmount();
    let trace = strace.finish(&out);
    let chmods = count(&trace, "chmod") + count(&trace, "fchmod") + count(&trace, "fchmodat");
    let chowns = count(&trace, "chown")
        + count(&trace, "fchown")
        + count(&trace, "fchownat")
        + count(&trace, "lchown");
    let utimens = count(&trace, "utimensat");
    println!(
        "FIGURES {N} files the tar way: {chmods} chmods, {chowns} chowns, {utimens} utimensat on the backing"
    );
    let changed = modes.iter().filter(|(_, c)| *c).count();
    assert_eq!(chowns, 0, "chowns to the owner the file has\n{trace}");
    assert_eq!(chmods, changed, "only the chmods that change the mode\n{trace}");
    assert!(utimens >= N, "{utimens} utimensat for {N} files\n{trace}");
    check(&dir.join("backing"), "on the backing");
}
