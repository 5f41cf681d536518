//! Commands with live pipes, for callers that relay a process rather than
//! collect its result (a container runtime's exec, a long-lived shell fed
//! commands as they come). A command starts exactly as [`crate::exec`]
//! starts one — entered into its sandbox through the helper and confined
//! there, in a process group of its own, watched against the sandbox's disk
//! limit — but is handed back running: stdin open for writing while the
//! caller has input, stdout and stderr to read as the command writes.
//! Nothing is kept here; output the caller does not read holds the command
//! back, as a full pipe does.

use std::process::ExitStatus;
use std::sync::Arc;

use sandfleet_core::{BackendError, ErrorKind, ExecRequest, SandboxHandle};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::Inner;
use crate::disk::{DiskLimit, DiskWatch};
use crate::error::{IoContext, LocalError};
use crate::exec::{self, KILL_GRACE, Launched, Leader};
use crate::process::group_gone_within;
use crate::sandbox::Sandbox;

/// A command to start with live pipes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpawnRequest {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment on top of the template's.
    pub env: Vec<(String, String)>,
    /// Working directory: absolute, or relative to the workdir; the
    /// workdir when `None`.
    pub workdir: Option<String>,
    /// Whether the caller writes the command's stdin; without, the command
    /// reads end-of-file.
    pub stdin: bool,
    /// Stderr goes into stdout's pipe, in the order written (as on a
    /// terminal).
    pub merge_stderr: bool,
}

/// A command running in a sandbox.
#[derive(Debug)]
pub struct Spawned {
    /// Its stdin, when asked for; dropping it is end-of-file.
    pub stdin: Option<ChildStdin>,
    /// Its stdout (with its stderr, when merged).
    pub stdout: pipe::Receiver,
    /// Its stderr, unless merged.
    pub stderr: Option<pipe::Receiver>,
    /// Its end.
    pub exit: Exit,
}

/// The end of a spawned command, waited for or forced. Dropping it kills
/// the command's process group.
#[derive(Debug)]
pub struct Exit {
    kill: Option<oneshot::Sender<()>>,
    ended: oneshot::Receiver<Result<ExitStatus, BackendError>>,
    outcome: Option<Result<ExitStatus, BackendError>>,
    cluster: String,
}

impl Exit {
    /// Waits until the command has exited. Its output may still be in its
    /// pipes, or held open by processes it left behind. Cancel-safe, and
    /// the same answer every time.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::SandboxLost`] when the sandbox ended while the command
    /// ran; [`ErrorKind::Failed`] when the command was stopped because the
    /// sandbox's writes passed its disk limit.
    pub async fn wait(&mut self) -> Result<ExitStatus, BackendError> {
        if let Some(outcome) = &self.outcome {
            return outcome.clone();
        }
        let outcome = (&mut self.ended).await.unwrap_or_else(|_| {
            Err(BackendError::new(
                ErrorKind::Failed,
                &self.cluster,
                "the watch on a spawned command ended without its exit",
            ))
        });
        self.outcome = Some(outcome.clone());
        outcome
    }

    /// Kills the command's process group (once; later calls do nothing).
    /// [`Exit::wait`] then returns its status, killed by a signal.
    pub fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }
}

impl Inner {
    /// See [`crate::LocalBackend::finds_program`].
    pub(crate) async fn finds_program(
        &self,
        handle: &SandboxHandle,
        program: &str,
        env: &[(String, String)],
        workdir: Option<&str>,
    ) -> Result<bool, LocalError> {
        let sandbox = self.claimed(handle)?;
        let (program, env, workdir) = (
            program.to_string(),
            env.to_vec(),
            workdir.map(str::to_string),
        );
        crate::blocking(move || sandbox.finds_program(&program, &env, workdir.as_deref())).await
    }

