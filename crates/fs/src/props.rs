//! Compression properties, seen through the mount as extended attributes (like
//! `btrfs property` and ZFS dataset properties):
//!
//! * `user.squeezefs.compression` — `zstd:9`, `zstd-fast:5`, `lz4`, `zlib:6`, `lzo`, `none`
//! * `user.squeezefs.extent_size` — `4K` … `1M` (a power of two)
//! * `user.squeezefs.dictionary` — a zstd dictionary id (decimal) from the backing
//!   directory's `.squeezefs-dicts/` (`squeezefs dict train` sets it): small zstd data
//!   written afterwards is compressed with it
//! * `user.squeezefs.background_compression` — a codec spec as for `compression`: the
//!   codec and level the background pass (`crate::background`) recompresses extents to
//!   while the mount is idle; `none` keeps the pass away. Unlike the others it applies to
//!   everything below a directory, made before or after it was set (the pass carries it
//!   down its walk), and a file keeps it as an xattr on its backing file, not in its
//!   superblock (the pass reads it; nothing else needs it)
//! * `user.squeezefs.compression_force` — `on`: every extent of the file (of new files
//!   made in the directory) is compressed as with the mount option `compress-force=`: no
//!   heuristic, no incompressible-file backoff, no early abort, no content-type check.
//!   Removing it is turning it off
//! * `user.squeezefs.rules` — directories only: compression rules by file name
//!   (`crate::rules`), applied to each file made in the directory by its name, over the
//!   directory's own properties
//!
//! A directory keeps them as real xattrs on its backing directory; a regular file keeps them
//! in its container superblock (so they cost no extra syscall at open, and travel with the
//! file's data). New entries inherit their parent directory's properties when created; a
//! file's own property beats its directory's, a directory's beats the mount option.

use std::ffi::CString;
use std::os::fd::AsFd;
use std::sync::Arc;

use squeezefs_codec::CodecSpec;

use crate::rules::Rules;
use crate::{parse_extent_size, sys};

pub const COMPRESSION: &str = "user.squeezefs.compression";
pub const EXTENT_SIZE: &str = "user.squeezefs.extent_size";
pub const DICTIONARY: &str = "user.squeezefs.dictionary";
pub const BACKGROUND: &str = "user.squeezefs.background_compression";
pub const RULES: &str = "user.squeezefs.rules";
pub const FORCE: &str = "user.squeezefs.compression_force";
/// On the backing root: some directory or file was given `BACKGROUND` through a mount, so
/// the background pass walks the tree at mount even without the mount option. Hidden from
/// the mount (it would be the mount root's xattr).
pub const BACKGROUND_SEEN: &str = "user.squeezefs.background_seen";
/// Not a property but a request (`squeezefs compress` through a mount): setting it on a
/// regular file rewrites its extents with the codec in force now, crash-safely, inside the
/// daemon (so no write can slip between a read and its rewrite). The value is empty (the
/// whole file) or `OFFSET:LENGTH` in bytes. Never stored, never listed.
pub const REWRITE: &str = "user.squeezefs.rewrite";
/// On the mount's root: `setxattr` runs a pack reclaim round now; `getxattr` says what the
/// last round did.
pub const RECLAIM: &str = "user.squeezefs.reclaim";

/// Parses a rewrite request's value into a byte range.
pub fn parse_rewrite(v: &[u8]) -> Option<std::ops::Range<u64>> {
    let s = std::str::from_utf8(v).ok()?.trim_end_matches('\0').trim();
    if s.is_empty() {
        return Some(0..u64::MAX);
    }
    let (o, l) = s.split_once(':')?;
    let (o, l): (u64, u64) = (o.parse().ok()?, l.parse().ok()?);
    Some(o..o.saturating_add(l))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prop {
    Compression,
    ExtentSize,
    Dictionary,
    Background,
    Rules,
    Force,
}

impl Prop {
    pub const ALL: [Prop; 6] = [
        Prop::Compression,
        Prop::Force,
        Prop::ExtentSize,
        Prop::Dictionary,
        Prop::Background,
        Prop::Rules,
    ];

    /// The property an xattr name stands for (`None`: an ordinary xattr).
    pub fn from_xattr(name: &[u8]) -> Option<Prop> {
        match name {
            n if n == COMPRESSION.as_bytes() => Some(Prop::Compression),
            n if n == EXTENT_SIZE.as_bytes() => Some(Prop::ExtentSize),
            n if n == DICTIONARY.as_bytes() => Some(Prop::Dictionary),
            n if n == BACKGROUND.as_bytes() => Some(Prop::Background),
            n if n == RULES.as_bytes() => Some(Prop::Rules),
            n if n == FORCE.as_bytes() => Some(Prop::Force),
            _ => None,
        }
    }

    pub fn xattr(self) -> &'static str {
        match self {
            Prop::Compression => COMPRESSION,
            Prop::ExtentSize => EXTENT_SIZE,
            Prop::Dictionary => DICTIONARY,
            Prop::Background => BACKGROUND,
            Prop::Rules => RULES,
            Prop::Force => FORCE,
        }
    }

    /// The most bytes a stored value of this property may take.
    pub fn max_len(self) -> usize {
        match self {
            Prop::Rules => crate::rules::MAX_LEN + 16,
            _ => 256,
        }
    }

    pub fn cname(self) -> CString {
        CString::new(self.xattr()).expect("no NUL")
    }
}

