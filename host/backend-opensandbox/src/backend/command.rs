//! Running one command through execd: streamed to its terminal event, or,
//! past `background_after`, started in the background and polled, its
//! stderr kept in a file of its own and read back at the end.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Method;
use sandfleet_core::{
    BackendError, CappedOutput, ErrorKind, ExecRequest, ExecResult, OutputSink, OutputStream,
    SandboxHandle,
};
use sandfleet_transport::CallKind;

use super::OpenSandboxBackend;
use crate::background::Poller;
use crate::exec::{Cut, read_to_terminal};
use crate::wire::{Command, HandleData};

/// The environment variable naming each command sent.
const COMMAND_MARKER: &str = "SANDFLEET_COMMAND_ID";

/// Where a background command's stderr waits to be read back: every
/// image has a /tmp.
const BACKGROUND_STDERR_DIR: &str = "/tmp";

/// How long reading a background command's stderr back may take.
const TAKE_FILE_TIMEOUT: Duration = Duration::from_secs(60);

impl OpenSandboxBackend {
    /// Runs `request` in `sandbox`, sending output to `output` as it comes.
    pub(super) async fn run_command(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        let execd = self.handle_data_of(sandbox)?;
        if request.argv.is_empty() {
            return Err(self.error(ErrorKind::Invalid, "a command needs a program"));
        }
        // Names this logical command, so a server (or the emulator's
        // counters) can tell a command run twice from two commands.
        let marker = format!("{:016x}", crate::random());
        // Long commands (evaluations) are polled instead of streamed.
        let background =
            !request.timeout.is_zero() && request.timeout >= self.config.background_after;
        // A background command's logs come with both streams in one; its
        // stderr goes to a file of its own instead, read back at the end.
        let stderr_file = (background && !request.merge_stderr)
            .then(|| format!("{BACKGROUND_STDERR_DIR}/.sandfleet-stderr-{marker}"));
        // Merged, both streams are one file descriptor, so their order is
        // the order written (execd polls its two files apart).
        let redirect = match &stderr_file {
            Some(file) => Some(format!("exec 2>{}", shell_words::quote(file))),
            None if request.merge_stderr => Some("exec 2>&1".to_string()),
            None => None,
        };
        let command = match redirect {
            Some(redirect) => format!("{redirect}; {}", shell_words::join(&request.argv)),
            None => shell_words::join(&request.argv),
        };
        let mut envs: BTreeMap<&str, &str> = request
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        envs.insert(COMMAND_MARKER, &marker);
        let body = Command {
            command,
            cwd: request.workdir.as_deref(),
            timeout: (!request.timeout.is_zero()).then_some(request.timeout.as_millis() as u64),
            envs,
            background,
        };
        let program = request.argv[0].clone();
        let call = self
            .execd(
                &execd,
                Method::POST,
                "/command",
                CallKind::Command {
                    timeout: (!request.timeout.is_zero()).then_some(request.timeout),
                },
                format!("command `{program}` in sandbox {}", sandbox.id),
            )?
            .json(serde_json::to_value(&body).expect("the body serializes"));
        let started = Instant::now();
        let response = self.transport.send(&self.name, &call).await?;
        let ended = read_to_terminal(
            response,
            started,
            request.timeout,
            request.max_output,
            request.merge_stderr,
            output,
        )
        .await;
        let lost = |why: String| {
            // The command may have run (execd keeps running it after a
            // disconnect): never sent again.
            self.error(
                ErrorKind::Transport { sent: true },
                format!("command `{program}` in sandbox {}: {why}", sandbox.id),
            )
        };
        let command_id = match ended {
            Ok(ended) if !background => {
                return Ok(self
                    .exact_output(
                        &execd,
                        sandbox,
                        ended,
                        request.max_output,
                        request.merge_stderr,
                    )
                    .await);
            }
            Ok(ended) => ended.command_id,
            // A background command whose id we have is polled even if the
            // stream that announced it was cut.
            Err(Cut::Lost(_, Some(id))) if background => Some(id),
            Err(Cut::Lost(why, _)) => return Err(lost(why)),
            Err(Cut::Garbled(why)) => {
                return Err(self.error(
                    ErrorKind::Failed,
                    format!("command `{program}` in sandbox {}: {why}", sandbox.id),
                ));
            }
        };
        let id = command_id.ok_or_else(|| lost("execd gave a background command no id".into()))?;
        let poller = Poller {
            transport: &self.transport,
            cluster: &self.name,
            call: |method, path: String, what| {
                self.execd(&execd, method, &path, CallKind::Lifecycle, what)
            },
        };
        let mut result = poller
            .follow(&id, started, request.timeout, request.max_output, output)
            .await?;
        if let Some(file) = stderr_file {
            let read = self
                .take_file_output(&execd, sandbox, &file, request.max_output)
                .await;
            let mut kept = CappedOutput::new(OutputStream::Stderr, request.max_output);
            match read {
                Ok((bytes, unread)) => {
                    kept.keep_and_send(&bytes, output).await;
                    kept.count_unread(unread);
                }
                Err(error) => {
                    tracing::warn!(sandbox = %sandbox.id, %error, "cannot read back a background command's stderr");
                    let note = format!(
                        "(sandfleet: this command's stderr could not be read back: {error})\n"
                    );
                    kept.keep_and_send(note.as_bytes(), output).await;
                }
            }
            (result.stderr, result.stderr_dropped) = kept.finish_and_send(output).await;
        }
        Ok(result)
    }

