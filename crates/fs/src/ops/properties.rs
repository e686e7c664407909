//! The `user.squeezefs.*` properties (compression, force, extent size, dictionary) of files
//! (kept in the container's superblock) and directories (xattrs on the backing directory,
//! inherited by what is made in it), and `user.squeezefs.rewrite`.

use std::sync::Arc;

use fuser::Errno;
use log::warn;
use squeezefs_container::dicts;

use super::Core;
use super::Who;
use crate::inode::Inode;
use crate::props::{self, DirProps, Prop, Value};
use crate::sys;

impl Core {
    /// Makes sure dictionary `id` is loaded, loading it from the backing directory's
    /// `.squeezefs-dicts` if needed (`squeezefs dict train` stores it there before setting
    /// the property). The error says what is wrong.
    pub(super) fn ensure_dict(&self, id: u32) -> Result<(), String> {
        if squeezefs_codec::dict::get(id).is_some() {
            return Ok(());
        }
        dicts::load(&self.dict_dir, id)
    }

    /// A directory's properties (read once, then cached: we are the only writer).
    pub(super) fn dir_props(&self, dir: &Arc<Inode>) -> DirProps {
        let Some(state) = dir.dir.as_ref() else {
            return DirProps::default();
        };
        let mut cache = state.props.lock().unwrap();
        if let Some(d) = cache.as_ref() {
            return d.clone();
        }
        let d = match self.fd(dir) {
            Ok(fd) => props::read_dir(fd, || self.describe(dir)),
            Err(_) => DirProps::default(),
        };
        *cache = Some(d.clone());
        d
    }

    /// The properties a file named `name` made in directory `dir` gets as its own: the
    /// directory's, with what the first rule matching `name` sets over them (the
    /// directory's rules, else the mount's `rules=`). A rule's dictionary that cannot be
    /// loaded is left out (logged): the file is made anyway.
    pub(super) fn new_file_props(&self, dir: &Arc<Inode>, name: &[u8]) -> DirProps {
        let (mut d, rule) = self.dir_props(dir).for_new_file(name, self.rules.as_ref());
        if let (Some(id), Some(rule)) = (d.dict, &rule) {
            if let Err(why) = self.ensure_dict(id) {
                warn!(
                    "{}: rule `{rule}` names dictionary {id}, not used for {:?}: {why}",
                    self.describe(dir),
                    String::from_utf8_lossy(name)
                );
                d.dict = self.dir_props(dir).dict;
            }
        }
        d
    }

    /// The property `p` of an inode itself (`None`: not set on it).
    pub(super) fn get_prop(&self, inode: &Arc<Inode>, p: Prop) -> Result<Option<Value>, Errno> {
        if inode.is_dir() {
            return Ok(self.dir_props(inode).get(p));
        }
        if !inode.is_reg {
            return Ok(None);
        }
        if p == Prop::Background {
            return Ok(self.file_background(inode));
        }
        if p == Prop::Rules {
            return Ok(None); // (a directory's only)
        }
        self.files.with_container(
            inode,
            |c| {
                Ok(match p {
                    Prop::Background | Prop::Rules => None, // (above)
                    Prop::Compression => c.compression_property().map(Value::Codec),
                    Prop::ExtentSize => c
                        .extent_size_property()
                        .map(|b| Value::Shift(b.trailing_zeros() as u8)),
                    Prop::Dictionary => c.dictionary_property().map(Value::Dict),
                    Prop::Force => c.force_property().then_some(Value::Force),
                })
            },
            "get property",
        )
    }

    /// Sets (`Some` raw value) or removes (`None`) property `p`, with setxattr's
    /// XATTR_CREATE / XATTR_REPLACE semantics. A bad value is EINVAL and a log line.
    pub(super) fn set_prop(
        &self,
        inode: &Arc<Inode>,
        p: Prop,
        raw: Option<&[u8]>,
        flags: i32,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        let v = match raw.map(|r| props::parse(p, r)) {
            Some(Err(why)) => {
                warn!(
                    "{}: refusing {} = {:?}: {why}",
                    self.describe(inode),
                    p.xattr(),
                    String::from_utf8_lossy(raw.unwrap_or_default())
                );
                return Err(Errno::EINVAL);
            }
            Some(Ok(v)) => Some(v),
            None => None,
        };
        self.set_prop_value(inode, p, v, flags)
    }

