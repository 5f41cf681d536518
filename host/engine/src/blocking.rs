//! Plugin calls from async code.
//!
//! Plugin calls are synchronous, and a guest that writes to stdout or stderr
//! goes through WASI shims that must not run on an async worker thread, so
//! every call runs on the blocking pool.

use sandfleet_plugin::CallError;

use crate::error::RunError;

/// Runs a plugin call on the blocking pool.
pub(crate) async fn call_plugin<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, CallError> + Send + 'static,
) -> Result<T, RunError> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result.map_err(RunError::Plugin),
        Err(join) => Err(RunError::Internal(format!(
            "a plugin call panicked the host: {join}"
        ))),
    }
}
