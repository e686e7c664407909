//! `squeezefs compress` on a mount, through the daemon: one file rewritten in place (the
//! `user.squeezefs.rewrite` request, in pieces) or copied through the mount and renamed
//! over it; the properties an empty file gets; and the pack reclaim round asked at the end.

use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use squeezefs_fs::props::{Prop, Value};
use squeezefs_fs::{props, sys};

use super::backing::{already, is_packed, layout};
use super::copy::{copy_data, copy_metadata, rename_over, temp_beside};
use super::err::err;
use super::job::{Asked, Done, Job, Packing};
use super::props::{dictionaries, own_codec, own_shift, own_value, set_prop};

fn cstring(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// An empty file on a mount gets the properties asked (its data, written later, uses
/// them; its extent size can be set only now); whether any changed.
pub(super) fn set_asked(path: &Path, args: &Asked) -> Result<bool, String> {
    let f = File::open(path).map_err(|e| err(path, e))?;
    let mut changed = false;
    for (p, v) in [
        (Prop::Compression, args.codec.map(Value::Codec)),
        (Prop::ExtentSize, args.extent_shift.map(Value::Shift)),
        (Prop::Dictionary, args.dict.map(Value::Dict)),
        (Prop::Force, args.force.then_some(Value::Force)),
    ] {
        if v.is_some() {
            changed |= set_prop(&f, p, v).map_err(|e| err(path, e))?;
        }
    }
    Ok(changed)
}

/// A file on a mount, through the daemon.
pub(super) fn mounted(args: &Asked, job: &Job, pb: &indicatif::ProgressBar) -> Result<Done, String> {
    let shape = layout(&job.backing)?;
    // `--codec`, else the file's own property (new files take their directory's when
    // created), else the mount's.
    job.note_own_mounted(args);
    let file_codec = own_codec(&job.path);
    let own = args.codec.or(file_codec);
    let codec = own.unwrap_or(job.default_codec);
    let (file_dict, dir_dict) = dictionaries(&job.path);
    // The rule's dictionary, else the directory's for a file without one.
    let dict = args.dict.or(dir_dict.filter(|_| file_dict.is_none()));
    let wants_dict = dict.is_some() && dict != file_dict;
    let file_force = own_value(&job.path, Prop::Force).is_some();
    let wants_force = args.force && !file_force;
    if let Some(shift) = shape {
        if args.extent_shift.is_none_or(|s| s == shift) {
            let was_packed = is_packed(&job.backing);
            let wants_pack = job.packing(args) && job.size <= 1 << shift && !was_packed;
            let wants_codec = args.codec.is_some() && file_codec != args.codec;
            if already(&job.backing, codec, job.default_codec) && !wants_dict && !wants_force && !wants_pack {
                if !wants_codec {
                    return Ok(Done::Skipped);
                }
                // Stored with it already: it only becomes the file's own property.
                let f = File::open(&job.path).map_err(|e| err(&job.path, e))?;
                set_prop(&f, Prop::Compression, Some(Value::Codec(codec))).map_err(|e| err(&job.path, e))?;
                return Ok(Done::PropsSet);
            }
            job.changed.store(
                wants_codec || wants_dict || wants_force,
                std::sync::atomic::Ordering::Relaxed,
            );
            let f = File::open(&job.path).map_err(|e| err(&job.path, e))?;
            let r = (|| -> Result<(), String> {
                if wants_dict {
                    set_prop(&f, Prop::Dictionary, dict.map(Value::Dict))?;
                }
                if wants_force {
                    set_prop(&f, Prop::Force, Some(Value::Force))?;
                }
                if args.codec.is_some() {
                    set_prop(&f, Prop::Compression, Some(Value::Codec(codec)))?;
                }
                // In pieces, so the progress bar moves on big files.
                const STEP: u64 = 64 << 20;
                let mut off = 0;
                while off < job.size {
                    let v = format!("{off}:{STEP}");
                    sys::xattr_set(&f, &cstring(props::REWRITE), v.as_bytes(), 0)
                        .map_err(|e| format!("rewrite: {e} (the daemon's log says why)"))?;
                    pb.inc(STEP.min(job.size - off));
                    off += STEP;
                }
                Ok(())
            })();
            if let Err(e) = r {
                // The properties it had are put back (best effort): else a later run would
                // find them set and skip it, its extents still old.
                let _ = set_prop(&f, Prop::Dictionary, file_dict.map(Value::Dict));
                let _ = set_prop(&f, Prop::Force, file_force.then_some(Value::Force));
                let _ = set_prop(&f, Prop::Compression, file_codec.map(Value::Codec));
                return Err(err(&job.path, e));
            }
            // A packed file rewritten on a mount that packs stays packed; on one that does
            // not (nopack), it becomes a container of its own.
            let packed = wants_pack || (was_packed && matches!(job.packs, Packing::Mount(true)));
            return Ok(Done::Rewritten { packed });
        }
    }
    if job.splits_links(pb) {
        return Ok(Done::LeftAlone);
    }
    let mut src = File::open(&job.path).map_err(|e| err(&job.path, e))?;
    let before = src.metadata().map_err(|e| err(&job.path, e))?;
    let (tmp, mut tf) = temp_beside(&job.path).map_err(|e| err(&job.path, e))?;
    let r = (|| {
        // The daemon gave the copy what a file of its temporary name gets (a rule may match
        // that name, or none the real one): each property is set on it while it is empty
        // (an extent size can be set only then) to what is asked, else the file's own, else
        // what a file of its real name made now gets (its directory's, and its rule's).
        let own_shift = own_shift(&job.path);
        for (p, v) in [
            (Prop::Compression, own.or(job.create.codec).map(Value::Codec)),
            (
                Prop::ExtentSize,
                args.extent_shift
                    .or(own_shift)
                    .or(job.create.shift)
                    .map(Value::Shift),
            ),
            (
                Prop::Dictionary,
                args.dict.or(file_dict).or(job.create.dict).map(Value::Dict),
            ),
            (
                Prop::Force,
                (args.force || file_force || job.create.force).then_some(Value::Force),
            ),
        ] {
            if p == Prop::ExtentSize && v.is_none() {
                // Removing the property keeps the extent size the copy has (its temporary
                // name's rule may have given it one): the mount's first, then none.
                let has = sys::xattr_get(&tf, &p.cname(), p.max_len()).is_ok();
                if let (true, Some(d)) = (has, job.default_shift) {
                    set_prop(&tf, p, Some(Value::Shift(d)))?;
                }
            }
            set_prop(&tf, p, v)?;
        }
        // The file's own background_compression (not something a new file gets).
        set_prop(&tf, Prop::Background, own_value(&job.path, Prop::Background))?;
        copy_data(&mut src, &mut tf, before.len(), pb)?;
        copy_metadata(&src, &tf, true)?;
        tf.sync_all().map_err(|e| e.to_string())?;
        let now = std::fs::symlink_metadata(&job.path).map_err(|e| e.to_string())?;
        if (now.ino(), now.len(), now.mtime(), now.mtime_nsec())
            != (before.ino(), before.len(), before.mtime(), before.mtime_nsec())
        {
            return Err("changed while being compressed; left as it was (run again)".into());
        }
        rename_over(&tmp, &job.path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(|e| err(&job.path, e))?;
    // The copy was fsync'ed through the mount: if the daemon packed it, its record is there.
    Ok(Done::Converted {
        packed: is_packed(&job.backing),
    })
}

/// Asks the daemon of the mount at `mnt` for a pack reclaim round now
/// (`user.squeezefs.reclaim` on its root), which retires the packs in use first: files
/// rewritten out of packs left their old bytes as garbage in the pack the mount appends to.
/// Returns the bytes it freed.
pub(super) fn reclaim_round(mnt: &Path) -> Result<u64, String> {
    let root = File::open(mnt).map_err(|e| err(mnt, e))?;
    let name = cstring(props::RECLAIM);
    sys::xattr_set(&root, &name, b"1", 0).map_err(|e| err(mnt, format!("pack reclaim round: {e}")))?;
    let last =
        sys::xattr_get(&root, &name, 4096).map_err(|e| err(mnt, format!("pack reclaim round: {e}")))?;
    let doc: serde_json::Value =
        serde_json::from_slice(&last).map_err(|e| err(mnt, format!("pack reclaim round: {e}")))?;
    Ok(doc["bytes_freed"].as_u64().unwrap_or(0))
}
