//! A command's output exactly as the command wrote it.
//!
//! execd streams one event per line with the terminator stripped (`\n`,
//! `\r` and `\r\n` alike; a blank line comes as "\n"), so the stream cannot
//! say which terminator a line had, or whether the last line had one. But
//! execd writes each foreground command's streams to files of its own,
//! `<its TMPDIR>/<command id>.stdout` and `.stderr`, and leaves them there
//! (`components/execd/pkg/runtime/command_common.go`). The streams that
//! sent output are read back from those files, byte for byte and no further
//! than the output limit, and the files removed. Where they are not there
//! (an execd that keeps them elsewhere), the streamed lines stand, each
//! ended by "\n", and the cluster says so once.

use std::sync::atomic::Ordering;

use reqwest::Method;
use sandfleet_core::{
    BackendError, CappedOutput, ErrorKind, ExecResult, OutputStream, SandboxHandle,
};
use sandfleet_transport::CallKind;

use super::OpenSandboxBackend;
use crate::exec::Ended;
use crate::wire::HandleData;

/// Where execd keeps its commands' output: its `os.TempDir()`, which is
/// `/tmp` unless the sandbox's image sets `TMPDIR` for execd.
const EXECD_OUTPUT_DIR: &str = "/tmp";

/// The head of a file, and how long the whole file is.
pub(super) struct Head {
    pub(super) bytes: Vec<u8>,
    pub(super) total: u64,
}

/// `route` with `path=` for each of `paths`, encoded.
fn with_paths(route: &str, paths: &[&str]) -> String {
    let url = reqwest::Url::parse_with_params("http://execd/", paths.iter().map(|p| ("path", *p)))
        .expect("a base URL with a query parses");
    format!("{route}?{}", url.query().unwrap_or_default())
}

/// The whole length out of a `Content-Range: bytes A-B/LEN` answer.
fn range_total(header: Option<&reqwest::header::HeaderValue>) -> Option<u64> {
    header?
        .to_str()
        .ok()?
        .rsplit_once('/')?
        .1
        .trim()
        .parse()
        .ok()
}

impl OpenSandboxBackend {
    /// Reads `path` in the sandbox: all of it, or its first `limit` bytes
    /// (asked as a range, which execd serves) and how long it is.
    pub(super) async fn download(
        &self,
        execd: &HandleData,
        sandbox: &SandboxHandle,
        path: &str,
        limit: Option<u64>,
    ) -> Result<Head, BackendError> {
        let mut call = self.execd(
            execd,
            Method::GET,
            &with_paths("/files/download", &[path]),
            CallKind::File,
            format!("download {path} from sandbox {}", sandbox.id),
        )?;
        if let Some(limit) = limit.filter(|limit| *limit > 0) {
            call = call
                .header("range", &format!("bytes=0-{}", limit - 1))
                .map_err(|e| self.error(ErrorKind::Failed, e))?;
        }
        let response = self.transport.send(&self.name, &call).await?;
        let total = range_total(response.headers().get(reqwest::header::CONTENT_RANGE));
        let mut bytes = self.transport.body(&self.name, &call, response).await?;
        let total = total.unwrap_or(bytes.len() as u64);
        // A server that ignores the range sends everything.
        if let Some(limit) = limit {
            bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        Ok(Head { bytes, total })
    }

    /// Removes `paths` in the sandbox (a path already gone is no failure).
    pub(super) async fn remove_files(
        &self,
        execd: &HandleData,
        sandbox: &SandboxHandle,
        paths: &[&str],
    ) -> Result<(), BackendError> {
        let call = self
            .execd(
                execd,
                Method::DELETE,
                &with_paths("/files", paths),
                CallKind::File,
                format!("remove {} in sandbox {}", paths.join(", "), sandbox.id),
            )?
            // Removing what is gone changes nothing.
            .idempotent(true);
        self.transport.send(&self.name, &call).await.map(drop)
    }

    /// `ended`'s result with each stream that sent output replaced by the
    /// bytes execd kept of it. A merged command (`exec 2>&1`) has all of it
    /// in stdout, unless the shell spoke on stderr before the redirect.
    pub(super) async fn exact_output(
        &self,
        execd: &HandleData,
        sandbox: &SandboxHandle,
        ended: Ended,
        max_output: Option<u64>,
        merged: bool,
    ) -> ExecResult {
        let mut result = ended.result;
        let Some(id) = ended.command_id.as_deref() else {
            return result;
        };
        let (heard, mut read) = (ended.heard, false);
        let files = [
            format!("{EXECD_OUTPUT_DIR}/{id}.stdout"),
            format!("{EXECD_OUTPUT_DIR}/{id}.stderr"),
        ];
        let wanted = [
            (
                OutputStream::Stdout,
                heard.stdout && !(merged && heard.stderr),
            ),
            (OutputStream::Stderr, heard.stderr && !merged),
        ];
        for ((stream, wanted), file) in wanted.into_iter().zip(&files) {
            if !wanted {
                continue;
            }
            let head = match self.download(execd, sandbox, file, max_output).await {
                Ok(head) => head,
                Err(error) => {
                    if !self.no_output_files.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            cluster = %self.name, %error,
                            "execd keeps no command output in {EXECD_OUTPUT_DIR}: output is its streamed lines, each ended by a newline"
                        );
                    }
                    return result;
                }
            };
            let mut kept = CappedOutput::new(stream, max_output);
            kept.keep(&head.bytes);
            kept.count_unread(head.total.saturating_sub(head.bytes.len() as u64));
            let (bytes, dropped) = kept.finish();
            match stream {
                OutputStream::Stdout => (result.stdout, result.stdout_dropped) = (bytes, dropped),
                OutputStream::Stderr => (result.stderr, result.stderr_dropped) = (bytes, dropped),
            }
            read = true;
        }
        if read {
            let paths = files.each_ref().map(String::as_str);
            if let Err(error) = self.remove_files(execd, sandbox, &paths).await {
                tracing::debug!(sandbox = %sandbox.id, %error, "cannot remove execd's output files");
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_into_the_query() {
        assert_eq!(
            with_paths("/files", &["/tmp/a b.stdout", "/tmp/x&y"]),
            "/files?path=%2Ftmp%2Fa+b.stdout&path=%2Ftmp%2Fx%26y"
        );
    }

    #[test]
    fn the_whole_length_comes_from_the_content_range() {
        let value = |text: &str| reqwest::header::HeaderValue::from_str(text).unwrap();
        assert_eq!(range_total(Some(&value("bytes 0-3/10"))), Some(10));
        assert_eq!(range_total(Some(&value("bytes */0"))), Some(0));
        assert_eq!(range_total(Some(&value("bytes 0-3/*"))), None);
        assert_eq!(range_total(None), None);
    }
}
