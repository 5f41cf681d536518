//! Snapshots: a claimed sandbox's filesystem captured, so that many
//! sandboxes can start from it (forks) and a sandbox can be put back to
//! it in place (restore).
//!
//! A snapshot holds files only: what a sandbox's processes hold in memory
//! is not captured, and a fork or a restored sandbox starts with no
//! process of the task running. A snapshot belongs to the run of the
//! sandbox it was taken of; its forks belong to that run too, and the
//! run's `reap` removes them all.

use std::time::Instant;

use async_trait::async_trait;

use crate::backend::Backend;
use crate::error::{BackendError, ErrorKind};
use crate::run::{Labels, RunId};
use crate::sandbox::{SandboxHandle, TemplateRef};

/// A snapshot a backend holds.
///
/// Serializable, so a daemon that restarts can name its snapshots again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SnapshotRef {
    /// Backend-unique id.
    pub id: String,
    /// The cluster (configured backend instance) holding it.
    pub cluster: String,
    /// The template of the sandbox it was taken of: its forks are of the
    /// same template, image and run.
    pub template: TemplateRef,
    /// What the driver needs to reach the snapshot again, in its own
    /// serialization; opaque to everyone else. Empty when it needs nothing.
    #[serde(default)]
    pub driver: String,
}

impl SnapshotRef {
    /// The run it belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.template.run_id
    }
}

/// Snapshots of claimed sandboxes, forks from them and restores to them.
#[async_trait]
pub trait Snapshots: Send + Sync {
    /// Whether [`Snapshots::restore`] puts a sandbox back in place; where
    /// it does not, it answers [`crate::ErrorKind::Unsupported`] and a
    /// caller releases the sandbox and forks a new one instead.
    fn restores_in_place(&self) -> bool;

    /// Captures the filesystem of claimed `sandbox` (which runs on): files
    /// written before this returns are in every fork of it, files written
    /// after are in none. The snapshot carries `labels` (the run id among
    /// them).
    ///
    /// # Errors
    ///
    /// [`crate::ErrorKind::NotFound`] for a released sandbox,
    /// [`crate::ErrorKind::Unavailable`] when the backend has no room for
    /// it (a disk budget); nothing half made is left behind.
    async fn snapshot(
        &self,
        sandbox: &SandboxHandle,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SnapshotRef, BackendError>;

    /// Claims `count` new sandboxes whose files are the snapshot's, each
    /// carrying `labels`: all of them, or none (those made before a
    /// failure are released). Returns only when every one can run
    /// commands, or fails at `deadline`.
    ///
    /// # Errors
    ///
    /// [`crate::ErrorKind::Invalid`] for a count of 0 or more than the
    /// backend can ever hold at once, or labels of another run;
    /// [`crate::ErrorKind::NotFound`] for a deleted snapshot.
    async fn fork(
        &self,
        snapshot: &SnapshotRef,
        count: u32,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<Vec<SandboxHandle>, BackendError>;

    /// Puts claimed `sandbox` back to `snapshot` in place: every process in
    /// it is ended and every file, mount and change made since is gone;
    /// the sandbox keeps its id. The snapshot must be of the sandbox's own
    /// template (its image).
    ///
    /// # Errors
    ///
    /// [`crate::ErrorKind::Invalid`] for a snapshot of another template;
    /// [`crate::ErrorKind::Unsupported`] where
    /// [`Snapshots::restores_in_place`] is false. On any other error the
    /// sandbox must not be used again.
    async fn restore(
        &self,
        sandbox: &SandboxHandle,
        snapshot: &SnapshotRef,
        deadline: Instant,
    ) -> Result<(), BackendError>;

    /// Deletes the snapshot; idempotent. Forks already made from it keep
    /// running (their files stay until the last of them is released).
    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<(), BackendError>;

    /// The snapshots `run_id` holds, including what a crashed run left.
    async fn list_snapshots(&self, run_id: &RunId) -> Result<Vec<SnapshotRef>, BackendError>;
}

/// The snapshots of `backend`, or a [`crate::ErrorKind::Unsupported`]
/// error naming its cluster.
pub fn snapshots_of(backend: &dyn Backend) -> Result<&dyn Snapshots, BackendError> {
    backend.snapshots().ok_or_else(|| {
        BackendError::new(
            ErrorKind::Unsupported,
            backend.name(),
            "the cluster cannot snapshot sandboxes: its backend has no snapshots",
        )
    })
}
