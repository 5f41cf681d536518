//! A run from start to end: preflight, plan, the strategy's windows of warm
//! pools and tasks, and teardown, with the breaker watching and the
//! cancellation token honoured throughout.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use sandfleet_core::{BackendError, Reaped, RunId};
use sandfleet_report::events::ClusterEvent;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{RunError, StepError};
use crate::evaluation::Evaluator;
use crate::fleet::{Cluster, Fleet, FleetSpec};
use crate::groups::Groups;
use crate::phases::{Phase, PhaseTimes};
use crate::plan::{self, Plan};
use crate::plugins::{CallsAtStart, Plugins};
use crate::progress::Progress;
use crate::reap::reap;
use crate::recycle::Recycler;
use crate::release::ReleaseQueue;
use crate::report::RunReport;
use crate::results::{ResultsStore, TaskRecord};
use crate::retry::Retries;
use crate::settings::{FleetSettings, Strategy};
use crate::task::{self, TaskRunner, WorkItem};
use crate::timeline::Timeline;
use crate::{breaker, checks, pool_levels, pulls};

/// The report file inside the output directory.
pub const REPORT_FILE: &str = "report.json";

/// Everything a run needs.
pub struct RunSpec {
    /// The run's id; everything it creates carries it.
    pub run_id: RunId,
    /// Fleet settings.
    pub settings: FleetSettings,
    /// The clusters, in configuration order (placement indices).
    pub clusters: Vec<Cluster>,
    /// The plugins; a watcher among them reloads them during the run.
    pub plugins: Plugins,
    /// Where `results.jsonl`, `report.json` and `logs/` go.
    pub out_dir: PathBuf,
    /// Cancelled on SIGINT/SIGTERM: the run stops and tears down.
    pub cancel: CancellationToken,
    /// Progress events.
    pub progress: Arc<dyn Progress>,
}

/// Runs `items` (tasks × epochs) and returns the report, which is also
/// written to `out_dir/report.json`. Finished tasks found in
/// `out_dir/results.jsonl` are skipped.
///
/// # Errors
///
/// When preflight fails, sizing or placement fails, a backend operation the
/// run depends on fails, the breaker trips, or the run is cancelled; in every
/// case after tearing down what the run created, and after writing the report.
pub async fn run(spec: RunSpec, items: Vec<WorkItem>) -> Result<RunReport, RunError> {
    let span = tracing::info_span!("run", run_id = %spec.run_id);
    async move {
        let started = Instant::now();
        let results = Arc::new(ResultsStore::open(&spec.out_dir)?);
        let logs = spec.out_dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let total = items.len();
        let pending: Vec<WorkItem> = items
            .into_iter()
            .filter(|item| !results.is_finished(item.key()))
            .collect();
        let resumed = total - pending.len();
        let timeline = Arc::new(start_timeline(&spec, started));
        spec.progress.started(pending.len(), resumed);
        let mut engine = Engine {
            timeline,
            total: pending.len(),
            retries: Arc::new(Retries::new(spec.settings.retry_budget)),
            calls_at_start: CallsAtStart::take(&spec.plugins.registry),
            plugins_at_start: spec.plugins.serving(),
            spec,
            results: results.clone(),
            phases: Arc::new(PhaseTimes::default()),
            records: Mutex::new(Vec::new()),
            tripped: Arc::new(OnceLock::new()),
            done: AtomicUsize::new(0),
            fleet: None,
            releases: None,
        };
        let outcome = engine.run(pending, logs).await;
        let teardown = engine.teardown().await;
        let error = match (&outcome, &teardown) {
            (Err(e), _) => Some(e.to_string()),
            (Ok(()), Err(e)) => Some(format!("teardown: {e}")),
            _ => None,
        };
        let report = engine.report(started, total, resumed, error);
        let json =
            serde_json::to_vec_pretty(&report).map_err(|e| RunError::Internal(e.to_string()))?;
        std::fs::write(engine.spec.out_dir.join(REPORT_FILE), json)?;
        engine.timeline.plugins(&report.plugins);
        engine.timeline.end();
        draw(&engine.spec.out_dir);
        engine.spec.progress.done();
        outcome?;
        teardown?;
        Ok(report)
    }
    .instrument(span)
    .await
}

