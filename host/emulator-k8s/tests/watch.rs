//! Watch semantics over real HTTPS with reqwest: replay from a resourceVersion, 410 for
//! compacted history, bookmarks to resume from, selector transitions.

use std::time::Duration;

use sandfleet_emulator_k8s::{Config, Emulator};
use serde_json::{Value, json};

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    fn new(emulator: &Emulator) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = reqwest::Certificate::from_pem(emulator.ca_pem().as_bytes()).expect("CA parses");
        let http = reqwest::Client::builder()
            .tls_backend_rustls()
            .tls_certs_only([ca])
            .build()
            .expect("client");
        Self {
            http,
            base: emulator.url().to_string(),
            token: emulator.token().to_string(),
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.expect("request");
        let code = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn create_cm(&self, name: &str, labels: Value) -> Value {
        let (code, obj) = self
            .send(
                reqwest::Method::POST,
                "/api/v1/namespaces/default/configmaps",
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})),
            )
            .await;
        assert_eq!(code, 201, "{obj}");
        obj
    }

    /// Open a watch; returns the response to read lines from.
    async fn watch(&self, query: &str) -> reqwest::Response {
        let resp = self
            .http
            .get(format!(
                "{}/api/v1/namespaces/default/configmaps?watch=true&{query}",
                self.base
            ))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("watch");
        assert_eq!(resp.status().as_u16(), 200);
        resp
    }
}

