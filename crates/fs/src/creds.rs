//! Who is asking: a request's caller as the kernel sees it (fsuid, fsgid, supplementary
//! groups, CAP_FSETID), from `/proc/PID/status`, and the VFS's rule for which of a file's
//! setuid/setgid bits such a caller's write, truncate or allocation clears.
//!
//! FUSE leaves that rule to the daemon in two places: with FUSE_HANDLE_KILLPRIV_V2 (a write
//! by a caller without CAP_FSETID arrives flagged, written through), and for truncation
//! and fallocate, where the kernel's own fallback (`fuse_setattr`) still applies the rule
//! Linux had before 6.0 and keeps a group-non-executable setgid bit (`2666`) that ext4,
//! xfs and btrfs clear. Reading `/proc` costs a few microseconds and happens only for
//! files with one of those bits set.

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub fsgid: u32,
    pub groups: Vec<u32>,
    pub cap_fsetid: bool,
}

const CAP_FSETID: u32 = 4;

impl Caller {
    /// The caller `pid` (fsgid `gid` as the request carries it), read from
    /// `/proc/PID/status`. A caller that is gone (or a status that cannot be read) counts
    /// as one without CAP_FSETID and without supplementary groups: bits are then cleared
    /// rather than kept.
    pub fn of(pid: u32, gid: u32) -> Caller {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| Caller::parse(&s))
            .unwrap_or(Caller {
                fsgid: gid,
                groups: Vec::new(),
                cap_fsetid: false,
            })
    }

    /// Parses a `/proc/PID/status` document (`Gid:` real, effective, saved, fs; `Groups:`;
    /// `CapEff:` in hex).
    pub fn parse(status: &str) -> Option<Caller> {
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        let fsgid = field("Gid:")?.split_whitespace().nth(3)?.parse().ok()?;
        let groups = field("Groups:")
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect();
        let caps = u64::from_str_radix(field("CapEff:")?, 16).ok()?;
        Some(Caller {
            fsgid,
            groups,
            cap_fsetid: caps & (1 << CAP_FSETID) != 0,
        })
    }

    fn in_group(&self, gid: u32) -> bool {
        self.fsgid == gid || self.groups.contains(&gid)
    }
}

/// The mode bits a change to the data of a file (`mode`, group `gid`) by `caller` clears:
/// setuid always, setgid when the group may execute the file or the caller is not in its
/// group, none at all for a caller with CAP_FSETID (the VFS's `setattr_should_drop_suidgid`).
pub fn privs_to_kill(mode: u32, gid: u32, caller: &Caller) -> u32 {
    if caller.cap_fsetid {
        return 0;
    }
    let mut kill = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !caller.in_group(gid)) {
        kill |= libc::S_ISGID;
    }
    kill
}

/// The setgid bit that setting an access ACL by `caller` clears (`posix_acl_update_mode`):
/// when the caller is neither in the file's group nor holds CAP_FSETID.
pub fn sgid_to_kill_on_acl(mode: u32, gid: u32, caller: &Caller) -> u32 {
    if caller.cap_fsetid || caller.in_group(gid) {
        0
    } else {
        mode & libc::S_ISGID
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(fsgid: u32, groups: &[u32], cap: bool) -> Caller {
        Caller {
            fsgid,
            groups: groups.to_vec(),
            cap_fsetid: cap,
        }
    }

    #[test]
    fn parses_proc_status() {
        let s = "Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t101\n\
                 Groups:\t4 24 27 \nCapEff:\t0000000000000010\n";
        assert_eq!(Caller::parse(s), Some(caller(101, &[4, 24, 27], true)));
        let s = "Gid:\t0\t0\t0\t0\nGroups:\nCapEff:\t0000000000000000\n";
        assert_eq!(Caller::parse(s), Some(caller(0, &[], false)));
        assert_eq!(Caller::parse("Name:\tx\n"), None);
        // This process can be read.
        let me = Caller::of(std::process::id(), 0);
        assert_eq!(me.fsgid, crate::sys::egid());
    }

    #[test]
    fn the_vfs_rule_for_suid_and_sgid() {
        let other = caller(200, &[300], false);
        let member = caller(200, &[100], false);
        let root = caller(0, &[], true);
        // setuid goes for anyone without CAP_FSETID.
        assert_eq!(privs_to_kill(0o4755, 100, &member), libc::S_ISUID);
        assert_eq!(privs_to_kill(0o4755, 100, &root), 0);
        // setgid with group execute goes for everyone without CAP_FSETID.
        assert_eq!(privs_to_kill(0o2775, 100, &member), libc::S_ISGID);
        // setgid without group execute goes only for those outside the group (ext4: 2666
        // written by another user becomes 666).
        assert_eq!(privs_to_kill(0o2666, 100, &other), libc::S_ISGID);
        assert_eq!(privs_to_kill(0o2666, 100, &member), 0);
        assert_eq!(privs_to_kill(0o6777, 100, &other), libc::S_ISUID | libc::S_ISGID);
        assert_eq!(privs_to_kill(0o0777, 100, &other), 0);
        assert_eq!(sgid_to_kill_on_acl(0o2775, 100, &other), libc::S_ISGID);
        assert_eq!(sgid_to_kill_on_acl(0o2775, 100, &member), 0);
        assert_eq!(sgid_to_kill_on_acl(0o2775, 100, &root), 0);
    }
}
