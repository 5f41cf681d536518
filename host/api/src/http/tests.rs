//! The router called as a service, without a socket, for what needs no
//! sandbox: requests the daemon refuses before touching a backend, and
//! the bearer token; and the OpenAPI document's grouping. (What needs
//! sandboxes is in tests/api, over loopback.)

use axum::Router;
use axum::body::Body;
use axum::handler::Handler as _;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use crate::daemon::{Opened, Options};
use crate::error::ErrorKind;

/// The token the daemon reads from `CARGO_PKG_NAME`: cargo sets it for
/// every test, so no test has to change the environment.
const TOKEN: &str = env!("CARGO_PKG_NAME");

/// A daemon's router on the local backend with the quickstart's `calc`
/// image, its token read from `CARGO_PKG_NAME`.
struct Routed {
    router: Router,
    /// Holds the state directory's lock for the router's life.
    _opened: Opened,
    _dir: tempfile::TempDir,
}

impl Routed {
    async fn new() -> Routed {
        let dir = tempfile::tempdir().unwrap();
        let repo = sandfleet_test_support::quickstart::repo();
        let fleet = format!(
            r#"[run]
name = "routertest"
dataset = "{dataset}"

[adapter]
name = "generic"

[api]
state_dir = "serve"
token_env = "CARGO_PKG_NAME"

[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "state"

[clusters.local.images]
calc = {{ path = "{images}/calc", git = true }}
"#,
            dataset = repo.join("examples/quickstart/tasks.jsonl").display(),
            images = repo.join("examples/quickstart/images").display(),
        );
        let config = dir.path().join("fleet.toml");
        std::fs::write(&config, fleet).unwrap();
        let opened = Opened::open(&Options {
            config,
            listen: None,
        })
        .await
        .unwrap();
        Routed {
            router: super::app(opened.state.clone()),
            _opened: opened,
            _dir: dir,
        }
    }

    /// `method path` with `body` (sent as it is, as JSON) and the right
    /// token; the status and the JSON answer (`null` when not JSON).
    async fn call(&self, method: Method, path: &str, body: &str) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .body(Body::from(body.to_string()))
            .unwrap();
        self.send(request).await
    }

