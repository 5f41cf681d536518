//! The lifecycle API (`/v1/...`, also mounted bare): auth, request ids,
//! the `flaky` fault, the sandbox routes, and the snapshot routes
//! (`snapshots`).

mod snapshots;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, patch, post};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::error::{ApiError, pydantic};
use crate::fleet::{Fleet, Sandbox};
use crate::random::Rng;
use crate::validate;

/// The server version `/version` reports: the release whose wire behaviour
/// is emulated.
pub const SERVER_VERSION: &str = "1.1.1";

/// State shared by the lifecycle routes.
pub(crate) struct App {
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) api_key: String,
    pub(crate) upstream: crate::proxy::Upstream,
    flaky: Mutex<Rng>,
    request_ids: Mutex<Rng>,
}

impl App {
    pub(crate) fn new(fleet: Arc<Fleet>, api_key: String) -> Arc<App> {
        let seed = fleet.faults.seed;
        Arc::new(App {
            fleet,
            api_key,
            upstream: crate::proxy::upstream(),
            flaky: Mutex::new(Rng::seeded(seed)),
            request_ids: Mutex::new(Rng::from_entropy()),
        })
    }
}

type AppState = State<Arc<App>>;

/// The routes of the API, without prefix.
fn api() -> Router<Arc<App>> {
    Router::new()
        .route("/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(read).delete(delete))
        .route("/sandboxes/{id}/metadata", patch(patch_metadata))
        .route("/sandboxes/{id}/renew-expiration", post(renew))
        .route("/sandboxes/{id}/endpoints/{port}", get(endpoint))
        .route("/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/snapshots", get(snapshots::list))
        .route(
            "/snapshots/{id}",
            get(snapshots::read).delete(snapshots::delete),
        )
        .route(
            "/sandboxes/{id}/proxy/{port}",
            any(crate::proxy::forward_root),
        )
        .route(
            "/sandboxes/{id}/proxy/{port}/{*path}",
            any(crate::proxy::forward),
        )
}

/// The whole lifecycle server.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .nest("/v1", api())
        .merge(api())
        .route("/v1/metrics/events", post(metrics_event))
        .route(
            "/health",
            get(|| async { axum::Json(json!({"status": "healthy"})) }),
        )
        .route(
            "/version",
            get(|| async { axum::Json(json!({"version": SERVER_VERSION})) }),
        )
        .route("/debug/executions", get(executions))
        .route("/debug/sandboxes", get(debug_sandboxes))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"detail": "Not Found"})),
            )
        })
        .layer(middleware::from_fn_with_state(Arc::clone(&app), flaky))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), deletes))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), auth))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), request_id))
        .with_state(app)
}

const API_KEY_HEADER: &str = "open-sandbox-api-key";

/// Paths that need no key: the server's own exemptions, and the server
/// proxy (single-tenant mode).
fn exempt(path: &str) -> bool {
    matches!(
        path,
        "/health" | "/version" | "/docs" | "/redoc" | "/openapi.json"
    ) || is_proxy(path)
}

fn is_proxy(path: &str) -> bool {
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    rest.strip_prefix("/sandboxes/")
        .is_some_and(|rest| rest.split('/').nth(1) == Some("proxy"))
}

async fn auth(State(app): AppState, request: Request, next: Next) -> Response {
    if exempt(request.uri().path()) {
        return next.run(request).await;
    }
    match request.headers().get(API_KEY_HEADER) {
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "MISSING_API_KEY",
            "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.",
        )
        .into_response(),
        Some(key) if key.as_bytes() != app.api_key.as_bytes() => {
            ApiError::new(StatusCode::UNAUTHORIZED, "INVALID_API_KEY", "Invalid API key.").into_response()
        }
        Some(_) => next.run(request).await,
    }
}