/// The run's timeline in `out_dir/events.jsonl`; a run whose timeline
/// cannot be written goes on without its picture.
fn start_timeline(spec: &RunSpec, started: Instant) -> Timeline {
    let clusters = spec
        .clusters
        .iter()
        .map(|cluster| ClusterEvent {
            name: cluster.name.clone(),
            backend: cluster.kind.clone(),
        })
        .collect();
    Timeline::open(
        &spec.out_dir,
        started,
        &spec.run_id.to_string(),
        clusters,
        spec.plugins.serving(),
    )
    .unwrap_or_else(|error| {
        tracing::warn!(%error, "no timeline, so no report.html, for this run");
        Timeline::off()
    })
}

/// Draws `out_dir/report.html` from the run's timeline.
fn draw(out_dir: &std::path::Path) {
    match sandfleet_report::write(out_dir) {
        Ok(written) => tracing::debug!(
            tasks = written.tasks,
            segments = written.segments,
            "drew {}",
            written.path.display()
        ),
        Err(error) => tracing::warn!(%error, "report.html was not written"),
    }
}

pub(crate) struct Engine {
    pub(crate) spec: RunSpec,
    /// What the run did and when, for its picture.
    pub(crate) timeline: Arc<Timeline>,
    /// Plugin calls before the run, so the report counts the run's own.
    pub(crate) calls_at_start: CallsAtStart,
    /// Each role's plugin version when the run started.
    pub(crate) plugins_at_start: std::collections::BTreeMap<String, String>,
    pub(crate) results: Arc<ResultsStore>,
    pub(crate) phases: Arc<PhaseTimes>,
    pub(crate) records: Mutex<Vec<TaskRecord>>,
    pub(crate) retries: Arc<Retries>,
    tripped: Arc<OnceLock<String>>,
    done: AtomicUsize,
    total: usize,
    pub(crate) fleet: Option<Arc<Fleet>>,
    pub(crate) releases: Option<Arc<ReleaseQueue>>,
}

impl Engine {
    /// Everything up to teardown.
    async fn run(&mut self, pending: Vec<WorkItem>, logs: PathBuf) -> Result<(), RunError> {
        let started = Instant::now();
        let checked = checks::preflight(&self.spec.clusters, self.spec.progress.as_ref()).await;
        self.phases.record(Phase::Preflight, started.elapsed());
        checked?;
        checks::images_made(
            &self.spec.clusters,
            pending.iter().map(|item| {
                let image = self.spec.settings.image_rewrite.apply(&item.task.image);
                (image, item.task.id.clone())
            }),
        )?;
        if pending.is_empty() {
            return Ok(());
        }
        let cancel = self.spec.cancel.clone();
        let unpulled = tokio::select! {
            unpulled = self.pull(&pending) => unpulled,
            () = cancel.cancelled() => return Err(RunError::Interrupted),
        };
        let pending = self.without_unpulled(pending, &unpulled)?;
        if pending.is_empty() {
            return Ok(());
        }
        let capacity = checks::capacity(&self.spec.clusters).await?;
        let started = Instant::now();
        let plan = self.plan(&pending, &capacity).await?;
        self.phases.record(Phase::Plan, started.elapsed());
        self.spec.progress.step(&format!(
            "plan: {} image(s) in {} window(s), at most {} warm and {} running at once",
            plan.images.len(),
            plan.windows.len(),
            plan.peak_warm,
            plan.concurrent
        ));
        for bound in &plan.bounds {
            self.spec.progress.step(&format!("plan: {bound}"));
        }
        let fleet = Arc::new(Fleet::new(
            FleetSpec {
                run_id: self.spec.run_id.clone(),
                clusters: self.spec.clusters.clone(),
                capacity,
                images: plan.images.clone(),
                settings: self.spec.settings.clone(),
                placement: self.spec.plugins.placement.clone(),
                timeline: self.timeline.clone(),
            },
            self.phases.clone(),
            self.retries.clone(),
        ));
        self.fleet = Some(fleet.clone());
        let releases = Arc::new(ReleaseQueue::start(
            fleet.clone(),
            self.phases.clone(),
            self.retries.clone(),
            plan.concurrent as usize,
        ));
        self.releases = Some(releases.clone());
        let pool_levels = pool_levels::start(fleet.clone());
        let breaker = breaker::start(
            fleet.clone(),
            &plan,
            &self.spec.settings,
            self.tripped.clone(),
            self.spec.cancel.clone(),
        );
        let runner = Arc::new(TaskRunner {
            recycler: Recycler::new(
                fleet.clone(),
                releases.clone(),
                self.spec.plugins.reset.clone(),
            ),
            evaluator: Evaluator {
                fleet: fleet.clone(),
                releases,
            },
            adapter: self.spec.plugins.adapter.clone(),
            logs,
            groups: Groups::of(&pending),
        });
        let cancel = self.spec.cancel.clone();
        let result = tokio::select! {
            result = self.epochs(&fleet, &runner, &plan, pending) => result,
            () = cancel.cancelled() => Err(RunError::Interrupted),
        };
        breaker.abort();
        if let Some(sampling) = pool_levels {
            sampling.abort();
        }
        match (result, self.tripped.get()) {
            (Err(RunError::Interrupted), Some(reason)) => Err(RunError::Breaker(reason.clone())),
            (result, _) => result,
        }
    }

