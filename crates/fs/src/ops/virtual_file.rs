//! The router for the one virtual file, `MOUNTPOINT/.squeezefs-stats` (its document is
//! rendered by `crate::statsfile`), and its handlers. Every handler in `dispatch.rs` asks
//! [`route`] first; only here is the virtual file's behaviour written.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use fuser::{Errno, FileAttr, FopenFlags, INodeNo};

use super::Core;
use crate::statsfile;

/// What a request's inode number names.
pub(super) enum Node {
    /// The statistics file.
    Stats,
    /// An inode of the backing directory.
    Backing(INodeNo),
}

/// Routes a request by inode number.
pub(super) fn route(ino: INodeNo) -> Node {
    if ino.0 == statsfile::INO {
        Node::Stats
    } else {
        Node::Backing(ino)
    }
}

/// Whether a lookup of `name` in `parent` names the statistics file.
pub(super) fn is_stats_name(parent: INodeNo, name: &OsStr) -> bool {
    parent.0 == 1 && name.as_bytes() == statsfile::NAME.as_bytes()
}

/// The statistics file's state: the document each open handle reads (rendered at open).
pub(super) struct StatsFile {
    /// Owner of the mount root, given to the file.
    owner: (u32, u32),
    open: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
    /// On a mount with no OPEN: the document rendered at the last LOOKUP or GETATTR,
    /// which READs (handle 0) serve ([`StatsFile::fresh_attr`]).
    latest: Mutex<Option<Arc<Vec<u8>>>>,
}

impl StatsFile {
    pub(super) fn new(owner: (u32, u32)) -> StatsFile {
        StatsFile {
            owner,
            open: Mutex::new(HashMap::new()),
            latest: Mutex::new(None),
        }
    }

    pub(super) fn attr(&self) -> FileAttr {
        statsfile::attr(self.owner.0, self.owner.1)
    }

    /// On a mount with no OPEN (read-only, `Core::no_open`) the file is read through the
    /// page cache, with no handle and no open to render the document at. So it is rendered
    /// at each LOOKUP of the file (`doc`): its entry times out at once, so every open by
    /// path looks it up. The document's length is the size, and the GETATTRs and READs
    /// that follow serve that document (a GETATTR renders nothing: a whole-file read asks
    /// for the attributes again when it reaches the end, `fuse_cache_read_iter`, and a new
    /// document then would mix two). The size always differs from the last one given (a
    /// newline is added when it would not): the kernel drops a file's cached pages when
    /// its size changes (`fuse_change_attributes`), so every open sees a new document.
    pub(super) fn fresh_attr(&self, mut doc: Vec<u8>) -> FileAttr {
        let mut latest = self.latest.lock().unwrap();
        if latest.as_ref().is_some_and(|l| l.len() == doc.len()) {
            doc.push(b'\n');
        }
        let a = self.attr_of(&doc);
        *latest = Some(Arc::new(doc));
        a
    }

    /// The file's attributes with `doc` as its contents.
    fn attr_of(&self, doc: &[u8]) -> FileAttr {
        let mut a = self.attr();
        a.size = doc.len() as u64;
        a.blocks = a.size.div_ceil(512);
        a
    }

    /// The attributes of the latest document ([`StatsFile::fresh_attr`]), if any.
    pub(super) fn latest_attr(&self) -> Option<FileAttr> {
        let latest = self.latest.lock().unwrap();
        latest.as_ref().map(|doc| self.attr_of(doc))
    }

    /// Bytes of the document handle `fh` reads (handle 0: the latest, on a mount with no
    /// OPEN).
    pub(super) fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let doc = if fh == 0 {
            self.latest.lock().unwrap().clone()
        } else {
            self.open.lock().unwrap().get(&fh).cloned()
        };
        let Some(doc) = doc else {
            return Err(Errno::EBADF);
        };
        let start = (offset as usize).min(doc.len());
        let end = start.saturating_add(size as usize).min(doc.len());
        Ok(doc[start..end].to_vec())
    }

    pub(super) fn release(&self, fh: u64) {
        self.open.lock().unwrap().remove(&fh);
    }
}

impl Core {
    /// Opens the statistics file (read-only): the document is rendered now.
    pub(super) fn open_stats(&self, flags: i32) -> Result<(u64, FopenFlags), Errno> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EACCES);
        }
        let doc = self.render_stats();
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.stats.open.lock().unwrap().insert(fh, Arc::new(doc));
        Ok((fh, FopenFlags::FOPEN_DIRECT_IO))
    }

    /// The statistics file's attributes: size 0 where each open renders its own document
    /// (read with direct I/O), or, on a mount with no OPEN, those of a document rendered
    /// now at a LOOKUP (`lookup`), of the latest one otherwise ([`StatsFile::fresh_attr`]).
    pub(super) fn stats_attr(&self, lookup: bool) -> FileAttr {
        if !self.no_open.load(Ordering::Relaxed) {
            return self.stats.attr();
        }
        if !lookup {
            if let Some(a) = self.stats.latest_attr() {
                return a;
            }
        }
        self.stats.fresh_attr(self.render_stats())
    }

    fn render_stats(&self) -> Vec<u8> {
        // Closed files waiting for their superblock are committed first: whoever reads
        // the statistics (or counts the backing files next) sees them as closed; so are
        // the names pending (`crate::ns`; what was pending is shown as read before).
        let namespace = self.ns.as_ref().map(|ns| ns.to_json());
        self.drain_names();
        self.files.commit_now();
        statsfile::render(
            &self.backing,
            self.opts(),
            self.read_only,
            (self.requests.to_json(), self.requests.service_json()),
            self.page_cache.to_json(),
            self.files.commit_json(),
            vec![
                ("spin", self.spin.to_json()),
                ("closer", self.closer.to_json()),
                (
                    "names",
                    serde_json::json!({
                        "known_misses": self.known_misses.load(std::sync::atomic::Ordering::Relaxed),
                        "held": crate::inode::known::held(),
                        "budget": crate::inode::known::BUDGET,
                    }),
                ),
                (
                    "namespace",
                    namespace.unwrap_or_else(|| serde_json::json!({"mode": "sync"})),
                ),
                ("background", self.background.json()),
                ("dedupe", self.dedupe.to_json()),
                (
                    "rules",
                    serde_json::json!(self.rules.as_ref().map(|r| r.to_string())),
                ),
            ],
        )
    }
}
