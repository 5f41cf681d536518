//! Commands in a sandbox's pod over `pods/exec` websockets (kube offers
//! `v5.channel.k8s.io` and falls back to `v4`), without a router: a
//! persistent shell per sandbox that runs many commands over one websocket,
//! or a websocket per command. Both frame each command the same way
//! ([`crate::frames`]); a timeout kills the command's process group through
//! a second, short exec. A command is never sent twice: once its text may
//! have reached the pod, any failure is reported as such.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, AttachedProcess};
use sandfleet_core::{
    BackendError, CappedOutput, ErrorKind, ExecRequest, ExecResult, OutputSink, OutputStream,
    SandboxHandle,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, SimplexStream, WriteHalf};

use crate::errors::api_error;
use crate::frames::{KILL_GROUP, Stream, script};
use crate::objects::CONTAINER;
use crate::toolbox::Shell;

/// How long a killed command may take to show its end frame before the
/// session carrying it is given up.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// How long the status of a shell that ended may take to arrive.
const STATUS_WAIT: Duration = Duration::from_secs(1);

/// A pods/exec status, when the server sends one.
type ExitStatus = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Status>> + Send>>;

/// Bytes read from a stream at once.
const READ_CHUNK: usize = 64 * 1024;

/// Why a command has no result.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The exec could not start: nothing was sent to the pod.
    NotStarted(kube::Error),
    /// The connection ended before the command's end: it may have run.
    Lost(String),
    /// The command never reached the session's shell: its websocket had
    /// ended before the first byte of it was taken, or the shell ended, of
    /// itself, before it read it. It never ran.
    Unread,
}

impl Failure {
    /// Whether the pod's end may explain it: the server refused the exec,
    /// or the stream ended before the command's end (a pod evicted while
    /// the command ran).
    pub(crate) fn pod_may_have_ended(&self) -> bool {
        matches!(self, Failure::NotStarted(_) | Failure::Lost(_))
    }

    /// The failure as the engine sees it: whether the command may have
    /// run decides whether it may be sent again.
    pub(crate) fn into_error(
        self,
        cluster: &str,
        sandbox: &SandboxHandle,
        program: &str,
    ) -> BackendError {
        match self {
            Failure::NotStarted(error) => {
                let error = api_error(
                    cluster,
                    &format!("exec `{program}` in sandbox {}", sandbox.id),
                    error,
                );
                if error.kind() == ErrorKind::NotFound {
                    BackendError::new(
                        ErrorKind::SandboxLost,
                        cluster,
                        format!("sandbox {}: its pod is gone", sandbox.id),
                    )
                } else {
                    // The upgrade was refused or never made: nothing ran.
                    error
                }
            }
            Failure::Unread => BackendError::new(
                ErrorKind::Transport { sent: false },
                cluster,
                format!(
                    "command `{program}` in sandbox {}: the exec session ended before reading it",
                    sandbox.id
                ),
            ),
            Failure::Lost(why) => BackendError::new(
                ErrorKind::Transport { sent: true },
                cluster,
                format!("command `{program}` in sandbox {}: {why}", sandbox.id),
            ),
        }
    }
}

/// How a pods/exec stream ended before a command's end frame.
enum Closed {
    /// After the command's start frame (or with no way to tell).
    Lost(String),
    /// Before it: the command's process never started.
    BeforeStart,
}

/// A pod to run commands in.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) pods: Api<Pod>,
    pub(crate) pod: String,
    /// How the driver's scripts run there.
    pub(crate) shell: Shell,
}

impl Target {
    /// Why the pod can take no more commands, when it has ended or is
    /// gone; `None` while it runs or when the server cannot say. A failed
    /// pod is never restarted (upstream #729), and the API server refuses
    /// an exec into a completed pod with a 400 as it refuses a malformed
    /// one: only the pod's phase tells the two apart.
    pub(crate) async fn ended(&self) -> Option<String> {
        match self.pods.get_opt(&self.pod).await {
            Ok(None) => Some(format!("its pod {} is gone", self.pod)),
            Ok(Some(pod)) => {
                let status = pod.status.unwrap_or_default();
                let phase = status.phase.unwrap_or_default();
                matches!(phase.as_str(), "Failed" | "Succeeded").then(|| {
                    let said = [status.reason, status.message]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(": ");
                    if said.is_empty() {
                        format!("its pod {} has ended ({phase})", self.pod)
                    } else {
                        format!("its pod {} has ended ({phase}, {said})", self.pod)
                    }
                })
            }
            Err(_) => None,
        }
    }

