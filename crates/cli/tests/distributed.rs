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

use common::{is_mounted, scratch};

/// A GlusterFS volume of two bricks, its two clients at `c1` and `c2`; torn down when
/// dropped.
struct Gluster {
    ns: String,
    work: PathBuf,
    volume: String,
}

fn sh(script: &str) -> (bool, String) {
    let out = Command::new("sh").args(["-c", script]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

impl Gluster {
    fn start(work: &Path) -> Gluster {
        common::require_root("runs glusterd in a network namespace of its own (CI runs as root)");
        for tool in ["glusterd", "gluster", "glusterfs", "ip", "nsenter"] {
            let (ok, _) = sh(&format!("command -v {tool}"));
            assert!(
                ok,
                "{tool} is missing: scripts/test-deps installs glusterfs-server, glusterfs-client"
            );
        }
        let id = std::process::id();
        let g = Gluster {
            ns: format!("sqzgl{id}"),
            work: work.to_path_buf(),
            volume: format!("sqz{id}"),
        };
        let w = work.display();
        let (ns, v) = (&g.ns, &g.volume);
        let (ok, out) = sh(&format!(
            "set -e; ip netns add {ns}; ip netns exec {ns} ip link set lo up; \
             ip netns exec {ns} ip addr add 10.77.0.1/32 dev lo; \
             mkdir -p {w}/b1 {w}/b2 {w}/c1 {w}/c2; \
             nsenter --net=/run/netns/{ns} glusterd -p {w}/glusterd.pid --log-file={w}/glusterd.log; \
             i=0; until nsenter --net=/run/netns/{ns} gluster --mode=script volume list >/dev/null 2>&1; do \
               i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done; \
             nsenter --net=/run/netns/{ns} gluster --mode=script volume create {v} replica 2 \
               10.77.0.1:{w}/b1 10.77.0.1:{w}/b2 force; \
             nsenter --net=/run/netns/{ns} gluster --mode=script volume start {v}; \
             nsenter --net=/run/netns/{ns} mount -t glusterfs 10.77.0.1:/{v} {w}/c1; \
             nsenter --net=/run/netns/{ns} mount -t glusterfs 10.77.0.1:/{v} {w}/c2"
        ));
        assert!(ok, "setting up GlusterFS: {out}");
        g
    }

    fn client(&self, n: u8) -> PathBuf {
        self.work.join(format!("c{n}"))
    }
}

impl Drop for Gluster {
    fn drop(&mut self) {
        let (w, ns, v) = (self.work.display(), &self.ns, &self.volume);
        sh(&format!(
            "umount -l {w}/c1 {w}/c2; \
             nsenter --net=/run/netns/{ns} gluster --mode=script volume stop {v} force; \
             nsenter --net=/run/netns/{ns} gluster --mode=script volume delete {v}; \
             pkill -f '[g]lusterfsd.*{v}'; pkill -f '[g]lusterfs .*volfile-id=/{v} '; \
             kill $(cat {w}/glusterd.pid); sleep 0.5; \
             ip netns del {ns}"
        ));
    }
}

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
