//! Scrub: verify a container at rest, every copy of everything, without the state machine
//! (`squeezefs check`). Reads only; [`repair`] then removes what a crash left behind —
//! torn or stale extent copies next to a valid newer one, extents past the end, a container
//! whose first superblock never landed, a location record a superblock outranks, the bytes
//! a packed file's record replaced — and never the only valid copy of anything.
//!
//! A packed file (format 4) is verified by reading its bytes from its pack (block checksum,
//! decoding, the file's own checksum); the packs themselves are checked as a whole by
//! [`crate::pack::audit`], which needs every file's record first.

use crate::encode::decode_payload;
use crate::format::{sb_offset, ExtentHeader, Geometry, BLOCK, DATA_START};
use crate::layout::{
    self, current_superblock, half_name, newest_first, read_head, superblock_copies, Head, Tie,
};
use crate::pack::record::{record_state, RecordState};
use crate::pack::{Location, Packs, LOCATION_XATTR};
use crate::storage::Storage;
use crate::Result;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Data cannot be read back (no valid copy left): reads fail with EIO.
    Damage,
    /// Left by a crash or an interrupted operation, not needed by anything: `repair` removes it.
    Leftover,
    /// Worth knowing, nothing to repair (an older superblock copy is in use because the newer
    /// one is torn or decayed: the file is as it was one write-back earlier).
    Warning,
}

/// What `repair` would do about a leftover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    /// Punch half `half` of extent `index`.
    PunchHalf { index: u64, half: u8 },
    /// Punch `len` bytes at `offset` (an extent area the file left for a new one).
    Punch { offset: u64, len: u64 },
    /// Cut the file to this length.
    Truncate(u64),
    /// Remove the file's location record (a superblock outranks it).
    RemoveRecord,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    /// Extent index and its logical offset, when the finding is about one extent.
    pub extent: Option<(u64, u64)>,
    pub detail: String,
    pub fix: Option<Fix>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Not a container: served as it is, nothing to verify.
    pub plain: bool,
    pub size: u64,
    pub extent_size: u64,
    /// Where the extent area starts: MiB past the superblocks (`SB_FLAG_AREA`).
    pub area: u32,
    /// Extent copies verified (header and payload checksums, and decoded).
    pub extents_verified: u64,
    /// A packed file: its current location record (its bytes were read from the pack and
    /// verified unless a finding says otherwise).
    pub packed: Option<Location>,
    /// The file has a record this squeezefs cannot read (damaged, or newer): which pack
    /// bytes it names is unknown, so no pack may be judged unused.
    pub record_unknown: bool,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn damaged(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Damage)
    }

    pub fn leftovers(&self) -> usize {
        self.findings.iter().filter(|f| f.fix.is_some()).count()
    }
}

/// One half as `check` judges it: its header, its payload checksum, and that it decodes.
enum Half {
    Hole,
    Valid(ExtentHeader),
    Invalid(String),
}

fn read_half<S: Storage>(st: &S, geo: Geometry, idx: u64, h: u8) -> Result<Half> {
    let hdr = match layout::read_half(st, geo, idx, h)? {
        layout::Half::Hole => return Ok(Half::Hole),
        layout::Half::Invalid(e) => return Ok(Half::Invalid(format!("header: {e}"))),
        layout::Half::Header(x) => x,
    };
    let Some(payload) = layout::read_payload(st, geo, idx, h, &hdr)? else {
        return Ok(Half::Invalid("payload checksum mismatch".into()));
    };
    let mut out = vec![0u8; 1 << geo.shift];
    if let Err(e) = decode_payload(&hdr, &payload, &mut out) {
        return Ok(Half::Invalid(format!(
            "payload passes its checksum but does not decode: {e}"
        )));
    }
    Ok(Half::Valid(hdr))
}

