//! Copying a file into a new container (`squeezefs compress` when a file is plain, or its
//! extent size changes): the caller writes the copy beside the original and renames it over
//! once this returns, so an interruption leaves the original whole.

use crate::{Container, Result, Storage};

/// Bytes copied at a time.
const CHUNK: usize = 1 << 20;

/// Copies every byte of `src` (a container or a plain file) into `dst`, a new empty
/// container, keeping holes as holes. The caller then flushes `dst` (or writes it back and
/// commits it with others, as `squeezefs compress` does) and syncs it before the rename
/// that publishes it. `each` is told the bytes
/// copied after every chunk (a progress bar). Returns the logical size.
pub fn copy_into<A: Storage, B: Storage>(
    src: &mut Container<A>,
    dst: &mut Container<B>,
    mut each: impl FnMut(u64),
) -> Result<u64> {
    let size = src.size()?;
    let mut off = 0;
    while off < size {
        let Some(start) = src.seek_data(off)? else { break };
        let end = src.seek_hole(start)?.unwrap_or(size).min(size);
        let mut pos = start;
        while pos < end {
            let want = ((end - pos) as usize).min(CHUNK);
            let data = src.read(pos, want)?;
            if data.is_empty() {
                break;
            }
            dst.write(pos, &data)?;
            pos += data.len() as u64;
            each(data.len() as u64);
        }
        off = end.max(start + 1);
    }
    dst.set_size(size)?;
    Ok(size)
}
