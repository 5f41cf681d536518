//! The HTTPS front: the accept loop (rustls, HTTP/1.1 and HTTP/2 with upgrades), bearer
//! token checks, and the routing of every path to discovery, OpenAPI or a resource verb.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::api::{self, DeleteOptions, MAX_BODY, Query, Target, Written};
use crate::state::State;
use crate::status::{ApiError, ApiResult};

/// The `/version` answer; kubectl's dispatcher picks its 1.32 binary from it.
pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0",
        "gitCommit": "sandfleet-emulator", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0",
        "compiler": "gc", "platform": "linux/amd64",
    })
}

fn json_response(code: u16, value: &Value, content_type: &'static str) -> Response {
    let mut response = (
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        value.to_string(),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn written(w: Written) -> Response {
    let mut response = json_response(w.code, &w.object, "application/json");
    for warning in w.warnings {
        let text = format!("299 - \"{}\"", warning.replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// Which aggregated discovery version the client asks for first, if any.
fn aggregated_version(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    for media in accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        if !params.contains(&"as=APIGroupDiscoveryList") {
            continue;
        }
        if params.contains(&"v=v2") {
            return Some("v2");
        }
        if params.contains(&"v=v2beta1") {
            return Some("v2beta1");
        }
    }
    None
}

fn discovery(state: &State, headers: &HeaderMap, core: bool) -> Response {
    match aggregated_version(headers) {
        Some("v2") => json_response(
            200,
            &state.registry.aggregated(core, "v2"),
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        ),
        Some(_) => json_response(
            200,
            &state.registry.aggregated(core, "v2beta1"),
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        ),
        None if core => json_response(
            200,
            &state.registry.api_versions(&state.server_address),
            "application/json",
        ),
        None => json_response(200, &state.registry.group_list(), "application/json"),
    }
}

fn authorized(state: &State, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == state.token)
}

/// An OpenAPI v2 document with no paths, protobuf-encoded as kubectl asks for it
/// (gnostic `Document{swagger: "2.0", info: {title, version}}`). kubectl falls back to v2
/// for a group-version the v3 index lacks (an unknown kind); an empty v2 document lets
/// it go on to report `no matches for kind`, as against a real server, instead of
/// failing to download OpenAPI.
fn openapi_v2_protobuf() -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![
            (number << 3) | 2,
            u8::try_from(bytes.len()).expect("short fields"),
        ];
        out.extend_from_slice(bytes);
        out
    }
    let info = [field(1, b"Kubernetes"), field(2, b"v1.32.0")].concat();
    [field(1, b"2.0"), field(2, &info)].concat()
}

/// The RBAC verb of a request.
fn verb(method: &Method, item: bool, watch: bool, subresource: &str) -> &'static str {
    match *method {
        Method::GET if subresource == "exec" => "create",
        Method::GET if watch => "watch",
        Method::GET if item => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if item => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

/// Serve one request.
pub(crate) async fn handle(state: Arc<State>, request: Request) -> Response {
    if let Some(latency) = state.faults.latency {
        tokio::time::sleep(latency).await;
    }
    match route(state, request).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn route(state: Arc<State>, request: Request) -> ApiResult<Response> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let path = if path.is_empty() {
        "/".to_string()
    } else {
        path
    };
    match path.as_str() {
        "/version" => return Ok(json_response(200, &version(), "application/json")),
        "/healthz" | "/livez" | "/readyz" => return Ok((StatusCode::OK, "ok").into_response()),
        _ => {}
    }
    if !authorized(&state, &parts.headers) {
        return Err(ApiError::new(401, "Unauthorized", "Unauthorized"));
    }
    if let Some(err) = state.faults.before_call() {
        return Err(err);
    }
    let query = Query::parse(parts.uri.query());
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let get_only = |method: &Method| {
        if *method == Method::GET {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(method.as_str(), &path))
        }
    };
    match segs.as_slice() {
        ["debug", "sandfleet", "connections"] => {
            get_only(&parts.method)?;
            let open = state.connections.load(Ordering::SeqCst);
            return Ok(json_response(
                200,
                &json!({"connections": open}),
                "application/json",
            ));
        }
        ["api"] => {
            get_only(&parts.method)?;
            return Ok(discovery(&state, &parts.headers, true));
        }
        ["apis"] => {
            get_only(&parts.method)?;
            return Ok(discovery(&state, &parts.headers, false));
        }
        ["openapi", "v3"] => {
            get_only(&parts.method)?;
            return Ok(json_response(
                200,
                &state.registry.openapi_index(),
                "application/json",
            ));
        }
        ["openapi", "v3", "api", v] if state.registry.serves("", v) => {
            return Ok(json_response(
                200,
                &state.registry.openapi_document("", v),
                "application/json",
            ));
        }
        ["openapi", "v3", "apis", g, v] if state.registry.serves(g, v) => {
            return Ok(json_response(
                200,
                &state.registry.openapi_document(g, v),
                "application/json",
            ));
        }
        ["openapi", "v2"] => {
            get_only(&parts.method)?;
            let mut response = (StatusCode::OK, openapi_v2_protobuf()).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
            );
            return Ok(response);
        }
        ["apis", g] => {
            get_only(&parts.method)?;
            return state
                .registry
                .group(g)
                .map(|doc| json_response(200, &doc, "application/json"))
                .ok_or_else(|| ApiError::no_route(&path));
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route(&path)),
    };
    if !state.registry.serves(group, version) {
        return Err(ApiError::no_route(&path));
    }
    let mut rest = rest.to_vec();
    let mut watch = query.flag("watch");
    if rest.first() == Some(&"watch") {
        watch = true;
        rest.remove(0);
    }
    if rest.is_empty() {
        get_only(&parts.method)?;
        return state
            .registry
            .resource_list(group, version)
            .map(|doc| json_response(200, &doc, "application/json"))
            .ok_or_else(|| ApiError::no_route(&path));
    }
    let (namespace, rest) = match rest.as_slice() {
        ["namespaces", ns, plural, tail @ ..]
            if state
                .registry
                .find(group, version, plural)
                .is_some_and(|r| r.namespaced) =>
        {
            (Some((*ns).to_string()), [&[*plural][..], tail].concat())
        }
        other => (None, other.to_vec()),
    };
    if rest.len() > 3 {
        return Err(ApiError::no_route(&path));
    }
    let resource = state
        .registry
        .find(group, version, rest[0])
        .ok_or_else(|| ApiError::no_route(&path))?;
    let target = Target {
        resource: resource.clone(),
        version: version.to_string(),
        namespace,
        name: rest.get(1).map(|s| (*s).to_string()),
        subresource: rest.get(2).map(|s| (*s).to_string()),
    };
    let sub = target.subresource.as_deref().unwrap_or_default();
    state.authz.check(
        verb(&parts.method, target.name.is_some(), watch, sub),
        group,
        &resource.plural,
        sub,
        target.namespace.as_deref(),
        target.name.as_deref(),
    )?;
    if sub == "exec" && resource.group.is_empty() && resource.plural == "pods" {
        if !matches!(parts.method, Method::GET | Method::POST) {
            return Err(ApiError::method_not_allowed(parts.method.as_str(), &path));
        }
        let namespace = target.namespace.clone().unwrap_or_default();
        let name = target.name.clone().unwrap_or_default();
        return crate::exec::serve(state, parts, &namespace, &name).await;
    }
    if sub == "log" && resource.group.is_empty() && resource.plural == "pods" {
        if parts.method != Method::GET {
            return Err(ApiError::method_not_allowed(parts.method.as_str(), &path));
        }
        let namespace = target.namespace.clone().unwrap_or_default();
        let name = target.name.clone().unwrap_or_default();
        return crate::log::serve(&state, &query, &namespace, &name);
    }
    if let Some(sub) = target.subresource.as_deref() {
        let version_def = resource.version(version).expect("found by version");
        let known = (sub == "status" && version_def.status)
            || (sub == "scale" && version_def.scale.is_some());
        if !known {
            return Err(ApiError::no_route(&path));
        }
    }
    let user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {MAX_BODY}"),
        )
    })?;
    let is_item = target.name.is_some();
    let method = parts.method.clone();
    if resource.group == "authorization.k8s.io" {
        if method != Method::POST || is_item {
            return Err(ApiError::method_not_allowed(method.as_str(), &path));
        }
        let review = api::decode_body(&content_type, &body)?;
        return Ok(json_response(
            201,
            &state.authz.review(review),
            "application/json",
        ));
    }
    let as_table = crate::table::wanted(&parts.headers);
    if matches!(method, Method::PUT | Method::PATCH) && state.faults.conflict_now() {
        return Err(ApiError::stale(
            &resource.qualified(),
            target.name.as_deref().unwrap_or_default(),
        ));
    }
    let response = match (method, is_item) {
        (Method::GET, false) if watch => {
            crate::watch::start(state.clone(), target, &query, as_table)?
        }
        (Method::GET, false) => {
            let list = api::list(&state, &target, &query)?;
            if as_table {
                let items = list["items"].as_array().cloned().unwrap_or_default();
                let table = crate::table::table(&target, &items, &list["metadata"]);
                json_response(200, &table, crate::table::CONTENT_TYPE)
            } else {
                json_response(200, &list, "application/json")
            }
        }
        (Method::GET, true) => {
            let object = api::get(&state, &target)?;
            if as_table && target.subresource.is_none() {
                let rv = object["metadata"]["resourceVersion"].clone();
                let table =
                    crate::table::table(&target, &[object], &json!({"resourceVersion": rv}));
                json_response(200, &table, crate::table::CONTENT_TYPE)
            } else {
                json_response(200, &object, "application/json")
            }
        }
        (Method::POST, false) => {
            let object = api::decode_body(&content_type, &body)?;
            written(api::create(&state, &target, &query, &user_agent, object)?)
        }
        (Method::PUT, true) => {
            let object = api::decode_body(&content_type, &body)?;
            written(api::update(&state, &target, &query, &user_agent, object)?)
        }
        (Method::PATCH, true) => written(api::patch(
            &state,
            &target,
            &query,
            &user_agent,
            &content_type,
            &body,
        )?),
        (Method::DELETE, true) if target.subresource.is_none() => {
            let options = DeleteOptions::read(&query, &body)?;
            json_response(
                200,
                &api::delete(&state, &target, &options)?,
                "application/json",
            )
        }
        (Method::DELETE, false) => json_response(
            200,
            &api::delete_collection(&state, &target, &query, &body)?,
            "application/json",
        ),
        (method, _) => return Err(ApiError::method_not_allowed(method.as_str(), &path)),
    };
    Ok(response)
}

/// Counts a client connection while it is open.
struct Open(Arc<State>);

impl Open {
    fn new(state: Arc<State>) -> Self {
        state.connections.fetch_add(1, Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The router: one fallback handler that routes by path itself (Kubernetes paths are
/// too irregular for a route table: namespaces, subresources, `watch/` prefixes).
pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new().fallback(move |request: Request<Body>| {
        let state = state.clone();
        async move { handle(state, request).await }
    })
}

/// Accept TLS connections on `listener` until `shutdown` resolves; then close them all
/// (watches are long-lived, so draining would never end).
pub(crate) async fn serve(
    state: Arc<State>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let service = hyper_util::service::TowerToHyperService::new(router.clone());
                let open = Open::new(state.clone());
                connections.spawn(async move {
                    let _open = open;
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(tls), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.abort_all();
}
