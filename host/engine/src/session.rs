//! Leases: sandboxes a long-running service hands to clients one at a time,
//! over the same machinery a run uses — placement and claims through the
//! fleet, renewals where sandboxes expire, recycling through the reset
//! check, grading through the adapter, releases through the bounded queue —
//! but driven by requests instead of a dataset.
//!
//! A [`Session`] lives as long as the daemon and owns everything it creates
//! under one run id, so [`Session::close`] (or `sandfleet reap --run-id`
//! after a crash) removes all of it. Images are learnt as clients ask for
//! them. A [`Lease`] is one claimed sandbox; the service keeps its own
//! table of leases (ids, idle expiry, persistence) around these calls.
//!
//! Later services build on the same pieces: a shared pool is a set of
//! leases that sessions are pinned to, healed by [`Session::acquire`] in
//! the slot of a lease that [`Lease::lost`] says is gone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandfleet_core::{
    BackendError, Capacity, ErrorKind, ExecRequest, ExecResult, OutputSink, Reaped, RunId,
    SandboxHandle, file_stem,
};
use sandfleet_plugin::CallError;
use sandfleet_plugin::adapter::{
    EvaluationSite, GradeResult, GradeStatus, Task, TaskAdapter, TimeoutRule,
};
use sandfleet_plugin::placement::PlacementPolicy;
use sandfleet_plugin::reset::ResetCheck;
use sandfleet_plugin::sizing::SizingPolicy;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::error::RunError;
use crate::fleet::{Claimed, Cluster, Fleet, FleetSpec};
use crate::fresh::{FreshError, WorkTree, record_work_tree};
use crate::phases::{Phase, PhaseTimes};
use crate::plan::{self, Plan};
use crate::progress::LogProgress;
use crate::recycle::Held;
use crate::release::ReleaseQueue;
use crate::results::TaskStatus;
use crate::retry::Retries;
use crate::settings::{FleetSettings, Strategy};
use crate::task::{TaskRunner, WorkItem};
use crate::{checks, reap};

/// Where an image lease's commands start and its reset check looks, unless
/// the client says: the local backend's image root.
pub const DEFAULT_WORKDIR: &str = "/workspace";

/// Releases waiting at once before an acquire waits for the queue.
const RELEASE_BACKLOG: usize = 256;

/// Everything a session needs.
pub struct SessionSpec {
    /// Everything the session creates carries this run id.
    pub run_id: RunId,
    /// Fleet settings (claim timeout, limits per sandbox, recycling).
    pub settings: FleetSettings,
    /// The clusters, in configuration order (placement indices).
    pub clusters: Vec<Cluster>,
    /// The task adapter, for task leases and evaluation.
    pub adapter: TaskAdapter,
    /// The placement policy.
    pub placement: PlacementPolicy,
    /// The sizing policy, for warm pools.
    pub sizing: SizingPolicy,
    /// The reset check, for recycling.
    pub reset: Option<ResetCheck>,
    /// Where evaluation logs go, one file per lease.
    pub logs: PathBuf,
    /// Told of every plugin fault the session meets in a placement,
    /// adapter or sizing call; when it answers true (a built-in serves
    /// now), the call (for placement, the claim) is made once more.
    pub on_plugin_fault: Option<FaultHandler>,
}

/// See [`SessionSpec::on_plugin_fault`].
pub type FaultHandler = Arc<dyn Fn(&CallError) -> bool + Send + Sync>;

