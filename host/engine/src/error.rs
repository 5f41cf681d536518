//! The engine's errors: why a step on a sandbox failed ([`StepError`],
//! which keeps the backend's or the plugin's error as its source, with its
//! kind), and why a run failed as a whole ([`RunError`]). Callers decide
//! from the kinds: the engine whether to replace a sandbox, the daemon
//! which status to answer.

use sandfleet_core::{BackendError, ErrorKind};
use sandfleet_plugin::CallError;

/// A step on a sandbox (a claim, a command, a file, a renewal) or a plugin
/// call it depends on that failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A backend call failed; `source` says how ([`BackendError::kind`]).
    #[error("{what}: {source}")]
    Backend {
        /// What the engine was doing, e.g. `claim` or ``exec `sh -c …` ``.
        what: String,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// A plugin call failed: the plugin declined, or faulted with no
    /// fallback to answer in its place.
    #[error("{what}: {source}")]
    Plugin {
        /// What the call was for, e.g. `placement` or `prepare`.
        what: String,
        /// The call's error, naming the plugin, its version and the call.
        #[source]
        source: CallError,
    },
    /// The sandbox is gone: its lease lapsed (its renewals failed for
    /// good), or a call on it said so; its outputs are not graded.
    #[error("{0}")]
    Lost(String),
    /// No sandbox of an image could be prepared: its prepare hook failed or
    /// overran on every sandbox tried.
    #[error("{0}")]
    Prepare(String),
}

impl StepError {
    pub(crate) fn backend(what: impl Into<String>, source: BackendError) -> Self {
        StepError::Backend {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn plugin(what: impl Into<String>, source: CallError) -> Self {
        StepError::Plugin {
            what: what.into(),
            source,
        }
    }

    /// The backend's error, when a backend call failed.
    pub fn backend_error(&self) -> Option<&BackendError> {
        match self {
            StepError::Backend { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The plugin call's error, when a plugin call failed.
    pub fn plugin_error(&self) -> Option<&CallError> {
        match self {
            StepError::Plugin { source, .. } => Some(source),
            _ => None,
        }
    }

    /// Whether the sandbox the step ran on is gone.
    pub fn is_sandbox_lost(&self) -> bool {
        match self {
            StepError::Lost(_) => true,
            StepError::Backend { source, .. } => source.kind() == ErrorKind::SandboxLost,
            _ => false,
        }
    }
}

/// A run that could not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A backend failed its preflight checks; nothing was created.
    #[error("preflight failed:\n{}", .0.join("\n"))]
    Preflight(Vec<String>),
    /// A plugin call the run depends on (sizing, placement) failed.
    #[error(transparent)]
    Plugin(#[from] CallError),
    /// The run cannot be planned.
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    /// A backend operation the run depends on failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A step the run depends on (a warm pool's placement or template, a
    /// prepared pool) failed.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The circuit breaker tripped; everything was torn down.
    #[error("circuit breaker: {0}")]
    Breaker(String),
    /// Stopped by a signal; everything was torn down.
    #[error("interrupted; finished tasks are in the results, rerun to resume")]
    Interrupted,
    /// The results file could not be written.
    #[error("cannot write results")]
    Results(#[from] std::io::Error),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}
