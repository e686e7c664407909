//! The namespace answered from memory (issue 44): LOOKUP misses in directories whose names
//! the daemon knows (`fs::inode::known`) must agree with the backing at every step, through
//! every kind of name change, and must not ask the backing at all.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::*;

/// The directories the operations work in: kept for the whole run (held open, so the kernel
/// never forgets them and their known names stay), all made through the mount but the root.
const DIRS: [&str; 4] = ["", "d1", "d2", "d1/d3"];
/// The names the operations make, move and remove in them (files, empty directories,
/// symlinks, hard links).
const NAMES: [&str; 5] = ["x", "y", "z", "w", "v"];

fn errno(r: io::Result<()>) -> Result<(), i32> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let (f, t) = (
        CString::new(from.as_os_str().as_bytes()).unwrap(),
        CString::new(to.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: both paths are NUL-terminated and live across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One random operation, applied alike under `root` (the mount, or the plain mirror).
#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Mkdir(String),
    Symlink(String),
    Link(String, String),
    Unlink(String),
    Rmdir(String),
    Rename(String, String, u32),
    List(String),
}

fn apply(root: &Path, op: &Op) -> Result<(), i32> {
    let p = |s: &String| root.join(s);
    match op {
        Op::Create(a) => errno(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p(a))
                .and_then(|mut f| io::Write::write_all(&mut f, a.as_bytes())),
        ),
        Op::Mkdir(a) => errno(fs::create_dir(p(a))),
        Op::Symlink(a) => errno(std::os::unix::fs::symlink("target", p(a))),
        Op::Link(a, b) => errno(fs::hard_link(p(a), p(b))),
        Op::Unlink(a) => errno(fs::remove_file(p(a))),
        Op::Rmdir(a) => errno(fs::remove_dir(p(a))),
        Op::Rename(a, b, flags) => errno(renameat2(&p(a), &p(b), *flags)),
        Op::List(d) => errno(fs::read_dir(p(d)).map(|r| r.for_each(drop))),
    }
}

/// What every name of every directory is: `None` absent, else its kind (a file's with its
/// bytes).
fn view(root: &Path) -> BTreeMap<String, Option<String>> {
    view_with(root, true)
}

/// [`view`], `data`: with files' bytes (not on a backing directory, which holds them
/// compressed).
fn view_with(root: &Path, data: bool) -> BTreeMap<String, Option<String>> {
    let mut v = BTreeMap::new();
    for d in DIRS {
        for n in NAMES {
            let rel = if d.is_empty() {
                n.to_string()
            } else {
                format!("{d}/{n}")
            };
            let kind = fs::symlink_metadata(root.join(&rel)).ok().map(|m| {
                use std::os::unix::fs::FileTypeExt;
                let t = m.file_type();
                if t.is_dir() {
                    "dir"
                } else if t.is_symlink() {
                    "symlink"
                } else if t.is_char_device() {
                    "whiteout"
                } else {
                    "file"
                }
                .to_string()
            });
            let kind = match kind.as_deref() {
                Some("file") if data => Some(format!(
                    "file {:?}",
                    fs::read(root.join(&rel)).map(|b| String::from_utf8_lossy(&b).into_owned())
                )),
                _ => kind,
            };
            v.insert(rel, kind);
        }
    }
    v
}

fn random_path(rng: &mut Rng) -> String {
    let d = DIRS[rng.below(DIRS.len() as u64) as usize];
    let n = NAMES[rng.below(NAMES.len() as u64) as usize];
    if d.is_empty() {
        n.to_string()
    } else {
        format!("{d}/{n}")
    }
}

fn random_op(rng: &mut Rng) -> Op {
    let (a, b) = (random_path(rng), random_path(rng));
    match rng.below(12) {
        0..=2 => Op::Create(a),
        3 => Op::Mkdir(a),
        4 => Op::Symlink(a),
        5 => Op::Link(a, b),
        6 | 7 => Op::Unlink(a),
        8 => Op::Rmdir(a),
        9 | 10 => Op::Rename(
            a,
            b,
            [
                0,
                libc::RENAME_NOREPLACE,
                libc::RENAME_EXCHANGE,
                libc::RENAME_WHITEOUT,
            ][rng.below(4) as usize],
        ),
        _ => Op::List(DIRS[rng.below(DIRS.len() as u64) as usize].to_string()),
    }
}

/// A random sequence of name changes (renames with NOREPLACE, EXCHANGE and WHITEOUT, which
/// leaves a device node under the old name, among them) in directories made through the
/// mount (whose names the daemon knows from their birth) and in the root (known once
/// listed), applied to the
/// mount and to a plain directory alike: every call must give the same result, and after
/// each step — the kernel's dentries dropped, so every name is looked up again — every name
/// must exist on the mount exactly when it exists in the plain directory. A name the known
/// set failed to follow would be a false "No such file"; a name it wrongly kept, a LOOKUP
/// that still went to the backing (never wrong, counted below).
#[test]
fn lookups_in_known_directories_agree_with_the_backing_through_every_change() {
    random_name_changes("ns-known", "", &[]);
}

