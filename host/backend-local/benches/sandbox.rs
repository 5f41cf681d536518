//! Sandbox costs on this machine, through the `Backend` trait.
//!
//! `claim/warm`: taking a ready sandbox from a warm pool (the pool is
//! refilled, untimed, between iterations). `claim/cold`: making a namespaced
//! sandbox of a directory image on demand; `claim/cold-oci`: the same of an
//! OCI image already in the layer store (the host's programs and Python in
//! four layers, pulled once from a registry on loopback before timing).
//! `cold-true/directory` and `cold-true/oci`: a cold claim that then runs
//! `true`, as `podman run --rm IMAGE true` does. `exec/namespaces`,
//! `exec/oci` and `exec/plain`: one `true` round trip. `snapshot/1MB` and
//! `snapshot/100MB`: a snapshot of a sandbox that has written that much;
//! `fork/1` and `fork/64`: that many sandboxes from a snapshot;
//! `restore/in-place`: a sandbox put back to its snapshot. Releases are not
//! timed, but in `release-plain/among-N`: a plain sandbox's release, its
//! command's background process found and killed, while N processes of
//! other runs' plain sandboxes live on the host.
//!
//! Run: `cargo bench -p sandfleet-backend-local --bench sandbox`; results
//! land in `target/criterion/<group>/<id>/new/estimates.json`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sandfleet_backend_local::{
    ImageSource, IsolationMode, LimitOverrides, LocalBackend, LocalConfig,
};
use sandfleet_core::{
    Backend, ExecRequest, RunId, SandboxHandle, Snapshots, TemplateRef, TemplateSpec, WarmPools,
};
use tokio::runtime::Runtime;

#[allow(
    dead_code,
    reason = "the tests' image fixture; the bench serves one image of it"
)]
#[path = "../tests/local/oci_image.rs"]
mod oci_image;

const PATIENCE: Duration = Duration::from_secs(30);

/// What the bench's template runs.
enum Source {
    /// A small directory image.
    Directory,
    /// An OCI image, by reference.
    Oci(String),
}

struct Bench {
    _dir: tempfile::TempDir,
    run_id: RunId,
    backend: LocalBackend,
    template: TemplateRef,
}

impl Bench {
    fn new(runtime: &Runtime, isolation: IsolationMode, source: &Source) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        std::fs::create_dir_all(image.join("src")).unwrap();
        std::fs::write(image.join("src/app.py"), "print('hello')\n").unwrap();
        let config = LocalConfig {
            state_dir: Some(dir.path().join("state")),
            isolation,
            images: BTreeMap::from([(
                "app".to_string(),
                ImageSource {
                    path: image,
                    git: false,
                    limits: LimitOverrides::default(),
                },
            )]),
            // Room for 64 forks beside their source.
            max_sandboxes: Some(80),
            ..LocalConfig::default()
        };
        let run_id = RunId::generate("bench");
        let backend = LocalBackend::new("local", config).unwrap();
        let spec = TemplateSpec {
            name: "bench".into(),
            image: match source {
                Source::Directory => "app".into(),
                Source::Oci(reference) => reference.clone(),
            },
            cpu_milli: 1000,
            memory_mib: 512,
            disk_mib: 1024,
            network: false,
            env: BTreeMap::new(),
            labels: run_id.labels(),
        };
        let template = runtime.block_on(backend.ensure_template(&spec)).unwrap();
        Bench {
            _dir: dir,
            run_id,
            backend,
            template,
        }
    }

    async fn wait_ready(&self, ready: u32) {
        self.backend
            .wait_pool_ready(&self.template, ready, Instant::now() + PATIENCE)
            .await
            .expect("the pool did not fill");
    }

    /// Times `iters` claims, releasing each (untimed); `warm` waits for a
    /// ready sandbox before each claim; `run_true` runs `true` in each
    /// before the clock stops.
    async fn claims(&self, iters: u64, warm: bool, run_true: bool) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            if warm {
                self.wait_ready(1).await;
            }
            let start = Instant::now();
            let sandbox = self
                .backend
                .claim(&self.template, &self.run_id.labels(), start + PATIENCE)
                .await
                .unwrap();
            if run_true {
                let result = self
                    .backend
                    .exec(&sandbox, &true_request(), None)
                    .await
                    .unwrap();
                assert_eq!(result.exit_code, 0);
            }
            total += start.elapsed();
            self.backend.release(&sandbox).await.unwrap();
        }
        total
    }

    /// Removes every sandbox the bench made.
    fn finish(self, runtime: &Runtime) {
        runtime.block_on(self.backend.reap(&self.run_id)).unwrap();
    }
}

