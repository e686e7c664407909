//! Batches of extents compressed after their WRITE's answer (`read_write.rs`,
//! `squeezefs_container` `container/batch.rs`): what a last close waits for, and the
//! mount's bound on them. On a backing directory of the lifecycle tests (`tests.rs`).

use squeezefs_testdata::text;

use super::tests::backing;

/// A WRITE that filled a batch of extents answers before compressing it
/// (`Files::write` returns it, `finish_write` compresses and writes it): the last close
/// waits for that batch (its write-out would compress the same extents again), and returns
/// as soon as it ends; the bytes written over the batch's meanwhile win.
#[test]
fn a_last_close_waits_for_the_batch_compressed_after_the_answer() {
    let b = backing("batch-after");
    let (ino, inode) = b.file("f");
    let mut data = text(16 << 20);
    b.files.attach(&inode, false, true).unwrap();
    let mut later = None;
    for i in 0..16 {
        let at = i << 20;
        if let Some(l) = b
            .files
            .write(&inode, at as u64, &data[at..at + (1 << 20)], false)
            .unwrap()
        {
            match later.take() {
                None => later = Some(l),
                Some(first) => {
                    b.files.finish_write(first);
                    later = Some(l);
                }
            }
        }
    }
    let later = later.expect("a batch after the answer");
    // Rewritten while its batch waits: the new bytes must be the ones written.
    let patch = vec![b'~'; 1 << 20];
    b.files.write(&inode, 15 << 20, &patch, false).unwrap();
    data[15 << 20..].copy_from_slice(&patch);
    std::thread::scope(|s| {
        let closing = s.spawn(|| {
            let t = std::time::Instant::now();
            b.files.release(ino, &inode, true).unwrap();
            t.elapsed()
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!closing.is_finished(), "the last close waits for the batch");
        b.files.finish_write(later);
        let took = closing.join().unwrap();
        assert!(
            took < std::time::Duration::from_secs(3),
            "woken when the batch ended: {took:?}"
        );
    });
    b.files.flush_all();
    assert!(b.on_disk("f") == data);
}

/// At most one batch per core waits after its WRITE's answer on a mount (each holds copies
/// of its extents): past that, a WRITE compresses its batch before answering. Every file
/// reads back as written either way.
#[test]
fn batches_after_the_answer_are_at_most_one_per_core() {
    let b = backing("batch-bound");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut laters = Vec::new();
    let mut files = Vec::new();
    for k in 0..cores + 2 {
        let name = format!("f{k}");
        let (ino, inode) = b.file(&name);
        b.files.attach(&inode, false, true).unwrap();
        let data = text(8 << 20);
        for i in 0..8 {
            let at = i << 20;
            if let Some(l) = b
                .files
                .write(&inode, at as u64, &data[at..at + (1 << 20)], false)
                .unwrap()
            {
                laters.push(l);
            }
        }
        files.push((name, ino, inode, data));
    }
    assert_eq!(
        laters.len(),
        cores,
        "one batch per core after the answer, the rest before"
    );
    for l in laters {
        b.files.finish_write(l);
    }
    for (_, ino, inode, _) in &files {
        b.files.release(*ino, inode, true).unwrap();
    }
    b.files.flush_all();
    for (name, _, _, data) in &files {
        assert!(b.on_disk(name) == *data, "{name}");
    }
}
