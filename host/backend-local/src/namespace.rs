//! Namespaced sandboxes: laying out a sandbox's directory, starting its
//! init through the `sandfleet-jail` helper, probing its isolation,
//! entering it to run a command, and stopping it.
//!
//! The process tree of a namespaced sandbox:
//!
//! ```text
//! sandfleet-jail start (our child, own session)        host namespaces
//! └── init: argv[0] = the sandbox marker                pid 1 of the sandbox's namespaces
//!     └── orphans of commands                           (re-parented to the init, which reaps them)
//! sandfleet-jail enter (our child, leads the command's session and group; outside the sandbox's pid namespace)
//! └── the command, confined                             inside
//! ```
//!
//! Killing the init makes the kernel kill every process in its pid
//! namespace; the supervisor (`start`) then exits and is reaped by us.

use std::fs::{self, File};
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use sandfleet_jail::protocol::{
    Action, EnterRequest, IdMap, Image, ProbeReport, ProbeRequest, ProcessRef, StartRequest,
    Started, TmpfsSizes, Volume,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use crate::error::{IoContext, LocalError};
use crate::jail;
use crate::process::{Process, ProcessIdentity};
use crate::remove::remove_beneath;

/// `PATH` of everything run for or inside a sandbox.
pub(crate) const SANDBOX_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where `tool` is: the first executable file of that name in a directory
/// of [`SANDBOX_PATH`].
pub(crate) fn sandbox_tool(tool: &str) -> Option<PathBuf> {
    executable_on(SANDBOX_PATH, tool)
}

/// Where `execvp` would find `program` (a bare name) on `path`: the first
/// executable file of that name, when every directory searched before it
/// is absolute (an empty or relative entry would be the caller's working
/// directory's).
pub(crate) fn executable_on(path: &str, program: &str) -> Option<PathBuf> {
    if program.is_empty() || program.contains('/') {
        return None;
    }
    for dir in path.split(':') {
        if !dir.starts_with('/') {
            return None;
        }
        let candidate = Path::new(dir).join(program);
        if fs::metadata(&candidate)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        {
            return Some(candidate);
        }
    }
    None
}

/// The supervisor's stderr, kept in the sandbox directory for diagnosis.
const INIT_LOG: &str = "init.log";

/// Bound on each wait for a killed process to go away.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Bound on the isolation probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a sandbox's init is started with.
#[derive(Debug, Clone)]
pub(crate) struct InitSpec<'a> {
    /// The sandbox's directory, laid out by [`prepare_dir`]; canonical.
    pub(crate) sandbox_dir: &'a Path,
    /// What the sandbox's files come from (every path canonical).
    pub(crate) image: Image,
    /// The workdir inside the sandbox.
    pub(crate) workdir: &'a str,
    /// The sandbox id, also its host name.
    pub(crate) sandbox_id: &'a str,
    /// The init's `argv[0]`.
    pub(crate) marker: &'a str,
    /// Keep the host's network namespace instead of a private one with only
    /// a loopback device.
    pub(crate) share_network: bool,
    /// How the sandbox's ids appear on the host.
    pub(crate) ids: IdMap,
    /// Host `/etc` entries the sandbox sees.
    pub(crate) etc: &'a [String],
    /// Sizes of its tmpfs mounts.
    pub(crate) sizes: TmpfsSizes,
    /// Cgroups its processes join.
    pub(crate) cgroups: &'a [PathBuf],
    /// The layer already holds the workdir (the sandbox is started again).
    pub(crate) workdir_kept: bool,
    /// The snapshot layers it starts from, lowest first.
    pub(crate) snapshots: &'a [PathBuf],
    /// Host directories mounted into it.
    pub(crate) volumes: &'a [Volume],
}

/// The parts of the writable layer every init gets new: the overlays' work
/// directories, `/tmp`'s upper layer and its empty lower one, and an OCI
/// image's root's upper layer (empty for a directory image). (`upper`, the
/// workdir's, is the one part a started-again sandbox keeps.)
const RENEWED: [(&str, u32); 6] = [
    ("work", 0o700),
    ("tmp", 0o1777),
    ("tmpwork", 0o700),
    ("empty", 0o755),
    ("root", 0o755),
    ("rootwork", 0o700),
];

/// Makes `path` a directory of the sandbox's root with `mode`.
fn make_owned(path: &Path, mode: u32, ids: &IdMap) -> Result<(), LocalError> {
    fs::create_dir(path)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
        .and_then(|()| chown(path, Some(ids.uid), Some(ids.gid)))
        .context(|| format!("setting up {}", path.display()))
}

