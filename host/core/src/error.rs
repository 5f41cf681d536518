//! Backend errors: one type whose [`ErrorKind`] says what went wrong in
//! terms the engine can act on — whether a request may have reached the
//! server, whether waiting helps, whether the sandbox is gone — with a
//! one-line message naming the cluster and the object, and the underlying
//! error as its source.
//!
//! Every backend error is an infrastructure error: it says nothing about
//! the task or the model, and a task that hits one is recorded as
//! `infra_error`, never as a failure.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What kind of failure a [`BackendError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The connection failed. `sent` is whether the request may have
    /// reached the server (so a mutating request may have taken effect).
    Transport {
        /// The request may have been received.
        sent: bool,
    },
    /// The object changed under the request (a stale version, a name taken
    /// meanwhile); the same request may succeed if made again.
    Conflict,
    /// The server asks the client to slow down.
    Throttled {
        /// How long to wait, when the server says.
        retry_after: Option<Duration>,
    },
    /// The object does not exist (a released sandbox, an unknown template).
    NotFound,
    /// The request is wrong (a bad spec, an image the cluster cannot make):
    /// making it again cannot help.
    Invalid,
    /// The backend cannot serve now (down, full, not set up); it may later.
    Unavailable,
    /// A bounded wait ran out.
    Timeout,
    /// The sandbox is gone or broken (it expired, its pod failed, its init
    /// died, its lease lapsed).
    SandboxLost,
    /// The backend cannot do this at all.
    Unsupported,
    /// Anything else: a failure of the backend's own machinery.
    Failed,
}

impl ErrorKind {
    /// The kind's name, for counters and reports.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Transport { sent: false } => "transport_unsent",
            ErrorKind::Transport { sent: true } => "transport_sent",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Throttled { .. } => "throttled",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::SandboxLost => "sandbox_lost",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Failed => "failed",
        }
    }

    /// Whether making an idempotent request (a read, a claim, a pool's size,
    /// a release) again can help: the request never arrived, was refused
    /// for now, or lost a race. A mutating request that may have arrived
    /// (`Transport { sent: true }`) is never retried.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Transport { sent: false }
                | ErrorKind::Conflict
                | ErrorKind::Throttled { .. }
                | ErrorKind::Unavailable
        )
    }
}

/// Why a backend operation failed.
#[derive(Debug, Clone)]
pub struct BackendError {
    kind: ErrorKind,
    cluster: String,
    message: String,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl BackendError {
    /// An error of `kind` on `cluster`; `message` is one line naming the
    /// object and what happened to it.
    pub fn new(kind: ErrorKind, cluster: &str, message: impl fmt::Display) -> Self {
        BackendError {
            kind,
            cluster: cluster.to_string(),
            message: message.to_string(),
            source: None,
        }
    }

    /// The same error with `source` as its cause.
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The cluster it happened on.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The message, without the cluster.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// How long to wait before trying again, when the backend said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::Throttled { retry_after } => retry_after,
            _ => None,
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.cluster, self.message)
    }
}

impl Error for BackendError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|source| source as _)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_cannot_have_taken_effect_or_may_pass_is_retryable() {
        let retryable = [
            ErrorKind::Transport { sent: false },
            ErrorKind::Conflict,
            ErrorKind::Throttled { retry_after: None },
            ErrorKind::Unavailable,
        ];
        let final_ = [
            ErrorKind::Transport { sent: true },
            ErrorKind::NotFound,
            ErrorKind::Invalid,
            ErrorKind::Timeout,
            ErrorKind::SandboxLost,
            ErrorKind::Unsupported,
            ErrorKind::Failed,
        ];
        assert!(retryable.iter().all(|k| k.is_retryable()));
        assert!(final_.iter().all(|k| !k.is_retryable()));
    }

    #[test]
    fn the_message_names_the_cluster_and_the_cause_is_the_source() {
        let io = std::io::Error::other("connection reset");
        let error = BackendError::new(
            ErrorKind::Throttled {
                retry_after: Some(Duration::from_secs(2)),
            },
            "east",
            "claim of template sf-calc: 429 Too Many Requests",
        )
        .with_source(io);
        assert_eq!(
            error.to_string(),
            "east: claim of template sf-calc: 429 Too Many Requests"
        );
        assert_eq!(error.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(error.source().unwrap().to_string(), "connection reset");
        assert_eq!(error.kind().name(), "throttled");
    }
}
