//! Running a task's script in its sandbox: setup commands, then the
//! script's files, then the evaluate commands, each streamed to the task's
//! log. Commands are never retried: one that may have started could run
//! twice.

use std::path::PathBuf;
use std::time::Duration;

use sandfleet_core::{ExecRequest, ExecResult, file_stem};
use sandfleet_plugin::adapter::{Command, CommandOutput, Script};
use tracing::Instrument;

use crate::fleet::Claimed;
use crate::task::{TaskRunner, WorkItem};
use crate::{logs, text};

/// Commands without a timeout of their own get this one.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// The outputs of a sequence of commands.
pub(crate) struct Ran {
    pub(crate) outputs: Vec<CommandOutput>,
    /// Bytes they wrote past the output limit.
    pub(crate) dropped: u64,
}

impl TaskRunner {
    /// The log file of `item`: distinct ids get distinct files (`col/a` and
    /// `col_a` included).
    fn log_path(&self, item: &WorkItem) -> PathBuf {
        let name = if self.settings.epochs > 1 {
            format!("{}.epoch{}.log", file_stem(&item.task.id), item.epoch)
        } else {
            format!("{}.log", file_stem(&item.task.id))
        };
        self.logs.join(name)
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
        let log = Some(self.log_path(item));
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
    pub(crate) async fn run_commands(
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
            let span = tracing::info_span!(
                "exec",
                sandbox = %claimed.handle.id,
                program = command.argv.first().map_or("", String::as_str)
            );
            let result = match &log {
                Some(path) => {
                    let (sink, writer) = logs::open(path.clone(), &command.argv);
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
                format!("exec `{}`: {e}", shown(&command.argv))
            })?;
            dropped += result.stdout_dropped + result.stderr_dropped;
            outputs.push(command_output(result));
        }
        Ok(Ran { outputs, dropped })
    }
}

/// A command line for a message: a command's own argv (a whole script,
/// say) may be far longer than anyone wants in an error.
fn shown(argv: &[String]) -> String {
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
