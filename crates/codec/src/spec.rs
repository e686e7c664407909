//! `ALG[:LEVEL]` parsing and printing, and the algorithm ids stored on disk.

use std::fmt;
use std::str::FromStr;

/// A compression algorithm. The discriminant is the id stored in container headers
/// (docs/FORMAT.md); never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Algorithm {
    None = 0,
    Zstd = 1,
    Lz4 = 2,
    Zlib = 3,
    Lzo = 4,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::None,
        Algorithm::Zstd,
        Algorithm::Lz4,
        Algorithm::Zlib,
        Algorithm::Lzo,
    ];

    /// The on-disk id.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// The algorithm for an on-disk id, `None` for an unknown id.
    pub fn from_id(id: u8) -> Option<Algorithm> {
        Self::ALL.into_iter().find(|a| a.id() == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::None => "none",
            Algorithm::Zstd => "zstd",
            Algorithm::Lz4 => "lz4",
            Algorithm::Zlib => "zlib",
            Algorithm::Lzo => "lzo",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm with a level. zstd fast levels (`zstd-fast:N`) are stored as level `-N`,
/// which is how libzstd spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CodecSpec {
    pub alg: Algorithm,
    pub level: i32,
}

/// Accepted level ranges, checked by [`CodecSpec::new`] and the parser.
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=19;
pub const ZSTD_FAST_LEVELS: std::ops::RangeInclusive<i32> = 1..=1000;
pub const ZLIB_LEVELS: std::ops::RangeInclusive<i32> = 1..=9;
pub const LZ4_LEVELS: std::ops::RangeInclusive<i32> = 1..=12;

impl CodecSpec {
    pub const NONE: CodecSpec = CodecSpec {
        alg: Algorithm::None,
        level: 0,
    };
    /// The mount default, `zstd:3`.
    pub const DEFAULT: CodecSpec = CodecSpec {
        alg: Algorithm::Zstd,
        level: 3,
    };

    /// A validated spec; the error says which levels the algorithm accepts.
    pub fn new(alg: Algorithm, level: i32) -> Result<CodecSpec, ParseError> {
        let ok = match alg {
            Algorithm::None | Algorithm::Lzo => level == 0,
            Algorithm::Zstd => ZSTD_LEVELS.contains(&level) || ZSTD_FAST_LEVELS.contains(&-level),
            Algorithm::Zlib => ZLIB_LEVELS.contains(&level),
            Algorithm::Lz4 => LZ4_LEVELS.contains(&level),
        };
        if ok {
            Ok(CodecSpec { alg, level })
        } else {
            Err(ParseError::Level {
                alg: alg.name().to_string(),
                level: level.to_string(),
                accepted: accepted_levels(alg),
            })
        }
    }

    /// The level used when `ALG` is given without one.
    pub fn default_level(alg: Algorithm) -> i32 {
        match alg {
            Algorithm::None | Algorithm::Lzo => 0,
            Algorithm::Zstd => 3,
            Algorithm::Zlib => 6,
            Algorithm::Lz4 => 1,
        }
    }
}

fn accepted_levels(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::None => "no level (write `none`)",
        Algorithm::Lzo => "no level (write `lzo`, which is LZO1X-1)",
        Algorithm::Zstd => "zstd:1 … zstd:19, or zstd-fast:1 … zstd-fast:1000",
        Algorithm::Zlib => "zlib:1 … zlib:9",
        Algorithm::Lz4 => "lz4:1 … lz4:12 (1–2 fast, 3–12 LZ4HC)",
    }
}

/// Why an `ALG[:LEVEL]` string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown compression algorithm `{0}`; choose one of none, lz4, lzo, zlib, zstd, zstd-fast")]
    Algorithm(String),
    #[error("`{level}` is not a valid level for {alg}; accepted: {accepted}")]
    Level {
        alg: String,
        level: String,
        accepted: &'static str,
    },
}

impl FromStr for CodecSpec {
    type Err = ParseError;

