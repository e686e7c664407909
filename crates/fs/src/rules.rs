//! Compression rules by file name (issue 31): the `rules` property of a directory
//! (`user.squeezefs.rules`, inherited by the directories made in it, like `compression`) and
//! the mount option `rules=` (the default where no directory has its own). An ordered list
//! of `GLOBS=SETTINGS`, separated by `;`; the first rule one of whose globs matches a new
//! file's name decides its settings:
//!
//! ```text
//! *.log,*.txt=zstd:9; *.sqlite,*.db=zstd:1,extent_size=16K; *.jpg,*.png,*.zst=none
//! *.csv=zstd:6,force
//! ```
//!
//! * GLOBS: comma-separated shell globs matched against the file's name (not its path):
//!   `*`, `?`, `[a-z]`, `{jpg,jpeg}` (`globset`, the matcher ripgrep uses).
//! * SETTINGS: comma-separated, each at most once: a codec as the `compression` property
//!   takes it (`none`, `lz4`, `zstd:9`, `zstd-fast:5`, …), `extent_size=SIZE` (4K … 1M, a
//!   power of two), `dictionary=ID`, `force` (the file's `compression_force` property:
//!   every extent compressed, untried by the heuristic, as with `compress-force=`).
//!
//! A rule is applied when a file is made: what it sets becomes the file's own properties
//! (as a directory's `compression` does), over its directory's; a property set on the file
//! afterwards beats it. Renaming a file later changes nothing of it. This module is pure:
//! parsing, the canonical text, matching.

use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use globset::{Glob, GlobSet, GlobSetBuilder};
use squeezefs_codec::CodecSpec;

use crate::sizes::parse_extent_size;

/// Longest `rules` value accepted (a directory's xattr, a mount option), as given and in
/// its canonical form (which `getfattr` shows and directories store).
pub const MAX_LEN: usize = 4000;
/// Most rules, and most globs in all of them: each directory with rules holds them
/// compiled (measured: up to ~170 KiB for 64 globs that need regexes, ~40 KiB for 64
/// `*.ext`), so a value any user may set must stay small. Equal texts share one
/// compiled copy ([`Rules::shared`]).
pub const MAX_RULES: usize = 32;
pub const MAX_GLOBS: usize = 64;

/// What a rule sets for the files it matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub codec: Option<CodecSpec>,
    /// log2 of the extent size.
    pub shift: Option<u8>,
    pub dict: Option<u32>,
    /// The force property.
    pub force: bool,
}

/// One `GLOBS=SETTINGS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub globs: Vec<String>,
    pub settings: Settings,
}

/// An ordered list of rules, their globs compiled into one set.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    pub list: Vec<Rule>,
    /// Every glob of every rule, in order; `owner[i]` is the rule glob `i` belongs to.
    set: GlobSet,
    owner: Vec<usize>,
}

impl PartialEq for Rules {
    fn eq(&self, other: &Rules) -> bool {
        self.list == other.list
    }
}

impl Eq for Rules {}

/// Why a rules text was refused: where (a 1-based character column) and what was
/// expected there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rules, column {}: {}", self.column, self.message)
    }
}

impl std::error::Error for RuleError {}

const SETTINGS_HELP: &str = "a codec (none, lz4[:1-12], lzo, zlib[:1-9], zstd[:1-19], \
                             zstd-fast[:1-1000]), force, extent_size=SIZE or dictionary=ID";

/// Splits `s` (starting at byte `base` of the whole text) at each `sep` outside `[…]` and
/// `{…}` and not escaped by a `\` outside `[…]` (globset's escape on Unix: `\,` is a literal
/// comma; inside a class a `\` is itself): the pieces with their byte offsets.
fn split_outside(s: &str, base: usize, sep: char) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut depth_brace, mut in_class, mut start) = (0usize, false, 0usize);
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if std::mem::take(&mut escaped) {
            continue;
        }
        match c {
            '\\' if !in_class => escaped = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class => depth_brace += 1,
            '}' if !in_class => depth_brace = depth_brace.saturating_sub(1),
            c if c == sep && !in_class && depth_brace == 0 => {
                out.push((base + start, &s[start..i]));
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push((base + start, &s[start..]));
    out
}

/// Where `s` opens a `[` or `{` it does not close (which would swallow the `=` and
/// separators after it).
fn unclosed(s: &str) -> Option<(usize, char)> {
    let (mut braces, mut class): (Vec<usize>, Option<usize>) = (Vec::new(), None);
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if std::mem::take(&mut escaped) {
            continue;
        }
        match c {
            '\\' if class.is_none() => escaped = true,
            '[' if class.is_none() => class = Some(i),
            ']' if class.is_some() => class = None,
            '{' if class.is_none() => braces.push(i),
            '}' if class.is_none() => {
                braces.pop();
            }
            _ => {}
        }
    }
    class
        .map(|i| (i, '['))
        .or_else(|| braces.first().map(|&i| (i, '{')))
}

