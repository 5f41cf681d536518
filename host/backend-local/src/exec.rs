//! Running one command to completion or timeout: stdin bytes, separate or
//! merged output capped per stream, streaming to a sink, killing the
//! command's whole process group at the timeout, and stopping it when the
//! sandbox's writes outgrow its disk.
//!
//! A command is done when it has exited and its output pipes are closed,
//! all within its timeout. A background process that keeps the pipes open
//! (`server &` without redirection) therefore keeps the command running
//! until the timeout, like `subprocess.run(..., capture_output=True)`;
//! redirect its output to let the command finish without it.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use sandfleet_core::{
    CappedOutput, ExecRequest, ExecResult, OutputChunk, OutputSink, OutputStream, stopped_marker,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::disk::{DiskLimit, DiskWatch};
use crate::process::{group_gone_within, kill_group, kill_group_but_leader};

/// How long to keep collecting output after the process group was killed
/// at the timeout. Processes that left the group (`setsid`) can keep the
/// pipes open; they are left to the sandbox's release.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(2);

/// Who leads a command's process group, which decides how a timeout kills
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leader {
    /// The command itself: the whole group is killed.
    Command,
    /// The sandbox helper (`sandfleet-jail enter`), which lives outside the
    /// sandbox's pid namespace and waits for the command it started inside.
    /// It is spared: killed together with its child, it would leave the
    /// child's zombie to the host's init, and the sandbox's init cannot
    /// finish exiting until some process reaps that zombie. Spared, it reaps
    /// its child and exits by itself.
    Helper,
}

/// What running a command came to.
#[derive(Debug)]
pub(crate) struct Ran {
    /// Its result (a command stopped at the disk limit has exit code -1,
    /// and the reason at the end of its stderr).
    pub(crate) result: ExecResult,
}

/// Bytes read from a pipe at a time.
const READ_CHUNK: usize = 64 * 1024;

/// A command started with its output on pipes of its own.
pub(crate) struct Launched {
    /// The process.
    pub(crate) child: Child,
    /// Its process group, led by it.
    pub(crate) group: Option<u32>,
    /// Its stdout (and stderr, when merged).
    pub(crate) stdout: io::PipeReader,
    /// Its stderr; `None` when merged into stdout.
    pub(crate) stderr: Option<io::PipeReader>,
}

/// Starts `command` (program and arguments set, nothing else) in a process
/// group of its own, stdin piped (or `/dev/null`), stdout and stderr on new
/// pipes; merged stderr is stdout's pipe written through two descriptors,
/// so the kernel keeps the order in which the command wrote. The sandbox
/// helper makes its group itself, with a session of its own (it could not
/// if it already led a group); anything else is put in one at spawn.
pub(crate) fn launch(
    mut command: Command,
    leader: Leader,
    stdin: bool,
    merge_stderr: bool,
) -> io::Result<Launched> {
    let (stdout_reader, stdout_writer) = io::pipe()?;
    let (stderr_reader, stderr_writer) = if merge_stderr {
        (None, stdout_writer.try_clone()?)
    } else {
        let (reader, writer) = io::pipe()?;
        (Some(reader), writer)
    };
    command
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(stdout_writer)
        .stderr(stderr_writer);
    if leader == Leader::Command {
        command.process_group(0);
    }
    let child = command.spawn()?;
    // The command object still holds the write ends; without dropping it the
    // pipes would never report end-of-file.
    drop(command);
    Ok(Launched {
        group: child.id(),
        child,
        stdout: stdout_reader,
        stderr: stderr_reader,
    })
}

/// Kills a launched command's process group as its leader allows.
pub(crate) fn kill(group: Option<u32>, leader: Leader) {
    match (group, leader) {
        (Some(group), Leader::Command) => kill_group(group),
        (Some(group), Leader::Helper) => kill_group_but_leader(group),
        (None, _) => {}
    }
}

