//! zstd dictionaries for small files (the idea from the OpenZFS zstd talk that no filesystem
//! ships): a dictionary trained on a directory's small files primes the compressor with the
//! strings they share, so a 3 KB licence text compresses like the tail of a 100 KB one.
//!
//! This module is the in-memory side: training, the process-wide registry of loaded
//! dictionaries (by zstd dictionary id), and compression with one. Loading and storing
//! dictionary files is the container's job (`squeezefs_container::dicts`).
//!
//! * A dictionary is known by the id zstd's trainer writes into it (content-derived, 31
//!   bits). Every frame compressed with it carries that id in its header, which is how a
//!   reader finds the dictionary again: [`crate::decompress`] does it on its own.
//! * Registering a second, different dictionary under an id already in use is refused: a
//!   reader would otherwise decode with the wrong one.
//! * Prepared compression dictionaries (`ZSTD_CDict`) are made per level on first use and
//!   kept as long as the process runs, like the dictionaries themselves: a mount has a
//!   handful of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use zstd::zstd_safe::{self, CDict, DDict};

use crate::{Algorithm, CodecError};

/// Largest dictionary accepted (zstd's own trainer defaults to 110 KB; 1 MiB bounds what a
/// damaged or hostile file can make us allocate).
pub const MAX_DICT_SIZE: usize = 1 << 20;
/// Smallest useful dictionary (zstd refuses training below a few hundred bytes).
pub const MIN_DICT_SIZE: usize = 256;
/// Data longer than this is compressed without the dictionary: the frame's own history
/// outweighs it (measured by zstd's authors and in `squeezefs dict train`'s report), and
/// loading a prepared dictionary costs time in proportion to its tables.
pub const DICT_MAX_INPUT: usize = 128 << 10;

/// Why a dictionary was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DictError {
    #[error("not a zstd dictionary (no dictionary magic or id)")]
    NotADictionary,
    #[error("dictionary is {0} bytes; accepted: {MIN_DICT_SIZE} … {MAX_DICT_SIZE}")]
    Size(usize),
    #[error("zstd cannot load the dictionary")]
    Load,
    #[error("a different dictionary with id {0} is already loaded")]
    Conflict(u32),
    #[error("training failed: {0}")]
    Training(String),
}

/// One loaded dictionary.
pub struct Dictionary {
    id: u32,
    bytes: Vec<u8>,
    ddict: DDict<'static>,
    /// Prepared for compression, per level.
    cdicts: Mutex<HashMap<i32, Arc<CDict<'static>>>>,
}

impl Dictionary {
    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn cdict(&self, level: i32) -> Result<Arc<CDict<'static>>, CodecError> {
        let mut m = self.cdicts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = m.get(&level) {
            return Ok(c.clone());
        }
        let c = Arc::new(
            CDict::try_create(&self.bytes, level).ok_or_else(|| CodecError::Failed {
                alg: Algorithm::Zstd,
                detail: format!("cannot prepare dictionary {} at level {level}", self.id),
            })?,
        );
        m.insert(level, c.clone());
        Ok(c)
    }
}

fn registry() -> &'static RwLock<HashMap<u32, Arc<Dictionary>>> {
    static R: std::sync::OnceLock<RwLock<HashMap<u32, Arc<Dictionary>>>> = std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// The id zstd wrote into a dictionary (`None`: not a zstd dictionary, or a raw-content one).
pub fn id_of(dict: &[u8]) -> Option<u32> {
    zstd_safe::get_dict_id_from_dict(dict).map(|n| n.get())
}

/// The dictionary id named in a zstd frame's header (`None`: compressed without one).
pub fn frame_dict_id(frame: &[u8]) -> Option<u32> {
    zstd_safe::get_dict_id_from_frame(frame).map(|n| n.get())
}

/// Validates `bytes` as a zstd dictionary and makes it available under its id, which is
/// returned. Registering the same dictionary again is a no-op.
pub fn register(bytes: &[u8]) -> Result<u32, DictError> {
    if !(MIN_DICT_SIZE..=MAX_DICT_SIZE).contains(&bytes.len()) {
        return Err(DictError::Size(bytes.len()));
    }
    let id = id_of(bytes).ok_or(DictError::NotADictionary)?;
    if let Some(d) = get(id) {
        return if d.bytes == bytes {
            Ok(id)
        } else {
            Err(DictError::Conflict(id))
        };
    }
    let ddict = DDict::try_create(bytes).ok_or(DictError::Load)?;
    let d = Arc::new(Dictionary {
        id,
        bytes: bytes.to_vec(),
        ddict,
        cdicts: Mutex::default(),
    });
    let mut r = registry().write().unwrap_or_else(|p| p.into_inner());
    match r.get(&id) {
        Some(old) if old.bytes != bytes => Err(DictError::Conflict(id)),
        Some(_) => Ok(id),
        None => {
            r.insert(id, d);
            Ok(id)
        }
    }
}

/// The loaded dictionary with this id.
pub fn get(id: u32) -> Option<Arc<Dictionary>> {
    registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned()
}

/// Ids of every loaded dictionary, sorted.
pub fn loaded() -> Vec<u32> {
    let mut v: Vec<u32> = registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .copied()
        .collect();
    v.sort_unstable();
    v
}

