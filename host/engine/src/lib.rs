//! sandfleet's fleet engine.
//!
//! A run takes tasks through plan → preflight → warm → claim → process →
//! grade → release (or recycle through a verified reset) → teardown. Sizing
//! and placement are decided by plugins; the clusters are [`Backend`]s the
//! engine drives without knowing their kind.
//!
//! Results are appended to `results.jsonl` as each task finishes and a rerun
//! into the same directory skips what is finished; `report.json` holds the
//! [`RunReport`]. A circuit breaker tears everything down when the run owns
//! more sandboxes than its plan explains, and cancelling the run's token
//! (SIGINT/SIGTERM in the CLI) tears down too.
//!
//! [`Backend`]: sandfleet_core::Backend

mod breaker;
mod canary;
mod checks;
mod commands;
mod error;
mod evaluation;
mod fleet;
mod forks;
mod fresh;
mod groups;
mod images;
mod lease;
mod logs;
mod observed;
mod phases;
pub mod plan;
mod plugins;
mod pool_levels;
mod prepare;
mod progress;
pub mod pulls;
mod rate;
mod reap;
mod recycle;
pub mod recycle_estimate;
mod release;
mod report;
pub mod reset;
mod results;
mod retry;
mod run;
mod session;
mod settings;
mod task;
mod text;
mod timeline;
pub mod wall_estimate;
mod workers;

pub use canary::{CanaryReport, canary};
pub use checks::images_made as check_images;
pub use error::{RunError, StepError};
pub use evaluation::Evaluation;
pub use fleet::Cluster;
pub use groups::{GroupCounts, Member};
pub use observed::{BackendCall, CallObserver, Observed, Operation};
pub use phases::{Phase, PhaseStats};
pub use plugins::{PluginServed, Plugins};
pub use prepare::{PREPARE_ATTEMPTS, PrepareHook, PrepareHooks};
pub use progress::{LogProgress, Progress, PullSink};
pub use rate::CreatePace;
pub use reap::reap;
pub use report::{
    ClusterInfo, Environment, InfraFailureCounts, Machine, RecycleCounts, ReleaseCounts, RunReport,
    TaskCounts, WarmCounts,
};
pub use results::{
    AttemptRecord, GradeRecord, GroupRecord, InfraFailureRecord, PluginUse, RESULTS_FILE,
    ResultKey, ResultsStore, TaskPlugins, TaskRecord, TaskStatus, TestRecord, Timings,
};
pub use run::{REPORT_FILE, RunSpec, run};
pub use session::{
    DEFAULT_WORKDIR, Lease, PoolState, Purpose, Recycled, Session, SessionError, SessionSpec,
};
pub use settings::{DiskCap, FleetSettings, ImageRewrite, Strategy, de as settings_de};
pub use task::WorkItem;
pub use text::printable;
pub use tokio_util::sync::CancellationToken;
