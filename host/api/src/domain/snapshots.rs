//! The daemon's table of snapshots: each a lease's sandbox's files as they
//! were when it was taken, held by the backend of the lease's cluster
//! ([`sandfleet_core::Snapshots`]), with an id, an idle clock like a
//! lease's, and a lock that forks and restores share and its deletion
//! takes alone (in the background: `DELETE` answers at once).
//!
//! A snapshot carries the run label of the sandbox it was taken of, so the
//! run's reap removes what a killed daemon left: a restarted daemon reaps
//! its predecessor's run, and none of them is persisted here.
//!
//! A fork is a lease acquired through the session like any other and then
//! put back to the snapshot in place: the engine adopts no sandbox it did
//! not claim itself, and only what it claimed gets renewals, recycling,
//! grading and the release queue. So forks need a backend that restores
//! in place, and the session to place them on the snapshot's cluster.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use sandfleet_core::{
    BackendError, ErrorKind, Labels, SandboxHandle, SnapshotRef, Snapshots, label_value,
    snapshots_of,
};
use sandfleet_engine::{Lease, Session, StepError};
use tokio::sync::RwLockReadGuard;

use super::Refusal;
use super::activity::{Activity, InUse, take_idle};
use crate::model::SnapshotView;
use crate::state::AppState;

/// The label naming the lease a snapshot was taken of.
const LABEL_LEASE: &str = "sandfleet.io/lease";

/// Why a snapshot, or a restore to one, could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotFailure {
    /// Refused before the backend was asked, or by the backend's contract
    /// (no snapshots, no restore in place).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The backend failed; the sandbox may serve on.
    #[error(transparent)]
    Step(#[from] StepError),
    /// A restore failed after it began: the sandbox must not be used again.
    #[error("{0}; the lease was released, as its sandbox is no longer fit to use")]
    Broken(StepError),
}

/// One snapshot and what the daemon knows about it.
pub(crate) struct SnapshotSlot {
    pub(crate) id: String,
    /// Taken out for good, under the write lock, when it is deleted.
    snapshot: tokio::sync::RwLock<Option<SnapshotRef>>,
    /// The lease it was taken of.
    pub(crate) lease: String,
    /// That lease's image, as the client named it: forks are of it.
    pub(crate) image: String,
    /// That lease's client run id.
    pub(crate) run_id: Option<String>,
    pub(crate) cluster: String,
    /// Whether its cluster restores in place, which forks need here.
    pub(crate) restores_in_place: bool,
    created: SystemTime,
    ttl: Duration,
    activity: Arc<Activity>,
}

/// What a new snapshot carries besides the backend's reference.
pub(crate) struct NewSnapshot {
    pub(crate) id: String,
    pub(crate) lease: String,
    pub(crate) image: String,
    pub(crate) run_id: Option<String>,
    pub(crate) restores_in_place: bool,
    pub(crate) ttl: Option<Duration>,
}

impl SnapshotSlot {
    /// Marks the snapshot in use until the guard drops.
    pub(crate) fn in_use(&self) -> InUse {
        self.activity.begin()
    }

    /// The backend's reference, shared with other forks and restores;
    /// refused once deleted.
    pub(crate) async fn read(&self) -> Result<RwLockReadGuard<'_, SnapshotRef>, Refusal> {
        RwLockReadGuard::try_map(self.snapshot.read().await, Option::as_ref).map_err(|_| {
            Refusal::SnapshotNotLive {
                id: self.id.clone(),
            }
        })
    }

    /// The view clients get.
    pub(crate) fn view(&self) -> SnapshotView {
        SnapshotView {
            id: self.id.clone(),
            lease: self.lease.clone(),
            cluster: self.cluster.clone(),
            image: self.image.clone(),
            run_id: self.run_id.clone(),
            restores_in_place: self.restores_in_place,
            created_at: humantime::format_rfc3339_seconds(self.created).to_string(),
            expires_at: humantime::format_rfc3339_seconds(self.activity.last_used() + self.ttl)
                .to_string(),
        }
    }
}

