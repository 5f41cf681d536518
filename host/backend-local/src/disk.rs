//! The disk limit of a sandbox's writable layer: what it holds, measured
//! from the host while commands run, and the message when it is passed.
//!
//! A task can make its writes hard to see: delete a file it keeps open
//! (or mapped), preallocate blocks without writing them, or make files
//! that hold no bytes at all. So the measure counts every block of the
//! layer's directories (preallocated ones included, as `st_blocks` does),
//! every inode there (against a bound of one per [`BYTES_PER_INODE`], as a
//! filesystem of that size would have), and the blocks of deleted files
//! the sandbox's processes still hold, found through their descriptors and
//! mappings in `/proc`. `fallocate` itself is refused in sandboxes (see
//! `host/jail`'s seccomp filter), so space cannot appear faster than it is
//! written. A command is measured while it runs, more often the cheaper
//! the measure is ([`check_interval`]).

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::blocking;
use crate::isolated::SandboxCgroup;
use crate::process;

/// Bytes of disk per inode a sandbox may use, as `mke2fs` gives a
/// filesystem by default.
pub(crate) const BYTES_PER_INODE: u64 = 16 << 10;

/// The measure runs at most this often ...
const FASTEST_CHECK: Duration = Duration::from_millis(100);

/// ... and at least this often ...
const SLOWEST_CHECK: Duration = Duration::from_secs(1);

/// ... taking at most about this share of a core (one in this many).
const CHECK_COST_SHARE: u32 = 20;

/// How long to wait for the next measure after one that took `took`.
pub(crate) fn check_interval(took: Duration) -> Duration {
    (took * CHECK_COST_SHARE).clamp(FASTEST_CHECK, SLOWEST_CHECK)
}

/// Where a sandbox's processes are found.
#[derive(Debug, Clone)]
pub(crate) enum Members {
    /// Every process in this cgroup.
    Cgroup(SandboxCgroup),
    /// Every process in the pid namespace of this init.
    PidNamespace(i32),
}

impl Members {
    /// Pids of every process in the sandbox.
    pub(crate) fn pids(&self) -> Vec<i32> {
        match self {
            Members::Cgroup(cgroup) => cgroup.processes(),
            Members::PidNamespace(init) => process::pid_namespace_members(*init),
        }
    }
}

/// The bound on what a sandbox's commands may write.
#[derive(Debug, Clone)]
pub(crate) struct DiskLimit {
    /// The directories its writes land in (all on one host filesystem).
    pub(crate) dirs: Vec<PathBuf>,
    /// Bytes they may hold together.
    pub(crate) bytes: u64,
    /// Its processes, whose deleted files count too.
    pub(crate) members: Members,
    /// Its init, through whose root the writable mounts are seen.
    pub(crate) init: i32,
    /// The writable mounts, as the sandbox sees them (the workdir, `/tmp`).
    pub(crate) mounts: Vec<String>,
}

/// What a sandbox's writable layer holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Allocated bytes.
    pub(crate) bytes: u64,
    /// Files, directories and links.
    pub(crate) inodes: u64,
}

impl DiskLimit {
    /// Inodes the layer may hold.
    pub(crate) fn inodes(&self) -> u64 {
        (self.bytes / BYTES_PER_INODE).max(1)
    }

    /// What the layer holds now.
    fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        let mut seen = HashSet::new();
        let mut device = None;
        for dir in &self.dirs {
            for meta in walkdir::WalkDir::new(dir)
                .into_iter()
                .flatten()
                .filter_map(|entry| entry.metadata().ok())
            {
                device.get_or_insert(meta.dev());
                // Hard links are one file.
                if seen.insert(meta.ino()) {
                    usage.bytes += meta.blocks() * 512;
                    usage.inodes += 1;
                }
            }
        }
        if let Some(device) = device {
            let mut devices: Vec<u64> = self
                .mounts
                .iter()
                .filter_map(|mount| fs::metadata(format!("/proc/{}/root{mount}", self.init)).ok())
                .map(|meta| meta.dev())
                .collect();
            devices.push(device);
            for (inode, bytes) in self.deleted_files(&devices) {
                if seen.insert(inode) {
                    usage.bytes += bytes;
                    usage.inodes += 1;
                }
            }
        }
        usage
    }

    /// Deleted files on the writable mounts (`devices`: the mounts' as the
    /// sandbox sees them, then the layer's own) that the sandbox's
    /// processes still hold open or mapped: inode and bytes. Through an
    /// overlay a descriptor shows the overlay's device but the layer's inode
    /// number, and a mapping the layer's own file.
    fn deleted_files(&self, devices: &[u64]) -> Vec<(u64, u64)> {
        let mut found = Vec::new();
        for pid in self.members.pids() {
            let fds = format!("/proc/{pid}/fd");
            for entry in fs::read_dir(&fds).into_iter().flatten().flatten() {
                if let Ok(meta) = fs::metadata(entry.path())
                    && meta.file_type().is_file()
                    && meta.nlink() == 0
                    && devices.contains(&meta.dev())
                {
                    found.push((meta.ino(), meta.blocks() * 512));
                }
            }
            let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            for mapping in maps.lines().filter_map(parse_deleted_mapping) {
                if !devices.contains(&mapping.device) {
                    continue;
                }
                // The whole file where its size can be read (as root), else
                // at least what is mapped.
                let bytes = fs::metadata(format!("/proc/{pid}/map_files/{}", mapping.range))
                    .map_or(mapping.length, |meta| meta.blocks() * 512);
                found.push((mapping.inode, bytes));
            }
        }
        found
    }

    /// What the layer holds, when that is over the limit.
    pub(crate) async fn exceeded(&self) -> Option<Usage> {
        let limit = self.clone();
        let usage = blocking(move || Ok(limit.usage())).await.ok()?;
        (usage.bytes > self.bytes || usage.inodes > self.inodes()).then_some(usage)
    }

    /// Why a command was stopped at `usage`.
    pub(crate) fn stopped_because(&self, usage: Usage) -> String {
        format!(
            "the sandbox's writes ({} MiB in {} files) {DISK_LIMIT_PASSED} ({} MiB, {} files: \
             the template's disk_mib)",
            usage.bytes >> 20,
            usage.inodes,
            self.bytes >> 20,
            self.inodes()
        )
    }
}