/// A valid property value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Codec(CodecSpec),
    /// log2 of the extent size.
    Shift(u8),
    /// A zstd dictionary id (never 0).
    Dict(u32),
    /// Compression rules by file name (never empty).
    Rules(Arc<Rules>),
    /// The force property, set (its absence is its being off).
    Force,
}

/// Parses a value as `setfattr` delivers it (trailing NULs and whitespace ignored); the
/// error says what is accepted.
pub fn parse(prop: Prop, raw: &[u8]) -> Result<Value, String> {
    let untrimmed = std::str::from_utf8(raw)
        .map_err(|_| "value is not UTF-8".to_string())?
        .trim_end_matches('\0');
    let text = untrimmed.trim();
    match prop {
        Prop::Compression | Prop::Background => text
            .parse::<CodecSpec>()
            .map(Value::Codec)
            .map_err(|e| e.to_string()),
        Prop::ExtentSize => parse_extent_size(text)
            .map(Value::Shift)
            .map_err(|e| e.replace("extent_size=", "")),
        Prop::Dictionary => match text.parse::<u32>() {
            Ok(id) if id != 0 => Ok(Value::Dict(id)),
            _ => Err(format!(
                "`{text}` is not a dictionary id (a number as `squeezefs dict list` shows)"
            )),
        },
        Prop::Force => match text {
            "on" | "1" | "yes" | "true" => Ok(Value::Force),
            "off" | "0" | "no" | "false" => Err(format!(
                "`{text}`: force is off where the property is not set; remove it instead \
                 (`squeezefs property set PATH compression_force off` does)"
            )),
            _ => Err(format!("`{text}` is not `on`")),
        },
        // (Untrimmed: the columns an error names are the value's as given.)
        Prop::Rules => match Rules::shared(untrimmed) {
            Ok(r) if r.is_empty() => Err("no rules (to remove them, remove the property)".into()),
            Ok(r) => Ok(Value::Rules(r)),
            Err(e) => Err(e.to_string()),
        },
    }
}

/// The canonical text of a value (what getxattr returns).
pub fn format(v: &Value) -> String {
    match *v {
        Value::Codec(c) => c.to_string(),
        Value::Shift(s) => crate::sizes::format_extent_size(s),
        Value::Dict(id) => id.to_string(),
        Value::Rules(ref r) => r.to_string(),
        Value::Force => "on".into(),
    }
}

/// A directory's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirProps {
    pub codec: Option<CodecSpec>,
    pub shift: Option<u8>,
    pub dict: Option<u32>,
    /// `FORCE` is set.
    pub force: bool,
    /// `BACKGROUND` set on the directory itself (the pass inherits it down the tree).
    pub background: Option<CodecSpec>,
    pub rules: Option<Arc<Rules>>,
}

impl DirProps {
    pub fn get(&self, p: Prop) -> Option<Value> {
        match p {
            Prop::Compression => self.codec.map(Value::Codec),
            Prop::ExtentSize => self.shift.map(Value::Shift),
            Prop::Dictionary => self.dict.map(Value::Dict),
            Prop::Background => self.background.map(Value::Codec),
            Prop::Rules => self.rules.clone().map(Value::Rules),
            Prop::Force => self.force.then_some(Value::Force),
        }
    }

