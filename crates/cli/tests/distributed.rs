//! A backing directory on a distributed filesystem (issue 16): GlusterFS, a replica-2 volume
//! served by a glusterd in a network namespace this test makes (glusterd refuses loopback
//! addresses; all traffic stays on that namespace's `lo`), mounted by two FUSE clients as
//! two machines would. Needs root and Debian's glusterfs-server and glusterfs-client
//! (scripts/test-deps installs them; the test fails, not skips, without them).

#![deny(unsafe_code)]

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::gluster::Gluster;
use common::{extract_the_tar_way, scratch, Mount};

/// `squeezefs mount BACKING MNT` in the foreground: the mount, or what the daemon said
/// when it exited (a failing test unmounts and ends it on drop, so it holds no files on
/// the volume).
fn mount(backing: &Path, mnt: &Path, log: &Path) -> Result<Mount, String> {
    Mount::try_spawn_at(backing, mnt, log)
}

/// One squeezefs per backing directory across the clients of a distributed filesystem: a
/// second machine's mount of the same directory is refused with a message saying so; once
/// the first unmounts, or its daemon is killed, the other may mount, and the data is there.
#[test]
fn a_backing_directory_on_glusterfs_is_served_by_one_client_at_a_time() {
    let dir = scratch("gluster-lock");
    let g = Gluster::start(&dir.join("gl"));
    let (b1, b2) = (g.client(1).join("data"), g.client(2).join("data"));
    fs::create_dir(&b1).unwrap();
    let (m1, m2) = (dir.join("m1"), dir.join("m2"));
    let first = mount(&b1, &m1, &dir.join("m1.log")).expect("the first client mounts");
    fs::write(m1.join("f"), b"written through client 1").unwrap();
    match mount(&b2, &m2, &dir.join("m2.log")) {
        Ok(d) => {
            d.unmount();
            panic!("a second client mounted the same backing directory");
        }
        Err(said) => assert!(
            said.contains("another machine"),
            "the refusal does not say why: {said}"
        ),
    }
    first.unmount();
    // The first unmounted: the second may mount, and sees the data.
    let second = mount(&b2, &m2, &dir.join("m2.log")).expect("mounts once the first is gone");
    assert_eq!(fs::read(m2.join("f")).unwrap(), b"written through client 1");
    fs::write(m2.join("g"), b"and client 2").unwrap();
    // Past the group commit; then a holder killed with SIGKILL releases the lock by itself.
    std::thread::sleep(Duration::from_secs(3));
    second.kill();
    let first = mount(&b1, &m1, &dir.join("m1.log")).expect("mounts after the other daemon died");
    assert_eq!(fs::read(m1.join("f")).unwrap(), b"written through client 1");
    assert_eq!(fs::read(m1.join("g")).unwrap(), b"and client 2");
    first.unmount();
    common::check_clean(&b1, "the backing directory on GlusterFS");
    drop(g);
    let _ = fs::remove_dir_all(&dir);
}