    /// [`SqueezeFs::set_prop`] with the value parsed (`None`: remove it).
    pub(super) fn set_prop_value(
        &self,
        inode: &Arc<Inode>,
        p: Prop,
        v: Option<Value>,
        flags: i32,
    ) -> Result<(), Errno> {
        self.check_writable()?;
        if !inode.is_dir() && !inode.is_reg {
            // Like user.* xattrs on the host: not on symlinks and special files.
            return Err(Errno::EPERM);
        }
        if p == Prop::Rules && !inode.is_dir() {
            warn!(
                "{}: refusing {}: rules apply to the files made in a directory; set them on one",
                self.describe(inode),
                p.xattr()
            );
            return Err(Errno::EINVAL);
        }
        if let Some(Value::Dict(id)) = v {
            // Only a dictionary that is there and intact: data written with it must be
            // readable again.
            if let Err(why) = self.ensure_dict(id) {
                warn!("{}: refusing {} = {id}: {why}", self.describe(inode), p.xattr());
                return Err(Errno::EINVAL);
            }
        }
        let current = self.get_prop(inode, p)?;
        if (flags & libc::XATTR_CREATE != 0 && current.is_some())
            || (flags & libc::XATTR_REPLACE != 0 || v.is_none()) && current.is_none()
        {
            return Err(if current.is_some() {
                Errno::EEXIST
            } else {
                Errno::ENODATA
            });
        }
        if p == Prop::Background {
            // Any change of a target, a removal too, has the pass look at every file.
            if v.is_some() {
                self.background_seen()?;
            }
            self.background.configured();
        }
        if inode.is_reg && p == Prop::Background {
            // An xattr of the backing file (`props`): its ctime moves.
            self.files.drop_kept_times(inode)?;
            return props::write_xattr(self.fd(inode)?, p, v, 0).map_err(|e| {
                warn!("{}: cannot store {}: {e}", self.describe(inode), p.xattr());
                Errno::from(e)
            });
        }
        if let Some(state) = inode.dir.as_ref() {
            props::write_xattr(self.fd(inode)?, p, v.clone(), 0).map_err(|e| {
                warn!("{}: cannot store {}: {e}", self.describe(inode), p.xattr());
                Errno::from(e)
            })?;
            let mut cache = state.props.lock().unwrap();
            let mut d = cache.take().unwrap_or_default();
            d.set(v, p);
            *cache = Some(d);
            return Ok(());
        }
        self.files.with_container(
            inode,
            |c| match (p, v) {
                (Prop::Compression, Some(Value::Codec(s))) => c.set_compression_property(Some(s)),
                (Prop::Compression, _) => c.set_compression_property(None),
                (Prop::ExtentSize, Some(Value::Shift(s))) => c.set_extent_size_property(Some(s)),
                (Prop::ExtentSize, _) => c.set_extent_size_property(None),
                (Prop::Dictionary, Some(Value::Dict(d))) => c.set_dictionary_property(Some(d)),
                (Prop::Dictionary, _) => c.set_dictionary_property(None),
                (Prop::Force, v) => c.set_force_property(v.is_some()),
                (Prop::Background | Prop::Rules, _) => Ok(()), // (above)
            },
            "set property",
        )
    }

    /// A regular file's own `background_compression` (an xattr of its backing file; one
    /// that does not parse, stored around squeezefs, is none).
    pub(crate) fn file_background(&self, inode: &Arc<Inode>) -> Option<Value> {
        let raw = sys::xattr_get(self.fd(inode).ok()?, &Prop::Background.cname(), 256).ok()?;
        props::parse(Prop::Background, &raw).ok()
    }

    /// Marks the backing root (`props::BACKGROUND_SEEN`): the background pass then walks
    /// the tree at every mount, with or without the mount option.
    fn background_seen(&self) -> Result<(), Errno> {
        let root = self.inode(fuser::INodeNo(1))?;
        let name = std::ffi::CString::new(props::BACKGROUND_SEEN).expect("no NUL");
        let fd = self.fd(&root)?;
        if sys::xattr_size(&fd, &name).is_err() {
            sys::xattr_set(&fd, &name, b"1", 0).map_err(|e| {
                warn!(
                    "{}: cannot store {}: {e}",
                    self.describe(&root),
                    props::BACKGROUND_SEEN
                );
                Errno::from(e)
            })?;
        }
        Ok(())
    }

    /// `user.squeezefs.rewrite`: recompress the file's extents in place.
    pub(super) fn rewrite(&self, inode: &Arc<Inode>, value: &[u8]) -> Result<(), Errno> {
        if !inode.is_reg {
            return Err(Errno::EPERM);
        }
        let Some(range) = props::parse_rewrite(value) else {
            warn!(
                "{}: {} = {:?}: expected nothing or OFFSET:LENGTH",
                self.describe(inode),
                props::REWRITE,
                String::from_utf8_lossy(value)
            );
            return Err(Errno::EINVAL);
        };
        self.files
            .with_container(inode, |c| c.rewrite(range).map(|_| ()), "rewrite")
    }
}

impl Core {
    /// `setxattr user.squeezefs.reclaim` on the root: a pack reclaim round now, the packs
    /// in use retired first (`Reclaimer::asked_round`; the caller waits for it). For root
    /// and the daemon's own user.
    pub(super) fn reclaim_now(&self, req: &Who) -> Result<(), Errno> {
        if req.uid() != 0 && req.uid() != sys::euid() {
            return Err(Errno::EPERM);
        }
        let r = self.reclaimer.as_ref().ok_or(Errno::ENOTSUP)?;
        match r
            .asked_round(|| {
                self.drain_names();
                self.files.commit_now()
            })
            .error
        {
            Some(e) => {
                warn!("pack reclaim requested on the root failed: {e}");
                Err(Errno::EIO)
            }
            None => Ok(()),
        }
    }

    /// `getxattr user.squeezefs.reclaim` on the root: the last round, as JSON.
    pub(super) fn last_reclaim(&self) -> Result<String, Errno> {
        let r = self.reclaimer.as_ref().ok_or(Errno::ENODATA)?;
        let l = r.last.lock().unwrap().clone();
        Ok(serde_json::json!({
            "at": l.at.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs()),
            "seconds": l.seconds,
            "files_moved": l.files_moved,
            "packs_removed": l.packs_removed,
            "bytes_freed": l.bytes_freed,
            "note": l.note,
            "error": l.error,
        })
        .to_string())
    }
}
