//! How a run uses its fleet: the `[fleet]` settings. They are read from
//! the fleet file as they are (`Deserialize`), with a default for every key
//! and a check of every value, so the file and the engine share one list.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::prepare::PrepareHooks;

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

/// The fleet settings of a run (`[fleet]`; every key is optional).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetSettings {
    /// Warm pool strategy.
    pub strategy: Strategy,
    /// Tasks that run at once.
    #[serde(deserialize_with = "de::positive")]
    pub max_concurrent: u32,
    /// Upper bound of one image's pool.
    #[serde(deserialize_with = "de::positive")]
    pub max_warmpool_size: u32,
    /// Warm one sandbox per task instead of sharing `max_concurrent`.
    pub warm_per_task: bool,
    /// Sandboxes created per warm wave; the next wave starts when these are ready.
    #[serde(deserialize_with = "de::positive")]
    pub warm_create_budget: u32,
    /// Sandbox creations per second across the host; `None` is unlimited.
    /// Whoever builds the clusters makes one [`crate::CreatePace`] of it and
    /// gives it to every cluster (the engine paces by [`crate::Cluster`]'s
    /// `pace`), so runs built together share it.
    #[serde(deserialize_with = "de::rate")]
    pub create_rate: Option<f64>,
    /// The breaker trips when live sandboxes exceed the plan's expectation
    /// times this factor.
    #[serde(deserialize_with = "de::factor")]
    pub overcommit_factor: f64,
    /// The breaker trips above this many live sandboxes, whatever the plan.
    #[serde(deserialize_with = "de::positive")]
    pub max_live_sandboxes: u32,
    /// Passes over the dataset (from `[run] epochs`).
    #[serde(skip)]
    pub epochs: u32,
    /// Rollouts of each task, run as one group from one set-up (set up
    /// once, snapshotted, forked) where the cluster can snapshot; a
    /// dataset row's own `group_size` overrides it. Whoever makes the work
    /// items applies it ([`crate::WorkItem::group`]), as for epochs.
    #[serde(deserialize_with = "de::positive")]
    pub group_size: u32,
    /// Keep pools warm until the run ends instead of releasing them per
    /// window and epoch.
    pub keep_warm: bool,
    /// Reuse a sandbox for later tasks of the same image, after a verified reset.
    pub recycle: bool,
    /// Tasks one sandbox serves before it is released (with `recycle`).
    pub max_reuses: u32,
    /// With `recycle`, where the backend restores sandboxes in place
    /// ([`sandfleet_core::Snapshots`]), reset a used sandbox by restoring
    /// the snapshot taken of it fresh; false (or elsewhere) resets it with
    /// the reset check.
    pub reset_by_snapshot: bool,
    /// How long a claim may wait for a sandbox.
    #[serde(deserialize_with = "de::duration")]
    pub claim_timeout: Duration,
    /// How long a warm wave may take to become ready.
    #[serde(deserialize_with = "de::duration")]
    pub pool_ready_timeout: Duration,
    /// How often the breaker counts live sandboxes.
    #[serde(deserialize_with = "de::duration")]
    pub breaker_interval: Duration,
    /// Average image size in MiB: with it, warm sandboxes held at once are
    /// capped by the nodes' disk.
    pub avg_image_mib: Option<u64>,
    /// Share of the nodes' disk kept free, in percent (with `avg_image_mib`).
    pub disk_headroom_percent: u32,
    /// CPU per sandbox, in millicores.
    #[serde(deserialize_with = "de::positive")]
    pub cpu_milli: u32,
    /// Memory per sandbox in MiB.
    #[serde(deserialize_with = "de::positive")]
    pub memory_mib: u32,
    /// Ephemeral disk per sandbox in MiB.
    #[serde(deserialize_with = "de::positive")]
    pub disk_mib: u32,
    /// Whether sandboxes may use the network.
    pub network: bool,
    /// Bytes of each command's stdout and of its stderr that are kept (and
    /// graded); the rest is dropped, counted and marked. Written in MiB.
    #[serde(rename = "max_output_mib", deserialize_with = "de::mib")]
    pub max_output: u64,
    /// Pull the run's images on every node of every Kubernetes cluster
    /// before the first warm pool (`sandfleet prepull`).
    pub prepull: bool,
    /// Retries the run may spend on requests that are safe to repeat
    /// (claims, pool sizes, releases) after errors that may pass.
    pub retry_budget: u32,
    /// Times a task is run again, on another sandbox, after its sandbox was
    /// lost or its claim failed, before it is an `infra_error`.
    pub infra_retries: u32,
    /// Commands new sandboxes of an image run before they serve (from the
    /// fleet file's `[prepare."<image>"]` and `[adapter.prepare]`).
    #[serde(skip)]
    pub prepare: PrepareHooks,
    /// Image prefixes mapped to a mirror (from `[run] image_rewrite`): what
    /// the backends are asked to make; results keep the task's own image.
    #[serde(skip)]
    pub image_rewrite: ImageRewrite,
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
            image_rewrite: ImageRewrite::default(),
            keep_warm: false,
            recycle: false,
            max_reuses: 8,
            reset_by_snapshot: true,
            group_size: 1,
            claim_timeout: Duration::from_secs(120),
            pool_ready_timeout: Duration::from_secs(300),
            breaker_interval: Duration::from_secs(1),
            avg_image_mib: None,
            disk_headroom_percent: 10,
            cpu_milli: 1000,
            memory_mib: 2048,
            disk_mib: 4096,
            network: false,
            max_output: 16 << 20,
            retry_budget: 200,
            prepull: false,
            infra_retries: 1,
            prepare: PrepareHooks::default(),
        }
    }
}

