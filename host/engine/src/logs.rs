//! A task's log, `logs/<task>.log`: every command as it would be typed,
//! then its output as it streamed (stderr lines marked), appended.

use std::path::PathBuf;

use sandfleet_core::{OutputChunk, OutputStream};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::text;

/// Bytes of a command line shown in a log (a script passed as an argument
/// can be far longer).
const SHOWN_COMMAND: usize = 4096;

/// Chunks buffered between a command and its log; past this the command
/// waits for the log (the backend applies back-pressure).
const BUFFERED_CHUNKS: usize = 256;

/// A sink for one command's output and the task writing it to `path`.
pub(crate) fn open(
    path: PathBuf,
    argv: &[String],
) -> (
    mpsc::Sender<OutputChunk>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let (sink, chunks) = mpsc::channel(BUFFERED_CHUNKS);
    let command = text::truncated(&shell_words::join(argv), SHOWN_COMMAND);
    (
        sink,
        tokio::spawn(write(path, command, chunks).in_current_span()),
    )
}

async fn write(
    path: PathBuf,
    command: String,
    mut chunks: mpsc::Receiver<OutputChunk>,
) -> std::io::Result<()> {
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .await?;
    file.write_all(format!("$ {command}\n").as_bytes()).await?;
    while let Some(chunk) = chunks.recv().await {
        if chunk.stream == OutputStream::Stderr {
            file.write_all(b"[stderr] ").await?;
        }
        file.write_all(&chunk.bytes).await?;
    }
    file.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn commands_are_logged_as_typed_with_their_output() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let argv: Vec<String> = ["sh", "-c", "echo 'it''s'"].map(String::from).to_vec();
        let (sink, writer) = open(path.clone(), &argv);
        for (stream, bytes) in [
            (OutputStream::Stdout, "out\n"),
            (OutputStream::Stderr, "err\n"),
        ] {
            sink.send(OutputChunk {
                stream,
                bytes: bytes.into(),
            })
            .await
            .unwrap();
        }
        drop(sink);
        writer.await.unwrap().unwrap();
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            "$ sh -c 'echo '\\''it'\\'''\\''s'\\'''\nout\n[stderr] err\n"
        );
    }
}
