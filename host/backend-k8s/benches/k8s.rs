//! The Kubernetes driver against one devcluster (the emulator in a child
//! process, this binary run again, so the client's CPU is its own and the
//! devcluster's is read from /proc), side by side in one run:
//!
//! - the latency of `true` over the persistent exec session and one-shot;
//! - claims at concurrency 1, 64 and 256, each row from a warm pool of its
//!   concurrency filled before the clock starts: a plain kube-rs client
//!   (create, watch until Ready, delete), the driver (claim, release), the
//!   driver with one `true` between, and the official Python SDK when
//!   `SANDFLEET_BENCH_SDK_PYTHON` names a Python with
//!   `k8s-agent-sandbox[async]`; claims/s, claim → Ready p50/p99, and the
//!   client's and the devcluster's CPU per claim;
//! - the API server connections the driver holds while 1,000 claims are
//!   live.
//!
//! Pods run as plain processes (`PodRuntime::Plain`): this measures the
//! driver, not sandbox isolation.
//!
//! `cargo bench -p sandfleet-backend-k8s --bench k8s` (`K8S_BENCH_SERIAL`,
//! `K8S_BENCH_CLAIMS` and `K8S_BENCH_LIVE` override the sizes;
//! `K8S_BENCH_ONLY=plain|driver|driver-true|sdk` runs that claimer's rows
//! alone, and `K8S_BENCH_CONCURRENCY=N` the row of that concurrency, for a
//! profiler; `K8S_BENCH_REPEAT=N` runs each row N times, the claimers taking
//! turns, and reports the median).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_backend_k8s::{ExecMode, K8sBackend, K8sClients, K8sConfig};
use sandfleet_core::{
    Backend, ExecRequest, RunId, TemplateRef, TemplateSpec, WarmPools, template_name,
};
use sandfleet_emulator_k8s::{CONTEXT, Config, Emulator, ImageMap, NodeShape, PodRuntime};

/// Claims at once while filling up to the live claims.
const CONCURRENCY: usize = 256;
const IMAGE: &str = "calc";

fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The child: an emulator that answers `connections` on stdin until stdin
/// closes.
fn serve(kubeconfig: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/images/calc");
        let source: sandfleet_backend_local::ImageSource =
            toml::from_str(&format!("path = {:?}", path.display().to_string())).unwrap();
        let emulator = Emulator::start(Config {
            with_agent_sandbox: true,
            images: ImageMap::from([(IMAGE.to_string(), source)]),
            runtime: PodRuntime::Plain,
            nodes: NodeShape {
                count: 10,
                cpu: "64".into(),
                memory: "256Gi".into(),
                pods: 400,
                disk: "1Ti".into(),
            },
            ..Config::default()
        })
        .await
        .unwrap();
        emulator.write_kubeconfig(Path::new(kubeconfig)).unwrap();
        println!("ready");
        let emulator = Arc::new(emulator);
        let asked = emulator.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if line.trim() == "connections" {
                    println!("{}", asked.connections());
                }
            }
        })
        .await;
    });
}

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--serve", kubeconfig.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Server {
            child,
            stdin,
            stdout,
            _dir: dir,
            kubeconfig,
        }
    }

    /// The devcluster's CPU time so far, its commands' included.
    fn cpu_seconds(&self) -> f64 {
        process_cpu_seconds(&self.child.id().to_string(), true)
    }

    /// Connections the emulator holds open now.
    fn connections(&mut self) -> usize {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "connections").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().parse().unwrap()
    }

    fn backend(&self, exec: ExecMode) -> Arc<K8sBackend> {
        let config = K8sConfig {
            kubeconfig: Some(self.kubeconfig.clone()),
            context: Some(CONTEXT.into()),
            exec,
            ..K8sConfig::default()
        };
        Arc::new(K8sBackend::new("bench", config, &K8sClients::new()).unwrap())
    }
}

