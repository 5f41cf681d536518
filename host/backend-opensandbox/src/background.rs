//! Commands in background mode: execd answers at once with the command's
//! id, and the driver polls its status and logs until it ends. A cut
//! connection then costs one poll, not the result of a 30-minute
//! evaluation. Logs come combined (execd does not keep the streams apart),
//! so all output is stdout.

use std::time::{Duration, Instant};

use reqwest::Method;
use sandfleet_core::{BackendError, CappedOutput, ExecResult, OutputSink, OutputStream};
use sandfleet_transport::{Call, Transport};

use crate::wire::CommandStatus;

/// The first pause between polls; it grows to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(200);
const MAX_POLL: Duration = Duration::from_secs(2);

/// Header carrying the byte offset to read logs from next time.
const TAIL_CURSOR: &str = "EXECD-COMMANDS-TAIL-CURSOR";

/// What polling needs: where to send, and how to make a call to execd.
pub(crate) struct Poller<'a, F: Fn(Method, String, String) -> Result<Call, BackendError>> {
    pub(crate) transport: &'a Transport,
    pub(crate) cluster: &'a str,
    pub(crate) call: F,
}

impl<F: Fn(Method, String, String) -> Result<Call, BackendError>> Poller<'_, F> {
    /// Polls command `id` until it ends or its `timeout` (plus a grace
    /// second) passes, then interrupts it.
    pub(crate) async fn follow(
        &self,
        id: &str,
        started: Instant,
        timeout: Duration,
        max_output: Option<u64>,
        sink: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        let mut kept = CappedOutput::new(OutputStream::Stdout, max_output);
        let mut cursor = 0u64;
        let mut pause = FIRST_POLL;
        let give_up = started + timeout + Duration::from_secs(1);
        loop {
            let status: CommandStatus = self.status(id).await?;
            // Logs after the status: once it says the command ended, these
            // logs hold all of its output.
            cursor = self.logs(id, cursor, &mut kept, sink).await?;
            if !status.running {
                let exit_code = status.exit_code.unwrap_or(-1);
                if let Some(error) = status.error.filter(|e| !e.is_empty()) {
                    tracing::debug!(cluster = self.cluster, command = id, %error, "background command ended with an error");
                }
                let (stdout, stdout_dropped) = kept.finish_and_send(sink).await;
                return Ok(ExecResult {
                    exit_code,
                    stdout,
                    stderr: Vec::new(),
                    timed_out: exit_code == -1 && started.elapsed() >= timeout,
                    duration: started.elapsed(),
                    stdout_dropped,
                    stderr_dropped: 0,
                });
            }
            if Instant::now() >= give_up {
                self.interrupt(id).await;
                let (stdout, stdout_dropped) = kept.finish_and_send(sink).await;
                return Ok(ExecResult {
                    exit_code: -1,
                    stdout,
                    stderr: Vec::new(),
                    timed_out: true,
                    duration: started.elapsed(),
                    stdout_dropped,
                    stderr_dropped: 0,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    async fn status(&self, id: &str) -> Result<CommandStatus, BackendError> {
        let call = (self.call)(
            Method::GET,
            format!("/command/status/{id}"),
            format!("status of background command {id}"),
        )?;
        self.transport.json(self.cluster, &call).await
    }

    /// Reads the logs from byte `cursor` on (execd serves its output file
    /// as written); returns the next cursor.
    async fn logs(
        &self,
        id: &str,
        cursor: u64,
        kept: &mut CappedOutput,
        sink: Option<&OutputSink>,
    ) -> Result<u64, BackendError> {
        let call = (self.call)(
            Method::GET,
            format!("/command/{id}/logs?cursor={cursor}"),
            format!("logs of background command {id}"),
        )?;
        let response = self.transport.send(self.cluster, &call).await?;
        let next = response
            .headers()
            .get(TAIL_CURSOR)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let text = self.transport.body(self.cluster, &call, response).await?;
        kept.keep_and_send(&text, sink).await;
        // Without a cursor header, the cursor is the bytes read so far.
        Ok(next.unwrap_or(cursor + text.len() as u64))
    }

    async fn interrupt(&self, id: &str) {
        let call = match (self.call)(
            Method::DELETE,
            format!("/command?id={id}"),
            format!("interrupt command {id}"),
        ) {
            Ok(call) => call,
            Err(error) => {
                tracing::warn!(cluster = self.cluster, command = id, %error, "cannot interrupt");
                return;
            }
        };
        if let Err(error) = self.transport.send(self.cluster, &call).await {
            tracing::warn!(cluster = self.cluster, command = id, %error, "cannot interrupt an overrunning command");
        }
    }
}
