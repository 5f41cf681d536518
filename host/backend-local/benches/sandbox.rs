//! Sandbox costs on this machine, through the `Backend` trait.
//!
//! `claim/warm`: taking a ready sandbox from a warm pool (the pool is
//! refilled, untimed, between iterations). `claim/cold`: making a namespaced
//! sandbox on demand. `exec/namespaces` and `exec/plain`: one `true` round
//! trip (nsenter + env, or env alone). Releases are not timed.
//!
//! Run: `cargo bench -p sandfleet-backend-local --bench sandbox`; results
//! land in `target/criterion/<group>/<id>/new/estimates.json`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sandfleet_backend_local::{
    ImageSource, IsolationMode, LimitOverrides, LocalBackend, LocalConfig,
};
use sandfleet_core::{Backend, ExecRequest, RunId, TemplateRef, TemplateSpec};
use tokio::runtime::Runtime;

const PATIENCE: Duration = Duration::from_secs(30);

struct Bench {
    _dir: tempfile::TempDir,
    run_id: RunId,
    backend: LocalBackend,
    template: TemplateRef,
}

impl Bench {
    fn new(runtime: &Runtime, isolation: IsolationMode) -> Self {
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
            ..LocalConfig::default()
        };
        let run_id = RunId::generate("bench");
        let backend = LocalBackend::new("local", config).unwrap();
        let spec = TemplateSpec {
            name: "bench".into(),
            image: "app".into(),
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
    /// ready sandbox before each claim.
    async fn claims(&self, iters: u64, warm: bool) -> Duration {
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

fn claim(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let bench = Bench::new(&runtime, IsolationMode::Namespaces);
    let mut group = c.benchmark_group("claim");
    group.sample_size(10);
    group.bench_function("cold", |b| {
        b.iter_custom(|iters| runtime.block_on(bench.claims(iters, false)));
    });
    runtime
        .block_on(
            bench
                .backend
                .warm(&bench.template, 1, &bench.run_id.labels()),
        )
        .unwrap();
    group.bench_function("warm", |b| {
        b.iter_custom(|iters| runtime.block_on(bench.claims(iters, true)));
    });
    group.finish();
    bench.finish(&runtime);
}

fn exec(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("exec");
    group.sample_size(20);
    for (id, isolation) in [
        ("namespaces", IsolationMode::Namespaces),
        ("plain", IsolationMode::None),
    ] {
        let bench = Bench::new(&runtime, isolation);
        let sandbox = runtime
            .block_on(bench.backend.claim(
                &bench.template,
                &bench.run_id.labels(),
                Instant::now() + PATIENCE,
            ))
            .unwrap();
        let request = ExecRequest {
            argv: vec!["true".into()],
            timeout: PATIENCE,
            ..ExecRequest::default()
        };
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

criterion_group!(benches, claim, exec);
criterion_main!(benches);
