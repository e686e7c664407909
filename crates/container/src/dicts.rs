//! Dictionary files: `BACKING/.squeezefs-dicts/ID.zdict`, one per zstd dictionary, where
//! `ID` is the dictionary's id in decimal (docs/FORMAT.md, "Dictionaries").
//!
//! A dictionary is data every payload compressed with it depends on: a damaged one would
//! decode wrong bytes under a payload checksum that is still valid. So the file carries its
//! own checksummed header, and one that fails any check is refused, never loaded.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `\x89SQZDICT` |
//! | 8 | 2 | version (1) |
//! | 10 | 2 | reserved (0) |
//! | 12 | 4 | id: the zstd dictionary id, equal to the one inside the dictionary |
//! | 16 | 4 | length of the dictionary in bytes |
//! | 20 | 4 | reserved (0) |
//! | 24 | 8 | XXH3-64 of the dictionary |
//! | 32 | 8 | XXH3-64 of bytes 0 … 31 |
//! | 40 | length | the zstd dictionary |

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use squeezefs_codec::dict::{self, MAX_DICT_SIZE};
use xxhash_rust::xxh3::xxh3_64;

/// Name of the directory, in the backing root, that holds the dictionaries. The mount hides
/// it (like the statistics file).
pub const DIR_NAME: &str = ".squeezefs-dicts";
pub const MAGIC: [u8; 8] = *b"\x89SQZDICT";
pub const HEADER_LEN: usize = 40;
pub const VERSION: u16 = 1;

/// Encodes a dictionary file for `bytes` (a zstd dictionary).
pub fn encode(bytes: &[u8]) -> io::Result<Vec<u8>> {
    let id = dict::id_of(bytes).ok_or_else(|| io::Error::other("not a zstd dictionary"))?;
    let mut b = vec![0u8; HEADER_LEN];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..10].copy_from_slice(&VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&id.to_le_bytes());
    b[16..20].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    b[24..32].copy_from_slice(&xxh3_64(bytes).to_le_bytes());
    let sum = xxh3_64(&b[0..32]);
    b[32..40].copy_from_slice(&sum.to_le_bytes());
    b.extend_from_slice(bytes);
    Ok(b)
}

/// Validates a dictionary file and returns its id and the dictionary. Every field is
/// checked; lengths are bounded before anything is trusted.
pub fn decode(file: &[u8]) -> Result<(u32, &[u8]), String> {
    if file.len() < HEADER_LEN || file[0..8] != MAGIC {
        return Err("not a squeezefs dictionary file (bad magic)".into());
    }
    let u32_at = |o: usize| u32::from_le_bytes(file[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().expect("8 bytes"));
    if u64_at(32) != xxh3_64(&file[0..32]) {
        return Err("header checksum mismatch".into());
    }
    let version = u16::from_le_bytes([file[8], file[9]]);
    if version != VERSION {
        return Err(format!(
            "dictionary file version {version} is not 1 (written by a newer squeezefs?)"
        ));
    }
    let (id, len) = (u32_at(12), u32_at(16) as usize);
    if len > MAX_DICT_SIZE || file.len() != HEADER_LEN + len {
        return Err(format!(
            "length {len} does not match the file ({} bytes)",
            file.len()
        ));
    }
    let bytes = &file[HEADER_LEN..];
    if u64_at(24) != xxh3_64(bytes) {
        return Err("dictionary checksum mismatch (the dictionary is damaged)".into());
    }
    if dict::id_of(bytes) != Some(id) {
        return Err(format!("the dictionary inside is not dictionary {id}"));
    }
    Ok((id, bytes))
}

/// Path of dictionary `id` under `dir` (a `.squeezefs-dicts` directory).
pub fn path_of(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id}.zdict"))
}

