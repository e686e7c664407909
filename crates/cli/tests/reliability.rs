//! Reliability on a real mount: one daemon per backing directory, SIGKILL, damaged
//! containers and `squeezefs check`.

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{is_mounted, scratch, Mount};

#[test]
fn a_backing_directory_serves_one_daemon_and_a_killed_ones_lock_does_not_linger() {
    let dir = scratch("lock");
    let mut first = Mount::new(&dir, "");
    fs::write(first.path("kept"), b"written before the kill").unwrap();
    // A second mount of the same backing directory, elsewhere: refused, naming the holder.
    let other = dir.join("mnt2");
    fs::create_dir_all(&other).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_squeezefs"))
        .arg("mount")
        .arg(dir.join("backing"))
        .arg(&other)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let pid = first.child.as_ref().unwrap().id();
    assert!(
        err.contains("in use by process") && err.contains(&pid.to_string()),
        "{err}"
    );
    assert!(!is_mounted(&other));

    // SIGKILL the daemon: the lock goes with it.
    let mut child = first.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let st = Command::new("fusermount3")
        .arg("-uz")
        .arg(&first.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let start = Instant::now();
    while is_mounted(&first.mnt) {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    let again = Mount::new(&dir, "");
    assert_eq!(fs::read(again.path("kept")).unwrap(), b"written before the kill");
    again.unmount();
}
