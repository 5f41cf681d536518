//! The server proxy, `/sandboxes/{id}/proxy/{port}/{path}`: any method,
//! streamed both ways to the sandbox's `{execd address}:{port}`, without
//! the caller's credentials, with server 1.1.1's failure replies (502
//! `BACKEND_CONNECTION_FAILED`, 504 `BACKEND_TIMEOUT`, 502
//! `BACKEND_RESPONSE_FAILED`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::error::ApiError;
use crate::lifecycle::App;

/// The upstream client's timeout for a response's headers (httpx's 180 s).
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(180);

/// The proxy's connections to sandboxes.
pub(crate) type Upstream = Client<HttpConnector, Body>;

/// A client like the server's httpx one: a 5 s idle pool.
pub(crate) fn upstream() -> Upstream {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(5))
        .build(connector)
}

/// Request headers never forwarded: the caller's credentials (the server
/// strips them so untrusted code never sees the management key), the
/// forwarding headers it rebuilds, and hop-by-hop headers.
const STRIPPED: &[&str] = &[
    "authorization",
    "cookie",
    "open-sandbox-api-key",
    "opensandbox-secure-access",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn forwarded_request_headers(incoming: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in incoming {
        let lower = name.as_str();
        if STRIPPED.contains(&lower) || lower.starts_with("x-forwarded-") {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    headers
}

/// `/sandboxes/{id}/proxy/{port}` (no path).
pub(crate) async fn forward_root(
    state: State<Arc<App>>,
    Path((id, port)): Path<(String, String)>,
    request: Request,
) -> Response {
    proxy(state, id, port, String::new(), request).await
}

/// `/sandboxes/{id}/proxy/{port}/{path}`.
pub(crate) async fn forward(
    state: State<Arc<App>>,
    Path((id, port, path)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    proxy(state, id, port, path, request).await
}

async fn proxy(
    State(app): State<Arc<App>>,
    id: String,
    port: String,
    path: String,
    request: Request,
) -> Response {
    let Some(sandbox) = app.fleet.get(&id) else {
        return ApiError::sandbox_not_found(&id).into_response();
    };
    let Ok(port) = port.parse::<u16>() else {
        return ApiError::runtime(
            StatusCode::BAD_REQUEST,
            "INVALID_PORT",
            format!("Invalid port {port}"),
        )
        .into_response();
    };
    let target = format!("{}:{port}", sandbox.execd_ip);
    let (parts, body) = request.into_parts();
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let Ok(uri) = format!("http://{target}/{path}{query}").parse::<Uri>() else {
        return ApiError::bad_request(
            "GENERAL::INVALID_REQUEST",
            format!("Invalid proxy path /{path}"),
        )
        .into_response();
    };
    let mut headers = forwarded_request_headers(&parts.headers);
    let host = parts.headers.get(header::HOST).cloned();
    headers.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static("http"),
    );
    if let Some(host) = host {
        headers.insert(HeaderName::from_static("x-forwarded-host"), host);
    }
    headers.insert(
        header::HOST,
        HeaderValue::from_str(&target).expect("an address is a header value"),
    );
    let mut upstream = axum::http::Request::builder()
        .method(parts.method)
        .uri(uri)
        .body(body)
        .expect("a request from valid parts");
    *upstream.headers_mut() = headers;
    let reply = match tokio::time::timeout(UPSTREAM_TIMEOUT, app.upstream.request(upstream)).await {
        Err(_) => {
            return ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "BACKEND_TIMEOUT",
                format!("Timed out waiting for the backend sandbox {target}"),
            )
            .into_response();
        }
        Ok(Err(error)) if error.is_connect() => {
            return ApiError::new(
                StatusCode::BAD_GATEWAY,
                "BACKEND_CONNECTION_FAILED",
                format!(
                    "Could not connect to the backend sandbox {target}: {}",
                    chain(&error)
                ),
            )
            .into_response();
        }
        Ok(Err(error)) => {
            return ApiError::new(
                StatusCode::BAD_GATEWAY,
                "BACKEND_RESPONSE_FAILED",
                format!(
                    "The backend sandbox {target} dropped the connection: {}",
                    chain(&error)
                ),
            )
            .into_response();
        }
        Ok(Ok(reply)) => reply,
    };
    let (mut parts, body) = reply.into_parts();
    for name in [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "trailer",
        "upgrade",
    ] {
        parts.headers.remove(name);
    }
    Response::from_parts(parts, Body::new(body.map_err(axum::Error::new)))
}

/// An error and its sources, on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_forwarding_headers_never_reach_the_sandbox() {
        let mut incoming = HeaderMap::new();
        for (name, value) in [
            ("open-sandbox-api-key", "secret"),
            ("authorization", "Bearer x"),
            ("cookie", "a=b"),
            ("opensandbox-secure-access", "t"),
            ("x-forwarded-for", "1.2.3.4"),
            ("connection", "keep-alive"),
            ("content-type", "application/json"),
            ("x-execd-access-token", "kept"),
        ] {
            incoming.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let forwarded = forwarded_request_headers(&incoming);
        let names: Vec<&str> = forwarded.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-type", "x-execd-access-token"]);
    }
}