/// Reads, validates and registers dictionary `id` from `dir`.
pub fn load(dir: &Path, id: u32) -> Result<(), String> {
    let path = path_of(dir, id);
    let meta = fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > (HEADER_LEN + MAX_DICT_SIZE) as u64 {
        return Err(format!(
            "{}: {} bytes is too large for a dictionary file",
            path.display(),
            meta.len()
        ));
    }
    let file = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (found, bytes) = decode(&file).map_err(|e| format!("{}: {e}", path.display()))?;
    if found != id {
        return Err(format!("{}: holds dictionary {found}, not {id}", path.display()));
    }
    dict::register(bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// Loads every dictionary in `dir` (missing directory: none). Returns the ids loaded and one
/// message per file that was refused.
pub fn load_all(dir: &Path) -> (Vec<u32>, Vec<String>) {
    let (mut ids, mut errors) = (Vec::new(), Vec::new());
    let Ok(rd) = fs::read_dir(dir) else {
        return (ids, errors);
    };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".zdict"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        match load(dir, id) {
            Ok(()) => ids.push(id),
            Err(e) => errors.push(e),
        }
    }
    ids.sort_unstable();
    (ids, errors)
}

/// Stores `bytes` (a zstd dictionary) in `dir` (created if needed) durably: written to a
/// temporary name, fsynced, renamed, and the directory fsynced. Returns its id. A file for
/// the same id that already holds this dictionary is kept.
pub fn store(dir: &Path, bytes: &[u8]) -> io::Result<u32> {
    let id = dict::id_of(bytes).ok_or_else(|| io::Error::other("not a zstd dictionary"))?;
    fs::create_dir_all(dir)?;
    let path = path_of(dir, id);
    if let Ok(old) = fs::read(&path) {
        if decode(&old).is_ok_and(|(_, b)| b == bytes) {
            return Ok(id);
        }
    }
    let tmp = dir.join(format!(".{id}.zdict.{}", std::process::id()));
    let mut f = File::create(&tmp)?;
    f.write_all(&encode(bytes)?)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, &path)?;
    File::open(dir)?.sync_all()?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_dict() -> Vec<u8> {
        let samples: Vec<Vec<u8>> = (0..600)
            .map(|i| {
                format!(
                    "{{\"user\": \"u{i}\", \"role\": \"{}\", \"enabled\": true}}\n",
                    i % 7
                )
                .into_bytes()
            })
            .collect();
        let refs: Vec<&[u8]> = samples.iter().map(|s| s.as_slice()).collect();
        dict::train(&refs, 4096).unwrap()
    }

    #[test]
    fn files_round_trip_and_every_damage_is_refused() {
        let d = sample_dict();
        let f = encode(&d).unwrap();
        let (id, back) = decode(&f).unwrap();
        assert_eq!(back, &d[..]);
        assert_eq!(Some(id), dict::id_of(&d));
        for i in (0..f.len()).step_by(7).chain(0..HEADER_LEN) {
            let mut bad = f.clone();
            bad[i] ^= 0x04;
            assert!(decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(decode(&f[..f.len() - 1]).is_err());
        assert!(decode(&f[..10]).is_err());
    }

    #[test]
    fn stored_dictionaries_load_by_id_and_damaged_ones_do_not() {
        let dir = std::env::temp_dir().join(format!("sqz-dicts-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let d = sample_dict();
        let id = store(&dir, &d).unwrap();
        assert_eq!(store(&dir, &d).unwrap(), id);
        assert_eq!(load_all(&dir), (vec![id], vec![]));
        assert!(dict::get(id).is_some());
        // A damaged file is refused with its path named.
        let mut f = fs::read(path_of(&dir, id)).unwrap();
        let n = f.len();
        f[n - 3] ^= 1;
        fs::write(path_of(&dir, id), &f).unwrap();
        let (ids, errs) = load_all(&dir);
        assert!(ids.is_empty());
        assert!(
            errs[0].contains(&format!("{id}.zdict")) && errs[0].contains("damaged"),
            "{errs:?}"
        );
        // A file named for another id is refused.
        fs::write(path_of(&dir, 12345), encode(&d).unwrap()).unwrap();
        assert!(load(&dir, 12345).unwrap_err().contains("not 12345"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
