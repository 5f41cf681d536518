//! Prepare hooks: commands that make a new sandbox of an image ready to
//! serve (a Lean toolchain's first `import Mathlib`, which pages in
//! gigabytes once), run once on every new sandbox of the image before any
//! task gets it.
//!
//! Claims of an image with a hook are served only from prepared sandboxes
//! ([`Fleet::claim_ready`]). Where a run or a service warms such an image,
//! the fleet does not ask the backend for a warm pool: it claims and
//! prepares the pool's sandboxes itself ([`Fleet::warm`] calls
//! [`Fleet::fill_prepared`]), keeps them renewed while they wait, and
//! prepares a replacement whenever a claim takes one, so the warm-up is
//! done before any task waits on it. Where nothing is warm, a claim
//! prepares its sandbox before handing it over. A sandbox whose prepare
//! fails or overruns its timeout is released and another takes its place;
//! each is counted (`prepare` phase, `prepare_failed`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandfleet_core::ExecRequest;
use sandfleet_report::events::{MarkKind, SegmentKind};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::error::StepError;
use crate::fleet::{Claimed, Fleet};
use crate::lease::LeaseKeeper;
use crate::phases::Phase;
use crate::text;

/// Sandboxes tried, one after another, before a claim or a pool slot gives
/// up on preparing one.
pub const PREPARE_ATTEMPTS: usize = 3;

/// Output of a prepare command kept for the message of its failure.
const KEPT_OUTPUT: u64 = 64 << 10;

/// Bytes of that output a failure's message quotes, from its end.
const QUOTED_OUTPUT: usize = 600;

/// An image's prepare hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareHook {
    /// Commands (argv lists), run in order; each must exit 0.
    pub commands: Vec<Vec<String>>,
    /// Bound on all of them together; a sandbox still preparing then is
    /// released.
    pub timeout: Duration,
    /// Where they run; the backend's default when `None`.
    pub workdir: Option<String>,
    /// How long a prepare is expected to take, for `sandfleet plan`.
    pub expected: Option<Duration>,
    /// Run in every new sandbox even where the cluster can snapshot (for
    /// a hook whose work belongs to one sandbox); otherwise, there, it runs
    /// once and the image's sandboxes fork from its snapshot
    /// ([`crate::forks`]).
    pub each_sandbox: bool,
}

/// The prepare hooks of a fleet: per image, and one for every image of the
/// adapter's tasks that has none of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrepareHooks {
    images: BTreeMap<String, PrepareHook>,
    adapter: Option<PrepareHook>,
}

impl PrepareHooks {
    /// Hooks for the images in `images` (by the tasks' own image names,
    /// before any `image_rewrite`), and `adapter` for every other image.
    pub fn new(images: BTreeMap<String, PrepareHook>, adapter: Option<PrepareHook>) -> Self {
        PrepareHooks { images, adapter }
    }

    /// The hook new sandboxes of `image` run, if any.
    pub fn for_image(&self, image: &str) -> Option<&PrepareHook> {
        self.images.get(image).or(self.adapter.as_ref())
    }

    /// Whether no image has a hook.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty() && self.adapter.is_none()
    }
}

/// A claimed sandbox ready for a task, with its renewals running.
pub(crate) struct Ready {
    pub(crate) claimed: Claimed,
    pub(crate) lease: LeaseKeeper,
}

/// The prepared sandboxes of one image, waiting for claims.
#[derive(Default)]
struct Pool {
    /// Sandboxes the pool keeps ready; 0 once it is unwarmed.
    target: u32,
    ready: VecDeque<Ready>,
    /// Sandboxes being claimed and prepared for it now.
    filling: u32,
    /// Why the last fill found no sandbox whose prepare passed.
    failed: Option<String>,
    /// The fills, detached from whoever asked for them, so a caller that
    /// goes away cannot strand a sandbox half-prepared.
    fills: TaskTracker,
    stop: CancellationToken,
}

/// Every prepared pool of a fleet, by image index.
#[derive(Default)]
pub(crate) struct PreparedPools {
    pools: std::sync::Mutex<HashMap<usize, Pool>>,
    /// Woken whenever a fill ends.
    changed: Notify,
}

