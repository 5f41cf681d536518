//! Errors of the local backend, before they are given the cluster's name and
//! become [`BackendError`]s at the trait boundary.

use std::io;
use std::time::Duration;

use sandfleet_core::{BackendError, ErrorKind};

/// Why a local operation failed. Messages name the sandbox, image or path
/// involved.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The object does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The request cannot be satisfied as asked.
    #[error("{0}")]
    Rejected(String),
    /// A bounded wait ran out.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// A system call or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming its path or sandbox.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A sandbox is not isolated as it must be (it failed its probe).
    #[error("{0}")]
    Isolation(String),
    /// The sandbox is gone (its init died).
    #[error("{0}")]
    SandboxLost(String),
    /// An OCI image could not be pulled or used; the message names the
    /// reference and, for a pull, the registry and its HTTP status.
    #[error("{0}")]
    Image(sandfleet_images::Error),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

/// The kind of an image failure: what the engine may do about it.
fn image_kind(error: &sandfleet_images::Error) -> ErrorKind {
    use sandfleet_images::Error;
    match error {
        Error::InvalidReference { .. }
        | Error::Unauthorized { .. }
        | Error::CredentialHelper { .. }
        | Error::NoPlatform { .. } => ErrorKind::Invalid,
        Error::NotFound { .. } | Error::NotPulled { .. } => ErrorKind::NotFound,
        Error::Http {
            status: 429,
            retry_after,
            ..
        } => ErrorKind::Throttled {
            retry_after: *retry_after,
        },
        Error::Unreachable { .. } | Error::DiskFull { .. } => ErrorKind::Unavailable,
        Error::Http { status, .. } if *status >= 500 => ErrorKind::Unavailable,
        Error::LockTimeout { .. } => ErrorKind::Timeout,
        Error::InUse { .. } => ErrorKind::Conflict,
        Error::Unsupported { .. } => ErrorKind::Unsupported,
        _ => ErrorKind::Failed,
    }
}

impl LocalError {
    /// The error as the engine sees it, attributed to cluster `backend`.
    pub fn into_backend(self, backend: &str) -> BackendError {
        let kind = match &self {
            LocalError::NotFound(_) => ErrorKind::NotFound,
            LocalError::Rejected(_) => ErrorKind::Invalid,
            LocalError::Timeout { .. } => ErrorKind::Timeout,
            LocalError::SandboxLost(_) => ErrorKind::SandboxLost,
            LocalError::Image(error) => image_kind(error),
            LocalError::Io { .. } | LocalError::Isolation(_) | LocalError::Failed(_) => {
                ErrorKind::Failed
            }
        };
        let message = self.to_string();
        match self {
            LocalError::Io { source, .. } => {
                BackendError::new(kind, backend, message).with_source(source)
            }
            LocalError::Image(source) => {
                BackendError::new(kind, backend, message).with_source(source)
            }
            _ => BackendError::new(kind, backend, message),
        }
    }
}

/// Adds what was being done to an [`io::Error`].
pub(crate) trait IoContext<T> {
    /// Wraps the error with `context()`, computed only on failure.
    fn context(self, context: impl FnOnce() -> String) -> Result<T, LocalError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, LocalError> {
        self.map_err(|source| LocalError::Io {
            context: context(),
            source,
        })
    }
}
