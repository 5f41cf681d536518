//! The driver against a scripted API server: kube's `Client` over
//! `tower_test::mock::pair`, answered by a small in-memory server (claims
//! kept, a controller that binds them or not, watches that stream events)
//! that each test scripts to fail on cue — an answer lost after the write,
//! a claim that never binds, a watch expired with 410, a 409, a 429 — and
//! whose request log the test reads. Virtual time (`start_paused`) runs
//! the driver's own timeouts and kube's backoffs without waiting them out.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::client::Body;
use sandfleet_backend_k8s::{K8sBackend, K8sConfig};
use sandfleet_core::{Backend, ErrorKind, RunId, SandboxHandle, TemplateRef, TemplateSpec};
use serde_json::{Value, json};
use tokio::sync::mpsc;

type Reply = Response<UnsyncBoxBody<Bytes, Infallible>>;
type Handle = tower_test::mock::Handle<Request<Body>, Reply>;

const CLAIMS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxclaims";
const POOLS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxwarmpools";
const TEMPLATES: &str =
    "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxtemplates";
const SANDBOXES: &str = "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes";

/// One request as the server received it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: String,
    body: Value,
}

impl Seen {
    fn is(&self, method: &Method, path: &str) -> bool {
        self.method == method && self.path == path
    }

    /// `method` on one object of the collection at `collection`.
    fn on_one_of(&self, method: &Method, collection: &str) -> Option<&str> {
        (self.method == method)
            .then(|| self.path.strip_prefix(collection)?.strip_prefix('/'))
            .flatten()
    }

    fn is_watch(&self) -> bool {
        self.query.split('&').any(|q| q == "watch=true")
    }
}

