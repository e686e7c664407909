//! A GlusterFS volume for tests of a distributed backing (issue 16): a replica-2 volume
//! served by a glusterd in a network namespace the fixture makes (glusterd refuses loopback
//! addresses; all traffic stays on that namespace's `lo`), mounted by two FUSE clients as two
//! machines would. Needs root and Debian's glusterfs-server and glusterfs-client
//! (scripts/test-deps installs them; a test fails, not skips, without them). One volume at a
//! time per test binary (glusterd's state and socket are the machine's).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A GlusterFS volume of two bricks, its two clients at `c1` and `c2`; torn down when
/// dropped.
pub struct Gluster {
    _turn: MutexGuard<'static, ()>,
    ns: String,
    work: PathBuf,
    volume: String,
}

pub fn sh(script: &str) -> (bool, String) {
    let out = Command::new("sh").args(["-c", script]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

impl Gluster {
    pub fn start(work: &Path) -> Gluster {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        super::require_root("runs glusterd in a network namespace of its own (CI runs as root)");
        for tool in ["glusterd", "gluster", "glusterfs", "ip", "nsenter"] {
            let (ok, _) = sh(&format!("command -v {tool}"));
            assert!(
                ok,
                "{tool} is missing: scripts/test-deps installs glusterfs-server, glusterfs-client"
            );
        }
        let id = std::process::id();
        let g = Gluster {
            _turn: turn,
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

    pub fn client(&self, n: u8) -> PathBuf {
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
