//! Running commands in sandboxes.

use std::time::Duration;

/// One command to run in a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecRequest {
    /// Program and arguments; the program is looked up on the sandbox's PATH.
    pub argv: Vec<String>,
    /// Working directory inside the sandbox; `None` uses the sandbox default.
    pub workdir: Option<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Killed, with everything it started, after this long.
    pub timeout: Duration,
    /// Write stderr into stdout as it happens (like `2>&1`).
    pub merge_stderr: bool,
    /// Bytes written to the command's stdin, which is then closed.
    pub stdin: Option<Vec<u8>>,
    /// Bytes of each stream kept; output past it is dropped, counted in
    /// [`ExecResult::stdout_dropped`] / [`ExecResult::stderr_dropped`],
    /// and marked by a line at the end of what was kept. `None` keeps
    /// everything.
    pub max_output: Option<u64>,
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecResult {
    /// The exit status; -1 when the command was killed or could not start.
    pub exit_code: i32,
    /// Everything it wrote to stdout (and stderr, when merged).
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
    /// True when it was killed at its timeout.
    pub timed_out: bool,
    /// Wall-clock time it ran.
    pub duration: Duration,
    /// Bytes of stdout dropped past [`ExecRequest::max_output`].
    pub stdout_dropped: u64,
    /// Bytes of stderr dropped past [`ExecRequest::max_output`].
    pub stderr_dropped: u64,
}

/// The line that ends a stream cut at [`ExecRequest::max_output`]: kept
/// output, then this, so whoever reads it (a grader, a log) knows.
pub fn dropped_marker(stream: OutputStream, dropped: u64, limit: u64) -> String {
    let name = match stream {
        OutputStream::Stdout => "stdout",
        OutputStream::Stderr => "stderr",
    };
    format!(
        "\n[sandfleet: {dropped} more bytes of {name} dropped past the limit of {limit} bytes]\n"
    )
}

/// The line that ends the output of a command the backend stopped for
/// `reason` (a limit the command's sandbox passed): the task's doing, to
/// be graded as such, with the reason where a grader reads.
pub fn stopped_marker(reason: &str) -> String {
    format!("\n[sandfleet: the command was stopped: {reason}]\n")
}

/// Which stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// Standard output (with stderr when merged).
    Stdout,
    /// Standard error.
    Stderr,
}

/// A piece of output, as it is produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Its stream.
    pub stream: OutputStream,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// Where streaming exec sends output while the command runs: every chunk the
/// [`ExecResult`] keeps, in order, then the dropped-output marker if there
/// is one. A full sink holds the command back (back-pressure), so a sink
/// must be drained; a closed one stops receiving and the command goes on.
pub type OutputSink = tokio::sync::mpsc::Sender<OutputChunk>;
