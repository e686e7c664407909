//! `squeezefs property get|set`: the compression properties of files and directories on a
//! mounted squeezefs, like `btrfs property`. They are the xattrs `user.squeezefs.compression`
//! and `user.squeezefs.extent_size`, so `getfattr`/`setfattr` work too; this command adds
//! checking, the inherited value and where it comes from, recursion and `--json`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;
use squeezefs_fs::props::{self, Prop};

use crate::args::Output;

#[derive(Subcommand)]
pub enum PropertyCmd {
    /// Show a property (or both) of PATH: its own value, or what it inherits.
    #[command(after_help = "Examples:\n  squeezefs property get /mnt/logs\n  \
        squeezefs property get /mnt/db/data.sqlite compression --json")]
    Get {
        path: PathBuf,
        /// compression, compression_force, extent_size, dictionary, background_compression
        /// or rules (default: all; on a file, `rules` names the rule that applies to its
        /// name).
        name: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Set a property of PATH. On a directory it applies to files and directories created
    /// in it afterwards; on a file, to data written afterwards (existing extents keep their
    /// codec). An empty VALUE removes the property.
    #[command(after_help = "Properties:\n  \
        compression   none, lz4[:1-12], lzo, zlib[:1-9], zstd[:1-19], zstd-fast[:1-1000]\n  \
        compression_force\n                \
        on or off: compress every extent, as the mount option compress-force=\n                \
        (no heuristic, no incompressible-file backoff, no early abort, no\n                \
        check for already-compressed formats)\n  \
        extent_size   4K, 8K, ... 1M (a file's only while it is empty)\n  \
        dictionary    a zstd dictionary id (see `squeezefs dict`): small zstd data uses it\n  \
        background_compression\n                \
        a codec as for compression: while the mount is idle, extents stored\n                \
        otherwise are recompressed to it, and small files repacked into\n                \
        1 MiB blocks at it (everything below a directory, old files too;\n                \
        `none`: left alone)\n  \
        rules         directories only: GLOBS=SETTINGS; ... matched against the\n                \
        name of each file made there (the first match wins, over the\n                \
        directory's own properties; a file's own property beats it).\n                \
        GLOBS: *.log,*.{jpg,png}; SETTINGS: a codec, force, extent_size=SIZE,\n                \
        dictionary=ID. `property get FILE rules` names the rule for FILE;\n                \
        `squeezefs compress DIR` gives files made before what the rules say\n\n\
        Examples:\n  squeezefs property set /mnt/archive compression zstd:19\n  \
        squeezefs property set /mnt/archive extent_size 1M\n  \
        squeezefs property set /mnt/archive background_compression zstd:15\n  \
        squeezefs property set /mnt/data rules '*.log,*.txt=zstd:9; *.sqlite,*.db=zstd:1,extent_size=16K; *.jpg,*.png,*.zst=none'\n  \
        squeezefs property set /mnt/data rules '*.csv=zstd:6,force; *=zstd:3'\n  \
        squeezefs property set /mnt/backups compression_force on\n  \
        squeezefs property set -r /mnt/photos compression none\n  \
        squeezefs property set /mnt/logs compression ''      # remove")]
    Set {
        path: PathBuf,
        name: String,
        value: String,
        /// Also every file and directory below PATH.
        #[arg(short, long)]
        recursive: bool,
    },
}

fn prop_named(name: &str) -> Result<Prop, String> {
    match name.trim_start_matches("user.squeezefs.") {
        "compression" | "compress" => Ok(Prop::Compression),
        "extent_size" | "extent-size" => Ok(Prop::ExtentSize),
        "dictionary" | "dict" => Ok(Prop::Dictionary),
        "background_compression" | "background-compression" | "background" => Ok(Prop::Background),
        "rules" => Ok(Prop::Rules),
        "compression_force" | "compression-force" | "compress-force" | "force" => Ok(Prop::Force),
        other => Err(format!(
            "unknown property `{other}` (known: compression, compression_force, extent_size, dictionary, \
             background_compression, rules)"
        )),
    }
}

fn cpath(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{}: path contains a NUL byte", p.display()))
}

/// The property's own value on `path` (`None`: not set there).
pub(crate) fn own(path: &Path, p: Prop) -> Result<Option<String>, String> {
    cpath(path)?; // refuses a path with a NUL byte, naming it
    let name = CString::new(p.xattr()).expect("no NUL");
    let mut buf = vec![0u8; p.max_len()];
    let n = match crate::sys::getxattr(path, &name, &mut buf) {
        Ok(n) => n,
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::ENODATA) => Ok(None),
                Some(libc::EOPNOTSUPP) => Err(format!(
                    "{}: not on a squeezefs mount, or its backing filesystem has no user xattrs",
                    path.display()
                )),
                _ => Err(format!("{}: {e}", path.display())),
            }
        }
    };
    buf.truncate(n);
    Ok(Some(
        String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string(),
    ))
}

