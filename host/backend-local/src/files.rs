//! Moving files in and out of a sandbox, as commands run in it: whatever
//! the sandbox can write, it writes with the sandbox's own identity.

use std::time::Duration;

use sandfleet_core::{ExecRequest, ExecResult, SandboxHandle};

use crate::backend::Inner;
use crate::error::LocalError;

/// Bound on `put_file` and `get_file`.
const FILE_TIMEOUT: Duration = Duration::from_secs(120);

/// Writes stdin to `$1` with mode `$2`, creating parent directories.
const PUT_FILE_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$1")" && cat >"$1" && chmod "$2" "$1""#;

/// Prints file `$1`, or exits with status `$2` when there is no such file.
const GET_FILE_SCRIPT: &str = r#"[ -f "$1" ] || exit "$2"; exec cat -- "$1""#;

/// The status `GET_FILE_SCRIPT` exits with for a missing file: `EX_NOINPUT`
/// from sysexits.h.
const MISSING_FILE: i32 = 66;

fn script(script: &str, args: [&str; 2]) -> Vec<String> {
    ["sh", "-c", script, "sh", args[0], args[1]]
        .map(String::from)
        .to_vec()
}

impl Inner {
    pub(crate) async fn put_file(
        &self,
        handle: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), LocalError> {
        let sandbox = self.claimed(handle)?;
        if !sandbox.contains(path) {
            return Err(LocalError::Rejected(format!(
                "sandbox {}: {path} is outside the sandbox (without namespaces, a sandbox holds \
                 only its workdir and /tmp)",
                sandbox.id()
            )));
        }
        let request = ExecRequest {
            argv: script(PUT_FILE_SCRIPT, [path, &format!("{:o}", mode & 0o7777)]),
            stdin: Some(contents.to_vec()),
            timeout: FILE_TIMEOUT,
            ..ExecRequest::default()
        };
        let result = self.exec(handle, &request, None).await?;
        if result.exit_code == 0 {
            Ok(())
        } else {
            Err(file_failure(sandbox.id(), "writing", path, &result))
        }
    }

    pub(crate) async fn get_file(
        &self,
        handle: &SandboxHandle,
        path: &str,
    ) -> Result<Vec<u8>, LocalError> {
        let request = ExecRequest {
            argv: script(GET_FILE_SCRIPT, [path, &MISSING_FILE.to_string()]),
            timeout: FILE_TIMEOUT,
            ..ExecRequest::default()
        };
        let result = self.exec(handle, &request, None).await?;
        match result.exit_code {
            0 => Ok(result.stdout),
            MISSING_FILE => Err(LocalError::NotFound(format!(
                "file {path} in sandbox {}",
                handle.id
            ))),
            _ => Err(file_failure(&handle.id, "reading", path, &result)),
        }
    }
}

/// The error for a file operation whose command failed.
fn file_failure(sandbox_id: &str, doing: &str, path: &str, result: &ExecResult) -> LocalError {
    LocalError::Failed(format!(
        "sandbox {sandbox_id}: {doing} {path} failed (exit code {}{}): {}",
        result.exit_code,
        if result.timed_out { ", timed out" } else { "" },
        String::from_utf8_lossy(&result.stderr).trim()
    ))
}
