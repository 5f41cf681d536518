//! The router called as a service, without a socket, for what needs no
//! sandbox: requests the daemon refuses before touching a backend, the
//! bearer token (in its header, or in the query of the pages a browser
//! opens), a run's report, the record of recent errors; and the OpenAPI
//! document's grouping. Snapshot
//! requests refused run on an in-memory backend without snapshots and on
//! snapshots the tests put in the table. (What needs sandboxes is in
//! tests/api, over loopback.)

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::handler::Handler as _;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use sandfleet_engine::Cluster;
use sandfleet_fleet::{FleetConfig, setup};
use sandfleet_test_support::Scripted;
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
    /// The daemon's state; holds the state directory's lock for the
    /// router's life.
    opened: Opened,
    _dir: tempfile::TempDir,
}

impl Routed {
    async fn new() -> Routed {
        Self::with_clusters(setup::clusters_with).await
    }

    /// A router whose one cluster is `name`: a [`Scripted`] backend, which
    /// keeps sandboxes in memory and has no snapshots.
    async fn scripted(name: &'static str) -> Routed {
        Self::with_clusters(move |_, _| {
            let backend = Scripted::new(name);
            assert!(
                sandfleet_core::Backend::snapshots(&backend).is_none(),
                "these tests need a backend without snapshots"
            );
            Ok(vec![Cluster {
                name: name.to_string(),
                kind: "scripted".to_string(),
                weight: 1,
                backend: Arc::new(backend),
                pace: None,
            }])
        })
        .await
    }