/// The `flaky` fault: a fraction of lifecycle calls (not the proxy, health,
/// version or debug) answer 503 before anything is done.
async fn flaky(State(app): AppState, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let lifecycle = (path.starts_with("/v1/") || path.starts_with("/sandboxes"))
        && !is_proxy(path)
        && path != "/debug/executions";
    if let Some(p) = app.fleet.faults.flaky
        && lifecycle
    {
        let draw = app.flaky.lock().expect("flaky lock poisoned").unit();
        if draw < p {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "GENERAL::UNKNOWN_ERROR",
                format!("Service temporarily unavailable (fault flaky={p}: the request was not processed)"),
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Counts sandbox deletes as they arrive; with `throttle-deletes`, answers
/// each with 429 before anything is done.
async fn deletes(State(app): AppState, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    let sandbox = rest
        .strip_prefix("/sandboxes/")
        .is_some_and(|id| !id.is_empty() && !id.contains('/'));
    if request.method() != axum::http::Method::DELETE || !sandbox {
        return next.run(request).await;
    }
    app.fleet.counters.delete_requested();
    if app.fleet.faults.throttle_deletes {
        let mut response = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "GENERAL::TOO_MANY_REQUESTS",
            "Too many requests (fault throttle-deletes: the sandbox was not deleted)",
        )
        .into_response();
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, 1.into());
        return response;
    }
    next.run(request).await
}

/// `X-Request-ID` on every response: the client's, or a new one.
async fn request_id(State(app): AppState, request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get("x-request-id")
        .cloned()
        .unwrap_or_else(|| {
            let hex = app
                .request_ids
                .lock()
                .expect("request id lock poisoned")
                .hex(16);
            HeaderValue::from_str(&hex).expect("hex is a header value")
        });
    let mut response = next.run(request).await;
    response.headers_mut().insert("x-request-id", id);
    response
}

fn time(ts: Timestamp) -> String {
    ts.to_string()
}

fn status_json(sandbox: &Sandbox) -> Value {
    json!({
        "state": "Running",
        "reason": "SANDBOX_READY",
        "message": "Sandbox is running",
        "lastTransitionAt": time(sandbox.created_at),
    })
}

fn sandbox_json(sandbox: &Sandbox) -> Value {
    let mut body = json!({
        "id": sandbox.id,
        "status": status_json(sandbox),
        "metadata": sandbox.metadata(),
        "entrypoint": sandbox.spec.entrypoint,
        "expiresAt": sandbox.expires_at().map(time),
        "createdAt": time(sandbox.created_at),
    });
    // Its startup source: the image, or the snapshot it was restored from.
    match &sandbox.spec.snapshot {
        Some(snapshot) => body["snapshotId"] = json!(snapshot),
        None => body["image"] = json!({"uri": sandbox.spec.image}),
    }
    if !sandbox.spec.extensions.is_empty() {
        body["extensions"] = json!(sandbox.spec.extensions);
    }
    body
}

fn json_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::validation(pydantic(
            "json_invalid",
            &["body", &e.column().to_string()],
            "JSON decode error",
            json!({}),
            Some(json!({"error": e.to_string()})),
        ))
    })
}

async fn create(State(app): AppState, body: Bytes) -> Result<Response, ApiError> {
    let spec = validate::create_request(&json_body(&body)?)?;
    let sandbox = app.fleet.create(spec).await?;
    let mut reply = json!({
        "id": sandbox.id,
        "status": status_json(&sandbox),
        "metadata": sandbox.metadata(),
        "expiresAt": sandbox.expires_at().map(time),
        "createdAt": time(sandbox.created_at),
        "entrypoint": sandbox.spec.entrypoint,
    });
    if !sandbox.spec.extensions.is_empty() {
        reply["extensions"] = json!(sandbox.spec.extensions);
    }
    Ok((StatusCode::ACCEPTED, axum::Json(reply)).into_response())
}

fn found(app: &App, id: &str) -> Result<Arc<Sandbox>, ApiError> {
    app.fleet
        .get(id)
        .ok_or_else(|| ApiError::sandbox_not_found(id))
}

async fn read(State(app): AppState, Path(id): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let sandbox = found(&app, &id)?;
    Ok(axum::Json(sandbox_json(&sandbox)))
}

async fn delete(State(app): AppState, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    app.fleet
        .delete(&id, false)
        .await
        .map(|()| StatusCode::NO_CONTENT)
        .ok_or_else(|| ApiError::sandbox_not_found(&id))
}