/// Trains a dictionary of at most `max_size` bytes from `samples` (zstd's `ZDICT` trainer).
pub fn train(samples: &[&[u8]], max_size: usize) -> Result<Vec<u8>, DictError> {
    if !(MIN_DICT_SIZE..=MAX_DICT_SIZE).contains(&max_size) {
        return Err(DictError::Size(max_size));
    }
    let mut joined = Vec::with_capacity(samples.iter().map(|s| s.len()).sum());
    let mut sizes = Vec::with_capacity(samples.len());
    for s in samples.iter().filter(|s| !s.is_empty()) {
        joined.extend_from_slice(s);
        sizes.push(s.len());
    }
    zstd::dict::from_continuous(&joined, &sizes, max_size).map_err(|e| DictError::Training(e.to_string()))
}

/// Compresses `src` at `level` with dictionary `dict` into `dst` (cleared first); `Ok(false)`
/// when the result would not fit in `limit` bytes. The frame names the dictionary's id.
pub fn compress(
    dict: &Dictionary,
    level: i32,
    src: &[u8],
    dst: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, CodecError> {
    let cdict = dict.cdict(level)?;
    crate::pooled::compress_with(level, dst, limit, |cctx, out| {
        cctx.compress_using_cdict(out, src, &cdict)
    })
}

/// The prepared decompression dictionary for a frame that names `id`.
pub(crate) fn with_ddict<T>(id: u32, f: impl FnOnce(&DDict<'static>) -> T) -> Result<T, CodecError> {
    let d = get(id).ok_or(CodecError::MissingDictionary(id))?;
    Ok(f(&d.ddict))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Small JSON-like records sharing keys and phrasing: what dictionaries are for.
    pub fn records(n: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let words = [
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
        ];
        (0..n)
            .map(|i| {
                let r = next();
                format!(
                    "{{\"id\": {i}, \"name\": \"{}-{}\", \"status\": \"{}\", \"licence\": \
                     \"Permission is hereby granted, free of charge, to any person obtaining a copy\", \
                     \"count\": {}, \"tags\": [\"{}\", \"{}\"]}}\n",
                    words[(r % 8) as usize],
                    r % 1000,
                    if r & 1 == 0 { "active" } else { "retired" },
                    r % 77,
                    words[((r >> 8) % 8) as usize],
                    words[((r >> 16) % 8) as usize],
                )
                .into_bytes()
            })
            .collect()
    }

    pub fn trained() -> u32 {
        let samples = records(2000, 7);
        let refs: Vec<&[u8]> = samples.iter().map(|s| s.as_slice()).collect();
        register(&train(&refs, 16 << 10).unwrap()).unwrap()
    }

    #[test]
    fn a_dictionary_shrinks_small_records_and_frames_name_it() {
        let id = trained();
        let d = get(id).unwrap();
        let unseen = records(50, 99);
        let (mut with, mut without) = (0, 0);
        for r in &unseen {
            let mut out = Vec::new();
            assert!(compress(&d, 3, r, &mut out, r.len()).unwrap());
            assert_eq!(frame_dict_id(&out), Some(id));
            with += out.len();
            let mut back = vec![0u8; r.len()];
            crate::decompress(Algorithm::Zstd, &out, &mut back).unwrap();
            assert_eq!(&back, r);
            let mut plain = Vec::new();
            crate::compress("zstd:3".parse().unwrap(), r, &mut plain, r.len() * 2).unwrap();
            assert_eq!(frame_dict_id(&plain), None);
            without += plain.len();
        }
        assert!(with * 2 < without, "dictionary: {with} B, none: {without} B");
        // The limit still applies.
        let mut out = Vec::new();
        assert!(!compress(&d, 3, &unseen[0], &mut out, 4).unwrap());
    }

    #[test]
    fn bad_dictionaries_are_refused_and_missing_ones_are_an_error() {
        assert_eq!(register(b"short"), Err(DictError::Size(5)));
        assert_eq!(register(&[7u8; 1000]), Err(DictError::NotADictionary));
        assert!(matches!(
            register(&vec![0u8; MAX_DICT_SIZE + 1]),
            Err(DictError::Size(_))
        ));
        let id = trained();
        // Same id, other content: refused.
        let mut other = get(id).unwrap().bytes().to_vec();
        let n = other.len();
        other[n - 1] ^= 1;
        assert_eq!(register(&other), Err(DictError::Conflict(id)));
        // A frame naming a dictionary that is not loaded: a clear error, no panic.
        let r = &records(1, 5)[0];
        let mut out = Vec::new();
        compress(&get(id).unwrap(), 3, r, &mut out, r.len()).unwrap();
        let fake = id.wrapping_add(1) | 0x8000;
        assert!(get(fake).is_none());
        // Rewrite the dictionary id in the frame header (4-byte id after magic and FHD).
        let mut f = out.clone();
        let fhd = f[4];
        assert_eq!(fhd & 3, 3, "4-byte dictionary id field");
        let at = 5 + usize::from(fhd & 0x20 == 0);
        f[at..at + 4].copy_from_slice(&fake.to_le_bytes());
        let mut back = vec![0u8; r.len()];
        assert_eq!(
            crate::decompress(Algorithm::Zstd, &f, &mut back),
            Err(CodecError::MissingDictionary(fake))
        );
    }
}