impl PreparedPools {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Pool>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Fleet {
    /// The hook of image `image`, if it has one.
    pub(crate) fn hook(&self, image: usize) -> Option<&PrepareHook> {
        self.settings.prepare.for_image(&self.images[image])
    }

    /// A sandbox of `image` for `task_id`, ready: a prepared one from the
    /// image's pool when it has one ready, else a new claim, prepared here
    /// when the image has a hook (another sandbox replacing each whose
    /// prepare fails, [`PREPARE_ATTEMPTS`] in all).
    pub(crate) async fn claim_ready(
        self: &Arc<Self>,
        image: usize,
        task_id: &str,
    ) -> Result<Ready, StepError> {
        if self.hook(image).is_none() {
            return self.prepare_new(image, task_id, None).await;
        }
        let taken = {
            let mut pools = self.prepared.lock();
            pools.get_mut(&image).and_then(|pool| {
                let ready = pool.ready.pop_front()?;
                // A replacement starts preparing at once.
                if pool.target > 0 {
                    self.spawn_fills(image, pool, 1);
                }
                Some(ready)
            })
        };
        match taken {
            Some(ready) => Ok(ready),
            None => self.prepare_new(image, task_id, None).await,
        }
    }

    /// Keeps `target` prepared sandboxes of `image` (which has a hook)
    /// ready, claiming and preparing what is missing, at most
    /// `warm_create_budget` at once, and returns once they are ready.
    ///
    /// # Errors
    ///
    /// [`StepError::Prepare`] when a sandbox of the pool could not be
    /// prepared (nor [`PREPARE_ATTEMPTS`] sandboxes in its place).
    pub(crate) async fn fill_prepared(
        self: &Arc<Self>,
        image: usize,
        target: u32,
    ) -> Result<(), StepError> {
        let budget = self.settings.warm_create_budget.max(1);
        {
            let mut pools = self.prepared.lock();
            let pool = pools.entry(image).or_default();
            if pool.stop.is_cancelled() {
                *pool = Pool::default();
            }
            self.note_more_warm(target.saturating_sub(pool.target));
            pool.target = pool.target.max(target);
            pool.failed = None;
        }
        loop {
            let changed = self.prepared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut pools = self.prepared.lock();
                let pool = pools.entry(image).or_default();
                if pool.ready.len() as u32 >= target || pool.stop.is_cancelled() {
                    return Ok(());
                }
                if let Some(error) = pool.failed.take() {
                    return Err(StepError::Prepare(error));
                }
                let have = pool.ready.len() as u32 + pool.filling;
                let room = budget.saturating_sub(pool.filling);
                let missing = target.saturating_sub(have).min(room);
                self.spawn_fills(image, pool, missing);
            }
            changed.await;
        }
    }

    /// Starts `count` fills of the pool of `image`.
    fn spawn_fills(self: &Arc<Self>, image: usize, pool: &mut Pool, count: u32) {
        pool.filling += count;
        for _ in 0..count {
            let fleet = Arc::clone(self);
            let stop = pool.stop.clone();
            pool.fills.spawn(
                async move {
                    let filled = fleet.fill_one(image, &stop).await;
                    let unwanted = {
                        let mut pools = fleet.prepared.lock();
                        let pool = pools.entry(image).or_default();
                        pool.filling = pool.filling.saturating_sub(1);
                        match filled {
                            Ok(Some(ready)) if !stop.is_cancelled() && pool.target > 0 => {
                                pool.ready.push_back(ready);
                                None
                            }
                            Ok(unwanted) => unwanted,
                            Err(error) => {
                                tracing::warn!(%error, "filling a prepared pool failed");
                                pool.failed = Some(error.to_string());
                                None
                            }
                        }
                    };
                    if let Some(unwanted) = unwanted {
                        fleet.release_now(&unwanted.claimed).await;
                    }
                    fleet.prepared.changed.notify_waiters();
                }
                .in_current_span(),
            );
        }
    }