fn query_int(name: &str, text: &str, min: i64, max: Option<i64>) -> Result<i64, ApiError> {
    let n: i64 = text.parse().map_err(|_| {
        ApiError::validation(pydantic(
            "int_parsing",
            &["query", name],
            "Input should be a valid integer, unable to parse string as an integer",
            json!(text),
            None,
        ))
    })?;
    if n < min {
        return Err(ApiError::validation(pydantic(
            "greater_than_equal",
            &["query", name],
            &format!("Input should be greater than or equal to {min}"),
            json!(text),
            Some(json!({"ge": min})),
        )));
    }
    if let Some(max) = max
        && n > max
    {
        return Err(ApiError::validation(pydantic(
            "less_than_equal",
            &["query", name],
            &format!("Input should be less than or equal to {max}"),
            json!(text),
            Some(json!({"le": max})),
        )));
    }
    Ok(n)
}

async fn list(
    State(app): AppState,
    OriginalUri(uri): OriginalUri,
) -> Result<axum::Json<Value>, ApiError> {
    let query = uri.query().unwrap_or_default();
    let mut states = Vec::new();
    let mut filters = BTreeMap::new();
    let (mut page, mut page_size) = (1i64, 20i64);
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "state" => states.push(value.to_ascii_lowercase()),
            "metadata" => {
                for pair in value.split('&').filter(|p| !p.is_empty()) {
                    let Some((k, v)) = pair.split_once('=') else {
                        return Err(ApiError::bad_request(
                            "SANDBOX::INVALID_METADATA_FORMAT",
                            format!(
                                "Invalid metadata filter '{value}': expected k=v pairs joined by '&'"
                            ),
                        ));
                    };
                    let decode = |s: &str| {
                        form_urlencoded::parse(format!("x={s}").as_bytes())
                            .next()
                            .map(|(_, v)| v.into_owned())
                            .unwrap_or_default()
                    };
                    filters.insert(decode(k), decode(v));
                }
            }
            "page" => page = query_int("page", &value, 1, None)?,
            "pageSize" => page_size = query_int("pageSize", &value, 1, Some(200))?,
            _ => {}
        }
    }
    let mut matching: Vec<Arc<Sandbox>> = app
        .fleet
        .all()
        .into_iter()
        .filter(|_| states.is_empty() || states.iter().any(|s| s == "running"))
        .filter(|s| {
            let metadata = s.metadata();
            filters.iter().all(|(k, v)| metadata.get(k) == Some(v))
        })
        .collect();
    matching.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    Ok(axum::Json(paginated(
        matching.iter().map(|s| sandbox_json(s)).collect(),
        page,
        page_size,
    )))
}

/// Page `page` of `items`, `page_size` to a page, with its pagination.
fn paginated(items: Vec<Value>, page: i64, page_size: i64) -> Value {
    let total = items.len() as i64;
    let total_pages = (total + page_size - 1) / page_size;
    let items: Vec<Value> = items
        .into_iter()
        .skip(((page - 1) * page_size) as usize)
        .take(page_size as usize)
        .collect();
    json!({
        "items": items,
        "pagination": {
            "page": page,
            "pageSize": page_size,
            "totalItems": total,
            "totalPages": total_pages,
            "hasNextPage": page < total_pages,
        },
    })
}

async fn patch_metadata(
    State(app): AppState,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    let sandbox = found(&app, &id)?;
    let patch = json_body(&body)?;
    let Some(patch) = patch.as_object() else {
        return Err(ApiError::validation(pydantic(
            "dict_type",
            &["body"],
            "Input should be a valid dictionary",
            patch,
            None,
        )));
    };
    let mut merged = sandbox.metadata();
    for (key, value) in patch {
        match value {
            Value::Null => {
                merged.remove(key);
            }
            Value::String(v) => {
                validate::metadata_label(key, v)?;
                merged.insert(key.clone(), v.clone());
            }
            other => {
                return Err(ApiError::validation(pydantic(
                    "string_type",
                    &["body", key],
                    "Input should be a valid string",
                    other.clone(),
                    None,
                )));
            }
        }
    }
    *sandbox.metadata.lock().expect("metadata lock poisoned") = merged;
    Ok(axum::Json(sandbox_json(&sandbox)))
}

/// An RFC 3339 time; one without an offset is taken as UTC, as the server
/// does.
fn parse_time(text: &str) -> Option<Timestamp> {
    text.parse::<Timestamp>().ok().or_else(|| {
        text.parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    })
}

