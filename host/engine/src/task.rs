//! One task: prepare its script, get a sandbox (a recycled one after a
//! verified reset, or a fresh claim), run the script, grade the outputs.
//!
//! Only the infrastructure (claims, exec, backend) makes a task an
//! `infra_error`; a task the adapter cannot prepare, a command that overruns
//! under the `error` timeout rule, or a grade of `error` make it `failed`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_core::{ExecRequest, ExecResult, OutputChunk, OutputStream, file_stem};
use sandfleet_plugin::adapter::{
    Command, CommandOutput, GradeResult, GradeStatus, Script, Task, TaskAdapter, TimeoutRule,
};
use sandfleet_plugin::reset::{ResetCheck, Verdict};
use tokio::io::AsyncWriteExt;

use crate::blocking::call_plugin;
use crate::error::RunError;
use crate::fleet::{Claimed, Fleet};
use crate::phases::{Phase, PhaseTimes};
use crate::results::{GradeRecord, TaskRecord, TaskStatus, TestRecord, Timings};
use crate::settings::FleetSettings;
use crate::text;

/// Bytes of an error or grade detail kept in a result line.
const MAX_ERROR: usize = 4096;

/// Commands without a timeout of their own get this one.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// A task to run, with the solution to evaluate.
#[derive(Debug, Clone)]
pub struct WorkItem {
    /// The task as the adapter loaded it.
    pub task: Task,
    /// The candidate solution (e.g. a model patch), if any.
    pub solution: Option<String>,
    /// The pass over the dataset, from 0.
    pub epoch: u32,
}

/// A sandbox a worker holds between tasks of one image.
pub(crate) struct Lease {
    pub(crate) claimed: Claimed,
    /// Tasks it has served.
    pub(crate) served: u32,
    /// Outputs of the reset check's baseline commands; `None` when the
    /// sandbox cannot be recycled.
    baseline: Option<Vec<CommandOutput>>,
}

pub(crate) struct TaskRunner {
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) adapter: TaskAdapter,
    pub(crate) reset: Option<ResetCheck>,
    pub(crate) settings: FleetSettings,
    pub(crate) phases: Arc<PhaseTimes>,
    pub(crate) logs: PathBuf,
}

/// How far a task got, for its record.
struct Progress {
    started: Instant,
    timings: Timings,
    cluster: Option<String>,
    sandbox: Option<String>,
    reuse: u32,
    output_dropped: u64,
}

impl TaskRunner {
    /// Runs `item`, holding or replacing the sandbox in `lease`.
    pub(crate) async fn run(&self, item: &WorkItem, lease: &mut Option<Lease>) -> TaskRecord {
        let mut progress = Progress {
            started: Instant::now(),
            timings: Timings::default(),
            cluster: None,
            sandbox: None,
            reuse: 0,
            output_dropped: 0,
        };
        let outcome = self.attempt(item, lease, &mut progress).await;
        // Without recycling a sandbox serves one task: give it back now
        // rather than when the worker picks its next task.
        if !self.settings.recycle
            && let Some(done) = lease.take()
        {
            let started = Instant::now();
            self.release(done).await;
            progress.timings.release_s = started.elapsed().as_secs_f64();
        }
        progress.timings.total_s = progress.started.elapsed().as_secs_f64();
        let (status, timed_out, error, grade) = match outcome {
            Outcome::Graded { grade, timed_out } => {
                let status = if grade.status == GradeStatus::Passed {
                    TaskStatus::Ok
                } else {
                    TaskStatus::Failed
                };
                (status, timed_out, None, Some(grade_record(grade)))
            }
            Outcome::Ungraded { error, timed_out } => {
                (TaskStatus::Failed, timed_out, Some(error), None)
            }
            Outcome::Infra(error) => (TaskStatus::InfraError, false, Some(error), None),
        };
        TaskRecord {
            task_id: item.task.id.clone(),
            epoch: item.epoch,
            status,
            image: item.task.image.clone(),
            cluster: progress.cluster,
            sandbox: progress.sandbox,
            reuse: progress.reuse,
            timed_out,
            error: error.map(|error| text::truncated(&error, MAX_ERROR)),
            output_dropped: progress.output_dropped,
            timings: progress.timings,
            grade,
            finished_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string(),
        }
    }

