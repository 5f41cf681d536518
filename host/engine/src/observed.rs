//! One wrapper that gives every driver's calls a span and a count: the
//! drivers stay free of bookkeeping, and every backend is observed the same
//! way (span names, fields, outcomes), whatever it talks to.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ErrorKind, ExecRequest, ExecResult, ImagePulls,
    ImageToPull, Labels, OutputSink, Owned, PoolStatus, Preflight, PullProgress, Reaped, Recycling,
    RunId, SandboxHandle, SnapshotRef, Snapshots, TemplateRef, TemplateSpec, WarmPools,
};
use tracing::field::Empty;
use tracing::{Instrument, Span, info_span};

/// A backend operation, as spans and metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`Backend::preflight`].
    Preflight,
    /// [`Backend::capacity`].
    Capacity,
    /// [`ImagePulls::images_to_pull`].
    ImagesToPull,
    /// [`ImagePulls::pull_image`].
    PullImage,
    /// [`Backend::ensure_template`].
    EnsureTemplate,
    /// [`WarmPools::warm`].
    Warm,
    /// [`WarmPools::unwarm`].
    Unwarm,
    /// [`WarmPools::pool_status`].
    PoolStatus,
    /// [`WarmPools::wait_pool_ready`].
    WaitPoolReady,
    /// [`Backend::claim`].
    Claim,
    /// [`Backend::exec`].
    Exec,
    /// [`Backend::put_file`].
    PutFile,
    /// [`Backend::get_file`].
    GetFile,
    /// [`Recycling::scrub`].
    Scrub,
    /// [`Backend::release`].
    Release,
    /// [`Backend::renew`].
    Renew,
    /// [`Backend::list_owned`].
    ListOwned,
    /// [`Backend::reap`].
    Reap,
    /// [`Snapshots::snapshot`].
    Snapshot,
    /// [`Snapshots::fork`].
    Fork,
    /// [`Snapshots::restore`].
    Restore,
    /// [`Snapshots::delete_snapshot`].
    DeleteSnapshot,
    /// [`Snapshots::list_snapshots`].
    ListSnapshots,
}

impl Operation {
    /// Its name: the span's after `backend.`, and the metrics' label.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Preflight => "preflight",
            Operation::Capacity => "capacity",
            Operation::ImagesToPull => "images_to_pull",
            Operation::PullImage => "pull_image",
            Operation::EnsureTemplate => "ensure_template",
            Operation::Warm => "warm",
            Operation::Unwarm => "unwarm",
            Operation::PoolStatus => "pool_status",
            Operation::WaitPoolReady => "wait_pool_ready",
            Operation::Claim => "claim",
            Operation::Exec => "exec",
            Operation::PutFile => "put_file",
            Operation::GetFile => "get_file",
            Operation::Scrub => "scrub",
            Operation::Release => "release",
            Operation::Renew => "renew",
            Operation::ListOwned => "list_owned",
            Operation::Reap => "reap",
            Operation::Snapshot => "snapshot",
            Operation::Fork => "fork",
            Operation::Restore => "restore",
            Operation::DeleteSnapshot => "delete_snapshot",
            Operation::ListSnapshots => "list_snapshots",
        }
    }
}

/// One finished backend call.
#[derive(Debug, Clone, Copy)]
pub struct BackendCall<'a> {
    /// The cluster's configured name.
    pub cluster: &'a str,
    /// What was called.
    pub operation: Operation,
    /// `ok`, or the error's kind ([`sandfleet_core::ErrorKind::name`]).
    pub outcome: &'static str,
    /// How long it took.
    pub elapsed: Duration,
}

/// Hears every backend call a cluster makes (the daemon's metrics).
pub trait CallObserver: Send + Sync {
    /// Hears one call, once it has finished.
    fn observe(&self, call: &BackendCall<'_>);
}

/// `inner`, with a span around each call (`backend.<operation>`, carrying
/// the cluster and, where there is one, the sandbox) and each finished
/// call reported to the observer.
pub struct Observed {
    inner: Arc<dyn Backend>,
    observer: Option<Arc<dyn CallObserver>>,
}

impl Observed {
    /// `inner`, observed by `observer` (spans only, without one).
    pub fn new(inner: Arc<dyn Backend>, observer: Option<Arc<dyn CallObserver>>) -> Self {
        Observed { inner, observer }
    }

    fn span(&self, operation: Operation, subject: Subject<'_>) -> Span {
        // `info_span!` needs a literal name: the operation is a field.
        let span = info_span!(
            "backend",
            operation = operation.name(),
            cluster = self.inner.name(),
            sandbox = Empty,
            template = Empty,
            image = Empty,
            run = Empty,
            snapshot = Empty,
        );
        match subject {
            Subject::Cluster => {}
            Subject::Sandbox(sandbox) => {
                span.record("sandbox", sandbox.id.as_str());
            }
            Subject::Template(template) => {
                span.record("template", template.name.as_str());
            }
            Subject::Image(image) => {
                span.record("image", image);
            }
            Subject::Run(run) => {
                span.record("run", run.as_str());
            }
            Subject::Snapshot(snapshot) => {
                span.record("snapshot", snapshot.id.as_str());
                span.record("template", snapshot.template.name.as_str());
            }
        }
        span
    }

