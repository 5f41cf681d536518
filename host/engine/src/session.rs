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

use sandfleet_core::{
    BackendError, Capacity, ErrorKind, ExecRequest, ExecResult, OutputSink, Reaped, RunId,
    SandboxHandle, file_stem,
};
use sandfleet_plugin::Registry;
use sandfleet_plugin::adapter::{Task, TaskAdapter};
use tracing::Instrument;

use crate::error::{RunError, StepError};
use crate::evaluation::{Evaluation, EvaluationError, Evaluator, Request, SetUp};
use crate::fleet::{Claimed, Cluster, Fleet, FleetSpec};
use crate::phases::PhaseTimes;
use crate::plugins::Plugins;
use crate::progress::LogProgress;
use crate::recycle::{Held, Recycler};
use crate::release::ReleaseQueue;
use crate::retry::Retries;
use crate::settings::FleetSettings;
use crate::{checks, reap};

mod fork;
mod pools;

use pools::PoolFill;
pub use pools::PoolState;

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
    /// The plugins (their handles answer faults with a built-in where the
    /// registry was told to); a watcher among them reloads them while the
    /// session lives.
    pub plugins: Plugins,
    /// Where evaluation logs go, one file per lease.
    pub logs: PathBuf,
}

/// Why a session call failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The request cannot be served as it is (an image no cluster makes, a
    /// task of another image than the lease's, work that cannot be
    /// evaluated in a fresh sandbox).
    #[error("{0}")]
    Invalid(String),
    /// The lease's sandbox is gone; the lease cannot serve any more.
    #[error("{0}")]
    Lost(String),
    /// A step failed: a claim, a backend call, a plugin call; the source
    /// keeps its kind.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The session's own machinery failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

impl From<EvaluationError> for SessionError {
    fn from(error: EvaluationError) -> Self {
        match error {
            EvaluationError::Infra(step) => SessionError::Step(step),
            EvaluationError::Unusable(message) => SessionError::Invalid(message),
        }
    }
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
    held: Held,
    image: usize,
    image_name: String,
    /// The task the reset check and evaluation use by default.
    task: Task,
    /// Acquired for a task, whose setup runs in every sandbox it gets.
    for_task: bool,
    /// The adapter's setup that ran in this sandbox, with the adapter
    /// version (pinned) that evaluates its task here.
    set_up: Option<SetUp>,
    /// Names this lease's log file.
    name: String,
}

impl Lease {
    /// The sandbox.
    pub fn handle(&self) -> &SandboxHandle {
        &self.held.claimed.handle
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
        self.held.lost()
    }

    /// Resets the sandbox has been through.
    pub fn reuses(&self) -> u32 {
        self.held.served
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

/// Leases and warm pools over a fleet, for a long-running service.
pub struct Session {
    run_id: RunId,
    fleet: Arc<Fleet>,
    releases: Arc<ReleaseQueue>,
    retries: Arc<Retries>,
    recycler: Recycler,
    evaluator: Evaluator,
    plugins: Plugins,
    capacity: Vec<Capacity>,
    settings: FleetSettings,
    logs: PathBuf,
    /// Image index → the fill of its pool (running or finished).
    pools: Mutex<BTreeMap<usize, PoolFill>>,
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
        settings.recycle = settings.recycle && spec.plugins.reset.is_some();
        let fleet = Arc::new(Fleet::new(
            FleetSpec {
                run_id: spec.run_id.clone(),
                clusters: spec.clusters,
                capacity: capacity.clone(),
                images: Vec::new(),
                settings: settings.clone(),
                placement: spec.plugins.placement.clone(),
                timeline: std::sync::Arc::new(crate::timeline::Timeline::off()),
            },
            phases,
            retries.clone(),
        ));
        let releases = Arc::new(ReleaseQueue::start(
            fleet.clone(),
            fleet.phases.clone(),
            retries.clone(),
            RELEASE_BACKLOG,
        ));
        Ok(Session {
            run_id: spec.run_id,
            recycler: Recycler::new(fleet.clone(), releases.clone(), spec.plugins.reset.clone()),
            evaluator: Evaluator {
                fleet: fleet.clone(),
                releases: releases.clone(),
            },
            fleet,
            releases,
            retries,
            plugins: spec.plugins,
            capacity,
            settings,
            logs: spec.logs,
            pools: Mutex::new(BTreeMap::new()),
        })
    }

    /// What the clusters' nodes can hold of `at_once` sandboxes of the
    /// session's size, said when they cannot hold them all (see
    /// [`crate::plan::unschedulable`]).
    pub fn unschedulable(&self, at_once: u32) -> Option<String> {
        crate::plan::unschedulable(&self.settings, &self.capacity, at_once)
    }

    /// The registry the session's plugins come from.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.plugins.registry
    }