    /// Releases a sandbox the worker no longer needs.
    pub(crate) async fn release(&self, lease: Lease) {
        let started = Instant::now();
        if let Err(e) = self.fleet.release(&lease.claimed).await {
            // Teardown reaps whatever a failed release leaves.
            tracing::warn!(sandbox = %lease.claimed.handle.id, "release failed: {e}");
        }
        self.phases.record(Phase::Release, started.elapsed());
    }

    async fn attempt(
        &self,
        item: &WorkItem,
        lease: &mut Option<Lease>,
        progress: &mut Progress,
    ) -> Outcome {
        let task = &item.task;
        let adapter = self.adapter.clone();
        let (prepared_task, solution) = (task.clone(), item.solution.clone());
        let script =
            match call_plugin(move || adapter.prepare(&prepared_task, solution.as_deref())).await {
                Ok(script) => script,
                Err(RunError::Plugin(e)) if !e.is_plugin_fault() => {
                    return Outcome::Ungraded {
                        error: format!("the adapter cannot prepare this task: {e}"),
                        timed_out: false,
                    };
                }
                Err(e) => return Outcome::Infra(format!("prepare: {e}")),
            };
        let image = self
            .fleet
            .images
            .iter()
            .position(|i| *i == task.image)
            .expect("images come from the tasks");

        let claim_started = Instant::now();
        if let Err(error) = self.sandbox_for(image, task, lease).await {
            return Outcome::Infra(error);
        }
        progress.timings.claim_s = claim_started.elapsed().as_secs_f64();
        let held = lease.as_mut().expect("sandbox_for leaves a lease");
        progress.cluster = Some(self.fleet.clusters[held.claimed.cluster].name.clone());
        progress.sandbox = Some(held.claimed.handle.id.clone());
        progress.reuse = held.served;
        held.served += 1;
        let claimed = held.claimed.clone();

        let process_started = Instant::now();
        let outputs = self.execute(&claimed, item, &script).await;
        progress.timings.process_s = process_started.elapsed().as_secs_f64();
        self.phases
            .record(Phase::Process, process_started.elapsed());
        let outputs = match outputs {
            Ok(ran) => {
                progress.output_dropped = ran.dropped;
                ran.outputs
            }
            Err(error) => {
                // The sandbox is in an unknown state: never reuse it.
                if let Some(broken) = lease.take() {
                    self.release(broken).await;
                }
                return Outcome::Infra(error);
            }
        };
        let timed_out = outputs.iter().any(|o| o.timed_out);
        if timed_out && script.timeout_rule == TimeoutRule::Error {
            let which = outputs.iter().position(|o| o.timed_out).unwrap_or_default();
            return Outcome::Ungraded {
                error: format!(
                    "evaluate command {which} overran its timeout; not graded (timeout rule: error)"
                ),
                timed_out,
            };
        }

        let grade_started = Instant::now();
        let adapter = self.adapter.clone();
        let (graded_task, solution) = (task.clone(), item.solution.clone());
        let graded =
            call_plugin(move || adapter.grade(&graded_task, solution.as_deref(), &outputs)).await;
        progress.timings.grade_s = grade_started.elapsed().as_secs_f64();
        self.phases.record(Phase::Grade, grade_started.elapsed());
        match graded {
            Ok(grade) => Outcome::Graded { grade, timed_out },
            Err(RunError::Plugin(e)) if !e.is_plugin_fault() => Outcome::Ungraded {
                error: format!("the adapter cannot grade this task: {e}"),
                timed_out,
            },
            Err(e) => Outcome::Infra(format!("grade: {e}")),
        }
    }

