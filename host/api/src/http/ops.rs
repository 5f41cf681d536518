//! Operations: liveness, readiness, metrics, plugins, the errors answered
//! last, the live page and the OpenAPI document.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;

use super::Answer;
use crate::model::{ErrorList, ErrorView, PluginList, PluginView, Ready};
use crate::state::AppState;

#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "the process is up")))]
pub(crate) async fn healthz() -> Answer<axum::Json<serde_json::Value>> {
    Ok(axum::Json(serde_json::json!({"status": "ok"})))
}

#[utoipa::path(get, path = "/readyz", responses((status = 200, body = Ready), (status = 503, body = Ready)))]
pub(crate) async fn readyz(
    State(state): State<AppState>,
) -> Answer<(StatusCode, axum::Json<Ready>)> {
    let plugins = state
        .session
        .registry()
        .statuses()
        .iter()
        .filter(|status| status.serving.is_some())
        .count();
    let ready = state.is_ready() && plugins > 0 && !state.stopping.is_cancelled();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok((
        status,
        axum::Json(Ready {
            ready,
            run_id: state.session.run_id().to_string(),
            clusters: state
                .session
                .clusters()
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            plugins,
            leases: state.leases.len(),
        }),
    ))
}

fn rfc3339(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

pub(crate) fn plugin_views(state: &AppState) -> Vec<PluginView> {
    let registry = state.session.registry();
    let calls = registry.call_counts();
    let counted = |name: &str, version: Option<&str>| {
        calls
            .iter()
            .find(|c| c.name == name && Some(c.version.as_str()) == version)
            .map_or((0, 0, 0), |c| (c.calls, c.faults, c.fallbacks))
    };
    registry
        .statuses()
        .into_iter()
        .map(|status| {
            let (calls, faults, fallbacks) = counted(
                &status.name,
                status.serving.as_ref().map(|s| &*s.plugin.version),
            );
            PluginView {
                kind: status.serving.as_ref().map(|s| s.kind.to_string()),
                version: status
                    .serving
                    .as_ref()
                    .map(|s| s.plugin.version.to_string()),
                tier: status
                    .serving
                    .as_ref()
                    .map(|s| format!("{:?}", s.tier).to_lowercase()),
                source: status.serving.as_ref().map(|s| s.source.to_string()),
                loaded_at: status.serving.as_ref().map(|s| rfc3339(s.loaded_at)),
                last_error: status.last_error,
                last_error_at: status.last_error_at.map(rfc3339),
                calls,
                faults,
                fallbacks,
                fault: status.fault,
                removed: status.removed,
                name: status.name,
            }
        })
        .collect()
}

#[utoipa::path(get, path = "/v1/plugins", responses((status = 200, body = PluginList)))]
pub(crate) async fn plugins(State(state): State<AppState>) -> Answer<axum::Json<PluginList>> {
    Ok(axum::Json(PluginList {
        plugins: plugin_views(&state),
    }))
}

#[utoipa::path(get, path = "/v1/errors", responses((status = 200, body = ErrorList)))]
pub(crate) async fn errors(State(state): State<AppState>) -> Answer<axum::Json<ErrorList>> {
    let errors = state
        .errors
        .latest()
        .into_iter()
        .map(|error| ErrorView {
            at: humantime::format_rfc3339_millis(error.at).to_string(),
            method: error.method,
            route: error.route,
            status: error.status,
            kind: error.kind,
            message: error.message,
        })
        .collect();
    Ok(axum::Json(ErrorList { errors }))
}

/// The live page: one self-contained document (its CSS and script inline)
/// that polls the JSON endpoints above.
const UI_PAGE: &str = include_str!("../../assets/ui.html");

/// What the page's own script and styles may do: fetch from the daemon
/// that served it, nothing else (no other origin, no frames, no forms).
const UI_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
    style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

#[utoipa::path(get, path = "/ui",
    params(("token" = Option<String>, Query, description = "the bearer token, for a browser that cannot send the header (accepted here and on a run's report.html only)")),
    responses((status = 200, content_type = "text/html", body = String, description = "the live page")))]
pub(crate) async fn ui() -> Answer<Response> {
    Ok(html(UI_PAGE, UI_POLICY))
}

/// An HTML page answered with headers that keep it to itself: no caching
/// (its URL may carry the token), no referrer leaving it, `policy` as its
/// content security policy.
pub(crate) fn html(body: impl IntoResponse, policy: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, policy),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(get, path = "/metrics", responses((status = 200, content_type = "application/openmetrics-text", body = String)))]
pub(crate) async fn metrics(State(state): State<AppState>) -> Answer<Response> {
    let pools = state.session.pools().await;
    let registry = state.session.registry();
    let loads = registry.load_counts();
    {
        let mut snapshot = state
            .metrics
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        snapshot.pools = pools
            .into_iter()
            .map(|p| (p.image, p.cluster, p.desired, p.ready))
            .collect();
        snapshot.plugins = plugin_views(&state)
            .into_iter()
            .map(|p| {
                (
                    p.name,
                    p.version.unwrap_or_default(),
                    p.tier.unwrap_or_default(),
                )
            })
            .collect();
        snapshot.plugin_loads = (loads.loaded, loads.failed);
        snapshot.plugin_calls = registry.call_counts();
        snapshot.retries = state.session.retries().into_iter().collect();
        snapshot.releases = state.session.releases();
        snapshot.prepares = state.session.prepares();
        snapshot.shared = state
            .shared
            .all()
            .iter()
            .map(|pool| pool.metrics())
            .collect();
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response())
}

/// The OpenAPI document of every endpoint, generated from the handlers.
/// Each handler names its tag: the module paths the document has always
/// grouped operations by, which clients may rely on, whatever module now
/// holds the handler.
#[derive(OpenApi)]
#[openapi(
    info(title = "sandfleet", description = "Sandboxes on demand for RL frameworks: leases, exec, grading, snapshots with forks and restores, warm pools, shared pools with sticky sessions and batch runs."),
    paths(
        crate::http::leases::acquire, crate::http::leases::acquire_batch, crate::http::leases::list, crate::http::leases::get,
        crate::http::leases::delete, crate::http::leases::renew, crate::http::leases::exec, crate::http::leases::put_file,
        crate::http::leases::get_file, crate::http::leases::evaluate, crate::http::leases::recycle,
        crate::http::leases::warm, crate::http::leases::pools, crate::http::leases::unwarm,
        crate::http::runs::start, crate::http::runs::list, crate::http::runs::get, crate::http::runs::results, crate::http::runs::report_html, crate::http::runs::cancel,
        crate::http::snapshots::take, crate::http::snapshots::get, crate::http::snapshots::delete,
        crate::http::snapshots::fork, crate::http::snapshots::restore,
        crate::http::shared::list, crate::http::shared::view, crate::http::shared::open, crate::http::shared::exec, crate::http::shared::close,
        plugins, errors, ui, healthz, readyz, metrics, openapi,
    ),
    modifiers(&BearerAuth),
)]
pub(crate) struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

#[utoipa::path(get, path = "/v1/openapi.json", responses((status = 200, description = "this document")))]
pub(crate) async fn openapi() -> Answer<axum::Json<utoipa::openapi::OpenApi>> {
    Ok(axum::Json(ApiDoc::openapi()))
}
