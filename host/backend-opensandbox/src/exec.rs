//! Reading a command's stream to its terminal event.

use std::time::{Duration, Instant};

use sandfleet_core::{ExecResult, OutputChunk, OutputSink, OutputStream, dropped_marker};

use crate::events::{Event, EventReader};

/// Output kept per stream when the request sets no limit.
pub(crate) const DEFAULT_MAX_OUTPUT: u64 = 16 << 20;

/// How a stream ended before its terminal event.
#[derive(Debug)]
pub(crate) enum Cut {
    /// The connection ended or failed first: the command may have run. The
    /// command's id, when its `init` event came first.
    Lost(String, Option<String>),
    /// execd sent something that is not an event.
    Garbled(String),
}

/// One stream's output, capped.
#[derive(Default)]
pub(crate) struct Kept {
    bytes: Vec<u8>,
    dropped: u64,
}

impl Kept {
    pub(crate) fn push(&mut self, text: &[u8], limit: u64) {
        let room = (limit as usize).saturating_sub(self.bytes.len());
        let kept = text.len().min(room);
        self.bytes.extend_from_slice(&text[..kept]);
        self.dropped += (text.len() - kept) as u64;
    }

    pub(crate) fn finish(mut self, stream: OutputStream, limit: u64) -> (Vec<u8>, u64) {
        if self.dropped > 0 {
            self.bytes
                .extend_from_slice(dropped_marker(stream, self.dropped, limit).as_bytes());
        }
        (self.bytes, self.dropped)
    }
}

/// A stream read to its terminal event.
pub(crate) struct Ended {
    pub(crate) result: ExecResult,
    /// The id execd gave the command (its `init` event).
    pub(crate) command_id: Option<String>,
}

/// Reads `response`'s events until the terminal one — `execution_complete`
/// (exit 0) or `error` (its `evalue` is the exit code, `-1` a kill) — and
/// returns without waiting for the stream to end. Output goes to `sink`
/// as it comes.
pub(crate) async fn read_to_terminal(
    mut response: reqwest::Response,
    started: Instant,
    timeout: Duration,
    max_output: Option<u64>,
    merge_stderr: bool,
    sink: Option<&OutputSink>,
) -> Result<Ended, Cut> {
    let limit = max_output.unwrap_or(DEFAULT_MAX_OUTPUT);
    let mut reader = EventReader::default();
    let mut command_id = None;
    let (mut stdout, mut stderr) = (Kept::default(), Kept::default());
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                return Err(Cut::Lost(
                    "the command's stream ended before its exit status".into(),
                    command_id,
                ));
            }
            Err(error) => {
                return Err(Cut::Lost(
                    format!("the command's stream failed: {error}"),
                    command_id,
                ));
            }
        };
        for event in reader.feed(&chunk).map_err(Cut::Garbled)? {
            let stream = match event.kind.as_str() {
                "stdout" => OutputStream::Stdout,
                "stderr" if merge_stderr => OutputStream::Stdout,
                "stderr" => OutputStream::Stderr,
                "execution_complete" | "error" => {
                    let (exit_code, timed_out, failure) = exit_of(&event, started, timeout);
                    if let Some(failure) = failure {
                        stderr.push(failure.as_bytes(), limit);
                    }
                    let (stdout, stdout_dropped) = stdout.finish(OutputStream::Stdout, limit);
                    let (stderr, stderr_dropped) = stderr.finish(OutputStream::Stderr, limit);
                    return Ok(Ended {
                        result: ExecResult {
                            exit_code,
                            stdout,
                            stderr,
                            timed_out,
                            duration: started.elapsed(),
                            stdout_dropped,
                            stderr_dropped,
                        },
                        command_id,
                    });
                }
                "init" => {
                    command_id = event.text.clone();
                    continue;
                }
                // Pings and code-interpreter events carry no output.
                _ => continue,
            };
            let line = line_of(&event);
            let kept = match stream {
                OutputStream::Stdout => &mut stdout,
                OutputStream::Stderr => &mut stderr,
            };
            kept.push(&line, limit);
            if let Some(sink) = sink {
                // The receiver may be gone (a log writer that failed); the
                // result still holds the output.
                let _ = sink
                    .send(OutputChunk {
                        stream,
                        bytes: line,
                    })
                    .await;
            }
        }
    }
}

/// An output event's line: execd strips the terminator and sends a blank
/// line as "\n".
fn line_of(event: &Event) -> Vec<u8> {
    match event.text.as_deref() {
        Some("\n") | None => b"\n".to_vec(),
        Some(text) => format!("{text}\n").into_bytes(),
    }
}

/// The exit code, whether the command was stopped by its timeout, and a
/// message when the command never ran.
fn exit_of(event: &Event, started: Instant, timeout: Duration) -> (i32, bool, Option<String>) {
    let Some(error) = event.error.as_ref().filter(|_| event.kind == "error") else {
        return (0, false, None);
    };
    match error.evalue.trim().parse::<i32>() {
        // A kill: by the timeout if it had run out (execd kills at the
        // deadline it was given), else by someone else.
        Ok(-1) => (-1, !timeout.is_zero() && started.elapsed() >= timeout, None),
        Ok(code) => (code, false, None),
        // Spawning failed: the value is the reason.
        Err(_) => (
            127,
            false,
            Some(format!(
                "execd could not run the command: {} {}\n",
                error.ename, error.evalue
            )),
        ),
    }
}