    /// Lists the images the clusters must fetch, with the bytes, and pulls
    /// them one by one, each pull a `pull` phase. Returns the images that
    /// could not be pulled, each with its error (naming the cluster, the
    /// reference, the registry and what it answered).
    async fn pull(&self, pending: &[WorkItem]) -> HashMap<String, (String, BackendError)> {
        let images: BTreeSet<String> = pending
            .iter()
            .map(|item| self.spec.settings.image_rewrite.apply(&item.task.image))
            .collect();
        let images: Vec<String> = images.into_iter().collect();
        let pulled = pulls::pull(
            &self.spec.clusters,
            &images,
            &self.spec.run_id.labels(),
            self.spec.progress.as_ref(),
        )
        .await;
        for took in pulled.took {
            self.phases.record(Phase::Pull, took);
        }
        pulled.failed
    }

    /// Records every item of `pending` whose image could not be pulled as
    /// an infrastructure error (its pull's), and returns the others.
    fn without_unpulled(
        &self,
        pending: Vec<WorkItem>,
        unpulled: &HashMap<String, (String, BackendError)>,
    ) -> Result<Vec<WorkItem>, RunError> {
        if unpulled.is_empty() {
            return Ok(pending);
        }
        let adapter = self.spec.plugins.adapter.pin();
        let mut runnable = Vec::with_capacity(pending.len());
        for item in pending {
            let image = self.spec.settings.image_rewrite.apply(&item.task.image);
            match unpulled.get(&image) {
                Some((what, error)) => {
                    let error = StepError::backend(what.clone(), error.clone());
                    self.record(task::unstarted(&item, &adapter, error))?;
                }
                None => runnable.push(item),
            }
        }
        Ok(runnable)
    }

    async fn plan(
        &self,
        pending: &[WorkItem],
        capacity: &[sandfleet_core::Capacity],
    ) -> Result<Plan, RunError> {
        // Size for one pass: each task (each member of a group) counts
        // once, whatever its epochs.
        let mut seen = HashSet::new();
        let images = pending
            .iter()
            .filter(|item| seen.insert((item.task.id.as_str(), item.member)))
            .map(|item| item.task.image.as_str());
        let (images, tasks) = plan::image_table(images);
        Ok(plan::plan(
            &self.spec.plugins.sizing,
            &self.spec.settings,
            capacity,
            images,
            tasks,
            plan::forking_clusters(&self.spec.clusters),
        )
        .await?)
    }

    /// Appends a finished task's record and reports it.
    pub(crate) fn record(&self, record: TaskRecord) -> Result<(), RunError> {
        self.results.append(&record)?;
        let log = task::log_name(
            &record.task_id,
            record.epoch,
            record.group.as_ref().map(|group| group.member),
            self.spec.settings.epochs,
        );
        self.timeline
            .task(&record, &std::path::Path::new("logs").join(log));
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        self.spec.progress.finished(&record, done, self.total);
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(record);
        Ok(())
    }