    /// Claims and prepares one sandbox for the pool of `image`; `None` when
    /// the pool was stopped first.
    async fn fill_one(
        self: &Arc<Self>,
        image: usize,
        stop: &CancellationToken,
    ) -> Result<Option<Ready>, StepError> {
        match self.prepare_new(image, "prepared-pool", Some(stop)).await {
            Ok(ready) => Ok(Some(ready)),
            Err(_) if stop.is_cancelled() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Claims a sandbox of `image` and runs its hook (an image without one
    /// needs nothing more than the claim), replacing each whose
    /// prepare fails, [`PREPARE_ATTEMPTS`] sandboxes in all. When `stop`
    /// is cancelled, a sandbox being prepared is released and the claim
    /// fails. When the last attempt failed on a backend call, that call's
    /// error is the answer (its kind says whether another try may pass).
    async fn prepare_new(
        &self,
        image: usize,
        task_id: &str,
        stop: Option<&CancellationToken>,
    ) -> Result<Ready, StepError> {
        let Some(hook) = self.hook(image).cloned() else {
            return self.claim(image, task_id).await.map(|claimed| Ready {
                lease: self.keep(&claimed),
                claimed,
            });
        };
        let never = CancellationToken::new();
        let stop = stop.unwrap_or(&never);
        let stopped = || StepError::Prepare("the prepared pool was stopped".into());
        let mut failures = Vec::new();
        for _ in 0..PREPARE_ATTEMPTS {
            let claimed = tokio::select! {
                claimed = self.claim(image, task_id) => claimed?,
                () = stop.cancelled() => return Err(stopped()),
            };
            let lease = self.keep(&claimed);
            if claimed.prepared {
                return Ok(Ready { claimed, lease });
            }
            let started = Instant::now();
            let span = tracing::info_span!("prepare", sandbox = %claimed.handle.id);
            let prepared = tokio::select! {
                prepared = self.run_hook(&claimed, &hook).instrument(span) => prepared,
                () = stop.cancelled() => Err(stopped()),
            };
            if stop.is_cancelled() {
                drop(lease);
                self.release_now(&claimed).await;
                return Err(stopped());
            }
            self.phases.record(Phase::Prepare, started.elapsed());
            self.timeline.segment(
                SegmentKind::Prepare,
                started,
                self.on(&claimed),
                prepared.is_ok(),
            );
            match prepared {
                Ok(()) => {
                    self.counts.prepared.fetch_add(1, Ordering::Relaxed);
                    return Ok(Ready { claimed, lease });
                }
                Err(error) => {
                    tracing::warn!(sandbox = %claimed.handle.id, %error, "prepare failed; the sandbox is released and replaced");
                    self.timeline.mark(
                        MarkKind::Replaced,
                        Some(self.on(&claimed)),
                        &format!("prepare failed: {error}"),
                    );
                    self.counts.prepare_failed.fetch_add(1, Ordering::Relaxed);
                    drop(lease);
                    self.release_now(&claimed).await;
                    failures.push((claimed.handle.id.clone(), error));
                }
            }
        }
        let summary = failures
            .iter()
            .map(|(sandbox, error)| format!("{sandbox}: {error}"))
            .collect::<Vec<_>>()
            .join("; ");
        let what = format!(
            "image `{}`: prepare failed on {PREPARE_ATTEMPTS} sandboxes",
            self.images[image]
        );
        Err(match failures.pop() {
            Some((_, StepError::Backend { source, .. })) => {
                StepError::backend(format!("{what} ({summary}); the last"), source)
            }
            _ => StepError::Prepare(format!("{what}: {summary}")),
        })
    }

    /// Runs `hook` in the sandbox: every command must exit 0 within what is
    /// left of the hook's timeout.
    pub(crate) async fn run_hook(
        &self,
        claimed: &Claimed,
        hook: &PrepareHook,
    ) -> Result<(), StepError> {
        let backend = &self.clusters[claimed.cluster].backend;
        let deadline = Instant::now() + hook.timeout;
        let timeout = humantime::format_duration(hook.timeout);
        for (index, argv) in hook.commands.iter().enumerate() {
            let shown = text::truncated(&argv.join(" "), 200);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StepError::Prepare(format!(
                    "the prepare timeout ({timeout}) ran out before command {index} `{shown}`"
                )));
            }
            let request = ExecRequest {
                argv: argv.clone(),
                workdir: hook.workdir.clone(),
                env: Vec::new(),
                timeout: left,
                merge_stderr: true,
                stdin: None,
                max_output: Some(KEPT_OUTPUT),
            };
            let ran = backend
                .exec(&claimed.handle, &request, None)
                .await
                .map_err(|error| {
                    claimed.note(&error);
                    StepError::backend(format!("prepare command {index} `{shown}`"), error)
                })?;
            if ran.timed_out {
                return Err(StepError::Prepare(format!(
                    "prepare command {index} `{shown}` overran the prepare timeout ({timeout})"
                )));
            }
            if ran.exit_code != 0 {
                let output = String::from_utf8_lossy(&ran.stdout);
                let tail = text::tail(output.trim_end(), QUOTED_OUTPUT);
                return Err(StepError::Prepare(format!(
                    "prepare command {index} `{shown}` exited {}{}",
                    ran.exit_code,
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!(": {tail}")
                    }
                )));
            }
        }
        Ok(())
    }

