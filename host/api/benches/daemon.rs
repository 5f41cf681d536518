//! The daemon's cost over the engine, on the local backend with the
//! quickstart's `calc` image, all in one run:
//!
//! * acquire → `true` → release through the engine's `Session` in-process,
//!   and the same over HTTP on loopback, alternating in rounds;
//! * exec round trips per second from 256 concurrent clients, each with
//!   its own lease;
//! * this process's RSS (the daemon plus one HTTP client) with 1,000 live
//!   leases.
//!
//! `cargo bench -p sandfleet-api --bench daemon`; scale with
//! `DAEMON_BENCH_ROUNDS`, `DAEMON_BENCH_CLIENTS`, `DAEMON_BENCH_LEASES`;
//! `DAEMON_BENCH_ONLY=round-trip|clients|rss` runs one part (RSS is best
//! measured alone: the other parts leave memory to the allocator).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_api::{Daemon, LeaseList, Options};
use sandfleet_core::{ExecRequest, RunId};
use sandfleet_engine::{Purpose, Session, SessionSpec};
use sandfleet_fleet::{FleetConfig, setup};
use serde_json::json;

mod support;

use support::{fleet_file, knob};

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at =
        |p: f64| samples[((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
    println!(
        "{name:<34} n={:<4} median {:>8.2} ms   p99 {:>8.2} ms",
        samples.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3
    );
}

async fn session(dir: &Path) -> Session {
    let config = FleetConfig::load(&fleet_file(dir, 64, "")).unwrap();
    let (plugins, clusters) = tokio::task::spawn_blocking(move || {
        let plugins = setup::plugins(&config).unwrap();
        let clusters = setup::clusters(&config).unwrap();
        (plugins, clusters, config)
    })
    .await
    .map(|(p, c, _)| (p, c))
    .unwrap();
    Session::start(SessionSpec {
        run_id: RunId::generate("bench-session"),
        settings: Default::default(),
        clusters,
        plugins,
        logs: dir.join("logs"),
    })
    .await
    .unwrap()
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

async fn daemon(dir: &Path, max_sandboxes: usize) -> (Daemon, String) {
    let daemon = Daemon::start(Options {
        config: fleet_file(dir, max_sandboxes, ""),
        listen: Some("127.0.0.1:0".parse().unwrap()),
    })
    .await
    .unwrap();
    let base = format!("http://{}", daemon.addr());
    (daemon, base)
}

async fn http_round_trip(http: &reqwest::Client, base: &str) -> Duration {
    let started = Instant::now();
    let lease: serde_json::Value = http
        .post(format!("{base}/v1/leases"))
        .json(&json!({"image": "calc"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = lease["id"].as_str().unwrap();
    let ran: serde_json::Value = http
        .post(format!("{base}/v1/leases/{id}/exec"))
        .json(&json!({"argv": ["true"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ran["exit_code"], 0);
    let deleted = http
        .delete(format!("{base}/v1/leases/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    started.elapsed()
}

async fn engine_round_trip(session: &Session, n: usize) -> Duration {
    let started = Instant::now();
    let lease = session
        .acquire(
            &format!("bench-{n}"),
            Purpose::Image {
                image: "calc".into(),
                workdir: "/workspace".into(),
            },
        )
        .await
        .unwrap();
    let request = ExecRequest {
        argv: vec!["true".into()],
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    assert_eq!(
        session
            .exec(&lease, &request, None)
            .await
            .unwrap()
            .exit_code,
        0
    );
    session.release(lease);
    started.elapsed()
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let rounds = knob("DAEMON_BENCH_ROUNDS", 200);
        let clients = knob("DAEMON_BENCH_CLIENTS", 256);
        let leases = knob("DAEMON_BENCH_LEASES", 1000);
        let http = reqwest::Client::new();
        let only = std::env::var("DAEMON_BENCH_ONLY").ok();
        let part = |name: &str| only.as_deref().is_none_or(|only| only == name);

        // 1. Side by side, alternating in rounds of 10.
        if part("round-trip") {
        let engine_dir = tempfile::tempdir().unwrap();
        let session = session(engine_dir.path()).await;
        let daemon_dir = tempfile::tempdir().unwrap();
        let (served, base) = daemon(daemon_dir.path(), 64).await;
        let (mut in_process, mut over_http) = (Vec::new(), Vec::new());
        for warmup in 0..5 {
            engine_round_trip(&session, 1_000_000 + warmup).await;
            http_round_trip(&http, &base).await;
        }
        for n in 0..rounds {
            if (n / 10) % 2 == 0 {
                in_process.push(engine_round_trip(&session, n).await);
            } else {
                over_http.push(http_round_trip(&http, &base).await);
            }
        }
        stats("acquire+true+release, engine", in_process);
        stats("acquire+true+release, HTTP", over_http);
        session.close().await.unwrap();
        served.stop();
        served.wait().await.unwrap();
        }

        // 2. Exec round trips per second at `clients` concurrent clients.
        if part("clients") {
        let dir = tempfile::tempdir().unwrap();
        let (served, base) = daemon(dir.path(), clients + 16).await;
        let mut ids = Vec::new();
        for chunk in 0..clients.div_ceil(32) {
            let count = 32.min(clients - chunk * 32);
            let batch: LeaseList = http
                .post(format!("{base}/v1/leases:batch"))
                .json(&json!({"leases": vec![json!({"image": "calc"}); count]}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            ids.extend(batch.leases.into_iter().map(|l| l.id));
        }
        let per_client = 8;
        let started = Instant::now();
        let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let tasks: Vec<_> = ids
            .iter()
            .cloned()
            .map(|id| {
                let (http, base, latencies) = (http.clone(), base.clone(), latencies.clone());
                tokio::spawn(async move {
                    for _ in 0..per_client {
                        let one = Instant::now();
                        let response = http
                            .post(format!("{base}/v1/leases/{id}/exec"))
                            .json(&json!({"argv": ["true"]}))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(response.status().as_u16(), 200);
                        latencies.lock().unwrap().push(one.elapsed());
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let wall = started.elapsed();
        let total = ids.len() * per_client;
        println!(
            "exec round trips, {} clients       {total} in {:.2} s = {:.0} /s",
            ids.len(),
            wall.as_secs_f64(),
            total as f64 / wall.as_secs_f64()
        );
        stats("exec latency at that load", latencies.lock().unwrap().clone());
        served.stop();
        served.wait().await.unwrap();
        }

        // 3. RSS with `leases` live leases.
        if part("rss") {
        let dir = tempfile::tempdir().unwrap();
        let (served, base) = daemon(dir.path(), leases + 16).await;
        let before = rss_mib();
        let started = Instant::now();
        let mut live = 0;
        while live < leases {
            let count = 50.min(leases - live);
            let response = http
                .post(format!("{base}/v1/leases:batch"))
                .json(&json!({"leases": vec![json!({"image": "calc"}); count]}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 201);
            live += count;
        }
        println!(
            "{leases} live leases                   acquired in {:.1} s; RSS {:.1} MiB before, {:.1} MiB with them",
            started.elapsed().as_secs_f64(),
            before,
            rss_mib()
        );
        served.stop();
        served.wait().await.unwrap();
        }
    });
}
