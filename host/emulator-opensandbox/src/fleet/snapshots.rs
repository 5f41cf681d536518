//! The snapshots the emulator holds, each a snapshot of the local backend
//! ([`sandfleet_core::Snapshots`]) taken of a sandbox's local sandbox, and
//! the sandboxes made of them (forks of one).
//!
//! As server 1.1.1's snapshot service: a create is accepted `Creating` and
//! captured in the background, then `Ready` or `Failed`; one still
//! `Creating` cannot be deleted (409 `SNAPSHOT::INVALID_STATE`); a delete
//! passes through `Deleting`; only a `Ready` one makes sandboxes (404
//! `SNAPSHOT::NOT_FOUND`, 409 `SNAPSHOT::NOT_READY`). A runtime without
//! snapshots answers a create with 501 `SNAPSHOT::NOT_IMPLEMENTED` and has
//! nothing to list; so does the emulator whose local backend has none.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::http::StatusCode;
use jiff::Timestamp;
use sandfleet_core::{Backend, BackendError, ErrorKind, LABEL_TASK, SnapshotRef, Snapshots};
use sandfleet_emulator_runtime::CREATE_TIMEOUT;

use super::{Fleet, Sandbox};
use crate::error::ApiError;

/// Where a snapshot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Creating,
    Ready,
    Failed,
    Deleting,
}

impl Phase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Creating => "Creating",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
            Phase::Deleting => "Deleting",
        }
    }
}

/// A snapshot's status, as `status` reports it.
#[derive(Debug, Clone)]
pub(crate) struct Status {
    pub(crate) phase: Phase,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) at: Timestamp,
}

impl Status {
    fn new(phase: Phase, reason: &'static str, message: impl Into<String>) -> Self {
        Status {
            phase,
            reason,
            message: message.into(),
            at: Timestamp::now(),
        }
    }
}

/// One snapshot.
pub(crate) struct Snapshot {
    pub(crate) id: String,
    pub(crate) sandbox_id: String,
    pub(crate) name: Option<String>,
    pub(crate) created_at: Timestamp,
    /// The image of the sandbox it was taken of, which its sandboxes run.
    image: String,
    status: Mutex<Status>,
    /// The local backend's snapshot, once captured.
    local: Mutex<Option<SnapshotRef>>,
}

impl Snapshot {
    pub(crate) fn status(&self) -> Status {
        self.status.lock().expect("snapshot lock poisoned").clone()
    }

    fn set(&self, status: Status) {
        *self.status.lock().expect("snapshot lock poisoned") = status;
    }

    fn local(&self) -> Option<SnapshotRef> {
        self.local.lock().expect("snapshot lock poisoned").clone()
    }
}

/// The snapshots by id.
#[derive(Default)]
pub(crate) struct SnapshotStore(Mutex<BTreeMap<String, Arc<Snapshot>>>);

