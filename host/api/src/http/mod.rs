//! The daemon over HTTP: every endpoint in one router, the body limits,
//! and one middleware that checks the bearer token, opens the request's
//! span (with the lease id) and counts the request. Handlers take the
//! state and their extractors, ask the domain, and answer
//! `Result<_, AppError>`; a domain refusal becomes its status in
//! `crate::error`.

use std::future::Future;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use tracing::Instrument;

use crate::error::{AppError, ErrorKind};
use crate::state::AppState;

/// What every handler answers: its response (JSON, a status with JSON, or
/// a stream), or an error that leaves as JSON with its status.
pub(crate) type Answer<T> = Result<T, AppError>;

mod exec;
mod leases;
pub(crate) mod ops;
mod runs;
mod shared;
mod snapshots;

#[cfg(test)]
mod tests;

/// The daemon's router over `state`.
pub(crate) fn app(state: AppState) -> Router {
    let max_body = state.config.api.max_body;
    let max_upload = state.config.api.max_upload;
    let files = get(leases::get_file)
        .put(leases::put_file)
        .layer(DefaultBodyLimit::max(max_upload));
    Router::new()
        .route("/v1/leases", post(leases::acquire).get(leases::list))
        .route("/v1/leases:batch", post(leases::acquire_batch))
        .route("/v1/leases/{id}", get(leases::get).delete(leases::delete))
        .route("/v1/leases/{id}/exec", post(leases::exec))
        .route("/v1/leases/{id}/files", files)
        .route("/v1/leases/{id}/evaluate", post(leases::evaluate))
        .route("/v1/leases/{id}/recycle", post(leases::recycle))
        .route("/v1/leases/{id}/renew", post(leases::renew))
        .route("/v1/leases/{id}/snapshots", post(snapshots::take))
        .route("/v1/leases/{id}/restore", post(snapshots::restore))
        .route(
            "/v1/snapshots/{id}",
            get(snapshots::get).delete(snapshots::delete),
        )
        .route("/v1/snapshots/{id}/leases", post(snapshots::fork))
        .route(
            "/v1/pools",
            post(leases::warm).get(leases::pools).delete(leases::unwarm),
        )
        .route("/v1/shared", get(shared::list))
        .route("/v1/shared/{pool}", get(shared::view))
        .route("/v1/shared/{pool}/sessions", post(shared::open))
        .route("/v1/sessions/{id}", delete(shared::close))
        .route("/v1/sessions/{id}/exec", post(shared::exec))
        .route("/v1/runs", post(runs::start).get(runs::list))
        .route("/v1/runs/{id}", get(runs::get).delete(runs::cancel))
        .route("/v1/runs/{id}/results", get(runs::results))
        .route("/v1/plugins", get(ops::plugins))
        .route("/v1/openapi.json", get(ops::openapi))
        .route("/metrics", get(ops::metrics))
        .route("/readyz", get(ops::readyz))
        .route("/healthz", get(ops::healthz))
        .route_layer(middleware::from_fn_with_state(state.clone(), around))
        .layer(DefaultBodyLimit::max(max_body))
        .fallback(|| async { AppError::not_found("no such endpoint; see /v1/openapi.json") })
        .method_not_allowed_fallback(|| async {
            AppError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                ErrorKind::InvalidRequest,
                "this endpoint does not take that method; see /v1/openapi.json",
            )
        })
        .with_state(state)
}

/// Runs `work` to its end in a task of its own, even when the client hangs
/// up: work that changes a sandbox or makes something must not stop
/// half-way, leaving it unknown or unowned.
pub(crate) async fn detached<T: Send + 'static>(
    work: impl Future<Output = Answer<T>> + Send + 'static,
) -> Answer<T> {
    match tokio::spawn(work).await {
        Ok(answer) => answer,
        Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        Err(_) => Err(AppError::unavailable("the daemon is shutting down")),
    }
}

/// Token, span, metrics.
async fn around(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    if route != "/healthz"
        && let Some(token) = &state.token
        && !authorized(&request, token)
    {
        return AppError::new(
            StatusCode::UNAUTHORIZED,
            ErrorKind::Unauthorized,
            "missing or wrong bearer token (`Authorization: Bearer <token>`)",
        )
        .into_response();
    }
    let lease = request
        .uri()
        .path()
        .strip_prefix("/v1/leases/")
        .map(|rest| rest.split('/').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        route = %route,
        lease = %lease,
        status = tracing::field::Empty,
    );
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    span.record("status", response.status().as_u16());
    state
        .metrics
        .request(route, response.status().as_u16(), started.elapsed());
    response
}

fn authorized(request: &Request, token: &str) -> bool {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compared in time independent of where they differ.
    given.is_some_and(|given| {
        given.len() == token.len()
            && given
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    })
}