    /// The task adapter (following reloads), for loading dataset rows.
    pub fn adapter(&self) -> &TaskAdapter {
        &self.plugins.adapter
    }

    /// The session's run id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The clusters.
    pub fn clusters(&self) -> &[Cluster] {
        &self.fleet.clusters
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
    /// [`SessionError::Invalid`] for an image no cluster makes, the claim's
    /// error when no sandbox could be had, and the adapter's or backend's
    /// error when setup could not run (the sandbox is released then).
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
        let image = self.fleet.images.intern(&task.image);
        let labelled = Task {
            id: name.to_string(),
            ..task.clone()
        };
        let held = self.recycler.sandbox_for(image, &labelled, None).await?;
        let mut lease = Lease {
            held,
            image,
            image_name: task.image.clone(),
            task,
            for_task,
            set_up: None,
            name: name.to_string(),
        };
        if for_task && let Err(error) = self.set_up(&mut lease).await {
            self.release(lease);
            return Err(error);
        }
        Ok(lease)
    }

    /// Runs the adapter's setup for the lease's task, with the adapter
    /// version serving now, pinned for the task's evaluations here.
    async fn set_up(&self, lease: &mut Lease) -> Result<(), SessionError> {
        let log = self.log_path(lease);
        let set_up = self
            .evaluator
            .set_up(
                &lease.held.claimed,
                &lease.task,
                self.plugins.adapter.pin(),
                &log,
            )
            .await?;
        lease.set_up = Some(set_up);
        Ok(())
    }

    fn log_path(&self, lease: &Lease) -> PathBuf {
        self.logs.join(format!("{}.log", file_stem(&lease.name)))
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
        let claimed = &lease.held.claimed;
        let span = tracing::info_span!(
            "exec",
            sandbox = %claimed.handle.id,
            program = request.argv.first().map_or("", String::as_str)
        );
        let backend = &self.fleet.clusters[claimed.cluster].backend;
        backend
            .exec(&claimed.handle, request, output)
            .instrument(span)
            .await
            .map_err(|error| noted(claimed, "exec", error))
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
        let claimed = &lease.held.claimed;
        self.fleet.clusters[claimed.cluster]
            .backend
            .put_file(&claimed.handle, path, contents, mode)
            .await
            .map_err(|error| noted(claimed, "put_file", error))
    }

    /// Reads a file from the lease's sandbox.
    ///
    /// # Errors
    ///
    /// As [`Session::exec`].
    pub async fn get_file(&self, lease: &Lease, path: &str) -> Result<Vec<u8>, SessionError> {
        let claimed = &lease.held.claimed;
        self.fleet.clusters[claimed.cluster]
            .backend
            .get_file(&claimed.handle, path)
            .await
            .map_err(|error| noted(claimed, "get_file", error))
    }

