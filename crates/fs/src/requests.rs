//! Counts of the FUSE requests this mount has answered, by kind, for the statistics file
//! (`requests` in `.squeezefs-stats`, `squeezefs stats --live`): what the kernel asks for
//! per file is what the per-file path costs (docs/BENCHMARKS.md), and a test can see
//! whether a request reached the daemon at all (a re-read served by the page cache sends
//! no READ). Each kind also sums the time the daemon spent answering (`request_us`): with
//! the counts it splits a file's time into the daemon's work and the round trips around it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

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
pub struct Requests {
    counts: [AtomicU64; KINDS.len()],
    /// Nanoseconds spent answering, from the handler's start to its return (a request
    /// handed to a thread of its own counts until it was handed over).
    nanos: [AtomicU64; KINDS.len()],
}

/// Counts a request when made and adds its service time when dropped.
pub struct Timed<'a> {
    requests: &'a Requests,
    kind: Kind,
    start: Instant,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.requests.nanos[self.kind as usize].fetch_add(ns, Ordering::Relaxed);
    }
}

impl Requests {
    /// Counts one request of kind `k`; its service time runs until the guard is dropped.
    pub fn timed(&self, k: Kind) -> Timed<'_> {
        self.counts[k as usize].fetch_add(1, Ordering::Relaxed);
        Timed {
            requests: self,
            kind: k,
            start: Instant::now(),
        }
    }

    /// `{"lookup": n, …}`.
    pub fn to_json(&self) -> Value {
        Self::by_kind(|k| self.counts[k as usize].load(Ordering::Relaxed))
    }

    /// `{"lookup": µs, …}`: the time spent answering each kind, in all.
    pub fn service_json(&self) -> Value {
        Self::by_kind(|k| self.nanos[k as usize].load(Ordering::Relaxed) / 1000)
    }

    fn by_kind(f: impl Fn(Kind) -> u64) -> Value {
        let mut m = serde_json::Map::new();
        for &(k, name) in KINDS {
            m.insert(name.into(), json!(f(k)));
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
                drop(r.timed(*k));
            }
        }
        let v = r.to_json();
        for (i, (_, name)) in KINDS.iter().enumerate() {
            assert_eq!(v[name], (i + 1) as u64, "{name}");
        }
        let t = r.service_json();
        for (_, name) in KINDS {
            assert!(t[name].is_u64(), "{name}");
        }
    }
}
