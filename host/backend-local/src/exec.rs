//! Running one command to completion or timeout: stdin bytes, separate or
//! merged output, streaming to a sink, and killing the command's whole
//! process group at the timeout.
//!
//! A command is done when it has exited and its output pipes are closed,
//! all within its timeout. A background process that keeps the pipes open
//! (`server &` without redirection) therefore keeps the command running
//! until the timeout, like `subprocess.run(..., capture_output=True)`;
//! redirect its output to let the command finish without it.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use sandfleet_core::{ExecRequest, ExecResult, OutputChunk, OutputSink, OutputStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::process::Command;
use tokio::time::Instant;

use crate::process::{group_gone_within, kill_group, kill_group_but_leader};

/// How long to keep collecting output after the process group was killed
/// at the timeout. Processes that left the group (`setsid`) can keep the
/// pipes open; they are left to the sandbox's release.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Who leads a command's process group, which decides how a timeout kills
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leader {
    /// The command itself: the whole group is killed.
    Command,
    /// `nsenter`, which lives outside the sandbox's pid namespace and waits
    /// for the command it started inside. It is spared: killed together
    /// with its child, it would leave the child's zombie to the host's init,
    /// and the sandbox's init cannot finish exiting until some process
    /// reaps that zombie (1.5 s with a lazy init, never with one that does
    /// not reap). Spared, it reaps its child and exits by itself.
    Nsenter,
}