    async fn with_clusters(
        clusters: impl FnOnce(&FleetConfig, &setup::Connections) -> anyhow::Result<Vec<Cluster>>
        + Send
        + 'static,
    ) -> Routed {
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
max_leases = 4

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
        let options = Options {
            config,
            listen: None,
        };
        let opened = Opened::open_with(&options, clusters).await.unwrap();
        Routed {
            router: super::app(opened.state.clone()),
            opened,
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
        let (status, _, bytes) = self.send_raw(request).await;
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// The status, headers and body of `request`.
    async fn send_raw(&self, request: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
        // What tower's `oneshot` does, through axum's own traits.
        let service = axum::routing::any_service(self.router.clone());
        let response = service.call(request, ()).await;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, headers, bytes.to_vec())
    }

    /// `GET uri` with `authorization` as the header, if any.
    async fn get(&self, uri: &str, authorization: Option<&str>) -> (StatusCode, HeaderMap, String) {
        let mut request = Request::builder().uri(uri);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let (status, headers, bytes) = self.send_raw(request.body(Body::empty()).unwrap()).await;
        (status, headers, String::from_utf8(bytes).unwrap())
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
    assert_eq!(tags.len(), 4, "{tags:?}");
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
        [
            "/v1/runs",
            "/v1/runs/{id}",
            "/v1/runs/{id}/report.html",
            "/v1/runs/{id}/results"
        ]
    );
    assert_eq!(
        paths("crate::snapshots"),
        [
            "/v1/leases/{id}/restore",
            "/v1/leases/{id}/snapshots",
            "/v1/snapshots/{id}",
            "/v1/snapshots/{id}/leases",
        ]
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

/// Puts a snapshot in the daemon's table as if `lease` (on `cluster`, of
/// template `template`) had been snapshotted; the backend never saw it.
fn planted(
    routed: &Routed,
    lease: &str,
    cluster: &str,
    template: &str,
    restores_in_place: bool,
) -> String {
    let state = &routed.opened.state;
    let snapshot = sandfleet_core::SnapshotRef {
        id: "backend-snapshot".into(),
        cluster: cluster.into(),
        template: sandfleet_core::TemplateRef {
            name: template.into(),
            image: "calc".into(),
            run_id: state.session.run_id().clone(),
        },
        driver: String::new(),
    };
    let new = crate::domain::snapshots::NewSnapshot {
        id: crate::domain::leases::new_id("snap"),
        lease: lease.into(),
        image: "calc".into(),
        run_id: None,
        restores_in_place,
        ttl: None,
    };
    state.snapshots.insert(new, snapshot).id.clone()
}

#[tokio::test]
async fn an_unknown_lease_or_snapshot_is_not_found_on_every_snapshot_endpoint() {
    let routed = Routed::new().await;
    let restore = json!({"snapshot": "snap-nope"}).to_string();
    let fork = json!({"count": 1}).to_string();
    for (method, path, body, named) in [
        (
            Method::POST,
            "/v1/leases/l-nope/snapshots",
            "",
            "lease `l-nope`",
        ),
        (
            Method::POST,
            "/v1/leases/l-nope/restore",
            restore.as_str(),
            "lease `l-nope`",
        ),
        (
            Method::GET,
            "/v1/snapshots/snap-nope",
            "",
            "snapshot `snap-nope`",
        ),
        (
            Method::DELETE,
            "/v1/snapshots/snap-nope",
            "",
            "snapshot `snap-nope`",
        ),
        (
            Method::POST,
            "/v1/snapshots/snap-nope/leases",
            fork.as_str(),
            "snapshot `snap-nope`",
        ),
    ] {
        let (status, answer) = routed.call(method.clone(), path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {answer}");
        let (kind, message) = error(&answer);
        assert_eq!(kind, ErrorKind::NotFound, "{method} {path}");
        assert!(
            message.contains(&format!("{named} is not live")),
            "{method} {path}: {message}"
        );
    }
}

#[tokio::test]
async fn fork_counts_of_zero_or_above_max_leases_are_refused_naming_the_snapshot() {
    let routed = Routed::new().await;
    let snapshot = planted(&routed, "l-source", "local", "calc", true);
    let path = format!("/v1/snapshots/{snapshot}/leases");
    for (count, says) in [(0, "at least 1"), (5, "max_leases = 4")] {
        let body = json!({"count": count}).to_string();
        let (status, answer) = routed.call(Method::POST, &path, &body).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{count}: {answer}"
        );
        let (kind, message) = error(&answer);
        assert_eq!(kind, ErrorKind::InvalidRequest);
        assert!(
            message.contains(&format!("snapshot `{snapshot}`")),
            "{message}"
        );
        assert!(message.contains(says), "{message}");
    }
    let (status, answer) = routed.call(Method::POST, &path, "{}").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(error(&answer).1.contains("`count`"), "{answer}");
    let (_, leases) = routed.call(Method::GET, "/v1/leases", "").await;
    assert_eq!(leases["leases"], json!([]));
}

#[tokio::test]
async fn a_fork_of_a_snapshot_its_cluster_does_not_hold_is_not_found_and_makes_nothing() {
    let routed = Routed::new().await;
    let snapshot = planted(&routed, "l-source", "local", "calc", false);
    let body = json!({"count": 2}).to_string();
    let path = format!("/v1/snapshots/{snapshot}/leases");
    let (status, answer) = routed.call(Method::POST, &path, &body).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    let (_, message) = error(&answer);
    assert!(message.contains("fork: local: snapshot"), "{message}");
    let (_, leases) = routed.call(Method::GET, "/v1/leases", "").await;
    assert_eq!(leases["leases"], json!([]));
}

#[tokio::test]
async fn a_snapshot_of_a_lease_on_a_cluster_without_snapshots_names_the_cluster() {
    let routed = Routed::scripted("memory").await;
    let (status, lease) = routed
        .call(Method::POST, "/v1/leases", r#"{"image": "calc"}"#)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{lease}");
    let id = lease["id"].as_str().unwrap();
    let (status, answer) = routed
        .call(Method::POST, &format!("/v1/leases/{id}/snapshots"), "")
        .await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{answer}");
    let (kind, message) = error(&answer);
    assert_eq!(kind, ErrorKind::Backend);
    assert!(message.contains("memory"), "{message}");
    assert!(message.contains("cannot snapshot"), "{message}");
    assert_eq!(routed.opened.state.snapshots.len(), 0);
    let (status, _) = routed
        .call(Method::GET, &format!("/v1/leases/{id}"), "")
        .await;
    assert_eq!(status, StatusCode::OK, "the lease serves on");
    let metrics = routed.opened.state.metrics.render();
    for family in [
        "sandfleet_snapshots_live 0",
        "sandfleet_snapshots_taken_total 0",
        "sandfleet_snapshot_seconds_count 0",
    ] {
        assert!(metrics.contains(family), "{family} in {metrics}");
    }
}

#[tokio::test]
async fn a_restore_to_a_snapshot_of_another_template_names_both_and_keeps_the_lease() {
    let routed = Routed::scripted("memory").await;
    let (_, lease) = routed
        .call(Method::POST, "/v1/leases", r#"{"image": "calc"}"#)
        .await;
    let id = lease["id"].as_str().unwrap();
    let template = {
        let slot = routed.opened.state.leases.get(id).unwrap();
        slot.read().await.unwrap().handle().template.clone()
    };
    let path = format!("/v1/leases/{id}/restore");

    let other = planted(&routed, "l-other", "memory", "another-template", true);
    let body = json!({"snapshot": other}).to_string();
    let (status, answer) = routed.call(Method::POST, &path, &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let (kind, message) = error(&answer);
    assert_eq!(kind, ErrorKind::InvalidRequest);
    for named in [
        format!("`{id}`"),
        format!("`{other}`"),
        format!("`{template}`"),
        "`another-template`".to_string(),
    ] {
        assert!(message.contains(&named), "{named} in {message}");
    }

    let same = planted(&routed, "l-other", "memory", &template, true);
    let body = json!({"snapshot": same}).to_string();
    let (status, answer) = routed.call(Method::POST, &path, &body).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{answer}");
    let (kind, message) = error(&answer);
    assert_eq!(kind, ErrorKind::Backend);
    assert!(message.contains("memory"), "{message}");

    let (status, _) = routed
        .call(Method::GET, &format!("/v1/leases/{id}"), "")
        .await;
    assert_eq!(status, StatusCode::OK, "the lease serves on");
}

#[tokio::test]
async fn a_deleted_snapshot_is_gone_and_counted() {
    let routed = Routed::scripted("memory").await;
    let snapshot = planted(&routed, "l-source", "memory", "calc", true);
    let path = format!("/v1/snapshots/{snapshot}");
    let (status, view) = routed.call(Method::GET, &path, "").await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["lease"], "l-source");
    assert_eq!(view["cluster"], "memory");
    assert_eq!(view["restores_in_place"], true);
    let (status, _) = routed.call(Method::DELETE, &path, "").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = routed.call(Method::GET, &path, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = routed.call(Method::DELETE, &path, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_live_page_takes_the_token_as_a_header_or_in_its_query() {
    let routed = Routed::new().await;
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = routed.get("/ui", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("open this page with `?token="), "{body}");
    let (status, headers, page) = routed.get("/ui", Some(&bearer)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");
    assert_eq!(headers[header::REFERRER_POLICY], "no-referrer");
    let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    assert!(page.contains("<title>sandfleet daemon</title>"), "{page}");
    let (status, _, query) = routed.get(&format!("/ui?token={TOKEN}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(query, page);
    // Among other parameters, and percent-encoded, it is the same token.
    let encoded = TOKEN.replace('-', "%2D");
    let (status, _, _) = routed
        .get(&format!("/ui?theme=dark&token={encoded}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    for wrong in [
        "/ui?token=",
        "/ui?token=wrong",
        &format!("/ui?token={TOKEN}x"),
        &format!("/ui?TOKEN={TOKEN}"),
        &format!("/ui?access_token={TOKEN}"),
    ] {
        let (status, _, body) = routed.get(wrong, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong}: {body}");
    }
    // Only the pages a browser opens by URL take it: never the API.
    for api in [
        "/v1/leases",
        "/v1/errors",
        "/v1/plugins",
        "/metrics",
        "/v1/runs/r-nope",
    ] {
        let (status, _, body) = routed.get(&format!("{api}?token={TOKEN}"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{api}: {body}");
    }
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("/v1/leases?token={TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"image": "calc"}"#))
        .unwrap();
    let (status, _) = routed.send(request).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A run's report takes it: a missing run is then a 404, not a 401.
    let report = "/v1/runs/r-nope/report.html";
    let (status, _, _) = routed.get(report, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = routed.get(&format!("{report}?token={TOKEN}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("no batch run `r-nope`"), "{body}");
}

#[tokio::test]
async fn a_runs_report_is_served_once_written_and_never_from_outside_its_directory() {
    let routed = Routed::scripted("memory").await;
    let state = &routed.opened.state;
    let outside = tempfile::tempdir().unwrap();
    let out_dir = outside.path().join("runs").join("r-1");
    std::fs::create_dir_all(&out_dir).unwrap();
    let run = crate::domain::runs::BatchRun::new("r-1".into(), out_dir.clone(), 3);
    state.runs.insert(run);
    let url = format!("/v1/runs/r-1/report.html?token={TOKEN}");

    let (status, _, body) = routed.get(&url, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let (kind, message) = error(&answer);
    assert_eq!(kind, ErrorKind::NotFound);
    assert!(message.contains("batch run `r-1`"), "{message}");
    assert!(message.contains("no report.html yet"), "{message}");

    let page = "<!doctype html><title>run r-1</title><p>13 tasks</p>";
    std::fs::write(out_dir.join("report.html"), page).unwrap();
    let (status, headers, body) = routed.get(&url, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, page);
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(headers[header::REFERRER_POLICY], "no-referrer");
    let (status, _, body) = routed
        .get("/v1/runs/r-1/report.html", Some(&format!("Bearer {TOKEN}")))
        .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, page));

    // A link where the report was, to a file elsewhere, is not followed.
    let secret = outside.path().join("secret.html");
    std::fs::write(&secret, "not the run's").unwrap();
    std::fs::remove_file(out_dir.join("report.html")).unwrap();
    std::os::unix::fs::symlink(&secret, out_dir.join("report.html")).unwrap();
    let (status, _, body) = routed.get(&url, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(!body.contains("not the run's"), "{body}");

    // Ids that climb out of the runs' directory name no run.
    for id in ["..", "..%2F..%2Fsecret", "r-1%2F..%2F..", "%2E%2E"] {
        let (status, _, body) = routed
            .get(&format!("/v1/runs/{id}/report.html?token={TOKEN}"), None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}: {body}");
        assert!(!body.contains("not the run's"), "{id}: {body}");
    }
}

#[tokio::test]
async fn errors_answered_are_kept_by_route_never_by_url() {
    let routed = Routed::new().await;
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, _) = routed.get("/ui?token=not-the-token", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = routed
        .call(Method::GET, "/v1/leases/l-%3Cb%3Ehostile%3C%2Fb%3E", "")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = routed.get("/v1/leases", Some(&bearer)).await;
    assert_eq!(status, StatusCode::OK);

    let (status, answer) = routed.call(Method::GET, "/v1/errors", "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let errors = answer["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{answer}");
    let (newest, oldest) = (&errors[0], &errors[1]);
    assert_eq!(newest["method"], "GET");
    assert_eq!(newest["route"], "/v1/leases/{id}");
    assert_eq!(newest["status"], 404);
    assert_eq!(newest["kind"], "not_found");
    assert!(
        newest["message"]
            .as_str()
            .unwrap()
            .contains("lease `l-<b>hostile</b>` is not live"),
        "{newest}"
    );
    assert_eq!(oldest["route"], "/ui");
    assert_eq!(oldest["status"], 401);
    assert_eq!(oldest["kind"], "unauthorized");
    assert!(
        humantime::parse_rfc3339(oldest["at"].as_str().unwrap()).is_ok(),
        "{oldest}"
    );
    assert!(!answer.to_string().contains("not-the-token"), "{answer}");
}

#[test]
fn the_live_page_puts_what_it_shows_in_as_text_and_fetches_only_the_daemon() {
    let page = include_str!("../../assets/ui.html");
    for markup in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
    ] {
        assert!(!page.contains(markup), "the page uses {markup}");
    }
    for elsewhere in ["http://", "https://", "//cdn", "<link", "src="] {
        assert!(!page.contains(elsewhere), "the page loads {elsewhere}");
    }
    assert!(page.contains("history.replaceState"));
    assert!(page.contains("document.body.dataset.loaded = \"true\""));
}
