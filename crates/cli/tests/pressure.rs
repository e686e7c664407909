//! Reliability under pressure on a real mount: a full backing filesystem, stress-ng's
//! filesystem stressors, and SEEK_DATA/SEEK_HOLE while written data is still in the page
//! cache (as stress-ng uses them).

#![deny(unsafe_code)]

use std::fs;
use std::process::Command;

mod common;
use common::{check_clean, scratch, sys, Mount, Rng, SmallFs};

#[test]
fn a_full_backing_filesystem_gives_enospc_and_loses_nothing_written_before() {
    let dir = scratch("enospc");
    let _small = SmallFs::backing_of(&dir, 24);

    let mut rng = Rng(77);
    let noise = |rng: &mut Rng, n: usize| -> Vec<u8> { (0..n).map(|_| rng.next() as u8).collect() };
    let m = Mount::new(&dir, "compress=zstd:1");
    let before = noise(&mut rng, 4 << 20);
    let f = fs::File::create(m.path("before")).unwrap();
    use std::io::Write;
    (&f).write_all(&before).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // Fill it up: the error must be ENOSPC, from write, fsync or close.
    let big = noise(&mut rng, 48 << 20);
    let err = (|| -> std::io::Result<()> {
        let mut f = fs::File::create(m.path("big"))?;
        for chunk in big.chunks(1 << 20) {
            f.write_all(chunk)?;
        }
        f.sync_all()
    })()
    .expect_err("48 MiB of noise cannot fit in 24 MiB");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(fs::read(m.path("before")).unwrap() == before);
    m.unmount();

    check_clean(&dir.join("backing"), "after the fill");
    let m = Mount::new(&dir, "compress=zstd:1");
    assert!(
        fs::read(m.path("before")).unwrap() == before,
        "intact after remount"
    );
    let got = fs::read(m.path("big")).expect("the file that hit ENOSPC still reads");
    assert!(
        got.len() <= big.len() && got == big[..got.len()],
        "an older state of it, never garbage"
    );
    // Space freed, writing works again. A removed file's space comes back once the daemon
    // lets go of its backing file: at once, or at the group commit (within seconds) when
    // the read above left it waiting for one.
    fs::remove_file(m.path("big")).unwrap();
    let free = || {
        let sv = nix::sys::statvfs::statvfs(&dir.join("backing")).unwrap();
        sv.blocks_available() as u64 * sv.fragment_size() as u64
    };
    let start = std::time::Instant::now();
    while free() < 4 << 20 && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        free() >= 4 << 20,
        "space of the removed file still held: {} free",
        free()
    );
    // Every error checked (`fs::write` ignores the one `close` reports).
    let f = fs::File::create(m.path("after")).unwrap();
    (&f).write_all(&before[..1 << 20]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let got = fs::read(m.path("after")).unwrap();
    assert!(
        got == before[..1 << 20],
        "after: {} bytes, not what was written",
        got.len()
    );
    m.unmount();
}

/// Files of less than one extent written without fsync onto a backing filesystem that
/// fills up: the file whose data does not fit fails its `write` or `close` with ENOSPC, as
/// on a kernel filesystem, although `close` no longer waits for a file's last write-out
/// (rule 10: near a full backing filesystem a WRITE writes out at once). A deferred
/// write-out would fail unseen, file after file. Afterwards `check` is clean and the file
/// fsynced before reads back.
#[test]
fn files_whose_data_does_not_fit_fail_their_write_or_close() {
    use std::io::Write;
    for opts in ["compress=zstd:1", "compress=zstd:1,nopack"] {
        let dir = scratch("enospc-small");
        let small = SmallFs::backing_of(&dir, 24);
        let mut rng = Rng(78);
        let m = Mount::new(&dir, opts);
        let mut noise = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.next() as u8).collect() };
        let first = noise(40 << 10);
        let mut f = fs::File::create(m.path("first")).unwrap();
        f.write_all(&first).unwrap();
        f.sync_all().unwrap();
        drop(f);
        // Noise of 16–96 KiB a file (one partial extent), no fsync: 2,000 of them are far
        // more than 24 MiB holds.
        let mut i = 0;
        let err = loop {
            assert!(i < 2000, "{opts}: {i} files of noise closed without an error");
            let n = (16 << 10) + (i * 7919) % (80 << 10);
            let data = noise(n);
            let r = (|| -> std::io::Result<()> {
                let mut f = fs::File::create(m.path(&format!("f{i}")))?;
                f.write_all(&data)?;
                match sys::close(f) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            })();
            if let Err(e) = r {
                break e;
            }
            i += 1;
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{opts}: {err}");
        assert!(
            fs::read(m.path("first")).unwrap() == first,
            "{opts}: fsynced, then changed"
        );
        m.unmount();
        check_clean(&dir.join("backing"), opts);
        drop(small);
        let _ = fs::remove_dir_all(&dir);
    }
}