/// Verifies one backing file; `packs` are the backing directory's packs (a packed file
/// without them is reported as damage).
pub fn check<S: Storage>(st: &S, packs: Option<&Packs>) -> Result<Report> {
    let mut r = Report::default();
    match record_state(st)? {
        RecordState::Absent => {}
        RecordState::Current { loc, leftover } => {
            check_packed(&mut r, packs, loc, leftover);
            return Ok(r);
        }
        RecordState::Stale(_) => r.findings.push(Finding {
            severity: Severity::Leftover,
            extent: None,
            detail: format!(
                "a location record ({LOCATION_XATTR}) left by a file that grew out of its pack: \
                 its superblock is newer"
            ),
            fix: Some(Fix::RemoveRecord),
        }),
        RecordState::Unreadable(e) => {
            r.record_unknown = true;
            let newer = matches!(e, crate::Error::Unsupported(_));
            r.findings.push(Finding {
                severity: if newer {
                    Severity::Warning
                } else {
                    Severity::Damage
                },
                extent: None,
                detail: if newer {
                    format!("{e}: not checked (use the squeezefs that wrote it)")
                } else {
                    format!("{e}: the file cannot be read")
                },
                fix: None,
            });
            return Ok(r);
        }
    }
    let len = st.len()?;
    let blocks = match read_head(st)? {
        Head::Empty => return Ok(r),
        Head::Plain => {
            r.plain = true;
            return Ok(r);
        }
        Head::Uncommitted => {
            r.findings.push(Finding {
                severity: Severity::Leftover,
                extent: None,
                detail: "a new file whose first superblock never landed (a crash before its first \
                         commit): empty; its extents are left over"
                    .into(),
                fix: Some(Fix::Truncate(0)),
            });
            return Ok(r);
        }
        Head::Container(b) => b,
    };
    let copies = superblock_copies(&blocks);
    // (Of two valid copies with equal generations, `check` has always named copy 1.)
    let best = current_superblock(&copies, Tie::Last).map(|(s, sb)| (s, sb.clone()));
    let Some((slot, sb)) = best else {
        let why: Vec<String> = copies
            .iter()
            .filter_map(|c| match &c.decoded {
                Err(e) if c.written => Some(format!("copy {}: {e}", c.slot)),
                Err(_) => Some(format!("copy {}: not written", c.slot)),
                Ok(_) => None,
            })
            .collect();
        r.findings.push(Finding {
            severity: Severity::Damage,
            extent: None,
            detail: format!(
                "no valid superblock ({}): the whole file is unreadable",
                why.join("; ")
            ),
            fix: None,
        });
        return Ok(r);
    };
    for c in &copies {
        if let (Err(e), true) = (&c.decoded, c.written) {
            let s = c.slot;
            if s != slot {
                r.findings.push(Finding {
                    severity: Severity::Warning,
                    extent: None,
                    detail: format!(
                        "superblock copy {s} is invalid ({e}); copy {slot} (generation {}) is in use: \
                         a torn write of the newer one, or decay",
                        sb.generation
                    ),
                    fix: None,
                });
            }
        }
    }
    r.size = sb.size;
    r.extent_size = 1 << sb.extent_shift;
    r.area = sb.area;
    let (shift, geo) = (sb.extent_shift, sb.geometry());
    // Data between the superblocks and a moved extent area: the old area, which a crash
    // kept the pass from punching once the superblock naming the new one was durable.
    if geo.start > DATA_START {
        if let Some(at) = st.next_data(DATA_START)?.filter(|&at| at < geo.start) {
            // An older superblock copy still valid describes that area: it goes first
            // (decay of the newer copy must never fall back on punched extents).
            let other = 1 - slot;
            if let Ok(old) = &copies[other as usize].decoded {
                r.findings.push(Finding {
                    severity: Severity::Leftover,
                    extent: None,
                    detail: format!(
                        "superblock copy {other} (generation {} < {}) describes an extent area the \
                         file left",
                        old.generation, sb.generation
                    ),
                    fix: Some(Fix::Punch {
                        offset: sb_offset(other),
                        len: BLOCK,
                    }),
                });
            }
            r.findings.push(Finding {
                severity: Severity::Leftover,
                extent: None,
                detail: format!(
                    "{} bytes of an extent area the file left for a new one (a crash came before \
                     they were punched)",
                    geo.start - at
                ),
                fix: Some(Fix::Punch {
                    offset: DATA_START,
                    len: geo.start - DATA_START,
                }),
            });
        }
    }
    let needed = if sb.is_inline() {
        r.extents_verified += 1;
        DATA_START
    } else {
        let count = sb.size.div_ceil(1 << shift);
        for idx in 0..count {
            let offset = idx << shift;
            let halves = [read_half(st, geo, idx, 0)?, read_half(st, geo, idx, 1)?];
            let gens = [0, 1].map(|h| match &halves[h] {
                Half::Valid(x) => Some(x.generation),
                _ => None,
            });
            // (Of two valid halves with equal generations, `check` has always named B.)
            let newest = newest_first(gens, Tie::Last)
                .first()
                .map(|&h| (h, gens[h as usize].expect("valid")));
            match newest {
                None => {
                    let why: Vec<String> = (0..2u8)
                        .filter_map(|h| match &halves[h as usize] {
                            Half::Invalid(w) => Some(format!("half {}: {w}", half_name(h))),
                            _ => None,
                        })
                        .collect();
                    if !why.is_empty() {
                        r.findings.push(Finding {
                            severity: Severity::Damage,
                            extent: Some((idx, offset)),
                            detail: format!("no valid copy ({}): reads of it fail with EIO", why.join("; ")),
                            fix: None,
                        });
                    }
                }
                Some((cur, gen)) => {
                    r.extents_verified += 1;
                    let other = 1 - cur;
                    let what = match &halves[other as usize] {
                        Half::Hole => None,
                        Half::Valid(x) => Some(format!(
                            "an older copy (generation {} < {gen}) was not yet removed",
                            x.generation
                        )),
                        Half::Invalid(w) => {
                            Some(format!("a torn or damaged copy ({w}) beside the valid one"))
                        }
                    };
                    if let Some(what) = what {
                        r.findings.push(Finding {
                            severity: Severity::Leftover,
                            extent: Some((idx, offset)),
                            detail: format!("half {}: {what}", half_name(other)),
                            fix: Some(Fix::PunchHalf {
                                index: idx,
                                half: other,
                            }),
                        });
                    }
                }
            }
        }
        geo.half(count, 0)
    };
    if len > needed && st.next_data(needed)?.is_some() {
        r.findings.push(Finding {
            severity: Severity::Leftover,
            extent: None,
            detail: format!(
                "{} bytes past the last extent (left by an interrupted truncation)",
                len - needed
            ),
            fix: Some(Fix::Truncate(needed)),
        });
    }
    Ok(r)
}