fn true_request() -> ExecRequest {
    argv_request(&["true"])
}

fn argv_request(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|arg| arg.to_string()).collect(),
        timeout: PATIENCE,
        ..ExecRequest::default()
    }
}

impl Bench {
    async fn claim_one(&self) -> SandboxHandle {
        self.backend
            .claim(
                &self.template,
                &self.run_id.labels(),
                Instant::now() + PATIENCE,
            )
            .await
            .unwrap()
    }

    async fn sh(&self, sandbox: &SandboxHandle, script: &str) {
        let result = self
            .backend
            .exec(sandbox, &argv_request(&["sh", "-c", script]), None)
            .await
            .unwrap();
        assert_eq!(result.exit_code, 0, "{script}");
    }

    /// Times `iters` snapshots of a sandbox that wrote `mib` MiB, deleting
    /// each (untimed).
    async fn snapshots(&self, iters: u64, mib: u32) -> Duration {
        let sandbox = self.claim_one().await;
        self.sh(&sandbox, &format!("head -c {mib}M /dev/urandom > written"))
            .await;
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let start = Instant::now();
            let snapshot = self
                .backend
                .snapshot(&sandbox, &self.run_id.labels(), start + PATIENCE)
                .await
                .unwrap();
            total += start.elapsed();
            self.backend.delete_snapshot(&snapshot).await.unwrap();
        }
        self.backend.release(&sandbox).await.unwrap();
        total
    }

    /// Times `iters` forks of `count` sandboxes from one snapshot,
    /// releasing them (untimed).
    async fn forks(&self, iters: u64, count: u32) -> Duration {
        let source = self.claim_one().await;
        self.sh(&source, "echo set-up > set-up").await;
        let snapshot = self
            .backend
            .snapshot(&source, &self.run_id.labels(), Instant::now() + PATIENCE)
            .await
            .unwrap();
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let start = Instant::now();
            let forks = self
                .backend
                .fork(
                    &snapshot,
                    count,
                    &self.run_id.labels(),
                    start + 4 * PATIENCE,
                )
                .await
                .unwrap();
            total += start.elapsed();
            for fork in forks {
                self.backend.release(&fork).await.unwrap();
            }
        }
        self.backend.delete_snapshot(&snapshot).await.unwrap();
        self.backend.release(&source).await.unwrap();
        total
    }

    /// Times `iters` releases of a plain sandbox whose command left a
    /// process running (claimed and started untimed).
    async fn plain_releases(&self, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let sandbox = self.claim_one().await;
            self.sh(&sandbox, "sleep 600 >/dev/null 2>&1 &").await;
            let start = Instant::now();
            self.backend.release(&sandbox).await.unwrap();
            total += start.elapsed();
        }
        total
    }

    /// Times `iters` restores of a sandbox that wrote a file after its
    /// snapshot.
    async fn restores(&self, iters: u64) -> Duration {
        let sandbox = self.claim_one().await;
        self.sh(&sandbox, "echo set-up > set-up").await;
        let snapshot = self
            .backend
            .snapshot(&sandbox, &self.run_id.labels(), Instant::now() + PATIENCE)
            .await
            .unwrap();
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            self.sh(&sandbox, "echo task > task").await;
            let start = Instant::now();
            self.backend
                .restore(&sandbox, &snapshot, start + PATIENCE)
                .await
                .unwrap();
            total += start.elapsed();
        }
        self.backend.release(&sandbox).await.unwrap();
        total
    }
}

fn snapshots(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let bench = Bench::new(&runtime, IsolationMode::Namespaces, &Source::Directory);
    let mut group = c.benchmark_group("snapshot");
    group.sample_size(10);
    for mib in [1, 100] {
        group.bench_function(format!("{mib}MB"), |b| {
            b.iter_custom(|iters| runtime.block_on(bench.snapshots(iters, mib)));
        });
    }
    group.finish();
    let mut group = c.benchmark_group("fork");
    group.sample_size(10);
    for count in [1, 64] {
        group.bench_function(count.to_string(), |b| {
            b.iter_custom(|iters| runtime.block_on(bench.forks(iters, count)));
        });
    }
    group.finish();
    let mut group = c.benchmark_group("restore");
    group.sample_size(10);
    group.bench_function("in-place", |b| {
        b.iter_custom(|iters| runtime.block_on(bench.restores(iters)));
    });
    group.finish();
    bench.finish(&runtime);
}