    /// Parses `none`, `lz4`, `lz4:9`, `lzo`, `zlib`, `zlib:9`, `zstd`, `zstd:19`,
    /// `zstd-fast`, `zstd-fast:1000` (case-insensitive, surrounding spaces ignored).
    fn from_str(s: &str) -> Result<CodecSpec, ParseError> {
        let s = s.trim().to_ascii_lowercase();
        let (name, level) = match s.split_once(':') {
            Some((n, l)) => (n.trim(), Some(l.trim())),
            None => (s.as_str(), None),
        };
        let (alg, fast) = match name {
            "none" | "off" | "no" => (Algorithm::None, false),
            "zstd" => (Algorithm::Zstd, false),
            "zstd-fast" | "zstd_fast" => (Algorithm::Zstd, true),
            "lz4" => (Algorithm::Lz4, false),
            "zlib" | "deflate" => (Algorithm::Zlib, false),
            "lzo" => (Algorithm::Lzo, false),
            other => return Err(ParseError::Algorithm(other.to_string())),
        };
        let level = match level {
            None if fast => -1,
            None => CodecSpec::default_level(alg),
            Some(text) => {
                let n: i32 = text.parse().map_err(|_| ParseError::Level {
                    alg: name.to_string(),
                    level: text.to_string(),
                    accepted: accepted_levels(alg),
                })?;
                if fast {
                    if !ZSTD_FAST_LEVELS.contains(&n) {
                        return Err(ParseError::Level {
                            alg: name.to_string(),
                            level: text.to_string(),
                            accepted: accepted_levels(alg),
                        });
                    }
                    -n
                } else if alg == Algorithm::Zstd && n < 1 {
                    // `zstd:-5` is not a spelling we accept: fast levels are `zstd-fast:N`.
                    return Err(ParseError::Level {
                        alg: name.to_string(),
                        level: text.to_string(),
                        accepted: accepted_levels(alg),
                    });
                } else {
                    n
                }
            }
        };
        CodecSpec::new(alg, level).map_err(|e| match e {
            ParseError::Level { accepted, .. } => ParseError::Level {
                alg: name.to_string(),
                level: level.abs().to_string(),
                accepted,
            },
            other => other,
        })
    }
}

impl fmt::Display for CodecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.alg {
            Algorithm::None | Algorithm::Lzo => f.write_str(self.alg.name()),
            Algorithm::Zstd if self.level < 0 => write!(f, "zstd-fast:{}", -self.level),
            alg => write!(f, "{}:{}", alg.name(), self.level),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling() {
        let cases = [
            ("none", Algorithm::None, 0),
            ("lzo", Algorithm::Lzo, 0),
            ("lz4", Algorithm::Lz4, 1),
            ("lz4:9", Algorithm::Lz4, 9),
            ("zlib", Algorithm::Zlib, 6),
            ("zlib:1", Algorithm::Zlib, 1),
            ("zstd", Algorithm::Zstd, 3),
            ("ZSTD:19", Algorithm::Zstd, 19),
            ("zstd-fast", Algorithm::Zstd, -1),
            ("zstd-fast:1000", Algorithm::Zstd, -1000),
            (" zstd : 7 ", Algorithm::Zstd, 7),
        ];
        for (text, alg, level) in cases {
            let spec: CodecSpec = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((spec.alg, spec.level), (alg, level), "{text}");
            // Display round-trips.
            assert_eq!(spec.to_string().parse::<CodecSpec>().unwrap(), spec);
        }
    }

    #[test]
    fn refuses_bad_names_and_levels_with_a_useful_message() {
        for bad in [
            "zstd:0",
            "zstd:20",
            "zstd:-3",
            "zstd-fast:0",
            "zstd-fast:1001",
            "zlib:0",
            "zlib:10",
            "lz4:13",
            "lzo:1",
            "none:1",
            "zstd:abc",
        ] {
            let err = bad.parse::<CodecSpec>().unwrap_err();
            assert!(matches!(err, ParseError::Level { .. }), "{bad}: {err}");
            assert!(err.to_string().contains("accepted"), "{bad}: {err}");
        }
        let err = "brotli:3".parse::<CodecSpec>().unwrap_err();
        assert_eq!(err, ParseError::Algorithm("brotli".into()));
        assert!(err.to_string().contains("choose one of"));
    }

    #[test]
    fn ids_are_stable() {
        assert_eq!(Algorithm::None.id(), 0);
        assert_eq!(Algorithm::Zstd.id(), 1);
        assert_eq!(Algorithm::Lz4.id(), 2);
        assert_eq!(Algorithm::Zlib.id(), 3);
        assert_eq!(Algorithm::Lzo.id(), 4);
        assert_eq!(Algorithm::from_id(5), None);
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_id(a.id()), Some(a));
        }
    }
}