    async fn observed<T>(
        &self,
        operation: Operation,
        subject: Subject<'_>,
        call: impl Future<Output = T>,
        outcome: fn(&T) -> &'static str,
    ) -> T {
        self.observe(operation, self.span(operation, subject), call, outcome)
            .await
    }

    async fn observe<T>(
        &self,
        operation: Operation,
        span: Span,
        call: impl Future<Output = T>,
        outcome: fn(&T) -> &'static str,
    ) -> T {
        let started = Instant::now();
        let result = call.instrument(span).await;
        if let Some(observer) = &self.observer {
            observer.observe(&BackendCall {
                cluster: self.inner.name(),
                operation,
                outcome: outcome(&result),
                elapsed: started.elapsed(),
            });
        }
        result
    }

    /// The inner backend's optional `part`: reached only through
    /// [`Backend::pools`] and its kin, which answer `None` where the inner
    /// backend has no such part, so the error is for a direct caller.
    fn part<'a, P: ?Sized>(&self, part: Option<&'a P>, what: &str) -> Result<&'a P, BackendError> {
        part.ok_or_else(|| {
            BackendError::new(
                ErrorKind::Unsupported,
                self.inner.name(),
                format!("the cluster has no {what}"),
            )
        })
    }
}

/// What a call is about, for its span.
#[derive(Clone, Copy)]
enum Subject<'a> {
    Cluster,
    Sandbox(&'a SandboxHandle),
    Template(&'a TemplateRef),
    Image(&'a str),
    Run(&'a RunId),
    Snapshot(&'a SnapshotRef),
}

/// `ok`, or the error's kind.
fn outcome_of<T>(result: &Result<T, BackendError>) -> &'static str {
    result.as_ref().map_or_else(|e| e.kind().name(), |_| "ok")
}

/// For the calls that cannot fail.
fn always_ok<T>(_: &T) -> &'static str {
    "ok"
}

#[async_trait]
impl Backend for Observed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn pools(&self) -> Option<&dyn WarmPools> {
        self.inner.pools().map(|_| self as &dyn WarmPools)
    }

    fn recycling(&self) -> Option<&dyn Recycling> {
        self.inner.recycling().map(|_| self as &dyn Recycling)
    }

    fn pulls(&self) -> Option<&dyn ImagePulls> {
        self.inner.pulls().map(|_| self as &dyn ImagePulls)
    }

    fn snapshots(&self) -> Option<&dyn Snapshots> {
        self.inner.snapshots().map(|_| self as &dyn Snapshots)
    }

    async fn preflight(&self) -> Preflight {
        self.observed(
            Operation::Preflight,
            Subject::Cluster,
            self.inner.preflight(),
            always_ok,
        )
        .await
    }

    async fn capacity(&self) -> Result<Capacity, BackendError> {
        self.observed(
            Operation::Capacity,
            Subject::Cluster,
            self.inner.capacity(),
            outcome_of,
        )
        .await
    }

    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError> {
        self.observed(
            Operation::EnsureTemplate,
            Subject::Image(&spec.image),
            self.inner.ensure_template(spec),
            outcome_of,
        )
        .await
    }

    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        let span = self.span(Operation::Claim, Subject::Template(template));
        let claimed = self
            .observe(
                Operation::Claim,
                span.clone(),
                self.inner.claim(template, labels, deadline),
                outcome_of,
            )
            .await;
        if let Ok(sandbox) = &claimed {
            span.record("sandbox", sandbox.id.as_str());
        }
        claimed
    }

    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        self.observed(
            Operation::Exec,
            Subject::Sandbox(sandbox),
            self.inner.exec(sandbox, request, output),
            outcome_of,
        )
        .await
    }

    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError> {
        self.observed(
            Operation::PutFile,
            Subject::Sandbox(sandbox),
            self.inner.put_file(sandbox, path, contents, mode),
            outcome_of,
        )
        .await
    }

    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        self.observed(
            Operation::GetFile,
            Subject::Sandbox(sandbox),
            self.inner.get_file(sandbox, path),
            outcome_of,
        )
        .await
    }

    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        self.observed(
            Operation::Release,
            Subject::Sandbox(sandbox),
            self.inner.release(sandbox),
            outcome_of,
        )
        .await
    }

    async fn renew(&self, sandbox: &SandboxHandle, ttl: Duration) -> Result<(), BackendError> {
        self.observed(
            Operation::Renew,
            Subject::Sandbox(sandbox),
            self.inner.renew(sandbox, ttl),
            outcome_of,
        )
        .await
    }

    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError> {
        self.observed(
            Operation::ListOwned,
            Subject::Run(run_id),
            self.inner.list_owned(run_id),
            outcome_of,
        )
        .await
    }

    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError> {
        self.observed(
            Operation::Reap,
            Subject::Run(run_id),
            self.inner.reap(run_id),
            outcome_of,
        )
        .await
    }
}

