//! A run from start to end: preflight, plan, the strategy's windows of warm
//! pools and tasks, and teardown, with the breaker watching and the
//! cancellation token honoured throughout.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use sandfleet_core::{Capacity, Reaped, RunId};
use sandfleet_plugin::adapter::TaskAdapter;
use sandfleet_plugin::placement::PlacementPolicy;
use sandfleet_plugin::reset::ResetCheck;
use sandfleet_plugin::sizing::SizingPolicy;
use tokio_util::sync::CancellationToken;

use crate::blocking::call_plugin;
use crate::error::RunError;
use crate::fleet::{Cluster, Fleet};
use crate::phases::{Phase, PhaseTimes};
use crate::plan::{self, Plan};
use crate::progress::Progress;
use crate::report::{
    self, ClusterInfo, Environment, Machine, RecycleCounts, RunReport, WarmCounts,
};
use crate::results::{ResultsStore, TaskRecord};
use crate::settings::{FleetSettings, Strategy};
use crate::task::{Lease, TaskRunner, WorkItem};

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
    /// The task adapter.
    pub adapter: TaskAdapter,
    /// The placement policy.
    pub placement: PlacementPolicy,
    /// The sizing policy.
    pub sizing: SizingPolicy,
    /// The reset check, needed for recycling.
    pub reset: Option<ResetCheck>,
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
    let started = Instant::now();
    let results = Arc::new(ResultsStore::open(&spec.out_dir)?);
    let logs = spec.out_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let total = items.len();
    let pending: Vec<WorkItem> = items
        .into_iter()
        .filter(|item| !results.is_finished(&item.task.id, item.epoch))
        .collect();
    let resumed = total - pending.len();
    spec.progress.started(pending.len(), resumed);

    let mut engine = Engine {
        total: pending.len(),
        spec,
        results: results.clone(),
        phases: Arc::new(PhaseTimes::default()),
        records: Mutex::new(Vec::new()),
        tripped: Arc::new(OnceLock::new()),
        done: AtomicUsize::new(0),
        fleet: None,
    };
    let outcome = engine.run(pending, logs).await;
    let teardown = engine.teardown().await;
    let error = match (&outcome, &teardown) {
        (Err(e), _) => Some(e.to_string()),
        (Ok(()), Err(e)) => Some(format!("teardown: {e}")),
        _ => None,
    };
    let report = engine.report(started, total, resumed, error);
    let json = serde_json::to_vec_pretty(&report).map_err(|e| RunError::Internal(e.to_string()))?;
    std::fs::write(engine.spec.out_dir.join(REPORT_FILE), json)?;
    engine.spec.progress.done();
    outcome?;
    teardown?;
    Ok(report)
}

struct Engine {
    spec: RunSpec,
    results: Arc<ResultsStore>,
    phases: Arc<PhaseTimes>,
    records: Mutex<Vec<TaskRecord>>,
    tripped: Arc<OnceLock<String>>,
    done: AtomicUsize,
    total: usize,
    fleet: Option<Arc<Fleet>>,
}

impl Engine {
    /// Everything up to teardown.
    async fn run(&mut self, pending: Vec<WorkItem>, logs: PathBuf) -> Result<(), RunError> {
        self.preflight().await?;
        if pending.is_empty() {
            return Ok(());
        }
        let capacity = self.capacity().await?;
        let started = Instant::now();
        let plan = self.plan(&pending, &capacity).await?;
        self.phases.record(Phase::Plan, started.elapsed());
        self.spec.progress.step(&format!(
            "plan: {} image(s) in {} window(s), at most {} warm at once",
            plan.images.len(),
            plan.windows.len(),
            plan.peak_warm
        ));
        let fleet = Arc::new(Fleet::new(
            self.spec.run_id.clone(),
            self.spec.clusters.clone(),
            capacity,
            plan.images.clone(),
            self.spec.settings.clone(),
            self.spec.placement.clone(),
            self.phases.clone(),
        ));
        self.fleet = Some(fleet.clone());
        let breaker = self.start_breaker(&fleet, &plan);
        let runner = Arc::new(TaskRunner {
            fleet: fleet.clone(),
            adapter: self.spec.adapter.clone(),
            reset: self.spec.reset.clone(),
            settings: self.spec.settings.clone(),
            phases: self.phases.clone(),
            logs,
        });
        let cancel = self.spec.cancel.clone();
        let result = tokio::select! {
            result = self.epochs(&fleet, &runner, &plan, pending) => result,
            () = cancel.cancelled() => Err(RunError::Interrupted),
        };
        breaker.abort();
        match (result, self.tripped.get()) {
            (Err(RunError::Interrupted), Some(reason)) => Err(RunError::Breaker(reason.clone())),
            (result, _) => result,
        }
    }