    /// Leaves in `lease` a sandbox of `image` ready for the task: the held
    /// one after a verified reset, or a fresh claim.
    pub(crate) async fn sandbox_for(
        &self,
        image: usize,
        task: &Task,
        lease: &mut Option<Lease>,
    ) -> Result<(), String> {
        if let Some(held) = lease.take() {
            let reusable = self.settings.recycle
                && held.claimed.image == image
                && held.served <= self.settings.max_reuses
                && held.baseline.is_some();
            if reusable {
                let started = Instant::now();
                let verdict = self.reset_and_verify(&held, task).await;
                self.phases.record(Phase::Reset, started.elapsed());
                match verdict {
                    Ok(()) => {
                        *lease = Some(held);
                        return Ok(());
                    }
                    Err(reason) => {
                        tracing::warn!(sandbox = %held.claimed.handle.id, task = %task.id, "quarantined: {reason}");
                        let started = Instant::now();
                        if let Err(e) = self.fleet.release(&held.claimed).await {
                            tracing::warn!(sandbox = %held.claimed.handle.id, "release failed: {e}");
                        }
                        self.phases.record(Phase::Quarantine, started.elapsed());
                    }
                }
            } else {
                self.release(held).await;
            }
        }
        let claimed = self
            .fleet
            .claim(image, &task.id)
            .await
            .map_err(|e| format!("claim: {e}"))?;
        let baseline = match (&self.reset, self.settings.recycle) {
            (Some(check), true) => {
                let started = Instant::now();
                let baseline = self.baseline(check, &claimed, task).await;
                self.phases.record(Phase::Reset, started.elapsed());
                baseline
                    .inspect_err(|e| tracing::warn!(sandbox = %claimed.handle.id, "no baseline, so no recycling: {e}"))
                    .ok()
            }
            _ => None,
        };
        *lease = Some(Lease {
            claimed,
            served: 0,
            baseline,
        });
        Ok(())
    }

    async fn baseline(
        &self,
        check: &ResetCheck,
        claimed: &Claimed,
        task: &Task,
    ) -> Result<Vec<CommandOutput>, String> {
        let (check, for_task) = (check.clone(), task.clone());
        let commands = call_plugin(move || check.baseline(&for_task))
            .await
            .map_err(|e| e.to_string())?;
        self.run_commands(claimed, &commands, &task.workdir, &[], None)
            .await
            .map(|ran| ran.outputs)
    }

    /// Scrubs the held sandbox (the backend stops whatever the last task
    /// left running, which a reset check inside the sandbox could miss),
    /// resets it and asks the reset check whether it is clean.
    async fn reset_and_verify(&self, held: &Lease, task: &Task) -> Result<(), String> {
        let check = self.reset.clone().ok_or("no reset check configured")?;
        let baseline = held.baseline.clone().ok_or("no baseline was recorded")?;
        let backend = &self.fleet.clusters[held.claimed.cluster].backend;
        backend
            .scrub(&held.claimed.handle)
            .await
            .map_err(|e| format!("scrub: {e}"))?;
        let (reset_check, for_task, base) = (check.clone(), task.clone(), baseline.clone());
        let commands = call_plugin(move || reset_check.reset(&for_task, &base))
            .await
            .map_err(|e| format!("reset: {e}"))?;
        let outputs = self
            .run_commands(&held.claimed, &commands, &task.workdir, &[], None)
            .await?
            .outputs;
        let for_task = task.clone();
        match call_plugin(move || check.verify(&for_task, &baseline, &outputs)).await {
            Ok(Verdict::Clean) => Ok(()),
            Ok(Verdict::Dirty(reason)) => Err(format!("dirty after reset: {reason}")),
            Err(e) => Err(format!("verify: {e}")),
        }
    }

    /// Runs the setup commands, writes the script's files, then runs the
    /// evaluate commands; returns the evaluate commands' outputs, and the
    /// output all commands had dropped past the output limit.
    pub(crate) async fn execute(
        &self,
        claimed: &Claimed,
        item: &WorkItem,
        script: &Script,
    ) -> Result<Ran, String> {
        let backend = &self.fleet.clusters[claimed.cluster].backend;
        let env: Vec<(String, String)> = script
            .env
            .iter()
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect();
        // Distinct ids get distinct files (`col/a` and `col_a` included).
        let log_name = if self.settings.epochs > 1 {
            format!("{}.epoch{}.log", file_stem(&item.task.id), item.epoch)
        } else {
            format!("{}.log", file_stem(&item.task.id))
        };
        let log = Some(self.logs.join(log_name));
        let setup = self
            .run_commands(claimed, &script.setup, &script.workdir, &env, log.clone())
            .await?;
        if let Some((index, failed)) = setup
            .outputs
            .iter()
            .enumerate()
            .find(|(_, o)| o.exit_code != 0)
        {
            tracing::info!(task = %item.task.id, "setup command {index} exited {}", failed.exit_code);
        }
        // Files go in only now: they may hold hidden tests an agent working
        // after setup must not see.
        for file in &script.files {
            backend
                .put_file(&claimed.handle, &file.path, &file.contents, file.mode)
                .await
                .map_err(|e| format!("writing {}: {e}", file.path))?;
        }
        let evaluate = self
            .run_commands(claimed, &script.evaluate, &script.workdir, &env, log)
            .await?;
        Ok(Ran {
            outputs: evaluate.outputs,
            dropped: setup.dropped + evaluate.dropped,
        })
    }

