//! `squeezefs compress` on a backing directory no daemon serves: one file rewritten in
//! place through `Container::rewrite` (or staged into the packs), or copied into a new
//! container beside it.

use squeezefs_container::convert::copy_into;
use squeezefs_container::{open_as_owner, Container, FileStorage, Options};

use super::backing::{already, layout};
use super::copy::{copy_metadata, temp_beside};
use super::err::err;
use super::job::{Asked, Done, Job};
use super::props::dictionaries;
use super::stage::Staged;

/// A backing directory handled directly (no daemon).
pub(super) fn offline(args: &Asked, job: &Job, pb: &indicatif::ProgressBar) -> Result<Done, String> {
    let shape = layout(&job.backing)?;
    let codec = args.codec.unwrap_or(job.default_codec);
    // (Offline, a container's dictionary is in its superblock, not an xattr.)
    let (_, dir_dict) = dictionaries(&job.backing);
    let opts = Options {
        codec,
        extent_shift: args
            .extent_shift
            .or(shape)
            .unwrap_or(Options::default().extent_shift),
        packs: job.offline_packs(),
        ..Options::default()
    };
    if let Some(shift) = shape {
        if args.extent_shift.is_none_or(|s| s == shift) {
            let f = open_as_owner(&job.backing, true).map_err(|e| err(&job.backing, e))?;
            let mut c = Container::open(FileStorage::new(f), &opts).map_err(|e| err(&job.backing, e))?;
            // The rule's dictionary, else the directory's for a file without one.
            let has = c.dictionary_property();
            let dict = args.dict.or(dir_dict.filter(|_| has.is_none()));
            let wants_dict = dict.is_some() && dict != has;
            let wants_force = args.force && !c.force_property();
            // The logical size: the backing file's (`job.size`) is larger when the current
            // copy of an extent is its second half.
            let logical = c.size().map_err(|e| err(&job.backing, e))?;
            // (A dictionary property does not keep a file out of a pack: its record keeps it.)
            let wants_pack = job.packing(args) && !c.is_packed() && logical <= 1 << shift;
            let has_codec = match c.location() {
                Some(l) => l.codec == codec,
                None => already(&job.backing, codec, job.default_codec),
            };
            let own_shift = c.extent_size_property().map(|b| b.trailing_zeros() as u8);
            job.note_own(args, c.compression_property(), has, own_shift);
            let wants_codec = args.codec.is_some() && c.compression_property() != args.codec;
            if (args.codec.is_none() || has_codec) && !wants_dict && !wants_force && !wants_pack {
                if !wants_codec {
                    return Ok(Done::Skipped);
                }
                // Stored with it already: it only becomes the file's own property.
                c.set_compression_property(args.codec)
                    .map_err(|e| err(&job.backing, e))?;
                return Ok(Done::PropsSet);
            }
            job.changed.store(
                wants_codec || wants_dict || wants_force,
                std::sync::atomic::Ordering::Relaxed,
            );
            // The file's properties before, put back when its rewrite fails (else a later
            // run would find them set and skip it, its extents still old).
            let before = (c.force_property(), has, c.compression_property());
            let undo = |c: &mut Container<FileStorage>, e: String| {
                let _ = c.set_force_property(before.0);
                let _ = c.set_dictionary_property(before.1);
                let _ = c.set_compression_property(before.2);
                err(&job.backing, e)
            };
            let set = (|| -> Result<(), String> {
                if wants_force {
                    c.set_force_property(true).map_err(|e| e.to_string())?;
                }
                if wants_dict {
                    c.set_dictionary_property(dict).map_err(|e| e.to_string())?;
                }
                if args.codec.is_some() {
                    c.set_compression_property(Some(codec))
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            })();
            if let Err(e) = set {
                return Err(undo(&mut c, e));
            }
            if wants_pack || c.is_packed() {
                // The whole file (one extent) written again goes to the packs at write-back,
                // committed with the batch so files share blocks.
                let data = (|| -> Result<_, String> {
                    let f = open_as_owner(&job.backing, false).map_err(|e| e.to_string())?;
                    let md = f.metadata().map_err(|e| e.to_string())?;
                    let data = c.read(0, logical as usize).map_err(|e| e.to_string())?;
                    c.write(0, &data).map_err(|e| e.to_string())?;
                    Ok((f, md))
                })();
                let (f, md) = data.map_err(|e| undo(&mut c, e))?;
                let staged = Staged::new(c, f, &md).map_err(|e| err(&job.backing, e))?;
                pb.inc(job.size);
                return Ok(Done::Staging(Box::new(staged)));
            }
            if let Err(e) = c.rewrite(0..u64::MAX) {
                return Err(undo(&mut c, e.to_string()));
            }
            pb.inc(job.size);
            return Ok(Done::Rewritten { packed: false });
        }
    }
    if job.splits_links(pb) {
        return Ok(Done::LeftAlone);
    }
    let src_file = open_as_owner(&job.backing, false).map_err(|e| err(&job.backing, e))?;
    let mut src = Container::open(
        FileStorage::new(src_file.try_clone().map_err(|e| e.to_string())?),
        &opts,
    )
    .map_err(|e| err(&job.backing, e))?;
    job.note_own(
        args,
        src.compression_property(),
        src.dictionary_property(),
        src.extent_size_property().map(|b| b.trailing_zeros() as u8),
    );
    // The copy gets `--codec`, else keeps the file's own property.
    let own = args.codec.or(src.compression_property());
    let opts = Options {
        codec: own.unwrap_or(job.default_codec),
        ..opts
    };
    let (tmp, tf) = temp_beside(&job.backing).map_err(|e| err(&job.backing, e))?;
    let r = (|| {
        let mut dst = Container::open(
            FileStorage::new(tf.try_clone().map_err(|e| e.to_string())?),
            &opts,
        )
        .map_err(|e| e.to_string())?;
        if own.is_some() {
            dst.set_compression_property(own).map_err(|e| e.to_string())?;
        }
        if args.extent_shift.is_some() {
            dst.set_extent_size_property(args.extent_shift)
                .map_err(|e| e.to_string())?;
        }
        let dict = args.dict.or(src.dictionary_property()).or(dir_dict);
        if dict.is_some() {
            dst.set_dictionary_property(dict).map_err(|e| e.to_string())?;
        }
        if args.force || src.force_property() {
            dst.set_force_property(true).map_err(|e| e.to_string())?;
        }
        copy_into(&mut src, &mut dst, |n| pb.inc(n)).map_err(|e| e.to_string())?;
        copy_metadata(&src_file, &tf, false)?;
        let md = src_file.metadata().map_err(|e| e.to_string())?;
        Staged::new(dst, tf.try_clone().map_err(|e| e.to_string())?, &md)
    })();
    match r {
        Ok(staged) => Ok(Done::Copied(tmp, Some(Box::new(staged)))),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(err(&job.backing, e))
        }
    }
}
