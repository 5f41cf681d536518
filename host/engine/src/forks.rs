//! Prepare once, fork many: on a cluster whose backend has snapshots
//! ([`sandfleet_core::Snapshots`]), an image with a prepare hook is
//! prepared in one sandbox, which is snapshotted and released; every
//! sandbox of the image on that cluster is then a fork of the snapshot,
//! ready as it starts. A cluster without snapshots prepares each sandbox
//! (see [`crate::prepare`]). The snapshot is made on the first claim that
//! needs it (the claims arriving meanwhile wait for it) and belongs to the
//! run, whose reap removes it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use sandfleet_core::{Labels, SandboxHandle, SnapshotRef, Snapshots, TemplateRef};
use sandfleet_report::events::{MarkKind, SegmentKind};
use tokio::sync::OnceCell;
use tracing::Instrument;

use crate::error::StepError;
use crate::fleet::{Claimed, Fleet};
use crate::phases::Phase;
use crate::prepare::PREPARE_ATTEMPTS;

/// The label value of the sandbox a snapshot is prepared in.
const PREPARING_TASK: &str = "prepare-snapshot";

/// The prepared snapshot of one image on one cluster, once it is made.
type PreparedCell = Arc<OnceCell<SnapshotRef>>;

/// Each image's prepared snapshot, per cluster.
#[derive(Default)]
pub(crate) struct PreparedSnapshots {
    cells: std::sync::Mutex<HashMap<(usize, usize), PreparedCell>>,
    /// Clusters whose lack of snapshots was said.
    said: std::sync::Mutex<HashSet<usize>>,
}

impl PreparedSnapshots {
    /// Logs `message` the first time it is asked for `cluster`.
    fn say_once(&self, cluster: usize, message: impl FnOnce() -> String) {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        if said.insert(cluster) {
            tracing::info!("{}", message());
        }
    }

    fn cell(&self, cluster: usize, image: usize) -> PreparedCell {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(cells.entry((cluster, image)).or_default())
    }
}

impl Fleet {
    /// A fork of the prepared snapshot of `image` on `cluster` (made first
    /// when there is none yet), carrying `labels`; `None` when the image
    /// has no hook or the cluster no snapshots.
    pub(crate) async fn fork_prepared(
        &self,
        cluster: usize,
        image: usize,
        template: &TemplateRef,
        labels: &Labels,
    ) -> Option<Result<SandboxHandle, StepError>> {
        if self.hook(image)?.each_sandbox {
            return None;
        }
        let Some(snapshots) = self.clusters[cluster].backend.snapshots() else {
            self.prepared_snapshots.say_once(cluster, || {
                format!(
                    "cluster `{}` cannot snapshot sandboxes: prepare hooks run in every new \
                     sandbox there",
                    self.clusters[cluster].name
                )
            });
            return None;
        };
        let forked = async {
            let snapshot = self
                .prepared_snapshots
                .cell(cluster, image)
                .get_or_try_init(|| self.prepare_snapshot(cluster, image, template, snapshots))
                .await?
                .clone();
            let deadline = Instant::now() + self.settings.claim_timeout;
            let forked = self
                .retries
                .idempotent("fork", || snapshots.fork(&snapshot, 1, labels, deadline))
                .await;
            let mut handles = forked.map_err(|e| StepError::backend("fork", e))?;
            self.counts.forked.fetch_add(1, Ordering::Relaxed);
            handles.pop().ok_or_else(|| {
                StepError::Prepare(format!(
                    "a fork of snapshot {} made no sandbox",
                    snapshot.id
                ))
            })
        };
        Some(forked.await)
    }

    /// Prepares a sandbox of `image` on `cluster` (another in the place of
    /// each whose hook fails, [`PREPARE_ATTEMPTS`] in all), snapshots it
    /// and releases it.
    async fn prepare_snapshot(
        &self,
        cluster: usize,
        image: usize,
        template: &TemplateRef,
        snapshots: &dyn Snapshots,
    ) -> Result<SnapshotRef, StepError> {
        let hook = self
            .hook(image)
            .cloned()
            .expect("only images with a hook fork");
        let backend = &self.clusters[cluster].backend;
        let mut labels = self.run_id.labels();
        labels.insert(sandfleet_core::LABEL_TASK.into(), PREPARING_TASK.into());
        let mut failures = Vec::new();
        for _ in 0..PREPARE_ATTEMPTS {
            let deadline = Instant::now() + self.settings.claim_timeout;
            let handle = self
                .retries
                .idempotent("claim", || backend.claim(template, &labels, deadline))
                .await
                .map_err(|e| StepError::backend("claim", e))?;
            let claimed = Claimed::new(cluster, image, handle);
            let lease = self.keep(&claimed);
            let started = Instant::now();
            let span =
                tracing::info_span!("prepare", sandbox = %claimed.handle.id, snapshot = true);
            let prepared = self.run_hook(&claimed, &hook).instrument(span).await;
            self.phases.record(Phase::Prepare, started.elapsed());
            self.timeline.segment(
                SegmentKind::Prepare,
                started,
                self.on(&claimed),
                prepared.is_ok(),
            );
            let snapshot = match prepared {
                Ok(()) => {
                    self.counts.prepared.fetch_add(1, Ordering::Relaxed);
                    let deadline = Instant::now() + self.settings.claim_timeout;
                    let taken = snapshots
                        .snapshot(&claimed.handle, &self.run_id.labels(), deadline)
                        .await
                        .map_err(|e| StepError::backend("snapshot", e));
                    Some(taken)
                }
                Err(error) => {
                    tracing::warn!(sandbox = %claimed.handle.id, %error, "prepare failed; the sandbox is released and replaced");
                    self.timeline.mark(
                        MarkKind::Replaced,
                        Some(self.on(&claimed)),
                        &format!("prepare failed: {error}"),
                    );
                    self.counts.prepare_failed.fetch_add(1, Ordering::Relaxed);
                    failures.push(format!("{}: {error}", claimed.handle.id));
                    None
                }
            };
            drop(lease);
            if let Err(error) = backend.release(&claimed.handle).await {
                // The run's reap removes it.
                tracing::warn!(sandbox = %claimed.handle.id, %error, "release failed");
            }
            if let Some(snapshot) = snapshot {
                let snapshot = snapshot?;
                tracing::info!(cluster = %self.clusters[cluster].name, image = %self.images[image], snapshot = %snapshot.id, "prepared once; the image's sandboxes fork from its snapshot");
                return Ok(snapshot);
            }
        }
        Err(StepError::Prepare(format!(
            "image `{}`: prepare failed on {PREPARE_ATTEMPTS} sandboxes: {}",
            self.images[image],
            failures.join("; ")
        )))
    }
}
