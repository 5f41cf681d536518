//! What the backend and `sandfleet-jail` say to each other.
//!
//! `start` reads one JSON [`StartRequest`] from stdin (to end of file) and,
//! once the sandbox is ready, prints one JSON [`Started`] line on stdout;
//! on failure it prints the reason on stderr and exits non-zero.
//!
//! `enter` reads a header from stdin — a little-endian `u32` length, then
//! that many bytes of JSON [`EnterRequest`] — and leaves the rest of stdin to
//! the command. Its exit status is the command's (a command killed by a
//! signal kills `enter` with the same signal), or one of the `EXIT_*` codes
//! below when the command could not be started, with the reason on stderr.

use std::io::{self, Read};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `enter` could not enter the sandbox or set the command up (like `env`'s
/// 125).
pub const EXIT_SETUP: i32 = 125;

/// The program was found but could not be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = 126;

/// The program was not found on `PATH`.
pub const EXIT_NOT_FOUND: i32 = 127;

/// Bound on an [`EnterRequest`] header, well above any command line the
/// kernel would accept.
pub const MAX_HEADER: u32 = 64 << 20;

/// How sandbox uids and gids appear on the host: sandbox id `n` (for `n` <
/// `count`) is host id `uid + n` (`gid + n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    /// The host uid of the sandbox's root.
    pub uid: u32,
    /// The host gid of the sandbox's root group.
    pub gid: u32,
    /// How many ids are mapped (1 when running unprivileged).
    pub count: u32,
}

impl IdMap {
    /// The host uid of sandbox uid `inside`, if it is mapped.
    pub fn host_uid(&self, inside: u32) -> Option<u32> {
        (inside < self.count).then(|| self.uid + inside)
    }

    /// The host gid of sandbox gid `inside`, if it is mapped.
    pub fn host_gid(&self, inside: u32) -> Option<u32> {
        (inside < self.count).then(|| self.gid + inside)
    }
}

/// Sizes of the sandbox's memory-backed filesystems.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TmpfsSizes {
    /// The root filesystem (`/`, holding `/root` and the mount points).
    pub root_mib: u32,
    /// `/dev/shm`.
    pub shm_mib: u32,
}

/// How to make a sandbox (`sandfleet-jail start`). Every path is canonical:
/// the supervisor refuses one that is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRequest {
    /// The sandbox's directory on the host, holding the empty mount point
    /// `rootfs/` and the writable layer `layer/` (the workdir's `upper` and
    /// `work`, `/tmp`'s `tmp`, `tmpwork` and `empty`, and an image root's
    /// `root` and `rootwork`).
    pub sandbox_dir: PathBuf,
    /// What the sandbox's files come from.
    pub image: Image,
    /// Where the image appears inside the sandbox (a directory image), or
    /// the directory whose writes outlive a restart (an OCI image).
    pub workdir: String,
    /// The sandbox's host name.
    pub hostname: String,
    /// `argv[0]` of the sandbox's init, which finds it in `/proc`.
    pub marker: String,
    /// A private network namespace with only a loopback device; false
    /// keeps the host's network.
    pub own_network: bool,
    /// How sandbox ids map to host ids.
    pub ids: IdMap,
    /// Entries of the host's `/etc` made visible, read-only.
    pub etc: Vec<String>,
    /// Sizes of the tmpfs mounts.
    pub sizes: TmpfsSizes,
    /// Cgroup directories the init (and so everything in the sandbox) joins.
    pub cgroups: Vec<PathBuf>,
    /// The writable layer already holds the workdir (a sandbox started again
    /// over the layer of its last init): a copied workdir is not copied
    /// again.
    #[serde(default)]
    pub workdir_kept: bool,
    /// Snapshot layers the sandbox starts from, lowest first: directories
    /// holding `upper` (the workdir's files) and `root` (an OCI image
    /// root's other files), stacked over the image and under the sandbox's
    /// own writable layer.
    #[serde(default)]
    pub snapshots: Vec<PathBuf>,
    /// Host directories mounted into the sandbox, in order.
    #[serde(default)]
    pub volumes: Vec<Volume>,
}