    fn params(&self, stdin: bool) -> AttachParams {
        AttachParams::default()
            .container(CONTAINER)
            .stdin(stdin)
            .stdout(true)
            .stderr(true)
    }

    /// Starts `argv` in the pod.
    pub(crate) async fn start(
        &self,
        argv: Vec<String>,
        stdin: bool,
    ) -> Result<AttachedProcess, kube::Error> {
        self.pods.exec(&self.pod, argv, &self.params(stdin)).await
    }

    /// Kills process group `pid` (best effort: the command's end frame, or
    /// its absence, tells what happened).
    async fn kill(&self, pid: u32) {
        match self
            .start(self.shell.script(KILL_GROUP, &[pid.to_string()]), false)
            .await
        {
            Ok(mut process) => {
                if let Some(status) = process.take_status() {
                    let _ = tokio::time::timeout(KILL_GRACE, status).await;
                }
            }
            Err(error) => {
                tracing::warn!(pod = %self.pod, pid, %error, "cannot kill a timed-out command")
            }
        }
    }
}

/// A long-lived shell in a pod, reading commands from its stdin.
pub(crate) struct Session {
    // Dropping the process closes the websocket, and with it the shell.
    _process: AttachedProcess,
    /// The shell's exit status, once it has ended.
    status: Option<ExitStatus>,
    stdin: WriteHalf<SimplexStream>,
    stdout: ReadHalf<SimplexStream>,
    stderr: ReadHalf<SimplexStream>,
}

impl Session {
    /// Opens a shell (`shell`) in the target's pod.
    pub(crate) async fn open(target: &Target) -> Result<Self, kube::Error> {
        let mut process = target.start(target.shell.session(), true).await?;
        let status = process.take_status().map(|s| Box::pin(s) as ExitStatus);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (process.stdin(), process.stdout(), process.stderr())
        else {
            unreachable!("stdin, stdout and stderr were asked for");
        };
        Ok(Session {
            _process: process,
            status,
            stdin,
            stdout,
            stderr,
        })
    }

    /// Runs `request`. `Err` means the session is unusable and must be
    /// dropped (the command may have run).
    pub(crate) async fn run(
        &mut self,
        target: &Target,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, Failure> {
        let marker = marker();
        let started = Instant::now();
        let text = script(request, &marker, false);
        let mut taken = 0;
        while taken < text.len() {
            match self.stdin.write(&text.as_bytes()[taken..]).await {
                Ok(n) if n > 0 => taken += n,
                // The websocket's end takes nothing more; none of the
                // command's bytes were taken, so none were sent.
                _ if taken == 0 => return Err(Failure::Unread),
                Ok(_) => {
                    return Err(Failure::Lost(
                        "the exec session took part of the command".into(),
                    ));
                }
                Err(e) => return Err(Failure::Lost(format!("writing to the exec session: {e}"))),
            }
        }
        self.stdin
            .flush()
            .await
            .map_err(|e| Failure::Lost(format!("writing to the exec session: {e}")))?;
        let followed = follow(
            target,
            &mut self.stdout,
            &mut self.stderr,
            &marker,
            request,
            output,
            started,
        )
        .await;
        match followed {
            Ok(result) => Ok(result),
            Err(Closed::Lost(why)) => Err(Failure::Lost(why)),
            // The shell ended cleanly without starting the command, whose
            // process prints its start frame before anything else.
            Err(Closed::BeforeStart) => {
                // Exit 0 is the end of its input: a shell that had read the
                // command would be waiting for it, or killed.
                let ended = match self.status.take() {
                    Some(status) => matches!(
                        tokio::time::timeout(STATUS_WAIT, status).await,
                        Ok(Some(status)) if exit_code(&status) == 0
                    ),
                    None => false,
                };
                Err(if ended {
                    Failure::Unread
                } else {
                    Failure::Lost("the exec session ended before the command started".into())
                })
            }
        }
    }
}

/// Runs `request` over a websocket of its own; the exit code is the status
/// channel's.
pub(crate) async fn one_shot(
    target: &Target,
    request: &ExecRequest,
    output: Option<&OutputSink>,
) -> Result<ExecResult, Failure> {
    let marker = marker();
    let started = Instant::now();
    let argv = target.shell.script(&script(request, &marker, true), &[]);
    let mut process = target
        .start(argv, false)
        .await
        .map_err(Failure::NotStarted)?;
    let status = process.take_status();
    let (Some(mut stdout), Some(mut stderr)) = (process.stdout(), process.stderr()) else {
        unreachable!("stdout and stderr were asked for");
    };
    let mut result = follow(
        target,
        &mut stdout,
        &mut stderr,
        &marker,
        request,
        output,
        started,
    )
    .await
    .map_err(|closed| match closed {
        Closed::Lost(why) => Failure::Lost(why),
        Closed::BeforeStart => Failure::Lost("the exec ended before the command started".into()),
    })?;
    if !result.timed_out
        && let Some(status) = status
        && let Ok(Some(status)) = tokio::time::timeout(KILL_GRACE, status).await
    {
        result.exit_code = exit_code(&status);
    }
    Ok(result)
}

/// The exit code a pods/exec status reports: 0 on success, the `ExitCode`
/// cause otherwise (-1 when there is none: the exec itself failed).
pub(crate) fn exit_code(status: &Status) -> i32 {
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
        })
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.parse().ok())
        .unwrap_or(-1)
}

