//! `--dict-gain`: what a container would take written now with its dictionary and
//! without it.

use std::path::Path;

use squeezefs_codec::CodecSpec;
use squeezefs_container::encode::Policy;
use squeezefs_container::predict;
use squeezefs_container::FileStorage;

/// What one container (a backing file) would take on disk written now with `codec` (the
/// one its superblock names) with its dictionary and without it: its content read back,
/// encoded both ways as the filesystem would (`container::predict`). For `squeezefs stats
/// --dict-gain`.
pub(super) fn gain(backing: &Path, codec: CodecSpec) -> Result<(u64, u64), String> {
    use squeezefs_container::{Container, Options};
    let f = squeezefs_container::open_as_owner(backing, false)
        .map_err(|e| format!("{}: {e}", backing.display()))?;
    let mut c = Container::open(FileStorage::new(f), &Options::default())
        .map_err(|e| format!("{}: {e}", backing.display()))?;
    let Some(extent) = c.extent_size() else {
        return Ok((0, 0));
    };
    let shift = extent.trailing_zeros() as u8;
    let size = c.size().map_err(|e| e.to_string())?;
    let dict = c.dictionary_property();
    let (mut with, mut without) = (0, 0);
    let mut off = 0;
    while off < size {
        let data = c
            .read(off, extent as usize)
            .map_err(|e| format!("{}: {e}", backing.display()))?;
        let idx = off >> shift;
        let policy = Policy::new(codec, false);
        without += predict::extent(policy, shift, size, idx, &data).disk;
        with += predict::extent(Policy { dict, ..policy }, shift, size, idx, &data).disk;
        off += extent;
    }
    Ok((with, without))
}
