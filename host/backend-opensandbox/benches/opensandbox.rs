//! The OpenSandbox driver against the emulator (plain sandboxes), side by
//! side in one run:
//! - latency of `true`: the driver with execd's 1 s grace tail on and off,
//!   and a client that reads each stream to its end (what the official SDK
//!   does) with the tail on;
//! - create → ready (claim: create, endpoint, ping);
//! - commands/s and client CPU per command at concurrency C (default 500;
//!   `OS_BENCH_CONCURRENCY`), each sandbox idle longer than the server's
//!   keep-alive between its commands;
//! - client RSS while holding N sandboxes (`OS_BENCH_HOLD`, default 1000).
//!
//! The emulator runs in a child process (this binary with `--serve
//! FAULTS`), so CPU and RSS are the client's own.
//!
//! Run: `cargo bench -p sandfleet-backend-opensandbox --bench opensandbox`

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_backend_opensandbox::{OpenSandboxBackend, OpenSandboxConfig};
use sandfleet_core::{Backend, ExecRequest, RunId, SandboxHandle, TemplateRef, TemplateSpec};
use sandfleet_emulator_opensandbox::{
    Emulator, EmulatorConfig, Faults, Runtime, images_from_fleet,
};
use sandfleet_transport::{Clients, TransportConfig};

async fn emulator(faults: &str) -> Emulator {
    let fleet = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.toml");
    let mut config = EmulatorConfig::new(images_from_fleet(&fleet).unwrap());
    config.runtime = Runtime::Plain;
    config.faults = faults.parse::<Faults>().unwrap();
    Emulator::start(config).await.unwrap()
}

/// `--serve FAULTS`: an emulator until stdin closes; its URL and key on
/// the first line of stdout.
fn serve(faults: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let emulator = emulator(faults).await;
        println!("{} {}", emulator.base_url(), emulator.api_key());
        let _ = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)
        })
        .await;
        emulator.shutdown().await;
    });
}

/// An emulator in a child process.
struct Server {
    child: Child,
    url: String,
    key: String,
}

impl Server {
    fn start(faults: &str) -> Server {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--serve", faults])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let (url, key) = line.trim().split_once(' ').unwrap();
        Server {
            url: url.to_string(),
            key: key.to_string(),
            child,
        }
    }

