//! Why a run failed as a whole (as opposed to a task failing).

use sandfleet_core::BackendError;
use sandfleet_plugin::CallError;

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
    /// No sandbox of an image could be prepared (its prepare hook failed or
    /// overran on every sandbox tried).
    #[error("{0}")]
    Prepare(String),
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