/// The first `=` of `s` outside `[…]` and `{…}`.
fn first_eq(s: &str) -> Option<usize> {
    let pieces = split_outside(s, 0, '=');
    (pieces.len() > 1).then(|| pieces[0].1.len())
}

impl Rules {
    /// Parses a rules text (trailing NULs and whitespace ignored, as `setfattr` may add
    /// them); an empty text is no rules.
    pub fn parse(text: &str) -> Result<Rules, RuleError> {
        let text = text.trim_end_matches('\0');
        // (Characters before byte `byte`, a boundary or not: never slices mid-character.)
        let col = |byte: usize| text.char_indices().take_while(|&(i, _)| i < byte).count() + 1;
        let err = |byte: usize, message: String| RuleError {
            column: col(byte),
            message,
        };
        if text.len() > MAX_LEN {
            return Err(err(MAX_LEN, format!("longer than {MAX_LEN} bytes")));
        }
        let mut rules = Vec::new();
        let mut builder = GlobSetBuilder::new();
        let mut owner = Vec::new();
        for (at, raw) in split_outside(text, 0, ';') {
            if raw.trim().is_empty() {
                continue;
            }
            let lead = raw.len() - raw.trim_start().len();
            let (at, raw) = (at + lead, raw.trim());
            if let Some((i, c)) = unclosed(raw) {
                return Err(err(at + i, format!("`{c}` is not closed in `{raw}`")));
            }
            let Some(eq) = first_eq(raw) else {
                return Err(err(
                    at + raw.len(),
                    format!("`{raw}` has no `=`: expected GLOBS=SETTINGS, e.g. `*.log=zstd:9`"),
                ));
            };
            if rules.len() == MAX_RULES {
                return Err(err(at, format!("more than {MAX_RULES} rules")));
            }
            let mut globs = Vec::new();
            for (gat, g) in split_outside(&raw[..eq], at, ',') {
                let lead = g.len() - g.trim_start().len();
                let (gat, g) = (gat + lead, g.trim());
                if g.is_empty() {
                    return Err(err(
                        gat,
                        "expected a glob such as `*.log` before `,` or `=`".into(),
                    ));
                }
                if g.contains('/') {
                    return Err(err(
                        gat,
                        format!("`{g}`: a glob matches a file's name, which has no `/`"),
                    ));
                }
                let glob =
                    Glob::new(g).map_err(|e| err(gat, format!("`{g}` is not a glob: {}", e.kind())))?;
                if owner.len() == MAX_GLOBS {
                    return Err(err(gat, format!("more than {MAX_GLOBS} globs")));
                }
                builder.add(glob);
                owner.push(rules.len());
                globs.push(g.to_string());
            }
            let mut settings = Settings::default();
            let mut any = false;
            for (sat, s) in split_outside(&raw[eq + 1..], at + eq + 1, ',') {
                let lead = s.len() - s.trim_start().len();
                let (sat, s) = (sat + lead, s.trim());
                if s.is_empty() {
                    return Err(err(sat, format!("expected {SETTINGS_HELP}")));
                }
                let twice = |what: &str| err(sat, format!("{what} is given twice in this rule"));
                match s.split_once('=') {
                    Some((k, v)) if k.trim() == "extent_size" || k.trim() == "extent-size" => {
                        if settings.shift.is_some() {
                            return Err(twice("extent_size"));
                        }
                        let shift = parse_extent_size(v.trim())
                            .map_err(|e| err(sat, e.replace("extent_size=", "extent_size ")))?;
                        settings.shift = Some(shift);
                    }
                    Some((k, v)) if k.trim() == "dictionary" || k.trim() == "dict" => {
                        if settings.dict.is_some() {
                            return Err(twice("dictionary"));
                        }
                        match v.trim().parse::<u32>() {
                            Ok(id) if id != 0 => settings.dict = Some(id),
                            _ => {
                                return Err(err(
                                    sat,
                                    format!(
                                    "`{}` is not a dictionary id (a number as `squeezefs dict list` shows)",
                                    v.trim()
                                ),
                                ))
                            }
                        }
                    }
                    Some((k, _)) => {
                        return Err(err(
                            sat,
                            format!("unknown setting `{}`: expected {SETTINGS_HELP}", k.trim()),
                        ))
                    }
                    None if s == "force" => {
                        if settings.force {
                            return Err(twice("force"));
                        }
                        settings.force = true;
                    }
                    None => {
                        if settings.codec.is_some() {
                            return Err(twice("a codec"));
                        }
                        let codec = s
                            .parse::<CodecSpec>()
                            .map_err(|e| err(sat, format!("`{s}`: {e}; expected {SETTINGS_HELP}")))?;
                        settings.codec = Some(codec);
                    }
                }
                any = true;
            }
            if !any {
                return Err(err(at + eq + 1, format!("expected {SETTINGS_HELP}")));
            }
            rules.push(Rule { globs, settings });
        }
        let set = builder
            .build()
            .map_err(|e| err(0, format!("globs do not compile: {e}")))?;
        let r = Rules {
            list: rules,
            set,
            owner,
        };
        let canonical = r.to_string().len();
        if canonical > MAX_LEN {
            return Err(err(
                text.len(),
                format!(
                    "{canonical} bytes once written out in full (`lz4` as `lz4:1`, …): more than {MAX_LEN}"
                ),
            ));
        }
        Ok(r)
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// [`Rules::parse`], sharing the compiled rules with every other holder of the same
    /// canonical text (directories copy their parent's rules, so most are equal).
    pub fn shared(text: &str) -> Result<Arc<Rules>, RuleError> {
        static SHARED: Mutex<Vec<Weak<Rules>>> = Mutex::new(Vec::new());
        let r = Rules::parse(text)?;
        let mut all = SHARED.lock().unwrap();
        all.retain(|w| w.strong_count() > 0);
        if let Some(same) = all.iter().filter_map(Weak::upgrade).find(|x| **x == r) {
            return Ok(same);
        }
        let r = Arc::new(r);
        all.push(Arc::downgrade(&r));
        Ok(r)
    }

    /// The first rule matching file name `name`, and its position (0-based).
    pub fn matching(&self, name: &[u8]) -> Option<(usize, &Rule)> {
        let name = std::str::from_utf8(name)
            .ok()
            .map(std::borrow::Cow::Borrowed)
            .unwrap_or_else(|| {
                // (A name that is not UTF-8 is matched by its lossy form: `*` still matches it.)
                String::from_utf8_lossy(name)
            });
        let first = self
            .set
            .matches(name.as_ref())
            .into_iter()
            .map(|g| self.owner[g])
            .min()?;
        Some((first, &self.list[first]))
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(c) = self.codec {
            parts.push(c.to_string());
        }
        if self.force {
            parts.push("force".into());
        }
        if let Some(s) = self.shift {
            parts.push(format!("extent_size={}", crate::sizes::format_extent_size(s)));
        }
        if let Some(d) = self.dict {
            parts.push(format!("dictionary={d}"));
        }
        write!(f, "{}", parts.join(","))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.globs.join(","), self.settings)
    }
}

