//! One attempt of a call, and whether a failed one may be made again.

use std::time::Duration;

use sandfleet_core::{BackendError, ErrorKind};

use crate::call::Call;
use crate::failure::HttpFailure;

/// The first pause between attempts; it doubles (jittered) up to
/// [`MAX_PAUSE`], and a server's `Retry-After` lengthens it.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(100);
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(5);

/// How an attempt failed.
#[derive(Debug)]
pub(crate) enum Failed {
    /// The connection failed before the request left.
    NotSent(reqwest::Error),
    /// The request left and no complete answer came back: it may have
    /// taken effect.
    Lost(reqwest::Error),
    /// The request or its answer took longer than the call's timeout.
    TimedOut(reqwest::Error),
    /// The server answered with a failure.
    Status(HttpFailure),
    /// The request could not be made at all (a bad URL).
    Unusable(String),
}

impl Failed {
    /// Classifies a client error by how far the request got.
    pub(crate) fn from_client(error: reqwest::Error) -> Self {
        if error.is_connect() {
            Failed::NotSent(error)
        } else if error.is_timeout() {
            Failed::TimedOut(error)
        } else if error.is_builder() {
            Failed::Unusable(error.to_string())
        } else {
            Failed::Lost(error)
        }
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            Failed::NotSent(_) => ErrorKind::Transport { sent: false },
            Failed::Lost(_) => ErrorKind::Transport { sent: true },
            Failed::TimedOut(_) => ErrorKind::Timeout,
            Failed::Status(failure) => failure.kind(),
            Failed::Unusable(_) => ErrorKind::Invalid,
        }
    }

    /// Whether the same call may be made again: always when it never left
    /// (or the answer proves it was not delivered), else only when making
    /// it twice is harmless and the failure may pass.
    pub(crate) fn may_retry(&self, call: &Call, idempotent: bool) -> bool {
        match self {
            Failed::NotSent(_) => true,
            Failed::Status(failure) if call.not_delivered.is_some_and(|check| check(failure)) => {
                true
            }
            _ if call.retried_by_caller => false,
            Failed::Lost(_) | Failed::TimedOut(_) => idempotent,
            Failed::Status(failure) => {
                idempotent && matches!(failure.status.as_u16(), 429 | 502 | 503)
            }
            Failed::Unusable(_) => false,
        }
    }

    /// What the server asked to wait, if it did.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Failed::Status(failure) => failure.retry_after,
            _ => None,
        }
    }

    /// The core error: the cluster, the call, and what happened, with the
    /// cause as its source.
    pub(crate) fn into_error(self, cluster: &str, call: &Call, attempts: usize) -> BackendError {
        let kind = self.kind();
        let tries = if attempts > 1 {
            format!(" (after {attempts} attempts)")
        } else {
            String::new()
        };
        let described = call.describe();
        match self {
            Failed::Status(failure) => {
                BackendError::new(kind, cluster, format!("{described}: {failure}{tries}"))
                    .with_source(failure)
            }
            Failed::NotSent(error) => BackendError::new(
                kind,
                cluster,
                format!("{described}: cannot connect{tries}: {}", innermost(&error)),
            )
            .with_source(error),
            Failed::Lost(error) => BackendError::new(
                kind,
                cluster,
                format!(
                    "{described}: the connection was lost before a complete answer{tries}: {}",
                    innermost(&error)
                ),
            )
            .with_source(error),
            Failed::TimedOut(error) => {
                BackendError::new(kind, cluster, format!("{described}: timed out{tries}"))
                    .with_source(error)
            }
            Failed::Unusable(error) => {
                BackendError::new(kind, cluster, format!("{described}: {error}"))
            }
        }
    }
}

/// The deepest cause of a client error: "connection refused" rather than
/// "error sending request".
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
