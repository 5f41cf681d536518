//! The API's request and response bodies, as clients see them (and as the
//! OpenAPI document describes them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/leases`: a sandbox of `image`, or one for a `task` row of the
/// configured adapter.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// An image some cluster can make.
    pub image: Option<String>,
    /// A dataset row of the configured adapter; its image is used and the
    /// adapter's setup runs before the lease is returned.
    #[schema(value_type = Option<Object>)]
    pub task: Option<serde_json::Value>,
    /// Labels kept with the lease (Kubernetes label rules).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The client's own run id, for listing and releasing its leases.
    pub run_id: Option<String>,
    /// Idle time after which the lease is released (default `[api]
    /// idle_timeout`).
    pub ttl_s: Option<u64>,
    /// Where an image lease's reset check looks (default `/workspace`).
    pub workdir: Option<String>,
}

/// `POST /v1/leases:batch`: all of them or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// One acquire per lease.
    pub leases: Vec<AcquireRequest>,
}

/// A lease.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LeaseView {
    /// The lease id, for every other call.
    pub id: String,
    /// The cluster its sandbox runs on.
    pub cluster: String,
    /// The image.
    pub image: String,
    /// The sandbox's id on its cluster.
    pub sandbox: String,
    /// Host name inside the sandbox.
    pub hostname: String,
    /// A network endpoint of the sandbox, where the backend has one.
    pub endpoint: Option<String>,
    /// When it is released unless a call or a renewal comes first (RFC 3339).
    pub expires_at: String,
    /// The task it was acquired for.
    pub task_id: Option<String>,
    /// The client's run id.
    pub run_id: Option<String>,
    /// The client's labels.
    pub labels: BTreeMap<String, String>,
    /// Resets the sandbox went through.
    pub reuses: u32,
    /// Whether the sandbox can serve.
    pub state: LeaseState,
    /// Why the sandbox is gone, when it is: every call on the lease but
    /// `DELETE` answers 410 `sandbox_lost`.
    pub lost: Option<String>,
}

/// A lease's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// Its sandbox serves.
    Ready,
    /// Its sandbox is gone (its lease lapsed, or a call said so); release
    /// the lease and acquire another.
    Lost,
}

/// `{"leases": [...]}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseList {
    /// The leases.
    pub leases: Vec<LeaseView>,
}

/// `POST /v1/leases/{id}/exec`: `argv` or `command`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequestBody {
    /// Program and arguments, run without a shell.
    pub argv: Option<Vec<String>>,
    /// A shell command line, run by `sh -c`.
    pub command: Option<String>,
    /// Killed with everything it started after this many seconds (default 600).
    pub timeout_s: Option<f64>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory in the sandbox.
    pub workdir: Option<String>,
    /// Text written to stdin, which is then closed.
    pub stdin: Option<String>,
    /// Write stderr into stdout as it happens.
    #[serde(default)]
    pub merge_stderr: bool,
}

/// What a command did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecResponse {
    /// Exit status; -1 when killed or not started.
    pub exit_code: i32,
    /// Stdout as UTF-8 (invalid bytes replaced), or base64 with `?encoding=base64`.
    pub stdout: String,
    /// Stderr, encoded as stdout.
    pub stderr: String,
    /// Killed at its timeout.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Bytes of stdout dropped past `[fleet] max_output_mib`.
    pub stdout_dropped: u64,
    /// Bytes of stderr dropped past the limit.
    pub stderr_dropped: u64,
}

/// `POST /v1/leases/{id}/evaluate`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluateRequest {
    /// A dataset row; default: the task the lease was acquired for.
    #[schema(value_type = Option<Object>)]
    pub task: Option<serde_json::Value>,
    /// The candidate solution (a patch).
    pub solution: Option<String>,
}

/// One test's status.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TestView {
    /// Its name.
    pub name: String,
    /// `passed`, `failed`, `skipped`, `error` or `xfail`.
    pub status: String,
}

/// The adapter's grade.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GradeView {
    /// `passed`, `failed` or `error`.
    pub status: String,
    /// The reward; none where the adapter's harness gives none.
    pub reward: Option<f64>,
    /// One line on the status.
    pub detail: String,
    /// Per-test statuses.
    pub tests: Vec<TestView>,
    /// The adapter's native report.
    #[schema(value_type = Object)]
    pub report: serde_json::Value,
}

/// An evaluation, as `sandfleet run` would record it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EvaluateResponse {
    /// `ok`, `failed` or `infra_error`.
    pub status: String,
    /// The grade, when the adapter graded.
    pub grade: Option<GradeView>,
    /// An evaluate command overran its timeout.
    pub timed_out: bool,
    /// Why there is no grade, or why the adapter judged the environment
    /// at fault.
    pub error: Option<String>,
    /// The sign of the environment at fault the adapter found (e.g.
    /// `out_of_memory`), when it made the evaluation an `infra_error`.
    pub infra_failure: Option<String>,
    /// The adapter version that prepared and graded it, `name@version`.
    pub adapter: String,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
}