/// The mount's defaults, from its live statistics file (the whole document).
fn mount_defaults(path: &Path) -> Option<serde_json::Value> {
    let mount = crate::locate::locate(path).ok()?.mount?;
    crate::statsfile::read(&mount).ok()
}

fn mount_value(defaults: &Option<serde_json::Value>, p: Prop) -> Option<String> {
    let doc = defaults.as_ref()?;
    if p == Prop::Background {
        return doc.get("background")?.get("target")?.as_str().map(str::to_string);
    }
    let m = doc.get("mount")?;
    match p {
        Prop::Compression => m.get("compress")?.as_str().map(str::to_string),
        Prop::ExtentSize => {
            let b = m.get("extent_size")?.as_u64()?;
            Some(props::format(&props::Value::Shift(b.trailing_zeros() as u8)))
        }
        Prop::Rules => doc.get("rules")?.as_str().map(str::to_string),
        Prop::Force => m.get("force")?.as_bool()?.then(|| "on".to_string()),
        Prop::Dictionary | Prop::Background => None,
    }
}

fn get(path: &Path, name: Option<&str>, as_json: bool) -> Result<(), String> {
    std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let which: Vec<Prop> = match name {
        Some(n) => vec![prop_named(n)?],
        None => Prop::ALL.to_vec(),
    };
    let defaults = mount_defaults(path);
    let mut out = serde_json::Map::new();
    let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
    for p in which {
        if p == Prop::Rules && !is_dir {
            // A file has no rules: the rule that applies to its name, and where from.
            let (text, at) = rule_for(path, &defaults);
            if as_json {
                out.insert("rule".into(), json!({ "value": text, "source": at }));
            } else {
                match (text, at) {
                    (Some(t), Some(at)) => println!("rule={t}\t(the first matching its name, from {at})"),
                    _ => println!("rule\t(no rule matches its name)"),
                }
            }
            continue;
        }
        let key = p.xattr().trim_start_matches("user.squeezefs.");
        let (value, source) = match own(path, p)? {
            Some(v) => (Some(v), if path.is_dir() { "directory" } else { "file" }),
            None => (mount_value(&defaults, p), "mount"),
        };
        if as_json {
            out.insert(key.into(), json!({ "value": value, "source": source }));
        } else {
            match (value, source) {
                (Some(v), "mount") => println!("{key}={v}\t(not set here: the mount's default)"),
                (Some(v), s) => println!("{key}={v}\t(set on this {s})"),
                (None, _) => println!("{key}\t(not set here)"),
            }
        }
    }
    if as_json {
        let doc = json!({ "path": path.display().to_string(), "properties": out });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    }
    Ok(())
}

