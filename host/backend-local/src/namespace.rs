//! Linux namespaces: starting a sandbox's init (`init.sh` under `unshare`),
//! finding it, stopping it, entering its namespaces to run a command, and the
//! startup probe that tells whether this machine allows any of it.
//!
//! The process tree of a namespaced sandbox:
//!
//! ```text
//! unshare (our child, own process group)      host pid namespace
//! └── init: bash, argv[0] = the sandbox marker pid 1 of the sandbox's namespaces
//!     └── commands, via nsenter               (orphans are re-parented to the init, which reaps them)
//! ```
//!
//! Killing the init makes the kernel kill every process in its pid namespace;
//! `unshare` then exits and is reaped by its parent. Killing `unshare` first
//! would leave the init to the host's pid 1, which in a container may never
//! reap it, so the init is always killed first.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::error::{IoContext, LocalError};
use crate::process::{self, MARKER_ENV, Process, ProcessIdentity};
use crate::sandbox::WorkdirCopy;
use crate::state::remove_tree;

/// The init script; see its header for the arguments.
const INIT_SCRIPT: &str = include_str!("init.sh");

/// `PATH` of everything run for or inside a sandbox.
pub(crate) const SANDBOX_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The init's stderr, kept in the sandbox directory for diagnosis.
const INIT_LOG: &str = "init.log";

/// Bound on the startup probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bound on each wait for a killed process to go away.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What a sandbox's init is started with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InitSpec<'a> {
    /// The sandbox's directory, prepared by [`prepare_dir`].
    pub(crate) sandbox_dir: &'a Path,
    /// The directory the workdir is a copy-on-write view of.
    pub(crate) image_dir: &'a Path,
    /// The workdir inside the sandbox.
    pub(crate) workdir: &'a str,
    /// The sandbox id, also its host name.
    pub(crate) sandbox_id: &'a str,
    /// The init's `argv[0]`.
    pub(crate) marker: &'a str,
    /// Keep the host's network namespace instead of a private one with only
    /// a loopback device.
    pub(crate) share_network: bool,
}

/// How far the init script goes.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Become the sandbox's init.
    Serve,
    /// Exit once the sandbox is set up.
    Probe,
}

/// Creates the directories the init script mounts on, inside the (existing)
/// sandbox directory.
pub(crate) fn prepare_dir(sandbox_dir: &Path) -> Result<(), LocalError> {
    for sub in ["upper", "work", "rootfs"] {
        let dir = sandbox_dir.join(sub);
        fs::create_dir(&dir).context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}

fn init_command(spec: &InitSpec<'_>, mode: Mode) -> std::process::Command {
    let mut command = std::process::Command::new("unshare");
    command.args([
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--ipc",
        "--uts",
        "--fork",
        // If unshare dies, the init dies with it. (PR_SET_PDEATHSIG, set by
        // unshare in the child: from our process it would follow the
        // spawning thread, which tokio may retire at any time.)
        "--kill-child",
    ]);
    if !spec.share_network {
        command.arg("--net");
    }
    // The init carries the marker in its environment from its first
    // instruction (argv[0] only from its last), so a reap finds a sandbox
    // still being set up. `env` runs in the child, so `unshare` itself is
    // not marked and is left to exit once its init is killed.
    command
        .arg("env")
        .arg(format!("{MARKER_ENV}={}", spec.marker))
        .args(["bash", "-c", INIT_SCRIPT, "sandfleet-init"])
        .arg(spec.sandbox_dir)
        .arg(spec.image_dir)
        .args([spec.workdir, spec.sandbox_id, spec.marker])
        .arg(match mode {
            Mode::Serve => "serve",
            Mode::Probe => "probe",
        })
        .env_clear()
        .env("PATH", SANDBOX_PATH)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // Our own group: a terminal's Ctrl-C reaches the engine, which tears
        // sandboxes down in order, not the sandboxes behind its back.
        .process_group(0);
    command
}

/// A started sandbox init.
#[derive(Debug)]
pub(crate) struct Started {
    /// The `unshare` process, to be reaped once the init is gone.
    pub(crate) unshare: Child,
    /// The init.
    pub(crate) init: Process,
    /// How the workdir was made.
    pub(crate) copy: WorkdirCopy,
}

/// Kills `unshare` (and so the init) if a start is abandoned midway, for
/// example because the claim waiting for it was cancelled.
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

/// Starts the init of a sandbox and returns once the sandbox can run
/// commands, or fails (having stopped what it started) at `deadline`.
pub(crate) async fn start(spec: &InitSpec<'_>, deadline: Instant) -> Result<Started, LocalError> {
    let id = spec.sandbox_id;
    let log_path = spec.sandbox_dir.join(INIT_LOG);
    let log = File::create(&log_path).context(|| format!("creating {}", log_path.display()))?;
    let mut command = Command::from(init_command(spec, Mode::Serve));
    command.stderr(log);
    let mut guard = StartGuard(Some(
        command
            .spawn()
            .context(|| format!("sandbox {id}: starting unshare"))?,
    ));
    let stdout = guard.child().stdout.take().expect("stdout is piped");
    let budget = deadline.saturating_duration_since(Instant::now());
    let ready = tokio::time::timeout(budget, read_ready(stdout)).await;
    let failure = match ready {
        Ok(Some(copy)) => {
            let unshare_pid = guard.child().id().unwrap_or_default() as i32;
            match find_init(unshare_pid) {
                Some(init) => {
                    return Ok(Started {
                        unshare: guard.take(),
                        init,
                        copy,
                    });
                }
                None => LocalError::Failed(format!("sandbox {id}: its init exited once ready")),
            }
        }
        Ok(None) => LocalError::Failed(format!(
            "sandbox {id}: init failed: {}",
            log_tail(&log_path)
        )),
        Err(_) => LocalError::Timeout {
            what: format!("sandbox {id} to start ({})", log_tail(&log_path)),
            after: budget,
        },
    };
    let mut unshare = guard.take();
    stop(&mut unshare, None).await;
    Err(failure)
}

/// Reads the init's stdout up to its `ready <copy>` line; `None` when the
/// init exits first.
async fn read_ready(stdout: ChildStdout) -> Option<WorkdirCopy> {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match line.strip_prefix("ready ") {
            Some("overlay") => return Some(WorkdirCopy::Overlay),
            Some("copy") => return Some(WorkdirCopy::Copy),
            _ => {}
        }
    }
    None
}

