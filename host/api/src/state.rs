//! What every handler shares.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sandfleet_engine::{Session, StepError};
use sandfleet_fleet::FleetConfig;
use sandfleet_plugin::adapter::{Setting, Task};
use tokio_util::sync::CancellationToken;

use crate::domain::errors::RecentErrors;
use crate::domain::leases::LeaseTable;
use crate::domain::pools::SharedPools;
use crate::domain::runs::Runs;
use crate::domain::snapshots::SnapshotTable;
use crate::error::AppError;
use crate::metrics::Metrics;

/// The daemon's state, cheap to clone.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) session: Session,
    pub(crate) leases: LeaseTable,
    pub(crate) snapshots: SnapshotTable,
    pub(crate) adapter_settings: Vec<Setting>,
    pub(crate) metrics: Metrics,
    pub(crate) runs: Runs,
    pub(crate) shared: SharedPools,
    /// The latest requests answered with an error.
    pub(crate) errors: RecentErrors,
    /// HTTP clients and the create pacer every run's clusters share.
    pub(crate) connections: sandfleet_fleet::setup::Connections,
    pub(crate) config: FleetConfig,
    pub(crate) token: Option<String>,
    pub(crate) state_dir: PathBuf,
    pub(crate) ready: AtomicBool,
    /// Cancelled when the daemon stops accepting work.
    pub(crate) stopping: CancellationToken,
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub(crate) fn new(inner: Inner) -> Self {
        AppState(Arc::new(inner))
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Refuses new work once the daemon is stopping.
    pub(crate) fn check_accepting(&self) -> Result<(), AppError> {
        if self.stopping.is_cancelled() {
            return Err(AppError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                crate::error::ErrorKind::ShuttingDown,
                "the daemon is shutting down",
            ));
        }
        Ok(())
    }

    /// Loads a dataset row through the adapter (whose fallback answers
    /// its faults, where configured).
    pub(crate) async fn load_task(&self, row: &serde_json::Value) -> Result<Task, AppError> {
        let loaded = self
            .session
            .adapter()
            .load(&row.to_string(), &self.adapter_settings)
            .await;
        loaded.map_err(|e| match &e.kind {
            sandfleet_plugin::CallErrorKind::Declined { message, .. } => {
                AppError::invalid(format!("task: {message}"))
            }
            _ => AppError::from(StepError::Plugin {
                what: "task".into(),
                source: e,
            }),
        })
    }
}