    async fn epochs(
        &self,
        fleet: &Arc<Fleet>,
        runner: &Arc<TaskRunner>,
        plan: &Plan,
        pending: Vec<WorkItem>,
    ) -> Result<(), RunError> {
        let mut by_epoch: BTreeMap<u32, Vec<WorkItem>> = BTreeMap::new();
        for item in pending {
            by_epoch.entry(item.epoch).or_default().push(item);
        }
        let image_of: HashMap<&str, usize> = plan
            .images
            .iter()
            .enumerate()
            .map(|(i, name)| (name.as_str(), i))
            .collect();
        for (epoch, items) in by_epoch {
            if self.spec.settings.epochs > 1 {
                self.spec.progress.step(&format!("epoch {}", epoch + 1));
            }
            let mut per_window: Vec<Vec<WorkItem>> = vec![Vec::new(); plan.windows.len()];
            for item in items {
                let image = image_of[item.task.image.as_str()];
                let window = plan
                    .windows
                    .iter()
                    .position(|w| w.contains(&image))
                    .unwrap_or(0);
                per_window[window].push(item);
            }
            self.strategy(fleet, runner, plan, per_window).await?;
        }
        Ok(())
    }

    /// Warms, runs and unwarms the windows of one epoch in the strategy's order.
    async fn strategy(
        &self,
        fleet: &Arc<Fleet>,
        runner: &Arc<TaskRunner>,
        plan: &Plan,
        per_window: Vec<Vec<WorkItem>>,
    ) -> Result<(), RunError> {
        let keep = self.spec.settings.keep_warm;
        let pools = |window: &[usize]| -> Vec<(usize, u32)> {
            window.iter().map(|&i| (i, plan.replicas[i])).collect()
        };
        let concurrent = plan.concurrent;
        match self.spec.settings.strategy {
            Strategy::None => {
                self.process(
                    runner,
                    per_window.into_iter().flatten().collect(),
                    concurrent,
                )
                .await
            }
            Strategy::Naive => {
                let all: Vec<usize> = plan.windows.iter().flatten().copied().collect();
                self.spec.progress.step("warming every pool");
                fleet.warm(&pools(&all)).await?;
                self.process(
                    runner,
                    per_window.into_iter().flatten().collect(),
                    concurrent,
                )
                .await?;
                if !keep {
                    fleet.unwarm(&all).await?;
                }
                Ok(())
            }
            Strategy::Sliding => {
                for (index, items) in per_window.into_iter().enumerate() {
                    let window = &plan.windows[index];
                    self.spec
                        .progress
                        .step(&format!("warming window {}", index + 1));
                    fleet.warm(&pools(window)).await?;
                    self.process(runner, items, concurrent).await?;
                    if !keep {
                        fleet.unwarm(window).await?;
                    }
                }
                Ok(())
            }
            Strategy::Pipelined => {
                if let Some(first) = plan.windows.first() {
                    self.spec.progress.step("warming window 1");
                    fleet.warm(&pools(first)).await?;
                }
                for (index, items) in per_window.into_iter().enumerate() {
                    let next = plan.windows.get(index + 1);
                    // The next window warms while this one runs: at most two held.
                    let warm_next = async {
                        match next {
                            Some(window) => fleet.warm(&pools(window)).await,
                            None => Ok(()),
                        }
                    };
                    let (ran, warmed) =
                        tokio::join!(self.process(runner, items, concurrent), warm_next);
                    ran?;
                    warmed?;
                    if !keep {
                        fleet.unwarm(&plan.windows[index]).await?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Finishes the releases queued, releases the pools, and asks every
    /// backend to reap what the run still owns.
    async fn teardown(&self) -> Result<Reaped, RunError> {
        let started = Instant::now();
        self.spec.progress.step("tearing down");
        let mut first_error = None;
        if let Some(releases) = &self.releases {
            releases.drain().await;
        }
        if let Some(fleet) = &self.fleet {
            let warm = fleet.warm_images().await;
            if let Err(e) = fleet.unwarm(&warm).await {
                first_error.get_or_insert(e);
            }
        }
        let reaped = reap(&self.spec.clusters, &self.spec.run_id).await;
        self.phases.record(Phase::Teardown, started.elapsed());
        match first_error {
            Some(e) => Err(e),
            None => reaped,
        }
    }
}