    async fn preflight(&self) -> Result<(), RunError> {
        let started = Instant::now();
        let mut failures = Vec::new();
        for cluster in &self.spec.clusters {
            let (name, found) = (&cluster.name, cluster.backend.preflight().await);
            for note in found.notes {
                tracing::info!(cluster = %name, "{note}");
            }
            for warning in found.warnings {
                // The progress line is what a user sees; the event is for logs.
                tracing::info!(cluster = %name, "{warning}");
                self.spec
                    .progress
                    .step(&format!("warning: {name}: {warning}"));
            }
            failures.extend(found.failures.into_iter().map(|f| format!("  {name}: {f}")));
        }
        self.phases.record(Phase::Preflight, started.elapsed());
        if failures.is_empty() {
            Ok(())
        } else {
            Err(RunError::Preflight(failures))
        }
    }

    async fn capacity(&self) -> Result<Vec<Capacity>, RunError> {
        let mut capacity = Vec::new();
        for cluster in &self.spec.clusters {
            capacity.push(cluster.backend.capacity().await?);
        }
        Ok(capacity)
    }

    async fn plan(&self, pending: &[WorkItem], capacity: &[Capacity]) -> Result<Plan, RunError> {
        // Size for one pass: each task counts once, whatever its epochs.
        let mut seen = HashSet::new();
        let images = pending
            .iter()
            .filter(|item| seen.insert(item.task.id.as_str()))
            .map(|item| item.task.image.as_str());
        let (images, tasks) = plan::image_table(images);
        let nodes = capacity.iter().map(|c| c.nodes).sum();
        let disk = capacity
            .iter()
            .map(|c| c.disk_mib_per_node)
            .min()
            .unwrap_or(0);
        let limits = plan::limits(&self.spec.settings, disk, nodes);
        let sizing = self.spec.sizing.clone();
        call_plugin(move || plan::plan(&sizing, images, tasks, &limits)).await
    }