impl Server {
    /// A kube client as its defaults make it: no bound on connections.
    async fn plain_client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let options = kube::config::KubeConfigOptions {
            context: Some(CONTEXT.into()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A number no other call in this process got.
fn unique() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn cpu_seconds() -> f64 {
    process_cpu_seconds("self", false)
}

/// CPU time of process `pid`, with its waited-for children's if `children`.
fn process_cpu_seconds(pid: &str, children: bool) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks = if children { 11..15 } else { 11..13 };
    fields[ticks]
        .iter()
        .map(|t| t.parse::<f64>().unwrap())
        .sum::<f64>()
        / 100.0
}

/// Median and 99th percentile (nearest rank), in ms.
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let rank =
        |p: f64| samples[((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
    (rank(0.5) * 1e3, rank(0.99) * 1e3)
}

fn truth() -> ExecRequest {
    ExecRequest {
        argv: vec!["true".into()],
        timeout: Duration::from_secs(60),
        ..ExecRequest::default()
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(300)
}

async fn template(backend: &K8sBackend, run: &RunId, warm: u32) -> TemplateRef {
    let spec = TemplateSpec {
        name: template_name(run, IMAGE),
        image: IMAGE.into(),
        cpu_milli: 10,
        memory_mib: 16,
        disk_mib: 16,
        network: false,
        env: Default::default(),
        labels: run.labels(),
    };
    let template = backend.ensure_template(&spec).await.unwrap();
    if warm > 0 {
        backend.warm(&template, warm, &run.labels()).await.unwrap();
        backend
            .wait_pool_ready(&template, warm, deadline())
            .await
            .unwrap();
    }
    template
}

/// One way of taking a claim from a warm pool and giving it back.
#[derive(Clone, Copy)]
enum Claimer {
    /// kube-rs as anyone would use it: create the claim, watch it by name
    /// from the create's resourceVersion until Ready, delete it.
    Plain,
    /// The driver: claim (through the run's shared watch), release.
    Driver,
    /// The driver: claim, one `true` over the persistent session, release.
    DriverWithTrue,
    /// The official Python SDK (`k8s-agent-sandbox`), in a process of its own.
    Sdk,
}

impl Claimer {
    /// Its name for `K8S_BENCH_ONLY`.
    fn key(self) -> &'static str {
        match self {
            Claimer::Plain => "plain",
            Claimer::Driver => "driver",
            Claimer::DriverWithTrue => "driver-true",
            Claimer::Sdk => "sdk",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Claimer::Plain => "plain kube-rs client: create → Ready → delete",
            Claimer::Driver => "driver: claim → release",
            Claimer::DriverWithTrue => "driver: claim → `true` → release",
            Claimer::Sdk => "official Python SDK: create → Ready → delete",
        }
    }
}

/// What one row measured.
struct Measured {
    elapsed: f64,
    cpu: f64,
    /// The devcluster's, its commands' included.
    server_cpu: f64,
    /// claim → Ready, seconds.
    latencies: Vec<f64>,
}

fn claims_api(client: kube::Client) -> kube::Api<kube::core::DynamicObject> {
    let resource = kube::core::ApiResource {
        group: "extensions.agents.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "extensions.agents.x-k8s.io/v1beta1".into(),
        kind: "SandboxClaim".into(),
        plural: "sandboxclaims".into(),
    };
    kube::Api::namespaced_with(client, "default", &resource)
}

fn bound_and_ready(claim: &kube::core::DynamicObject) -> bool {
    let status = &claim.data["status"];
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    ready
        && status["sandbox"]["name"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
}

/// One plain claim: create, watch until Ready, delete; the time to Ready.
async fn plain_claim(api: &kube::Api<kube::core::DynamicObject>, pool: &str) -> f64 {
    use futures_util::StreamExt;
    let begun = Instant::now();
    let name = format!("plain-{}", unique());
    let claim: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
        "metadata": {"name": name}, "spec": {"warmPoolRef": {"name": pool}},
    }))
    .unwrap();
    let made = api.create(&Default::default(), &claim).await.unwrap();
    if !bound_and_ready(&made) {
        let params = kube::api::WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let version = made.metadata.resource_version.clone().unwrap_or_default();
        let mut events = std::pin::pin!(api.watch(&params, &version).await.unwrap());
        loop {
            match events
                .next()
                .await
                .expect("the claim became Ready")
                .unwrap()
            {
                kube::core::WatchEvent::Added(o) | kube::core::WatchEvent::Modified(o)
                    if bound_and_ready(&o) =>
                {
                    break;
                }
                kube::core::WatchEvent::Error(e) => panic!("watch of {name}: {e:?}"),
                _ => {}
            }
        }
    }
    let ready = begun.elapsed().as_secs_f64();
    api.delete(&name, &Default::default()).await.unwrap();
    ready
}

async fn driver_claim(
    backend: &K8sBackend,
    template: &TemplateRef,
    labels: &sandfleet_core::Labels,
    with_true: bool,
) -> f64 {
    let begun = Instant::now();
    let handle = backend.claim(template, labels, deadline()).await.unwrap();
    let ready = begun.elapsed().as_secs_f64();
    if with_true {
        let result = backend.exec(&handle, &truth(), None).await.unwrap();
        assert_eq!(result.exit_code, 0);
    }
    backend.release(&handle).await.unwrap();
    ready
}

/// The SDK's row, or why there is none.
fn sdk_claims(
    server: &Server,
    pool: &str,
    concurrency: usize,
    total: usize,
) -> Result<Measured, String> {
    let python = std::env::var("SANDFLEET_BENCH_SDK_PYTHON").map_err(|_| {
        "skipped: set SANDFLEET_BENCH_SDK_PYTHON to a Python with `k8s-agent-sandbox[async]`"
            .to_string()
    })?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/sdk_claims.py");
    let output = Command::new(&python)
        .arg(&script)
        .args([
            server.kubeconfig.to_str().unwrap(),
            CONTEXT,
            "default",
            pool,
        ])
        .args([concurrency.to_string(), total.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    if !output.status.success() {
        return Err(format!("{python} {}: {}", script.display(), output.status));
    }
    let said: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{}: {e}", String::from_utf8_lossy(&output.stdout)))?;
    Ok(Measured {
        elapsed: said["elapsed"].as_f64().unwrap(),
        cpu: said["cpu"].as_f64().unwrap(),
        server_cpu: 0.0,
        latencies: said["latencies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect(),
    })
}

/// `total` claims by `claimer` at `concurrency` from a warm pool of
/// `concurrency`, filled before the clock starts (it refills behind them).
async fn claims_by(
    server: &Server,
    claimer: Claimer,
    concurrency: usize,
    total: usize,
) -> Result<Measured, String> {
    let backend = server.backend(ExecMode::Session);
    let run = RunId::new(format!("bench-claims-{}", unique())).unwrap();
    let template = template(&backend, &run, concurrency as u32).await;
    let plain = claims_api(server.plain_client().await);
    let server_cpu = server.cpu_seconds();
    let cpu = cpu_seconds();
    let started = Instant::now();
    let measured = if let Claimer::Sdk = claimer {
        let (pool, concurrency) = (template.name.clone(), concurrency);
        tokio::task::block_in_place(|| sdk_claims(server, &pool, concurrency, total))
    } else {
        let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..total {
            let permit = permits.clone().acquire_owned().await.unwrap();
            let (backend, template, labels) = (backend.clone(), template.clone(), run.labels());
            let plain = plain.clone();
            set.spawn(async move {
                let ready = match claimer {
                    Claimer::Plain => plain_claim(&plain, &template.name).await,
                    Claimer::Driver => driver_claim(&backend, &template, &labels, false).await,
                    _ => driver_claim(&backend, &template, &labels, true).await,
                };
                drop(permit);
                ready
            });
        }
        let latencies = set.join_all().await;
        Ok(Measured {
            elapsed: started.elapsed().as_secs_f64(),
            cpu: cpu_seconds() - cpu,
            server_cpu: 0.0,
            latencies,
        })
    };
    let measured = measured.map(|m| Measured {
        server_cpu: server.cpu_seconds() - server_cpu,
        ..m
    });
    backend.reap(&run).await.unwrap();
    measured
}

/// Every claimer at concurrency 1, 64 and 256, side by side: with
/// `K8S_BENCH_REPEAT=N`, each row N times with the claimers taking turns,
/// and the median run of each (the spread beside it), so a noisy machine
/// slows every claimer alike.
async fn claims_side_by_side(server: &Server) {
    let rows = [
        (1, size("K8S_BENCH_SERIAL", 100)),
        (64, size("K8S_BENCH_CLAIMS", 1024)),
        (256, size("K8S_BENCH_CLAIMS", 1024)),
    ];
    let only = std::env::var("K8S_BENCH_ONLY").ok();
    let at = std::env::var("K8S_BENCH_CONCURRENCY").ok();
    let repeat = size("K8S_BENCH_REPEAT", 1).max(1);
    let claimers: Vec<Claimer> = [
        Claimer::Plain,
        Claimer::Driver,
        Claimer::DriverWithTrue,
        Claimer::Sdk,
    ]
    .into_iter()
    .filter(|claimer| only.as_ref().is_none_or(|only| only == claimer.key()))
    .collect();
    for (concurrency, total) in rows {
        if at.as_ref().is_some_and(|at| *at != concurrency.to_string()) {
            continue;
        }
        println!("k8s/claims at concurrency {concurrency}, {total} each (median of {repeat}):");
        let mut runs: Vec<Vec<Result<Measured, String>>> =
            claimers.iter().map(|_| Vec::new()).collect();
        for _ in 0..repeat {
            for (claimer, runs) in claimers.iter().zip(&mut runs) {
                runs.push(claims_by(server, *claimer, concurrency, total).await);
            }
        }
        for (claimer, runs) in claimers.iter().zip(runs) {
            let mut measured: Vec<Measured> = match runs.into_iter().collect() {
                Ok(measured) => measured,
                Err(why) => {
                    println!("  {:<48} {why}", claimer.name());
                    continue;
                }
            };
            measured.sort_by(|a, b| a.elapsed.total_cmp(&b.elapsed));
            let rate = |m: &Measured| total as f64 / m.elapsed;
            let spread = if repeat > 1 {
                format!(
                    " ({:.1}–{:.1})",
                    rate(&measured[repeat - 1]),
                    rate(&measured[0])
                )
            } else {
                String::new()
            };
            let median = &mut measured[repeat / 2];
            let (p50, p99) = percentiles(&mut median.latencies);
            println!(
                "  {:<48} {:>6.1} claims/s{spread}  claim → Ready p50 {p50:>7.1} ms p99 {p99:>7.1} ms  CPU per claim: client {:.2} ms, devcluster {:.2} ms",
                claimer.name(),
                rate(median),
                median.cpu / total as f64 * 1e3,
                median.server_cpu / total as f64 * 1e3
            );
        }
    }
}

/// The latency of `true`, `count` times in a row on one sandbox.
async fn latency_of_true(server: &Server, count: usize) {
    let session = server.backend(ExecMode::Session);
    let oneshot = server.backend(ExecMode::Oneshot);
    let run = RunId::new("bench-latency").unwrap();
    let template = template(&session, &run, 1).await;
    let handle = session
        .claim(&template, &run.labels(), deadline())
        .await
        .unwrap();
    for (name, backend) in [
        ("persistent session", &session),
        ("one-shot websocket", &oneshot),
    ] {
        // The first command opens the session.
        backend.exec(&handle, &truth(), None).await.unwrap();
        let mut samples = Vec::with_capacity(count);
        let server_cpu = server.cpu_seconds();
        for _ in 0..count {
            let started = Instant::now();
            backend.exec(&handle, &truth(), None).await.unwrap();
            samples.push(started.elapsed().as_secs_f64());
        }
        let server_cpu = (server.cpu_seconds() - server_cpu) / count as f64 * 1e3;
        let (p50, p99) = percentiles(&mut samples);
        println!(
            "k8s/exec `true` over the {name}: p50 {p50:.2} ms, p99 {p99:.2} ms ({count} runs), devcluster CPU {server_cpu:.2} ms each"
        );
    }
    session.reap(&run).await.unwrap();
}

/// The connections held while `live` claims are.
async fn connections_holding(server: &mut Server, live: usize) {
    let backend = server.backend(ExecMode::Session);
    let run = RunId::new("bench-live").unwrap();
    let template = template(&backend, &run, 0).await;
    let idle = server.connections();
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut set = tokio::task::JoinSet::new();
    let started = Instant::now();
    for _ in 0..live {
        let permit = permits.clone().acquire_owned().await.unwrap();
        let (backend, template, labels) = (backend.clone(), template.clone(), run.labels());
        set.spawn(async move {
            let handle = backend.claim(&template, &labels, deadline()).await.unwrap();
            drop(permit);
            handle
        });
    }
    let mut handles = Vec::new();
    while let Some(done) = set.join_next().await {
        handles.push(done.unwrap());
    }
    let claimed = started.elapsed().as_secs_f64();
    let held = server.connections();
    println!(
        "k8s/{live} claims live (cold, {claimed:.1} s to claim): the API server holds {held} connections (before: {idle})"
    );
    backend.reap(&run).await.unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--serve") {
        serve(&args[at + 1]);
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut server = Server::start();
    let focused = std::env::var_os("K8S_BENCH_ONLY").is_some();
    runtime.block_on(async {
        if !focused {
            latency_of_true(&server, 200).await;
        }
        claims_side_by_side(&server).await;
        if !focused {
            connections_holding(&mut server, size("K8S_BENCH_LIVE", 1000)).await;
        }
    });
}
