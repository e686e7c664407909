//! What a scan counts: the totals of the files under the PATHs (`Totals`: rows by stored
//! type, overhead, dictionaries, packs), those of one compression rule's files
//! (`RuleGroup`: a `Totals` of its own, which `Totals` lists, so it lives here; the
//! grouping is `by_rule.rs`), and a backing directory's packs (`PackTotals`); and how one
//! file is added to them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use squeezefs_container::usage::{Kind, Part, Usage};

#[derive(Default)]
pub struct Totals {
    pub files: u64,
    pub containers: u64,
    pub plain: u64,
    pub inline: u64,
    /// Packed files (their location record is current), empty ones included.
    pub packed: u64,
    /// Rows by type label (`zstd:3`, `none`, `inline`, `plain`, `packed zstd:1`).
    pub rows: BTreeMap<String, Part>,
    /// Allocated bytes not in current extents: superblocks and leftover copies; for a whole
    /// backing directory also the bytes of its packs that no packed row accounts for (pack
    /// headers, garbage).
    pub overhead: u64,
    /// Of which copies left by interrupted writes (`check --repair` removes them).
    pub leftover: u64,
    /// What the current extent copies of containers take (the base of the slack's share).
    pub in_extents: u64,
    /// Allocated bytes of the directories walked (each PATH that is one, and those below):
    /// in the total, as `du` counts them, so `du` through the mount and `stats` agree.
    pub directories: u64,
    pub referenced: u64,
    pub damaged_extents: u64,
    /// Files with extents or inline data compressed with a dictionary.
    pub dict_files: u64,
    /// Their logical size.
    pub dict_referenced: u64,
    /// Files that need or use each dictionary (payloads naming it, or the property).
    pub dict_users: BTreeMap<u32, u64>,
    /// With `--dict-gain`: what those files take written with their dictionary, and without.
    pub dict_gain: Option<(u64, u64)>,
    /// The packs of the backing directories the scan covered whole or found packed files of.
    pub packs: Option<PackTotals>,
    /// Bytes of extent copies the backing shares between files (FIEMAP), counted once: left
    /// out of every file but the first that names them (not in the rows' disk).
    pub shared: u64,
    /// With `--by rule`: the files grouped by the rule that applies to their names.
    pub by_rule: Option<Vec<RuleGroup>>,
    pub errors: Vec<String>,
}

/// The files one compression rule applies to (`stats --by rule`).
#[derive(Default)]
pub struct RuleGroup {
    /// The rule's canonical text; `None`: the files no rule matches.
    pub rule: Option<String>,
    /// Where it comes from, each place once (`rule 2 of /mnt/data`, `rule 1 of the mount's
    /// rules=`): equal rules of several directories (inherited ones) are one group.
    pub from: BTreeSet<String>,
    /// Where it is first shown: the mount's after directories', then by directory and
    /// position.
    pub(super) order: Option<(bool, PathBuf, usize)>,
    /// Its files alone (no directories, no packs' own bytes).
    pub totals: Totals,
}

/// The packs of one or more backing directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackTotals {
    pub count: u64,
    /// Length of the pack files, and what they occupy in the backing filesystem.
    pub bytes: u64,
    pub disk: u64,
    /// Files of the scan whose bytes are in them.
    pub files: u64,
    /// Stored bytes no live file uses (`check_pack`'s garbage), measured only when the scan
    /// read every record of the backing directory; otherwise why not.
    pub garbage: Result<u64, String>,
    /// Every one was walked whole: their bytes are in the totals.
    pub whole: bool,
    /// Files whose bytes another file's record names too (stored once), their logical
    /// bytes, and the stored bytes that saves.
    pub shared_files: u64,
    pub shared_bytes: u64,
    pub shared_saved: u64,
}

impl Default for PackTotals {
    fn default() -> PackTotals {
        PackTotals {
            count: 0,
            bytes: 0,
            disk: 0,
            files: 0,
            garbage: Ok(0),
            whole: true,
            shared_files: 0,
            shared_bytes: 0,
            shared_saved: 0,
        }
    }
}

impl Totals {
    /// Adds one file that occupies `allocated` bytes in the backing filesystem.
    pub(super) fn add(&mut self, u: &Usage, allocated: u64) {
        self.files += 1;
        self.referenced += u.size;
        for id in &u.dicts {
            *self.dict_users.entry(*id).or_default() += 1;
        }
        if u.packed.is_some() {
            self.packed += 1;
            self.damaged_extents += u.damaged_extents;
            for (k, p) in &u.parts {
                self.rows.entry(k.label()).or_default().add(p);
            }
            // Its bytes are in a pack (its row's disk is its share of its block); its backing
            // file holds none, unless a crash left there the bytes the record replaced.
            self.overhead += allocated;
            self.leftover += u.leftover.min(allocated);
            return;
        }
        if u.plain {
            self.plain += 1;
            self.rows.entry("plain".into()).or_default().add(&Part {
                extents: 0,
                disk: allocated,
                uncompressed: u.size,
                slack: 0,
            });
            return;
        }
        self.containers += 1;
        if u.parts.keys().any(|k| k.uses_dict()) {
            self.dict_files += 1;
            self.dict_referenced += u.size;
        }
        self.leftover += u.leftover;
        self.damaged_extents += u.damaged_extents;
        let mut in_extents = 0;
        for (k, p) in &u.parts {
            let mut p = *p;
            if k.without_dict() == Kind::Inline {
                // The whole file is its superblock.
                self.inline += 1;
                p.disk = allocated;
            }
            in_extents += p.disk;
            if matches!(k.without_dict(), Kind::Extent(..)) {
                self.in_extents += p.disk;
            }
            self.rows.entry(k.label()).or_default().add(&p);
        }
        // Superblocks, and copies left by interrupted writes.
        self.overhead += allocated.saturating_sub(in_extents);
    }

    /// Logical bytes of the files that use a dictionary (only known with `--dict-gain`).
    pub fn dict_uncompressed(&self) -> u64 {
        self.dict_referenced
    }

    /// Bytes lost to rounding extent copies up to whole blocks.
    pub fn slack(&self) -> u64 {
        self.rows.values().map(|p| p.slack).sum()
    }

    pub fn disk(&self) -> u64 {
        self.rows.values().map(|p| p.disk).sum::<u64>() + self.overhead + self.directories
    }

    pub fn uncompressed(&self) -> u64 {
        self.rows.values().map(|p| p.uncompressed).sum()
    }

    pub fn extents(&self) -> u64 {
        self.rows.values().map(|p| p.extents).sum()
    }
}
