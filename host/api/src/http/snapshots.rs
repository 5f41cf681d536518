//! The snapshot endpoints: a lease's sandbox snapshotted, leases forked
//! from a snapshot, a lease put back to one in place, and snapshots looked
//! up and deleted.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::StatusCode;

use sandfleet_engine::DEFAULT_WORKDIR;

use super::leases::{check_labels, check_run_id, release, ttl};
use super::{Answer, detached};
use crate::domain::Refusal;
use crate::domain::leases::{LeaseSlot, NewLease, new_id};
use crate::domain::snapshots::{self, NewSnapshot, SnapshotFailure, SnapshotSlot};
use crate::error::{ErrorBody, Json, OptionalJson};
use crate::model::{
    ForkRequest, LeaseList, LeaseView, RestoreRequest, SnapshotRequest, SnapshotView,
};
use crate::state::AppState;

#[utoipa::path(post, tag = "crate::snapshots", path = "/v1/leases/{id}/snapshots", request_body = SnapshotRequest,
    responses((status = 201, body = SnapshotView, description = "the lease's sandbox's files as they are now; the lease serves on"),
              (status = 404, body = ErrorBody, description = "the lease is not live"),
              (status = 410, body = ErrorBody, description = "`sandbox_lost`: the lease's sandbox is gone"),
              (status = 422, body = ErrorBody),
              (status = 501, body = ErrorBody, description = "`backend`: the lease's cluster cannot snapshot sandboxes"),
              (status = 503, body = ErrorBody, description = "the backend has no room for it")))]
pub(crate) async fn take(
    State(state): State<AppState>,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<SnapshotRequest>,
) -> Answer<(StatusCode, axum::Json<SnapshotView>)> {
    state.check_accepting()?;
    let ttl = ttl(body.ttl_s)?;
    let slot = state.leases.get(&id)?;
    let deadline = Instant::now() + state.config.fleet.claim_timeout;
    // Run to the end even when the client hangs up: a snapshot made and
    // not in the table would be owned by no one until the daemon stops.
    let taken = detached(async move {
        let _in_use = slot.in_use();
        let started = Instant::now();
        let lease = slot.read().await?;
        let (snapshot, restores_in_place) =
            snapshots::take(&state.session, &lease, &slot.id, deadline).await?;
        let metrics = &state.metrics;
        metrics
            .snapshot_seconds
            .observe(started.elapsed().as_secs_f64());
        metrics.snapshots_taken.inc();
        let taken = state.snapshots.insert(
            NewSnapshot {
                id: new_id("snap"),
                lease: slot.id.clone(),
                image: lease.image().to_string(),
                run_id: slot.run_id.clone(),
                restores_in_place,
                ttl,
            },
            snapshot,
        );
        metrics.snapshots_live.set(state.snapshots.len() as i64);
        tracing::info!(snapshot = %taken.id, lease = %slot.id, "taken");
        Ok(taken.view())
    });
    Ok((StatusCode::CREATED, axum::Json(taken.await?)))
}

#[utoipa::path(get, tag = "crate::snapshots", path = "/v1/snapshots/{id}", responses((status = 200, body = SnapshotView), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Answer<axum::Json<SnapshotView>> {
    Ok(axum::Json(state.snapshots.get(&id)?.view()))
}

#[utoipa::path(delete, tag = "crate::snapshots", path = "/v1/snapshots/{id}",
    responses((status = 204, description = "deleted once no fork or restore uses it; leases forked from it serve on"), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Answer<StatusCode> {
    let slot = state.snapshots.remove(&id)?;
    state
        .metrics
        .snapshots_live
        .set(state.snapshots.len() as i64);
    tokio::spawn(async move { snapshots::delete(&state.session, &slot).await });
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, tag = "crate::snapshots", path = "/v1/snapshots/{id}/leases", request_body = ForkRequest,
    responses((status = 201, body = LeaseList, description = "`count` new leases, each a fork of the snapshot on its cluster, all or none"),
              (status = 404, body = ErrorBody, description = "the snapshot is not live"),
              (status = 422, body = ErrorBody, description = "a count of 0 or above `[api] max_leases`, naming the snapshot"),
              (status = 501, body = ErrorBody, description = "`backend`: the snapshot's cluster cannot fork"),
              (status = 503, body = ErrorBody, description = "no room for that many leases now; none was kept")))]