/// Bytes read from a pipe at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Runs `command` (program and arguments set, nothing else) as `request`
/// asks, sending output to `sink` as it comes.
pub(crate) async fn run(
    mut command: Command,
    leader: Leader,
    request: &ExecRequest,
    sink: Option<&OutputSink>,
) -> io::Result<ExecResult> {
    let started = Instant::now();
    let (stdout_reader, stdout_writer) = io::pipe()?;
    // Merged output is one pipe written through two descriptors, so the
    // kernel keeps the order in which the command wrote.
    let (stderr_reader, stderr_writer) = if request.merge_stderr {
        (None, stdout_writer.try_clone()?)
    } else {
        let (reader, writer) = io::pipe()?;
        (Some(reader), writer)
    };
    command
        .stdin(if request.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(stdout_writer)
        .stderr(stderr_writer)
        .process_group(0);
    let mut child = command.spawn()?;
    // The command object still holds the write ends; without dropping it the
    // pipes would never report end-of-file.
    drop(command);
    let group = child.id();

    // Written from a task so that a command that reads slowly, or not at
    // all, cannot stall the output loop.
    let feeder = match (child.stdin.take(), &request.stdin) {
        (Some(mut pipe), Some(bytes)) => {
            let bytes = bytes.clone();
            Some(tokio::spawn(async move {
                // A command may exit without reading its input.
                let _ = pipe.write_all(&bytes).await;
            }))
        }
        _ => None,
    };

    let mut stdout = Output::new(Some(stdout_reader), OutputStream::Stdout)?;
    let mut stderr = Output::new(stderr_reader, OutputStream::Stderr)?;
    let mut deadline = started + request.timeout;
    let mut timed_out = false;
    let mut status = None;
    while status.is_none() || stdout.is_open() || stderr.is_open() {
        tokio::select! {
            () = stdout.read(sink), if stdout.is_open() => {}
            () = stderr.read(sink), if stderr.is_open() => {}
            exit = child.wait(), if status.is_none() => status = Some(exit?),
            () = tokio::time::sleep_until(deadline) => {
                if timed_out {
                    break;
                }
                timed_out = true;
                match (group, leader) {
                    (Some(group), Leader::Command) => kill_group(group),
                    (Some(group), Leader::Nsenter) => kill_group_but_leader(group),
                    (None, _) => {}
                }
                deadline = Instant::now() + KILL_GRACE;
            }
        }
    }
    if let Some(feeder) = feeder {
        feeder.abort();
    }
    if status.is_none() {
        // Still running after SIGKILL (or, for nsenter, after its child's)
        // and the grace period: leave it to tokio's reaper rather than wait
        // without bound.
        let _ = child.start_kill();
    }
    if timed_out
        && let Some(group) = group
        && !group_gone_within(group, KILL_GRACE).await
    {
        tracing::warn!(group, "processes of a timed-out command outlived SIGKILL");
    }
    let exit_code = match status {
        Some(status) if !timed_out => status.code().unwrap_or(-1),
        _ => -1,
    };
    Ok(ExecResult {
        exit_code,
        stdout: stdout.bytes,
        stderr: stderr.bytes,
        timed_out,
        duration: started.elapsed(),
    })
}

/// One output stream being collected.
struct Output {
    pipe: Option<pipe::Receiver>,
    stream: OutputStream,
    bytes: Vec<u8>,
    buffer: Box<[u8]>,
}

impl Output {
    /// Collects from `reader`; `None` is a stream that is merged elsewhere
    /// and stays empty.
    fn new(reader: Option<io::PipeReader>, stream: OutputStream) -> io::Result<Self> {
        Ok(Output {
            pipe: reader
                .map(|reader| pipe::Receiver::from_owned_fd(reader.into()))
                .transpose()?,
            stream,
            bytes: Vec::new(),
            buffer: vec![0; READ_CHUNK].into_boxed_slice(),
        })
    }

    fn is_open(&self) -> bool {
        self.pipe.is_some()
    }

    /// Reads one chunk, keeps it and offers it to `sink` without waiting: a
    /// slow sink misses chunks, never slows the command. Cancel-safe.
    async fn read(&mut self, sink: Option<&OutputSink>) {
        let Some(pipe) = &mut self.pipe else {
            return std::future::pending().await;
        };
        match pipe.read(&mut self.buffer).await {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                let chunk = &self.buffer[..n];
                self.bytes.extend_from_slice(chunk);
                if let Some(sink) = sink {
                    let _ = sink.try_send(OutputChunk {
                        stream: self.stream,
                        bytes: chunk.to_vec(),
                    });
                }
            }
            Err(error) => {
                tracing::warn!(%error, stream = ?self.stream, "reading command output");
                self.pipe = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> (Command, ExecRequest) {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        let request = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            timeout: Duration::from_secs(10),
            ..ExecRequest::default()
        };
        (command, request)
    }

    #[tokio::test]
    async fn output_exit_code_and_stdin() {
        let (command, mut request) = shell("cat; echo err >&2; exit 3");
        request.stdin = Some(b"in".to_vec());
        let result = run(command, Leader::Command, &request, None).await.unwrap();
        assert_eq!(result.exit_code, 3);
        assert_eq!(result.stdout, b"in");
        assert_eq!(result.stderr, b"err\n");
        assert!(!result.timed_out);
    }

    #[tokio::test]
    async fn merged_output_keeps_the_order_it_was_written_in() {
        let (command, mut request) = shell("echo 1; echo 2 >&2; echo 3; echo 4 >&2");
        request.merge_stderr = true;
        let result = run(command, Leader::Command, &request, None).await.unwrap();
        assert_eq!(result.stdout, b"1\n2\n3\n4\n");
        assert!(result.stderr.is_empty());
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group_and_keeps_partial_output() {
        let (command, mut request) = shell("sleep 300 & echo $!; sleep 300");
        request.timeout = Duration::from_millis(300);
        let result = run(command, Leader::Command, &request, None).await.unwrap();
        assert!(result.timed_out);
        assert_eq!(result.exit_code, -1);
        let background: u32 = String::from_utf8(result.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Dead: gone, or a zombie waiting for a reaper that is not us.
        let state = std::fs::read_to_string(format!("/proc/{background}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'));
        assert!(!running, "the background sleep survived: {state}");
    }

    #[tokio::test]
    async fn a_full_sink_loses_chunks_not_output() {
        let (sink, mut chunks) = tokio::sync::mpsc::channel(1);
        let (command, request) = shell("for i in 1 2 3 4 5; do echo $i; sleep 0.05; done");
        let result = run(command, Leader::Command, &request, Some(&sink))
            .await
            .unwrap();
        assert_eq!(result.stdout, b"1\n2\n3\n4\n5\n");
        let first = chunks.recv().await.unwrap();
        assert_eq!(
            (first.stream, first.bytes),
            (OutputStream::Stdout, b"1\n".to_vec())
        );
    }
}