#[async_trait]
impl WarmPools for Observed {
    async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError> {
        let pools = self.part(self.inner.pools(), "warm pools")?;
        self.observed(
            Operation::Warm,
            Subject::Template(template),
            pools.warm(template, replicas, labels),
            outcome_of,
        )
        .await
    }

    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError> {
        let pools = self.part(self.inner.pools(), "warm pools")?;
        self.observed(
            Operation::Unwarm,
            Subject::Template(template),
            pools.unwarm(template),
            outcome_of,
        )
        .await
    }

    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError> {
        let pools = self.part(self.inner.pools(), "warm pools")?;
        self.observed(
            Operation::PoolStatus,
            Subject::Template(template),
            pools.pool_status(template),
            outcome_of,
        )
        .await
    }

    async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        deadline: Instant,
    ) -> Result<PoolStatus, BackendError> {
        let pools = self.part(self.inner.pools(), "warm pools")?;
        self.observed(
            Operation::WaitPoolReady,
            Subject::Template(template),
            pools.wait_pool_ready(template, at_least, deadline),
            outcome_of,
        )
        .await
    }
}

#[async_trait]
impl Recycling for Observed {
    async fn scrub(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        let recycling = self.part(self.inner.recycling(), "recycling")?;
        self.observed(
            Operation::Scrub,
            Subject::Sandbox(sandbox),
            recycling.scrub(sandbox),
            outcome_of,
        )
        .await
    }
}

#[async_trait]
impl ImagePulls for Observed {
    async fn images_to_pull(&self, images: &[String]) -> Vec<ImageToPull> {
        let Some(pulls) = self.inner.pulls() else {
            return Vec::new();
        };
        self.observed(
            Operation::ImagesToPull,
            Subject::Cluster,
            pulls.images_to_pull(images),
            always_ok,
        )
        .await
    }

    async fn pull_image(
        &self,
        image: &str,
        labels: &Labels,
        progress: PullProgress<'_>,
    ) -> Result<(), BackendError> {
        let pulls = self.part(self.inner.pulls(), "image pulls")?;
        self.observed(
            Operation::PullImage,
            Subject::Image(image),
            pulls.pull_image(image, labels, progress),
            outcome_of,
        )
        .await
    }
}

#[async_trait]
impl Snapshots for Observed {
    fn restores_in_place(&self) -> bool {
        self.inner
            .snapshots()
            .is_some_and(|snapshots| snapshots.restores_in_place())
    }

    async fn snapshot(
        &self,
        sandbox: &SandboxHandle,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SnapshotRef, BackendError> {
        let snapshots = self.part(self.inner.snapshots(), "snapshots")?;
        self.observed(
            Operation::Snapshot,
            Subject::Sandbox(sandbox),
            snapshots.snapshot(sandbox, labels, deadline),
            outcome_of,
        )
        .await
    }

    async fn fork(
        &self,
        snapshot: &SnapshotRef,
        count: u32,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<Vec<SandboxHandle>, BackendError> {
        let snapshots = self.part(self.inner.snapshots(), "snapshots")?;
        self.observed(
            Operation::Fork,
            Subject::Snapshot(snapshot),
            snapshots.fork(snapshot, count, labels, deadline),
            outcome_of,
        )
        .await
    }

    async fn restore(
        &self,
        sandbox: &SandboxHandle,
        snapshot: &SnapshotRef,
        deadline: Instant,
    ) -> Result<(), BackendError> {
        let snapshots = self.part(self.inner.snapshots(), "snapshots")?;
        self.observed(
            Operation::Restore,
            Subject::Sandbox(sandbox),
            snapshots.restore(sandbox, snapshot, deadline),
            outcome_of,
        )
        .await
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<(), BackendError> {
        let snapshots = self.part(self.inner.snapshots(), "snapshots")?;
        self.observed(
            Operation::DeleteSnapshot,
            Subject::Snapshot(snapshot),
            snapshots.delete_snapshot(snapshot),
            outcome_of,
        )
        .await
    }

    async fn list_snapshots(&self, run_id: &RunId) -> Result<Vec<SnapshotRef>, BackendError> {
        let snapshots = self.part(self.inner.snapshots(), "snapshots")?;
        self.observed(
            Operation::ListSnapshots,
            Subject::Run(run_id),
            snapshots.list_snapshots(run_id),
            outcome_of,
        )
        .await
    }
}
