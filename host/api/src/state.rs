//! What every handler shares.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sandfleet_engine::Session;
use sandfleet_fleet::{FleetConfig, PluginFallback};
use sandfleet_plugin::adapter::{Setting, Task, TaskAdapter};
use sandfleet_plugin::{CallError, Kind, Registry};
use tokio_util::sync::CancellationToken;

use crate::error::AppError;
use crate::leases::LeaseTable;
use crate::metrics::Metrics;
use crate::runs::Runs;
use crate::shared::SharedPools;

/// The daemon's state, cheap to clone.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) session: Session,
    pub(crate) leases: LeaseTable,
    pub(crate) registry: Arc<Registry>,
    pub(crate) adapter: TaskAdapter,
    pub(crate) adapter_settings: Vec<Setting>,
    pub(crate) metrics: Metrics,
    pub(crate) runs: Runs,
    pub(crate) shared: SharedPools,
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
                "shutting_down",
                "the daemon is shutting down",
            ));
        }
        Ok(())
    }

    /// See [`fall_back`].
    pub(crate) fn fall_back(&self, fault: &CallError) -> bool {
        fall_back(&self.registry, self.config.plugins.fallback, fault)
    }

    /// Loads a dataset row through the adapter.
    pub(crate) async fn load_task(&self, row: &serde_json::Value) -> Result<Task, AppError> {
        let text = row.to_string();
        let mut loaded = self.adapter.load(&text, &self.adapter_settings).await;
        if let Err(fault) = &loaded
            && self.fall_back(fault)
        {
            loaded = self.adapter.load(&text, &self.adapter_settings).await;
        }
        loaded.map_err(|e| match &e.kind {
            sandfleet_plugin::CallErrorKind::Declined { message, .. } => {
                AppError::invalid(format!("task: {message}"))
            }
            _ => AppError::from(sandfleet_engine::SessionError::Plugin(e)),
        })
    }
}

/// `[plugins] fallback = "builtin"`: after a plugin fault, a built-in serves
/// under the plugin's name (of the same name, else the kind's default).
/// True when the call may be made again.
pub(crate) fn fall_back(registry: &Registry, fallback: PluginFallback, fault: &CallError) -> bool {
    if fallback != PluginFallback::Builtin || !fault.is_plugin_fault() {
        return false;
    }
    let default = registry
        .status(&fault.plugin.name)
        .and_then(|status| status.serving)
        .map_or("", |serving| match serving.kind {
            Kind::Placement => "least-loaded",
            Kind::Sizing => "proportional",
            Kind::Reset => "git-restore",
            // Another adapter cannot read this one's tasks.
            Kind::Adapter => "",
        });
    registry.fall_back(fault, default).is_some()
}