/// `POST /v1/leases/{id}/recycle`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RecycleResponse {
    /// `clean` (reset and verified) or `replaced` (quarantined; a fresh
    /// sandbox of the same image serves the lease now).
    pub reset: String,
    /// The lease, with its sandbox.
    pub lease: LeaseView,
}

/// `POST /v1/leases/{id}/renew`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// New idle time, in seconds (default: the lease's).
    pub ttl_s: Option<u64>,
}

/// `POST /v1/pools`: images, or task rows whose images are pooled.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolRequest {
    /// Images, each counted once (repeat one to weigh it).
    #[serde(default)]
    pub images: Vec<String>,
    /// Dataset rows; each counts for its image.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub tasks: Vec<serde_json::Value>,
}

/// A warm pool.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PoolView {
    /// The image.
    pub image: String,
    /// Its cluster.
    pub cluster: String,
    /// Replicas the sizing plugin asked for.
    pub desired: u32,
    /// Warm sandboxes ready.
    pub ready: u32,
    /// Why filling failed, if it did.
    pub error: Option<String>,
}

/// `{"pools": [...]}`, with the plan when pools were asked for.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PoolsResponse {
    /// The sizing plugin's replicas per image, for a `POST`.
    pub planned: Option<BTreeMap<String, u32>>,
    /// Every pool.
    pub pools: Vec<PoolView>,
}

/// `POST /v1/shared/{pool}/sessions`: a session pinned to one of the
/// pool's sandboxes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SharedSessionView {
    /// The session id, for `/v1/sessions/{id}/exec` and `DELETE`.
    pub id: String,
    /// The shared pool.
    pub pool: String,
    /// The id of the sandbox it is pinned to.
    pub sandbox: String,
}

/// One slot of a shared pool: a sandbox, or none while it fills or heals.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SharedSlotView {
    /// Its index, 0 to size − 1; a healed sandbox takes its slot's index.
    pub slot: u32,
    /// The sandbox in it now.
    pub sandbox: Option<String>,
    /// It has a sandbox whose last probe (if any) passed.
    pub healthy: bool,
    /// Sessions pinned to its sandbox.
    pub sessions: u32,
    /// Consecutive failed probes of its sandbox.
    pub failed_probes: u32,
    /// Why its last fill failed, while it has no sandbox.
    pub error: Option<String>,
}

/// A sandbox evicted and the one that replaced it in its slot.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HealView {
    /// The slot.
    pub slot: u32,
    /// The evicted sandbox.
    pub evicted: String,
    /// Its replacement.
    pub sandbox: String,
    /// When the heal began (the eviction), in Unix milliseconds.
    pub requested_at_ms: u64,
    /// When the replacement was in the slot, in Unix milliseconds.
    pub healed_at_ms: u64,
}

/// `GET /v1/shared/{pool}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SharedPoolView {
    /// The pool's name.
    pub name: String,
    /// Its sandboxes' image.
    pub image: String,
    /// Sandboxes it keeps (K).
    pub size: u32,
    /// Slots with a healthy sandbox now.
    pub healthy: u32,
    /// Sessions one sandbox takes at most.
    pub max_sessions_per_sandbox: u32,
    /// Sessions open now on a live sandbox.
    pub sessions_open: u64,
    /// Sessions whose sandbox was evicted: they answer `410 session_lost`
    /// until closed or dropped when idle, and count here, not as open.
    pub sessions_lost: u64,
    /// Sessions opened since the daemon started.
    pub sessions_opened: u64,
    /// Sessions dropped for being idle past the pool's idle timeout.
    pub sessions_expired: u64,
    /// Probes that failed (an error, a non-zero exit or no answer in time).
    pub probes_failed: u64,
    /// Sandboxes evicted after consecutive failed probes.
    pub evictions: u64,
    /// Evicted sandboxes replaced in their slot.
    pub heals: u64,
    /// Every slot, in order.
    pub slots: Vec<SharedSlotView>,
    /// The latest heals, oldest first.
    pub recent_heals: Vec<HealView>,
}

/// `{"pools": [...]}` of `GET /v1/shared`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SharedPoolList {
    /// Every shared pool, in the fleet file's order.
    pub pools: Vec<SharedPoolView>,
}

/// `POST /v1/runs`: a fleet file by path, or its text.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// A fleet file on the daemon's machine.
    pub path: Option<String>,
    /// A fleet file's text.
    pub config: Option<String>,
    /// Where relative paths in `config` start (default: the daemon's fleet
    /// file's directory).
    pub base_dir: Option<String>,
    /// The run id (default: generated).
    pub run_id: Option<String>,
}

