//! The contract between the engine and a sandbox backend.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::error::BackendError;
use crate::exec::{ExecRequest, ExecResult, OutputSink};
use crate::run::{Labels, RunId};
use crate::sandbox::{SandboxHandle, TemplateRef, TemplateSpec};

/// What preflight found: hard failures stop a run before anything is created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preflight {
    /// Problems that make the backend unusable.
    pub failures: Vec<String>,
    /// Problems worth knowing about.
    pub warnings: Vec<String>,
    /// What the backend checked and enforces (isolation, limits), for the
    /// operator's record.
    pub notes: Vec<String>,
}

/// What a backend can hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Nodes (machines) sandboxes can run on.
    pub nodes: u32,
    /// Allocatable CPU in millicores.
    pub cpu_milli: u64,
    /// Allocatable memory in MiB.
    pub memory_mib: u64,
    /// Ephemeral disk per node in MiB.
    pub disk_mib_per_node: u64,
    /// Sandboxes that can exist at once.
    pub sandbox_slots: u32,
}

/// A warm pool's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Replicas asked for.
    pub desired: u32,
    /// Warm sandboxes ready to be claimed.
    pub ready: u32,
}

/// What a run owns on a backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    /// Templates.
    pub templates: Vec<String>,
    /// Warm pools.
    pub pools: Vec<String>,
    /// Sandboxes, warm or claimed.
    pub sandboxes: Vec<String>,
}

/// What a reap removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Templates removed.
    pub templates: usize,
    /// Warm pools removed.
    pub pools: usize,
    /// Sandboxes removed.
    pub sandboxes: usize,
    /// Processes killed (backends that run processes).
    pub processes: usize,
}

impl std::ops::AddAssign for Reaped {
    fn add_assign(&mut self, other: Reaped) {
        self.templates += other.templates;
        self.pools += other.pools;
        self.sandboxes += other.sandboxes;
        self.processes += other.processes;
    }
}

/// A sandbox backend: one configured cluster.
///
/// Everything a backend creates carries the labels of the run it was created
/// for ([`crate::RunId::labels`]). Every wait is bounded. Mutating calls are
/// never retried by the backend; `release`, `unwarm` and `reap` are idempotent.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The cluster's configured name.
    fn name(&self) -> &str;

    /// Checks that the backend can be used, before anything is created.
    async fn preflight(&self) -> Preflight;

    /// What the backend can hold now.
    async fn capacity(&self) -> Result<Capacity, BackendError>;

    /// Creates the template if it does not exist; idempotent.
    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError>;

    /// Sets the warm pool of `template` to `replicas` sandboxes. Returns once
    /// the request is accepted; [`Backend::pool_status`] tells when they are
    /// ready.
    async fn warm(&self, template: &TemplateRef, replicas: u32) -> Result<(), BackendError>;

    /// Removes the warm pool of `template` and its unclaimed sandboxes;
    /// idempotent.
    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError>;

    /// The warm pool's state.
    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError>;

    /// Claims a sandbox of `template`: a warm one if there is one, else a new
    /// one. Returns only when the sandbox can run commands, or fails at
    /// `deadline`.
    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError>;

    /// Runs a command to completion or timeout. When `output` is given,
    /// output is also sent there as it is produced.
    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError>;

    /// Writes a file into the sandbox, creating parent directories.
    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError>;

    /// Reads a file from the sandbox.
    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError>;

    /// Makes a claimed sandbox fit to serve another task, before its reset
    /// check runs: stops every process in it but its init, found from
    /// outside the sandbox (nothing a task did can hide one), and checks
    /// that nothing a reset check cannot see has changed (its mounts). An
    /// error means the sandbox must not be reused.
    async fn scrub(&self, sandbox: &SandboxHandle) -> Result<(), BackendError>;

    /// Destroys the sandbox and everything running in it; idempotent.
    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError>;

    /// Extends the sandbox's lifetime to `ttl` from now.
    async fn renew(&self, sandbox: &SandboxHandle, ttl: Duration) -> Result<(), BackendError>;

    /// What `run_id` owns on this backend, including what a crashed run left.
    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError>;

    /// Removes everything `run_id` owns; idempotent.
    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError>;
}
