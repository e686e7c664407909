//! Space accounting of a container at rest, from headers only (`squeezefs stats PATH`, the
//! compsize of squeezefs): which codec and level each extent's current copy was written
//! with, what it occupies on disk and what it holds. Payloads are never read, so a tree is
//! counted at the speed of its metadata; `check` is what verifies payloads.
//!
//! A packed file (format 4: its location record is current, see `pack::record`) is one
//! [`Kind::Packed`] part: its size, and its share of its block's stored bytes
//! ([`stored_share`]), from the block's 48-byte header.

use std::collections::BTreeMap;

use squeezefs_codec::Algorithm;

use crate::format::{codec_label, BLOCK, DATA_START, EXTENT_FLAG_DICT, EXTENT_HEADER_LEN, SB_FLAG_DICT};
use crate::layout::{
    current_superblock, newest_halves, read_halves, read_head, read_payload_start, superblock_copies, Half,
    Head, Tie,
};
use crate::pack::audit::stored_share;
use crate::pack::record::{record_state, RecordState};
use crate::pack::{Location, Packs};
use crate::storage::Storage;
use crate::{Error, Result};

/// What one kind of extent (codec and level, or inline) adds up to in one file or a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Part {
    pub extents: u64,
    /// Bytes the copies occupy in the backing file: header and payload rounded up to whole
    /// 4 KiB blocks (halves are sparse, so that is what the backing filesystem allocates).
    pub disk: u64,
    /// Bytes those extents hold once decompressed.
    pub uncompressed: u64,
    /// Of `disk`, what rounding the copies up to whole blocks adds (the rest of each
    /// copy's last block): 0 for inline data and packed files, whose bytes sit back to back.
    pub slack: u64,
}

impl Part {
    pub fn add(&mut self, o: &Part) {
        self.extents += o.extents;
        self.disk += o.disk;
        self.uncompressed += o.uncompressed;
        self.slack += o.slack;
    }
}

/// The kind of an extent as `stats` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Stored in an extent slot with this codec and level (raw extents are `None`, 0).
    Extent(Algorithm, i16),
    /// Stored inside the superblock (small files): its disk usage is the file's.
    Inline,
    /// zstd at this level with a dictionary.
    DictExtent(i16),
    /// Inline, compressed with a dictionary.
    DictInline,
    /// A packed file's bytes, in a pack block stored with this codec and level (the block's
    /// header: `None`, 0 when the block is raw). Its disk is its share of the block.
    Packed(Algorithm, i16),
}

impl Kind {
    /// `zstd:3`, `zstd-fast:5`, `lz4:1`, `lzo`, `zlib:6`, `none`, `inline`, `packed zstd:1`.
    pub fn label(&self) -> String {
        match *self {
            Kind::Inline => "inline".into(),
            Kind::Packed(a, l) => format!("packed {}", Kind::Extent(a, l).label()),
            Kind::DictInline => "inline+dict".into(),
            Kind::DictExtent(l) => format!("{}+dict", Kind::Extent(Algorithm::Zstd, l).label()),
            Kind::Extent(a, l) => codec_label(a, l),
        }
    }

    /// The same kind without the dictionary.
    pub fn without_dict(self) -> Kind {
        match self {
            Kind::DictExtent(l) => Kind::Extent(Algorithm::Zstd, l),
            Kind::DictInline => Kind::Inline,
            k => k,
        }
    }

    pub fn uses_dict(self) -> bool {
        matches!(self, Kind::DictExtent(_) | Kind::DictInline)
    }
}

/// Space accounting of one backing file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Not a container (served as it is): the caller counts its allocated blocks.
    pub plain: bool,
    /// Logical size of the file (what `ls -l` shows through the mount).
    pub size: u64,
    pub extent_size: u64,
    /// The codec the superblock names: the file's property, or the codec in force when it
    /// was last written.
    pub codec: Option<squeezefs_codec::CodecSpec>,
    /// Current copies by kind.
    pub parts: BTreeMap<Kind, Part>,
    /// Bytes of older or torn copies an interrupted write left beside current ones
    /// (`check --repair` removes them).
    pub leftover: u64,
    /// Extents inside the size whose copies all have damaged headers.
    pub damaged_extents: u64,
    /// Dictionaries this file needs (named by its current payloads) or will use (its
    /// dictionary property).
    pub dicts: std::collections::BTreeSet<u32>,
    /// A packed file: its current location record. Its part is [`Kind::Packed`] when
    /// [`usage`] was given the packs (none without them: the codec and disk of its bytes
    /// are in its block's header); `leftover` is what its backing file still holds.
    pub packed: Option<Location>,
    /// Where each current extent copy lies in the backing file, in file order (what
    /// [`shared_blocks`] looks up).
    pub copies: Vec<Copy>,
}