/// Reads newline-delimited events from a watch response.
struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Lines {
    fn new(resp: reqwest::Response) -> Self {
        Self {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next event, or None when the server ends the stream.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("each line is one JSON event"));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.resp.chunk())
                .await
                .expect("an event or the end within 10 s")
                .expect("stream reads");
            self.buf.extend_from_slice(&chunk?);
        }
    }
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn summary(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap().to_string(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test]
async fn a_watch_from_a_resource_version_gets_exactly_the_later_events_in_order() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let client = Client::new(&emulator);
    let a = client.create_cm("a", json!({})).await;
    let b = client.create_cm("b", json!({})).await;
    let mut changed = a.clone();
    changed["data"]["k"] = json!("w");
    let (code, _) = client
        .send(
            reqwest::Method::PUT,
            "/api/v1/namespaces/default/configmaps/a",
            Some(changed),
        )
        .await;
    assert_eq!(code, 200);
    client.create_cm("c", json!({})).await;
    let (code, _) = client
        .send(
            reqwest::Method::DELETE,
            "/api/v1/namespaces/default/configmaps/b",
            None,
        )
        .await;
    assert_eq!(code, 200);

    // From b's RV: exactly what happened after it; timeoutSeconds ends the stream.
    let mut lines = Lines::new(
        client
            .watch(&format!("resourceVersion={}&timeoutSeconds=1", rv(&b)))
            .await,
    );
    let mut seen = Vec::new();
    let mut last = 0;
    while let Some(event) = lines.next().await {
        let this = rv(&event["object"]);
        assert!(this > last, "RVs increase: {event}");
        last = this;
        seen.push(summary(&event));
    }
    let expected = [("MODIFIED", "a"), ("ADDED", "c"), ("DELETED", "b")];
    assert_eq!(seen, expected.map(|(t, n)| (t.to_string(), n.to_string())));

    // From the start (no RV): the current objects as ADDED.
    let mut lines = Lines::new(client.watch("timeoutSeconds=1").await);
    let mut initial = Vec::new();
    while let Some(event) = lines.next().await {
        initial.push(summary(&event));
    }
    assert_eq!(
        initial,
        [("ADDED", "a"), ("ADDED", "c")].map(|(t, n)| (t.to_string(), n.to_string()))
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn an_rv_older_than_the_kept_history_gets_410_expired() {
    let emulator = Emulator::start(Config {
        history: 5,
        ..Config::default()
    })
    .await
    .unwrap();
    let client = Client::new(&emulator);
    let first = client.create_cm("first", json!({})).await;
    for i in 0..10 {
        client.create_cm(&format!("m{i}"), json!({})).await;
    }
    let mut lines = Lines::new(
        client
            .watch(&format!("resourceVersion={}", rv(&first)))
            .await,
    );
    let event = lines.next().await.expect("an ERROR event");
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    assert!(
        lines.next().await.is_none(),
        "the stream ends after the error"
    );

    // A continue token from before the kept history is 410 too.
    let (code, page) = client
        .send(
            reqwest::Method::GET,
            "/api/v1/namespaces/default/configmaps?limit=2",
            None,
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["metadata"]["remainingItemCount"], 9);
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    let (code, next) = client
        .send(
            reqwest::Method::GET,
            &format!("/api/v1/namespaces/default/configmaps?limit=20&continue={token}"),
            None,
        )
        .await;
    assert_eq!(code, 200, "{next}");
    assert_eq!(next["items"].as_array().unwrap().len(), 9);
    for i in 0..6 {
        client.create_cm(&format!("late{i}"), json!({})).await;
    }
    let (code, expired) = client
        .send(
            reqwest::Method::GET,
            &format!("/api/v1/namespaces/default/configmaps?limit=20&continue={token}"),
            None,
        )
        .await;
    assert_eq!(code, 410, "{expired}");
    assert_eq!(expired["reason"], "Expired");
    emulator.shutdown().await;
}

#[tokio::test]
async fn bookmarks_carry_a_resource_version_to_resume_from_without_loss() {
    let emulator = Emulator::start(Config {
        bookmark_interval: Duration::from_millis(100),
        ..Config::default()
    })
    .await
    .unwrap();
    let client = Client::new(&emulator);
    let start = client.create_cm("s", json!({})).await;
    let mut lines = Lines::new(
        client
            .watch(&format!(
                "resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds=30",
                rv(&start)
            ))
            .await,
    );
    let made = client.create_cm("x", json!({})).await;
    let mut bookmark = None;
    for _ in 0..100 {
        let event = lines.next().await.expect("stream open");
        if event["type"] == "BOOKMARK" && rv(&event["object"]) >= rv(&made) {
            assert_eq!(event["object"]["kind"], "ConfigMap");
            bookmark = Some(rv(&event["object"]));
            break;
        }
    }
    let bookmark = bookmark.expect("a bookmark at or after the last change");
    drop(lines);
    let after = client.create_cm("y", json!({})).await;
    let mut resumed = Lines::new(
        client
            .watch(&format!("resourceVersion={bookmark}&timeoutSeconds=1"))
            .await,
    );
    let event = resumed.next().await.expect("the event after the bookmark");
    assert_eq!(summary(&event), ("ADDED".into(), "y".into()));
    assert_eq!(rv(&event["object"]), rv(&after));
    assert!(resumed.next().await.is_none(), "nothing else happened");
    emulator.shutdown().await;
}

#[tokio::test]
async fn objects_entering_and_leaving_a_label_selector_are_added_and_deleted() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let client = Client::new(&emulator);
    let obj = client.create_cm("sel", json!({"app": "other"})).await;
    let mut lines = Lines::new(
        client
            .watch(&format!(
                "resourceVersion={}&labelSelector=app%3Dx&timeoutSeconds=2",
                rv(&obj)
            ))
            .await,
    );
    let patch = |labels: Value| {
        client
            .http
            .patch(format!(
                "{}/api/v1/namespaces/default/configmaps/sel",
                client.base
            ))
            .bearer_auth(&client.token)
            .header("content-type", "application/merge-patch+json")
            .body(json!({"metadata": {"labels": labels}}).to_string())
            .send()
    };
    assert_eq!(
        patch(json!({"app": "x"})).await.unwrap().status().as_u16(),
        200
    );
    assert_eq!(
        patch(json!({"app": "x", "more": "1"}))
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        patch(json!({"app": "y"})).await.unwrap().status().as_u16(),
        200
    );
    let mut seen = Vec::new();
    while let Some(event) = lines.next().await {
        seen.push(summary(&event).0);
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);
    emulator.shutdown().await;
}

#[tokio::test]
async fn requests_without_the_token_get_401_and_discovery_never_406() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let client = Client::new(&emulator);
    let resp = client
        .http
        .get(format!("{}/api/v1/namespaces", client.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Unauthorized");
    for accept in [
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        "application/json",
        "text/plain",
        "application/vnd.kubernetes.protobuf",
    ] {
        let resp = client
            .http
            .get(format!("{}/apis", client.base))
            .bearer_auth(&client.token)
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{accept}");
    }
    let (code, malformed) = client
        .send(
            reqwest::Method::POST,
            "/api/v1/namespaces/default/configmaps",
            None,
        )
        .await;
    assert_eq!(code, 400, "{malformed}");
    assert_eq!(malformed["kind"], "Status");
    emulator.shutdown().await;
}