    /// Runs commands in order; every command runs even when an earlier one
    /// fails (the plugin judges the outputs). Output is appended to `log`.
    async fn run_commands(
        &self,
        claimed: &Claimed,
        commands: &[Command],
        workdir: &str,
        env: &[(String, String)],
        log: Option<PathBuf>,
    ) -> Result<Ran, String> {
        let backend = &self.fleet.clusters[claimed.cluster].backend;
        let mut outputs = Vec::with_capacity(commands.len());
        let mut dropped = 0;
        for command in commands {
            let request = ExecRequest {
                argv: command.argv.clone(),
                workdir: Some(workdir.to_string()),
                env: env.to_vec(),
                timeout: match command.timeout_ms {
                    0 => DEFAULT_COMMAND_TIMEOUT,
                    ms => Duration::from_millis(ms),
                },
                merge_stderr: command.merge_stderr,
                stdin: None,
                max_output: Some(self.settings.max_output),
            };
            let result = match &log {
                Some(path) => {
                    let (sink, chunks) = tokio::sync::mpsc::channel(256);
                    let writer =
                        tokio::spawn(write_log(path.clone(), command.argv.clone(), chunks));
                    let result = backend.exec(&claimed.handle, &request, Some(&sink)).await;
                    drop(sink);
                    if let Ok(Err(e)) = writer.await {
                        tracing::warn!("cannot write {}: {e}", path.display());
                    }
                    result
                }
                None => backend.exec(&claimed.handle, &request, None).await,
            };
            let result = result.map_err(|e| format!("exec `{}`: {e}", shown(&command.argv)))?;
            dropped += result.stdout_dropped + result.stderr_dropped;
            outputs.push(command_output(result));
        }
        Ok(Ran { outputs, dropped })
    }
}

/// The outputs of a sequence of commands.
pub(crate) struct Ran {
    pub(crate) outputs: Vec<CommandOutput>,
    /// Bytes they wrote past the output limit.
    pub(crate) dropped: u64,
}

/// A command line for a message: a command's own argv (a whole script,
/// say) may be far longer than anyone wants in an error.
fn shown(argv: &[String]) -> String {
    text::truncated(&argv.join(" "), 200)
}

enum Outcome {
    Graded { grade: GradeResult, timed_out: bool },
    Ungraded { error: String, timed_out: bool },
    Infra(String),
}

fn command_output(result: ExecResult) -> CommandOutput {
    CommandOutput {
        exit_code: result.exit_code,
        stdout: String::from_utf8_lossy(&result.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&result.stderr).into_owned(),
        timed_out: result.timed_out,
        duration_ms: result.duration.as_millis() as u64,
    }
}

fn grade_record(grade: GradeResult) -> GradeRecord {
    GradeRecord {
        status: grade.status.name().to_string(),
        reward: grade.reward,
        detail: text::truncated(&grade.detail, MAX_ERROR),
        tests: grade
            .tests
            .into_iter()
            .map(|test| TestRecord {
                status: test.status.name().to_string(),
                name: test.name,
            })
            .collect(),
        report: serde_json::from_str(&grade.report)
            .unwrap_or(serde_json::Value::String(grade.report)),
    }
}

/// Appends a command's streamed output to the task's log.
async fn write_log(
    path: PathBuf,
    argv: Vec<String>,
    mut chunks: tokio::sync::mpsc::Receiver<OutputChunk>,
) -> std::io::Result<()> {
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .await?;
    file.write_all(format!("$ {}\n", shell_words(&argv)).as_bytes())
        .await?;
    while let Some(chunk) = chunks.recv().await {
        if chunk.stream == OutputStream::Stderr {
            file.write_all(b"[stderr] ").await?;
        }
        file.write_all(&chunk.bytes).await?;
    }
    file.flush().await
}

/// `argv` as a shell would need it typed, for logs.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
