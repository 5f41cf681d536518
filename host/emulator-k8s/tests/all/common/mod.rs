//! What the emulator's tests share: an HTTPS client with the emulator's CA and token,
//! watch-line reading, bounded waits on conditions, and image directories.

pub(crate) mod kubectl;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandfleet_emulator_k8s::{Emulator, ImageMap};
use serde_json::{Value, json};

/// A client of one emulator.
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) token: String,
}

impl Api {
    pub(crate) fn new(emulator: &Emulator) -> Self {
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

    /// Send a request with a JSON body (or `content_type` for patches).
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Value)>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some((content_type, b)) = body {
            req = req.header("content-type", content_type).body(b.to_string());
        }
        let resp = req.send().await.expect("request");
        let code = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.call(method, path, body.map(|b| ("application/json", b)))
            .await
    }

    pub(crate) async fn get(&self, path: &str) -> Option<Value> {
        let (code, body) = self.send(reqwest::Method::GET, path, None).await;
        match code {
            200 => Some(body),
            404 => None,
            other => panic!("GET {path}: {other} {body}"),
        }
    }

    pub(crate) async fn create(&self, path: &str, object: Value) -> Value {
        let (code, body) = self.send(reqwest::Method::POST, path, Some(object)).await;
        assert_eq!(code, 201, "POST {path}: {body}");
        body
    }

    pub(crate) async fn merge(&self, path: &str, patch: Value) -> Value {
        let (code, body) = self
            .call(
                reqwest::Method::PATCH,
                path,
                Some(("application/merge-patch+json", patch)),
            )
            .await;
        assert_eq!(code, 200, "PATCH {path}: {body}");
        body
    }

    pub(crate) async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, None).await
    }

    pub(crate) async fn list(&self, path: &str) -> Vec<Value> {
        self.get(path).await.expect("list")["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Poll `path` until `done` holds for the object (or its absence), within `limit`.
    pub(crate) async fn wait(
        &self,
        path: &str,
        limit: Duration,
        done: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let object = self.get(path).await;
            if done(object.as_ref()) {
                return object;
            }
            assert!(
                Instant::now() < deadline,
                "{path} did not get there within {limit:?}: {object:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Open a watch on `path` (with its query).
    pub(crate) async fn watch(&self, path_and_query: &str) -> Lines {
        let resp = self
            .http
            .get(format!("{}{path_and_query}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("watch");
        assert_eq!(resp.status().as_u16(), 200);
        Lines {
            resp,
            buf: Vec::new(),
        }
    }
}

/// Reads newline-delimited events from a watch response.
pub(crate) struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Lines {
    /// The next event, or None when the server ends the stream.
    pub(crate) async fn next(&mut self) -> Option<Value> {
        self.next_within(Duration::from_secs(10))
            .await
            .expect("an event or the end within the limit")
    }

    /// The next event within `limit` (Err on timeout).
    pub(crate) async fn next_within(&mut self, limit: Duration) -> Result<Option<Value>, ()> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Ok(Some(
                    serde_json::from_slice(&line).expect("each line is one JSON event"),
                ));
            }
            let chunk = tokio::time::timeout(limit, self.resp.chunk())
                .await
                .map_err(|_| ())?;
            match chunk.expect("stream reads") {
                Some(c) => self.buf.extend_from_slice(&c),
                None => return Ok(None),
            }
        }
    }
}

/// `metadata.resourceVersion` as a number.
pub(crate) fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The condition `kind` of an object.
pub(crate) fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Whether condition `kind` is True.
pub(crate) fn is_true(object: Option<&Value>, kind: &str) -> bool {
    object
        .and_then(|o| condition(o, kind))
        .is_some_and(|c| c["status"] == "True")
}

/// An image directory with a marker file, mapped as `name`.
pub(crate) fn image(name: &str) -> (tempfile::TempDir, ImageMap) {
    let dir = tempfile::tempdir().expect("image dir");
    std::fs::write(dir.path().join("marker.txt"), format!("image {name}\n")).expect("marker");
    let mut images = ImageMap::new();
    images.insert(
        name.to_string(),
        sandfleet_backend_local::ImageSource {
            path: dir.path().to_path_buf(),
            git: false,
            limits: Default::default(),
        },
    );
    (dir, images)
}

/// The agent-sandbox CRD YAMLs (the shared specs' copies are the same files).
pub(crate) fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds")
}

pub(crate) const SB: &str = "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes";
pub(crate) const EXT: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default";
pub(crate) const PODS: &str = "/api/v1/namespaces/default/pods";

/// A SandboxTemplate of `image` (`command`: the container's, if any).
pub(crate) fn template(name: &str, image: &str, command: Option<&[&str]>) -> Value {
    let mut container = json!({"name": "main", "image": image, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}});
    if let Some(cmd) = command {
        container["command"] = json!(cmd);
    }
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [container]}}},
    })
}

/// A SandboxWarmPool of `replicas` from `template`.
pub(crate) fn pool(name: &str, template: &str, replicas: u64) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    })
}

/// A SandboxClaim of `pool`.
pub(crate) fn claim(name: &str, pool: &str) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}},
    })
}

/// The reason and message of every event about object `name` in `default`.
pub(crate) async fn events_of(api: &Api, name: &str) -> Vec<(String, String)> {
    api.list(&format!(
        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    ))
    .await
    .iter()
    .map(|e| {
        (
            e["reason"].as_str().unwrap_or_default().to_string(),
            e["message"].as_str().unwrap_or_default().to_string(),
        )
    })
    .collect()
}