    /// Renewals for `claimed`, where its backend's sandboxes expire.
    pub(crate) fn keep(&self, claimed: &Claimed) -> LeaseKeeper {
        let backend = &self.clusters[claimed.cluster].backend;
        LeaseKeeper::keep(
            Arc::clone(backend),
            claimed.handle.clone(),
            backend.capabilities().lease_ttl,
            Arc::clone(&self.retries),
        )
    }

    /// Releases a sandbox no task ever had, here and now.
    async fn release_now(&self, claimed: &Claimed) {
        let released = self
            .retries
            .idempotent("release", || self.release_on_backend(claimed))
            .await;
        self.forget_claim(claimed).await;
        if let Err(error) = released {
            // The run's reap at teardown removes it.
            tracing::warn!(sandbox = %claimed.handle.id, %error, "release failed");
        }
    }

    /// Stops the prepared pool of `image`: no more fills, and the sandboxes
    /// it holds are released.
    pub(crate) async fn unwarm_prepared(&self, image: usize) {
        let (ready, fills) = {
            let mut pools = self.prepared.lock();
            let Some(pool) = pools.get_mut(&image) else {
                return;
            };
            self.note_fewer_warm(pool.target);
            pool.target = 0;
            pool.stop.cancel();
            pool.fills.close();
            (std::mem::take(&mut pool.ready), pool.fills.clone())
        };
        fills.wait().await;
        for ready in ready {
            self.release_now(&ready.claimed).await;
        }
    }

    /// Images with a prepared pool.
    pub(crate) fn prepared_images(&self) -> Vec<usize> {
        let pools = self.prepared.lock();
        pools
            .iter()
            .filter(|(_, pool)| pool.target > 0)
            .map(|(&image, _)| image)
            .collect()
    }

    /// `(target, ready)` of the prepared pool of `image`, when it has one.
    pub(crate) fn prepared_pool(&self, image: usize) -> Option<(u32, u32)> {
        let pools = self.prepared.lock();
        pools
            .get(&image)
            .filter(|pool| pool.target > 0)
            .map(|pool| (pool.target, pool.ready.len() as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(command: &str) -> PrepareHook {
        PrepareHook {
            commands: vec![vec!["sh".into(), "-c".into(), command.into()]],
            timeout: Duration::from_secs(60),
            workdir: None,
            expected: None,
            each_sandbox: false,
        }
    }

    #[test]
    fn an_image_s_own_hook_comes_before_the_adapter_s() {
        let hooks = PrepareHooks::new(
            BTreeMap::from([("lean".to_string(), hook("lake build"))]),
            Some(hook("true")),
        );
        assert_eq!(hooks.for_image("lean"), Some(&hook("lake build")));
        assert_eq!(hooks.for_image("python"), Some(&hook("true")));
        let only_images = PrepareHooks::new(BTreeMap::from([("lean".into(), hook("x"))]), None);
        assert_eq!(only_images.for_image("python"), None);
        assert!(PrepareHooks::default().is_empty());
        assert!(!only_images.is_empty());
    }
}
