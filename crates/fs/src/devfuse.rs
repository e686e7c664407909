//! Whether this process can open the FUSE device, said in the user's terms.
//!
//! fuser opens `/dev/fuse` itself and returns the bare error ("Permission denied (os
//! error 13)"), which names neither the device nor a remedy. The device is opened here
//! first, and closed again: a failure becomes a message that says which device, why, and
//! what to do — the situations met in practice being a container started without the device
//! and a host whose device is not open to every user.

use std::fs::OpenOptions;
use std::io;

/// The FUSE device.
pub const PATH: &str = "/dev/fuse";

/// Opens and closes [`PATH`]; an error says what to do.
pub fn check() -> io::Result<()> {
    match OpenOptions::new().read(true).write(true).open(PATH) {
        Ok(_) => Ok(()),
        Err(e) => Err(explain(&e)),
    }
}

/// The message for a failed open of the device.
fn explain(e: &io::Error) -> io::Error {
    let uid = crate::sys::euid();
    let msg = match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => format!(
            "{PATH} does not exist ({e}): squeezefs needs the kernel's FUSE device. On a host, \
             load the module as root (`modprobe fuse`); in a container, start it with the \
             device (`docker run --device /dev/fuse --cap-add SYS_ADMIN …`, \
             `podman run --device /dev/fuse …`)"
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "{PATH}: permission denied for uid {uid} ({e}): squeezefs needs to open the kernel's \
             FUSE device, and this user may not. Ask an administrator to open it to you (most \
             distributions make it mode 0666: `chmod 0666 {PATH}`, or give it a group you are \
             in); in a container, start it with `--device /dev/fuse`"
        ),
        _ => format!("{PATH}: {e}: the kernel's FUSE device cannot be opened"),
    };
    io::Error::new(e.kind(), msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_names_the_device_and_a_remedy() {
        for (errno, remedy) in [
            (libc::ENOENT, "modprobe fuse"),
            (libc::ENODEV, "--device /dev/fuse"),
            (libc::EACCES, "chmod 0666"),
            (libc::EPERM, "--device /dev/fuse"),
            (libc::EIO, "cannot be opened"),
        ] {
            let m = explain(&io::Error::from_raw_os_error(errno)).to_string();
            assert!(m.contains(PATH) && m.contains(remedy), "errno {errno}: {m}");
        }
    }
}
