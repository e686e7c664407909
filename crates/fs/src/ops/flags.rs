//! `chattr +c` / `chattr +m` / `lsattr`: the inode flags btrfs users type, over the
//! compression property.
//!
//! The kernel asks for a file's or directory's flags with FUSE_IOCTL `FS_IOC_GETFLAGS` and
//! sets them with `FS_IOC_SETFLAGS` (both carrying a 4-byte int, whatever the command's
//! encoded size says: `fuse_fileattr_get`/`_set`), after it checked that the caller owns the
//! inode; before a set it reads the old attributes with `FS_IOC_FSGETXATTR` (answered: none
//! kept). squeezefs keeps two flags, both views of `user.squeezefs.compression`:
//! * `c` (`FS_COMPR_FL`): the inode has a compressing property of its own. `chattr +c` gives
//!   it the mount's codec (`zstd:3` on a mount that does not compress), as btrfs gives the
//!   filesystem's; an inode with a codec of its own keeps it.
//! * `m` (`FS_NOCOMP_FL`): its property is `none`. `chattr +m` sets that.
//!
//! Clearing the flag that is shown removes the property (the inode then follows its mount,
//! or for a new file its directory). A directory's property is inherited by what is made in
//! it, like the property set through the xattr. Every other flag is refused with EOPNOTSUPP,
//! never dropped in silence: squeezefs does not keep `i`, `a`, `A`, `d` and the rest, and the
//! backing file's own flags are not the logical file's.

use std::sync::Arc;

use fuser::Errno;
use squeezefs_codec::{Algorithm, CodecSpec};

use super::Core;
use crate::inode::Inode;
use crate::props::{Prop, Value};

/// `FS_COMPR_FL`, `lsattr`'s `c`.
pub const COMPR: u32 = 0x0000_0004;
/// `FS_NOCOMP_FL`, `lsattr`'s `m`.
pub const NOCOMP: u32 = 0x0000_0400;

/// `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` as the kernel sends them (`_IOR`/`_IOW('f', 1/2,
/// long)` on 64-bit), and their 32-bit forms.
const GETFLAGS: [u32; 2] = [0x8008_6601, 0x8004_6601];
const SETFLAGS: [u32; 2] = [0x4008_6602, 0x4004_6602];
/// `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR` (`struct fsxattr`, 28 bytes). The kernel reads
/// the old attributes this way before every SETFLAGS (`vfs_fileattr_set`), so it must be
/// answered for `chattr` to work at all.
const FSGETXATTR: u32 = 0x801c_581f;
const FSSETXATTR: u32 = 0x401c_5820;
const FSXATTR_LEN: usize = 28;

/// What an ioctl asks for.
pub(super) enum Ioctl {
    GetFlags,
    SetFlags(u32),
    /// The extended attributes (`xfs_io lsattr`): none kept, all zero.
    GetXattr,
    /// Setting them: only to all zero (nothing kept, nothing to set).
    SetXattr(bool),
}

impl Ioctl {
    /// The ioctl `cmd` with input `data`; ENOTTY for a command squeezefs does not answer
    /// (as for any ioctl a filesystem does not know), EINVAL for a short input.
    pub(super) fn parse(cmd: u32, data: &[u8]) -> Result<Ioctl, Errno> {
        if GETFLAGS.contains(&cmd) {
            return Ok(Ioctl::GetFlags);
        }
        if SETFLAGS.contains(&cmd) {
            let b: [u8; 4] = data
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or(Errno::EINVAL)?;
            return Ok(Ioctl::SetFlags(u32::from_ne_bytes(b)));
        }
        if cmd == FSGETXATTR {
            return Ok(Ioctl::GetXattr);
        }
        if cmd == FSSETXATTR {
            let x = data.get(..FSXATTR_LEN).ok_or(Errno::EINVAL)?;
            return Ok(Ioctl::SetXattr(x.iter().all(|&b| b == 0)));
        }
        Err(Errno::ENOTTY)
    }
}

/// The flags a compression property shows.
pub fn flags_of(prop: Option<CodecSpec>) -> u32 {
    match prop {
        None => 0,
        Some(c) if c.alg == Algorithm::None => NOCOMP,
        Some(_) => COMPR,
    }
}

