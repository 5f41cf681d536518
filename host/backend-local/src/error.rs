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
    /// There is no room for it now (a budget is spent); there may be once
    /// something is released or deleted.
    #[error("{0}")]
    NoRoom(String),
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
            LocalError::NoRoom(_) => ErrorKind::Unavailable,
            LocalError::Image(error) => image_kind(error),
            // The disk is full (or the user's quota is): the cluster has no
            // room now, and may when something is released.
            LocalError::Io { source, .. }
                if matches!(
                    source.raw_os_error(),
                    Some(libc_errno::ENOSPC | libc_errno::EDQUOT)
                ) =>
            {
                ErrorKind::Unavailable
            }
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

/// The errno values the kind of an I/O failure depends on.
mod libc_errno {
    pub(super) const ENOSPC: i32 = rustix::io::Errno::NOSPC.raw_os_error();
    pub(super) const EDQUOT: i32 = rustix::io::Errno::DQUOT.raw_os_error();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_unavailable_and_other_io_failures_are_failed() {
        let io = |errno: rustix::io::Errno| LocalError::Io {
            context: "sealing a sandbox's layer".into(),
            source: io::Error::from(errno),
        };
        for (errno, kind) in [
            (rustix::io::Errno::NOSPC, ErrorKind::Unavailable),
            (rustix::io::Errno::DQUOT, ErrorKind::Unavailable),
            (rustix::io::Errno::IO, ErrorKind::Failed),
        ] {
            let error = io(errno).into_backend("local");
            assert_eq!(error.kind(), kind, "{error}");
            assert!(error.to_string().starts_with("local: sealing"), "{error}");
        }
    }
}