/// What the error of a command stopped at its sandbox's disk limit says.
pub const DISK_LIMIT_PASSED: &str = "passed its disk limit";

/// The disk limit watched while a command runs.
pub(crate) struct DiskWatch<'a> {
    limit: &'a DiskLimit,
    next: tokio::time::Instant,
}

impl<'a> DiskWatch<'a> {
    pub(crate) fn new(limit: &'a DiskLimit) -> Self {
        DiskWatch {
            limit,
            next: tokio::time::Instant::now() + FASTEST_CHECK,
        }
    }

    /// Waits until the next measure is due and takes it; the usage when it
    /// is over the limit. (Cancelled midway, the next call measures again.)
    pub(crate) async fn tick(&mut self) -> Option<Usage> {
        tokio::time::sleep_until(self.next).await;
        let started = tokio::time::Instant::now();
        let exceeded = self.limit.exceeded().await;
        self.next = tokio::time::Instant::now() + check_interval(started.elapsed());
        exceeded
    }
}

/// A mapping of a deleted file, from a line of `/proc/<pid>/maps`.
#[derive(Debug, PartialEq, Eq)]
struct DeletedMapping {
    /// `start-end`, as `map_files/` names it.
    range: String,
    /// Bytes mapped.
    length: u64,
    /// The file's device (as `st_dev`) and inode.
    device: u64,
    inode: u64,
}

fn parse_deleted_mapping(line: &str) -> Option<DeletedMapping> {
    let line = line.strip_suffix(" (deleted)")?;
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    let length = u64::from_str_radix(end, 16).ok()? - u64::from_str_radix(start, 16).ok()?;
    let (major, minor) = fields.nth(2)?.split_once(':')?;
    let device = libc::makedev(
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let inode = fields.next()?.parse().ok().filter(|&inode| inode != 0)?;
    Some(DeletedMapping {
        range: range.to_string(),
        length,
        device,
        inode,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_measure_runs_more_often_the_cheaper_it_is() {
        assert_eq!(check_interval(Duration::ZERO), FASTEST_CHECK);
        assert_eq!(
            check_interval(Duration::from_millis(10)),
            Duration::from_millis(200)
        );
        assert_eq!(check_interval(Duration::from_secs(5)), SLOWEST_CHECK);
    }

    #[test]
    fn deleted_mappings_are_read_from_maps_lines() {
        let line = "7f0000000000-7f0000100000 rw-s 00000000 fe:01 131090          \
                    /work/upper/big (deleted)";
        assert_eq!(
            parse_deleted_mapping(line),
            Some(DeletedMapping {
                range: "7f0000000000-7f0000100000".into(),
                length: 1 << 20,
                device: libc::makedev(0xfe, 0x01),
                inode: 131_090,
            })
        );
        assert_eq!(
            parse_deleted_mapping("7f00-7f10 r--p 00000000 fe:01 12 /usr/lib/x.so"),
            None
        );
    }

    #[test]
    fn deleted_open_files_and_inodes_count() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id() as i32;
        let limit = DiskLimit {
            dirs: vec![dir.path().to_path_buf()],
            bytes: 64 << 20,
            members: Members::PidNamespace(me),
            init: me,
            mounts: vec![dir.path().display().to_string()],
        };
        let before = limit.usage();
        let path = dir.path().join("held");
        let mut held = fs::File::create(&path).unwrap();
        held.write_all(&vec![7; 4 << 20]).unwrap();
        held.sync_all().unwrap();
        fs::remove_file(&path).unwrap();
        for i in 0..100 {
            fs::File::create(dir.path().join(format!("empty-{i}"))).unwrap();
        }
        let after = limit.usage();
        // This process holds the deleted file: it is counted, once.
        assert!(
            after.bytes >= before.bytes + (4 << 20),
            "{before:?} {after:?}"
        );
        assert!(after.inodes >= before.inodes + 101, "{before:?} {after:?}");
        drop(held);
        assert!(limit.usage().bytes < after.bytes);
    }
}