/// Lays out a new sandbox directory (which must exist and be empty): the
/// root mount point, and the writable layer (`layer/upper`, and the parts
/// in [`RENEWED`]) owned by the sandbox's root. The directory itself
/// becomes its root's, mode 0700: no other host user can reach what the
/// sandbox writes (a setuid file, say).
pub(crate) fn prepare_dir(sandbox_dir: &Path, ids: &IdMap) -> Result<(), LocalError> {
    let rootfs = sandbox_dir.join("rootfs");
    fs::create_dir(&rootfs).context(|| format!("creating {}", rootfs.display()))?;
    let layer = sandbox_dir.join("layer");
    make_owned(&layer, 0o755, ids)?;
    make_owned(&layer.join("upper"), 0o755, ids)?;
    renew_layer(sandbox_dir, ids)?;
    fs::set_permissions(sandbox_dir, fs::Permissions::from_mode(0o700))
        .and_then(|()| chown(sandbox_dir, Some(ids.uid), Some(ids.gid)))
        .context(|| format!("setting up {}", sandbox_dir.display()))
}

/// Makes the whole of a sandbox's writable layer new and empty, the
/// workdir's `upper` too (no init may be running over it): the sandbox
/// starts again from its image and snapshot layers alone.
pub(crate) fn empty_layer(sandbox_dir: &Path, ids: &IdMap) -> Result<(), LocalError> {
    let layer = sandbox_dir.join("layer");
    remove_beneath(&layer, "upper")?;
    make_owned(&layer.join("upper"), 0o755, ids)?;
    renew_layer(sandbox_dir, ids)
}

/// Makes the [`RENEWED`] parts of a sandbox's layer new and empty (no init
/// may be running over them): what an earlier init left there goes.
pub(crate) fn renew_layer(sandbox_dir: &Path, ids: &IdMap) -> Result<(), LocalError> {
    let layer = sandbox_dir.join("layer");
    for (part, mode) in RENEWED {
        remove_beneath(&layer, part)?;
        make_owned(&layer.join(part), mode, ids)?;
    }
    Ok(())
}

/// The directories a sandbox's writes land in, for its disk limit.
pub(crate) fn writable_dirs(sandbox_dir: &Path) -> [PathBuf; 3] {
    let layer = sandbox_dir.join("layer");
    [layer.join("upper"), layer.join("tmp"), layer.join("root")]
}

/// A started sandbox init.
#[derive(Debug)]
pub(crate) struct Running {
    /// The supervisor, to be reaped once the init is gone.
    pub(crate) supervisor: Child,
    /// The init.
    pub(crate) init: Process,
    /// What the helper reported.
    pub(crate) started: Started,
}

/// Kills the supervisor (and so the init) if a start is abandoned midway,
/// for example because the claim waiting for it was cancelled.
struct StartGuard(Option<Child>);

impl StartGuard {
    fn child(&mut self) -> &mut Child {
        self.0
            .as_mut()
            .expect("the guard holds the child until taken")
    }

    fn take(mut self) -> Child {
        self.0
            .take()
            .expect("the guard holds the child until taken")
    }
}

impl Drop for StartGuard {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.start_kill();
        }
    }
}

/// Starts the init of a sandbox and returns once its root filesystem is
/// built, or fails (having stopped what it started) at `deadline`.
pub(crate) async fn start(spec: &InitSpec<'_>, deadline: Instant) -> Result<Running, LocalError> {
    let id = spec.sandbox_id;
    let request = StartRequest {
        sandbox_dir: spec.sandbox_dir.to_path_buf(),
        image: spec.image.clone(),
        workdir: spec.workdir.to_string(),
        hostname: id.to_string(),
        marker: spec.marker.to_string(),
        own_network: !spec.share_network,
        ids: spec.ids,
        etc: spec.etc.to_vec(),
        sizes: spec.sizes,
        cgroups: spec.cgroups.to_vec(),
        workdir_kept: spec.workdir_kept,
        snapshots: spec.snapshots.to_vec(),
        volumes: spec.volumes.to_vec(),
    };
    let log_path = spec.sandbox_dir.join(INIT_LOG);
    let log = File::create(&log_path).context(|| format!("creating {}", log_path.display()))?;
    let mut command = jail::start_command()?;
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // No process group of ours: the helper starts a session of its own
        // (so a terminal's Ctrl-C reaches the engine, which tears sandboxes
        // down in order, not the sandboxes behind its back).
        .stderr(log);
    let mut guard =
        StartGuard(Some(command.spawn().context(|| {
            format!("sandbox {id}: starting the sandbox helper")
        })?));
    let mut stdin = guard.child().stdin.take().expect("stdin is piped");
    let stdout = guard.child().stdout.take().expect("stdout is piped");
    let budget = deadline.saturating_duration_since(Instant::now());
    let json = serde_json::to_vec(&request).expect("requests serialize");
    let started = tokio::time::timeout(budget, async move {
        stdin.write_all(&json).await?;
        drop(stdin);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await?;
        Ok::<_, std::io::Error>(line)
    })
    .await;
    let failure = match started {
        Ok(Ok(line)) if !line.is_empty() => {
            let started = jail::parse_started(&line)?;
            match ProcessIdentity::of(started.pid).and_then(Process::open) {
                Some(init) => {
                    return Ok(Running {
                        supervisor: guard.take(),
                        init,
                        started,
                    });
                }
                None => LocalError::Failed(format!("sandbox {id}: its init exited once ready")),
            }
        }
        Ok(Ok(_)) => LocalError::Failed(format!(
            "sandbox {id}: setting it up failed: {}",
            log_tail(&log_path)
        )),
        Ok(Err(error)) => LocalError::Io {
            context: format!("sandbox {id}: talking to the sandbox helper"),
            source: error,
        },
        Err(_) => LocalError::Timeout {
            what: format!("sandbox {id} to start ({})", log_tail(&log_path)),
            after: budget,
        },
    };
    let mut supervisor = guard.take();
    stop(&mut supervisor, None).await;
    Err(failure)
}