/// A host directory mounted into a sandbox: storage its containers share
/// (a pod's `emptyDir`, which an init container fills and the main one
/// reads), outside the sandbox's own layer and its disk limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// The host directory (canonical).
    pub source: PathBuf,
    /// Where the sandbox sees it: absolute, plain components only, not `/`.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

impl Volume {
    /// Checks `target` is a path a volume may be mounted on.
    ///
    /// # Errors
    ///
    /// A sentence naming the target.
    pub fn check_target(target: &str) -> Result<(), String> {
        // Checked as text: `Path::components` would quietly drop `.` and
        // repeated slashes.
        let plain = target.strip_prefix('/').is_some_and(|rest| {
            rest.split('/')
                .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'))
        });
        if plain {
            Ok(())
        } else {
            Err(format!(
                "volume mount point `{target}` is not an absolute path of plain components"
            ))
        }
    }
}

/// What a sandbox's files come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Image {
    /// A directory, seen at the workdir over the host's system directories
    /// (read-only) and the allowed entries of its `/etc`.
    Directory(PathBuf),
    /// An OCI image's unpacked layers as the whole root filesystem: nothing
    /// of the host's root is visible.
    Layers {
        /// The directory holding the layers.
        dir: PathBuf,
        /// Each layer's directory, relative to `dir` (plain names, no `..`),
        /// lowest first.
        layers: Vec<String>,
    },
}

impl Image {
    /// Whether the sandbox's root is the image's own (no host directory in
    /// it).
    pub fn is_own_root(&self) -> bool {
        matches!(self, Image::Layers { .. })
    }
}

/// The file in the sandbox directory where `start` records its init as a
/// [`ProcessRef`] (JSON), before the init runs anything: the record a reap
/// finds a sandbox's processes by, which nothing inside the sandbox can
/// write.
pub const INIT_RECORD: &str = "init.json";

/// How a sandbox's workdir was made from its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkdirMode {
    /// An overlay: the image below, the sandbox's writes in `layer/upper`.
    Overlay,
    /// A full copy in `layer/upper` (where overlayfs is not allowed).
    Copy,
}

/// What `start` prints once the sandbox is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// How the workdir was made.
    pub workdir: WorkdirMode,
    /// The init's pid on the host.
    pub pid: i32,
}

