//! One file's job for `squeezefs compress`: what is asked of it (`Asked`, or what its rule
//! sets), where small files can go (`Packing`), the file itself (`Job`: its paths, size,
//! links, defaults, rule, and what this run changed of it) and what happened to it
//! (`Done`).

use std::path::PathBuf;
use std::sync::Arc;

use squeezefs_codec::CodecSpec;
use squeezefs_container::pack::Packs;
use squeezefs_fs::props::DirProps;
use squeezefs_fs::rules::Settings;

use super::props::{own_codec, own_dict, own_shift};
use super::stage::Staged;

/// What the command asks of every file (`--codec`, `--extent-size`, `--pack`/`--no-pack`),
/// or of one file, what the rule matching its name sets ([`Job::asked`]).
#[derive(Clone, Copy)]
pub(super) struct Asked {
    pub(super) codec: Option<CodecSpec>,
    pub(super) extent_shift: Option<u8>,
    /// A dictionary (only a rule asks for one).
    pub(super) dict: Option<u32>,
    /// The force property (only a rule asks for it).
    pub(super) force: bool,
    pub(super) pack: bool,
}

/// Where small files can go.
#[derive(Clone)]
pub(super) enum Packing {
    /// On a mount: whether it packs (then the daemon packs what it rewrites).
    Mount(bool),
    /// In a backing directory: its packs (writable when files are packed), if it has or
    /// gets any.
    Offline(Option<Arc<Packs>>),
}

/// What happened to one file.
pub(super) enum Done {
    /// Recompressed in place; `packed`: it is stored in a pack now (it was, or it was a
    /// container of its own that went into one).
    Rewritten { packed: bool },
    /// A plain file or one of another extent size, copied into a new file; `packed` as above.
    Converted { packed: bool },
    /// Already as asked (nothing to do), or empty.
    Skipped,
    /// Empty, on a mount: only given the properties asked (its data is written with them).
    PropsSet,
    /// Left as it is, with a warning (hard links).
    LeftAlone,
    /// Copied into this new container beside it, not yet durable: renamed over the file
    /// after the batch's syncs (offline, the copy is staged: committed between them).
    Copied(PathBuf, Option<Box<Staged>>),
    /// Rewritten in place offline into the packs (it was packed, or a container of its
    /// own small enough), committed with the batch.
    Staging(Box<Staged>),
}

/// One file to do: its path to act on (mount path or backing path) and its backing file.
pub(super) struct Job {
    pub(super) path: PathBuf,
    pub(super) backing: PathBuf,
    pub(super) size: u64,
    pub(super) links: u64,
    /// The codec in force for a file without its own property: the mount's `compress=`
    /// (offline: zstd:3, what a mount uses by default).
    pub(super) default_codec: CodecSpec,
    /// On a mount: its extent size (its `extent_size=`), what a file without the property
    /// gets.
    pub(super) default_shift: Option<u8>,
    pub(super) packs: Packing,
    /// What the rule matching its name sets, when this run applies rules (no `--codec`,
    /// `--extent-size` or `--no-rules`) and one matches.
    pub(super) rule: Option<Settings>,
    /// On a mount: the properties a file of its name made now gets (its directory's, and
    /// its rule's unless `--no-rules`), for a copy the daemon made under another name.
    pub(super) create: DirProps,
    /// Set when this run changed one of its properties (what `ruled` counts of a file
    /// rewritten in place: not one rewritten only to be packed).
    pub(super) changed: std::sync::atomic::AtomicBool,
    /// Set when its rule replaced a property set on the file itself (`replaced_own`).
    pub(super) replaced_own: std::sync::atomic::AtomicBool,
}

impl Job {
    /// Notes whether this file's rule replaces one of its own properties (`codec`, `dict`,
    /// `shift`: what it has now) with another value.
    pub(super) fn note_own(
        &self,
        args: &Asked,
        codec: Option<CodecSpec>,
        dict: Option<u32>,
        shift: Option<u8>,
    ) {
        fn differs<T: PartialEq>(rule: Option<T>, own: Option<T>) -> bool {
            rule.is_some() && own.is_some() && rule != own
        }
        let replaced = self.rule.is_some()
            && (differs(args.codec, codec) || differs(args.dict, dict) || differs(args.extent_shift, shift));
        self.replaced_own
            .store(replaced, std::sync::atomic::Ordering::Relaxed);
    }

    /// [`Job::note_own`] for a file on a mount, its own properties read through it.
    pub(super) fn note_own_mounted(&self, args: &Asked) {
        if self.rule.is_none() {
            return;
        }
        self.note_own(
            args,
            own_codec(&self.path),
            own_dict(&self.path),
            own_shift(&self.path),
        );
    }
}

impl Job {
    /// What this run asks of this file: `args`, or what its rule sets.
    pub(super) fn asked(&self, args: &Asked) -> Asked {
        match self.rule {
            Some(r) => Asked {
                codec: r.codec,
                extent_shift: r.shift,
                dict: r.dict,
                force: r.force,
                pack: args.pack,
            },
            None => *args,
        }
    }

    /// The packs a container opened offline gets (packed files need them to be read).
    pub(super) fn offline_packs(&self) -> Option<Arc<Packs>> {
        match &self.packs {
            Packing::Offline(p) => p.clone(),
            Packing::Mount(_) => None,
        }
    }

    /// Whether this run packs files (not `--no-pack`, and the mount or the backing
    /// filesystem can).
    pub(super) fn packing(&self, asked: &Asked) -> bool {
        asked.pack
            && match &self.packs {
                Packing::Mount(p) => *p,
                Packing::Offline(p) => p.as_ref().is_some_and(|p| p.writable()),
            }
    }
}

impl Job {
    /// Copy and rename would give each name its own file: such files are left alone.
    pub(super) fn splits_links(&self, pb: &indicatif::ProgressBar) -> bool {
        if self.links > 1 {
            pb.suspend(|| {
                eprintln!(
                    "squeezefs compress: {}: has {} hard links; converting it (a plain file, or a new \
                     extent size) would split them, so it is left as it is",
                    self.path.display(),
                    self.links
                )
            });
            pb.inc(self.size);
        }
        self.links > 1
    }
}