    pub(crate) async fn spawn(
        &self,
        handle: &SandboxHandle,
        request: &SpawnRequest,
    ) -> Result<Spawned, LocalError> {
        let sandbox = self.claimed(handle)?;
        sandbox.check_alive()?;
        let program = request.argv.first().cloned().unwrap_or_default();
        let prepared = sandbox.command(&ExecRequest {
            argv: request.argv.clone(),
            env: request.env.clone(),
            workdir: request.workdir.clone(),
            merge_stderr: request.merge_stderr,
            ..ExecRequest::default()
        })?;
        let header = prepared.stdin_prefix;
        let starting = || format!("sandbox {}: starting `{program}`", sandbox.id());
        let Launched {
            mut child,
            group,
            stdout,
            stderr,
        } = exec::launch(
            prepared.command,
            prepared.leader,
            request.stdin || !header.is_empty(),
            request.merge_stderr,
        )
        .context(starting)?;
        let mut stdin = child.stdin.take();
        let stdout = pipe::Receiver::from_owned_fd(stdout.into()).context(starting)?;
        let stderr = stderr
            .map(|reader| pipe::Receiver::from_owned_fd(reader.into()))
            .transpose()
            .context(starting)?;
        let (kill, killed) = oneshot::channel();
        let (report, ended) = oneshot::channel();
        let watch = Watch {
            group,
            leader: prepared.leader,
            disk: sandbox.disk_limit(),
            sandbox: Arc::clone(&sandbox),
            program,
        };
        let cluster = self.name.clone();
        let name = cluster.clone();
        tokio::spawn(async move {
            let outcome = watch.run(child, killed).await;
            let _ = report.send(outcome.map_err(|e| e.into_backend(&name)));
        });
        if let Some(pipe) = &mut stdin
            && !header.is_empty()
        {
            // The helper reads its header first; one that is gone shows in
            // the exit.
            let _ = pipe.write_all(&header).await;
        }
        Ok(Spawned {
            stdin: stdin.filter(|_| request.stdin),
            stdout,
            stderr,
            exit: Exit {
                kill: Some(kill),
                ended,
                outcome: None,
                cluster,
            },
        })
    }
}

/// What watching a spawned command needs.
struct Watch {
    group: Option<u32>,
    leader: Leader,
    disk: Option<DiskLimit>,
    sandbox: Arc<Sandbox>,
    program: String,
}

impl Watch {
    /// Waits for the command to exit, killing its group when asked (or when
    /// the [`Exit`] is dropped) and when the sandbox's writes pass its disk
    /// limit.
    async fn run(
        self,
        mut child: Child,
        mut killed: oneshot::Receiver<()>,
    ) -> Result<ExitStatus, LocalError> {
        let mut disk_watch = self.disk.as_ref().map(DiskWatch::new);
        let mut disk_exceeded = None;
        // Set once the group was killed: when to stop waiting for it.
        let mut grace: Option<Instant> = None;
        let status = loop {
            let stop = tokio::select! {
                status = child.wait() => {
                    break status.context(|| format!(
                        "sandbox {}: waiting for `{}`", self.sandbox.id(), self.program
                    ))?;
                }
                // A kill, or the Exit dropped.
                _ = &mut killed, if grace.is_none() => true,
                usage = async { disk_watch.as_mut().expect("checked by the guard").tick().await },
                    if disk_watch.is_some() && grace.is_none() => {
                    disk_exceeded = usage;
                    disk_exceeded.is_some()
                }
                () = tokio::time::sleep_until(grace.unwrap_or_else(Instant::now)), if grace.is_some() => {
                    // Still running after its group's SIGKILL and the grace
                    // period (the helper reaping a child that will not die):
                    // the leader goes too.
                    let _ = child.start_kill();
                    grace = Some(Instant::now() + KILL_GRACE);
                    false
                }
            };
            if stop {
                exec::kill(self.group, self.leader);
                grace = Some(Instant::now() + KILL_GRACE);
            }
        };
        if disk_exceeded.is_none()
            && let Some(disk) = &self.disk
        {
            disk_exceeded = disk.exceeded().await;
        }
        if grace.is_some()
            && let Some(group) = self.group
            && !group_gone_within(group, KILL_GRACE).await
        {
            tracing::warn!(group, "processes of a killed command outlived SIGKILL");
        }
        self.sandbox
            .check_ended_alive(&self.program, status.success())?;
        match (disk_exceeded, &self.disk) {
            (Some(usage), Some(disk)) => Err(LocalError::Failed(format!(
                "sandbox {}: `{}` was stopped: {}",
                self.sandbox.id(),
                self.program,
                disk.stopped_because(usage)
            ))),
            _ => Ok(status),
        }
    }
}
