//! Engine overhead per task on the local backend: claim + exec of a no-op
//! command (release runs off the task's path), through the whole engine (placement, sizing, results),
//! and the host's RSS while it holds 1,000 warm local sandboxes.
//!
//! Run: `cargo bench -p sandfleet-engine --bench overhead` (add
//! `-- --warm 0` to skip the 1,000-sandbox part, which takes about a minute
//! on 2 cores). Prints one line per measurement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_backend_local::LocalBackend;
use sandfleet_core::{Backend, RunId, TemplateSpec, WarmPools};
use sandfleet_engine::{
    CancellationToken, Cluster, FleetSettings, LogProgress, Plugins, RunSpec, Strategy,
};

const TASKS: usize = 200;

fn main() {
    let warm: u32 = std::env::args()
        .skip_while(|arg| arg != "--warm")
        .nth(1)
        .map_or(1000, |n| n.parse().expect("--warm N"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // Every claim finds a warm sandbox: the engine's own cost per task.
    runtime.block_on(overhead_per_task(
        TASKS as u32,
        "pool warmed for every task",
    ));
    // Claims outrun the pool's refills: bound by making sandboxes.
    runtime.block_on(overhead_per_task(2, "warm pool of 2"));
    if warm > 0 {
        runtime.block_on(rss_with_warm_sandboxes(warm));
    }
}

mod support;

fn backend(dir: &std::path::Path, max_sandboxes: u32) -> Arc<LocalBackend> {
    support::local_backend(dir, max_sandboxes, false, |_| {})
}

async fn overhead_per_task(pool: u32, label: &str) {
    let dir = tempfile::tempdir().unwrap();
    let run_id = RunId::generate("bench-overhead");
    let registry = support::builtin_registry();
    let items = support::noop_tasks(&registry, TASKS);
    let spec = RunSpec {
        run_id: run_id.clone(),
        settings: FleetSettings {
            strategy: Strategy::Naive,
            max_concurrent: 1,
            max_warmpool_size: pool,
            warm_per_task: true,
            ..FleetSettings::default()
        },
        clusters: vec![Cluster {
            name: "local".into(),
            kind: "local".into(),
            weight: 1,
            backend: backend(dir.path(), pool + 8),
            pace: None,
        }],
        plugins: Plugins::named(
            registry.clone(),
            "generic",
            "least-loaded",
            "proportional",
            None,
        )
        .unwrap(),
        out_dir: dir.path().join("out"),
        cancel: CancellationToken::new(),
        progress: Arc::new(LogProgress),
    };
    let started = Instant::now();
    let report = sandfleet_engine::run(spec, items).await.unwrap();
    let wall = started.elapsed();
    assert_eq!(report.tasks.ok, TASKS);
    let results = std::fs::read_to_string(dir.path().join("out/results.jsonl")).unwrap();
    let mut per_task: Vec<f64> = Vec::new();
    let mut overhead: Vec<f64> = Vec::new();
    let mut steps: [Vec<f64>; 2] = Default::default();
    for line in results.lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = &record["timings"];
        let seconds = |key: &str| t[key].as_f64().unwrap();
        per_task.push(seconds("claim_s") + seconds("process_s"));
        overhead.push(seconds("total_s"));
        for (samples, key) in steps.iter_mut().zip(["claim_s", "process_s"]) {
            samples.push(seconds(key));
        }
    }
    for (samples, step) in steps.iter_mut().zip(["claim", "exec (process)"]) {
        let (p50, p99) = percentiles(samples);
        println!(
            "engine/no-op task ({label}), {step}: median {:.3} ms, p99 {:.3} ms",
            p50 * 1e3,
            p99 * 1e3
        );
    }
    let (p50, p99) = percentiles(&mut per_task);
    let (t50, t99) = percentiles(&mut overhead);
    println!(
        "engine/no-op task ({label}), claim+exec: median {:.3} ms, p99 {:.3} ms ({TASKS} tasks, one at a time)",
        p50 * 1e3,
        p99 * 1e3
    );
    println!(
        "engine/no-op task ({label}), whole task incl. prepare and grade: median {:.3} ms, p99 {:.3} ms; {:.1} tasks/s overall",
        t50 * 1e3,
        t99 * 1e3,
        TASKS as f64 / wall.as_secs_f64()
    );
}

async fn rss_with_warm_sandboxes(count: u32) {
    let dir = tempfile::tempdir().unwrap();
    let run_id = RunId::generate("bench-rss");
    let before = rss_kib();
    let backend = backend(dir.path(), count + 8);
    let template = backend
        .ensure_template(&TemplateSpec {
            name: "bench".into(),
            image: "bench".into(),
            cpu_milli: 100,
            memory_mib: 64,
            disk_mib: 64,
            network: false,
            env: Default::default(),
            labels: run_id.labels(),
        })
        .await
        .unwrap();
    let started = Instant::now();
    backend
        .warm(&template, count, &run_id.labels())
        .await
        .unwrap();
    backend
        .wait_pool_ready(&template, count, started + Duration::from_secs(900))
        .await
        .unwrap();
    let held = rss_kib();
    println!(
        "backend-local/{count} warm sandboxes: host RSS {:.1} MiB (was {:.1} MiB before the backend); ready after {:.1} s",
        held as f64 / 1024.0,
        before as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    );
    let reaped = backend.reap(&run_id).await.unwrap();
    assert_eq!(reaped.sandboxes, count as usize);
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Median and 99th percentile (nearest rank).
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let rank =
        |p: f64| samples[((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
    (rank(0.5), rank(0.99))
}