/// Stops a sandbox's init and reaps its supervisor, each wait bounded by
/// [`STOP_TIMEOUT`]. Without the init, killing the supervisor kills it
/// (its parent-death signal).
pub(crate) async fn stop(supervisor: &mut Child, init: Option<&Process>) {
    match init {
        Some(init) => {
            init.kill();
        }
        None => {
            let _ = supervisor.start_kill();
        }
    }
    if tokio::time::timeout(STOP_TIMEOUT, supervisor.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            pid = supervisor.id(),
            "the sandbox supervisor still runs after its init was killed"
        );
        let _ = supervisor.start_kill();
        let _ = tokio::time::timeout(STOP_TIMEOUT, supervisor.wait()).await;
    }
}

/// How a command enters a sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Entry<'a> {
    /// The sandbox's init.
    pub(crate) init: ProcessIdentity,
    /// Whether the sandbox has a network namespace of its own.
    pub(crate) own_network: bool,
    /// Its cgroups.
    pub(crate) cgroups: &'a [PathBuf],
    /// The largest file a command may write (the sandbox's disk).
    pub(crate) file_size_limit: Option<u64>,
}

impl Entry<'_> {
    /// The command that runs `action` in the sandbox, in `workdir` with
    /// exactly `env`, and the header to send before its stdin.
    pub(crate) fn command(
        &self,
        workdir: &str,
        env: Vec<(String, String)>,
        user: Option<String>,
        action: Action,
    ) -> Result<(Command, Vec<u8>), LocalError> {
        jail::enter_command(&EnterRequest {
            init: ProcessRef {
                pid: self.init.pid,
                start_time: self.init.start_time,
            },
            own_network: self.own_network,
            cgroups: self.cgroups.to_vec(),
            workdir: workdir.to_string(),
            env,
            user,
            file_size_limit: self.file_size_limit,
            action,
        })
    }

    /// Runs the isolation probe in the sandbox: what a command there can
    /// reach. `hidden` are host paths it must not see, `host_root_uid` the
    /// id it must not map.
    pub(crate) async fn probe(
        &self,
        workdir: &str,
        hidden: Vec<String>,
        host_root_uid: Option<u32>,
        own_root: bool,
        volumes: &[Volume],
    ) -> Result<ProbeReport, LocalError> {
        use std::os::unix::fs::MetadataExt;
        let root = fs::metadata("/").context(|| "stat /".into())?;
        let action = Action::Probe(ProbeRequest {
            host_root: (root.dev(), root.ino()),
            hidden,
            host_root_uid,
            own_root,
            volumes: volumes.to_vec(),
        });
        let env = vec![("PATH".to_string(), SANDBOX_PATH.to_string())];
        let (mut command, header) = self.command(workdir, env, None, action)?;
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .context(|| "starting the isolation probe".into())?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let run = async {
            stdin.write_all(&header).await?;
            drop(stdin);
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                pipe.read_to_string(&mut stderr).await?;
            }
            let output = child.wait_with_output().await?;
            Ok::<_, std::io::Error>((output, stderr))
        };
        let (output, stderr) = tokio::time::timeout(PROBE_TIMEOUT, run)
            .await
            .map_err(|_| LocalError::Timeout {
                what: "the isolation probe".into(),
                after: PROBE_TIMEOUT,
            })?
            .context(|| "running the isolation probe".into())?;
        if !output.status.success() {
            return Err(LocalError::Failed(format!(
                "the isolation probe failed ({}): {}",
                output.status,
                stderr.trim()
            )));
        }
        serde_json::from_slice(&output.stdout)
            .map_err(std::io::Error::other)
            .context(|| "reading the isolation probe's report".into())
    }
}

/// The end of an init log, for error messages.
fn log_tail(path: &Path) -> String {
    const TAIL: usize = 800;
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return "no init log".into(),
        Err(error) => return format!("cannot read {}: {error}", path.display()),
    };
    let text = text.trim();
    let start = text.len().saturating_sub(TAIL);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    if text.is_empty() {
        "the init log is empty".into()
    } else {
        text[start..].to_string()
    }
}