/// A packed file: its bytes read back from its pack and verified; what its record replaced
/// in the backing file is a leftover.
fn check_packed(r: &mut Report, packs: Option<&Packs>, loc: Location, leftover: u64) {
    r.size = loc.len as u64;
    r.extent_size = 1 << loc.extent_shift;
    r.packed = Some(loc);
    let read = match packs {
        Some(p) => p.read(&loc).map(|_| ()),
        None => Err(crate::Error::Unsupported("no packs given".into())),
    };
    match read {
        Ok(()) => r.extents_verified += (loc.len > 0) as u64,
        Err(e) => r.findings.push(Finding {
            severity: Severity::Damage,
            extent: Some((0, 0)),
            detail: match packs {
                Some(p) if matches!(e, crate::Error::CorruptPack { .. }) => format!(
                    "packed in {} at block {}: {e}: reads of it fail with EIO",
                    p.describe(loc.pack),
                    loc.block
                ),
                _ => format!("packed: {e}: reads of it fail with EIO"),
            },
            fix: None,
        }),
    }
    if leftover > 0 {
        r.findings.push(Finding {
            severity: Severity::Leftover,
            extent: None,
            detail: format!(
                "{leftover} bytes the file's location record replaced (a crash came before they were cut)"
            ),
            fix: Some(Fix::Truncate(0)),
        });
    }
}

/// Removes the leftovers `report` found (after making the current copies durable). Returns
/// how many fixes were applied.
pub fn repair<S: Storage>(st: &S, report: &Report) -> Result<usize> {
    let geo = Geometry::new(report.extent_size.trailing_zeros() as u8, report.area);
    let fixes: Vec<Fix> = report.findings.iter().filter_map(|f| f.fix).collect();
    if fixes.is_empty() {
        return Ok(0);
    }
    // Records and superblocks durable before what they replaced goes.
    st.sync_all()?;
    for f in &fixes {
        match *f {
            Fix::PunchHalf { index, half } => st.punch(geo.half(index, half), geo.slot())?,
            Fix::Punch { offset, len } => {
                st.punch(offset, len)?;
                // (An older superblock copy's punch is durable before the area it
                // describes goes.)
                st.sync_all()?;
            }
            Fix::Truncate(len) => st.set_len(len)?,
            Fix::RemoveRecord => st.remove_xattr(LOCATION_XATTR)?,
        }
    }
    st.sync_all()?;
    Ok(fixes.len())
}