/// The same with new files named behind (`dirops=behind`, `fs::ns`), each name held
/// pending a while: LOOKUPs of pending names, their data, and every other change of names
/// (which waits for the pending ones) agree with a plain directory at every step.
#[test]
fn new_names_made_behind_agree_with_the_backing_through_every_change() {
    random_name_changes(
        "ns-behind",
        "dirops=behind",
        &[("SQUEEZEFS_TEST_APPLY_DELAY_MS", "3")],
    );
}

fn random_name_changes(tag: &str, opts: &str, env: &[(&str, &str)]) {
    require_root("drops the kernel's dentry cache");
    let dir = scratch(tag);
    let mirror = dir.join("mirror");
    fs::create_dir_all(&mirror).unwrap();
    let m = Mount::spawn_env(&dir, opts, None, env);
    let mut held = Vec::new();
    for d in DIRS {
        if !d.is_empty() {
            fs::create_dir(m.path(d)).unwrap();
            fs::create_dir(mirror.join(d)).unwrap();
        }
        held.push(fs::File::open(m.path(d)).unwrap());
    }
    let seed = std::env::var("SQUEEZEFS_NS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0044);
    let steps: usize = std::env::var("SQUEEZEFS_NS_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let mut rng = Rng(seed);
    let mut log: Vec<Op> = Vec::new();
    for step in 0..steps {
        let op = random_op(&mut rng);
        log.push(op.clone());
        let (on_mount, on_mirror) = (apply(&m.mnt, &op), apply(&mirror, &op));
        assert_eq!(
            on_mount, on_mirror,
            "seed {seed:#x} step {step}: {op:?} gave {on_mount:?} on the mount, {on_mirror:?} on a plain directory; ops so far: {log:?}"
        );
        fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        let (a, b) = (view(&m.mnt), view(&mirror));
        assert_eq!(
            a, b,
            "seed {seed:#x} step {step} after {op:?}; ops so far: {log:?}"
        );
    }
    let stats: serde_json::Value =
        serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap();
    let misses = stats["names"]["known_misses"].as_u64().unwrap();
    println!("FIGURES {steps} steps: {misses} LOOKUP misses answered from known names");
    assert!(
        misses as usize >= steps,
        "{misses} misses answered from memory over {steps} steps: the sets are not used"
    );
    if opts.contains("dirops=behind") {
        let behind = stats["namespace"]["behind"].as_u64().unwrap();
        println!("FIGURES {behind} new files named behind");
        assert!(behind > 20, "only {behind} new files were named behind");
    }
    drop(held);
    m.unmount();
    // And the backing holds what the mount showed.
    assert_eq!(view_with(&dir.join("backing"), false), view_with(&mirror, false));
    check_clean(&dir.join("backing"), "after the random name changes");
}

/// A directory listed whole is known too, and a LOOKUP of a name that a listing never saw
/// still finds a file made since through the mount (the listing and the create race: the
/// create moves the directory's generation, so a listing that began before it is not
/// learnt).
#[test]
fn a_listed_directory_is_known_and_listings_racing_creates_hide_nothing() {
    require_root("drops the kernel's dentry cache");
    let dir = scratch("ns-listed");
    let m = Mount::new(&dir, "");
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..200 {
        fs::write(m.path(&format!("d/f{i}")), b"x").unwrap();
    }
    m.unmount();
    let m = Mount::new(&dir, "");
    let d = m.path("d");
    let _held = fs::File::open(&d).unwrap();
    let lister = {
        let d = d.clone();
        std::thread::spawn(move || {
            for _ in 0..300 {
                fs::read_dir(&d).unwrap().for_each(drop);
            }
        })
    };
    let mut made: Vec<PathBuf> = Vec::new();
    for i in 0..300 {
        let p = d.join(format!("g{i}"));
        fs::write(&p, b"y").unwrap();
        made.push(p);
    }
    lister.join().unwrap();
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    for p in &made {
        assert!(
            fs::symlink_metadata(p).is_ok(),
            "{} made through the mount, not found",
            p.display()
        );
    }
    for i in 0..200 {
        assert!(fs::symlink_metadata(d.join(format!("f{i}"))).is_ok());
        assert!(fs::symlink_metadata(d.join(format!("missing{i}"))).is_err());
    }
    let stats: serde_json::Value =
        serde_json::from_slice(&fs::read(m.path(".squeezefs-stats")).unwrap()).unwrap();
    assert!(
        stats["names"]["known_misses"].as_u64().unwrap() >= 200,
        "the listed directory's misses went to the backing: {}",
        stats["names"]
    );
}