/// Why a session call failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The request cannot be served as it is (an image no cluster makes, a
    /// task of another image than the lease's).
    #[error("{0}")]
    Invalid(String),
    /// No sandbox could be had (claim timed out, clusters full or down).
    #[error("{0}")]
    Unavailable(String),
    /// The lease's sandbox is gone; the lease cannot serve any more.
    #[error("{0}")]
    Lost(String),
    /// A backend call failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A plugin call failed.
    #[error(transparent)]
    Plugin(#[from] CallError),
    /// The session's own machinery failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// What a lease is for.
#[derive(Debug, Clone)]
pub enum Purpose {
    /// Any sandbox of this image; its commands start in `workdir`.
    Image {
        /// The image.
        image: String,
        /// Where commands start and the reset check looks.
        workdir: String,
    },
    /// A sandbox for this task: its image, with the adapter's setup run.
    Task(Task),
}

/// One claimed sandbox, from acquire to release.
pub struct Lease {
    /// Always a sandbox, except while recycling replaces it.
    held: Option<Held>,
    image: usize,
    image_name: String,
    /// The task the reset check and evaluation use by default.
    task: Task,
    /// Acquired for a task, whose setup runs in every sandbox it gets.
    for_task: bool,
    /// The adapter's setup has run in this sandbox for this task.
    set_up_for: Option<String>,
    /// The workdir as setup left it, where the task's script evaluates in
    /// a fresh sandbox: the work is what changed since.
    work_tree: Option<WorkTree>,
    /// Names this lease's log file.
    name: String,
}

impl Lease {
    fn held(&self) -> &Held {
        self.held.as_ref().expect("a lease holds a sandbox")
    }

    /// The sandbox.
    pub fn handle(&self) -> &SandboxHandle {
        &self.held().claimed.handle
    }

    /// The image.
    pub fn image(&self) -> &str {
        &self.image_name
    }

    /// The task the lease was acquired for, or the image's stand-in task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// Why the sandbox is gone, when its renewals failed or a call on it
    /// said so.
    pub fn lost(&self) -> Option<&str> {
        self.held().lost()
    }

    /// Resets the sandbox has been through.
    pub fn reuses(&self) -> u32 {
        self.held().served
    }
}

/// How a recycle went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recycled {
    /// The reset check judged the sandbox clean; it serves again.
    Clean,
    /// It could not be reset (no reset check, no baseline, too many reuses,
    /// a dirty verdict): it was quarantined and a fresh sandbox replaces it.
    Replaced,
}

/// An evaluation's outcome, as a run would record it.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// `ok` when graded as passed, `failed` when graded otherwise or not
    /// gradable, `infra_error` when the infrastructure failed.
    pub status: TaskStatus,
    /// The adapter's grade, when it graded.
    pub grade: Option<GradeResult>,
    /// An evaluate command overran its timeout.
    pub timed_out: bool,
    /// What went wrong, when there is no grade.
    pub error: Option<String>,
    /// Wall time of the evaluation.
    pub duration: Duration,
}

/// A warm pool of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    /// The image.
    pub image: String,
    /// The cluster placement put it on.
    pub cluster: String,
    /// Replicas the sizing plugin asked for.
    pub desired: u32,
    /// Warm sandboxes ready now.
    pub ready: u32,
    /// Why filling it failed, if it did.
    pub error: Option<String>,
}

/// Leases and warm pools over a fleet, for a long-running service.
pub struct Session {
    run_id: RunId,
    runner: Arc<TaskRunner>,
    sizing: SizingPolicy,
    capacity: Vec<Capacity>,
    settings: FleetSettings,
    on_plugin_fault: Option<FaultHandler>,
    /// Image index → the fill of its pool (running or finished).
    pools: Mutex<BTreeMap<usize, PoolFill>>,
}

struct PoolFill {
    filling: JoinHandle<Result<(), RunError>>,
    failed: Arc<Mutex<Option<String>>>,
}

impl Session {
    /// Checks every cluster (preflight and capacity) and starts the release
    /// queue.
    ///
    /// # Errors
    ///
    /// When a cluster fails preflight or cannot tell its capacity.
    pub async fn start(spec: SessionSpec) -> Result<Self, RunError> {
        checks::preflight(&spec.clusters, &LogProgress).await?;
        let capacity = checks::capacity(&spec.clusters).await?;
        std::fs::create_dir_all(&spec.logs)?;
        let phases = Arc::new(PhaseTimes::default());
        let retries = Arc::new(Retries::new(spec.settings.retry_budget));
        let mut settings = spec.settings.clone();
        // Recycling needs a baseline from each fresh sandbox.
        settings.recycle = settings.recycle && spec.reset.is_some();
        let fleet = Arc::new(Fleet::new(
            FleetSpec {
                run_id: spec.run_id.clone(),
                clusters: spec.clusters,
                capacity: capacity.clone(),
                images: Vec::new(),
                settings: settings.clone(),
                placement: spec.placement,
            },
            phases.clone(),
            retries.clone(),
        ));
        let releases = Arc::new(ReleaseQueue::start(
            fleet.clone(),
            phases.clone(),
            retries.clone(),
            RELEASE_BACKLOG,
        ));
        let runner = TaskRunner {
            fleet,
            adapter: spec.adapter,
            reset: spec.reset,
            settings: settings.clone(),
            phases,
            retries,
            releases,
            logs: spec.logs,
        };
        Ok(Session {
            run_id: spec.run_id,
            runner: Arc::new(runner),
            sizing: spec.sizing,
            capacity,
            settings,
            on_plugin_fault: spec.on_plugin_fault,
            pools: Mutex::new(BTreeMap::new()),
        })
    }