    /// Prints and removes `file` in the sandbox with one short foreground
    /// command (removing a file that is gone is no change, so this is safe
    /// to have run twice), and returns its first `max_output` bytes, exact,
    /// and how many more it held. (A command, not a download: the command
    /// that wrote it and this one see the same /tmp wherever a sandbox's
    /// files API would not.)
    async fn take_file_output(
        &self,
        execd: &HandleData,
        sandbox: &SandboxHandle,
        file: &str,
        max_output: Option<u64>,
    ) -> Result<(Vec<u8>, u64), BackendError> {
        let body = Command {
            command: format!(
                "cat -- {file} && rm -f -- {file}",
                file = shell_words::quote(file)
            ),
            cwd: None,
            timeout: Some(TAKE_FILE_TIMEOUT.as_millis() as u64),
            envs: BTreeMap::new(),
            background: false,
        };
        let call = self
            .execd(
                execd,
                Method::POST,
                "/command",
                CallKind::Command {
                    timeout: Some(TAKE_FILE_TIMEOUT),
                },
                format!("read back {file} in sandbox {}", sandbox.id),
            )?
            .json(serde_json::to_value(&body).expect("the body serializes"));
        let started = Instant::now();
        let response = self.transport.send(&self.name, &call).await?;
        match read_to_terminal(
            response,
            started,
            TAKE_FILE_TIMEOUT,
            max_output,
            false,
            None,
        )
        .await
        {
            Ok(ended) if ended.result.exit_code == 0 => {
                let mut read = self
                    .exact_output(execd, sandbox, ended, max_output, false)
                    .await;
                // The head, without the limit's marker: the caller adds its own.
                let unread = read.stdout_dropped;
                if unread > 0 {
                    read.stdout
                        .truncate(usize::try_from(max_output.unwrap_or(0)).unwrap_or(usize::MAX));
                }
                Ok((read.stdout, unread))
            }
            Ok(ended) => Err(self.error(
                ErrorKind::Failed,
                format!(
                    "reading {file} exited {}: {}",
                    ended.result.exit_code,
                    String::from_utf8_lossy(&ended.result.stderr).trim()
                ),
            )),
            Err(Cut::Lost(why, _) | Cut::Garbled(why)) => Err(self.error(
                ErrorKind::Transport { sent: true },
                format!("reading {file}: {why}"),
            )),
        }
    }
}