/// Every live snapshot.
pub(crate) struct SnapshotTable {
    slots: RwLock<HashMap<String, Arc<SnapshotSlot>>>,
    default_ttl: Duration,
}

impl SnapshotTable {
    pub(crate) fn new(default_ttl: Duration) -> Self {
        SnapshotTable {
            slots: RwLock::new(HashMap::new()),
            default_ttl,
        }
    }

    fn slots(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<SnapshotSlot>>> {
        self.slots.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Snapshots live now.
    pub(crate) fn len(&self) -> usize {
        self.slots.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Adds `snapshot`.
    pub(crate) fn insert(&self, new: NewSnapshot, snapshot: SnapshotRef) -> Arc<SnapshotSlot> {
        let slot = Arc::new(SnapshotSlot {
            id: new.id.clone(),
            lease: new.lease,
            image: new.image,
            run_id: new.run_id,
            cluster: snapshot.cluster.clone(),
            snapshot: tokio::sync::RwLock::new(Some(snapshot)),
            restores_in_place: new.restores_in_place,
            created: SystemTime::now(),
            ttl: new.ttl.unwrap_or(self.default_ttl),
            activity: Activity::new(),
        });
        self.slots().insert(new.id, slot.clone());
        slot
    }

    /// The snapshot `id`.
    pub(crate) fn get(&self, id: &str) -> Result<Arc<SnapshotSlot>, Refusal> {
        self.slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Refusal::SnapshotNotLive { id: id.to_string() })
    }

    /// Takes `id` out of the table: no new call finds it.
    pub(crate) fn remove(&self, id: &str) -> Result<Arc<SnapshotSlot>, Refusal> {
        self.slots()
            .remove(id)
            .ok_or_else(|| Refusal::SnapshotNotLive { id: id.to_string() })
    }

    /// Takes every snapshot out of the table (the daemon is stopping).
    pub(crate) fn take_all(&self) -> Vec<Arc<SnapshotSlot>> {
        self.slots().drain().map(|(_, slot)| slot).collect()
    }

    /// Snapshots idle past their time, taken out of the table.
    fn take_idle(&self) -> Vec<Arc<SnapshotSlot>> {
        let now = Instant::now();
        take_idle(&mut self.slots(), |slot| {
            slot.activity.idle_past(slot.ttl, now)
        })
    }
}

/// The snapshots of the cluster named `cluster`, or the backend's
/// `Unsupported` naming it, as the error of `what`.
fn snapshots_on<'a>(
    session: &'a Session,
    cluster: &str,
    what: &str,
) -> Result<&'a dyn Snapshots, StepError> {
    let backend = session
        .clusters()
        .iter()
        .find(|c| c.name == cluster)
        .map(|c| &*c.backend)
        .ok_or_else(|| {
            let error = BackendError::new(ErrorKind::Invalid, cluster, "no such cluster");
            backend(what, error)
        })?;
    snapshots_of(backend).map_err(|error| self::backend(what, error))
}

/// A backend call's error, as the engine names them.
fn backend(what: &str, source: BackendError) -> StepError {
    StepError::Backend {
        what: what.to_string(),
        source,
    }
}

/// The lease's sandbox, unless a call on it said it is gone.
fn live(lease: &Lease) -> Result<&SandboxHandle, StepError> {
    match lease.lost() {
        Some(lost) => Err(StepError::Lost(lost.to_string())),
        None => Ok(lease.handle()),
    }
}

/// Snapshots the sandbox of `lease` (the lease `lease_id`), labelled with
/// its run and the lease; answers with whether its cluster restores in
/// place.
pub(crate) async fn take(
    session: &Session,
    lease: &Lease,
    lease_id: &str,
    deadline: Instant,
) -> Result<(SnapshotRef, bool), SnapshotFailure> {
    let handle = live(lease)?;
    let snapshots = snapshots_on(session, &handle.cluster, "snapshot")?;
    let mut labels: Labels = handle.run_id.labels();
    labels.insert(LABEL_LEASE.to_string(), label_value(lease_id));
    let snapshot = snapshots
        .snapshot(handle, &labels, deadline)
        .await
        .map_err(|e| backend("snapshot", e))?;
    Ok((snapshot, snapshots.restores_in_place()))
}

