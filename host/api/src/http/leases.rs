//! The lease and pool endpoints.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandfleet_core::validate_labels;
use sandfleet_engine::{DEFAULT_WORKDIR, Evaluation, Purpose, Recycled};

use super::exec::{self, EncodingQuery};
use super::{Answer, detached};
use crate::domain::leases::{LeaseSlot, NewLease, new_id};
use crate::error::{AppError, ErrorBody, Json, OptionalJson, too_large_or};
use crate::model::{
    AcquireRequest, BatchRequest, EvaluateRequest, EvaluateResponse, ExecRequestBody, ExecResponse,
    GradeView, LeaseList, LeaseView, PoolRequest, PoolView, PoolsResponse, RecycleResponse,
    RenewRequest, TestView,
};
use crate::state::AppState;

/// Longest client run id kept with a lease.
const MAX_RUN_ID: usize = 128;

async fn view(slot: &LeaseSlot) -> Answer<LeaseView> {
    Ok(slot.view(&*slot.read().await?))
}

/// Labels as a client gives them: Kubernetes label rules.
pub(crate) fn check_labels(labels: &std::collections::BTreeMap<String, String>) -> Answer<()> {
    validate_labels(labels).map_err(|e| AppError::invalid(format!("labels: {e}")))
}

/// A client run id: at most [`MAX_RUN_ID`] characters.
pub(crate) fn check_run_id(run_id: Option<&str>) -> Answer<()> {
    match run_id {
        Some(id) if id.len() > MAX_RUN_ID => Err(AppError::invalid(format!(
            "run_id: at most {MAX_RUN_ID} characters"
        ))),
        _ => Ok(()),
    }
}

/// An idle time as a client gives it (`ttl_s`): at least a second.
pub(crate) fn ttl(ttl_s: Option<u64>) -> Answer<Option<Duration>> {
    match ttl_s {
        Some(0) => Err(AppError::invalid("ttl_s: must be at least 1")),
        ttl_s => Ok(ttl_s.map(Duration::from_secs)),
    }
}

async fn acquire_one(state: &AppState, body: AcquireRequest) -> Answer<Arc<LeaseSlot>> {
    state.check_accepting()?;
    check_labels(&body.labels)?;
    check_run_id(body.run_id.as_deref())?;
    let ttl = ttl(body.ttl_s)?;
    let (purpose, task_id) = match (body.image, &body.task) {
        (Some(image), None) => (
            Purpose::Image {
                image,
                workdir: body.workdir.unwrap_or_else(|| DEFAULT_WORKDIR.to_string()),
            },
            None,
        ),
        (None, Some(row)) => {
            let task = state.load_task(row).await?;
            let id = task.id.clone();
            (Purpose::Task(task), Some(id))
        }
        (Some(_), Some(_)) => {
            return Err(AppError::invalid(
                "give `image` or `task`, not both (a task names its image)",
            ));
        }
        (None, None) => {
            return Err(AppError::invalid(
                "missing field `image` (an image name) or `task` (a dataset row)",
            ));
        }
    };
    state.leases.check_room(1)?;
    let id = new_id("l");
    let started = Instant::now();
    let for_task = task_id.is_some();
    let lease = state.session.acquire(&id, purpose).await?;
    state.metrics.acquired(for_task, started.elapsed());
    let slot = state.leases.insert(
        NewLease {
            id,
            task_id,
            run_id: body.run_id,
            labels: body.labels,
            ttl,
        },
        lease,
    );
    state.metrics.leases_live.set(state.leases.len() as i64);
    tracing::info!(lease = %slot.id, "acquired");
    Ok(slot)
}