    /// Counts live sandboxes every `breaker_interval`; above the limit it
    /// records why and cancels the run.
    fn start_breaker(&self, fleet: &Arc<Fleet>, plan: &Plan) -> tokio::task::JoinHandle<()> {
        let settings = &self.spec.settings;
        let expected = plan.expected_live(settings.max_concurrent);
        let by_factor = (f64::from(expected) * settings.overcommit_factor).ceil() as usize;
        let limit = by_factor.min(settings.max_live_sandboxes as usize);
        let (fleet, tripped, cancel, interval) = (
            fleet.clone(),
            self.tripped.clone(),
            self.spec.cancel.clone(),
            settings.breaker_interval,
        );
        let (factor, max_live) = (settings.overcommit_factor, settings.max_live_sandboxes);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                match fleet.count_live().await {
                    Ok(live) if live > limit => {
                        let _ = tripped.set(format!(
                            "{live} live sandboxes exceed the limit of {limit} (expected {expected} × overcommit_factor {factor}, capped by max_live_sandboxes {max_live}); tore everything down"
                        ));
                        cancel.cancel();
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!("breaker cannot count live sandboxes: {e}"),
                }
            }
        })
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
        match self.spec.settings.strategy {
            Strategy::None => {
                self.process(runner, per_window.into_iter().flatten().collect())
                    .await
            }
            Strategy::Naive => {
                let all: Vec<usize> = plan.windows.iter().flatten().copied().collect();
                self.spec.progress.step("warming every pool");
                fleet.warm(&pools(&all)).await?;
                self.process(runner, per_window.into_iter().flatten().collect())
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
                    self.process(runner, items).await?;
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
                    let (ran, warmed) = tokio::join!(self.process(runner, items), warm_next);
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

    /// Runs `items` with at most `max_concurrent` at once. Each worker keeps
    /// its sandbox for the next task of the same image when recycling.
    async fn process(
        &self,
        runner: &Arc<TaskRunner>,
        items: Vec<WorkItem>,
    ) -> Result<(), RunError> {
        if items.is_empty() {
            return Ok(());
        }
        let workers = (self.spec.settings.max_concurrent as usize)
            .min(items.len())
            .max(1);
        let queue = Arc::new(Mutex::new(Queue::new(items)));
        let (records, mut finished) = tokio::sync::mpsc::unbounded_channel::<TaskRecord>();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..workers {
            let (runner, queue, records) = (runner.clone(), queue.clone(), records.clone());
            set.spawn(async move {
                let mut lease: Option<Lease> = None;
                loop {
                    let held = lease.as_ref().map(|l| l.claimed.image);
                    let next = queue
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .next(held, &runner);
                    let Some(item) = next else { break };
                    let record = runner.run(&item, &mut lease).await;
                    if records.send(record).is_err() {
                        break;
                    }
                }
                if let Some(held) = lease {
                    runner.release(held).await;
                }
            });
        }
        drop(records);
        while let Some(record) = finished.recv().await {
            self.results.append(&record)?;
            let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
            self.spec.progress.finished(&record, done, self.total);
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(record);
        }
        while let Some(joined) = set.join_next().await {
            joined.map_err(|e| RunError::Internal(format!("a worker failed: {e}")))?;
        }
        Ok(())
    }

    /// Releases pools and asks every backend to reap what the run still owns.
    async fn teardown(&self) -> Result<Reaped, RunError> {
        let started = Instant::now();
        self.spec.progress.step("tearing down");
        let mut first_error = None;
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

    fn report(
        &self,
        started: Instant,
        total: usize,
        resumed: usize,
        error: Option<String>,
    ) -> RunReport {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = self.results.previous().to_vec();
        all.extend(records.iter().cloned());
        let mut tasks = report::count(&all);
        tasks.resumed = resumed;
        tasks.not_run = total.saturating_sub(resumed + records.len());
        let counts = self.fleet.as_ref().map(|fleet| &fleet.counts);
        let phases = self.phases.stats();
        RunReport {
            run_id: self.spec.run_id.to_string(),
            wall_s: started.elapsed().as_secs_f64(),
            tasks,
            claims: counts.map_or(0, |c| c.claims.load(Ordering::Relaxed)),
            warm: WarmCounts {
                total: counts.map_or(0, |c| c.warm_total.load(Ordering::Relaxed)),
                peak: counts.map_or(0, |c| c.warm_peak.load(Ordering::Relaxed)),
            },
            recycle: RecycleCounts {
                reused: records.iter().filter(|r| r.reuse > 0).count(),
                quarantined: phases[Phase::Quarantine.name()].count,
            },
            phases,
            environment: Environment {
                sandfleet: env!("CARGO_PKG_VERSION").to_string(),
                clusters: self
                    .spec
                    .clusters
                    .iter()
                    .map(|c| ClusterInfo {
                        name: c.name.clone(),
                        backend: c.kind.clone(),
                    })
                    .collect(),
                machine: Machine::current(),
                plugins: [
                    ("adapter", self.spec.adapter.version()),
                    ("placement", self.spec.placement.version()),
                    ("sizing", self.spec.sizing.version()),
                ]
                .into_iter()
                .chain(self.spec.reset.as_ref().map(|r| ("reset", r.version())))
                .map(|(role, info)| {
                    (
                        role.to_string(),
                        format!("{} {}", info.plugin.name, info.plugin.version),
                    )
                })
                .collect(),
            },
            error,
        }
    }
}

/// The tasks of a window, by image, handed to workers one at a time.
struct Queue {
    by_image: BTreeMap<String, VecDeque<WorkItem>>,
}

impl Queue {
    fn new(items: Vec<WorkItem>) -> Self {
        let mut by_image: BTreeMap<String, VecDeque<WorkItem>> = BTreeMap::new();
        for item in items {
            by_image
                .entry(item.task.image.clone())
                .or_default()
                .push_back(item);
        }
        Queue { by_image }
    }

    /// The next task: of the held sandbox's image when there is one (so a
    /// recycled sandbox is reused), else from the image with most tasks left.
    fn next(&mut self, held_image: Option<usize>, runner: &TaskRunner) -> Option<WorkItem> {
        let held = held_image.map(|index| runner.fleet.images[index].as_str());
        let image = held
            .filter(|image| self.by_image.get(*image).is_some_and(|q| !q.is_empty()))
            .map(str::to_string)
            .or_else(|| {
                self.by_image
                    .iter()
                    .filter(|(_, q)| !q.is_empty())
                    .max_by_key(|(_, q)| q.len())
                    .map(|(image, _)| image.clone())
            })?;
        self.by_image.get_mut(&image)?.pop_front()
    }
}

/// Removes everything `run_id` owns on `clusters`: the end of every run's
/// teardown, and all of `sandfleet reap`.
///
/// # Errors
///
/// The first backend error; the other clusters are still reaped.
pub async fn reap(clusters: &[Cluster], run_id: &RunId) -> Result<Reaped, RunError> {
    let mut reaped = Reaped::default();
    let mut first_error = None;
    for cluster in clusters {
        match cluster.backend.reap(run_id).await {
            Ok(found) => reaped += found,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(reaped),
    }
}
