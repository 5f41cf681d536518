//! How a run uses its fleet: the `[fleet]` settings, already validated.

use std::time::Duration;

/// How warm pools follow the run (see the sizing contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// No warm pools: every claim starts a sandbox cold.
    None,
    /// Every pool warm from the start to the end.
    Naive,
    /// One window of images warm at a time.
    Sliding,
    /// Half-size windows; the next warms while the current one runs.
    Pipelined,
}

/// A cap on warm sandboxes from the nodes' ephemeral disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskCap {
    /// Average image size in MiB.
    pub avg_image_mib: u64,
    /// Share of the disk kept free, in percent.
    pub headroom_percent: u32,
}

/// The fleet settings of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSettings {
    /// Warm pool strategy.
    pub strategy: Strategy,
    /// Tasks that run at once.
    pub max_concurrent: u32,
    /// Upper bound of one image's pool.
    pub max_warmpool_size: u32,
    /// Warm one sandbox per task instead of sharing `max_concurrent`.
    pub warm_per_task: bool,
    /// Sandboxes created per warm wave; the next wave starts when these are ready.
    pub warm_create_budget: u32,
    /// Sandbox creations per second across the host; `None` is unlimited.
    pub create_rate: Option<f64>,
    /// The breaker trips when live sandboxes exceed the plan's expectation
    /// times this factor.
    pub overcommit_factor: f64,
    /// The breaker trips above this many live sandboxes, whatever the plan.
    pub max_live_sandboxes: u32,
    /// Passes over the dataset.
    pub epochs: u32,
    /// Keep pools warm until the run ends instead of releasing them per
    /// window and epoch.
    pub keep_warm: bool,
    /// Reuse a sandbox for later tasks of the same image, after a verified reset.
    pub recycle: bool,
    /// Tasks one sandbox serves before it is released (with `recycle`).
    pub max_reuses: u32,
    /// How long a claim may wait for a sandbox.
    pub claim_timeout: Duration,
    /// How long a warm wave may take to become ready.
    pub pool_ready_timeout: Duration,
    /// How often the breaker counts live sandboxes.
    pub breaker_interval: Duration,
    /// Optional disk cap for sizing.
    pub disk: Option<DiskCap>,
    /// Sandbox resources requested per template.
    pub cpu_milli: u32,
    /// Memory per sandbox in MiB.
    pub memory_mib: u32,
    /// Ephemeral disk per sandbox in MiB.
    pub disk_mib: u32,
    /// Whether sandboxes may use the network.
    pub network: bool,
    /// Bytes of each command's stdout and of its stderr that are kept (and
    /// graded); the rest is dropped, counted and marked.
    pub max_output: u64,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            strategy: Strategy::Sliding,
            max_concurrent: 4,
            max_warmpool_size: 32,
            warm_per_task: false,
            warm_create_budget: 16,
            create_rate: None,
            overcommit_factor: 2.0,
            max_live_sandboxes: 256,
            epochs: 1,
            keep_warm: false,
            recycle: false,
            max_reuses: 8,
            claim_timeout: Duration::from_secs(120),
            pool_ready_timeout: Duration::from_secs(300),
            breaker_interval: Duration::from_secs(1),
            disk: None,
            cpu_milli: 1000,
            memory_mib: 2048,
            disk_mib: 4096,
            network: false,
            max_output: 16 << 20,
        }
    }
}