/// How the stream ended, judged by whether the command had started.
fn closed(out: &Stream) -> Closed {
    if out.started() {
        Closed::Lost("the exec connection closed before the command ended".into())
    } else {
        Closed::BeforeStart
    }
}

/// A fresh command marker: 128 bits from the process's random hasher keys.
fn marker() -> String {
    format!("sf{:016x}{:016x}", crate::random(), crate::random())
}

/// Reads one command's frames off `stdout` and `stderr` until both end,
/// killing the command's process group at its timeout.
async fn follow(
    target: &Target,
    stdout: &mut ReadHalf<SimplexStream>,
    stderr: &mut ReadHalf<SimplexStream>,
    marker: &str,
    request: &ExecRequest,
    sink: Option<&OutputSink>,
    started: Instant,
) -> Result<ExecResult, Closed> {
    let mut out = Stream::new(marker, true);
    let mut err = Stream::new(marker, !request.merge_stderr);
    let mut kept_out = CappedOutput::new(OutputStream::Stdout, request.max_output);
    let mut kept_err = CappedOutput::new(OutputStream::Stderr, request.max_output);
    let mut out_buf = vec![0u8; READ_CHUNK];
    let mut err_buf = vec![0u8; READ_CHUNK];
    let mut timed_out = false;
    let mut deadline = (!request.timeout.is_zero())
        .then(|| tokio::time::Instant::from_std(started + request.timeout));
    while out.ended.is_none() || err.ended.is_none() {
        let timer = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            read = stdout.read(&mut out_buf), if out.ended.is_none() => {
                let n = read.map_err(|e| Closed::Lost(format!("reading the command's output: {e}")))?;
                if n == 0 {
                    return Err(closed(&out));
                }
                kept_out.keep_and_send(&out.feed(&out_buf[..n]), sink).await;
            }
            read = stderr.read(&mut err_buf), if err.ended.is_none() => {
                let n = read.map_err(|e| Closed::Lost(format!("reading the command's errors: {e}")))?;
                if n == 0 {
                    return Err(closed(&out));
                }
                kept_err.keep_and_send(&err.feed(&err_buf[..n]), sink).await;
            }
            () = timer => {
                if timed_out {
                    return Err(Closed::Lost(format!(
                        "the command outlived its timeout by {} and could not be killed",
                        humantime::format_duration(KILL_GRACE)
                    )));
                }
                timed_out = true;
                match out.pid {
                    Some(pid) => target.kill(pid).await,
                    None => tracing::warn!(pod = %target.pod, "a command timed out before it started"),
                }
                deadline = Some(tokio::time::Instant::now() + KILL_GRACE);
            }
        }
    }
    let (stdout, stdout_dropped) = kept_out.finish_and_send(sink).await;
    let (stderr, stderr_dropped) = kept_err.finish_and_send(sink).await;
    let exit_code = match out.ended {
        Some(Some(code)) if !timed_out => code,
        _ => -1,
    };
    Ok(ExecResult {
        exit_code,
        stdout,
        stderr,
        timed_out,
        duration: started.elapsed(),
        stdout_dropped,
        stderr_dropped,
    })
}
