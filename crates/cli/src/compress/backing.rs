//! What `squeezefs compress` reads of the backing side: a backing directory's packs
//! (opened offline) and whether a daemon serves it, and of one backing file whether it is
//! packed, its layout (plain, or its extent size), and whether it is stored with a codec
//! already.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use squeezefs_codec::CodecSpec;
use squeezefs_container::pack::record::{record_state, RecordState};
use squeezefs_container::pack::Packs;
use squeezefs_container::usage::{usage, Kind};
use squeezefs_container::{open_as_owner, Container, FileStorage, Options};

use super::err::err;

/// The pack directory and packs of the backing directory `backing` is in (the nearest
/// ancestor holding a pack directory, else `backing` itself when `pack`), probed like a
/// mount does. A filesystem that cannot keep location records is an error when packing is
/// `required` (`--pack`); otherwise its packs are read-only (packed files still read, and
/// nothing new is packed).
pub(super) fn offline_packs(
    backing: &Path,
    pack: bool,
    required: bool,
) -> Result<Option<(PathBuf, Arc<Packs>)>, String> {
    let found = backing
        .ancestors()
        .find(|a| a.join(squeezefs_container::pack::dir::DIR_NAME).is_dir());
    let Some(root) = found.or(pack.then_some(backing)) else {
        return Ok(None);
    };
    // Writable only when asked to pack: with --no-pack the packs are only read (a pack
    // directory is there on every backing a mount wrote to, for its probes).
    let packs = squeezefs_fs::packing::open(root, pack, squeezefs_container::pack::DEFAULT_CACHE)
        .map_err(|e| err(root, format!("opening its packs: {e}")))?;
    // Files rewritten here leave garbage the next unmount must look for.
    packs
        .take_clean_mark()
        .map_err(|e| err(root, format!("removing its packs' clean mark: {e}")))?;
    if required && !packs.writable() {
        return Err(format!(
            "{}: files cannot be packed on this filesystem (see the warning above); run with --no-pack",
            root.display()
        ));
    }
    Ok(Some((root.join(squeezefs_container::pack::dir::DIR_NAME), packs)))
}

/// The logical size of a packed backing file (0 for any other empty one).
pub(super) fn packed_len(backing: &Path) -> u64 {
    let Ok(f) = open_as_owner(backing, false) else {
        return 0;
    };
    match record_state(&FileStorage::new(f)) {
        Ok(RecordState::Current { loc, .. }) => loc.len as u64,
        _ => 0,
    }
}

/// Whether the backing file is packed now (its location record is current).
pub(super) fn is_packed(backing: &Path) -> bool {
    open_as_owner(backing, false).ok().is_some_and(|f| {
        matches!(
            record_state(&FileStorage::new(f)),
            Ok(RecordState::Current { .. })
        )
    })
}

/// Whether the backing file is a container written with `codec` already: every extent is,
/// or is inline or raw (whose codec and level are not recorded) in a file whose codec —
/// its compression property, or `default` when it has none — is `codec`.
pub(super) fn already(backing: &Path, codec: CodecSpec, default: CodecSpec) -> bool {
    let Ok(f) = open_as_owner(backing, false) else {
        return false;
    };
    let st = FileStorage::new(f);
    // A packed file: its record names the codec it was last written with.
    match record_state(&st) {
        Ok(RecordState::Current { loc, .. }) => return loc.codec == codec,
        Ok(RecordState::Unreadable(_)) | Err(_) => return false,
        Ok(_) => {}
    }
    let Ok(u) = usage(&st, None) else { return false };
    let none = squeezefs_codec::Algorithm::None;
    let level = if codec.alg == none { 0 } else { codec.level as i16 };
    let want = Kind::Extent(codec.alg, level);
    let unrecorded = |k: &Kind| *k == Kind::Inline || *k == Kind::Extent(none, 0);
    // (Extents with a dictionary count as their codec: the dictionary is the file's.)
    let kinds: Vec<Kind> = u.parts.keys().map(|k| k.without_dict()).collect();
    if u.plain || !kinds.iter().all(|k| *k == want || unrecorded(k)) {
        return false;
    }
    !kinds.iter().any(unrecorded)
        || Container::open(st, &Options::default())
            .is_ok_and(|c| c.compression_property().unwrap_or(default) == codec)
}

/// Plain, or its extent shift when it is a container (or packed).
pub(super) fn layout(backing: &Path) -> Result<Option<u8>, String> {
    let f = open_as_owner(backing, false).map_err(|e| err(backing, e))?;
    let st = FileStorage::new(f);
    if let Ok(RecordState::Current { loc, .. }) = record_state(&st) {
        return Ok(Some(loc.extent_shift));
    }
    let u = usage(&st, None).map_err(|e| err(backing, e))?;
    Ok((!u.plain).then(|| u.extent_size.max(1).trailing_zeros() as u8))
}

/// Refuses a backing directory a daemon serves (its lock is held), naming the holder.
pub(super) fn not_served(dir: &Path) -> Result<(), String> {
    for a in dir.ancestors() {
        if let Err(e) = squeezefs_fs::lock::probe(a) {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Err(format!("{e}; run `squeezefs compress` on the mount instead"));
            }
        }
    }
    Ok(())
}