/// A process as it was when seen: a pid and its start time in clock ticks
/// after boot, which tells it from a later process with the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    /// The pid on the host.
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat`.
    pub start_time: u64,
}

impl ProcessRef {
    /// The process now running as `pid`, if any.
    pub fn of(pid: i32) -> Option<ProcessRef> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name's last `)` start at field 3.
        let start_time = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(19)?
            .parse()
            .ok()?;
        Some(ProcessRef { pid, start_time })
    }
}

/// What to do once inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Execute `argv` (looked up on the `PATH` in `env`).
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
    },
    /// Run the isolation probe and print its [`ProbeReport`] as JSON.
    Probe(ProbeRequest),
}

/// How to run something in a sandbox (`sandfleet-jail enter`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnterRequest {
    /// The sandbox's init.
    pub init: ProcessRef,
    /// Whether the sandbox has its own network namespace to join.
    pub own_network: bool,
    /// Cgroup directories to join first.
    pub cgroups: Vec<PathBuf>,
    /// The working directory inside the sandbox.
    pub workdir: String,
    /// The whole environment of the command.
    pub env: Vec<(String, String)>,
    /// The user to run as, as an image's `User` names it (`name`, `uid`,
    /// `uid:gid`, `name:group`), looked up in the sandbox's `/etc/passwd`
    /// and `/etc/group`; `None` for the sandbox's root.
    #[serde(default)]
    pub user: Option<String>,
    /// `RLIMIT_FSIZE`: the largest file the command may write, in bytes.
    pub file_size_limit: Option<u64>,
    /// What to run.
    pub action: Action,
}

/// What the isolation probe checks, besides what it finds itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRequest {
    /// Device and inode of the host's `/`, which the sandbox's `/` must not
    /// be.
    pub host_root: (u64, u64),
    /// Host paths that must not exist inside the sandbox (the state
    /// directory, the image's directory).
    pub hidden: Vec<String>,
    /// The host's root as the namespace the sandbox's is made in numbers
    /// it (0 in the host's own), which the sandbox must not map; `None`
    /// where that namespace does not map it (a rootless user's namespace
    /// of its subordinate ids, whose 0 is the user).
    pub host_root_uid: Option<u32>,
    /// The sandbox's root is an image's: no host directory may be mounted
    /// anywhere in it (rather than the host's system directories read-only).
    #[serde(default)]
    pub own_root: bool,
    /// The sandbox's volumes: their mount points are its own, writable
    /// unless mounted read-only.
    #[serde(default)]
    pub volumes: Vec<Volume>,
}

/// What the isolation probe found wrong; empty when the sandbox is sound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// One line per problem, naming the path or setting.
    pub failures: Vec<String>,
}

/// The bytes `enter` expects before the command's stdin.
pub fn encode_header(request: &EnterRequest) -> Vec<u8> {
    let json = serde_json::to_vec(request).expect("requests serialize");
    let mut header = Vec::with_capacity(4 + json.len());
    header.extend_from_slice(&(json.len() as u32).to_le_bytes());
    header.extend_from_slice(&json);
    header
}

/// Reads the header [`encode_header`] wrote, and nothing after it.
pub fn read_header(input: &mut impl Read) -> io::Result<EnterRequest> {
    let mut length = [0; 4];
    input.read_exact(&mut length)?;
    let length = u32::from_le_bytes(length);
    if length > MAX_HEADER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a request header of {length} bytes is over the {MAX_HEADER}-byte bound"),
        ));
    }
    let mut json = vec![0; length as usize];
    input.read_exact(&mut json)?;
    serde_json::from_slice(&json).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> EnterRequest {
        EnterRequest {
            init: ProcessRef {
                pid: 7,
                start_time: 99,
            },
            own_network: true,
            cgroups: vec![PathBuf::from("/sys/fs/cgroup/pids/sandfleet/r/s")],
            workdir: "/workspace".into(),
            env: vec![("PATH".into(), "/usr/bin".into())],
            user: Some("1000:1000".into()),
            file_size_limit: Some(1 << 30),
            action: Action::Exec {
                argv: vec!["sh".into(), "-c".into(), "true".into()],
            },
        }
    }

    #[test]
    fn a_header_is_read_back_and_leaves_the_rest_of_the_stream() {
        let mut stream = encode_header(&request());
        stream.extend_from_slice(b"the command's stdin");
        let mut input = stream.as_slice();
        assert_eq!(read_header(&mut input).unwrap(), request());
        assert_eq!(input, b"the command's stdin");
    }

    #[test]
    fn volumes_mount_only_on_absolute_paths_of_plain_components() {
        for good in ["/data", "/.sandfleet/bin", "/tmp/x"] {
            assert_eq!(Volume::check_target(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "/",
            "data",
            "/data/",
            "/data/../etc",
            "/./data",
            "//data/..",
        ] {
            assert!(Volume::check_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn oversized_and_truncated_headers_are_errors() {
        let mut huge = (MAX_HEADER + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        let error = read_header(&mut huge.as_slice()).unwrap_err();
        assert!(error.to_string().contains("bound"), "{error}");
        let header = encode_header(&request());
        let truncated = &header[..header.len() - 1];
        assert!(read_header(&mut &truncated[..]).is_err());
    }

    #[test]
    fn id_maps_cover_their_range_only() {
        let ids = IdMap {
            uid: 1_000_000,
            gid: 2_000_000,
            count: 65536,
        };
        assert_eq!(ids.host_uid(0), Some(1_000_000));
        assert_eq!(ids.host_gid(65535), Some(2_065_535));
        assert_eq!(ids.host_uid(65536), None);
    }
}
