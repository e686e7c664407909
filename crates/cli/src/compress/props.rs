//! A file's properties as `squeezefs compress` reads and sets them: its own, read through
//! the mount (`own_*`), one set on a mount when it differs (`set_prop`), and the
//! dictionary of a file and of its directory (`dictionaries`).

use std::fs::File;
use std::path::Path;

use squeezefs_codec::CodecSpec;
use squeezefs_fs::props::{Prop, Value};
use squeezefs_fs::{props, sys};

/// A file's own property `p`, read through the mount.
pub(super) fn own_value(path: &Path, p: Prop) -> Option<Value> {
    let f = File::open(path).ok()?;
    let v = sys::xattr_get(&f, &p.cname(), p.max_len()).ok()?;
    props::parse(p, &v).ok()
}

/// A file's own compression property, read through the mount.
pub(super) fn own_codec(path: &Path) -> Option<CodecSpec> {
    match own_value(path, Prop::Compression)? {
        Value::Codec(c) => Some(c),
        _ => None,
    }
}

/// A file's own extent size (log2), read through the mount.
pub(super) fn own_shift(path: &Path) -> Option<u8> {
    match own_value(path, Prop::ExtentSize)? {
        Value::Shift(s) => Some(s),
        _ => None,
    }
}

/// A file's own dictionary, read through the mount.
pub(super) fn own_dict(path: &Path) -> Option<u32> {
    match own_value(path, Prop::Dictionary)? {
        Value::Dict(d) => Some(d),
        _ => None,
    }
}

/// Sets property `p` of a file on a mount to `v` when it differs (`None`: removes it);
/// whether it changed.
pub(super) fn set_prop(f: &File, p: Prop, v: Option<Value>) -> Result<bool, String> {
    let name = p.cname();
    let now = sys::xattr_get(f, &name, p.max_len())
        .ok()
        .and_then(|raw| props::parse(p, &raw).ok());
    if now == v {
        return Ok(false);
    }
    let what = p.xattr().trim_start_matches("user.squeezefs.");
    match v {
        Some(v) => sys::xattr_set(f, &name, props::format(&v).as_bytes(), 0)
            .map_err(|e| format!("setting its {what} to {}: {e}", props::format(&v)))?,
        None => match sys::xattr_remove(f, &name) {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => {
                return Err(format!("removing its {what}: {e}"))
            }
            _ => {}
        },
    }
    Ok(true)
}

/// A file's own dictionary property, and its directory's (`squeezefs dict train` sets it
/// on directories; a file written there afterwards gets it, and `compress` gives it to the
/// files that were there before). `path` may be on a mount or in a backing directory: both
/// show a directory's property as the same xattr.
pub(super) fn dictionaries(path: &Path) -> (Option<u32>, Option<u32>) {
    let get = |p: &Path| {
        crate::property::own(p, Prop::Dictionary)
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
    };
    let dir = path.parent().and_then(&get);
    (get(path), dir)
}
