//! A file's settings as the container exposes them: its extent size, and the properties kept
//! in its superblock (`props`: compression, extent size, dictionary, force) with the rules for
//! changing them (an extent size only while the file is empty; a new codec clears the
//! incompressible flag). The filesystem maps these to `user.squeezefs.*` xattrs. A change is
//! recorded in the superblock at the next write-out.

use squeezefs_codec::CodecSpec;

use super::state::Mode;
use super::Container;
use crate::format::{MAX_EXTENT_SHIFT, MIN_EXTENT_SHIFT};
use crate::storage::Storage;
use crate::{Error, Result};

impl<S: Storage> Container<S> {
    /// Extent size in bytes (`None` for plain files).
    pub fn extent_size(&self) -> Option<u64> {
        match &self.mode {
            Mode::Plain => None,
            Mode::Packed(p) => Some(1 << p.shift),
        }
    }

    /// The file's own compression property (`None`: it follows the mount option).
    pub fn compression_property(&self) -> Option<CodecSpec> {
        match &self.mode {
            Mode::Packed(p) if p.codec_prop => Some(p.codec),
            _ => None,
        }
    }

    /// The codec extents written now get: the file's property, else the mount's.
    pub fn effective_codec(&self) -> Option<CodecSpec> {
        match &self.mode {
            Mode::Packed(p) => Some(p.codec),
            Mode::Plain => None,
        }
    }

    /// Sets (or with `None` removes) the file's compression property. Extents written from
    /// now on use it; extents already written keep their codec. Recorded in the superblock
    /// at the next flush. Plain files have no properties.
    pub fn set_compression_property(&mut self, codec: Option<CodecSpec>) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain (unconverted) file has no properties".into(),
            ));
        };
        p.codec = codec.unwrap_or(p.mount_codec);
        p.codec_prop = codec.is_some();
        // A new codec deserves a new chance.
        p.fails = 0;
        p.nocompress = false;
        p.sb_dirty = true;
        p.changed();
        Ok(())
    }

    /// The file's own extent-size property in bytes (`None`: it got the mount's).
    pub fn extent_size_property(&self) -> Option<u64> {
        match &self.mode {
            Mode::Packed(p) if p.shift_prop => Some(1 << p.shift),
            _ => None,
        }
    }

    /// Sets the file's extent size (log2), or with `None` marks it as not chosen. Only an
    /// empty file can change its extent size: every extent's place depends on it.
    pub fn set_extent_size_property(&mut self, shift: Option<u8>) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain (unconverted) file has no properties".into(),
            ));
        };
        if let Some(s) = shift {
            if !(MIN_EXTENT_SHIFT..=MAX_EXTENT_SHIFT).contains(&s) {
                return Err(Error::Invalid(format!("extent size 2^{s} is outside 4K … 1M")));
            }
            if s != p.shift {
                if p.size != 0 {
                    return Err(Error::Invalid(
                        "the extent size of a file that holds data is fixed (set it on the directory, \
                         or on the file while it is empty)"
                            .into(),
                    ));
                }
                // Anything left on disk (or in a pack) was laid out for the old size: never
                // read it.
                p.exts.clear();
                p.recount();
                p.loc_unloaded = false;
                p.pin = None;
                p.shift = s;
                p.stale_from = Some(0);
            }
        }
        p.shift_prop = shift.is_some();
        if p.shift_prop {
            p.keep_extent_size();
        }
        p.sb_dirty = true;
        p.changed();
        Ok(())
    }

    /// The file's dictionary property (a zstd dictionary id).
    pub fn dictionary_property(&self) -> Option<u32> {
        match &self.mode {
            Mode::Packed(p) => p.dict,
            Mode::Plain => None,
        }
    }

    /// Sets (or with `None` removes) the file's dictionary: small zstd extents and inline
    /// data written from now on use it (when it is loaded, see `squeezefs_codec::dict`);
    /// what is written keeps what it used. Recorded in the superblock at the next flush.
    pub fn set_dictionary_property(&mut self, dict: Option<u32>) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain (unconverted) file has no properties".into(),
            ));
        };
        if dict == Some(0) {
            return Err(Error::Invalid("dictionary id 0 is not a dictionary".into()));
        }
        p.dict = dict;
        if dict.is_some() {
            p.keep_extent_size();
        }
        p.sb_dirty = true;
        p.changed();
        Ok(())
    }

    /// The file's own force property: its extents are compressed as with the mount option
    /// `compress-force=` (no heuristic, no backoff, no early abort, no content-type check).
    pub fn force_property(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.force_prop)
    }

    /// Sets or removes the file's force property. Extents written from now on follow it;
    /// those written keep how they were stored. Recorded in the superblock (format version
    /// 7) or location record (version 4) at the next write-out.
    pub fn set_force_property(&mut self, force: bool) -> Result<()> {
        let Mode::Packed(p) = &mut self.mode else {
            return Err(Error::Invalid(
                "a plain (unconverted) file has no properties".into(),
            ));
        };
        p.force_prop = force;
        // What the backoff and the content sniff decided (or counted while forced) no
        // longer holds either way.
        p.fails = 0;
        p.backoff_writes = 0;
        if force {
            p.nocompress = false;
            p.compressed_content = None;
        }
        p.sb_dirty = true;
        p.changed();
        Ok(())
    }

    /// Whether some payload of the file was written with a dictionary.
    pub fn uses_dictionary(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.dict_used)
    }

    /// Whether the file is flagged incompressible (its extents kept failing).
    pub fn is_nocompress(&self) -> bool {
        matches!(&self.mode, Mode::Packed(p) if p.nocompress)
    }
}