/// Acquires a lease for each of `requests`: all of them, or none. When one
/// fails, the leases acquired are released and the first error answers,
/// its message led by `name` of its index.
pub(crate) async fn acquire_all(
    state: &AppState,
    requests: Vec<AcquireRequest>,
    name: impl Fn(usize) -> String,
) -> Answer<Vec<LeaseView>> {
    state.leases.check_room(requests.len())?;
    let results = futures_util::future::join_all(requests.into_iter().map(|request| async {
        let slot = acquire_one(state, request).await?;
        let made = view(&slot).await;
        if made.is_err() {
            release(state, &slot.id);
        }
        made
    }))
    .await;
    let Some(index) = results.iter().position(Result::is_err) else {
        return Ok(results.into_iter().flatten().collect());
    };
    let mut error = None;
    for result in results {
        match result {
            Ok(lease) => {
                release(state, &lease.id);
            }
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    let error = error.expect("one failed");
    let message = format!(
        "{}: {}; the others acquired were released",
        name(index),
        error.message()
    );
    Err(error.with_message(message))
}

/// Releases the lease `id` in the background; false when it is not live.
pub(crate) fn release(state: &AppState, id: &str) -> bool {
    let Some(slot) = state.leases.remove(id) else {
        return false;
    };
    state.metrics.leases_live.set(state.leases.len() as i64);
    let state = state.clone();
    tokio::spawn(async move {
        state.leases.release(&state.session, &slot).await;
        tracing::info!(lease = %slot.id, "released");
    });
    true
}

#[utoipa::path(post, tag = "crate::routes", path = "/v1/leases", request_body = AcquireRequest,
    responses((status = 201, body = LeaseView), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(crate) async fn acquire(
    State(state): State<AppState>,
    Json(body): Json<AcquireRequest>,
) -> Answer<(StatusCode, axum::Json<LeaseView>)> {
    let slot = acquire_one(&state, body).await?;
    Ok((StatusCode::CREATED, axum::Json(view(&slot).await?)))
}

#[utoipa::path(post, tag = "crate::routes", path = "/v1/leases:batch", request_body = BatchRequest,
    responses((status = 201, body = LeaseList), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(crate) async fn acquire_batch(
    State(state): State<AppState>,
    Json(body): Json<BatchRequest>,
) -> Answer<(StatusCode, axum::Json<LeaseList>)> {
    if body.leases.is_empty() {
        return Err(AppError::invalid(
            "leases: give at least one acquire request",
        ));
    }
    let count = body.leases.len();
    let leases = acquire_all(&state, body.leases, |index| {
        format!("leases[{index}] of {count}")
    })
    .await?;
    Ok((StatusCode::CREATED, axum::Json(LeaseList { leases })))
}

/// `GET /v1/leases` filters.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ListQuery {
    run_id: Option<String>,
}

#[utoipa::path(get, tag = "crate::routes", path = "/v1/leases", params(("run_id" = Option<String>, Query, description = "only the leases of this client run id")),
    responses((status = 200, body = LeaseList)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Answer<axum::Json<LeaseList>> {
    let mut leases = Vec::new();
    for slot in state.leases.all() {
        if query.run_id.is_some() && slot.run_id != query.run_id {
            continue;
        }
        if let Ok(view) = view(&slot).await {
            leases.push(view);
        }
    }
    leases.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(axum::Json(LeaseList { leases }))
}

#[utoipa::path(get, tag = "crate::routes", path = "/v1/leases/{id}", responses((status = 200, body = LeaseView), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Answer<axum::Json<LeaseView>> {
    let slot = state.leases.get(&id)?;
    Ok(axum::Json(view(&slot).await?))
}

#[utoipa::path(delete, tag = "crate::routes", path = "/v1/leases/{id}", responses((status = 204), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Answer<StatusCode> {
    if release(&state, &id) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(state.leases.get(&id).err().map_or_else(
            || AppError::not_found(format!("lease `{id}` is not live")),
            AppError::from,
        ))
    }
}

#[utoipa::path(post, tag = "crate::routes", path = "/v1/leases/{id}/renew", request_body = RenewRequest,
    responses((status = 200, body = LeaseView), (status = 404, body = ErrorBody)))]
pub(crate) async fn renew(
    State(state): State<AppState>,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<RenewRequest>,
) -> Answer<axum::Json<LeaseView>> {
    let slot = state.leases.get(&id)?;
    let _in_use = slot.in_use();
    if let Some(ttl) = ttl(body.ttl_s)? {
        slot.set_ttl(ttl);
    }
    {
        let lease = slot.read().await?;
        state.session.renew(&lease).await?;
    }
    Ok(axum::Json(view(&slot).await?))
}