/// Runs `command` (program and arguments set, nothing else) as `request`
/// asks, after writing `stdin_prefix` to its stdin, sending output to `sink`
/// as it comes.
pub(crate) async fn run(
    command: Command,
    stdin_prefix: Vec<u8>,
    leader: Leader,
    request: &ExecRequest,
    sink: Option<&OutputSink>,
    disk: Option<&DiskLimit>,
) -> io::Result<Ran> {
    let started = Instant::now();
    let mut input = stdin_prefix;
    input.extend_from_slice(request.stdin.as_deref().unwrap_or_default());
    let Launched {
        mut child,
        group,
        stdout: stdout_reader,
        stderr: stderr_reader,
    } = launch(command, leader, !input.is_empty(), request.merge_stderr)?;

    // Written from a task so that a command that reads slowly, or not at
    // all, cannot stall the output loop.
    let feeder = child.stdin.take().map(|mut pipe| {
        tokio::spawn(async move {
            // A command may exit without reading its input.
            let _ = pipe.write_all(&input).await;
        })
    });

    let limit = request.max_output;
    let mut stdout = Output::new(Some(stdout_reader), OutputStream::Stdout, limit)?;
    let mut stderr = Output::new(stderr_reader, OutputStream::Stderr, limit)?;
    let mut deadline = started + request.timeout;
    let mut killed = false;
    let mut timed_out = false;
    let mut disk_exceeded = None;
    let mut status = None;
    let mut disk_watch = disk.map(DiskWatch::new);
    while status.is_none() || stdout.is_open() || stderr.is_open() {
        let stop = tokio::select! {
            () = stdout.read(sink), if stdout.is_open() => false,
            () = stderr.read(sink), if stderr.is_open() => false,
            exit = child.wait(), if status.is_none() => {
                status = Some(exit?);
                false
            }
            usage = async { disk_watch.as_mut().expect("checked by the guard").tick().await },
                if disk_watch.is_some() && !killed => {
                disk_exceeded = usage;
                disk_exceeded.is_some()
            }
            () = tokio::time::sleep_until(deadline) => {
                if killed {
                    break;
                }
                timed_out = true;
                true
            }
        };
        if stop {
            killed = true;
            kill(group, leader);
            deadline = Instant::now() + KILL_GRACE;
        }
    }
    if let Some(feeder) = feeder {
        feeder.abort();
    }
    if status.is_none() {
        // Still running after SIGKILL (or, for the helper, after its
        // child's) and the grace period: leave it to tokio's reaper rather
        // than wait without bound.
        let _ = child.start_kill();
    }
    if killed
        && let Some(group) = group
        && !group_gone_within(group, KILL_GRACE).await
    {
        tracing::warn!(group, "processes of a killed command outlived SIGKILL");
    }
    if disk_exceeded.is_none()
        && let Some(disk) = disk
    {
        disk_exceeded = disk.exceeded().await;
    }
    let exit_code = match status {
        Some(status) if !killed && disk_exceeded.is_none() => status.code().unwrap_or(-1),
        _ => -1,
    };
    let (mut stdout, stdout_dropped) = stdout.finish(sink).await;
    let (mut stderr, stderr_dropped) = stderr.finish(sink).await;
    if let (Some(usage), Some(disk)) = (disk_exceeded, disk) {
        // Where the command's own last words went, so a grader reading its
        // output learns why it ended.
        let (stream, bytes) = if request.merge_stderr {
            (OutputStream::Stdout, &mut stdout)
        } else {
            (OutputStream::Stderr, &mut stderr)
        };
        let marker = stopped_marker(&disk.stopped_because(usage)).into_bytes();
        if let Some(sink) = sink {
            let chunk = OutputChunk {
                stream,
                bytes: marker.clone(),
            };
            let _ = sink.send(chunk).await;
        }
        bytes.extend_from_slice(&marker);
    }
    Ok(Ran {
        result: ExecResult {
            exit_code,
            stdout,
            stderr,
            timed_out,
            duration: started.elapsed(),
            stdout_dropped,
            stderr_dropped,
        },
    })
}

