//! How much dirty data a mount may hold by default: a share of the memory available to
//! the daemon, the system's or its memory cgroup's, whichever is less.

use std::path::Path;

use squeezefs_container::DEFAULT_DIRTY_BYTES;

use crate::sys;

/// The dirty budget of a mount without `max_dirty=`: a tenth of the memory available
/// when it mounts, as the kernel starts writing its own dirty pages back at a tenth
/// (`vm.dirty_background_ratio`); at least 8 MiB, at most 4 GiB. Available is the
/// system's `MemAvailable`, or the daemon's memory cgroup limit when that is less (a
/// container's: the OOM killer would take the dirty bytes with the daemon).
pub fn default_max_dirty() -> usize {
    let avail = [mem_available(), cgroup_memory_limit()]
        .into_iter()
        .flatten()
        .min();
    let want = avail.map_or(DEFAULT_DIRTY_BYTES as u64, |a| a / 10);
    want.clamp(DEFAULT_DIRTY_BYTES as u64, 4 << 30) as usize
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    sys::meminfo_bytes(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemAvailable:")
}

/// The memory limit of this process's cgroup, the smallest along its ancestors.
fn cgroup_memory_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_memory_limit_in(Path::new("/sys/fs/cgroup"), &own)
}

/// [`cgroup_memory_limit`] under the cgroup mount `root`, for `/proc/self/cgroup` = `own`:
/// cgroup v1's memory controller (`N:memory:/path`, `memory.limit_in_bytes`, 2^62 or more
/// being no limit) or else v2's (`0::/path`, `memory.max`, "max" being none), the smallest
/// limit of the cgroup and its ancestors (a directory missing, as inside a container that
/// sees only its own part of the tree, has none).
fn cgroup_memory_limit_in(root: &Path, own: &str) -> Option<u64> {
    let read = |dir: &Path, name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name)).ok()?.trim().parse().ok()
    };
    let v1 = own.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (ctrls, path) = rest.split_once(':')?;
        ctrls.split(',').any(|c| c == "memory").then_some(path)
    });
    let (base, path, file) = match v1 {
        Some(path) => (root.join("memory"), path, "memory.limit_in_bytes"),
        None => (
            root.to_path_buf(),
            own.lines().find_map(|l| l.strip_prefix("0::"))?,
            "memory.max",
        ),
    };
    let mut dir = base.join(path.trim().trim_start_matches('/'));
    let mut least: Option<u64> = None;
    loop {
        if let Some(limit) = read(&dir, file).filter(|&l| l < 1 << 62) {
            least = Some(least.map_or(limit, |m| m.min(limit)));
        }
        if dir == base || !dir.pop() {
            break;
        }
    }
    least
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_cgroup_limit_is_read_in_v1_and_v2() {
        let root = std::env::temp_dir().join(format!("sq-cgroup-{}", std::process::id()));
        let v1 = root.join("memory/outer/box");
        std::fs::create_dir_all(&v1).unwrap();
        let unlimited = "9223372036854771712\n";
        std::fs::write(root.join("memory/memory.limit_in_bytes"), unlimited).unwrap();
        std::fs::write(root.join("memory/outer/memory.limit_in_bytes"), "419430400\n").unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), unlimited).unwrap();
        let own = "9:name=systemd:/\n4:memory:/outer/box\n0::/\n";
        assert_eq!(
            cgroup_memory_limit_in(&root, own),
            Some(419430400),
            "an ancestor's limit"
        );
        std::fs::write(v1.join("memory.limit_in_bytes"), "1000\n").unwrap();
        assert_eq!(cgroup_memory_limit_in(&root, own), Some(1000), "the smallest");
        std::fs::write(root.join("memory/outer/memory.limit_in_bytes"), unlimited).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), unlimited).unwrap();
        assert_eq!(cgroup_memory_limit_in(&root, own), None, "v1 without a limit");
        let v2 = root.join("slice/box");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.max"), "600\n").unwrap();
        assert_eq!(cgroup_memory_limit_in(&root, "0::/slice/box\n"), Some(600));
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(
            cgroup_memory_limit_in(&root, "0::/slice/box\n"),
            None,
            "v2 without a limit"
        );
        assert_eq!(
            cgroup_memory_limit_in(&root, "0::/not/here\n"),
            None,
            "a path not visible"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