/// A current extent copy in the backing file: `disk` bytes (whole blocks) at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    pub at: u64,
    pub disk: u64,
    pub kind: Kind,
}

/// Blocks of a file the backing shares with other files: of the current copies' blocks,
/// those `FS_IOC_FIEMAP` flags `FIEMAP_EXTENT_SHARED` (a `copy_file_range` within an XFS or
/// btrfs mount, the background pass's dedupe, a reflink copy of the backing file), as
/// `(kind, physical address, length)`, so that a scan over many files can count each
/// physical block once (as compsize does). Empty where nothing is shared, and where the
/// filesystem maps nothing (tmpfs, FUSE: `FIEMAP` unsupported). At most [`FIEMAP_MAX`]
/// mapped extents are looked at: past them, blocks count as the file's own.
pub fn shared_blocks(file: &std::fs::File, copies: &[Copy]) -> std::io::Result<Vec<(Kind, u64, u64)>> {
    use std::os::fd::AsFd;
    let Some(last) = copies.iter().map(|c| c.at + c.disk).max() else {
        return Ok(Vec::new());
    };
    let first = copies.iter().map(|c| c.at).min().unwrap_or(0);
    let mapped = match crate::sys::fiemap(file.as_fd(), first, last - first, FIEMAP_MAX) {
        Ok(m) => m,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOTTY)) => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(e),
    };
    // Only extents whose physical range is the file's bytes as they are: an encoded one
    // (btrfs compressing the backing file itself) maps logical lengths onto a shorter
    // physical range, and delayed, unknown or inline ones have no address of their own.
    // Those count as the file's own (at worst, counted twice).
    let shared: Vec<_> = mapped
        .into_iter()
        .filter(|m| {
            m.flags & crate::sys::FIEMAP_EXTENT_SHARED != 0
                && m.flags & crate::sys::FIEMAP_EXTENT_NOT_PLAIN == 0
        })
        .collect();
    Ok(overlaps(copies, &shared))
}

/// Mapped extents `FS_IOC_FIEMAP` reports for one file at most, for [`shared_blocks`]
/// (32 bytes each in memory).
pub const FIEMAP_MAX: usize = 1 << 18;

/// The parts of `copies` that lie in `shared` (both sorted by file offset, disjoint), as
/// `(kind, physical address, length)`.
fn overlaps(copies: &[Copy], shared: &[crate::sys::Mapped]) -> Vec<(Kind, u64, u64)> {
    let mut out = Vec::new();
    let mut j = 0;
    for c in copies {
        let (a, b) = (c.at, c.at + c.disk);
        // Mapped extents that end before this copy cannot meet a later one either.
        while j < shared.len() && shared[j].logical + shared[j].len <= a {
            j += 1;
        }
        for m in shared[j..].iter().take_while(|m| m.logical < b) {
            let from = a.max(m.logical);
            let to = b.min(m.logical + m.len);
            if from < to {
                out.push((c.kind, m.physical + (from - m.logical), to - from));
            }
        }
    }
    out
}

