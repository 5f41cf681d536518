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

/// One stream's output as every driver keeps it: bytes up to
/// [`ExecRequest::max_output`] (everything when it is `None`), what came
/// past it counted, and the [`dropped_marker`] at the end when any was.
#[derive(Debug)]
pub struct CappedOutput {
    stream: OutputStream,
    limit: Option<u64>,
    bytes: Vec<u8>,
    dropped: u64,
}

impl CappedOutput {
    /// Nothing kept yet of `stream`, under `limit`.
    pub fn new(stream: OutputStream, limit: Option<u64>) -> Self {
        CappedOutput {
            stream,
            limit,
            bytes: Vec::new(),
            dropped: 0,
        }
    }

    /// Keeps what fits of `chunk` and counts the rest; returns the part
    /// kept, for a sink (empty once the limit is reached).
    pub fn keep<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let room = self.limit.map_or(usize::MAX, |limit| {
            usize::try_from(limit.saturating_sub(self.bytes.len() as u64)).unwrap_or(usize::MAX)
        });
        let (kept, past) = chunk.split_at(chunk.len().min(room));
        self.bytes.extend_from_slice(kept);
        self.dropped += past.len() as u64;
        kept
    }

    /// Counts `bytes` past the limit that were never read (a reader that
    /// fetched only the head of a longer output).
    pub fn count_unread(&mut self, bytes: u64) {
        self.dropped += bytes;
    }

    /// The stream it keeps.
    pub fn stream(&self) -> OutputStream {
        self.stream
    }

    /// [`CappedOutput::keep`], handing the kept part to `sink` (a closed
    /// sink only stops the streaming).
    pub async fn keep_and_send(&mut self, chunk: &[u8], sink: Option<&OutputSink>) {
        let stream = self.stream;
        let kept = self.keep(chunk);
        if let Some(sink) = sink
            && !kept.is_empty()
        {
            let chunk = OutputChunk {
                stream,
                bytes: kept.to_vec(),
            };
            let _ = sink.send(chunk).await;
        }
    }

    /// [`CappedOutput::finish`], handing the marker to `sink` first.
    pub async fn finish_and_send(self, sink: Option<&OutputSink>) -> (Vec<u8>, u64) {
        if let (Some(sink), Some(marker)) = (sink, self.marker()) {
            let _ = sink.send(marker).await;
        }
        self.finish()
    }

    /// Bytes dropped past the limit so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The marker that will end the output, when some was dropped: what a
    /// sink receives last.
    pub fn marker(&self) -> Option<OutputChunk> {
        (self.dropped > 0).then(|| OutputChunk {
            stream: self.stream,
            bytes: dropped_marker(self.stream, self.dropped, self.limit.unwrap_or_default())
                .into_bytes(),
        })
    }

    /// The kept bytes, ended by the marker when some were dropped, and the
    /// count dropped.
    pub fn finish(mut self) -> (Vec<u8>, u64) {
        if let Some(marker) = self.marker() {
            self.bytes.extend_from_slice(&marker.bytes);
        }
        (self.bytes, self.dropped)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_limit_is_counted_and_marked_once() {
        let mut out = CappedOutput::new(OutputStream::Stderr, Some(5));
        assert_eq!(out.keep(b"abc"), b"abc");
        assert_eq!(out.keep(b"defg"), b"de");
        assert_eq!(out.keep(b"hij"), b"");
        assert_eq!(out.dropped(), 5);
        let marker = out.marker().unwrap();
        assert_eq!(marker.stream, OutputStream::Stderr);
        let (bytes, dropped) = out.finish();
        assert_eq!(dropped, 5);
        assert_eq!(
            bytes,
            [
                b"abcde".as_slice(),
                dropped_marker(OutputStream::Stderr, 5, 5).as_bytes()
            ]
            .concat()
        );
        assert_eq!(marker.bytes, bytes[5..]);
    }

    #[test]
    fn no_limit_keeps_everything_and_adds_no_marker() {
        let mut out = CappedOutput::new(OutputStream::Stdout, None);
        let big = vec![b'x'; 1 << 20];
        assert_eq!(out.keep(&big).len(), big.len());
        assert!(out.marker().is_none());
        assert_eq!(out.finish(), (big, 0));
    }
}