/// stress-ng's filesystem stressors, with their own verification, concurrently on one mount
/// for SQUEEZEFS_STRESS_SECS (default 60) seconds; then `squeezefs check` is clean.
#[test]
fn stress_ng_filesystem_stressors_then_a_clean_check() {
    let secs = std::env::var("SQUEEZEFS_STRESS_SECS").unwrap_or_else(|_| "60".into());
    let dir = scratch("stress");
    let m = Mount::new(&dir, "compress=zstd:1");
    let out = Command::new("stress-ng")
        .arg("--temp-path")
        .arg(&m.mnt)
        .args([
            "--hdd",
            "2",
            "--hdd-bytes",
            "32M",
            "--hdd-opts",
            "wr-rnd,rd-rnd",
            "--iomix",
            "1",
            "--iomix-bytes",
            "16M",
            "--fallocate",
            "1",
            "--fallocate-bytes",
            "16M",
            "--seek",
            "1",
            "--seek-size",
            "16M",
            "--sync-file",
            "1",
            "--sync-file-bytes",
            "16M",
            "--rename",
            "1",
            "--dir",
            "1",
            "--link",
            "1",
            "--symlink",
            "1",
            "--verify",
            "--metrics-brief",
            "--timeout",
        ])
        .arg(format!("{secs}s"))
        .output()
        .expect("stress-ng is missing: apt-get install stress-ng (scripts/test does)");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("successful run completed"),
        "stress-ng failed:\n{text}"
    );
    let ops: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("metrc") && !l.contains("bogo") && !l.contains("(secs)"))
        .collect();
    eprintln!("stress-ng for {secs} s:\n{}", ops.join("\n"));
    m.unmount();
    check_clean(&dir.join("backing"), "after the stressors");
}

#[test]
fn seek_data_and_hole_never_hide_data_still_in_the_page_cache() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = scratch("seekwb");
    let m = Mount::new(&dir, "");
    let p = m.path("f");
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    fs::remove_file(&p).unwrap(); // as stress-ng does: open, unlink, then use
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(&[7u8; 512]).unwrap();
    let size = f.seek(SeekFrom::End(0)).unwrap();
    // Whatever the daemon has seen, the answers must not claim a hole over that data.
    let data = f
        .seek(SeekFrom::Start(0))
        .map(|_| sys::lseek(&f, 0, libc::SEEK_DATA));
    assert!(matches!(data, Ok(d) if d >= 0 && d as u64 <= 1 << 20), "{data:?}");
    let hole = sys::lseek(&f, 1 << 20, libc::SEEK_HOLE);
    assert!(hole >= size as i64, "hole {hole} inside data ending at {size}");
    drop(f);
    // Closed: the daemon has everything and answers exactly.
    let mut g = fs::File::create(m.path("g")).unwrap();
    g.seek(SeekFrom::Start(1 << 20)).unwrap();
    g.write_all(&[7u8; 512]).unwrap();
    drop(g);
    let g = fs::File::open(m.path("g")).unwrap();
    assert_eq!(sys::lseek(&g, 0, libc::SEEK_DATA), 1 << 20);
    assert_eq!(sys::lseek(&g, 0, libc::SEEK_HOLE), 0);
    drop(g);
    m.unmount();
}
