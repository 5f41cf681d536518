//! Reading a command's stream to its terminal event.

use std::time::{Duration, Instant};

use sandfleet_core::{CappedOutput, ExecResult, OutputSink, OutputStream};

use crate::events::{Event, EventReader};

/// How a stream ended before its terminal event.
#[derive(Debug)]
pub(crate) enum Cut {
    /// The connection ended or failed first: the command may have run. The
    /// command's id, when its `init` event came first.
    Lost(String, Option<String>),
    /// execd sent something that is not an event.
    Garbled(String),
}

/// A stream read to its terminal event.
pub(crate) struct Ended {
    pub(crate) result: ExecResult,
    /// The id execd gave the command (its `init` event).
    pub(crate) command_id: Option<String>,
    /// Which of the command's streams sent output events: only those have
    /// bytes worth reading back exactly.
    pub(crate) heard: Heard,
}

/// The streams a command sent output events on, as execd named them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Heard {
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
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
    let mut reader = EventReader::default();
    let mut command_id = None;
    let mut stdout = CappedOutput::new(OutputStream::Stdout, max_output);
    let mut stderr = CappedOutput::new(OutputStream::Stderr, max_output);
    let mut heard = Heard::default();
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
                "stdout" => {
                    heard.stdout = true;
                    OutputStream::Stdout
                }
                "stderr" => {
                    heard.stderr = true;
                    if merge_stderr {
                        OutputStream::Stdout
                    } else {
                        OutputStream::Stderr
                    }
                }
                "execution_complete" | "error" => {
                    let (exit_code, timed_out, failure) = exit_of(&event, started, timeout);
                    if let Some(failure) = failure {
                        stderr.keep_and_send(failure.as_bytes(), sink).await;
                    }
                    let (stdout, stdout_dropped) = stdout.finish_and_send(sink).await;
                    let (stderr, stderr_dropped) = stderr.finish_and_send(sink).await;
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
                        heard,
                    });
                }
                "init" => {
                    command_id = event.text.clone();
                    continue;
                }
                // Pings and code-interpreter events carry no output.
                _ => continue,
            };
            let kept = match stream {
                OutputStream::Stdout => &mut stdout,
                OutputStream::Stderr => &mut stderr,
            };
            kept.keep_and_send(&line_of(&event), sink).await;
        }
    }
}

/// An output event's line: execd strips the terminator (`\n`, `\r` or
/// `\r\n`) and sends a blank line as "\n", so "\n" ends each line here;
/// the exact bytes are read back afterwards where execd keeps them.
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
