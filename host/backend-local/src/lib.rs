//! sandfleet's embedded local backend: sandboxes on this machine.
//!
//! An image is a named local directory (a source tree or a root
//! filesystem), optionally snapshotted into a one-commit git repository
//! (module `image`). A sandbox is a private copy-on-write view of its image
//! at the workdir, with commands running in their own Linux namespaces
//! (`namespace`, `sandbox`), or, where namespaces are not available, a plain
//! directory with best-effort path mapping. Warm pools keep sandboxes ready
//! to claim (`pool`). Everything a run creates lives under
//! `<state>/runs/<run-id>/` and its processes carry the run id in a marker,
//! so [`reap_run`] removes what a crashed run left from the state directory
//! and `/proc` alone (`state`, `process`). The other modules: `config` (the
//! cluster's TOML table), `backend` (the [`sandfleet_core::Backend`]
//! implementation), `exec` (one command with timeout and streaming),
//! `machine` (capacity), `error`.
//!
//! Not enforced: a template's CPU, memory and disk requests, and sandbox
//! lifetimes (`renew`). Linux only.

mod backend;
mod config;
mod error;
mod exec;
mod image;
mod machine;
mod namespace;
mod pool;
mod process;
mod sandbox;
mod state;

pub use backend::LocalBackend;
pub use config::{ImageSource, IsolationMode, LocalConfig};
pub use error::LocalError;
pub use state::{list_run, reap_run};

/// Runs blocking filesystem work (whole trees, `/proc` scans) off the async
/// worker threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LocalError> + Send + 'static,
) -> Result<T, LocalError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| LocalError::Failed(format!("a blocking task failed: {e}")))?
}
