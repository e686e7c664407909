//! A backing directory on a distributed filesystem (issue 16): GlusterFS, a replica-2 volume
//! served by a glusterd in a network namespace this test makes (glusterd refuses loopback
//! addresses; all traffic stays on that namespace's `lo`), mounted by two FUSE clients as
//! two machines would. Needs root and Debian's glusterfs-server and glusterfs-client
//! (scripts/test-deps installs them; the test fails, not skips, without them).

#![deny(unsafe_code)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::gluster::{sh, Gluster};
use common::{is_mounted, scratch};

/// A squeezefs daemon serving `mnt`, unmounted and ended when dropped (a failing test
/// must not leave it holding files on the volume).
struct Daemon {
    mnt: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// Unmounts and checks the daemon exits cleanly.
    fn unmount(mut self) {
        common::unmount(&self.mnt);
        assert!(self.child.take().unwrap().wait().unwrap().success());
    }

    /// Kills the daemon (SIGKILL) and clears its dead mount.
    fn kill(mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
        sh(&format!("umount -l {}", self.mnt.display()));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            sh(&format!("fusermount3 -uz {}", self.mnt.display()));
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `squeezefs mount BACKING MNT` in the foreground: the daemon once mounted, or what it
/// said when it exited.
fn mount(backing: &Path, mnt: &Path, log: &Path) -> Result<Daemon, String> {
    fs::create_dir_all(mnt).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_squeezefs"))
        .arg("mount")
        .arg(backing)
        .arg(mnt)
        .stdout(Stdio::null())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !is_mounted(mnt) {
        if child.try_wait().unwrap().is_some() {
            return Err(fs::read_to_string(log).unwrap());
        }
        assert!(start.elapsed() < Duration::from_secs(30), "mount did not appear");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Daemon {
        mnt: mnt.to_path_buf(),
        child: Some(child),
    })
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
    std::thread::sleep(Duration::from_secs(3)); // past the group commit
                                                // A holder killed with SIGKILL releases the lock by itself.
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
