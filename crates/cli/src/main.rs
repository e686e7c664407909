//! The `squeezefs` command.

#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use args::{MountArgs, Output, Paths};
use clap::{CommandFactory, Parser, Subcommand};
use squeezefs_container::format::{
    FORMAT_VERSION, FORMAT_VERSION_AREA, FORMAT_VERSION_DICT, FORMAT_VERSION_NO_DICT, FORMAT_VERSION_TIMES,
    MIN_FORMAT_VERSION,
};

mod args;
mod bench;
mod check;
mod compress;
mod daemon;
mod dict;
mod dictdir;
mod estimate;
mod locate;
mod logging;
mod property;
mod rules;
mod stats;
mod statsfile;
#[allow(unsafe_code)]
mod sys;
mod ui;
mod walk;

#[derive(Parser)]
#[command(
    name = "squeezefs",
    version = version(),
    about = "Transparent compression for any directory, in userspace (FUSE).",
    long_about = "squeezefs stores every file under MOUNTPOINT compressed in BACKING: \
                  fixed-size extents (128 KiB by default), each compressed with zstd, lz4, lzo \
                  or zlib, checksummed, and replaced crash-safely.",
    after_help = "Example:\n  squeezefs estimate ~/logs                       # which codec pays off?\n  \
        squeezefs mount ./backing ./mnt -o compress=zstd:3 --daemon\n  cp -r ~/logs ./mnt/\n  \
        squeezefs stats ./mnt                           # space per codec, like compsize\n  \
        squeezefs umount ./mnt\n\n\
        Also as a mount helper: mount -t fuse.squeezefs BACKING MOUNTPOINT -o compress=zstd:3,\n\
        or in /etc/fstab: BACKING MOUNTPOINT fuse.squeezefs compress=zstd:3,nofail 0 0\n\
        (squeezefs BACKING MOUNTPOINT [-o OPTIONS] [-f] mounts and detaches; -f stays in front)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mount BACKING at MOUNTPOINT (in the foreground unless --daemon).
    #[command(after_help = mount_help())]
    Mount {
        #[command(flatten)]
        target: MountArgs,
        /// Detach once the filesystem is mounted; from then on the log goes to syslog
        /// (journald), tagged squeezefs[PID].
        #[arg(long)]
        daemon: bool,
    },
    /// Unmount a squeezefs and wait until its daemon has written everything out and exited.
    #[command(
        after_help = "Examples:\n  squeezefs umount /mnt\n  squeezefs umount --lazy /mnt   # detach now even if busy"
    )]
    Umount {
        mountpoint: PathBuf,
        /// Detach now even if files are open there (the daemon exits once they close).
        #[arg(long, short = 'l')]
        lazy: bool,
        /// Seconds to wait for the daemon to finish writing.
        #[arg(long, default_value_t = 60)]
        wait: u64,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  squeezefs completions bash > /usr/share/bash-completion/completions/squeezefs\n  \
        squeezefs completions zsh > /usr/local/share/zsh/site-functions/_squeezefs"
    )]
    Completions { shell: clap_complete::Shell },
    /// Write the man pages (squeezefs.1 and one per subcommand) into DIR.
    #[command(after_help = "Example:\n  squeezefs man /usr/local/share/man/man1 && man squeezefs-compress")]
    Man { dir: PathBuf },
    /// Measure codecs and filesystems on your own data.
    #[command(
        subcommand,
        after_help = "Examples:\n  squeezefs bench codecs ~/data              # every codec and level, one core\n  \
        sudo squeezefs bench fs ...                   # squeezefs vs kernel btrfs vs ext4"
    )]
    Bench(bench::BenchCmd),
    /// Verify every container in BACKING (scrub): superblocks, extent checksums, decoding.
    /// Exit code 1 when something is damaged. Run it while BACKING is not mounted.
    #[command(after_help = "Examples:\n  squeezefs check /srv/logs.sqz\n  \
        squeezefs check /srv/logs.sqz --repair      # also remove leftovers of crashes\n  \
        squeezefs check /srv/logs.sqz --json | jq .problems")]
    Check {
        backing: PathBuf,
        /// Remove what interrupted writes left behind (stale or torn copies beside a valid
        /// one, data past the end, never-committed files); never the only valid copy.
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        out: Output,
    },
    /// Rewrite files with another codec or extent size, and turn plain files into containers
    /// (like `btrfs filesystem defragment -c`).
    #[command(
        long_about = "Rewrites the files under each PATH (on a mount, or in a backing directory \
                      that is not mounted). A container keeping its extent size is recompressed \
                      in place, extent by extent, through the same crash-safe path as any write; \
                      a plain file (in an adopted directory) or a file getting a new extent size \
                      is copied into a new container beside it and renamed over it. Interrupting \
                      is safe: each file is left old or new. With --codec the files also get it \
                      as their compression property, so later writes use it too. Files already \
                      as asked are skipped, so an interrupted run can simply be run again. \
                      Small files rewritten out of their packs leave their old bytes there as \
                      garbage: at the end, compress reclaims it (on a mount, it asks the daemon \
                      for a round; offline, as `check --repair` does).\n\n\
                      Compression rules (the `rules` property of directories, the mount option \
                      `rules=`) apply to files when they are made, by name; files written before \
                      the rules were set, or renamed since, keep what they were written with. \
                      Without --codec and --extent-size, compress applies them: each file whose \
                      name a rule matches (the first of its directory's rules, else of the \
                      mount's rules=, as `property get FILE rules` names it) gets what that rule \
                      sets, as if it were made now: its codec, force, extent_size= and dictionary= \
                      become the file's own properties, replacing any set on the file by hand \
                      (the summary and --json count those files: replaced_own), and its data is \
                      rewritten with them (a new extent size by copy and rename); files stored \
                      so already are skipped, and files no rule matches are rewritten as \
                      without rules. --codec or --extent-size beats the rules; --no-rules \
                      ignores them and keeps files' own properties. Files with hard links get \
                      no rule (their names could match different ones). Offline (a backing directory) only directories' rules are \
                      known, not a mount's rules=.\n\n\
                      A file whose rewrite fails gets its previous properties back. A run killed \
                      in the middle of a file may leave that file's new properties (codec, \
                      dictionary, force) set with its old extents: the next run rewrites it for \
                      a codec, but nothing makes it rewrite a file only for a dictionary or force \
                      it has already (not even --codec with the codec it is stored with): remove \
                      the property (`property set FILE dictionary ''`, `property set FILE \
                      compression_force off`) and run compress again.",
        after_help = "Examples:\n  squeezefs compress /mnt/logs --codec zstd:12\n  \
        squeezefs property set /mnt/data rules '*.log=zstd:9' && squeezefs compress /mnt/data\n  \
        squeezefs compress /mnt/db --extent-size 1M --codec zstd:3\n  \
        squeezefs compress /srv/adopted    # not mounted: plain files become containers, small ones packed\n  \
        squeezefs compress /srv/adopted --no-pack    # ... every file a container of its own\n  \
        squeezefs compress /mnt --codec lz4 --json | jq .ratio"
    )]
    Compress {
        #[command(flatten)]
        paths: Paths,
        /// Codec and level: none, lz4[:1-12], lzo, zlib[:1-9], zstd[:1-19], zstd-fast[:1-1000].
        /// Default: the file's current one (on a mount), zstd:3 (in a backing directory).
        #[arg(long, value_name = "ALG[:LEVEL]")]
        codec: Option<squeezefs_codec::CodecSpec>,
        /// Extent size of the rewritten files, 4K..1M (files are copied to change it).
        #[arg(long, value_name = "SIZE", value_parser = squeezefs_fs::parse_extent_size)]
        extent_size: Option<u8>,
        /// Pack files of at most one extent (containers and plain files) into the backing
        /// directory's packs (format 4): each then costs a share of a solid block instead
        /// of a 4 KiB block of its own. The default, as for a mount: offline, and on a mount
        /// that packs. Given explicitly, a mount that does not pack (`-o nopack`) or a
        /// filesystem that cannot keep location records is an error instead of a skip.
        #[arg(long)]
        pack: bool,
        /// Leave every file a container of its own (files packed already stay packed).
        #[arg(long, conflicts_with = "pack")]
        no_pack: bool,
        /// Do not apply compression rules (without --codec and --extent-size, each file a
        /// rule matches by name gets what the rule sets).
        #[arg(long)]
        no_rules: bool,
        #[command(flatten)]
        out: Output,
    },
    /// Predict, per codec and level, the ratio and speed on your data by sampling it.
    #[command(
        long_about = "Samples the files under each PATH (a bounded number of extents per file \
                      type, spread over the tree) and encodes every sample as the filesystem \
                      would, with each codec: the predicted ratio (with its 95 % sampling error), \
                      the space it would take, and the compression and decompression speed per \
                      core on this machine. Reads only the samples, so it takes seconds on a tree \
                      of gigabytes. PATH may be any directory, a mount, or a backing directory.",
        after_help = "Examples:\n  squeezefs estimate ~/datasets\n  \
        squeezefs estimate /var/log --codecs zstd:3,zstd:9,lz4 --extent-size 1M\n  \
        squeezefs estimate /srv/db --sample 256M --json | jq '.codecs[] | {codec, ratio}'"
    )]
    Estimate {
        #[command(flatten)]
        paths: Paths,
        /// Codecs to compare, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = estimate::DEFAULT_CODECS)]
        codecs: Vec<squeezefs_codec::CodecSpec>,
        /// Extent size to predict for, 4K..1M.
        #[arg(long, value_name = "SIZE", default_value = "128K", value_parser = squeezefs_fs::parse_extent_size)]
        extent_size: u8,
        /// Bytes of extents to sample in all (more: smaller error, more time).
        #[arg(long, value_name = "SIZE", default_value = "32M", value_parser = squeezefs_fs::parse_size)]
        sample: u64,
        /// Seed of the sampling offsets (the same seed draws the same extents).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        out: Output,
    },
    /// zstd dictionaries for directories of small files: train, list.
    #[command(
        subcommand,
        after_help = "Examples:\n  squeezefs dict train /mnt/configs\n  squeezefs dict list /mnt"
    )]
    Dict(dict::DictCmd),
    /// Get or set compression properties of files and directories (like `btrfs property`).
    #[command(
        subcommand,
        after_help = "Examples:\n  squeezefs property set /mnt/archive compression zstd:19\n  \
        squeezefs property get /mnt/archive/old.log --json"
    )]
    Property(property::PropertyCmd),
    /// How much space files take, per codec and level (like compsize); with --live, what a
    /// running daemon has done (extents compressed or stored raw and why, zstd workspaces).
    #[command(
        long_about = "Without --live: how much disk the files under each PATH take and what they \
                      hold, per codec and level, like compsize. PATH may be on a squeezefs mount \
                      or in a backing directory; no daemon is needed, and only container headers \
                      are read (not payloads), so whole trees are counted quickly. Each inode \
                      counts once, and so does each block the backing shares between files (a \
                      copy within an XFS or btrfs mount, the background pass's dedupe: \
                      `Shared extents`, from FIEMAP). `Disk Usage` is what the extents occupy (whole 4 KiB blocks), \
                      `Uncompressed` what they hold, `Referenced` the files' sizes (holes \
                      included); `(metadata)` is superblocks and copies left by interrupted \
                      writes. Packed files (mount option `pack`) are `packed CODEC` rows: \
                      their share of their pack block. A `Packs:` line counts the backing \
                      directory's packs; when PATH is a whole backing directory (or the root \
                      of its mount) their bytes are in the totals (what no packed row \
                      accounts for, pack headers and garbage, in `(metadata)`) and their \
                      garbage is measured.\n\nWith --by rule, the files are also grouped by \
                      the compression rule that applies to each one's name now (the first \
                      matching rule of its directory's `rules` property, else of the mount's \
                      `rules=`; `property get FILE rules` names it), with what each group \
                      references, takes on disk (ratio) and holds per codec; files no rule \
                      matches are one group. Files written before their rule was set keep \
                      what they were written with until `squeezefs compress` applies it.\n\n\
                      With --live MOUNTPOINT: the counters of the daemon serving it.",
        after_help = "Examples:\n  squeezefs stats /mnt/logs\n  \
        squeezefs stats /srv/logs.sqz/2026 /srv/logs.sqz/2025 --json | jq .disk\n  \
        squeezefs stats /mnt/configs --dict-gain     # what its dictionary saves\n  \
        squeezefs stats /mnt/data --by rule          # what each compression rule stores and saves\n  \
        squeezefs stats /mnt/data --by rule --json | jq '.by_rule[] | {rule, files, disk, ratio}'\n  \
        squeezefs stats --live /mnt\n  \
        squeezefs stats --live /mnt --json | jq .workspaces"
    )]
    Stats {
        /// Read the counters of the daemon serving the one MOUNTPOINT given (from
        /// MOUNTPOINT/.squeezefs-stats) instead of counting files.
        #[arg(long)]
        live: bool,
        /// Files or directories, on a mount or in a backing directory.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Also measure what dictionaries save: the files that use one are read back and
        /// encoded without it (reads their payloads, so it takes longer).
        #[arg(long)]
        dict_gain: bool,
        /// Also show the files in groups: `rule`, by the compression rule that applies to
        /// each one's name now.
        #[arg(long, value_enum, value_name = "WHAT", conflicts_with = "live")]
        by: Option<stats::By>,
        #[command(flatten)]
        out: Output,
    },
}