impl SnapshotStore {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Snapshot>>> {
        self.0.lock().expect("snapshots lock poisoned")
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Snapshot>> {
        self.map().get(id).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Snapshot>> {
        self.map().values().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    pub(crate) fn clear(&self) {
        self.map().clear();
    }
}

fn capture_failed(error: &BackendError) -> Status {
    Status::new(
        Phase::Failed,
        "snapshot_capture_failed",
        format!("Snapshot capture failed: {}", error.message()),
    )
}

impl Fleet {
    fn local_snapshots(&self) -> Option<&dyn Snapshots> {
        self.host.backend().snapshots()
    }

    /// Accepts a snapshot of `sandbox` named `name` and captures it in the
    /// background.
    pub(crate) fn take_snapshot(
        self: &Arc<Self>,
        sandbox: &Sandbox,
        name: Option<String>,
    ) -> Result<Arc<Snapshot>, ApiError> {
        if self.local_snapshots().is_none() {
            return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "SNAPSHOT::NOT_IMPLEMENTED",
                "Snapshot creation is not supported by this runtime (the emulator's local backend \
                 has no snapshots)",
            ));
        }
        let id = self.ids.lock().expect("id generator lock poisoned").uuid();
        let snapshot = Arc::new(Snapshot {
            id: id.clone(),
            sandbox_id: sandbox.id.clone(),
            name,
            created_at: Timestamp::now(),
            image: sandbox.spec.image.clone(),
            status: Mutex::new(Status::new(
                Phase::Creating,
                "snapshot_accepted",
                "Snapshot creation accepted.",
            )),
            local: Mutex::new(None),
        });
        self.snapshots.map().insert(id, Arc::clone(&snapshot));
        let (fleet, taking, handle) = (
            Arc::clone(self),
            Arc::clone(&snapshot),
            sandbox.exec.handle.clone(),
        );
        tokio::spawn(async move {
            // Counted as a create under way, so teardown waits for it and
            // reaps what it made.
            let captured = match (fleet.gate.enter(), fleet.local_snapshots()) {
                (Some(_capturing), Some(local)) => {
                    local
                        .snapshot(
                            &handle,
                            &handle.run_id.labels(),
                            Instant::now() + CREATE_TIMEOUT,
                        )
                        .await
                }
                _ => Err(BackendError::new(
                    ErrorKind::Unavailable,
                    "opensandbox-emulator",
                    "the server is shutting down",
                )),
            };
            match captured {
                Ok(local) => {
                    *taking.local.lock().expect("snapshot lock poisoned") = Some(local);
                    // Captured; with `snapshot-late` not ready yet (and
                    // teardown no longer waits for it).
                    if let Some(late) = fleet.faults.snapshot_late {
                        tokio::time::sleep(late).await;
                    }
                    taking.set(Status::new(
                        Phase::Ready,
                        "snapshot_ready",
                        "Snapshot is ready.",
                    ));
                }
                Err(error) => {
                    tracing::debug!(snapshot = %taking.id, %error, "capture failed");
                    taking.set(capture_failed(&error));
                }
            }
        });
        Ok(snapshot)
    }

    /// Deletes snapshot `id` (what it captured, then the record).
    pub(crate) async fn delete_snapshot(&self, id: &str) -> Result<(), ApiError> {
        let snapshot = self
            .snapshots
            .get(id)
            .ok_or_else(|| ApiError::snapshot_not_found(id))?;
        {
            let mut status = snapshot.status.lock().expect("snapshot lock poisoned");
            if status.phase == Phase::Creating {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "SNAPSHOT::INVALID_STATE",
                    format!("Snapshot {id} is still being created and cannot be deleted"),
                ));
            }
            *status = Status::new(
                Phase::Deleting,
                "snapshot_delete_requested",
                "Snapshot deletion requested.",
            );
        }
        if let (Some(local), Some(snapshots)) = (snapshot.local(), self.local_snapshots()) {
            // A failed delete stays `Deleting`; a repeat tries again.
            snapshots.delete_snapshot(&local).await.map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "SNAPSHOT::RUNTIME_DELETE_FAILED",
                    format!("Failed to delete snapshot {id}: {e}"),
                )
            })?;
        }
        self.snapshots.map().remove(id);
        Ok(())
    }

    /// The local snapshot and image a sandbox of snapshot `id` is made of.
    pub(super) fn restorable(&self, id: &str) -> Result<(SnapshotRef, String), ApiError> {
        let snapshot = self
            .snapshots
            .get(id)
            .ok_or_else(|| ApiError::snapshot_not_found(id))?;
        match (snapshot.status().phase, snapshot.local()) {
            (Phase::Ready, Some(local)) => Ok((local, snapshot.image.clone())),
            _ => Err(ApiError::new(
                StatusCode::CONFLICT,
                "SNAPSHOT::NOT_READY",
                format!("Snapshot {id} is not ready for restore."),
            )),
        }
    }

    /// A local sandbox of `local` for sandbox `id`.
    pub(super) async fn fork(
        &self,
        local: &SnapshotRef,
        id: &str,
    ) -> Result<sandfleet_core::SandboxHandle, BackendError> {
        let snapshots = self.local_snapshots().ok_or_else(|| {
            BackendError::new(
                ErrorKind::Unsupported,
                "opensandbox-emulator",
                "the local backend has no snapshots",
            )
        })?;
        let mut labels = local.run_id().labels();
        labels.insert(LABEL_TASK.to_string(), id.to_string());
        let mut forks = snapshots
            .fork(local, 1, &labels, Instant::now() + CREATE_TIMEOUT)
            .await?;
        forks.pop().ok_or_else(|| {
            BackendError::new(
                ErrorKind::Failed,
                "opensandbox-emulator",
                "a fork of one made none",
            )
        })
    }
}