/// A registry on loopback serving the OCI image, for as long as the bench
/// runs.
fn oci_image(runtime: &Runtime) -> (oci_image::Served, Source) {
    let served = runtime.block_on(oci_image::serve(
        "bench/app",
        &[],
        oci_image::escape_config(),
    ));
    let source = Source::Oci(served.reference.clone());
    (served, source)
}

fn claim(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_registry, oci) = oci_image(&runtime);
    let bench = Bench::new(&runtime, IsolationMode::Namespaces, &Source::Directory);
    let oci_bench = Bench::new(&runtime, IsolationMode::Namespaces, &oci);
    let mut group = c.benchmark_group("claim");
    group.sample_size(10);
    group.bench_function("cold", |b| {
        b.iter_custom(|iters| runtime.block_on(bench.claims(iters, false, false)));
    });
    group.bench_function("cold-oci", |b| {
        b.iter_custom(|iters| runtime.block_on(oci_bench.claims(iters, false, false)));
    });
    runtime
        .block_on(
            bench
                .backend
                .warm(&bench.template, 1, &bench.run_id.labels()),
        )
        .unwrap();
    group.bench_function("warm", |b| {
        b.iter_custom(|iters| runtime.block_on(bench.claims(iters, true, false)));
    });
    group.finish();
    bench.finish(&runtime);
    let bench = Bench::new(&runtime, IsolationMode::Namespaces, &Source::Directory);
    let mut group = c.benchmark_group("cold-true");
    group.sample_size(10);
    group.bench_function("directory", |b| {
        b.iter_custom(|iters| runtime.block_on(bench.claims(iters, false, true)));
    });
    group.bench_function("oci", |b| {
        b.iter_custom(|iters| runtime.block_on(oci_bench.claims(iters, false, true)));
    });
    group.finish();
    bench.finish(&runtime);
    oci_bench.finish(&runtime);
}

fn exec(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_registry, oci) = oci_image(&runtime);
    let mut group = c.benchmark_group("exec");
    group.sample_size(20);
    for (id, isolation, source) in [
        ("namespaces", IsolationMode::Namespaces, Source::Directory),
        ("oci", IsolationMode::Namespaces, oci),
        ("plain", IsolationMode::None, Source::Directory),
    ] {
        let bench = Bench::new(&runtime, isolation, &source);
        let sandbox = runtime
            .block_on(bench.backend.claim(
                &bench.template,
                &bench.run_id.labels(),
                Instant::now() + PATIENCE,
            ))
            .unwrap();
        let request = true_request();
        group.bench_function(id, |b| {
            b.iter(|| {
                let result = runtime
                    .block_on(bench.backend.exec(&sandbox, &request, None))
                    .unwrap();
                assert_eq!(result.exit_code, 0);
            });
        });
        bench.finish(&runtime);
    }
    group.finish();
}

/// `count` processes marked as another run's plain sandboxes' commands,
/// killed when dropped.
struct ForeignSandboxProcesses(Vec<std::process::Child>);

impl ForeignSandboxProcesses {
    fn start(count: usize) -> Self {
        let run = RunId::generate("foreign");
        let children = (0..count)
            .map(|i| {
                std::process::Command::new("sleep")
                    .arg("600")
                    .env("SANDFLEET_SANDBOX", format!("sandfleet-sandbox:{run}:{i}"))
                    .spawn()
                    .unwrap()
            })
            .collect();
        ForeignSandboxProcesses(children)
    }
}

impl Drop for ForeignSandboxProcesses {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn plain_release(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let bench = Bench::new(&runtime, IsolationMode::None, &Source::Directory);
    let mut group = c.benchmark_group("release-plain");
    group.sample_size(20);
    for count in [0, 1000] {
        let _foreign = ForeignSandboxProcesses::start(count);
        group.bench_function(format!("among-{count}"), |b| {
            b.iter_custom(|iters| runtime.block_on(bench.plain_releases(iters)));
        });
    }
    group.finish();
    bench.finish(&runtime);
}

criterion_group!(benches, claim, exec, snapshots, plain_release);
criterion_main!(benches);