/// The mount options, after `squeezefs mount --help`.
fn mount_help() -> String {
    format!(
        "Options (-o, comma-separated, may be repeated):\n  \
        compress=ALG[:LEVEL]        codec for new data: none, lz4[:1-12], lzo, zlib[:1-9],\n                              \
        zstd[:1-19], zstd-fast[:1-1000] (default zstd:3), or\n                              \
        zstd:adapt[:MIN-MAX] (default 1-9): a zstd level that goes down\n                              \
        one step while the compressor is busy over 80 % of the time\n                              \
        (averaged over about a second: extents queue for it) and up while\n                              \
        under 50 %, within MIN-MAX; files with a compression property of\n                              \
        their own (chattr +c sets one) and small packed files keep theirs\n  \
        compress-force=ALG[:LEVEL]  the same, but compress every extent: no heuristic, no\n                              \
        incompressible-file backoff, no early abort, no content-type check\n                              \
        (without it, files larger than an extent starting like JPEG, MP4,\n                              \
        MP3, ZIP/DOCX, gzip, xz, zstd, bzip2 or 7z are stored raw, not\n                              \
        tried; small packed ones compress well together and are not sniffed)\n  \
        extent_size=SIZE            extent size of new files, 4K..1M (default 128K; without it a\n                              \
        new file written whole from its start, as cp and tar write, takes\n                              \
        1M extents once past 1M, or one 1M extent when closed past 128K)\n  \
        rules=\"GLOBS=SETTINGS; ...\"  settings of new files by name where no directory has rules\n                              \
        of its own (property rules); the first rule whose glob matches the\n                              \
        name wins; SETTINGS: a codec, force (as compress-force=, for\n                              \
        those files only), extent_size=SIZE, dictionary=ID.\n                              \
        Quote the value (its commas are the rules'), e.g.\n                              \
        rules=\"*.log,*.txt=zstd:9; *.db=zstd:1,extent_size=16K; *.jpg,*.png=none\"\n                              \
        (`squeezefs property set DIR rules` sets them on a directory)\n  \
        pack                        pack small files (the default; format 4): files of at most\n                              \
        one extent are stored together in solid compressed blocks in\n                              \
        BACKING/.squeezefs-packs (a file of a few KiB costs a share of a\n                              \
        block, not a block of its own); each keeps an empty backing\n                              \
        file whose user xattr says where its bytes are. Needs a backing\n                              \
        filesystem that keeps that xattr without spending a block on it\n                              \
        (probed at mount; if not, a warning and no packing).\n                              \
        Rewritten and removed files leave garbage in\n                              \
        packs: it is reclaimed while mounted (pack_gc), at unmount and\n                              \
        by `check --repair`\n  \
        nopack                      do not pack new files: each keeps a container of its own\n                              \
        (the layout before format 4, readable by older squeezefs);\n                              \
        files packed before are read either way\n  \
        pack_cache=SIZE             memory for decompressed pack blocks (default {cache}M)\n  \
        nopack_reclaim              do not rewrite packs above 25 % garbage at unmount (by\n                              \
        default an unmount moves up to 256 MiB of live files)\n  \
        pack_gc=SECS                while mounted, look for packs above 25 % garbage every SECS\n                              \
        seconds when files changed (default {gc}; 0: only on request:\n                              \
        `setfattr -n user.squeezefs.reclaim -v 1 MOUNTPOINT`, and\n                              \
        `getfattr -n user.squeezefs.reclaim MOUNTPOINT` shows the last round)\n  \
        nofill_cache                hand the kernel only the pages a read asks for; by default\n                              \
        the rest of each extent a read decompressed goes into the page\n                              \
        cache too (as btrfs keeps it), while memory is not short; and\n                              \
        a reader walking a directory in its listing order (tar, cp -r)\n                              \
        finds the next files' first MiB there\n  \
        nodedupe                    keep equal files apart on an XFS (reflink) or btrfs backing;\n                              \
        by default the background pass, when the mount is idle, has\n                              \
        equal stored extents of files taking 256 KiB and more on the\n                              \
        backing (of the same owner) share their blocks (FIDEDUPERANGE;\n                              \
        the backing compares the bytes itself), so a file written twice\n                              \
        takes its space once\n  \
        max_dirty=SIZE              memory for bytes written but not compressed yet, all files\n                              \
        together (default: a tenth of the memory available at mount,\n                              \
        8M to 4G). A write that fills an extent is compressed at once;\n                              \
        partial extents (a random writer's) wait, so each is compressed\n                              \
        once at close or fsync, not once per page, until the budget is\n                              \
        spent and the writer compresses its own\n  \
        dirty_expire=SECS           write those waiting bytes to BACKING after SECS (default\n                              \
        30, as the kernel's dirty pages) even while the file stays open;\n                              \
        as with any filesystem, only fsync makes data durable\n  \
        spin=auto|MICROS            after a request, one session thread keeps reading /dev/fuse\n                              \
        that long instead of sleeping, so a tree walk's next request is\n                              \
        taken at once, not after a wake-up. auto (default): the mount\n                              \
        measures what a wake-up costs on this machine and spins (100 us)\n                              \
        only where that saves a request >= 8 us; MICROS: always that\n                              \
        window; 0: never. Either way the spin yields while other work\n                              \
        keeps every CPU busy. Measured on VMs: 5-20 % off extracts,\n                              \
        small-file creates, ls -l, git status (`stats --live` shows it)\n  \
        dirops=sync|behind          sync (default): a new file is made on BACKING inside its\n                              \
        create. behind (experimental): from a file made ahead in the\n                              \
        private directory, its name applied after the reply, in order;\n                              \
        fsync, listings, other name changes and unmount wait for the\n                              \
        names first. Measured slower on 2-CPU VMs and GlusterFS so far\n  \
        background_compression=ALG[:LEVEL]\n                              \
        write at compress= (fast), then, while the mount is idle,\n                              \
        recompress extents stored at another codec or level to this one\n                              \
        (e.g. zstd:15), in place and crash-safely; contents, mtime and\n                              \
        ctime stay (a small packed file's only where the backing fs keeps\n                              \
        a 64-byte xattr in the inode: ext4 256-byte inodes, XFS). Files in use\n                              \
        wait; incompressible data is not retried. Small files' packs are\n                              \
        rewritten at it into 1 MiB blocks, similar files together and\n                              \
        identical files stored once (a cold tree reaches archive\n                              \
        density), and larger files 1 MiB extents. Per directory or file:\n                              \
        the property\n                              \
        background_compression (applies to everything below; none: never).\n                              \
        `squeezefs stats --json` shows background.pending_bytes\n  \
        background_idle=SECS        no change through the mount for SECS before the pass runs\n                              \
        (default 5); a change pauses it where it is\n  \
        background_rate=SIZE        bytes a second the pass rewrites at most (default 64M); it\n                              \
        also runs at nice 19 in the idle I/O class\n  \
        background_extent_size=SIZE\n                              \
        cold files stored in smaller extents get extents this large\n                              \
        (4K..1M; default 1M, or extent_size= when that is given): they\n                              \
        compress better and lose less to rounding (slack). Files with an\n                              \
        extent_size property of their own keep it\n  \
        allow_other                 let other users in (needs user_allow_other when not root)\n  \
        default_permissions         kernel permission checks (on by default)\n  \
        ro                          read-only (never packs); files are opened by the kernel\n                              \
        alone, with no request per open: re-reading cached files costs\n                              \
        about what it costs on ext4; remount,rw is refused (mount again)\n  \
        create                      make BACKING and MOUNTPOINT if they do not exist (without it\n                              \
        a missing one is refused: a typo or a disk not mounted yet at boot\n                              \
        must not send data elsewhere; also valid in fstab)\n\n\
        The kernel's own options pass through: noatime, atime, relatime, strictatime,\n\
        nodiratime, diratime, sync, async, dirsync, nodev, dev, nosuid, suid, noexec, exec,\n\
        max_read=N, and the SELinux context=, fscontext=, defcontext=, rootcontext=. Any\n\
        other name is refused.\n\n\
        Per directory and per file: `squeezefs property set PATH compression zstd:9`.\n\
        Live counters (compression, packs, workspaces): `squeezefs stats --live MOUNTPOINT`.\n\n\
        Examples:\n  squeezefs mount ./backing ./mnt\n  \
        squeezefs mount /srv/logs.sqz /srv/logs -o compress=zstd:9,extent_size=1M --daemon\n  \
        squeezefs mount /srv/etc.sqz /srv/etc -o pack_cache=64M,pack_gc=600\n  \
        squeezefs mount /srv/logs.sqz /srv/logs -o compress=zstd:1,background_compression=zstd:15",
        cache = squeezefs_container::pack::DEFAULT_CACHE >> 20,
        gc = squeezefs_fs::DEFAULT_PACK_GC,
    )
}

