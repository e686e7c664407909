//! Tests of the mount options' parsing and of what they become.

use super::*;
use squeezefs_container::DEFAULT_DIRTY_BYTES;

#[test]
fn dirty_options_parse() {
    let mut c = MountConfig::default();
    assert_eq!((c.max_dirty, c.dirty_expire), (None, 30));
    c.apply_options("max_dirty=64M,dirty_expire=5").unwrap();
    assert_eq!((c.max_dirty, c.dirty_expire), (Some(64 << 20), 5));
    let o = c.container_options();
    assert_eq!(o.dirty.limit(), 64 << 20);
    assert_eq!(o.dirty.expire(), std::time::Duration::from_secs(5));
    assert!(c
        .apply_options("dirty_expire=0")
        .unwrap_err()
        .contains("1 to 86400"));
    assert!(c.apply_options("max_dirty").unwrap_err().contains("malformed"));
    assert!(c.apply_options("max_dirty=lots").is_err());
    let d = default_max_dirty();
    assert!((DEFAULT_DIRTY_BYTES..=4 << 30).contains(&d), "{d}");
}

#[test]
fn adaptive_compression_parses() {
    let mut c = MountConfig::default();
    c.apply_options("compress=zstd:adapt").unwrap();
    assert_eq!(
        (c.adapt, c.codec.to_string()),
        (Some((1, 9)), "zstd:3".to_string())
    );
    assert_eq!(c.container_options().compress_name(), "zstd:adapt:1-9");
    c.apply_options("compress-force=zstd:adapt:5-12").unwrap();
    assert_eq!((c.adapt, c.codec.level, c.force), (Some((5, 12)), 5, true));
    c.apply_options("compress=lz4").unwrap();
    assert_eq!(c.adapt, None, "a later compress= replaces it");
    assert!(c.container_options().adapt.is_none());
    let e = c.apply_options("compress=zstd:adapt:12-5").unwrap_err();
    assert!(
        e.contains("compress=zstd:adapt:12-5") && e.contains("MIN <= MAX"),
        "{e}"
    );
}