/// A squeezefs mount whose backing directory is on GlusterFS: a real tree round-trips
/// through a remount (and reads the same through the other client's view of the volume
/// after the first unmounts), fsx runs with every operation, and `check` is clean.
#[test]
fn a_tree_and_fsx_on_a_glusterfs_backing() {
    let dir = scratch("gluster-tree");
    let g = Gluster::start(&dir.join("gl"));
    let (b1, b2) = (g.client(1).join("data"), g.client(2).join("data"));
    fs::create_dir(&b1).unwrap();
    let m = dir.join("m");
    let d = mount(&b1, &m, &dir.join("m.log")).expect("mounts");
    let tree = common::real_tree(&m.join("tree"));
    assert!(tree.len() > 50);
    d.unmount();
    // Through the other client: the same bytes.
    let d = mount(&b2, &m, &dir.join("m.log")).expect("mounts through the other client");
    for (rel, data) in &tree {
        assert!(
            fs::read(m.join("tree").join(rel)).unwrap() == *data,
            "{}",
            rel.display()
        );
    }
    // fsx, every operation (tests/fsx.toml), SQUEEZEFS_FSX_GLUSTER_OPS in all over two seeds.
    let total: u64 = std::env::var("SQUEEZEFS_FSX_GLUSTER_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    common::run_fsx(&m, &dir, total, &[20261124, 20261125]);
    d.unmount();
    common::check_clean(&b2, "a tree and fsx on GlusterFS");
    drop(g);
    let _ = fs::remove_dir_all(&dir);
}

/// On a GlusterFS backing a file extracted the `tar -x` way waits for the network only for
/// its create (issue 44): a LOOKUP miss in a directory the mount made is answered from the
/// names it knows (GlusterFS's names are exact: no backing call), and the owner and mode
/// set while the file is written wait in memory (the client keeps no inode flags, so
/// nothing there is append-only or immutable) and then cost no call beside the times. Each
/// of those was a round trip on the caller's path (a chmod or chown a locked transaction on
/// both bricks). Owner, mode and times arrive, on the mount and through the other client.
#[test]
fn a_tar_like_extract_on_glusterfs_waits_for_the_network_only_to_create() {
    use common::strace::{count, Strace};
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("gluster-tar-way");
    let g = Gluster::start(&dir.join("gl"));
    let (b1, b2) = (g.client(1).join("data"), g.client(2).join("data"));
    fs::create_dir(&b1).unwrap();
    // A directory the mount never made nor may learn (GlusterFS: not from a listing).
    fs::create_dir(b1.join("other")).unwrap();
    let m = dir.join("m");
    let d = mount(&b1, &m, &dir.join("m.log")).expect("mounts");
    fs::create_dir(m.join("d")).unwrap();
    assert_eq!(fs::read_dir(m.join("other")).unwrap().count(), 0);
    const N: usize = 60;
    let out = dir.join("trace");
    let strace = Strace::attach(
        d.child.as_ref().unwrap().id(),
        "openat,newfstatat,statx,chmod,fchmod,fchmodat,chown,fchown,fchownat,lchown",
        &out,
    );
    let mtime = |i: usize| 1_600_000_000 + i as i64;
    for i in 0..N {
        assert!(fs::symlink_metadata(m.join(format!("other/f{i}"))).is_err());
    }
    let mut modes = Vec::new();
    for i in 0..N {
        let p = m.join(format!("d/f{i}"));
        assert!(fs::symlink_metadata(&p).is_err());
        // (tar's fchmod to the mode the file was made with: 0644 less the umask.)
        let (made, _) = extract_the_tar_way(&p, b"extracted", mtime(i), |made| made);
        modes.push(made);
    }
    // `spin=auto` does not spin over GlusterFS's FUSE client: its daemon needs the CPU.
    let stats: serde_json::Value =
        serde_json::from_slice(&fs::read(m.join(".squeezefs-stats")).unwrap()).unwrap();
    assert_eq!(stats["spin"]["mode"], "auto", "{}", stats["spin"]);
    assert_eq!(stats["spin"]["window_us"], 0, "{}", stats["spin"]);
    assert!(
        stats["spin"]["declined"]
            .as_str()
            .is_some_and(|w| w.contains("fuse.glusterfs")),
        "{}",
        stats["spin"]
    );
    // The unmount finishes the last closes (the daemon's exit ends the trace).
    d.unmount();
    let trace = strace.finish(&out);
    let misses = trace.lines().filter(|l| l.contains("= -1 ENOENT")).count();
    let meta = [
        "chmod", "fchmod", "fchmodat", "chown", "fchown", "fchownat", "lchown",
    ]
    .iter()
    .map(|c| count(&trace, c))
    .sum::<usize>();
    println!("FIGURES {N} files the tar way on GlusterFS: {misses} failed lookups, {meta} chmods and chowns on the backing");
    // The N misses in `other` reach the volume (the trace sees them), the N in `d` do not.
    assert!(
        misses >= N,
        "the trace missed the unknown directory's misses: {misses}"
    );
    assert!(
        misses <= N + N / 20,
        "{misses} LOOKUP misses reached the backing\n{trace}"
    );
    assert_eq!(meta, 0, "chmods or chowns that change nothing\n{trace}");
    let check = |root: &Path, whence: &str| {
        for (i, &mode) in modes.iter().enumerate() {
            let md = fs::metadata(root.join(format!("d/f{i}"))).unwrap();
            assert_eq!(md.mode() & 0o7777, mode, "f{i}'s mode {whence}");
            assert_eq!((md.uid(), md.gid()), (0, 0), "f{i}'s owner {whence}");
            assert_eq!(md.mtime(), mtime(i), "f{i}'s mtime {whence}");
        }
    };
    let d = mount(&b2, &m, &dir.join("m.log")).expect("mounts through the other client");
    check(&m, "through the other client");
    for i in 0..N {
        assert_eq!(fs::read(m.join(format!("d/f{i}"))).unwrap(), b"extracted");
    }
    d.unmount();
    check(&b2, "on the backing");
    common::check_clean(&b2, "files extracted the tar way on GlusterFS");
    drop(g);
    let _ = fs::remove_dir_all(&dir);
}