/// A batch run's progress.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    /// The run id.
    pub id: String,
    /// `running`, `finished`, `failed` or `cancelled`.
    pub state: String,
    /// Tasks to run.
    pub total: usize,
    /// Tasks finished.
    pub done: usize,
    /// Finished as `ok`.
    pub ok: usize,
    /// Finished as `failed`.
    pub failed: usize,
    /// Finished as `infra_error`.
    pub infra_error: usize,
    /// The run's last step (warming a window, tearing down).
    pub step: String,
    /// Why it failed.
    pub error: Option<String>,
    /// The run report, once it ended.
    #[schema(value_type = Option<Object>)]
    pub report: Option<serde_json::Value>,
}

/// `{"runs": [...]}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    /// The runs.
    pub runs: Vec<RunView>,
}

/// A plugin's state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PluginView {
    /// Its name.
    pub name: String,
    /// `placement`, `sizing`, `reset` or `adapter`.
    pub kind: Option<String>,
    /// `sha256:` and 12 hex digits.
    pub version: Option<String>,
    /// `optimized` or `baseline`.
    pub tier: Option<String>,
    /// `built-in` or the file.
    pub source: Option<String>,
    /// When the serving version loaded (RFC 3339).
    pub loaded_at: Option<String>,
    /// The last failed load after the serving version loaded (that
    /// version keeps serving).
    pub last_error: Option<String>,
    /// When.
    pub last_error_at: Option<String>,
    /// The fault after which the built-in fallback answers the serving
    /// version's calls, naming the call and the built-in.
    pub fault: Option<String>,
    /// Calls of the serving version, faulted or not.
    #[serde(default)]
    pub calls: u64,
    /// Calls of the serving version that trapped, overran a limit or
    /// broke the contract.
    #[serde(default)]
    pub faults: u64,
    /// Calls of the serving version the built-in fallback answered.
    pub fallbacks: u64,
    /// The plugin's file was removed and no built-in has its name: it
    /// serves no new lookups.
    pub removed: bool,
}

/// `{"plugins": [...]}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PluginList {
    /// The plugins.
    pub plugins: Vec<PluginView>,
}

/// A request the daemon answered with an error.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorView {
    /// When (RFC 3339, milliseconds).
    pub at: String,
    /// The request's method.
    pub method: String,
    /// The route's template (`/v1/leases/{id}/exec`), or `unmatched`;
    /// never the URL.
    pub route: String,
    /// The status answered.
    pub status: u16,
    /// The error's `kind`.
    pub kind: String,
    /// The message the client was given.
    pub message: String,
}

/// `{"errors": [...]}` of `GET /v1/errors`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorList {
    /// The latest errors (at most 50), newest first.
    pub errors: Vec<ErrorView>,
}

/// `/readyz`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Ready {
    /// Backends preflighted and plugins loaded.
    pub ready: bool,
    /// The daemon's run id: `sandfleet reap --run-id` removes what it owns.
    pub run_id: String,
    /// The clusters.
    pub clusters: Vec<String>,
    /// Plugins serving.
    pub plugins: usize,
    /// Leases live.
    pub leases: usize,
}

/// `POST /v1/leases/{id}/snapshots`: the body may be left out.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// Idle time after which the snapshot is deleted (default `[api]
    /// idle_timeout`).
    pub ttl_s: Option<u64>,
}

/// A snapshot of a lease's sandbox: its files when it was taken.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotView {
    /// The snapshot id, for forks, restores and `DELETE`.
    pub id: String,
    /// The lease it was taken of.
    pub lease: String,
    /// The cluster holding it; its forks and restores are there.
    pub cluster: String,
    /// The image of the lease it was taken of; only sandboxes of this
    /// image can be restored to it.
    pub image: String,
    /// The client run id of the lease it was taken of.
    pub run_id: Option<String>,
    /// Whether a lease can be put back to it in place
    /// (`POST /v1/leases/{id}/restore`) on its cluster.
    pub restores_in_place: bool,
    /// When it was taken (RFC 3339).
    pub created_at: String,
    /// When it is deleted unless a call uses it first (RFC 3339).
    pub expires_at: String,
}

/// `POST /v1/snapshots/{id}/leases`: `count` new leases whose sandboxes
/// start with the snapshot's files, all of them or none, as
/// `POST /v1/leases:batch`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many leases: at least 1, at most `[api] max_leases`.
    pub count: u32,
    /// Labels kept with each lease (Kubernetes label rules).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The client's run id for the new leases (default: the snapshotted
    /// lease's).
    pub run_id: Option<String>,
    /// Idle time after which each lease is released (default `[api]
    /// idle_timeout`).
    pub ttl_s: Option<u64>,
    /// Where their reset check looks (default `/workspace`).
    pub workdir: Option<String>,
}

/// `POST /v1/leases/{id}/restore`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    /// The snapshot to put the lease's sandbox back to: one of a sandbox
    /// of the same image on the same cluster.
    pub snapshot: String,
}
