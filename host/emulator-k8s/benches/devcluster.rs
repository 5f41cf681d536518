//! The Kubernetes emulator under load, in a child process of its own (this binary run
//! again) so its RSS is its own: claims served per second at concurrency 256 from a
//! pre-filled warm pool, and the RSS with 10,000 Sandboxes (each with its pod running as
//! a plain local sandbox). Pods run with `--runtime plain` so this measures the
//! emulator, not sandbox isolation.
//!
//! `cargo bench -p sandfleet-emulator-k8s --bench devcluster` (`CLAIMS`, `SANDBOXES`
//! override the sizes).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Semaphore;

const CHILD: &str = "SANDFLEET_BENCH_EMULATOR";
const CONCURRENCY: usize = 256;
const EXT: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default";

fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The child: an emulator until stdin closes.
async fn child(image: String) -> anyhow::Result<()> {
    let mut images = sandfleet_emulator_k8s::ImageMap::new();
    images.insert(
        "bench:1".into(),
        sandfleet_backend_local::ImageSource {
            path: image.into(),
            git: false,
            limits: Default::default(),
        },
    );
    let emulator = sandfleet_emulator_k8s::Emulator::start(sandfleet_emulator_k8s::Config {
        with_agent_sandbox: true,
        images,
        runtime: sandfleet_emulator_k8s::PodRuntime::Plain,
        nodes: sandfleet_emulator_k8s::NodeShape {
            count: 8,
            cpu: "1000".into(),
            memory: "4Ti".into(),
            pods: 5000,
            disk: "100Ti".into(),
        },
        ..Default::default()
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kubeconfig");
    emulator.write_kubeconfig(&path)?;
    println!("{} {} {}", emulator.url(), emulator.token(), path.display());
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    })
    .await?;
    emulator.shutdown().await;
    Ok(())
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
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
        (code, resp.json().await.unwrap_or(Value::Null))
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Wait (bounded) until `done` holds for the object at `path`.
async fn wait(client: &Client, path: &str, limit: Duration, done: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        let (_, o) = client.call(reqwest::Method::GET, path, None).await;
        if done(&o) {
            return;
        }
        assert!(Instant::now() < deadline, "{path} did not get there: {o}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn parent() -> anyhow::Result<()> {
    let claims = size("CLAIMS", 1024);
    let sandboxes = size("SANDBOXES", 10_000);
    let image = tempfile::tempdir()?;
    std::fs::write(image.path().join("app.py"), "print('hi')\n")?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(CHILD, image.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first)?;
    let parts: Vec<&str> = first.split_whitespace().collect();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = std::fs::read_to_string(parts[2])?;
    let ca_b64 = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("ca");
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.decode(ca_b64)?;
    let http = reqwest::Client::builder()
        .tls_backend_rustls()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca)?])
        .pool_max_idle_per_host(CONCURRENCY)
        .build()?;
    let client = Arc::new(Client {
        http,
        base: parts[0].into(),
        token: parts[1].into(),
    });
    let pid = child.id();
    let idle = rss_kib(pid);

    // Claims/s from a pre-filled pool.
    let template = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate", "metadata": {"name": "t"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "bench:1", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}});
    client
        .call(
            reqwest::Method::POST,
            &format!("{EXT}/sandboxtemplates"),
            Some(template),
        )
        .await;
    let pool = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool", "metadata": {"name": "p"},
        "spec": {"replicas": claims, "sandboxTemplateRef": {"name": "t"}}});
    let filling = Instant::now();
    client
        .call(
            reqwest::Method::POST,
            &format!("{EXT}/sandboxwarmpools"),
            Some(pool),
        )
        .await;
    wait(
        &client,
        &format!("{EXT}/sandboxwarmpools/p"),
        Duration::from_secs(600),
        |p| p["status"]["readyReplicas"].as_u64() == Some(claims as u64),
    )
    .await;
    let fill = filling.elapsed();
    let gate = Arc::new(Semaphore::new(CONCURRENCY));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..claims {
        let client = client.clone();
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("gate");
            let begun = Instant::now();
            let claim = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim", "metadata": {"name": format!("c{i}")}, "spec": {"warmPoolRef": {"name": "p"}}});
            let (code, made) = client.call(reqwest::Method::POST, &format!("{EXT}/sandboxclaims"), Some(claim)).await;
            assert_eq!(code, 201, "{made}");
            // A watch from the create's RV until Ready, as a client waits.
            let rv = made["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
            let url = format!("{}{EXT}/sandboxclaims?watch=true&fieldSelector=metadata.name%3Dc{i}&resourceVersion={rv}&timeoutSeconds=120", client.base);
            let mut resp = client.http.get(url).bearer_auth(&client.token).send().await.expect("watch");
            let mut buf = Vec::new();
            'events: while let Some(chunk) = resp.chunk().await.expect("chunk") {
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    let event: Value = serde_json::from_slice(&line).expect("event");
                    let ready = event["object"]["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True");
                    if ready {
                        break 'events;
                    }
                }
            }
            // A watch can end early (a 410 after compaction): then read until Ready.
            let path = format!("{EXT}/sandboxclaims/c{i}");
            let ready = |o: &Value| {
                o["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
            };
            let (_, now) = client.call(reqwest::Method::GET, &path, None).await;
            if !ready(&now) {
                wait(&client, &path, Duration::from_secs(300), ready).await;
            }
            begun.elapsed()
        });
    }
    let mut latencies: Vec<Duration> = tasks.join_all().await;
    let elapsed = started.elapsed();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    let after_claims = rss_kib(pid);
    println!(
        "claims: {claims} at concurrency {CONCURRENCY} from a pre-filled pool ({claims} ready in {:.1} s): {:.1} s, {:.0} claims/s; latency p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms",
        fill.as_secs_f64(),
        elapsed.as_secs_f64(),
        claims as f64 / elapsed.as_secs_f64(),
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.95).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3
    );

    // RSS with N Sandboxes, each with its pod running.
    let making = Instant::now();
    let gate = Arc::new(Semaphore::new(64));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sandboxes {
        let client = client.clone();
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("gate");
            let sb = json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": format!("s{i}")},
                "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "bench:1", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}});
            let (code, body) = client.call(reqwest::Method::POST, "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes", Some(sb)).await;
            assert_eq!(code, 201, "{body}");
        });
    }
    tasks.join_all().await;
    let deadline = Instant::now() + Duration::from_secs(900);
    let ready = loop {
        let (_, list) = client
            .call(
                reqwest::Method::GET,
                "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes",
                None,
            )
            .await;
        let ready = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| {
                s["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with('s'))
            })
            .filter(|s| {
                s["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count();
        if ready == sandboxes || Instant::now() > deadline {
            break ready;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let with_sandboxes = rss_kib(pid);
    println!(
        "rss: idle {:.0} MiB; after the claims {:.0} MiB; with {ready}/{sandboxes} more Sandboxes Ready (made in {:.0} s) {:.0} MiB ({:.1} KiB per Sandbox with its pod, events and sandbox)",
        idle as f64 / 1024.0,
        after_claims as f64 / 1024.0,
        making.elapsed().as_secs_f64(),
        with_sandboxes as f64 / 1024.0,
        (with_sandboxes.saturating_sub(after_claims)) as f64 / ready.max(1) as f64
    );
    drop(child.stdin.take());
    child.wait()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match std::env::var(CHILD) {
        Ok(image) => runtime.block_on(child(image)),
        Err(_) => runtime.block_on(parent()),
    }
}