fn blocks(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

/// Accounts one backing file, reading its superblocks and the 48-byte header of each half.
/// A packed file's block header is read from `packs` (the backing directory's; each header
/// once per [`Packs`]); without them a packed file has no part. A location record this
/// squeezefs cannot read (damaged, or newer) is an error: what the file holds is unknown.
pub fn usage<S: Storage>(st: &S, packs: Option<&Packs>) -> Result<Usage> {
    let mut u = Usage::default();
    match record_state(st)? {
        RecordState::Absent | RecordState::Stale(_) => {}
        RecordState::Current { loc, leftover } => {
            packed(&mut u, packs, loc, leftover)?;
            return Ok(u);
        }
        RecordState::Unreadable(e) => return Err(e),
    }
    let head = match read_head(st)? {
        Head::Empty | Head::Uncommitted => return Ok(u),
        Head::Plain => {
            u.plain = true;
            u.size = st.len()?;
            return Ok(u);
        }
        Head::Container(b) => b,
    };
    let copies = superblock_copies(&head);
    // (Of two valid copies with equal generations, `usage` has always taken copy 1.)
    let Some((_, sb)) = current_superblock(&copies, Tie::Last) else {
        // Both superblocks damaged: nothing of it is readable; `check` says more.
        u.damaged_extents = 1;
        return Ok(u);
    };
    u.size = sb.size;
    u.codec = Some(sb.codec);
    if sb.dict_id != 0 {
        u.dicts.insert(sb.dict_id);
    }
    let (shift, geo) = (sb.extent_shift, sb.geometry());
    u.extent_size = 1 << shift;
    // An extent area a relayout left and a crash kept from being punched.
    if geo.start > DATA_START {
        if let Some(at) = st.next_data(DATA_START)?.filter(|&at| at < geo.start) {
            u.leftover += geo.start - at;
        }
    }
    if sb.is_inline() {
        if sb.size > 0 {
            // The inline payload's frame names its dictionary (only in files flagged so).
            let named = squeezefs_codec::dict::frame_dict_id(&sb.inline);
            let dict = sb.flags & SB_FLAG_DICT != 0 && sb.inline_codec == Algorithm::Zstd && named.is_some();
            if dict {
                u.dicts.extend(named);
            }
            u.parts.insert(
                if dict { Kind::DictInline } else { Kind::Inline },
                Part {
                    extents: 1,
                    disk: 0,
                    uncompressed: sb.size,
                    slack: 0,
                },
            );
        }
        return Ok(u);
    }
    for idx in 0..sb.size.div_ceil(1 << shift) {
        let halves = read_halves(st, geo, idx)?;
        let torn = halves.iter().filter(|h| matches!(h, Half::Invalid(_))).count() as u64 * BLOCK;
        // Current copy first; of equal generations, half A (as `usage` always did).
        let copies = newest_halves(&halves, Tie::First);
        let Some(&(cur_half, cur)) = copies.first() else {
            if torn > 0 {
                u.damaged_extents += 1;
            }
            u.leftover += torn;
            continue;
        };
        let kind = if cur.flags & EXTENT_FLAG_DICT != 0 {
            // Which dictionary: the frame header, the first bytes of the payload.
            let mut frame = [0u8; 18];
            let got = read_payload_start(st, geo, idx, cur_half, &cur, &mut frame)?;
            u.dicts
                .extend(squeezefs_codec::dict::frame_dict_id(&frame[..got]));
            Kind::DictExtent(cur.level)
        } else {
            Kind::Extent(
                cur.codec,
                if cur.codec == Algorithm::None {
                    0
                } else {
                    cur.level
                },
            )
        };
        let copy = EXTENT_HEADER_LEN as u64 + cur.stored_len as u64;
        u.copies.push(Copy {
            at: geo.half(idx, cur_half),
            disk: blocks(copy),
            kind,
        });
        u.parts.entry(kind).or_default().add(&Part {
            extents: 1,
            disk: blocks(copy),
            uncompressed: cur.logical_len as u64,
            slack: blocks(copy) - copy,
        });
        u.leftover += torn
            + copies[1..]
                .iter()
                .map(|(_, h)| blocks(EXTENT_HEADER_LEN as u64 + h.stored_len as u64))
                .sum::<u64>();
    }
    Ok(u)
}

/// A packed file: its size, and its share of its block (a block that cannot be read counts
/// as a damaged extent; `check` says more).
fn packed(u: &mut Usage, packs: Option<&Packs>, loc: Location, leftover: u64) -> Result<()> {
    u.size = loc.len as u64;
    u.extent_size = 1 << loc.extent_shift;
    u.codec = Some(loc.codec);
    u.leftover = leftover;
    u.packed = Some(loc);
    if loc.props & crate::format::PROP_DICTIONARY != 0 {
        // The property only (packed bytes never use it): the file's extents will once it
        // leaves its pack, so the dictionary must stay.
        u.dicts.insert(loc.dict_id);
    }
    let Some(packs) = packs else { return Ok(()) };
    if loc.len == 0 {
        return Ok(()); // an empty file names no block
    }
    let h = match packs.block_header(loc.pack, loc.block) {
        Ok(h) => h,
        Err(Error::CorruptPack { .. }) => {
            u.damaged_extents = 1;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let level = if h.codec == Algorithm::None {
        0
    } else {
        h.level as i16
    };
    u.parts.insert(
        Kind::Packed(h.codec, level),
        Part {
            extents: 0,
            disk: stored_share(&h, loc.len as u64),
            uncompressed: loc.len as u64,
            slack: 0,
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{half_offset, ExtentHeader};
    use crate::sim::MemDisk;
    use crate::storage::read_full;
    use crate::{Container, Options};
    use squeezefs_codec::CodecSpec;

    #[test]
    fn shared_blocks_are_the_copies_parts_in_shared_extents_at_their_physical_addresses() {
        use crate::sys::Mapped;
        let k1 = Kind::Extent(Algorithm::Zstd, 1);
        let k0 = Kind::Extent(Algorithm::None, 0);
        let copy = |at, disk, kind| Copy { at, disk, kind };
        let map = |logical, physical, len| Mapped {
            logical,
            physical,
            len,
            flags: crate::sys::FIEMAP_EXTENT_SHARED,
        };
        // Three copies; shared: the first's tail and the second's head in one extent, and
        // the third whole inside a larger one. The gap between copies is never counted.
        let copies = [
            copy(4096, 8192, k1),
            copy(65536, 8192, k0),
            copy(131072, 4096, k1),
        ];
        let shared = [map(8192, 1 << 20, 61440), map(126976, 2 << 20, 16384)];
        assert_eq!(
            overlaps(&copies, &shared),
            vec![
                (k1, 1 << 20, 4096),
                (k0, (1 << 20) + 57344, 4096),
                (k1, (2 << 20) + 4096, 4096),
            ]
        );
        assert_eq!(overlaps(&copies, &[]), vec![]);
        assert_eq!(overlaps(&[], &shared), vec![]);
    }

    #[test]
    fn usage_lists_each_current_copy_where_it_lies() {
        let data: Vec<u8> = (0..3 * 131072u32).map(|i| (i % 251) as u8).collect();
        let disk = written("zstd:1", &data);
        let u = usage(&disk, None).unwrap();
        assert_eq!(u.copies.len(), 3);
        let in_parts: u64 = u.parts.values().map(|p| p.disk).sum();
        assert_eq!(u.copies.iter().map(|c| c.disk).sum::<u64>(), in_parts);
        for (i, c) in u.copies.iter().enumerate() {
            // Each copy starts with its extent's header, in one of its extent's halves.
            let mut h = [0u8; EXTENT_HEADER_LEN];
            read_full(&disk, &mut h, c.at).unwrap();
            let hd = ExtentHeader::decode(&h, i as u64, 17).unwrap();
            assert_eq!(hd.index, i as u64);
            assert_eq!(c.at % BLOCK, 0);
        }
    }

    fn written(codec: &str, data: &[u8]) -> MemDisk {
        let disk = MemDisk::new();
        let opts = Options {
            codec: codec.parse::<CodecSpec>().unwrap(),
            force: true,
            ..Options::default()
        };
        let mut c = Container::open(disk.clone(), &opts).unwrap();
        c.write(0, data).unwrap();
        c.fsync().unwrap();
        disk
    }

    #[test]
    fn counts_each_extent_by_codec_and_level_from_headers() {
        let text: Vec<u8> = (0..600_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let disk = written("zstd:7", &text);
        let u = usage(&disk.clone(), None).unwrap();
        assert!(!u.plain);
        assert_eq!(u.size, text.len() as u64);
        let p = u.parts[&Kind::Extent(Algorithm::Zstd, 7)];
        assert_eq!(p.extents, text.len().div_ceil(128 << 10) as u64);
        assert_eq!(p.uncompressed, text.len() as u64);
        assert!(p.disk < p.uncompressed / 3, "{p:?}");
        assert_eq!(p.disk % BLOCK, 0);
        assert_eq!(u.leftover, 0);
        assert_eq!(Kind::Extent(Algorithm::Zstd, 7).label(), "zstd:7");
        assert_eq!(Kind::Extent(Algorithm::Zstd, -5).label(), "zstd-fast:5");
        assert_eq!(Kind::Extent(Algorithm::Lzo, 0).label(), "lzo");
    }

    #[test]
    fn slack_is_the_rest_of_each_copys_last_block() {
        // Raw 128 KiB extents: 48 header bytes push each copy into a 33rd block.
        let noise = squeezefs_testdata::random(3 << 17, 0x9e37_79b9_7f4a_7c15);
        let u = usage(&written("none", &noise).clone(), None).unwrap();
        let p = u.parts[&Kind::Extent(Algorithm::None, 0)];
        assert_eq!(p.extents, 3);
        assert_eq!(p.slack, 3 * (BLOCK - EXTENT_HEADER_LEN as u64), "{p:?}");
        assert_eq!(p.disk, 3 * ((128 << 10) + BLOCK));

        // Compressed ones: each copy's slack is what its last block leaves unused.
        let text: Vec<u8> = (0..60_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let disk = written("zstd:3", &text);
        let u = usage(&disk.clone(), None).unwrap();
        let p = u.parts[&Kind::Extent(Algorithm::Zstd, 3)];
        let mut want = 0;
        for idx in 0..p.extents {
            let h = (0..2u8)
                .filter_map(|half| {
                    let mut hb = [0u8; EXTENT_HEADER_LEN];
                    read_full(&disk, &mut hb, half_offset(17, idx, half)).ok()?;
                    ExtentHeader::decode(&hb, idx, 17).ok()
                })
                .max_by_key(|h| h.generation)
                .unwrap();
            let copy = EXTENT_HEADER_LEN as u64 + h.stored_len as u64;
            want += copy.div_ceil(BLOCK) * BLOCK - copy;
        }
        assert_eq!(p.slack, want);
        assert!(p.slack > 0 && p.slack < p.extents * BLOCK);
    }

    #[test]
    fn holes_count_nothing_and_small_files_are_inline() {
        let disk = MemDisk::new();
        let mut c = Container::open(disk.clone(), &Options::default()).unwrap();
        c.write(10 << 20, b"end").unwrap();
        c.fsync().unwrap();
        let u = usage(&disk.clone(), None).unwrap();
        assert_eq!(u.size, (10 << 20) + 3);
        let total: u64 = u.parts.values().map(|p| p.uncompressed).sum();
        assert_eq!(total, 3, "only the last extent holds data: {u:?}");

        let small = written("lz4", b"hello, world");
        let u = usage(&small.clone(), None).unwrap();
        assert_eq!(u.parts[&Kind::Inline].uncompressed, 12);
    }

    #[test]
    fn plain_files_and_damaged_headers() {
        let disk = MemDisk::new();
        disk.clone().write_at(b"just text", 0).unwrap();
        assert!(usage(&disk.clone(), None).unwrap().plain);

        let data = vec![7u8; 300 << 10];
        let disk = written("zstd:3", &data);
        // Damage extent 1's header in the half that holds it.
        let h = disk.clone();
        for half in 0..2 {
            let off = half_offset(17, 1, half);
            let mut b = [0u8; 4];
            read_full(&h, &mut b, off).unwrap();
            if b != [0; 4] {
                h.write_at(&[0xff], off + 20).unwrap();
            }
        }
        let u = usage(&h, None).unwrap();
        assert_eq!(u.damaged_extents, 1);
        assert_eq!(u.parts[&Kind::Extent(Algorithm::Zstd, 3)].extents, 2);
    }

    mod packed {
        use super::*;
        use crate::pack::format::{BlockHeader, BLOCK_HEADER_LEN};
        use crate::pack::{MemPackDir, Packs, LOCATION_XATTR};
        use crate::sim::Crash;

        fn text(seed: u32, len: usize) -> Vec<u8> {
            let mut v = Vec::with_capacity(len + 16);
            let mut i = seed;
            while v.len() < len {
                v.extend_from_slice(format!("let x{} = {};\n", i % 97, i % 13).as_bytes());
                i += 1;
            }
            v.truncate(len);
            v
        }

        #[test]
        fn a_share_is_the_blocks_stored_bytes_by_the_fraction_of_its_logical_bytes() {
            let h = BlockHeader {
                codec: Algorithm::Zstd,
                level: 1,
                pack: 1,
                files: 3,
                offset: 64,
                stored_len: 952,
                logical_len: 10_000,
                payload_sum: 0,
            };
            // (48 + 952) × bytes / 10000, rounded down.
            assert_eq!(stored_share(&h, 2_500), 250);
            assert_eq!(stored_share(&h, 10_000), 1_000);
            assert_eq!(stored_share(&h, 3), 0);
            assert_eq!(stored_share(&h, 0), 0);
            assert_eq!(stored_share(&h, 20_000), 1_000, "never more than the block");
            // Files that fill the block share all of it, within a byte each of rounding.
            let sizes = [3_333u64, 3_333, 3_334];
            let sum: u64 = sizes.iter().map(|&n| stored_share(&h, n)).sum();
            assert!(sum <= 1_000 && sum + sizes.len() as u64 > 1_000, "{sum}");
            // The largest block, where u32 × u32 products need more than 32 bits.
            let big = BlockHeader {
                stored_len: 1 << 20,
                logical_len: 1 << 20,
                codec: Algorithm::None,
                level: 0,
                ..h
            };
            assert_eq!(
                stored_share(&big, 1 << 19),
                (BLOCK_HEADER_LEN as u64 + (1 << 20)) / 2
            );
        }

        #[test]
        fn a_packed_file_counts_its_size_and_its_share_of_its_block() {
            let dir = MemPackDir::new(&Crash::new());
            let writer = Packs::new(Box::new(dir.clone()), true, 0).unwrap();
            let zstd1: CodecSpec = "zstd:1".parse().unwrap();
            // Appended one after another, the files share one block; each gets its record.
            let files: Vec<Vec<u8>> = (0..4).map(|i| text(i * 7, 3_000 + 1_000 * i as usize)).collect();
            let slots: Vec<_> = files
                .iter()
                .map(|f| writer.append(zstd1, 17, f).unwrap())
                .collect();
            let disks: Vec<MemDisk> = slots
                .iter()
                .map(|slot| {
                    let p = writer.durable(slot).unwrap();
                    let loc = crate::pack::tests::loc(slot, p);
                    let d = MemDisk::new();
                    d.set_xattr(LOCATION_XATTR, &loc.encode()).unwrap();
                    d
                })
                .collect();
            let packs = Packs::new(Box::new(dir.clone()), false, 0).unwrap();
            let mut shares = 0;
            let mut block = None;
            for (d, f) in disks.iter().zip(&files) {
                assert!(d.xattr(LOCATION_XATTR).is_some(), "packed");
                let u = usage(d, Some(&packs)).unwrap();
                let loc = u.packed.expect("a packed file");
                assert_eq!(u.size, f.len() as u64);
                assert!(!u.plain);
                let p = u.parts[&Kind::Packed(Algorithm::Zstd, 1)];
                assert_eq!(p.uncompressed, f.len() as u64);
                assert_eq!(p.extents, 0);
                assert!(p.disk > 0 && p.disk < p.uncompressed / 2, "{p:?}");
                let h = packs.block_header(loc.pack, loc.block).unwrap();
                assert_eq!(p.disk, stored_share(&h, f.len() as u64));
                assert_eq!(
                    block.get_or_insert((loc.pack, loc.block, h)).1,
                    loc.block,
                    "one block"
                );
                shares += p.disk;
                // Without the packs: packed, no part.
                let bare = usage(d, None).unwrap();
                assert_eq!(bare.packed, Some(loc));
                assert!(bare.parts.is_empty());
            }
            // The files fill their block: their shares are all of it, but for rounding.
            let (_, _, h) = block.unwrap();
            assert_eq!(h.logical_len as usize, files.iter().map(Vec::len).sum::<usize>());
            let stored = BLOCK_HEADER_LEN as u64 + h.stored_len as u64;
            assert!(
                shares <= stored && shares + files.len() as u64 > stored,
                "{shares} of {stored}"
            );
            assert_eq!(Kind::Packed(Algorithm::Zstd, 1).label(), "packed zstd:1");
            // Bytes a crash left in the backing file beside a current record are leftovers.
            disks[1].write_at(b"replaced bytes", 0).unwrap();
            let u = usage(&disks[1], Some(&packs)).unwrap();
            assert_eq!((u.leftover, u.size), (14, files[1].len() as u64));
            assert!(u.parts.contains_key(&Kind::Packed(Algorithm::Zstd, 1)));
            assert_eq!(Kind::Packed(Algorithm::None, 0).label(), "packed none");

            // A header read once is not read again; a fresh reader of a damaged header
            // counts a damaged extent instead of failing.
            let (pack, off, _) = block.unwrap();
            dir.disk(pack).unwrap().write_at(&[0xff], off + 20).unwrap();
            assert!(usage(&disks[0], Some(&packs)).unwrap().damaged_extents == 0);
            let fresh = Packs::new(Box::new(dir.clone()), false, 0).unwrap();
            let u = usage(&disks[0], Some(&fresh)).unwrap();
            assert_eq!(u.damaged_extents, 1);
            assert!(u.parts.is_empty());
            assert_eq!(u.size, files[0].len() as u64);
        }
    }
}