/// How a script has a request answered.
enum Answer {
    /// As the server's state says.
    Serve,
    /// With this failure and nothing done (`Retry-After` when given).
    Refuse(u16, &'static str, Option<u32>),
    /// Done, then answered with this failure.
    ServeThen(u16, &'static str),
    /// Done, then the connection drops before the answer.
    ServeThenLose,
}

type Script = Box<dyn FnMut(&Seen, &mut Server) -> Answer + Send>;

/// The API server's state, and what it was asked.
#[derive(Default)]
struct Server {
    claims: BTreeMap<String, Value>,
    version: u64,
    watchers: Vec<mpsc::UnboundedSender<Bytes>>,
    log: Vec<Seen>,
    /// Claims the controller leaves unbound, from the next one made.
    unbound: usize,
    /// The next claim made is deleted behind the watch's back, and the
    /// watch that saw it made is expired (410).
    expire_after_claim: bool,
    /// `expire_after_claim` waits for the watch to be opened, to delete
    /// this claim.
    expire_next_watch: Option<String>,
}

impl Server {
    fn posted_claims(&self) -> Vec<String> {
        self.log
            .iter()
            .filter(|s| s.is(&Method::POST, CLAIMS))
            .map(|s| s.body["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn deleted_claims(&self) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|s| s.on_one_of(&Method::DELETE, CLAIMS))
            .map(str::to_string)
            .collect()
    }

    fn count(&self, test: impl Fn(&Seen) -> bool) -> usize {
        self.log.iter().filter(|s| test(s)).count()
    }

    fn stamp(&mut self, object: &mut Value) {
        self.version += 1;
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("x")
            .to_string();
        let metadata = &mut object["metadata"];
        metadata["resourceVersion"] = json!(self.version.to_string());
        metadata["uid"] = json!(format!("uid-{name}"));
        metadata["namespace"] = json!("default");
    }

    fn tell(&mut self, kind: &str, object: &Value) {
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
        line.push(b'\n');
        let line = Bytes::from(line);
        self.watchers.retain(|w| w.send(line.clone()).is_ok());
    }

    /// Ends every open watch with the 410 a compacted resourceVersion gets.
    fn expire_watches(&mut self) {
        self.tell("ERROR", &status_body(410, "Expired", None));
        self.watchers.clear();
    }

    fn serve(&mut self, seen: &Seen) -> Reply {
        if seen.is(&Method::GET, CLAIMS) && seen.is_watch() {
            let (sender, receiver) = mpsc::unbounded_channel();
            self.watchers.push(sender);
            if let Some(name) = self.expire_next_watch.take() {
                let since: u64 = query(&seen.query, "resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let newer: Vec<Value> = self
                    .claims
                    .values()
                    .filter(|c| version_of(c) > since)
                    .cloned()
                    .collect();
                for claim in &newer {
                    self.tell("ADDED", claim);
                }
                self.claims.remove(&name);
                self.expire_watches();
            }
            return stream(receiver);
        }
        if seen.is(&Method::GET, CLAIMS) {
            return list(self.claims.values().cloned().collect(), self.version);
        }
        if seen.is(&Method::POST, CLAIMS) {
            let name = seen.body["metadata"]["name"].as_str().unwrap().to_string();
            if self.claims.contains_key(&name) {
                return status(409, "AlreadyExists", None);
            }
            let mut claim = seen.body.clone();
            self.stamp(&mut claim);
            if self.unbound > 0 {
                self.unbound -= 1;
            } else {
                claim["status"] = bound(&name);
            }
            self.claims.insert(name.clone(), claim.clone());
            self.tell("ADDED", &claim);
            if self.expire_after_claim {
                self.expire_after_claim = false;
                if self.watchers.is_empty() {
                    self.expire_next_watch = Some(name.clone());
                } else {
                    self.claims.remove(&name);
                    self.expire_watches();
                }
            }
            return json_reply(201, &claim);
        }
        if let Some(name) = seen.on_one_of(&Method::DELETE, CLAIMS) {
            return match self.claims.remove(name) {
                Some(claim) => {
                    self.tell("DELETED", &claim);
                    json_reply(200, &claim)
                }
                None => status(404, "NotFound", None),
            };
        }
        if let Some(name) = seen.on_one_of(&Method::PATCH, CLAIMS) {
            return match self.claims.get(name) {
                Some(claim) => json_reply(200, claim),
                None => status(404, "NotFound", None),
            };
        }
        if let Some(name) = seen.on_one_of(&Method::GET, SANDBOXES) {
            let mut sandbox = json!({
                "apiVersion": "agents.x-k8s.io/v1beta1",
                "kind": "Sandbox",
                "metadata": {"name": name},
                "spec": {},
                "status": {"podIPs": ["10.0.0.7"]},
            });
            self.stamp(&mut sandbox);
            return json_reply(200, &sandbox);
        }
        if seen.method == Method::POST || seen.method == Method::PATCH {
            let mut object = seen.body.clone();
            self.stamp(&mut object);
            let code = if seen.method == Method::POST {
                201
            } else {
                200
            };
            return json_reply(code, &object);
        }
        if seen.method == Method::GET {
            return list(Vec::new(), self.version);
        }
        status(404, "NotFound", None)
    }
}

fn query<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

fn version_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What the controller writes on a claim it bound.
fn bound(claim: &str) -> Value {
    json!({
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "DependenciesReady",
            "message": "the sandbox is ready",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }],
        "sandbox": {"name": format!("sb-{claim}"), "podIPs": ["10.0.0.7"]},
    })
}

fn status_body(code: u16, reason: &str, retry_after: Option<u32>) -> Value {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("scripted {code} {reason}"),
        "reason": reason,
        "code": code,
    });
    if let Some(seconds) = retry_after {
        body["details"] = json!({"retryAfterSeconds": seconds});
    }
    body
}

fn json_reply(code: u16, body: &Value) -> Reply {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())).boxed_unsync())
        .unwrap()
}

fn status(code: u16, reason: &str, retry_after: Option<u32>) -> Reply {
    let mut reply = json_reply(code, &status_body(code, reason, retry_after));
    if let Some(seconds) = retry_after {
        reply
            .headers_mut()
            .insert("retry-after", seconds.to_string().parse().unwrap());
    }
    reply
}

fn list(items: Vec<Value>, version: u64) -> Reply {
    json_reply(
        200,
        &json!({
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": version.to_string()},
            "items": items,
        }),
    )
}

/// A watch's answer: one JSON event a line, for as long as the server
/// keeps the sender.
fn stream(receiver: mpsc::UnboundedReceiver<Bytes>) -> Reply {
    let lines = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let line = receiver.recv().await?;
        Some((Ok(http_body::Frame::data(line)), receiver))
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(StreamBody::new(lines).boxed_unsync())
        .unwrap()
}

