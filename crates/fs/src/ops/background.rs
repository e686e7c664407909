//! The background pass's walk (`crate::background` decides when it runs and how fast):
//! every directory from the mount's root, each regular file's target found, its pending
//! extents rewritten a chunk at a time through `Files::quiet`.
//!
//! **Targets.** A file's own `background_compression` (an xattr of its backing file), else
//! the nearest directory above it that has one (the walk carries it down: a directory's
//! property applies to everything below it, made before or after it was set), else the
//! mount's `background_compression=`. `none` anywhere keeps the pass away from what it
//! covers.
//!
//! **What the walk holds.** Each entry is registered in the inode table like a lookup (one
//! count, given back when the walk is done with it), so the pass and the kernel's requests
//! share one inode and one lock per file: the pass never works on a file beside a state
//! the kernel's requests use.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fuser::INodeNo;
use log::warn;
use squeezefs_codec::{Algorithm, CodecSpec};
use squeezefs_container::format::KeptTimes;

use super::names::is_dict_dir;
use super::Core;
use crate::background::{Pass, CHUNK_BYTES};
use crate::inode::Inode;
use crate::props::Value;
use crate::sys;

/// A directory waiting in the walk: its inode, the lookup it holds (`None`: the root, which
/// is never forgotten) and the target it passes down.
type Dir = (Arc<Inode>, Option<u64>, Option<CodecSpec>);

impl Core {
    /// One walk over the tree; returns how many regular files it looked at.
    pub(crate) fn background_walk(&self, pass: &Pass) -> u64 {
        let Ok(root) = self.inode(INodeNo(1)) else {
            return 0;
        };
        let target = self.dir_props(&root).background.or(pass.target());
        let mut stack: Vec<Dir> = vec![(root, None, target)];
        let mut files = 0;
        while let Some((dir, held, target)) = stack.pop() {
            if !pass.stopping() {
                self.background_dir(&dir, target, pass, &mut stack, &mut files);
            }
            if let Some(ino) = held {
                self.inodes.forget(ino, 1);
            }
        }
        files
    }

    /// The entries of `dir`: subdirectories onto `stack`, regular files done now.
    fn background_dir(
        &self,
        dir: &Arc<Inode>,
        target: Option<CodecSpec>,
        pass: &Pass,
        stack: &mut Vec<Dir>,
        files: &mut u64,
    ) {
        let listed = self.inodes.fd(dir).and_then(sys::read_dir);
        let entries = match listed {
            Ok(e) => e,
            Err(e) => {
                warn!("background pass: cannot list {}: {e}", self.describe(dir));
                pass.skipped(false);
                return;
            }
        };
        let root = self.is_root(dir);
        for (name, _, dtype) in entries {
            if pass.stopping() {
                return;
            }
            if name == b".." || (root && is_dict_dir(1, &name)) {
                continue;
            }
            if !matches!(dtype, libc::DT_DIR | libc::DT_REG | libc::DT_UNKNOWN) {
                continue;
            }
            // Gone since the listing, or not ours to open: nothing to do.
            let Ok((ino, inode, st)) = self.register(dir, OsStr::from_bytes(&name)) else {
                continue;
            };
            if inode.is_dir {
                let below = self.dir_props(&inode).background.or(target);
                stack.push((inode, Some(ino), below));
                continue;
            }
            if inode.is_reg {
                *files += 1;
                if !pass.unchanged_since_clean_walk(st.st_ctime) {
                    let own = match self.file_background(&inode) {
                        Some(Value::Codec(c)) => Some(c),
                        _ => None,
                    };
                    if let Some(t) = own.or(target).filter(|t| t.alg != Algorithm::None) {
                        self.background_file(&inode, t, pass);
                    }
                }
            }
            self.inodes.forget(ino, 1);
        }
    }

    /// Rewrites `inode`'s extents that are not at `target`, a chunk at a time, each when
    /// the governor allows it and only while the file is not in use.
    fn background_file(&self, inode: &Arc<Inode>, target: CodecSpec, pass: &Pass) {
        let pending = match self.files.quiet(
            inode,
            |c| Ok((c.pending_for(target)?, c.extent_size())),
            "background pass",
        ) {
            Ok(Some((p, Some(e)))) if !p.is_empty() => (p, e),
            Ok(Some(_)) => return, // nothing to do (or not a container in extents)
            Ok(None) => return pass.skipped(true),
            // (Logged with the file's name by `Files::quiet`.)
            Err(_) => return pass.skipped(false),
        };
        let (todo, extent) = pending;
        pass.found(todo.len() as u64 * extent);
        let per_chunk = (CHUNK_BYTES / extent).max(1) as usize;
        for chunk in todo.chunks(per_chunk) {
            if !pass.wait_turn(chunk.len() as u64 * extent) {
                return;
            }
            let done = self.files.quiet(
                inode,
                |c| {
                    // The change and modification times are the file's, whatever the
                    // rewrite does to the backing file's (`SB_FLAG_TIMES`); the backing
                    // file's are put back too (its access time, for tools that read it).
                    let st = sys::fstat(c.storage().file())?;
                    let kept = KeptTimes {
                        ctime: (st.st_ctime, st.st_ctime_nsec as u32),
                        mtime: (st.st_mtime, st.st_mtime_nsec as u32),
                    };
                    let r = c.recompress_extents(target, chunk, Some(kept))?;
                    if r.extents > 0 {
                        let ts = |sec, nsec| libc::timespec {
                            tv_sec: sec,
                            tv_nsec: nsec,
                        };
                        sys::utimens(
                            c.storage().file(),
                            ts(st.st_atime, st.st_atime_nsec),
                            ts(st.st_mtime, st.st_mtime_nsec),
                        )?;
                    }
                    Ok(r)
                },
                "background pass",
            );
            match done {
                Ok(Some(r)) => pass.rewritten(r.extents, chunk.len() as u64 * extent),
                Ok(None) => return pass.skipped(true),
                Err(_) => return pass.skipped(false),
            }
        }
    }
}