    /// Evaluates `task` (default: the lease's) with `solution` in the
    /// lease's sandbox, as a run would (see [`crate::evaluation`]): the
    /// adapter's setup unless it ran here already, its files, its evaluate
    /// commands, then its grade, by one adapter version (the one that set
    /// the task up here, else the one serving now).
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
        let adapter = match &lease.set_up {
            Some(set_up) if set_up.task_id() == task.id => set_up.adapter.clone(),
            _ => self.plugins.adapter.pin(),
        };
        // The log is the lease's: many leases may evaluate one task at once.
        let log = self.log_path(lease);
        let span = tracing::info_span!("evaluate", task = %task.id, sandbox = %lease.handle().id);
        let Lease { held, set_up, .. } = lease;
        let request = Request {
            task: &task,
            solution,
            adapter: &adapter,
            log: &log,
        };
        Ok(self
            .evaluator
            .evaluate(held, set_up, request)
            .instrument(span)
            .await)
    }

    /// Makes the lease's sandbox fit for its next use: scrubbed, reset and
    /// verified by the reset check; when that cannot be done, the sandbox
    /// is quarantined and a fresh one of the same image replaces it. A task
    /// lease's setup runs again either way.
    ///
    /// Taking the lease by value means a failed recycle cannot leave a lease
    /// without a sandbox for anyone to observe.
    ///
    /// # Errors
    ///
    /// When no fresh sandbox could be claimed or the task's setup failed:
    /// the lease is then gone (its sandbox was released).
    pub async fn recycle(&self, lease: Lease) -> Result<(Lease, Recycled), SessionError> {
        let Lease {
            held,
            image,
            image_name,
            task,
            for_task,
            set_up: _,
            name,
        } = lease;
        let before = held.claimed.handle.id.clone();
        let labelled = Task {
            id: name.clone(),
            ..task.clone()
        };
        let mut held = self
            .recycler
            .sandbox_for(image, &labelled, Some(held))
            .await?;
        let recycled = if held.claimed.handle.id == before {
            held.served += 1;
            Recycled::Clean
        } else {
            Recycled::Replaced
        };
        let mut lease = Lease {
            held,
            image,
            image_name,
            task,
            for_task,
            set_up: None,
            name,
        };
        if lease.for_task
            && let Err(error) = self.set_up(&mut lease).await
        {
            self.release(lease);
            return Err(error);
        }
        Ok((lease, recycled))
    }

    /// Hands the lease's sandbox to the release queue; returns at once.
    pub fn release(&self, lease: Lease) {
        let _ = std::fs::remove_file(self.log_path(&lease));
        self.recycler.release(lease.held);
    }

    /// Renews the sandbox for its backend's lease time, on backends whose
    /// sandboxes expire (a no-op on the others, which keep it until it is
    /// released).
    ///
    /// # Errors
    ///
    /// The backend's error; [`SessionError::Lost`] when the sandbox is gone.
    pub async fn renew(&self, lease: &Lease) -> Result<(), SessionError> {
        let claimed = &lease.held.claimed;
        let backend = &self.fleet.clusters[claimed.cluster].backend;
        let Some(ttl) = backend.capabilities().lease_ttl else {
            return Ok(());
        };
        self.retries
            .idempotent("renewal", || backend.renew(&claimed.handle, ttl))
            .await
            .map_err(|error| lost_or_step("renewal", error))
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
        self.retries
            .idempotent("release", || cluster.backend.release(handle))
            .await
            .map_err(|error| StepError::backend("release", error).into())
    }

    /// Retries spent so far, by the kind of error that caused them.
    pub fn retries(&self) -> BTreeMap<String, u64> {
        self.retries.spent()
    }

    /// Sandboxes released through the queue, and releases that failed.
    pub fn releases(&self) -> (u64, u64) {
        let counts = &self.releases.counts;
        (
            counts.released.load(std::sync::atomic::Ordering::Relaxed),
            counts.failed.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Sandboxes whose image's prepare hook passed, and those released
    /// because it failed or overran (`prepare_failed`), so far.
    pub fn prepares(&self) -> (u64, u64) {
        let counts = &self.fleet.counts;
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
        self.releases.drain().await;
        let fleet = &self.fleet;
        let warm = fleet.warm_images().await;
        let unwarmed = fleet.unwarm(&warm).await;
        let reaped = reap::reap(self.clusters(), &self.run_id).await;
        unwarmed?;
        reaped
    }
}

/// [`lost_or_step`], after noting on the sandbox that it is gone when
/// the error says so (the lease then answers every later call with it).
fn noted(claimed: &Claimed, what: &str, error: BackendError) -> SessionError {
    claimed.note(&error);
    lost_or_step(what, error)
}

/// A backend error, or [`SessionError::Lost`] when it says the sandbox is gone.
fn lost_or_step(what: &str, error: BackendError) -> SessionError {
    match error.kind() {
        ErrorKind::SandboxLost => SessionError::Lost(error.to_string()),
        _ => StepError::backend(what, error).into(),
    }
}