/// The canonical text (what `getfattr` and `property get` show).
impl fmt::Display for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let texts: Vec<String> = self.list.iter().map(Rule::to_string).collect();
        write!(f, "{}", texts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "*.log,*.txt=zstd:9; *.sqlite,*.db=zstd:1,extent_size=16K; *.jpg,*.png,*.zst=none";

    #[test]
    fn the_issue_example_parses_matches_in_order_and_prints_canonically() {
        let r = Rules::parse(EXAMPLE).unwrap();
        assert_eq!(r.list.len(), 3);
        assert_eq!(r.to_string(), EXAMPLE);
        let codec = |n: &str| {
            r.matching(n.as_bytes())
                .map(|(i, x)| (i, x.settings.codec.unwrap().to_string()))
        };
        assert_eq!(codec("app.log"), Some((0, "zstd:9".into())));
        assert_eq!(codec("notes.txt"), Some((0, "zstd:9".into())));
        assert_eq!(codec("x.db"), Some((1, "zstd:1".into())));
        assert_eq!(r.list[1].settings.shift, Some(14));
        assert_eq!(codec("a.png"), Some((2, "none".into())));
        assert_eq!(codec("a.log.gz"), None);
        assert_eq!(codec("log"), None);
        // The first match wins.
        let r = Rules::parse("*.log=lz4; app.*=zstd:3").unwrap();
        assert_eq!(r.matching(b"app.log").unwrap().0, 0);
        assert_eq!(r.matching(b"app.txt").unwrap().0, 1);
        // A backslash escapes a separator (and a bracket) as globset does.
        let r = Rules::parse(r"a\,b\=c\;d,x\[1=lz4; \{y=none").unwrap();
        assert_eq!(r.list[0].globs, [r"a\,b\=c\;d", r"x\[1"]);
        assert!(r.matching(b"a,b=c;d").is_some() && r.matching(b"x[1").is_some());
        assert_eq!(r.matching(b"{y").unwrap().0, 1);
        assert_eq!(Rules::parse(&r.to_string()).unwrap(), r);
        assert!(Rules::parse(r"x\=lz4").is_err(), "the only `=` is escaped");
        // Inside a class a backslash is itself (globset's rule), not an escape.
        let r = Rules::parse(r"[\]*=none; [a\],b=lz4").unwrap();
        assert_eq!(r.list[1].globs, [r"[a\]", "b"]);
        assert!(r.matching(br"\x").is_some() && r.matching(b"a").is_some());
        // Braces and classes keep their commas, `=` and `;`.
        let r = Rules::parse("*.{jpg,jpeg},[=;,]x=none ;; ").unwrap();
        assert_eq!(r.list[0].globs, ["*.{jpg,jpeg}", "[=;,]x"]);
        assert!(r.matching(b"a.jpeg").is_some() && r.matching(b";x").is_some());
        assert!(Rules::parse("").unwrap().is_empty());
        assert!(Rules::parse(" ;\0").unwrap().is_empty());
        let r = Rules::parse("big.*=dictionary=7,extent_size=1M,zstd-fast:3").unwrap();
        assert_eq!(r.to_string(), "big.*=zstd-fast:3,extent_size=1M,dictionary=7");
        assert_eq!(Rules::parse(&r.to_string()).unwrap(), r);
        // `force`, alone or with other settings, is written after the codec.
        let r = Rules::parse("*.csv=force,zstd:6; *.bin=force").unwrap();
        assert_eq!(r.to_string(), "*.csv=zstd:6,force; *.bin=force");
        assert!(r.list.iter().all(|x| x.settings.force));
        assert_eq!(r.list[1].settings.codec, None);
        assert!(!Rules::parse(EXAMPLE).unwrap().list[0].settings.force);
    }

    #[test]
    fn bad_rules_are_refused_saying_where_and_what_is_expected() {
        let cases: [(&str, usize, &str); 13] = [
            ("*.log=lz4,force,force", 17, "force is given twice"),
            ("*.log=forced", 7, "expected a codec"),
            ("*.log", 6, "has no `=`"),
            ("*.log=", 7, "expected a codec"),
            ("*.log=zstd:99", 7, "zstd:99"),
            ("*.log=gzip", 7, "expected a codec"),
            ("*.log=zstd:9; *.db=zstd:1,extent_size=3K", 27, "power of two"),
            ("*.log=lz4,zstd", 11, "a codec is given twice"),
            (",*.log=lz4", 1, "expected a glob"),
            ("*.log,=lz4", 7, "expected a glob"),
            ("a/*.log=lz4", 1, "no `/`"),
            ("*.[log=lz4", 3, "`[` is not closed"),
            ("*.log=lz4,colour=red", 11, "unknown setting `colour`"),
        ];
        for (text, column, says) in cases {
            let e = Rules::parse(text).unwrap_err();
            assert_eq!(e.column, column, "{text}: {e}");
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
        assert!(Rules::parse("*.x=dictionary=0").is_err());
        assert!(Rules::parse(&"x".repeat(MAX_LEN + 1)).is_err());
        // Too long with a multi-byte character across the limit: an error, no panic.
        let e = Rules::parse(&"€".repeat(1334)).unwrap_err();
        assert!((1334..=1335).contains(&e.column), "{e}");
        // Longer written out than given (`lz4` is `lz4:1`, `; ` between rules).
        let e = Rules::parse(&"a=lz4;".repeat(600)).unwrap_err();
        assert!(e.to_string().contains("more than 32 rules"), "{e}");
        let e = Rules::parse(&format!("{}=lz4", "a".repeat(3996))).unwrap_err();
        assert!(e.to_string().contains("written out in full"), "{e}");
        let many: String = (0..MAX_RULES + 1).map(|i| format!("r{i}=lz4;")).collect();
        assert!(Rules::parse(&many)
            .unwrap_err()
            .to_string()
            .contains("more than 32 rules"));
        let globs: String = (0..MAX_GLOBS + 1).map(|i| format!("g{i},")).collect();
        // Equal texts share one compiled copy.
        let a = Rules::shared("*.a=lz4; *.b=none").unwrap();
        let b = Rules::shared("*.a=lz4:1;*.b=none").unwrap();
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        let e = Rules::parse(&format!("{globs}x=lz4")).unwrap_err();
        assert!(e.to_string().contains("more than 64 globs"), "{e}");
    }
}