async fn serve(mut handle: Handle, server: Arc<Mutex<Server>>, mut script: Script) {
    while let Some((request, answer)) = handle.next_request().await {
        let (parts, body) = request.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let seen = Seen {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let mut server = server.lock().unwrap();
        server.log.push(seen.clone());
        match script(&seen, &mut server) {
            Answer::Serve => answer.send_response(server.serve(&seen)),
            Answer::Refuse(code, reason, retry_after) => {
                answer.send_response(status(code, reason, retry_after));
            }
            Answer::ServeThen(code, reason) => {
                server.serve(&seen);
                answer.send_response(status(code, reason, None));
            }
            Answer::ServeThenLose => {
                server.serve(&seen);
                answer.send_error("connection reset by peer");
            }
        }
    }
}

struct Scripted {
    backend: K8sBackend,
    server: Arc<Mutex<Server>>,
    run: RunId,
}

impl Scripted {
    fn start(config: K8sConfig, script: Script) -> Self {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Reply>();
        let server = Arc::new(Mutex::new(Server::default()));
        tokio::spawn(serve(handle, server.clone(), script));
        Scripted {
            backend: K8sBackend::with_service("scripted", config, service).unwrap(),
            server,
            run: RunId::generate("scripted"),
        }
    }

    fn serving(script: Script) -> Self {
        Self::start(K8sConfig::default(), script)
    }

    fn server(&self) -> std::sync::MutexGuard<'_, Server> {
        self.server.lock().unwrap()
    }

    fn template(&self) -> TemplateRef {
        TemplateRef {
            name: "scripted-calc".into(),
            image: "calc".into(),
            run_id: self.run.clone(),
        }
    }

    async fn claim(&self) -> Result<SandboxHandle, sandfleet_core::BackendError> {
        self.backend
            .claim(
                &self.template(),
                &self.run.labels(),
                Instant::now() + Duration::from_secs(60),
            )
            .await
    }
}

fn as_served() -> Script {
    Box::new(|_, _| Answer::Serve)
}

/// The first claim create is carried out and its answer replaced by
/// `failure`; everything else is served.
fn first_create_fails(failure: fn() -> Answer) -> Script {
    let mut failed = false;
    Box::new(move |seen, _| {
        if seen.is(&Method::POST, CLAIMS) && !failed {
            failed = true;
            return failure();
        }
        Answer::Serve
    })
}

