//! The stored halves a block-sharing pass nominates (`Container::stored_halves`) and the
//! storage's comparison (`Storage::dedupe_from`): two files written alike hold equal halves
//! that share whole; a half rewritten since no longer compares equal; dirty extents and
//! packed or inline files nominate nothing; both files read back their own bytes.

use std::sync::Arc;

use squeezefs_container::format::MAX_EXTENT_SHIFT;
use squeezefs_container::sim::MemDisk;
use squeezefs_container::{Container, Dedupe, Options, Stats, Storage};
use squeezefs_testdata::{random, text};

const MIB: usize = 1 << 20;

fn opts() -> Options {
    Options {
        codec: "zstd:1".parse().unwrap(),
        stats: Arc::new(Stats::default()),
        grow_extent_shift: Some(MAX_EXTENT_SHIFT),
        ..Options::default()
    }
}

fn written(o: &Options, data: &[u8]) -> Container<MemDisk> {
    let mut c = Container::create(MemDisk::new(), o);
    c.write(0, data).unwrap();
    c.writer_closed();
    c.fsync().unwrap();
    c
}

#[test]
fn files_written_alike_hold_equal_halves_and_bytes_decide() {
    let o = opts();
    let mut data = text(2 * MIB);
    data.extend_from_slice(&random(MIB + 777, 9));
    let a = written(&o, &data);
    let mut b = written(&o, &data);
    let (ha, n) = a.stored_halves(0..u64::MAX).unwrap();
    let (hb, _) = b.stored_halves(0..u64::MAX).unwrap();
    assert_eq!(n, 4);
    assert_eq!(ha.len(), 4);
    assert_eq!(ha, hb, "written alike: the same halves in the same places");
    for h in &ha {
        assert_eq!(h.at % 4096, 0);
        assert!(h.len <= h.slot);
        let len = h
            .len
            .next_multiple_of(4096)
            .min(b.storage().len().unwrap() - h.at);
        assert_eq!(
            b.storage().dedupe_from(a.storage(), h.at, len, h.at).unwrap(),
            Dedupe::Shared(len)
        );
    }
    assert!(b.storage().shared_bytes() > 0);

    // Extent 1 of `b` rewritten: dirty, it nominates nothing; written out, it compares
    // unequal to `a`'s.
    b.write(MIB as u64 + 10, b"changed").unwrap();
    let (dirty, _) = b.stored_halves(0..4).unwrap();
    assert_eq!(
        dirty.iter().map(|h| h.header.index).collect::<Vec<_>>(),
        vec![0, 2, 3]
    );
    b.fsync().unwrap();
    let (hb, _) = b.stored_halves(1..2).unwrap();
    let (h1a, h1b) = (ha[1], hb[0]);
    let len = h1a.len.min(h1b.len) / 4096 * 4096;
    assert_eq!(
        b.storage().dedupe_from(a.storage(), h1a.at, len, h1b.at).unwrap(),
        Dedupe::Differ
    );
    let mut want = data.clone();
    want[MIB + 10..MIB + 17].copy_from_slice(b"changed");
    assert!(b.read(0, want.len()).unwrap() == want);
    let mut a = a;
    assert!(a.read(0, data.len()).unwrap() == data);

    // A small file (inline or packed): nothing to nominate.
    let small = written(&o, b"a few bytes");
    assert_eq!(small.stored_halves(0..u64::MAX).unwrap().0, Vec::new());
}
