//! sandfleet's daemon: `sandfleet serve FLEET.toml`.
//!
//! An HTTP JSON API (axum on tokio) that RL frameworks call for sandboxes
//! on demand: leases acquired for an image or a task row, commands run
//! buffered or streamed (never twice: `Idempotency-Key`), files, grading
//! through the task adapter, recycling through the reset check, idle
//! expiry; snapshots of a lease's sandbox, leases forked from them and
//! restores to them in place; warm pools sized by the sizing plugin; shared pools of K
//! sandboxes that many sticky sessions ride; whole batch runs; the
//! plugins serving; `/metrics`, `/healthz`, `/readyz` and an OpenAPI
//! document at `/v1/openapi.json`.
//!
//! Everything runs on the engine's [`sandfleet_engine::Session`] under the
//! daemon's run id, so `sandfleet reap --run-id` removes what a killed
//! daemon left, and a restarted one with the same state directory releases
//! it by itself.

mod daemon;
mod domain;
mod error;
mod http;
mod metrics;
mod model;
mod pool_keeper;
mod state;

pub use daemon::{Daemon, Options};
pub use error::{AppError, ErrorKind};
pub use model::{
    AcquireRequest, BatchRequest, ErrorList, ErrorView, EvaluateRequest, EvaluateResponse,
    ExecRequestBody, ExecResponse, ForkRequest, GradeView, HealView, LeaseList, LeaseState,
    LeaseView, PluginList, PluginView, PoolRequest, PoolView, PoolsResponse, Ready,
    RecycleResponse, RenewRequest, RestoreRequest, RunList, RunRequest, RunView, SharedPoolList,
    SharedPoolView, SharedSessionView, SharedSlotView, SnapshotRequest, SnapshotView, TestView,
};

/// The OpenAPI document, as `GET /v1/openapi.json` serves it.
pub fn openapi() -> serde_json::Value {
    use utoipa::OpenApi as _;
    serde_json::to_value(http::ops::ApiDoc::openapi()).unwrap_or_default()
}
