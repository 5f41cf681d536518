//! The shared-pool endpoints: pools, and sessions on them.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::Answer;
use super::exec::{self, EncodingQuery};
use crate::domain::Refusal;
use crate::error::{ErrorBody, Json};
use crate::model::{
    ExecRequestBody, ExecResponse, SharedPoolList, SharedPoolView, SharedSessionView,
};
use crate::state::AppState;

#[utoipa::path(get, tag = "crate::shared::routes", path = "/v1/shared", responses((status = 200, body = SharedPoolList)))]
pub(crate) async fn list(State(state): State<AppState>) -> Answer<axum::Json<SharedPoolList>> {
    Ok(axum::Json(SharedPoolList {
        pools: state.shared.all().iter().map(|pool| pool.view()).collect(),
    }))
}

#[utoipa::path(get, tag = "crate::shared::routes", path = "/v1/shared/{pool}", responses((status = 200, body = SharedPoolView), (status = 404, body = ErrorBody)))]
pub(crate) async fn view(
    State(state): State<AppState>,
    Path(pool): Path<String>,
) -> Answer<axum::Json<SharedPoolView>> {
    Ok(axum::Json(state.shared.pool(&pool)?.view()))
}

#[utoipa::path(post, tag = "crate::shared::routes", path = "/v1/shared/{pool}/sessions",
    responses((status = 201, body = SharedSessionView), (status = 404, body = ErrorBody),
              (status = 429, body = ErrorBody, description = "`pool_full`: every healthy sandbox has max_sessions_per_sandbox sessions"),
              (status = 503, body = ErrorBody, description = "no healthy sandbox yet (filling or healing)")))]
pub(crate) async fn open(
    State(state): State<AppState>,
    Path(pool): Path<String>,
) -> Answer<(StatusCode, axum::Json<SharedSessionView>)> {
    state.check_accepting()?;
    let session = state.shared.open(&pool)?;
    Ok((
        StatusCode::CREATED,
        axum::Json(SharedSessionView {
            id: session.id.clone(),
            pool: session.pool.config.name.clone(),
            sandbox: session.sandbox.id.clone(),
        }),
    ))
}

#[utoipa::path(post, tag = "crate::shared::routes", path = "/v1/sessions/{id}/exec", request_body = ExecRequestBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key returns the first execution's result"),
           ("encoding" = Option<String>, Query, description = "`base64` for exact bytes")),
    responses((status = 200, body = ExecResponse, description = "as `POST /v1/leases/{id}/exec`, in the session's sandbox"),
              (status = 404, body = ErrorBody), (status = 410, body = ErrorBody, description = "`session_lost`: its sandbox was evicted or lost, and its state with it"),
              (status = 422, body = ErrorBody)))]
pub(crate) async fn exec(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<EncodingQuery>,
    headers: HeaderMap,
    Json(body): Json<ExecRequestBody>,
) -> Answer<Response> {
    let session = state.shared.session(&id)?;
    session.check()?;
    exec::serve(&state, &session, &query, &headers, body).await
}

#[utoipa::path(delete, tag = "crate::shared::routes", path = "/v1/sessions/{id}", responses((status = 204), (status = 404, body = ErrorBody)))]
pub(crate) async fn close(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Answer<StatusCode> {
    if state.shared.close(&id) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Refusal::SessionNotOpen { id }.into())
    }
}