/// One output stream being collected.
struct Output {
    pipe: Option<pipe::Receiver>,
    kept: CappedOutput,
    /// A kept chunk the sink has not taken yet.
    unsent: Option<OutputChunk>,
    buffer: Box<[u8]>,
}

impl Output {
    /// Collects from `reader`; `None` is a stream that is merged elsewhere
    /// and stays empty.
    fn new(
        reader: Option<io::PipeReader>,
        stream: OutputStream,
        limit: Option<u64>,
    ) -> io::Result<Self> {
        Ok(Output {
            pipe: reader
                .map(|reader| pipe::Receiver::from_owned_fd(reader.into()))
                .transpose()?,
            kept: CappedOutput::new(stream, limit),
            unsent: None,
            buffer: vec![0; READ_CHUNK].into_boxed_slice(),
        })
    }

    /// Hands the sink the chunk it has not taken yet, waiting for room, or
    /// else reads one chunk and keeps what fits under the limit (to be
    /// handed on next); the rest is counted. While the sink is full the pipe
    /// waits too, which holds the command back; past the limit the pipe is
    /// drained at once, so a flood cannot. Cancel-safe: a chunk read is kept
    /// and handed on even if this is cancelled.
    async fn read(&mut self, sink: Option<&OutputSink>) {
        if let Some(sink) = sink
            && self.unsent.is_some()
        {
            match sink.reserve().await {
                Ok(permit) => permit.send(self.unsent.take().expect("checked")),
                // A closed sink only stops the streaming.
                Err(_) => self.unsent = None,
            }
            return;
        }
        let Some(pipe) = &mut self.pipe else {
            return std::future::pending().await;
        };
        let n = match pipe.read(&mut self.buffer).await {
            Ok(0) => {
                self.pipe = None;
                return;
            }
            Ok(n) => n,
            Err(error) => {
                tracing::warn!(%error, stream = ?self.kept.stream(), "reading command output");
                self.pipe = None;
                return;
            }
        };
        let kept = self.kept.keep(&self.buffer[..n]);
        if sink.is_some() && !kept.is_empty() {
            self.unsent = Some(OutputChunk {
                stream: self.kept.stream(),
                bytes: kept.to_vec(),
            });
        }
    }

    /// Whether [`Output::read`] has more to do.
    fn is_open(&self) -> bool {
        self.pipe.is_some() || self.unsent.is_some()
    }