#[tokio::test(start_paused = true)]
async fn a_claim_whose_create_answer_is_lost_is_deleted_by_its_name_and_not_made_twice() {
    let lost: [(fn() -> Answer, ErrorKind); 2] = [
        (
            || Answer::ServeThen(500, "InternalError"),
            ErrorKind::Unavailable,
        ),
        (
            || Answer::ServeThenLose,
            ErrorKind::Transport { sent: true },
        ),
    ];
    for (failure, kind) in lost {
        let scripted = Scripted::serving(first_create_fails(failure));
        let error = scripted.claim().await.unwrap_err();
        assert_eq!(error.kind(), kind, "{error}");

        let server = scripted.server();
        let posted = server.posted_claims();
        assert_eq!(posted.len(), 1, "the create is sent once: {posted:?}");
        assert_eq!(server.deleted_claims(), posted, "deleted by its name");
        assert!(
            server.claims.is_empty(),
            "left behind: {:?}",
            server.claims.keys()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_claim_create_the_server_refused_is_not_deleted() {
    // A 4xx made nothing: there is nothing to clean up.
    let scripted = Scripted::serving(first_create_fails(|| Answer::Refuse(422, "Invalid", None)));
    let error = scripted.claim().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    let server = scripted.server();
    assert_eq!(server.posted_claims().len(), 1);
    assert!(server.deleted_claims().is_empty(), "{:?}", server.log);
}

#[tokio::test(start_paused = true)]
async fn a_claim_that_does_not_bind_in_time_is_deleted_and_the_next_one_is_made_anew() {
    let scripted = Scripted::start(
        K8sConfig {
            bind_timeout: Some(Duration::from_secs(5)),
            ..K8sConfig::default()
        },
        as_served(),
    );
    scripted.server().unbound = 1;

    let error = scripted.claim().await.unwrap_err();
    // Retryable, so the engine makes it again.
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(error.kind().is_retryable());
    let unbound = scripted.server().posted_claims();
    assert_eq!(unbound.len(), 1);
    assert_eq!(scripted.server().deleted_claims(), unbound);

    let sandbox = scripted.claim().await.unwrap();
    let server = scripted.server();
    let posted = server.posted_claims();
    assert_eq!(posted.len(), 2);
    assert_ne!(posted[1], posted[0], "made anew under a new name");
    assert_eq!(sandbox.id, posted[1]);
    assert_eq!(server.claims.keys().collect::<Vec<_>>(), [&posted[1]]);
}

#[tokio::test(start_paused = true)]
async fn no_try_at_a_claim_is_shorter_than_the_controllers_cold_start_needs() {
    let scripted = Scripted::serving(as_served());
    scripted.server().unbound = usize::MAX;
    let started = tokio::time::Instant::now();
    // Half of 7 s would be a 3.5 s try and then another of 1.75 s, both
    // over before a cold sandbox's pod could say why it does not start.
    let error = scripted
        .backend
        .claim(
            &scripted.template(),
            &scripted.run.labels(),
            Instant::now() + Duration::from_secs(7),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(scripted.server().posted_claims().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_claim_deleted_while_its_watch_was_expired_is_found_gone_by_the_relist() {
    let scripted = Scripted::serving(as_served());
    {
        let mut server = scripted.server();
        server.unbound = 1;
        server.expire_after_claim = true;
    }
    let error = scripted.claim().await.unwrap_err();
    // Gone at once, not after waiting out the bind timeout (half a minute).
    assert_eq!(error.kind(), ErrorKind::SandboxLost, "{error}");
    assert!(error.message().contains("deleted"), "{error}");
    let server = scripted.server();
    let lists = server.count(|s| s.is(&Method::GET, CLAIMS) && !s.is_watch());
    assert_eq!(lists, 2, "listed, then relisted after the 410");
    // Already gone: nothing to delete.
    assert!(server.deleted_claims().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_existing_warm_pool_is_left_as_it_is_and_a_conflicting_claim_goes_back_to_the_engine() {
    // The template's pool exists (409): its size is not touched.
    let scripted = Scripted::serving(Box::new(|seen, _| {
        if seen.is(&Method::POST, POOLS) {
            return Answer::Refuse(409, "AlreadyExists", None);
        }
        Answer::Serve
    }));
    let spec = TemplateSpec {
        name: "scripted-calc".into(),
        image: "calc".into(),
        cpu_milli: 100,
        memory_mib: 64,
        disk_mib: 64,
        network: false,
        env: BTreeMap::new(),
        labels: scripted.run.labels(),
    };
    let template = scripted.backend.ensure_template(&spec).await.unwrap();
    assert_eq!(template, scripted.template());
    {
        let server = scripted.server();
        let template_path = format!("{TEMPLATES}/scripted-calc");
        assert_eq!(server.count(|s| s.is(&Method::PATCH, &template_path)), 1);
        assert_eq!(server.count(|s| s.is(&Method::POST, POOLS)), 1);
        assert_eq!(
            server.count(|s| s.method == Method::PATCH),
            1,
            "{:?}",
            server.log
        );
    }

    // A claim create answered 409 made nothing of ours: a conflict the
    // engine retries under a new name, nothing deleted.
    let scripted = Scripted::serving(first_create_fails(|| {
        Answer::Refuse(409, "AlreadyExists", None)
    }));
    let error = scripted.claim().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Conflict, "{error}");
    assert!(error.kind().is_retryable());
    let server = scripted.server();
    assert_eq!(server.posted_claims().len(), 1);
    assert!(server.deleted_claims().is_empty(), "{:?}", server.log);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_release_is_sent_once_for_the_engine_to_retry_while_a_reap_retries_itself() {
    let scripted = Scripted::serving(Box::new(|seen, _| {
        if seen.on_one_of(&Method::DELETE, CLAIMS).is_some()
            || seen.on_one_of(&Method::PATCH, CLAIMS).is_some()
        {
            return Answer::Refuse(429, "TooManyRequests", Some(1));
        }
        Answer::Serve
    }));
    let sandbox = scripted.claim().await.unwrap();
    let deletes = |scripted: &Scripted| scripted.server().deleted_claims().len();

    // Each of the engine's attempts is one request, and hands back the
    // pause the server asked for.
    for attempt in 1..=3 {
        let error = scripted.backend.release(&sandbox).await.unwrap_err();
        assert_eq!(
            error.kind(),
            ErrorKind::Throttled {
                retry_after: Some(Duration::from_secs(1))
            },
            "{error}"
        );
        assert_eq!(deletes(&scripted), attempt);
    }
    let renewals = |scripted: &Scripted| {
        scripted
            .server()
            .count(|s| s.on_one_of(&Method::PATCH, CLAIMS).is_some())
    };
    let error = scripted
        .backend
        .renew(&sandbox, Duration::from_secs(600))
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Throttled { .. }),
        "{error}"
    );
    assert_eq!(renewals(&scripted), 1);

    // A reap is nobody else's to retry: kube retries its delete.
    let before = deletes(&scripted);
    let error = scripted.backend.reap(&scripted.run).await.unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Throttled { .. }),
        "{error}"
    );
    let sent = deletes(&scripted) - before;
    println!("a throttled reap sent its claim's delete {sent} times");
    assert!(sent > 1, "the reap's delete was sent {sent} time(s)");
}
