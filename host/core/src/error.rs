//! Backend errors. Every one is an infrastructure error: it says nothing about
//! the task or the model, and a task that hits one is recorded as
//! `infra_error`, never as a failure.

use std::time::Duration;

/// Why a backend operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot be reached or is not set up.
    #[error("{backend}: unavailable: {detail}")]
    Unavailable {
        /// The cluster name.
        backend: String,
        /// What is wrong.
        detail: String,
    },
    /// A bounded wait ran out.
    #[error("{backend}: timed out after {after:?} waiting for {what}")]
    Timeout {
        /// The cluster name.
        backend: String,
        /// What was awaited.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// The object does not exist (a released sandbox, an unknown template).
    #[error("{backend}: {what} not found")]
    NotFound {
        /// The cluster name.
        backend: String,
        /// What was looked for.
        what: String,
    },
    /// The backend refused the request (bad spec, no capacity, quota).
    #[error("{backend}: refused: {detail}")]
    Rejected {
        /// The cluster name.
        backend: String,
        /// Why.
        detail: String,
    },
    /// Anything else, with the backend's message.
    #[error("{backend}: {detail}")]
    Failed {
        /// The cluster name.
        backend: String,
        /// What happened.
        detail: String,
    },
}

impl BackendError {
    /// Builds a [`BackendError::Failed`].
    pub fn failed(backend: &str, detail: impl std::fmt::Display) -> Self {
        BackendError::Failed {
            backend: backend.to_string(),
            detail: detail.to_string(),
        }
    }
}