pub(crate) async fn fork(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<ForkRequest>,
) -> Answer<(StatusCode, axum::Json<LeaseList>)> {
    state.check_accepting()?;
    let snapshot = state.snapshots.get(&id)?;
    let count = body.count as usize;
    if count == 0 {
        return Err(Refusal::NoForks { snapshot: id }.into());
    }
    let max = state.leases.max();
    if count > max {
        return Err(Refusal::TooManyForks {
            snapshot: id,
            count: body.count,
            max,
        }
        .into());
    }
    check_labels(&body.labels)?;
    let ttl = ttl(body.ttl_s)?;
    let run_id = body.run_id.or_else(|| snapshot.run_id.clone());
    check_run_id(run_id.as_deref())?;
    state.leases.check_room(count)?;
    let workdir = body.workdir.unwrap_or_else(|| DEFAULT_WORKDIR.to_string());
    let names: Vec<String> = (0..count).map(|_| new_id("l")).collect();
    // Run to the end even when the client hangs up: forks made and not in
    // the table would be owned by no one until the daemon stops.
    let forked = detached(async move {
        let _in_use = snapshot.in_use();
        let started = Instant::now();
        let reference = snapshot.read().await?.clone();
        let leases = state
            .session
            .fork(&reference, &snapshot.image, &workdir, &names)
            .await?;
        let mut views = Vec::with_capacity(leases.len());
        for (lease, name) in leases.into_iter().zip(names) {
            let slot = state.leases.insert(
                NewLease {
                    id: name,
                    task_id: None,
                    run_id: run_id.clone(),
                    labels: body.labels.clone(),
                    ttl,
                },
                lease,
            );
            views.push(slot.view(&*slot.read().await?));
        }
        let metrics = &state.metrics;
        metrics
            .fork_seconds
            .observe(started.elapsed().as_secs_f64());
        metrics.leases_forked.inc_by(count as u64);
        metrics.leases_live.set(state.leases.len() as i64);
        tracing::info!(snapshot = %snapshot.id, count, "forked");
        Ok(views)
    });
    let leases = forked.await?;
    Ok((StatusCode::CREATED, axum::Json(LeaseList { leases })))
}

#[utoipa::path(post, tag = "crate::snapshots", path = "/v1/leases/{id}/restore", request_body = RestoreRequest,
    responses((status = 200, body = LeaseView, description = "the lease's sandbox put back to the snapshot: every process ended, every file since gone"),
              (status = 404, body = ErrorBody, description = "the lease or the snapshot is not live"),
              (status = 410, body = ErrorBody, description = "`sandbox_lost`: the lease's sandbox is gone"),
              (status = 422, body = ErrorBody, description = "the snapshot is of another image or template, naming both"),
              (status = 501, body = ErrorBody, description = "`backend`: the lease's cluster cannot restore in place"),
              (status = 502, body = ErrorBody, description = "the restore failed half-way; the lease was released")))]
pub(crate) async fn restore(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<RestoreRequest>,
) -> Answer<axum::Json<LeaseView>> {
    let slot = state.leases.get(&id)?;
    let snapshot = state.snapshots.get(&body.snapshot)?;
    // Run to the end even when the client hangs up: a sandbox left half
    // restored must be released, not served.
    let restored = detached(async move {
        let _in_use = snapshot.in_use();
        match restore_to(&state, &slot, &snapshot).await {
            Ok(()) => Ok(slot.view(&*slot.read().await?)),
            Err(broken @ SnapshotFailure::Broken(_)) => {
                release(&state, &slot.id);
                Err(broken.into())
            }
            Err(error) => Err(error.into()),
        }
    });
    restored.await.map(axum::Json)
}

/// Puts the sandbox of the lease in `slot` back to `snapshot`, holding the
/// lease alone meanwhile.
async fn restore_to(
    state: &AppState,
    slot: &Arc<LeaseSlot>,
    snapshot: &SnapshotSlot,
) -> Result<(), SnapshotFailure> {
    let _in_use = slot.in_use();
    let lease = slot.write().await?;
    let started = Instant::now();
    let deadline = started + state.config.fleet.claim_timeout;
    snapshots::restore(&state.session, &lease, &slot.id, snapshot, deadline).await?;
    state
        .metrics
        .restore_seconds
        .observe(started.elapsed().as_secs_f64());
    Ok(())
}
