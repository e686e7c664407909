//! Reading a structure's fields: why one was rejected (`FormatError`), the little-endian
//! integer readers, and a header's codec and level, decoded and validated for superblocks
//! and location records alike (`decode_codec_shift`) and spelled for reports
//! (`codec_label`).

use squeezefs_codec::{Algorithm, CodecSpec};

use super::{MAX_EXTENT_SHIFT, MIN_EXTENT_SHIFT};

/// Why a structure was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("bad magic")]
    Magic,
    #[error("header checksum mismatch")]
    Checksum,
    #[error("format version {0} is not one this squeezefs understands (1 … 3, 5 … 7)")]
    Version(u16),
    #[error("unknown flag bits {0:#x} (written by a newer squeezefs?)")]
    Flags(u32),
    #[error("unknown property bits {0:#x} (written by a newer squeezefs?)")]
    Props(u8),
    #[error("invalid field: {0}")]
    Field(&'static str),
}

pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"))
}
pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// The extent shift and codec stored as bytes `shift`, codec id `alg` and little-endian
/// level `level` (a superblock's and a location record's shared fields), validated.
pub(crate) fn decode_codec_shift(shift: u8, alg: u8, level: [u8; 2]) -> Result<(CodecSpec, u8), FormatError> {
    if !(MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT).contains(&shift) {
        return Err(FormatError::Field("extent size"));
    }
    let alg = Algorithm::from_id(alg).ok_or(FormatError::Field("codec"))?;
    let level = i16::from_le_bytes(level) as i32;
    let codec = CodecSpec::new(alg, level).map_err(|_| FormatError::Field("codec level"))?;
    Ok((codec, shift))
}

/// How reports spell the codec and level a header records (an [`ExtentHeader`](super::ExtentHeader), a pack's
/// block header): `zstd:3`, `zstd-fast:5`, `lz4:1`, `lzo`, `zlib:6`, `none` (level 0, or a
/// codec without levels, is the codec's name alone). `stats` labels its kinds with it
/// (`usage::Kind::label`), `check` its packs' blocks (`pack::audit`).
pub fn codec_label(alg: Algorithm, level: i16) -> String {
    match (alg, level) {
        (Algorithm::None | Algorithm::Lzo, _) | (_, 0) => alg.name().into(),
        (Algorithm::Zstd, l) if l < 0 => format!("zstd-fast:{}", -(l as i32)),
        (a, l) => format!("{}:{l}", a.name()),
    }
}
