//! Counts of the FUSE requests this mount has answered, by kind, for the statistics file
//! (`requests` in `.squeezefs-stats`, `squeezefs stats --live`): what the kernel asks for
//! per file is what the per-file path costs (docs/BENCHMARKS.md), and a test can see
//! whether a request reached the daemon at all (a re-read served by the page cache sends
//! no READ).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

/// The kinds counted: the ones a file's create, read and close are made of.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Lookup,
    Getattr,
    Setattr,
    Open,
    Create,
    Read,
    Write,
    Flush,
    Release,
    Opendir,
    Readdir,
    Readdirplus,
    Getxattr,
}

const KINDS: &[(Kind, &str)] = &[
    (Kind::Lookup, "lookup"),
    (Kind::Getattr, "getattr"),
    (Kind::Setattr, "setattr"),
    (Kind::Open, "open"),
    (Kind::Create, "create"),
    (Kind::Read, "read"),
    (Kind::Write, "write"),
    (Kind::Flush, "flush"),
    (Kind::Release, "release"),
    (Kind::Opendir, "opendir"),
    (Kind::Readdir, "readdir"),
    (Kind::Readdirplus, "readdirplus"),
    (Kind::Getxattr, "getxattr"),
];

#[derive(Default)]
pub struct Requests([AtomicU64; KINDS.len()]);

impl Requests {
    pub fn count(&self, k: Kind) {
        self.0[k as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// `{"lookup": n, …}`.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for &(k, name) in KINDS {
            m.insert(name.into(), json!(self.0[k as usize].load(Ordering::Relaxed)));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_counter_and_name() {
        let r = Requests::default();
        for (i, (k, _)) in KINDS.iter().enumerate() {
            assert_eq!(*k as usize, i);
            for _ in 0..=i {
                r.count(*k);
            }
        }
        let v = r.to_json();
        for (i, (_, name)) in KINDS.iter().enumerate() {
            assert_eq!(v[name], (i + 1) as u64, "{name}");
        }
    }
}