/// The rule that applies to the file `path` by its name (`crate::rules`), and where it
/// comes from ("rule 2 of DIR", "rule 1 of the mount's rules=").
fn rule_for(path: &Path, defaults: &Option<serde_json::Value>) -> (Option<String>, Option<String>) {
    let Some(name) = path.file_name() else {
        return (None, None);
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mount = defaults.as_ref().and_then(crate::rules::mount_rules);
    match crate::rules::Lookup::default().rule(dir, name.as_bytes(), mount.as_ref()) {
        Some(a) => (Some(a.rule.to_string()), Some(a.source(dir))),
        None => (None, None),
    }
}

/// Sets one property on one path; `Ok(false)` when skipped (extent size of a file that
/// holds data, in a recursive run).
pub(crate) fn set_one(path: &Path, p: Prop, value: &str, recursive: bool) -> Result<bool, String> {
    cpath(path)?; // refuses a path with a NUL byte, naming it
    let name = CString::new(p.xattr()).expect("no NUL");
    let r = if value.is_empty() {
        crate::sys::removexattr(path, &name)
    } else {
        crate::sys::setxattr(path, &name, value.as_bytes())
    };
    let Err(e) = r else {
        return Ok(true);
    };
    let is_file_with_data = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0);
    match e.raw_os_error() {
        Some(libc::ENODATA) if value.is_empty() => Ok(true),
        Some(libc::EINVAL) if p == Prop::ExtentSize && is_file_with_data => {
            if recursive {
                Ok(false)
            } else {
                Err(format!(
                    "{}: the extent size of a file that holds data is fixed; set it on the \
                     directory (new files inherit it) or on the file while it is empty",
                    path.display()
                ))
            }
        }
        Some(libc::EINVAL) if p == Prop::Rules && !path.is_dir() => Err(format!(
            "{}: rules live on directories (they apply to the files made there); set them on \
             its directory",
            path.display()
        )),
        Some(libc::EINVAL) if p == Prop::Dictionary => Err(format!(
            "{}: dictionary {value} is not in the backing directory's .squeezefs-dicts, or is \
             damaged (the daemon's log says which); `squeezefs dict list` shows those there",
            path.display()
        )),
        Some(libc::EPERM) if recursive && !path.is_dir() && !path.is_file() => Ok(false),
        Some(libc::EPERM) => Err(format!(
            "{}: properties live on files and directories only ({e})",
            path.display()
        )),
        Some(libc::EOPNOTSUPP) => Err(format!(
            "{}: not on a squeezefs mount, or its backing filesystem has no user xattrs ({e})",
            path.display()
        )),
        _ => Err(format!("{}: setting {}: {e}", path.display(), p.xattr())),
    }
}

fn set(path: &Path, name: &str, value: &str, recursive: bool) -> Result<(), String> {
    let p = prop_named(name)?;
    // Force is off where it is not set: `off` removes it.
    let value = match value {
        "off" | "no" | "false" | "0" if p == Prop::Force => "",
        v => v,
    };
    if !value.is_empty() {
        props::parse(p, value.as_bytes()).map_err(|e| format!("{name}={value}: {e}"))?;
    }
    std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    set_one(path, p, value, false)?;
    if !(recursive && path.is_dir()) {
        return Ok(());
    }
    let (mut done, mut skipped) = (0u64, 0u64);
    for (entry, _) in crate::walk::entries(path)? {
        if p == Prop::Rules && !entry.is_dir() {
            continue; // (rules live on directories)
        }
        if set_one(&entry, p, value, true)? {
            done += 1;
        } else {
            skipped += 1;
        }
    }
    eprintln!("set {name} on {} and {done} entries below it", path.display());
    if skipped > 0 {
        eprintln!("skipped {skipped} files that hold data (their extent size is fixed)");
    }
    Ok(())
}

pub fn main(cmd: PropertyCmd) -> Result<(), String> {
    match cmd {
        PropertyCmd::Get { path, name, out } => get(&path, name.as_deref(), out.json),
        PropertyCmd::Set {
            path,
            name,
            value,
            recursive,
        } => set(&path, &name, &value, recursive),
    }
}