    /// Makes a pure plugin call, and once more after a fault the fault
    /// handler answered by making a built-in serve.
    async fn plugin_call<T, F, Fut>(&self, call: F) -> Result<T, CallError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        match call().await {
            Err(fault)
                if fault.is_plugin_fault()
                    && self.on_plugin_fault.as_ref().is_some_and(|h| h(&fault)) =>
            {
                call().await
            }
            answer => answer,
        }
    }

    /// The session's run id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The clusters.
    pub fn clusters(&self) -> &[Cluster] {
        &self.runner.fleet.clusters
    }

    /// Checks that some cluster can make `image`.
    ///
    /// # Errors
    ///
    /// [`SessionError::Invalid`] naming the image.
    pub fn check_image(&self, image: &str) -> Result<(), SessionError> {
        // What a cluster is asked for is the image after `[run]
        // image_rewrite`, as in a run.
        let asked = self.settings.image_rewrite.apply(image);
        checks::images_made(self.clusters(), [(asked, "this request".to_string())]).map_err(|_| {
            SessionError::Invalid(format!(
                "image `{image}`: no cluster can make it (clusters: {})",
                self.clusters()
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// Claims a sandbox for `purpose` (a warm one where a pool has one),
    /// records the reset check's baseline when recycling is on, and for a
    /// task runs the adapter's setup commands. `name` (unique per lease)
    /// names its sandbox's task label and its log.
    ///
    /// # Errors
    ///
    /// [`SessionError::Invalid`] for an image no cluster makes,
    /// [`SessionError::Unavailable`] when no sandbox could be claimed, and
    /// the adapter's or backend's error when setup could not run (the
    /// sandbox is released then).
    pub async fn acquire(&self, name: &str, purpose: Purpose) -> Result<Lease, SessionError> {
        let (task, for_task) = match purpose {
            Purpose::Image { image, workdir } => (
                Task {
                    id: name.to_string(),
                    image,
                    workdir,
                    data: String::new(),
                },
                false,
            ),
            Purpose::Task(task) => (task, true),
        };
        self.check_image(&task.image)?;
        let image = self.runner.fleet.images.intern(&task.image);
        let mut held = None;
        let labelled = Task {
            id: name.to_string(),
            ..task.clone()
        };
        let mut claimed = self.runner.sandbox_for(image, &labelled, &mut held).await;
        // Placement runs inside the claim: a fault it recorded may be
        // answered by a built-in, and the claim made once more.
        let fault = self
            .runner
            .fleet
            .placement_fault
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if claimed.is_err()
            && let Some(fault) = fault
            && self.on_plugin_fault.as_ref().is_some_and(|h| h(&fault))
        {
            claimed = self.runner.sandbox_for(image, &labelled, &mut held).await;
        }
        claimed.map_err(SessionError::Unavailable)?;
        let mut lease = Lease {
            held,
            image,
            image_name: task.image.clone(),
            task,
            for_task,
            set_up_for: None,
            work_tree: None,
            name: name.to_string(),
        };
        if for_task && let Err(error) = self.set_up(&mut lease).await {
            self.release(lease);
            return Err(error);
        }
        Ok(lease)
    }

    /// Runs the adapter's setup commands for the lease's task.
    async fn set_up(&self, lease: &mut Lease) -> Result<(), SessionError> {
        let adapter = &self.runner.adapter;
        let script = self
            .plugin_call(|| adapter.prepare(&lease.task, None))
            .await?;
        let claimed = lease.held().claimed.clone();
        let env: Vec<(String, String)> = script
            .env
            .iter()
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect();
        self.runner
            .run_commands(
                &claimed,
                &script.setup,
                &script.workdir,
                &env,
                Some(self.log_path(lease)),
            )
            .await
            .map_err(|e| SessionError::Unavailable(format!("setup: {e}")))?;
        lease.work_tree = match script.evaluate_in {
            EvaluationSite::WorkSandbox => None,
            EvaluationSite::FreshSandbox => {
                let backend = &self.runner.fleet.clusters[claimed.cluster].backend;
                match record_work_tree(backend.as_ref(), &claimed.handle, &script.workdir).await {
                    Ok(tree) => Some(tree),
                    Err(FreshError::Infra(e) | FreshError::Unusable(e)) => {
                        return Err(SessionError::Unavailable(format!("setup: {e}")));
                    }
                }
            }
        };
        lease.set_up_for = Some(lease.task.id.clone());
        Ok(())
    }

    fn log_path(&self, lease: &Lease) -> PathBuf {
        self.runner
            .logs
            .join(format!("{}.log", file_stem(&lease.name)))
    }

    /// Runs one command in the lease's sandbox; output also goes to
    /// `output` as it is produced. Never retried.
    ///
    /// # Errors
    ///
    /// [`SessionError::Lost`] when the sandbox is gone, else the backend's error.
    pub async fn exec(
        &self,
        lease: &Lease,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, SessionError> {
        if let Some(lost) = lease.lost() {
            return Err(SessionError::Lost(lost.to_string()));
        }
        let claimed = &lease.held().claimed;
        let span = tracing::info_span!(
            "exec",
            sandbox = %claimed.handle.id,
            program = request.argv.first().map_or("", String::as_str)
        );
        let backend = &self.runner.fleet.clusters[claimed.cluster].backend;
        backend
            .exec(&claimed.handle, request, output)
            .instrument(span)
            .await
            .map_err(|error| noted(claimed, error))
    }

    /// Writes a file into the lease's sandbox.
    ///
    /// # Errors
    ///
    /// As [`Session::exec`].
    pub async fn put_file(
        &self,
        lease: &Lease,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), SessionError> {
        let claimed = &lease.held().claimed;
        self.runner.fleet.clusters[claimed.cluster]
            .backend
            .put_file(&claimed.handle, path, contents, mode)
            .await
            .map_err(|error| noted(claimed, error))
    }

    /// Reads a file from the lease's sandbox.
    ///
    /// # Errors
    ///
    /// As [`Session::exec`].
    pub async fn get_file(&self, lease: &Lease, path: &str) -> Result<Vec<u8>, SessionError> {
        let claimed = &lease.held().claimed;
        self.runner.fleet.clusters[claimed.cluster]
            .backend
            .get_file(&claimed.handle, path)
            .await
            .map_err(|error| noted(claimed, error))
    }

    /// Evaluates `task` (default: the lease's) with `solution` in the
    /// lease's sandbox, as a run would: the adapter's setup unless it ran
    /// here already, its files, its evaluate commands, then its grade.
    ///
    /// # Errors
    ///
    /// [`SessionError::Invalid`] when the task is of another image. Every
    /// other failure is an [`Evaluation`] with its status.
    pub async fn evaluate(
        &self,
        lease: &mut Lease,
        task: Option<Task>,
        solution: Option<&str>,
    ) -> Result<Evaluation, SessionError> {
        let task = task.unwrap_or_else(|| lease.task.clone());
        if task.image != lease.image_name {
            return Err(SessionError::Invalid(format!(
                "task `{}` runs in image `{}`, but this lease holds a sandbox of `{}`",
                task.id, task.image, lease.image_name
            )));
        }
        let started = Instant::now();
        let span = tracing::info_span!("evaluate", task = %task.id, sandbox = %lease.handle().id);
        let mut evaluation = self
            .grade_in_lease(lease, &task, solution)
            .instrument(span)
            .await;
        evaluation.duration = started.elapsed();
        Ok(evaluation)
    }

    async fn grade_in_lease(
        &self,
        lease: &mut Lease,
        task: &Task,
        solution: Option<&str>,
    ) -> Evaluation {
        let ungraded = |status, error: String, timed_out| Evaluation {
            status,
            grade: None,
            timed_out,
            error: Some(error),
            duration: Duration::ZERO,
        };
        let adapter = &self.runner.adapter;
        let mut script = match self.plugin_call(|| adapter.prepare(task, solution)).await {
            Ok(script) => script,
            Err(e) if !e.is_plugin_fault() => {
                return ungraded(
                    TaskStatus::Failed,
                    format!("the adapter cannot prepare this task: {e}"),
                    false,
                );
            }
            Err(e) => return ungraded(TaskStatus::InfraError, format!("prepare: {e}"), false),
        };
        let set_up_here = lease.set_up_for.as_deref() == Some(task.id.as_str());
        // The log is the lease's: many leases may evaluate one task at once.
        let item = WorkItem {
            task: Task {
                id: lease.name.clone(),
                ..task.clone()
            },
            solution: solution.map(str::to_string),
            epoch: 0,
        };
        let claimed = lease.held().claimed.clone();
        let started = Instant::now();
        let mut solution = solution.map(str::to_string);
        let ran = match (script.evaluate_in, &lease.work_tree) {
            (EvaluationSite::WorkSandbox, _) => {
                if set_up_here {
                    script.setup.clear();
                }
                let ran = self.runner.execute(&claimed, &item, &script).await;
                self.runner.phases.record(Phase::Process, started.elapsed());
                ran
            }
            // The client's work since setup, graded in a sandbox it never touched.
            (EvaluationSite::FreshSandbox, tree) => {
                // The adapter prepares the task's changes: its own id.
                let item = WorkItem {
                    task: task.clone(),
                    ..item
                };
                let fresh = match tree.as_ref().filter(|_| set_up_here) {
                    Some(since) => {
                        self.runner
                            .evaluate_fresh(&claimed, since, &item, &script)
                            .await
                    }
                    None => {
                        self.runner
                            .set_up_then_evaluate_fresh(&claimed, &item, &script)
                            .await
                    }
                };
                match fresh {
                    Ok(fresh) => {
                        solution = fresh.solution;
                        Ok(fresh.ran)
                    }
                    Err(FreshError::Infra(error)) => Err(error),
                    Err(FreshError::Unusable(error)) => {
                        return ungraded(TaskStatus::Failed, error, false);
                    }
                }
            }
        };
        let solution = solution.as_deref();
        lease.set_up_for = Some(task.id.clone());
        let outputs = match (ran, lease.lost()) {
            (_, Some(lost)) => return ungraded(TaskStatus::InfraError, lost.to_string(), false),
            (Err(error), None) => return ungraded(TaskStatus::InfraError, error, false),
            (Ok(ran), None) => ran.outputs,
        };
        let timed_out = outputs.iter().any(|o| o.timed_out);
        if timed_out && script.timeout_rule == TimeoutRule::Error {
            let which = outputs.iter().position(|o| o.timed_out).unwrap_or_default();
            return ungraded(
                TaskStatus::Failed,
                format!(
                    "evaluate command {which} overran its timeout; not graded (timeout rule: error)"
                ),
                true,
            );
        }
        let started = Instant::now();
        let graded = self
            .plugin_call(|| adapter.grade(task, solution, &outputs))
            .await;
        self.runner.phases.record(Phase::Grade, started.elapsed());
        match graded {
            Ok(grade) => Evaluation {
                status: if grade.status == GradeStatus::Passed {
                    TaskStatus::Ok
                } else {
                    TaskStatus::Failed
                },
                grade: Some(grade),
                timed_out,
                error: None,
                duration: Duration::ZERO,
            },
            Err(e) if !e.is_plugin_fault() => ungraded(
                TaskStatus::Failed,
                format!("the adapter cannot grade this task: {e}"),
                timed_out,
            ),
            Err(e) => ungraded(TaskStatus::InfraError, format!("grade: {e}"), timed_out),
        }
    }

    /// Makes the lease's sandbox fit for its next use: scrubbed, reset and
    /// verified by the reset check; when that cannot be done, the sandbox
    /// is quarantined and a fresh one of the same image replaces it. A task
    /// lease's setup runs again either way.
    ///
    /// # Errors
    ///
    /// When no fresh sandbox could be claimed: the lease is then gone (its
    /// sandbox was released).
    pub async fn recycle(&self, lease: &mut Lease) -> Result<Recycled, SessionError> {
        let before = lease.handle().id.clone();
        let labelled = Task {
            id: lease.name.clone(),
            ..lease.task.clone()
        };
        self.runner
            .sandbox_for(lease.image, &labelled, &mut lease.held)
            .await
            .map_err(SessionError::Unavailable)?;
        let recycled = if lease.handle().id == before {
            if let Some(held) = lease.held.as_mut() {
                held.served += 1;
            }
            Recycled::Clean
        } else {
            Recycled::Replaced
        };
        lease.set_up_for = None;
        lease.work_tree = None;
        if lease.for_task {
            self.set_up(lease).await?;
        }
        Ok(recycled)
    }

    /// Hands the lease's sandbox to the release queue; returns at once.
    pub fn release(&self, mut lease: Lease) {
        if let Some(held) = lease.held.take() {
            self.runner.release(held);
        }
        let _ = std::fs::remove_file(self.log_path(&lease));
    }

    /// Renews the sandbox for its backend's lease time, on backends whose
    /// sandboxes expire (a no-op on the others, which keep it until it is
    /// released).
    ///
    /// # Errors
    ///
    /// The backend's error; [`SessionError::Lost`] when the sandbox is gone.
    pub async fn renew(&self, lease: &Lease) -> Result<(), SessionError> {
        let claimed = &lease.held().claimed;
        let backend = &self.runner.fleet.clusters[claimed.cluster].backend;
        let Some(ttl) = backend.capabilities().lease_ttl else {
            return Ok(());
        };
        self.runner
            .retries
            .idempotent("renewal", || backend.renew(&claimed.handle, ttl))
            .await
            .map_err(lost_or_backend)
    }

    /// Releases a sandbox found from a handle persisted by an earlier
    /// process (it holds no lease here).
    ///
    /// # Errors
    ///
    /// When its cluster is not configured, or the backend fails.
    pub async fn release_handle(&self, handle: &SandboxHandle) -> Result<(), SessionError> {
        let cluster = self
            .clusters()
            .iter()
            .find(|c| c.name == handle.cluster)
            .ok_or_else(|| {
                SessionError::Invalid(format!(
                    "sandbox {}: cluster `{}` is not configured",
                    handle.id, handle.cluster
                ))
            })?;
        self.runner
            .retries
            .idempotent("release", || cluster.backend.release(handle))
            .await
            .map_err(SessionError::from)
    }

    /// Sizes warm pools for `images` (one entry per task, so an image's
    /// count weighs its pool) with the sizing plugin, as `sandfleet plan`
    /// does, and starts filling them; returns the plan at once.
    ///
    /// # Errors
    ///
    /// When an image cannot be made or the sizing plugin fails.
    pub async fn warm<'a>(
        &self,
        images: impl IntoIterator<Item = &'a str>,
    ) -> Result<Plan, SessionError> {
        let (names, tasks) = plan::image_table(images);
        for image in &names {
            self.check_image(image)?;
        }
        let mut settings = self.settings.clone();
        // Every pool at once: a service has no windows to slide through.
        settings.strategy = Strategy::Naive;
        let plan = self
            .plan(&settings, names, tasks)
            .await
            .map_err(RunError::from)?;
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        for (name, &replicas) in plan.images.iter().zip(&plan.replicas) {
            let image = self.runner.fleet.images.intern(name);
            if let Some(previous) = pools.remove(&image) {
                previous.filling.abort();
            }
            let fleet = self.runner.fleet.clone();
            let failed = Arc::new(Mutex::new(None));
            let noted = failed.clone();
            let filling = tokio::spawn(
                async move {
                    let warmed = fleet.warm(&[(image, replicas)]).await;
                    if let Err(error) = &warmed {
                        tracing::warn!(%error, "filling a warm pool failed");
                        *noted.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
                    }
                    warmed
                }
                .in_current_span(),
            );
            pools.insert(image, PoolFill { filling, failed });
        }
        Ok(plan)
    }

    /// The sizing plugin's plan, made once more after a fault as
    /// [`Session::plugin_call`] does.
    async fn plan(
        &self,
        settings: &FleetSettings,
        names: Vec<String>,
        tasks: Vec<u32>,
    ) -> Result<Plan, plan::PlanError> {
        let planned = plan::plan(
            &self.sizing,
            settings,
            &self.capacity,
            names.clone(),
            tasks.clone(),
        )
        .await;
        match planned {
            Err(plan::PlanError::Policy(fault))
                if fault.is_plugin_fault()
                    && self.on_plugin_fault.as_ref().is_some_and(|h| h(&fault)) =>
            {
                plan::plan(&self.sizing, settings, &self.capacity, names, tasks).await
            }
            planned => planned,
        }
    }

    /// Removes the warm pool of `image` and its unclaimed sandboxes (leases
    /// already claimed from it are untouched). Returns whether there was one.
    ///
    /// # Errors
    ///
    /// When the backend could not remove the pool.
    pub async fn unwarm(&self, image: &str) -> Result<bool, SessionError> {
        let fleet = &self.runner.fleet;
        let Some(index) = fleet.images.lookup(image) else {
            return Ok(false);
        };
        let fill = self
            .pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&index);
        let Some(fill) = fill else {
            return Ok(false);
        };
        fill.filling.abort();
        fleet.unwarm(&[index]).await?;
        Ok(true)
    }

    /// Every warm pool the session asked for, with its ready count.
    pub async fn pools(&self) -> Vec<PoolState> {
        let asked: Vec<(usize, Option<String>)> = self
            .pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&image, fill)| {
                let failed = fill.failed.lock().unwrap_or_else(|e| e.into_inner());
                (image, failed.clone())
            })
            .collect();
        let fleet = &self.runner.fleet;
        let mut states = Vec::new();
        for (image, error) in asked {
            let mut state = PoolState {
                image: fleet.images[image].clone(),
                cluster: String::new(),
                desired: 0,
                ready: 0,
                error,
            };
            if let Some((desired, ready)) = fleet.prepared_pool(image) {
                // Claimed and prepared by the session, on whichever
                // clusters placement chose.
                state.desired = desired;
                state.ready = ready;
            } else if let Some((cluster, replicas)) = fleet.pool(image).await {
                state.cluster = fleet.clusters[cluster].name.clone();
                state.desired = replicas;
                if let Ok(template) = fleet.template(cluster, image).await {
                    let backend = &fleet.clusters[cluster].backend;
                    match backend.pool_status(&template).await {
                        Ok(status) => state.ready = status.ready,
                        Err(e) => state.error = Some(e.to_string()),
                    }
                }
            }
            states.push(state);
        }
        states
    }

    /// Retries spent so far, by the kind of error that caused them.
    pub fn retries(&self) -> BTreeMap<String, u64> {
        self.runner.retries.spent()
    }

    /// Sandboxes released through the queue, and releases that failed.
    pub fn releases(&self) -> (u64, u64) {
        let counts = &self.runner.releases.counts;
        (
            counts.released.load(std::sync::atomic::Ordering::Relaxed),
            counts.failed.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Sandboxes whose image's prepare hook passed, and those released
    /// because it failed or overran (`prepare_failed`), so far.
    pub fn prepares(&self) -> (u64, u64) {
        let counts = &self.runner.fleet.counts;
        (
            counts.prepared.load(std::sync::atomic::Ordering::Relaxed),
            counts
                .prepare_failed
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Ends the session: stops filling pools, waits for the queued
    /// releases, removes the pools, and reaps whatever the run id still
    /// owns on every cluster. Release every lease first.
    ///
    /// # Errors
    ///
    /// The first cluster that could not be cleaned up.
    pub async fn close(&self) -> Result<Reaped, RunError> {
        let fills: Vec<PoolFill> =
            std::mem::take(&mut *self.pools.lock().unwrap_or_else(|e| e.into_inner()))
                .into_values()
                .collect();
        for fill in &fills {
            fill.filling.abort();
        }
        self.runner.releases.drain().await;
        let fleet = &self.runner.fleet;
        let warm = fleet.warm_images().await;
        let unwarmed = fleet.unwarm(&warm).await;
        let reaped = reap::reap(self.clusters(), &self.run_id).await;
        unwarmed?;
        reaped
    }
}

/// [`lost_or_backend`], after noting on the sandbox that it is gone when
/// the error says so (the lease then answers every later call with it).
fn noted(claimed: &Claimed, error: BackendError) -> SessionError {
    claimed.note(&error);
    lost_or_backend(error)
}

/// A backend error, or [`SessionError::Lost`] when it says the sandbox is gone.
fn lost_or_backend(error: BackendError) -> SessionError {
    match error.kind() {
        ErrorKind::SandboxLost => SessionError::Lost(error.to_string()),
        _ => SessionError::Backend(error),
    }
}
