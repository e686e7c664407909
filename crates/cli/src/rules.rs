//! Which compression rule (issue 31) applies to a file by its name now: the first matching
//! rule of its directory's `rules`, else of the mount's `rules=` — the one the daemon would
//! apply were the file made now (`DirProps::for_new_file`). Shared by `property get FILE
//! rules`, `stats --by rule` and `compress`. Each directory's properties are read once
//! ([`Lookup`] caches them), through a mount or from a backing directory alike: a
//! directory keeps them as real xattrs of its backing directory, under the same names.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use squeezefs_fs::props::{self, DirProps, Prop};
use squeezefs_fs::rules::{Rule, Rules};

/// The rule that applies to one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applies {
    /// Its position in its list (0-based).
    pub index: usize,
    pub rule: Rule,
    /// From the mount's `rules=` (no rules on the directory), not the directory's.
    pub from_mount: bool,
}

impl Applies {
    /// Where it comes from, as `property get FILE rules` says it: `rule 2 of /mnt/data`,
    /// `rule 1 of the mount's rules=`. `dir`: the file's directory as the user knows it.
    pub fn source(&self, dir: &Path) -> String {
        let n = self.index + 1;
        if self.from_mount {
            format!("rule {n} of the mount's rules=")
        } else {
            format!("rule {n} of {}", dir.display())
        }
    }
}

/// The mount's `rules=`, from its statistics document (`None`: it has none).
pub fn mount_rules(doc: &serde_json::Value) -> Option<Arc<Rules>> {
    match props::parse(Prop::Rules, doc.get("rules")?.as_str()?.as_bytes()) {
        Ok(props::Value::Rules(r)) => Some(r),
        _ => None,
    }
}

/// Directories' properties, each read once.
#[derive(Default)]
pub struct Lookup {
    dirs: HashMap<PathBuf, DirProps>,
}

impl Lookup {
    /// The properties of directory `dir` (a value that does not parse, stored around
    /// squeezefs, is left out with a warning, as the daemon does). A directory that cannot
    /// be opened has none, and an empty list of rules, with a warning: its files are taken
    /// as matched by no rule (not by the mount's, which its own rules, unknown, may replace).
    pub fn dir(&mut self, dir: &Path) -> &DirProps {
        self.dirs
            .entry(dir.to_path_buf())
            .or_insert_with(|| match File::open(dir) {
                Ok(f) => props::read_dir(&f, || dir.display().to_string()),
                Err(e) => {
                    eprintln!(
                        "warning: {}: cannot read its properties ({e}): its files are taken as \
                         matched by no compression rule",
                        dir.display()
                    );
                    DirProps {
                        rules: Some(Arc::new(Rules::default())),
                        ..DirProps::default()
                    }
                }
            })
    }

    /// The rule for a file named `name` in directory `dir`; `mount`: the `rules=` of the
    /// mount `dir` is on.
    pub fn rule(&mut self, dir: &Path, name: &[u8], mount: Option<&Arc<Rules>>) -> Option<Applies> {
        let own = self.dir(dir).rules.clone();
        first_match(own.as_ref(), mount, name)
    }

    /// What a file named `name` made in `dir` now gets as its own properties: the
    /// directory's, with what its rule sets over them (`mount`: as for [`Lookup::rule`];
    /// `with_rules` false: the directory's alone).
    pub fn new_file(
        &mut self,
        dir: &Path,
        name: &[u8],
        mount: Option<&Arc<Rules>>,
        with_rules: bool,
    ) -> DirProps {
        let d = self.dir(dir);
        if with_rules {
            d.for_new_file(name, mount).0
        } else {
            DirProps {
                rules: None,
                background: None,
                ..d.clone()
            }
        }
    }
}

/// The first rule of `own` (a directory's) matching `name`, else of `mount` when there are
/// no directory rules (a directory's rules replace the mount's, matching or not).
fn first_match(own: Option<&Arc<Rules>>, mount: Option<&Arc<Rules>>, name: &[u8]) -> Option<Applies> {
    let (rules, from_mount) = match own {
        Some(r) => (r, false),
        None => (mount?, true),
    };
    let (index, rule) = rules.matching(name)?;
    Some(Applies {
        index,
        rule: rule.clone(),
        from_mount,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(t: &str) -> Arc<Rules> {
        Rules::shared(t).unwrap()
    }

    #[test]
    fn a_directorys_rules_replace_the_mounts_and_the_first_match_wins() {
        let mount = rules("*.log=zstd:9; *=lz4");
        let dir = rules("*.db=zstd:1,extent_size=16K; *.log=none; *.log=zlib:6");
        let m = first_match(Some(&dir), Some(&mount), b"a.log").unwrap();
        assert_eq!(
            (m.index, m.rule.to_string(), m.from_mount),
            (1, "*.log=none".into(), false)
        );
        assert_eq!(m.source(Path::new("/mnt/data")), "rule 2 of /mnt/data");
        // No directory rule matches: none applies (the mount's are not looked at).
        assert_eq!(first_match(Some(&dir), Some(&mount), b"a.txt"), None);
        // No directory rules: the mount's.
        let m = first_match(None, Some(&mount), b"a.txt").unwrap();
        assert_eq!((m.index, m.from_mount), (1, true));
        assert_eq!(m.source(Path::new("/x")), "rule 2 of the mount's rules=");
        assert_eq!(first_match(None, None, b"a.log"), None);
        // The statistics document's `rules`.
        let doc = serde_json::json!({ "rules": "*.log=zstd:9; *=lz4" });
        assert_eq!(mount_rules(&doc).as_deref(), Some(&*mount));
        assert!(mount_rules(&serde_json::json!({ "rules": null })).is_none());
        assert!(mount_rules(&serde_json::json!({ "rules": "*.[x" })).is_none());
    }

    #[test]
    fn directories_are_read_once_and_a_new_file_gets_the_rule_over_the_directory() {
        let d = std::env::temp_dir().join(format!("squeezefs-rules-lookup-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let set = |name: &str, v: &str| {
            let f = File::open(&d).unwrap();
            squeezefs_fs::sys::xattr_set(&f, &std::ffi::CString::new(name).unwrap(), v.as_bytes(), 0)
        };
        if set(props::RULES, "*.db=zstd:1,extent_size=16K").is_err() {
            eprintln!("skipped: {} has no user xattrs", d.display());
            return;
        }
        set(props::COMPRESSION, "zlib:6").unwrap();
        set(props::DICTIONARY, "7").unwrap();
        let mut l = Lookup::default();
        let m = l.rule(&d, b"x.db", None).unwrap();
        assert_eq!(m.rule.to_string(), "*.db=zstd:1,extent_size=16K");
        let p = l.new_file(&d, b"x.db", None, true);
        assert_eq!(
            (p.codec.unwrap().to_string(), p.shift, p.dict),
            ("zstd:1".into(), Some(14), Some(7))
        );
        assert!(p.rules.is_none(), "a file has no rules");
        let p = l.new_file(&d, b"x.db", None, false);
        assert_eq!((p.codec.unwrap().to_string(), p.shift), ("zlib:6".into(), None));
        let p = l.new_file(&d, b"x.txt", None, true);
        assert_eq!(p.codec.unwrap().to_string(), "zlib:6");
        // Read once: a change on disk is not seen by the same lookup.
        set(props::RULES, "*.db=none").unwrap();
        assert_eq!(l.rule(&d, b"x.db", None).unwrap().rule.settings.shift, Some(14));
        assert_eq!(
            Lookup::default()
                .rule(&d, b"x.db", None)
                .unwrap()
                .rule
                .to_string(),
            "*.db=none"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