    /// What a file named `name` made in this directory gets as its own properties: the
    /// directory's, with what the first rule matching `name` sets over them (the
    /// directory's rules, else `mount_rules`). Also the rule, for a log line.
    pub fn for_new_file(&self, name: &[u8], mount_rules: Option<&Arc<Rules>>) -> (DirProps, Option<String>) {
        let mut d = DirProps {
            rules: None,
            background: None,
            ..self.clone()
        };
        let rules = self.rules.as_ref().or(mount_rules);
        let Some((_, rule)) = rules.and_then(|r| r.matching(name)) else {
            return (d, None);
        };
        let s = rule.settings;
        d.codec = s.codec.or(d.codec);
        d.shift = s.shift.or(d.shift);
        d.dict = s.dict.or(d.dict);
        d.force |= s.force;
        (d, Some(rule.to_string()))
    }

    pub fn set(&mut self, v: Option<Value>, p: Prop) {
        match (p, v) {
            (Prop::Compression, Some(Value::Codec(c))) => self.codec = Some(c),
            (Prop::Compression, None) => self.codec = None,
            (Prop::ExtentSize, Some(Value::Shift(s))) => self.shift = Some(s),
            (Prop::ExtentSize, None) => self.shift = None,
            (Prop::Dictionary, Some(Value::Dict(d))) => self.dict = Some(d),
            (Prop::Dictionary, None) => self.dict = None,
            (Prop::Background, Some(Value::Codec(c))) => self.background = Some(c),
            (Prop::Background, None) => self.background = None,
            (Prop::Rules, Some(Value::Rules(r))) => self.rules = Some(r),
            (Prop::Rules, None) => self.rules = None,
            (Prop::Force, v) => self.force = v == Some(Value::Force),
            _ => {}
        }
    }
}

/// Reads a backing directory's properties. A value that does not parse (written around
/// squeezefs) is ignored with a warning naming the directory.
pub fn read_dir(fd: impl AsFd, describe: impl Fn() -> String) -> DirProps {
    let mut d = DirProps::default();
    for p in Prop::ALL {
        let raw = match sys::xattr_get(&fd, &p.cname(), p.max_len()) {
            Ok(raw) => raw,
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => {
                log::warn!(
                    "{}: ignoring {}: longer than {} bytes",
                    describe(),
                    p.xattr(),
                    p.max_len()
                );
                continue;
            }
            Err(_) => continue,
        };
        match parse(p, &raw) {
            Ok(v) => d.set(Some(v), p),
            Err(e) => log::warn!("{}: ignoring {}: {e}", describe(), p.xattr()),
        }
    }
    d
}

/// Stores (or with `None` removes) one property as an xattr of a backing directory or file.
pub fn write_xattr(fd: impl AsFd, p: Prop, v: Option<Value>, flags: i32) -> std::io::Result<()> {
    match v {
        Some(v) => sys::xattr_set(fd, &p.cname(), format(&v).as_bytes(), flags),
        None => sys::xattr_remove(fd, &p.cname()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_print_canonically() {
        assert_eq!(
            parse(Prop::Compression, b"zstd:9\0"),
            Ok(Value::Codec("zstd:9".parse().unwrap()))
        );
        assert_eq!(format(&parse(Prop::Compression, b" zstd \n").unwrap()), "zstd:3");
        assert_eq!(format(&parse(Prop::Compression, b"none").unwrap()), "none");
        assert_eq!(parse(Prop::ExtentSize, b"1M"), Ok(Value::Shift(20)));
        assert_eq!(format(&Value::Shift(20)), "1M");
        assert_eq!(format(&parse(Prop::ExtentSize, b"65536").unwrap()), "64K");
        for bad in [&b"zstd:99"[..], b"gzip", b"", b"\xff"] {
            assert!(parse(Prop::Compression, bad).is_err());
        }
        for bad in [&b"3K"[..], b"2M", b"1K", b"big"] {
            let e = parse(Prop::ExtentSize, bad).unwrap_err();
            assert!(!e.is_empty());
        }
        assert_eq!(
            Prop::from_xattr(b"user.squeezefs.compression"),
            Some(Prop::Compression)
        );
        assert_eq!(Prop::from_xattr(b"user.other"), None);
        assert_eq!(
            Prop::from_xattr(b"user.squeezefs.background_compression"),
            Some(Prop::Background)
        );
        assert_eq!(
            parse(Prop::Background, b"zstd:15\0"),
            Ok(Value::Codec("zstd:15".parse().unwrap()))
        );
        assert!(parse(Prop::Background, b"zstd:42").is_err());
        assert_eq!(parse(Prop::Dictionary, b"123456\0"), Ok(Value::Dict(123456)));
        assert_eq!(format(&Value::Dict(42)), "42");
        for bad in [&b"0"[..], b"-1", b"abc", b"99999999999"] {
            assert!(parse(Prop::Dictionary, bad).is_err());
        }
    }
}