#[utoipa::path(post, tag = "crate::routes", path = "/v1/leases/{id}/exec", request_body = ExecRequestBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key returns the first execution's result"),
           ("encoding" = Option<String>, Query, description = "`base64` for exact bytes")),
    responses((status = 200, body = ExecResponse, description = "JSON, or with `Accept: application/x-ndjson` / `text/event-stream` output events then an `exit` event"),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(crate) async fn exec(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<EncodingQuery>,
    headers: HeaderMap,
    Json(body): Json<ExecRequestBody>,
) -> Answer<Response> {
    let slot = state.leases.get(&id)?;
    exec::serve(&state, &slot, &query, &headers, body).await
}

/// `?path=...&mode=...`.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct FileQuery {
    path: Option<String>,
    mode: Option<String>,
}

fn file_path(query: &FileQuery) -> Answer<&str> {
    match query.path.as_deref() {
        Some(path) if path.starts_with('/') => Ok(path),
        Some(path) => Err(AppError::invalid(format!(
            "path: `{path}` is not an absolute path in the sandbox"
        ))),
        None => Err(AppError::invalid("missing query parameter `path`")),
    }
}

#[utoipa::path(put, tag = "crate::routes", path = "/v1/leases/{id}/files",
    params(("path" = String, Query, description = "absolute path in the sandbox"), ("mode" = Option<String>, Query, description = "octal permission bits, default 644")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 204), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(crate) async fn put_file(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<FileQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<StatusCode> {
    let slot = state.leases.get(&id)?;
    let _in_use = slot.in_use();
    let path = file_path(&query)?;
    let mode = match query.mode.as_deref() {
        None => 0o644,
        Some(text) => u32::from_str_radix(text, 8)
            .ok()
            .filter(|mode| *mode <= 0o7777)
            .ok_or_else(|| {
                AppError::invalid(format!("mode: `{text}` is not octal permission bits"))
            })?,
    };
    let body = body.map_err(|e| too_large_or(e.status(), e.body_text()))?;
    let lease = slot.read().await?;
    state.session.put_file(&lease, path, &body, mode).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, tag = "crate::routes", path = "/v1/leases/{id}/files",
    params(("path" = String, Query, description = "absolute path in the sandbox")),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_file(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<FileQuery>,
) -> Answer<Response> {
    let slot = state.leases.get(&id)?;
    let _in_use = slot.in_use();
    let path = file_path(&query)?;
    let lease = slot.read().await?;
    let bytes = state.session.get_file(&lease, path).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

pub(crate) fn evaluation_view(evaluation: Evaluation) -> EvaluateResponse {
    EvaluateResponse {
        status: match evaluation.status {
            sandfleet_engine::TaskStatus::Ok => "ok",
            sandfleet_engine::TaskStatus::Failed => "failed",
            sandfleet_engine::TaskStatus::InfraError => "infra_error",
        }
        .to_string(),
        grade: evaluation.grade.map(|grade| GradeView {
            status: grade.status.name().to_string(),
            reward: grade.reward,
            detail: grade.detail,
            tests: grade
                .tests
                .into_iter()
                .map(|test| TestView {
                    status: test.status.name().to_string(),
                    name: test.name,
                })
                .collect(),
            report: serde_json::from_str(&grade.report)
                .unwrap_or(serde_json::Value::String(grade.report)),
        }),
        timed_out: evaluation.timed_out,
        error: evaluation.error,
        infra_failure: evaluation.infra_failure.map(|infra| infra.reason),
        adapter: format!("{}@{}", evaluation.adapter.name, evaluation.adapter.version),
        duration_ms: evaluation.duration.as_millis() as u64,
    }
}

#[utoipa::path(post, tag = "crate::routes", path = "/v1/leases/{id}/evaluate", request_body = EvaluateRequest,
    responses((status = 200, body = EvaluateResponse), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(crate) async fn evaluate(
    State(state): State<AppState>,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<EvaluateRequest>,
) -> Answer<axum::Json<EvaluateResponse>> {
    let slot = state.leases.get(&id)?;
    let _in_use = slot.in_use();
    let task = match &body.task {
        Some(row) => Some(state.load_task(row).await?),
        None if slot.task_id.is_none() => {
            return Err(AppError::invalid(
                "missing field `task`: this lease was acquired for an image, so say which task to evaluate",
            ));
        }
        None => None,
    };
    let started = Instant::now();
    let mut lease = slot.write().await?;
    let evaluation = state
        .session
        .evaluate(&mut lease, task, body.solution.as_deref())
        .await?;
    state
        .metrics
        .evaluate_seconds
        .observe(started.elapsed().as_secs_f64());
    Ok(axum::Json(evaluation_view(evaluation)))
}

#[utoipa::path(post, tag = "crate::routes", path = "/v1/leases/{id}/recycle",
    responses((status = 200, body = RecycleResponse), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(crate) async fn recycle(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Answer<axum::Json<RecycleResponse>> {
    let slot = state.leases.get(&id)?;
    // The lease is out of its slot while it recycles, so the work runs to
    // the end even when the client hangs up: dropping it half-way would
    // leak its sandbox.
    let recycled = detached(async move {
        let _in_use = slot.in_use();
        match slot.recycle(|lease| state.session.recycle(lease)).await? {
            Ok((lease, recycled)) => {
                state.leases.persist(&id, &lease);
                Ok(RecycleResponse {
                    reset: match recycled {
                        Recycled::Clean => "clean",
                        Recycled::Replaced => "replaced",
                    }
                    .to_string(),
                    lease: slot.view(&lease),
                })
            }
            Err(error) => {
                // The session released its sandbox; whoever waits on the
                // slot finds it released.
                release(&state, &id);
                Err(AppError::from(error))
            }
        }
    });
    recycled.await.map(axum::Json)
}

async fn pool_views(state: &AppState) -> Vec<PoolView> {
    state
        .session
        .pools()
        .await
        .into_iter()
        .map(|pool| PoolView {
            image: pool.image,
            cluster: pool.cluster,
            desired: pool.desired,
            ready: pool.ready,
            error: pool.error,
        })
        .collect()
}

#[utoipa::path(post, tag = "crate::routes", path = "/v1/pools", request_body = PoolRequest,
    responses((status = 202, body = PoolsResponse), (status = 422, body = ErrorBody)))]
pub(crate) async fn warm(
    State(state): State<AppState>,
    Json(body): Json<PoolRequest>,
) -> Answer<(StatusCode, axum::Json<PoolsResponse>)> {
    state.check_accepting()?;
    let mut images = body.images;
    for row in &body.tasks {
        images.push(state.load_task(row).await?.image);
    }
    if images.is_empty() {
        return Err(AppError::invalid(
            "missing field `images` (image names) or `tasks` (dataset rows)",
        ));
    }
    let plan = state
        .session
        .warm(images.iter().map(String::as_str))
        .await?;
    let planned = plan
        .images
        .iter()
        .cloned()
        .zip(plan.replicas.iter().copied())
        .collect();
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(PoolsResponse {
            planned: Some(planned),
            pools: pool_views(&state).await,
        }),
    ))
}

#[utoipa::path(get, tag = "crate::routes", path = "/v1/pools", responses((status = 200, body = PoolsResponse)))]
pub(crate) async fn pools(State(state): State<AppState>) -> Answer<axum::Json<PoolsResponse>> {
    Ok(axum::Json(PoolsResponse {
        planned: None,
        pools: pool_views(&state).await,
    }))
}

/// `DELETE /v1/pools?image=NAME`: which pool.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub(crate) struct PoolQuery {
    /// The image whose warm pool goes.
    image: Option<String>,
}

#[utoipa::path(delete, tag = "crate::routes", path = "/v1/pools", params(PoolQuery),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub(crate) async fn unwarm(
    State(state): State<AppState>,
    axum::extract::Query(query): axum::extract::Query<PoolQuery>,
) -> Answer<StatusCode> {
    let image = query
        .image
        .filter(|image| !image.is_empty())
        .ok_or_else(|| AppError::invalid("missing query parameter `image` (the pool's image)"))?;
    if state.session.unwarm(&image).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(AppError::not_found(format!(
            "no warm pool for image `{image}`"
        )))
    }
}