/// Puts the sandbox of `lease` (the lease `lease_id`) back to the snapshot
/// of `slot`, in place.
///
/// # Errors
///
/// [`Refusal::OtherTemplate`] naming both when the snapshot is of another
/// template, [`Refusal::NoRestoreInPlace`] naming the cluster where its
/// backend cannot, and [`SnapshotFailure::Broken`] when the backend failed
/// after it began (the caller releases the lease).
pub(crate) async fn restore(
    session: &Session,
    lease: &Lease,
    lease_id: &str,
    slot: &SnapshotSlot,
    deadline: Instant,
) -> Result<(), SnapshotFailure> {
    let handle = live(lease)?;
    let snapshot = slot.read().await?;
    if handle.cluster != snapshot.cluster || handle.template != snapshot.template.name {
        let side = |id: &str, image: &str, template: &str, cluster: &str| {
            format!("`{id}` (image `{image}`, template `{template}`, cluster `{cluster}`)")
        };
        return Err(Refusal::OtherTemplate {
            lease: side(lease_id, lease.image(), &handle.template, &handle.cluster),
            snapshot: side(
                &slot.id,
                &slot.image,
                &snapshot.template.name,
                &snapshot.cluster,
            ),
        }
        .into());
    }
    let snapshots = snapshots_on(session, &handle.cluster, "restore")?;
    if !snapshots.restores_in_place() {
        return Err(Refusal::NoRestoreInPlace {
            cluster: handle.cluster.clone(),
        }
        .into());
    }
    snapshots
        .restore(handle, &snapshot, deadline)
        .await
        .map_err(|error| {
            // The contract's refusals leave the sandbox as it was.
            match error.kind() {
                ErrorKind::Invalid | ErrorKind::Unsupported | ErrorKind::NotFound => {
                    SnapshotFailure::Step(backend("restore", error))
                }
                _ => SnapshotFailure::Broken(backend("restore", error)),
            }
        })
}

/// Deletes the slot's snapshot once no fork or restore holds it.
pub(crate) async fn delete(session: &Session, slot: &SnapshotSlot) {
    if let Some(snapshot) = slot.snapshot.write().await.take() {
        delete_now(session, &slot.id, &snapshot).await;
    }
}

/// Deletes every snapshot no fork or restore holds now (the daemon is
/// stopping: the run's reap that follows removes the others).
pub(crate) async fn delete_all(state: &AppState) {
    for slot in state.snapshots.take_all() {
        let taken = slot.snapshot.try_write().ok().and_then(|mut s| s.take());
        if let Some(snapshot) = taken {
            delete_now(&state.session, &slot.id, &snapshot).await;
        }
    }
    state.metrics.snapshots_live.set(0);
}

/// Deletes `snapshot` (the daemon's `id`) on its backend; a failure is
/// logged, and the run's reap removes it at the end.
async fn delete_now(session: &Session, id: &str, snapshot: &SnapshotRef) {
    let deleted = match snapshots_on(session, &snapshot.cluster, "delete snapshot") {
        Ok(snapshots) => snapshots
            .delete_snapshot(snapshot)
            .await
            .map_err(|e| backend("delete snapshot", e)),
        Err(error) => Err(error),
    };
    match deleted {
        Ok(()) => tracing::info!(snapshot = id, "deleted"),
        Err(error) => tracing::warn!(snapshot = id, "cannot delete: {error}"),
    }
}

/// Deletes, in the background, every snapshot idle past its time.
pub(crate) fn expire_idle(state: &AppState) {
    for slot in state.snapshots.take_idle() {
        tracing::info!(snapshot = %slot.id, "idle past its time; deleted");
        state.metrics.snapshots_expired.inc();
        state
            .metrics
            .snapshots_live
            .set(state.snapshots.len() as i64);
        let state = state.clone();
        tokio::spawn(async move { delete(&state.session, &slot).await });
    }
}
