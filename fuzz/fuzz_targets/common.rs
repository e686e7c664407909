//! Shared by the targets: everything a reader can do to a container image, with bounded
//! memory whatever the image claims.

use squeezefs_container::check::check;
use squeezefs_container::sim::MemDisk;
use squeezefs_container::{Container, Options, Storage};

/// Opens `image` as a container and reads it all (up to 4 MiB), seeks through it and scrubs
/// it. Errors are fine; panics and huge allocations are what the fuzzer looks for.
pub fn exercise(image: &[u8]) {
    let disk = MemDisk::new();
    if !image.is_empty() {
        disk.write_at(image, 0).unwrap();
    }
    let _ = check(&disk, None);
    let Ok(mut c) = Container::open(disk.clone(), &Options::default()) else {
        return;
    };
    let size = c.size().unwrap_or(0).min(4 << 20);
    let mut off = 0;
    while off < size {
        if c.read(off, 65536).is_err() {
            // A damaged extent: the next one may still read.
        }
        off += 65536;
    }
    let _ = c.seek_data(0);
    let _ = c.seek_hole(0);
    let _ = c.seek_data(size / 2);
}