/// The init: the only child of `unshare --fork`.
fn find_init(unshare_pid: i32) -> Option<Process> {
    let children = process::children_of(unshare_pid);
    let [pid] = children.as_slice() else {
        return None;
    };
    Process::open(ProcessIdentity::of(*pid)?)
}

/// Stops a sandbox's init and reaps `unshare`, each wait bounded by
/// [`STOP_TIMEOUT`]. The init is `init` or, before it was known, whatever
/// child `unshare` has.
pub(crate) async fn stop(unshare: &mut Child, init: Option<&Process>) {
    match init {
        Some(init) => {
            init.kill();
        }
        None => {
            if let Some(init) = unshare.id().and_then(|pid| find_init(pid as i32)) {
                init.kill();
            }
        }
    }
    if tokio::time::timeout(STOP_TIMEOUT, unshare.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            pid = unshare.id(),
            "unshare still running after its init was killed"
        );
        let _ = unshare.start_kill();
        let _ = tokio::time::timeout(STOP_TIMEOUT, unshare.wait()).await;
    }
}

/// A command that enters the namespaces and root of the sandbox whose init is
/// `init_pid`; the program and its arguments are to be appended. The working
/// directory is left at the sandbox's `/` (`--wd=PATH` would be resolved on
/// the host side), so the program sets its own.
pub(crate) fn enter_command(init_pid: i32, share_network: bool) -> Command {
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--target={init_pid}"))
        .args(["--user", "--mount", "--pid", "--ipc", "--uts"]);
    if !share_network {
        command.arg("--net");
    }
    command
        .args(["--preserve-credentials", "--root", "--wd"])
        .env_clear()
        .env("PATH", SANDBOX_PATH);
    command
}

/// Sets up a throwaway sandbox with the real init script, under `state_dir`
/// (so overlayfs is tried on the filesystem sandboxes will use), and reports
/// why namespaced sandboxes cannot work here, if they cannot. Blocking.
pub(crate) fn probe(state_dir: &Path, workdir: &str) -> Result<(), String> {
    let dir = state_dir.join(format!("probe-{}", std::process::id()));
    let result = run_probe(&dir, workdir);
    if let Err(error) = remove_tree(&dir) {
        tracing::warn!(%error, "cannot remove the namespace probe's directory");
    }
    result
}

fn run_probe(dir: &Path, workdir: &str) -> Result<(), String> {
    let sandbox_dir = dir.join("sandbox");
    let image_dir = dir.join("image");
    for created in [&sandbox_dir, &image_dir] {
        fs::create_dir_all(created).map_err(|e| format!("creating {}: {e}", created.display()))?;
    }
    prepare_dir(&sandbox_dir).map_err(|e| e.to_string())?;
    let spec = InitSpec {
        sandbox_dir: &sandbox_dir,
        image_dir: &image_dir,
        workdir,
        sandbox_id: "probe",
        marker: "sandfleet-probe",
        share_network: false,
    };
    let log_path = sandbox_dir.join(INIT_LOG);
    let log =
        File::create(&log_path).map_err(|e| format!("creating {}: {e}", log_path.display()))?;
    let mut child = init_command(&spec, Mode::Probe)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the probe did not finish within {PROBE_TIMEOUT:?}"));
            }
            Err(error) => return Err(format!("waiting for the probe: {error}")),
        }
    };
    let mut stdout = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        let _ = pipe.read_to_string(&mut stdout);
    }
    if status.success() && stdout.starts_with("ready ") {
        Ok(())
    } else {
        Err(format!("{status}: {}", log_tail(&log_path)))
    }
}

/// The end of an init log, for error messages.
fn log_tail(path: &Path) -> String {
    const TAIL: usize = 800;
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return "no init log".into(),
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
