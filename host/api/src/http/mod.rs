//! The daemon over HTTP: every endpoint in one router, the body limits,
//! and one middleware that checks the bearer token, opens the request's
//! span (with the lease id), counts the request and keeps it in the record
//! of recent errors when it failed. Handlers take the
//! state and their extractors, ask the domain, and answer
//! `Result<_, AppError>`; a domain refusal becomes its status in
//! `crate::error`.

use std::future::Future;
use std::time::{Instant, SystemTime};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Query, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use tracing::Instrument;

use crate::domain::errors::ErrorRecord;
use crate::error::{Answered, AppError, ErrorKind};
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
        .route("/v1/runs/{id}/report.html", get(runs::report_html))
        .route("/v1/plugins", get(ops::plugins))
        .route("/v1/errors", get(ops::errors))
        .route("/ui", get(ops::ui))
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

/// The routes a browser opens by URL (the live page, and a run's report
/// it links to), which cannot send a header: these alone also take the
/// token as `?token=`.
const OPENED_BY_URL: [&str; 2] = ["/ui", "/v1/runs/{id}/report.html"];

/// The longest message the record of recent errors keeps of one error.
const RECORDED_MESSAGE: usize = 1000;

/// Token, span, metrics, and the record of recent errors. Only the route's
/// template is recorded or logged, never the URL: its query may carry the
/// token, its path a lease id or a file's path.
async fn around(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    if route != "/healthz"
        && let Some(token) = &state.token
        && !authorized(&request, &route, token)
    {
        let message = if OPENED_BY_URL.contains(&route.as_str()) {
            "missing or wrong token: open this page with `?token=<the daemon's token>` (or send `Authorization: Bearer <token>`)"
        } else {
            "missing or wrong bearer token (`Authorization: Bearer <token>`)"
        };
        let refused = AppError::new(StatusCode::UNAUTHORIZED, ErrorKind::Unauthorized, message)
            .into_response();
        record_error(&state, method, route, &refused);
        return refused;
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
    record_error(&state, method, route.clone(), &response);
    state
        .metrics
        .request(route, response.status().as_u16(), started.elapsed());
    response
}

/// Keeps `response` in the record of recent errors when it is one.
fn record_error(state: &AppState, method: String, route: String, response: &Response) {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return;
    }
    let (kind, message) = match response.extensions().get::<Answered>() {
        Some(answered) => (answered.kind.name(), answered.message.clone()),
        None => (
            String::new(),
            status.canonical_reason().unwrap_or_default().to_string(),
        ),
    };
    let message = match message.char_indices().nth(RECORDED_MESSAGE) {
        Some((end, _)) => format!("{}…", &message[..end]),
        None => message,
    };
    state.errors.record(ErrorRecord {
        at: SystemTime::now(),
        method,
        route,
        status: status.as_u16(),
        kind,
        message,
    });
}

/// The bearer token from the `Authorization` header or, on the routes a
/// browser opens by URL and for `GET` alone, from `?token=`.
fn authorized(request: &Request, route: &str, token: &str) -> bool {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if header.is_some_and(|given| same(given, token)) {
        return true;
    }
    let by_url =
        matches!(*request.method(), Method::GET | Method::HEAD) && OPENED_BY_URL.contains(&route);
    by_url
        && Query::<Vec<(String, String)>>::try_from_uri(request.uri()).is_ok_and(|Query(pairs)| {
            pairs
                .iter()
                .any(|(name, given)| name == "token" && same(given, token))
        })
}

/// Whether `given` is `token`, compared in time independent of where they
/// differ.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}