impl FleetSettings {
    /// The disk cap for sizing, when an average image size is given.
    pub fn disk(&self) -> Option<DiskCap> {
        self.avg_image_mib.map(|avg_image_mib| DiskCap {
            avg_image_mib,
            headroom_percent: self.disk_headroom_percent,
        })
    }
}

/// Image prefixes mapped to a mirror, such as `docker.io/` to an in-region
/// registry: the longest prefix that matches is replaced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageRewrite(Vec<(String, String)>);

impl ImageRewrite {
    /// The rules `prefix → replacement`.
    pub fn new(rules: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut rules: Vec<(String, String)> = rules.into_iter().collect();
        rules.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        ImageRewrite(rules)
    }

    /// `image` with its longest matching prefix replaced (unchanged when
    /// none matches).
    pub fn apply(&self, image: &str) -> String {
        self.0
            .iter()
            .find_map(|(prefix, mirror)| {
                image
                    .strip_prefix(prefix.as_str())
                    .map(|rest| format!("{mirror}{rest}"))
            })
            .unwrap_or_else(|| image.to_string())
    }
}

/// Deserializers that check values as they are read, for the fleet file's
/// other tables too.
pub mod de {
    use super::*;

    /// A whole number of at least 1.
    pub fn positive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
        std::num::NonZeroU32::deserialize(deserializer).map(std::num::NonZeroU32::get)
    }

    /// A duration written as `"90s"`, `"2m"`, `"1h 30m"` (humantime).
    pub fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{text}` is not a duration like \"90s\" or \"2m\": {e}"
            ))
        })
    }

    pub(super) fn mib<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        positive(deserializer).map(|mib| u64::from(mib) << 20)
    }

    pub(super) fn rate<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<f64>, D::Error> {
        let rate = f64::deserialize(deserializer)?;
        if rate > 0.0 && rate.is_finite() {
            Ok(Some(rate))
        } else {
            Err(serde::de::Error::custom(format!(
                "create_rate must be a positive number of creations per second, not {rate}"
            )))
        }
    }

    pub(super) fn factor<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        let factor = f64::deserialize(deserializer)?;
        if factor >= 1.0 && factor.is_finite() {
            Ok(factor)
        } else {
            Err(serde::de::Error::custom(format!(
                "overcommit_factor must be at least 1.0, not {factor}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_is_rewritten() {
        let rewrite = ImageRewrite::new([
            ("docker.io/".to_string(), "mirror.local/hub/".to_string()),
            (
                "docker.io/swebench/".to_string(),
                "mirror.local/swe/".to_string(),
            ),
        ]);
        assert_eq!(
            rewrite.apply("docker.io/library/python:3.12"),
            "mirror.local/hub/library/python:3.12"
        );
        assert_eq!(
            rewrite.apply("docker.io/swebench/sweb.eval:1"),
            "mirror.local/swe/sweb.eval:1"
        );
        assert_eq!(rewrite.apply("ghcr.io/x/y"), "ghcr.io/x/y");
        assert_eq!(ImageRewrite::default().apply("calc"), "calc");
    }
}