#[test]
fn rules_option_takes_a_quoted_list_and_refuses_a_bad_one_saying_where() {
    let mut c = MountConfig::default();
    c.apply_options(r#"compress=lz4,rules="*.log,*.txt=zstd:9; *.db=zstd:1,extent_size=16K",ro"#)
        .unwrap();
    let r = c.rules.as_ref().expect("rules");
    assert_eq!(r.to_string(), "*.log,*.txt=zstd:9; *.db=zstd:1,extent_size=16K");
    assert!(
        c.read_only && c.codec == "lz4".parse().unwrap(),
        "the options around it"
    );
    // Unquoted, the first comma ends it: one glob and one setting still work.
    c.apply_options("rules=*.jpg=none;*.log=zstd:7").unwrap();
    assert_eq!(c.rules.as_ref().unwrap().list.len(), 2);
    let e = c.apply_options(r#"rules="*.log=zstd:9; *.db""#).unwrap_err();
    assert!(e.contains("column 19") && e.contains("quote"), "{e}");
    assert!(c
        .apply_options(r#"rules="*.log=lz4"#)
        .unwrap_err()
        .contains("not closed"));
    // Unquoted with commas: the pieces after the first comma are refused by name.
    assert!(c.apply_options("rules=*.log,*.txt=zstd:9").is_err());
    c.apply_options(r#"rules="""#).unwrap();
    assert!(c.rules.is_none(), "empty: none");
}

#[test]
fn background_options_parse() {
    let mut c = MountConfig::default();
    assert_eq!(
        c.background,
        background::Config::default(),
        "no pass unless asked"
    );
    c.apply_options("background_compression=zstd:15,background_idle=2,background_rate=16M")
        .unwrap();
    assert_eq!(c.background.target, Some("zstd:15".parse().unwrap()));
    assert_eq!(c.background.idle, std::time::Duration::from_secs(2));
    assert_eq!(c.background.rate, 16 << 20);
    c.apply_options("background_compression=none").unwrap();
    assert_eq!(c.background.target, None);
    // Cold files get 1 MiB extents, unless the mount chose an extent size, unless
    // `background_extent_size=` says otherwise (in any order).
    assert_eq!(c.background.extent_shift, 20);
    c.apply_options("extent_size=16K").unwrap();
    assert_eq!(c.background.extent_shift, 14);
    let mut c = MountConfig::default();
    c.apply_options("background_extent_size=512K,extent_size=16K")
        .unwrap();
    assert_eq!((c.extent_shift, c.background.extent_shift), (14, 19));
    c.apply_options("background_extent_size=16K").unwrap();
    assert_eq!(c.background.extent_shift, 14);
    for (bad, says) in [
        (
            "background_extent_size=2M",
            "background_extent_size=2M: must be a power of two",
        ),
        ("background_extent_size", "malformed"),
        ("background_compression=zstd:42", "background_compression=zstd:42"),
        ("background_compression", "malformed"),
        ("background_idle=0", "1 to 86400"),
        ("background_rate=4K", "at least 1M"),
    ] {
        let e = c.apply_options(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn spin_option_parses() {
    use spin::SpinChoice::{Auto, Window};
    use std::time::Duration;
    let mut c = MountConfig::default();
    assert_eq!(c.spin, Auto, "measured at mount unless asked for");
    c.apply_options("spin=100").unwrap();
    assert_eq!(c.spin, Window(Duration::from_micros(spin::SUGGESTED_SPIN_US)));
    c.apply_options("spin=0").unwrap();
    assert_eq!(c.spin, Window(Duration::ZERO));
    c.apply_options("spin=auto").unwrap();
    assert_eq!(c.spin, Auto);
    c.apply_options("spin=250").unwrap();
    assert_eq!(c.spin, Window(Duration::from_micros(250)));
    assert!(c.apply_options("spin").unwrap_err().contains("malformed"));
    assert!(c.apply_options("spin=-1").unwrap_err().contains("0: off"));
    assert!(c.apply_options("spin=2000000").is_err());
}

#[test]
fn dirops_option_parses() {
    let mut c = MountConfig::default();
    assert!(!c.dirops_behind, "names made inside the create unless asked");
    c.apply_options("dirops=behind").unwrap();
    assert!(c.dirops_behind);
    c.apply_options("dirops=sync").unwrap();
    assert!(!c.dirops_behind);
    assert!(c.apply_options("dirops=later").unwrap_err().contains("behind"));
    assert!(c.apply_options("dirops").is_err());
}

#[test]
fn options_parse() {
    let mut c = MountConfig::default();
    c.apply_options("compress=zstd:9,extent_size=1M,allow_other,noatime,defaults")
        .unwrap();
    assert_eq!(c.codec, "zstd:9".parse().unwrap());
    assert_eq!(c.extent_shift, 20);
    assert!(c.allow_other && !c.force);
    assert_eq!(c.other, vec!["noatime".to_string()]);
    c.apply_options("compress-force=lz4,ro").unwrap();
    assert!(c.force && c.read_only);
    assert!(c
        .apply_options("compress=zstd:99")
        .unwrap_err()
        .contains("accepted"));
    assert!(c.apply_options("extent_size=3000").is_err());
    assert!(c.apply_options("extent_size=2M").is_err());
    assert_eq!(parse_extent_size("4K").unwrap(), 12);
    // Access-time options: relatime is the default; noatime and atime go to mount(2),
    // nodiratime and strictatime to mount_setattr(2); the last access-time mode wins.
    let mut c = MountConfig::default();
    c.apply_options("relatime,noatime,sync").unwrap();
    assert_eq!(c.other, vec!["noatime".to_string(), "sync".to_string()]);
    c.apply_options("strictatime,nodiratime").unwrap();
    assert_eq!(c.other, vec!["sync".to_string()]);
    assert_eq!(
        c.mount_attrs,
        vec!["strictatime".to_string(), "nodiratime".to_string()]
    );
    c.apply_options("relatime").unwrap();
    assert_eq!(c.mount_attrs, vec!["nodiratime".to_string()]);
    assert!(c.apply_options("lazytime").unwrap_err().contains("not supported"));
    assert!(c.apply_options("norelatime").is_err());
    assert_eq!(parse_extent_size("131072").unwrap(), 17);
}

/// An unknown name is refused here, naming what is known; the kernel's own options
/// pass through; `create` is ours.
#[test]
fn unknown_options_are_refused_and_the_kernels_pass() {
    let mut c = MountConfig::default();
    let e = c.apply_options("compress=lz4,bogus=1").unwrap_err();
    assert!(e.starts_with("unknown mount option `bogus`"), "{e}");
    assert!(
        e.contains("compress-force=") && e.contains("noatime") && e.contains("--help"),
        "{e}"
    );
    assert!(!e.contains('\n'), "one line: {e}");
    for bad in [
        "fsname=x",
        "auto_unmount",
        "rootmode=40000",
        "max_read",
        "noatime=1",
        "create=yes",
    ] {
        assert!(MountConfig::default().apply_options(bad).is_err(), "{bad}");
    }
    let mut c = MountConfig::default();
    c.apply_options("create,nosuid,max_read=131072,context=system_u:object_r:tmp_t:s0,user=alice")
        .unwrap();
    assert!(c.create);
    assert_eq!(
        c.other,
        ["nosuid", "max_read=131072", "context=system_u:object_r:tmp_t:s0"]
    );
}

/// What the options become for mount(2) and fusermount3: the kernel's flag words as
/// `MS_*` flags, the value options and permission options as FUSE options, the same words
/// for fusermount3; root's mounts suid,dev unless asked, others' nosuid,nodev.
#[test]
fn options_become_the_mount_request() {
    let mut c = MountConfig::default();
    c.apply_options("allow_other,noatime,nodev,max_read=131072,ro,dirsync")
        .unwrap();
    let r = c.mount_request(Path::new("/srv/b,1"));
    assert_eq!(r.fsname, "squeezefs:/srv/b,1");
    let want = libc::MS_NOATIME | libc::MS_NODEV | libc::MS_RDONLY | libc::MS_DIRSYNC;
    assert_eq!(r.flags & want, want);
    assert_eq!(r.flags & libc::MS_NOEXEC, 0);
    assert_eq!(
        r.kernel,
        [
            "subtype=squeezefs",
            "default_permissions",
            "max_read=131072",
            "allow_other"
        ]
    );
    assert_eq!(
        r.helper,
        [
            "fsname=squeezefs:/srv/b,1",
            "subtype=squeezefs",
            "default_permissions",
            "ro",
            "noatime",
            "nodev",
            "max_read=131072",
            "dirsync",
            "allow_other"
        ]
    );
    let plain = MountConfig::default().mount_request(Path::new("/b"));
    let root = sys::euid() == 0;
    assert_eq!(plain.flags & libc::MS_NOSUID != 0, !root);
    assert_eq!(plain.flags & libc::MS_NODEV != 0, !root);
    let mut c = MountConfig::default();
    c.apply_options("nosuid").unwrap();
    assert_ne!(c.mount_request(Path::new("/b")).flags & libc::MS_NOSUID, 0);
}
