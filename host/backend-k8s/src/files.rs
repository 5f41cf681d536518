//! Files in and out of a sandbox's pod over exec: raw bytes on the exec's
//! stdin and stdout channels (binary-safe, carried in websocket frames of
//! bounded size), written to a temporary name and moved into place only
//! when every byte arrived. The writer reads exactly the announced length,
//! so neither side needs the stdin close signal v4 lacks.

use std::time::Duration;

use sandfleet_core::{BackendError, ErrorKind, SandboxHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::errors::api_error;
use crate::exec::{Target, exit_code};

/// How long moving one file in or out of a sandbox may take.
pub(crate) const FILE_TIMEOUT: Duration = Duration::from_secs(600);

/// Bytes handed to the websocket per write: large files go as many frames.
const CHUNK: usize = 256 * 1024;

/// The exit code the reader uses for a missing file.
const MISSING: i32 = 44;

/// Why a file could not be moved.
#[derive(Debug)]
pub(crate) enum FileError {
    /// The exec could not start (nothing happened in the pod).
    NotStarted(kube::Error),
    /// There is no such file.
    Missing,
    /// The pod's shell failed or the connection broke; the text says which.
    Failed(String),
}

impl FileError {
    /// Whether nothing was sent to the pod: the server refused the exec.
    pub(crate) fn not_started(&self) -> bool {
        matches!(self, FileError::NotStarted(_))
    }

    /// The failure as the engine sees it, naming the sandbox and the path.
    pub(crate) fn into_error(
        self,
        cluster: &str,
        sandbox: &SandboxHandle,
        path: &str,
    ) -> BackendError {
        match self {
            FileError::NotStarted(error) => {
                api_error(cluster, &format!("{path} in sandbox {}", sandbox.id), error)
            }
            FileError::Missing => BackendError::new(
                ErrorKind::NotFound,
                cluster,
                format!("sandbox {}: no file {path}", sandbox.id),
            ),
            FileError::Failed(why) => BackendError::new(
                ErrorKind::Failed,
                cluster,
                format!("sandbox {}: {why}", sandbox.id),
            ),
        }
    }
}

/// The error of a move that took over [`FILE_TIMEOUT`].
pub(crate) fn timed_out(cluster: &str, sandbox: &SandboxHandle, path: &str) -> BackendError {
    BackendError::new(
        ErrorKind::Timeout,
        cluster,
        format!(
            "sandbox {}: moving {path} took over {}",
            sandbox.id,
            humantime::format_duration(FILE_TIMEOUT)
        ),
    )
}

/// Writes `contents` to `path` in the pod, with `mode`, making parents.
pub(crate) async fn put(
    target: &Target,
    path: &str,
    contents: &[u8],
    mode: u32,
) -> Result<(), FileError> {
    const WRITE: &str = r#"p=$1; n=$2; m=$3; t="$p.sf-$$"; mkdir -p -- "$(dirname -- "$p")" && head -c "$n" > "$t" && [ "$(wc -c < "$t")" -eq "$n" ] && chmod "$m" "$t" && mv -f -- "$t" "$p" || { s=$?; rm -f -- "$t"; exit "$s"; }"#;
    let argv = target.shell.script(
        WRITE,
        &[path.into(), contents.len().to_string(), format!("{mode:o}")],
    );
    let mut process = target
        .start(argv, true)
        .await
        .map_err(FileError::NotStarted)?;
    let status = process.take_status();
    let (Some(mut stdin), Some(mut stderr)) = (process.stdin(), process.stderr()) else {
        unreachable!("stdin and stderr were asked for");
    };
    let errors = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text).await;
        text
    });
    for chunk in contents.chunks(CHUNK) {
        stdin
            .write_all(chunk)
            .await
            .map_err(|e| FileError::Failed(format!("sending {path}: {e}")))?;
    }
    stdin
        .flush()
        .await
        .map_err(|e| FileError::Failed(format!("sending {path}: {e}")))?;
    let status = match status {
        Some(status) => status.await,
        None => None,
    };
    // The stdin writer is held until the status arrives: on v4, closing it
    // closes the whole websocket.
    drop(stdin);
    let said = String::from_utf8_lossy(&errors.await.unwrap_or_default())
        .trim()
        .to_string();
    match status.map(|s| exit_code(&s)) {
        Some(0) => Ok(()),
        Some(code) => Err(FileError::Failed(format!(
            "writing {path} exited {code}: {said}"
        ))),
        None => Err(FileError::Failed(format!(
            "writing {path}: the exec ended without a status"
        ))),
    }
}

/// Reads `path` from the pod.
pub(crate) async fn get(target: &Target, path: &str) -> Result<Vec<u8>, FileError> {
    const READ: &str = r#"[ -f "$1" ] || { echo "no such file" >&2; exit 44; }; cat -- "$1""#;
    let argv = target.shell.script(READ, &[path.into()]);
    let mut process = target
        .start(argv, false)
        .await
        .map_err(FileError::NotStarted)?;
    let status = process.take_status();
    let (Some(mut stdout), Some(mut stderr)) = (process.stdout(), process.stderr()) else {
        unreachable!("stdout and stderr were asked for");
    };
    let errors = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text).await;
        text
    });
    let mut contents = Vec::new();
    stdout
        .read_to_end(&mut contents)
        .await
        .map_err(|e| FileError::Failed(format!("reading {path}: {e}")))?;
    let status = match status {
        Some(status) => status.await,
        None => None,
    };
    let said = String::from_utf8_lossy(&errors.await.unwrap_or_default())
        .trim()
        .to_string();
    match status.map(|s| exit_code(&s)) {
        Some(0) => Ok(contents),
        Some(MISSING) => Err(FileError::Missing),
        Some(code) => Err(FileError::Failed(format!(
            "reading {path} exited {code}: {said}"
        ))),
        None => Err(FileError::Failed(format!(
            "reading {path}: the exec ended without a status"
        ))),
    }
}