/// `0.1.0 (container format 2, 3 for files with a dictionary, 5 for files whose times the
/// background pass keeps, 6 for files it gave larger extents, 7 for files with the force
/// property; packed files format 4 (by default; mount option nopack: not); reads 1–7)`.
fn version() -> &'static str {
    use squeezefs_container::pack::format::PACKS_FORMAT_VERSION as PACKED;
    Box::leak(
        format!(
            "{} (container format {FORMAT_VERSION_NO_DICT}, {FORMAT_VERSION_DICT} for files with a dictionary, \
             {FORMAT_VERSION_TIMES} for files whose times the background pass keeps, {FORMAT_VERSION_AREA} for files \
             it gave larger extents, {FORMAT_VERSION} for files with the force property; packed files format {PACKED} \
             (by default; mount option nopack: not); reads {MIN_FORMAT_VERSION}–{FORMAT_VERSION})",
            env!("CARGO_PKG_VERSION")
        )
        .into_boxed_str(),
    )
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cmd = Cli::command();
    let mut subcommands: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
    subcommands.push("help");
    let helper = daemon::helper_form(&args, &subcommands);
    logging::init(if helper.is_some() { "warn" } else { "info" });
    if let Some(h) = helper {
        return match h {
            Ok(h) => daemon::mount(
                h.target.backing,
                h.target.mountpoint,
                &h.target.options,
                !h.foreground,
            ),
            Err(e) => {
                eprintln!("squeezefs: {e}");
                ExitCode::from(2)
            }
        };
    }
    let cli = Cli::parse_from(args);
    if !matches!(cli.cmd, Cmd::Mount { .. }) {
        sys::default_sigpipe();
    }
    match cli.cmd {
        Cmd::Mount { target, daemon } => {
            daemon::mount(target.backing, target.mountpoint, &target.options, daemon)
        }
        Cmd::Umount {
            mountpoint,
            lazy,
            wait,
        } => finish(
            "umount",
            daemon::umount(&mountpoint, lazy, std::time::Duration::from_secs(wait)).map(|()| 0),
            1,
        ),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "squeezefs", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Cmd::Man { dir } => finish(
            "man",
            man(&dir).map(|n| {
                println!("wrote {n} man pages into {}", dir.display());
                0
            }),
            1,
        ),
        Cmd::Check { backing, repair, out } => finish(
            "check",
            check::main(check::Args {
                backing,
                repair,
                json: out.json,
            }),
            2,
        ),
        Cmd::Compress {
            paths,
            codec,
            extent_size,
            pack,
            no_pack,
            no_rules,
            out,
        } => finish(
            "compress",
            compress::main(compress::Args {
                paths: paths.paths,
                codec,
                extent_shift: extent_size,
                pack: match (pack, no_pack) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                rules: !no_rules,
                json: out.json,
            }),
            2,
        ),
        Cmd::Estimate {
            paths,
            codecs,
            extent_size,
            sample,
            seed,
            out,
        } => finish(
            "estimate",
            estimate::main(estimate::Args {
                paths: paths.paths,
                codecs,
                extent_shift: extent_size,
                budget: sample,
                seed,
                json: out.json,
            }),
            2,
        ),
        Cmd::Dict(d) => finish("dict", dict::main(d).map(|()| 0), 1),
        Cmd::Property(p) => finish("property", property::main(p).map(|()| 0), 1),
        Cmd::Stats {
            live,
            paths,
            dict_gain,
            by,
            out,
        } => finish("stats", stats::main(live, &paths, dict_gain, by, out.json), 2),
        Cmd::Bench(b) => finish("bench", bench::main(b).map(|()| 0), 1),
    }
}

/// A subcommand's exit code: its own on success; on failure its error on stderr, prefixed
/// with the command, and `failed` (2 for the commands whose code 1 means "found damage" or
/// "some files failed", 1 for the others).
fn finish(cmd: &str, r: Result<u8, String>, failed: u8) -> ExitCode {
    match r {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("squeezefs {cmd}: {e}");
            ExitCode::from(failed)
        }
    }
}

/// Writes squeezefs.1 and squeezefs-SUBCOMMAND.1 (and their subcommands') into `dir`.
fn man(dir: &std::path::Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    fn write(cmd: clap::Command, name: String, dir: &std::path::Path, n: &mut usize) -> Result<(), String> {
        let cmd = cmd.name(&*Box::leak(name.clone().into_boxed_str()));
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .render(&mut out)
            .map_err(|e| e.to_string())?;
        std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))?;
        *n += 1;
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            write(sub.clone(), format!("{name}-{}", sub.get_name()), dir, n)?;
        }
        Ok(())
    }
    let mut n = 0;
    let mut cmd = Cli::command();
    cmd.build();
    write(cmd, "squeezefs".into(), dir, &mut n)?;
    Ok(n)
}
