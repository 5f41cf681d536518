//! Running a script's commands in a sandbox: setup commands, then the
//! script's files, then the evaluate commands, each streamed to a log.
//! Commands are never retried: one that may have started could run twice.

use std::path::Path;
use std::time::{Duration, Instant};

use sandfleet_core::{ExecRequest, ExecResult};
use sandfleet_plugin::adapter::{Command, CommandOutput, Script};
use sandfleet_report::events::SegmentKind;
use tracing::Instrument;

use crate::error::StepError;
use crate::fleet::{Claimed, Fleet};
use crate::{logs, text};

/// Commands without a timeout of their own get this one.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// The outputs of a sequence of commands.
pub(crate) struct Ran {
    pub(crate) outputs: Vec<CommandOutput>,
    /// Bytes they wrote past the output limit.
    pub(crate) dropped: u64,
}

/// Runs the setup commands, writes the script's files, then runs the
/// evaluate commands; returns the evaluate commands' outputs, and the
/// output all commands had dropped past the output limit.
pub(crate) async fn execute(
    fleet: &Fleet,
    claimed: &Claimed,
    script: &Script,
    log: Option<&Path>,
) -> Result<Ran, StepError> {
    let env = environment(script);
    let setup = set_up(fleet, claimed, script, &env, log).await?;
    if let Some((index, failed)) = setup
        .outputs
        .iter()
        .enumerate()
        .find(|(_, o)| o.exit_code != 0)
    {
        tracing::info!("setup command {index} exited {}", failed.exit_code);
    }
    let started = Instant::now();
    let evaluate = evaluate(fleet, claimed, script, &env, log).await;
    fleet.timeline.segment(
        SegmentKind::Run,
        started,
        fleet.on(claimed),
        evaluate.is_ok(),
    );
    let evaluate = evaluate?;
    Ok(Ran {
        outputs: evaluate.outputs,
        dropped: setup.dropped + evaluate.dropped,
    })
}

/// Runs the script's setup commands, drawn as one step.
pub(crate) async fn set_up(
    fleet: &Fleet,
    claimed: &Claimed,
    script: &Script,
    env: &[(String, String)],
    log: Option<&Path>,
) -> Result<Ran, StepError> {
    let started = Instant::now();
    let ran = run_commands(fleet, claimed, &script.setup, &script.workdir, env, log).await;
    if !script.setup.is_empty() {
        fleet
            .timeline
            .segment(SegmentKind::Setup, started, fleet.on(claimed), ran.is_ok());
    }
    ran
}

/// Writes the script's files, then runs its evaluate commands.
async fn evaluate(
    fleet: &Fleet,
    claimed: &Claimed,
    script: &Script,
    env: &[(String, String)],
    log: Option<&Path>,
) -> Result<Ran, StepError> {
    // Files go in only now: they may hold hidden tests an agent working
    // after setup must not see.
    let backend = &fleet.clusters[claimed.cluster].backend;
    for file in &script.files {
        backend
            .put_file(&claimed.handle, &file.path, &file.contents, file.mode)
            .await
            .map_err(|e| {
                claimed.note(&e);
                StepError::backend(format!("writing {}", file.path), e)
            })?;
    }
    run_commands(fleet, claimed, &script.evaluate, &script.workdir, env, log).await
}

/// The script's environment as exec requests take it.
pub(crate) fn environment(script: &Script) -> Vec<(String, String)> {
    script
        .env
        .iter()
        .map(|s| (s.key.clone(), s.value.clone()))
        .collect()
}

/// Runs commands in order; every command runs even when an earlier one
/// fails (the plugin judges the outputs). Output is appended to `log`.
pub(crate) async fn run_commands(
    fleet: &Fleet,
    claimed: &Claimed,
    commands: &[Command],
    workdir: &str,
    env: &[(String, String)],
    log: Option<&Path>,
) -> Result<Ran, StepError> {
    let backend = &fleet.clusters[claimed.cluster].backend;
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
            max_output: Some(fleet.settings.max_output),
        };
        let span = tracing::info_span!(
            "exec",
            sandbox = %claimed.handle.id,
            program = command.argv.first().map_or("", String::as_str)
        );
        let result = match log {
            Some(path) => {
                let (sink, writer) = logs::open(path.to_path_buf(), &command.argv);
                let result = backend
                    .exec(&claimed.handle, &request, Some(&sink))
                    .instrument(span)
                    .await;
                drop(sink);
                if let Ok(Err(e)) = writer.await {
                    tracing::warn!("cannot write {}: {e}", path.display());
                }
                result
            }
            None => {
                backend
                    .exec(&claimed.handle, &request, None)
                    .instrument(span)
                    .await
            }
        };
        let result = result.map_err(|e| {
            claimed.note(&e);
            StepError::backend(format!("exec `{}`", shown(&command.argv)), e)
        })?;
        dropped += result.stdout_dropped + result.stderr_dropped;
        outputs.push(command_output(result));
    }
    Ok(Ran { outputs, dropped })
}

/// A command line for a message: a command's own argv (a whole script,
/// say) may be far longer than anyone wants in an error.
pub(crate) fn shown(argv: &[String]) -> String {
    text::truncated(&argv.join(" "), 200)
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