    /// The kept bytes, with the marker for what was dropped (also sent to
    /// `sink`).
    async fn finish(mut self, sink: Option<&OutputSink>) -> (Vec<u8>, u64) {
        if let Some(sink) = sink {
            for chunk in self.unsent.take().into_iter().chain(self.kept.marker()) {
                let _ = sink.send(chunk).await;
            }
        }
        self.kept.finish()
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

    async fn run_plain(
        command: Command,
        request: &ExecRequest,
        sink: Option<&OutputSink>,
    ) -> ExecResult {
        run(command, Vec::new(), Leader::Command, request, sink, None)
            .await
            .unwrap()
            .result
    }

    #[tokio::test]
    async fn output_exit_code_and_stdin() {
        let (command, mut request) = shell("cat; echo err >&2; exit 3");
        request.stdin = Some(b"in".to_vec());
        let result = run_plain(command, &request, None).await;
        assert_eq!(result.exit_code, 3);
        assert_eq!(result.stdout, b"in");
        assert_eq!(result.stderr, b"err\n");
        assert!(!result.timed_out);
    }

    #[tokio::test]
    async fn the_stdin_prefix_comes_before_the_requests_stdin() {
        let (command, mut request) = shell("cat");
        request.stdin = Some(b" and stdin".to_vec());
        let ran = run(
            command,
            b"prefix".to_vec(),
            Leader::Command,
            &request,
            None,
            None,
        )
        .await
        .unwrap();
        assert_eq!(ran.result.stdout, b"prefix and stdin");
    }

    #[tokio::test]
    async fn merged_output_keeps_the_order_it_was_written_in() {
        let (command, mut request) = shell("echo 1; echo 2 >&2; echo 3; echo 4 >&2");
        request.merge_stderr = true;
        let result = run_plain(command, &request, None).await;
        assert_eq!(result.stdout, b"1\n2\n3\n4\n");
        assert!(result.stderr.is_empty());
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group_and_keeps_partial_output() {
        let (command, mut request) = shell("sleep 300 & echo $!; sleep 300");
        request.timeout = Duration::from_millis(300);
        let result = run_plain(command, &request, None).await;
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
    async fn a_slow_sink_gets_every_chunk_in_order() {
        let (sink, mut chunks) = tokio::sync::mpsc::channel::<OutputChunk>(1);
        let (command, request) = shell("for i in 1 2 3 4 5; do echo $i; done");
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(chunk) = chunks.recv().await {
                tokio::time::sleep(Duration::from_millis(20)).await;
                seen.extend(chunk.bytes);
            }
            seen
        });
        let result = run_plain(command, &request, Some(&sink)).await;
        drop(sink);
        assert_eq!(result.stdout, b"1\n2\n3\n4\n5\n");
        assert_eq!(reader.await.unwrap(), result.stdout);
    }

    #[tokio::test]
    async fn output_past_the_limit_is_dropped_counted_and_marked() {
        // 1 MiB on stdout, 10 bytes on stderr, a limit of 1000 bytes each.
        let (command, mut request) = shell("head -c 1048576 /dev/zero; printf 0123456789 >&2");
        request.max_output = Some(1000);
        let (sink, mut chunks) = tokio::sync::mpsc::channel::<OutputChunk>(4);
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(chunk) = chunks.recv().await {
                if chunk.stream == OutputStream::Stdout {
                    seen.extend(chunk.bytes);
                }
            }
            seen
        });
        let result = run_plain(command, &request, Some(&sink)).await;
        drop(sink);
        assert_eq!(result.exit_code, 0);
        assert_eq!(result.stdout_dropped, 1_048_576 - 1000);
        let marker = sandfleet_core::dropped_marker(OutputStream::Stdout, 1_048_576 - 1000, 1000);
        assert_eq!(result.stdout.len(), 1000 + marker.len());
        assert!(result.stdout.ends_with(marker.as_bytes()));
        assert_eq!(
            (result.stderr.as_slice(), result.stderr_dropped),
            (&b"0123456789"[..], 0)
        );
        // The stream carries exactly what the result kept.
        assert_eq!(reader.await.unwrap(), result.stdout);
    }

    #[tokio::test]
    async fn a_command_writing_past_the_disk_limit_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("fill");
        // At most 200 MiB, at most 100 MiB/s.
        let (command, mut request) = shell(&format!(
            "for i in $(seq 200); do head -c 1048576 /dev/zero >> {}; sleep 0.01; done",
            target.display()
        ));
        request.timeout = Duration::from_secs(60);
        let me = std::process::id() as i32;
        let disk = DiskLimit {
            dirs: vec![dir.path().to_path_buf()],
            bytes: 8 << 20,
            members: crate::disk::Members::PidNamespace(me),
            init: me,
            mounts: Vec::new(),
        };
        let ran = run(
            command,
            Vec::new(),
            Leader::Command,
            &request,
            None,
            Some(&disk),
        )
        .await
        .unwrap();
        assert_eq!(ran.result.exit_code, -1);
        assert!(!ran.result.timed_out);
        let stderr = String::from_utf8_lossy(&ran.result.stderr);
        assert!(stderr.contains("passed its disk limit (8 MiB"), "{stderr}");
    }
}
