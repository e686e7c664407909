//! The system calls of mounting a FUSE filesystem and of unmounting it again, behind safe
//! wrappers: mount(2) and umount2(2), `statx` for the identity of the mount at a path, and
//! the receiving end of `fusermount3`'s protocol (the FUSE device's fd passed over a Unix
//! socket as `SCM_RIGHTS`). Used by `crate::fuse_mount`, which decides what to call when.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::cstr;

/// mount(2): `source` (what mountinfo shows as the source), `target`, `fstype`, the `MS_*`
/// `flags` and the filesystem's option string `data`.
pub fn mount(
    source: &CStr,
    target: &Path,
    fstype: &CStr,
    flags: libc::c_ulong,
    data: &CStr,
) -> io::Result<()> {
    let t = cstr(target.as_os_str())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, which only
    // reads them.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            t.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// umount2(2) of the mount at `target` with `flags` (`MNT_DETACH`, `UMOUNT_NOFOLLOW`).
pub fn umount(target: &Path, flags: libc::c_int) -> io::Result<()> {
    let t = cstr(target.as_os_str())?;
    // SAFETY: `t` is NUL-terminated and outlives the call, which only reads it.
    if unsafe { libc::umount2(t.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Which mount a path is on: the kernel's mount ID and the device number of its
/// filesystem. With `unique` (Linux 6.8+: `STATX_MNT_ID_UNIQUE`), the ID is never given to
/// another mount while the system runs; otherwise it is the reusable one of
/// `/proc/self/mountinfo`, and only the pair says much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountIdentity {
    pub mnt_id: u64,
    pub unique: bool,
    pub dev: (u32, u32),
}

/// The [`MountIdentity`] of the mount `path` is on (`path` itself when it is a mount
/// point; a symlink there is not followed, an automount not triggered). Asked with
/// `AT_STATX_DONT_SYNC`, so that a FUSE filesystem there is never sent a request: its
/// daemon may be this process, before or after it serves any.
pub fn mount_identity(path: &Path) -> io::Result<MountIdentity> {
    let c = cstr(path.as_os_str())?;
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `c` is NUL-terminated, `stx` a `struct statx` we own that statx fills; both
    // outlive the call.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_DONT_SYNC | libc::AT_NO_AUTOMOUNT | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID_UNIQUE | libc::STATX_MNT_ID,
            stx.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statx succeeded, so it wrote the struct (which was zeroed before anyway).
    let stx = unsafe { stx.assume_init() };
    let unique = stx.stx_mask & libc::STATX_MNT_ID_UNIQUE != 0;
    if !unique && stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "statx gives no mount ID (Linux 5.8 or later is needed)",
        ));
    }
    Ok(MountIdentity {
        mnt_id: stx.stx_mnt_id,
        unique,
        dev: (stx.stx_dev_major, stx.stx_dev_minor),
    })
}

/// Whether `fd` is passed on to the programs this process starts (clears or sets
/// `FD_CLOEXEC`).
pub fn set_inheritable(fd: impl AsFd, on: bool) -> io::Result<()> {
    let raw = fd.as_fd().as_raw_fd();
    // SAFETY: fcntl on a borrowed, open fd, with integer arguments only.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let new = if on {
        flags & !libc::FD_CLOEXEC
    } else {
        flags | libc::FD_CLOEXEC
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(raw, libc::F_SETFD, new) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one message on `sock` and the first fd it carries as `SCM_RIGHTS` (the FUSE
/// device `fusermount3` opened and mounted). `Ok(None)`: the other end closed without
/// sending one (fusermount3 failed, and says why on its stderr). Every other fd received
/// is closed.
pub fn recv_fd(sock: &UnixStream) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: byte.len(),
    };
    // Room for a few fds: fusermount3 sends one.
    const MAX_FDS: usize = 4;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<libc::c_int>()) as u32) } as usize;
    // u64 words keep the control buffer aligned as `struct cmsghdr` needs.
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero msghdr is valid (no name, no buffers); the fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points at `iov` (one byte of `byte`) and `control` (`space` bytes),
        // all ours and alive for the call, which writes within them.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break n;
    };
    let mut first: Option<OwnedFd> = None;
    // SAFETY: the CMSG_* walk stays within `control`, as recvmsg filled it and set
    // `msg_controllen`; each SCM_RIGHTS payload holds `(cmsg_len - CMSG_LEN(0)) / 4`
    // ints, each an fd just installed in this process and owned by nobody else.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<libc::c_int>();
                for i in 0..count {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if first.is_none() {
                        first = Some(fd);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n == 0 && first.is_none() {
        return Ok(None);
    }
    Ok(first)
}
