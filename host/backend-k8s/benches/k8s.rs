//! The Kubernetes driver against one devcluster (the emulator in a child
//! process, this binary run again, so the client's CPU is its own), side by
//! side in one run:
//!
//! - claim → ready → one `true` → release at concurrency 256 from a
//!   pre-filled warm pool: claims per second and client CPU per claim, with
//!   the persistent exec session and with one websocket per command;
//! - the latency of `true` over the persistent session and one-shot;
//! - the API server connections the client holds while 1,000 claims are live.
//!
//! Pods run as plain processes (`PodRuntime::Plain`): this measures the
//! driver, not sandbox isolation.
//!
//! `cargo bench -p sandfleet-backend-k8s --bench k8s` (`K8S_BENCH_CLAIMS`,
//! `K8S_BENCH_LIVE` override the sizes).

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

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
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

/// claim → ready → `true` → release, `total` times at concurrency 256.
async fn claim_cycle(server: &Server, exec: ExecMode, name: &str, total: usize) {
    let backend = server.backend(exec);
    let run = RunId::new(format!("bench-cycle-{}", name.replace(' ', "-"))).unwrap();
    let template = template(&backend, &run, CONCURRENCY as u32).await;
    let cpu = cpu_seconds();
    let started = Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..total {
        let permit = permits.clone().acquire_owned().await.unwrap();
        let (backend, template, labels) = (backend.clone(), template.clone(), run.labels());
        set.spawn(async move {
            let handle = backend.claim(&template, &labels, deadline()).await.unwrap();
            let result = backend.exec(&handle, &truth(), None).await.unwrap();
            assert_eq!(result.exit_code, 0);
            backend.release(&handle).await.unwrap();
            drop(permit);
        });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    println!(
        "k8s/claim→ready→true→release ({name}), {total} at concurrency {CONCURRENCY}: {:.1} claims/s, client CPU {:.2} ms per claim",
        total as f64 / elapsed,
        cpu / total as f64 * 1e3
    );
    backend.reap(&run).await.unwrap();
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
        for _ in 0..count {
            let started = Instant::now();
            backend.exec(&handle, &truth(), None).await.unwrap();
            samples.push(started.elapsed().as_secs_f64());
        }
        let (p50, p99) = percentiles(&mut samples);
        println!(
            "k8s/exec `true` over the {name}: p50 {p50:.2} ms, p99 {p99:.2} ms ({count} runs)"
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
    runtime.block_on(async {
        let total = size("K8S_BENCH_CLAIMS", 512);
        latency_of_true(&server, 200).await;
        claim_cycle(&server, ExecMode::Session, "persistent session", total).await;
        claim_cycle(&server, ExecMode::Oneshot, "one-shot exec", total).await;
        connections_holding(&mut server, size("K8S_BENCH_LIVE", 1000)).await;
    });
}