async fn renew(
    State(app): AppState,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    let body = json_body(&body)?;
    let Some(raw) = body.get("expiresAt") else {
        return Err(ApiError::validation(pydantic(
            "missing",
            &["body", "expiresAt"],
            "Field required",
            body,
            None,
        )));
    };
    let Some(at) = raw.as_str().and_then(parse_time) else {
        return Err(ApiError::validation(pydantic(
            "datetime_from_date_parsing",
            &["body", "expiresAt"],
            "Input should be a valid datetime or date",
            raw.clone(),
            None,
        )));
    };
    let sandbox = found(&app, &id)?;
    if at <= Timestamp::now() {
        return Err(ApiError::runtime(
            StatusCode::BAD_REQUEST,
            "INVALID_EXPIRATION",
            format!("New expiration time {at} must be in the future"),
        ));
    }
    app.fleet.set_expiry(&sandbox, at);
    Ok(axum::Json(json!({"expiresAt": time(at)})))
}

fn parse_bool(name: &str, text: &str) -> Result<bool, ApiError> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Ok(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Ok(false),
        _ => Err(ApiError::validation(pydantic(
            "bool_parsing",
            &["query", name],
            "Input should be a valid boolean, unable to interpret input",
            json!(text),
            None,
        ))),
    }
}

async fn endpoint(
    State(app): AppState,
    Path((id, port)): Path<(String, String)>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, ApiError> {
    let port = query_int("port", &port, 1, Some(65535)).map_err(|_| {
        ApiError::runtime(
            StatusCode::BAD_REQUEST,
            "INVALID_PORT",
            format!("Invalid port {port}: must be 1-65535"),
        )
    })?;
    let mut proxied = false;
    for (key, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        if key == "use_server_proxy" {
            proxied = parse_bool("use_server_proxy", &value)?;
        }
    }
    let sandbox = found(&app, &id)?;
    let endpoint = if proxied {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("127.0.0.1");
        let prefix = if uri.path().starts_with("/v1/") {
            "/v1"
        } else {
            ""
        };
        format!("{host}{prefix}/sandboxes/{id}/proxy/{port}")
    } else {
        format!("{}:{port}", sandbox.execd_ip)
    };
    Ok(axum::Json(json!({"endpoint": endpoint})))
}

async fn metrics_event(body: Bytes) -> Result<StatusCode, ApiError> {
    let event = json_body(&body)?;
    if event.get("eventType").and_then(Value::as_str) != Some("sandbox.create") {
        return Err(ApiError::validation(pydantic(
            "literal_error",
            &["body", "eventType"],
            "Input should be 'sandbox.create'",
            event.get("eventType").cloned().unwrap_or(Value::Null),
            Some(json!({"expected": "'sandbox.create'"})),
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn executions(State(app): AppState) -> axum::Json<crate::counters::Executions> {
    axum::Json(app.fleet.counters.snapshot(app.fleet.live()))
}

/// What the emulator knows of each sandbox beyond the API's reply: the
/// resources asked for (limits and requests apart) and its execd.
async fn debug_sandboxes(State(app): AppState) -> axum::Json<Value> {
    let items: Vec<Value> = app
        .fleet
        .all()
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "image": s.spec.image,
                "resourceLimits": s.spec.limits,
                "resourceRequests": s.spec.requests,
                "pooled": s.spec.pooled,
                "networkPolicy": s.spec.network_policy,
                "execd": format!("{}:{}", s.execd_ip, crate::execd::EXECD_PORT),
            })
        })
        .collect();
    axum::Json(json!({"items": items}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_are_exempt_and_the_rest_is_not() {
        assert!(exempt("/health"));
        assert!(exempt("/v1/sandboxes/abc/proxy/44772/ping"));
        assert!(exempt("/sandboxes/abc/proxy/44772"));
        assert!(!exempt("/v1/sandboxes/abc"));
        assert!(!exempt("/v1/sandboxes/abc/endpoints/44772"));
        assert!(!exempt("/debug/executions"));
    }

    #[test]
    fn times_parse_with_offsets_or_as_utc() {
        let z = parse_time("2030-01-01T00:00:00Z").unwrap();
        assert_eq!(parse_time("2030-01-01T01:00:00+01:00"), Some(z));
        assert_eq!(parse_time("2030-01-01T00:00:00"), Some(z));
        assert_eq!(parse_time("tomorrow"), None);
    }
}
