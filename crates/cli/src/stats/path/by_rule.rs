//! `--by rule`: the files grouped by the compression rule that applies to each one's name
//! now (`crate::rules`), and where each PATH's files are (`Place`: its mount and that
//! mount's `rules=`).

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use squeezefs_container::usage::Usage;
use squeezefs_fs::rules::Rules;

use super::RuleGroup;

/// Where the files of one PATH are, for `--by rule`: the mount it was given on, and that
/// mount's `rules=`.
pub(super) struct Place {
    mount: Option<(PathBuf, PathBuf)>,
    rules: Option<Arc<Rules>>,
}

impl Place {
    pub(super) fn new(loc: &crate::locate::Located) -> Place {
        let rules = loc
            .mount
            .as_ref()
            .and_then(|m| crate::statsfile::read(m).ok())
            .and_then(|doc| crate::rules::mount_rules(&doc));
        Place {
            mount: loc.mount.clone().zip(loc.root.clone()),
            rules,
        }
    }

    /// A backing directory as the user knows it: its path on the mount, if given on one.
    fn shown(&self, backing: &Path) -> PathBuf {
        match &self.mount {
            Some((mount, root)) => match backing.strip_prefix(root) {
                Ok(rel) if rel.as_os_str().is_empty() => mount.clone(),
                Ok(rel) => mount.join(rel),
                Err(_) => backing.to_path_buf(),
            },
            None => backing.to_path_buf(),
        }
    }
}

/// Groups files by their rule, reading each directory's rules once.
pub(super) struct ByRule {
    pub(super) lookup: crate::rules::Lookup,
    pub(super) groups: BTreeMap<Option<String>, RuleGroup>,
}

impl ByRule {
    /// Adds the file `backing` (of `place`), counted as [`Totals::add`](super::Totals::add) counts it.
    pub(super) fn add(&mut self, backing: &Path, place: &Place, u: &Usage, allocated: u64) {
        let dir = backing.parent().unwrap_or(Path::new("/"));
        let name = backing.file_name().map(|n| n.as_bytes()).unwrap_or_default();
        let applies = self.lookup.rule(dir, name, place.rules.as_ref());
        let key = applies.as_ref().map(|a| a.rule.to_string());
        let g = self.groups.entry(key.clone()).or_default();
        g.rule = key;
        if let Some(a) = applies {
            let shown = place.shown(dir);
            g.from.insert(a.source(&shown));
            let order = (
                a.from_mount,
                if a.from_mount { PathBuf::new() } else { shown },
                a.index,
            );
            if g.order.as_ref().is_none_or(|o| order < *o) {
                g.order = Some(order);
            }
        }
        g.totals.add(u, allocated);
    }

    /// The groups, rules first (in the order they are shown), then the files no rule
    /// matches.
    pub(super) fn finish(self) -> Vec<RuleGroup> {
        let mut v: Vec<RuleGroup> = self.groups.into_values().collect();
        v.sort_by(|a, b| (a.rule.is_none(), &a.order).cmp(&(b.rule.is_none(), &b.order)));
        v
    }
}