    async fn send(&self, request: Request<Body>) -> (StatusCode, Value) {
        // What tower's `oneshot` does, through axum's own traits.
        let service = axum::routing::any_service(self.router.clone());
        let response = service.call(request, ()).await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

/// The error's kind and message, from its JSON.
fn error(answer: &Value) -> (ErrorKind, &str) {
    let kind = serde_json::from_value(answer["error"]["kind"].clone()).unwrap();
    (kind, answer["error"]["message"].as_str().unwrap())
}

#[tokio::test]
async fn a_body_that_is_not_json_is_refused_naming_it() {
    let routed = Routed::new().await;
    let (status, answer) = routed
        .call(Method::POST, "/v1/leases", r#"{"image": "calc""#)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (kind, message) = error(&answer);
    assert_eq!(kind, ErrorKind::InvalidRequest);
    assert!(message.contains("not valid JSON"), "{message}");
}

#[tokio::test]
async fn a_field_of_the_wrong_type_is_refused_naming_it() {
    let routed = Routed::new().await;
    let (status, answer) = routed
        .call(Method::POST, "/v1/leases", r#"{"image": 5}"#)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (kind, message) = error(&answer);
    assert_eq!(kind, ErrorKind::InvalidRequest);
    assert!(message.contains("image"), "{message}");
}

#[tokio::test]
async fn missing_fields_are_named() {
    let routed = Routed::new().await;
    for (path, field) in [
        ("/v1/leases", "`image`"),
        ("/v1/runs", "`path`"),
        ("/v1/leases:batch", "`leases`"),
    ] {
        let (status, answer) = routed.call(Method::POST, path, "{}").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {answer}");
        let (kind, message) = error(&answer);
        assert_eq!(kind, ErrorKind::InvalidRequest, "{path}");
        assert!(message.contains(field), "{path}: {message}");
    }
}

#[tokio::test]
async fn an_unknown_lease_id_is_not_found_on_every_lease_endpoint() {
    let routed = Routed::new().await;
    let exec = json!({"argv": ["true"]}).to_string();
    for (method, path, body) in [
        (Method::GET, "/v1/leases/l-nope", ""),
        (Method::DELETE, "/v1/leases/l-nope", ""),
        (Method::POST, "/v1/leases/l-nope/exec", exec.as_str()),
        (Method::POST, "/v1/leases/l-nope/renew", "{}"),
        (Method::POST, "/v1/leases/l-nope/recycle", ""),
        (
            Method::GET,
            "/v1/leases/l-nope/files?path=/etc/hostname",
            "",
        ),
    ] {
        let (status, answer) = routed.call(method.clone(), path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {answer}");
        let (kind, message) = error(&answer);
        assert_eq!(kind, ErrorKind::NotFound, "{method} {path}");
        assert!(
            message.contains("lease `l-nope` is not live"),
            "{method} {path}: {message}"
        );
    }
}

#[tokio::test]
async fn a_zero_ttl_is_refused_before_any_sandbox_is_claimed() {
    let routed = Routed::new().await;
    let (status, answer) = routed
        .call(
            Method::POST,
            "/v1/leases",
            r#"{"image": "calc", "ttl_s": 0}"#,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let (kind, message) = error(&answer);
    assert_eq!(kind, ErrorKind::InvalidRequest);
    assert!(message.contains("ttl_s"), "{message}");
    let (_, leases) = routed.call(Method::GET, "/v1/leases", "").await;
    assert_eq!(leases["leases"], json!([]));
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_unauthorized_except_for_healthz() {
    let routed = Routed::new().await;
    let with = |authorization: Option<String>, path: &str| {
        let mut request = Request::builder().uri(path);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        request.body(Body::empty()).unwrap()
    };
    for authorization in [
        None,
        Some("Bearer wrong".to_string()),
        Some(format!("Bearer {TOKEN}x")),
        Some(TOKEN.to_string()),
    ] {
        let (status, answer) = routed.send(with(authorization.clone(), "/v1/leases")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{authorization:?}");
        assert_eq!(error(&answer).0, ErrorKind::Unauthorized);
    }
    let (status, _) = routed
        .send(with(Some(format!("Bearer {TOKEN}")), "/v1/leases"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = routed.send(with(None, "/healthz")).await;
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn the_document_groups_operations_under_the_tags_it_always_had() {
    let document = crate::openapi();
    let mut tags = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for operation in item.as_object().unwrap().values() {
            for tag in operation["tags"].as_array().into_iter().flatten() {
                tags.entry(tag.as_str().unwrap().to_string())
                    .or_default()
                    .push(path.clone());
            }
        }
    }
    let paths = |tag: &str| {
        let mut paths = tags.get(tag).cloned().unwrap_or_default();
        paths.sort();
        paths.dedup();
        paths
    };
    assert_eq!(tags.len(), 3, "{tags:?}");
    assert_eq!(
        paths("crate::routes"),
        [
            "/v1/leases",
            "/v1/leases/{id}",
            "/v1/leases/{id}/evaluate",
            "/v1/leases/{id}/exec",
            "/v1/leases/{id}/files",
            "/v1/leases/{id}/recycle",
            "/v1/leases/{id}/renew",
            "/v1/leases:batch",
            "/v1/pools",
        ]
    );
    assert_eq!(
        paths("crate::runs"),
        ["/v1/runs", "/v1/runs/{id}", "/v1/runs/{id}/results"]
    );
    assert_eq!(
        paths("crate::shared::routes"),
        [
            "/v1/sessions/{id}",
            "/v1/sessions/{id}/exec",
            "/v1/shared",
            "/v1/shared/{pool}",
            "/v1/shared/{pool}/sessions",
        ]
    );
}