    /// Markers the emulator ran more than once.
    async fn run_twice(&self) -> usize {
        let executions: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/debug/executions", self.url))
            .header("OPEN-SANDBOX-API-KEY", &self.key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        executions["by_marker"]
            .as_object()
            .map_or(0, |m| m.values().filter(|n| n.as_u64() > Some(1)).count())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn backend(server: &Server, transport: TransportConfig) -> Arc<OpenSandboxBackend> {
    let clients = Clients::new();
    Arc::new(
        OpenSandboxBackend::with_server(
            "bench",
            OpenSandboxConfig {
                transport,
                ..OpenSandboxConfig::default()
            },
            &server.url,
            Some(server.key.clone()),
            &clients,
        )
        .unwrap(),
    )
}

async fn template(backend: &OpenSandboxBackend, run: &RunId) -> TemplateRef {
    backend
        .ensure_template(&TemplateSpec {
            name: "sf-bench".into(),
            image: "calc".into(),
            cpu_milli: 100,
            memory_mib: 64,
            disk_mib: 64,
            network: false,
            env: Default::default(),
            labels: run.labels(),
        })
        .await
        .unwrap()
}

async fn claim(backend: &OpenSandboxBackend, template: &TemplateRef) -> SandboxHandle {
    backend
        .claim(
            template,
            &template.run_id.labels(),
            Instant::now() + Duration::from_secs(120),
        )
        .await
        .unwrap()
}

fn truth() -> ExecRequest {
    ExecRequest {
        argv: vec!["true".into()],
        timeout: Duration::from_secs(30),
        ..ExecRequest::default()
    }
}

/// Median and 99th percentile (nearest rank), in ms.
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let rank =
        |p: f64| samples[((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
    (rank(0.5) * 1e3, rank(0.99) * 1e3)
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap()
        / 1024.0
}

async fn latency_of_true(faults: &str, label: &str, runs: usize) {
    let server = Server::start(faults);
    let backend = backend(&server, TransportConfig::default());
    let run = RunId::generate("bench-latency");
    let template = template(&backend, &run).await;
    let sandbox = claim(&backend, &template).await;
    let mut samples = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        backend.exec(&sandbox, &truth(), None).await.unwrap();
        samples.push(started.elapsed().as_secs_f64());
    }
    let (p50, p99) = percentiles(&mut samples);
    println!("opensandbox/true ({label}): median {p50:.2} ms, p99 {p99:.2} ms ({runs} runs)");
    // What a client that reads to the end of the stream pays.
    if faults.is_empty() {
        let execd = sandbox.endpoint.clone().unwrap();
        let client = reqwest::Client::new();
        let mut samples = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            client
                .post(format!("{execd}/command"))
                .json(&serde_json::json!({"command": "true"}))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            samples.push(started.elapsed().as_secs_f64());
        }
        let (p50, p99) = percentiles(&mut samples);
        println!(
            "opensandbox/true (read to the stream's end, grace tail on): median {p50:.2} ms, p99 {p99:.2} ms (5 runs)"
        );
    }
    backend.reap(&run).await.unwrap();
}

async fn create_to_ready_and_concurrency(concurrency: usize) {
    // The server drops sockets idle for 5 s (uvicorn's old default); the
    // client expires its own after its default 3 s. Scaled down (1 s
    // against 0.5 s) the margin is too thin for a machine this loaded: a
    // client that reads a response half a second after the server wrote
    // it starts its idle clock that much later than the server does.
    let server = Server::start("keepalive=5s");
    let backend = backend(&server, TransportConfig::default());
    let run = RunId::generate("bench-concurrency");
    let template = Arc::new(template(&backend, &run).await);
    let started = Instant::now();
    let mut claims = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (backend, template) = (backend.clone(), template.clone());
        claims.spawn(async move {
            let claimed = Instant::now();
            let sandbox = claim(&backend, &template).await;
            (sandbox, claimed.elapsed().as_secs_f64())
        });
    }
    let mut sandboxes = Vec::new();
    let mut ready = Vec::new();
    while let Some(joined) = claims.join_next().await {
        let (sandbox, took) = joined.unwrap();
        sandboxes.push(sandbox);
        ready.push(took);
    }
    let (p50, p99) = percentiles(&mut ready);
    println!(
        "opensandbox/create→ready at concurrency {concurrency}: median {p50:.1} ms, p99 {p99:.1} ms; all {concurrency} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Three rounds of one command per sandbox, with idle gaps longer than
    // the server's 5 s keep-alive between rounds.
    let rounds = 3;
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let mut commanded = Duration::ZERO;
    let mut failures: BTreeMap<&'static str, usize> = BTreeMap::new();
    for round in 0..rounds {
        if round > 0 {
            tokio::time::sleep(Duration::from_millis(5500)).await;
        }
        let round_started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for sandbox in &sandboxes {
            let (backend, sandbox) = (backend.clone(), sandbox.clone());
            set.spawn(async move { backend.exec(&sandbox, &truth(), None).await.err() });
        }
        while let Some(failed) = set.join_next().await {
            if let Some(error) = failed.unwrap() {
                if failures.is_empty() {
                    println!("opensandbox/first failure: {error}");
                }
                *failures.entry(error.kind().name()).or_default() += 1;
            }
        }
        commanded += round_started.elapsed();
    }
    let cpu = cpu_seconds() - cpu_before;
    let commands = (rounds * concurrency) as f64;
    println!(
        "opensandbox/commands at concurrency {concurrency}: {:.0} commands/s (busy time), client CPU {:.0} µs per command, failures {failures:?}, {} run twice ({:.1} s wall incl. idle gaps)",
        commands / commanded.as_secs_f64(),
        cpu / commands * 1e6,
        server.run_twice().await,
        started.elapsed().as_secs_f64()
    );
    backend.reap(&run).await.unwrap();
}

async fn rss_holding(count: usize) {
    let server = Server::start("");
    let backend = backend(&server, TransportConfig::default());
    let run = RunId::generate("bench-rss");
    let template = Arc::new(template(&backend, &run).await);
    let before = rss_mib();
    let mut set = tokio::task::JoinSet::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(200));
    for _ in 0..count {
        let (backend, template, gate) = (backend.clone(), template.clone(), gate.clone());
        set.spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            claim(&backend, &template).await
        });
    }
    let mut held = Vec::new();
    while let Some(joined) = set.join_next().await {
        held.push(joined.unwrap());
    }
    println!(
        "opensandbox/holding {count} sandboxes: client RSS {:.1} MiB (was {before:.1} MiB)",
        rss_mib()
    );
    backend.reap(&run).await.unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--serve") {
        serve(&args[at + 1]);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let number = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    runtime.block_on(async {
        latency_of_true("", "grace tail on", 200).await;
        latency_of_true("grace-tail=0ms", "grace tail off", 200).await;
        create_to_ready_and_concurrency(number("OS_BENCH_CONCURRENCY", 500)).await;
        rss_holding(number("OS_BENCH_HOLD", 1000)).await;
    });
}