/// The compression property flags `new` ask for, given the current one: `Ok(None)` to
/// remove it, `Ok(Some(codec))` to set it (`mount`: the mount's codec). EOPNOTSUPP for any
/// other flag, EINVAL for `c` and `m` together.
pub fn property_for(
    new: u32,
    current: Option<CodecSpec>,
    mount: CodecSpec,
) -> Result<Option<CodecSpec>, Errno> {
    if new & !(COMPR | NOCOMP) != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(match (new & COMPR != 0, new & NOCOMP != 0) {
        (true, true) => return Err(Errno::EINVAL),
        (true, false) => Some(match current {
            Some(c) if c.alg != Algorithm::None => c,
            _ if mount.alg != Algorithm::None => mount,
            _ => CodecSpec::DEFAULT,
        }),
        (false, true) => Some(CodecSpec::NONE),
        (false, false) => None,
    })
}

impl Core {
    /// FUSE_IOCTL on a backing inode: the flags (4 bytes) for GETFLAGS, nothing for
    /// SETFLAGS.
    pub(super) fn do_ioctl(&self, ino: fuser::INodeNo, op: Ioctl) -> Result<Vec<u8>, Errno> {
        let inode = self.inode(ino)?;
        let current = self.compression_prop(&inode)?;
        match op {
            Ioctl::GetFlags => Ok(flags_of(current).to_ne_bytes().to_vec()),
            Ioctl::GetXattr => Ok(vec![0; FSXATTR_LEN]),
            Ioctl::SetXattr(true) => Ok(Vec::new()),
            Ioctl::SetXattr(false) => Err(Errno::EOPNOTSUPP),
            Ioctl::SetFlags(new) => {
                let want = property_for(new, current, self.opts().codec)?;
                if want != current {
                    self.set_prop_value(&inode, Prop::Compression, want.map(Value::Codec), 0)?;
                }
                Ok(Vec::new())
            }
        }
    }

    fn compression_prop(&self, inode: &Arc<Inode>) -> Result<Option<CodecSpec>, Errno> {
        if !inode.is_dir() && !inode.is_reg {
            return Err(Errno::ENOTTY);
        }
        Ok(match self.get_prop(inode, Prop::Compression)? {
            Some(Value::Codec(c)) => Some(c),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_map_to_the_property_and_back() {
        let zstd9: CodecSpec = "zstd:9".parse().unwrap();
        let mount: CodecSpec = "lz4".parse().unwrap();
        assert_eq!(flags_of(None), 0);
        assert_eq!(flags_of(Some(zstd9)), COMPR);
        assert_eq!(flags_of(Some(CodecSpec::NONE)), NOCOMP);
        // +c: the mount's codec, an own codec kept, zstd:3 on a mount that stores raw.
        assert_eq!(property_for(COMPR, None, mount), Ok(Some(mount)));
        assert_eq!(property_for(COMPR, Some(zstd9), mount), Ok(Some(zstd9)));
        assert_eq!(property_for(COMPR, Some(CodecSpec::NONE), mount), Ok(Some(mount)));
        assert_eq!(
            property_for(COMPR, None, CodecSpec::NONE),
            Ok(Some(CodecSpec::DEFAULT))
        );
        // +m, and clearing.
        assert_eq!(
            property_for(NOCOMP, Some(zstd9), mount),
            Ok(Some(CodecSpec::NONE))
        );
        assert_eq!(property_for(0, Some(zstd9), mount), Ok(None));
        assert_eq!(property_for(COMPR | NOCOMP, None, mount), Err(Errno::EINVAL));
        // Anything else: refused, with or without c.
        for other in [
            0x10,        /* i */
            0x20,        /* a */
            0x80,        /* A */
            0x0008_0000, /* e */
        ] {
            assert_eq!(property_for(other | COMPR, None, mount), Err(Errno::EOPNOTSUPP));
        }
        assert!(matches!(Ioctl::parse(0x8008_6601, &[]), Ok(Ioctl::GetFlags)));
        assert!(matches!(
            Ioctl::parse(0x4008_6602, &4u32.to_ne_bytes()),
            Ok(Ioctl::SetFlags(4))
        ));
        assert!(matches!(Ioctl::parse(0x4008_6602, &[1]), Err(e) if e == Errno::EINVAL));
        assert!(matches!(Ioctl::parse(0x801c_581f, &[]), Ok(Ioctl::GetXattr)));
        assert!(matches!(
            Ioctl::parse(0x401c_5820, &[0; 28]),
            Ok(Ioctl::SetXattr(true))
        ));
        assert!(matches!(
            Ioctl::parse(0x401c_5820, &[1; 28]),
            Ok(Ioctl::SetXattr(false))
        ));
        assert!(matches!(Ioctl::parse(0x8008_7601, &[]), Err(e) if e == Errno::ENOTTY));
    }
}
