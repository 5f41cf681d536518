//! Plugin call and hot-reload costs.
//!
//! `plugin_call`: a placement decision over N clusters by `least-loaded`, as a
//! component on a reused instance (`wasm/N`), the same function compiled
//! natively (`native/N`), on a fresh instance from `InstancePre` with the
//! pooling allocator (`instantiate/64`), and as the baseline (Winch) build a
//! hot reload serves first (`wasm-baseline/64`).
//!
//! `hot_reload`: from writing a component file into a watched directory to
//! the new version serving, uncached (`cold`, a baseline build) and from the
//! compiled cache (`cached`); `cold-optimized` runs on until the optimized
//! build has replaced the baseline one. The component is the built-in
//! SWE-bench adapter (about 1 MB of code), with a small custom section
//! salted per iteration so that every `cold` iteration really compiles.
//! `cold-padded` is a 1 MB component of a different make: the 50 KB
//! placement policy padded with a 1 MiB custom section — the same bytes to
//! read and hash, a twentieth of the code to compile. Every iteration waits,
//! untimed where not measured, for the optimized build, so no background
//! compile overlaps the next iteration.
//!
//! Run: `cargo bench -p sandfleet-plugin --bench plugin`; results land in
//! `target/criterion/<group>/<id>/new/estimates.json`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind};
use sandfleet_plugin::{HostConfig, PluginHost, Registry, Source, Tier};
use sandfleet_test_support::salted;

const SIZES: [usize; 4] = [1, 16, 64, 256];

fn clusters(n: usize) -> Clusters {
    let states: Vec<ClusterState> = (0..n)
        .map(|i| ClusterState {
            healthy: i % 7 != 3,
            has_image: i % 2 == 0,
            free_slots: (i as u32 * 37) % 101,
            live: i as u32 % 13,
            warm_ready: i as u32 % 3,
            weight: 1,
            cpu_free_milli: 4_000,
            memory_free_mib: 16_384,
        })
        .collect();
    Clusters::from_states(&states)
}

const DEMAND: Demand = Demand {
    kind: DemandKind::Claim,
    image: 3,
    count: 1,
    sequence: 42,
};

/// The native build of the policy has its own (wit-bindgen) types; these are
/// the same values in them.
mod native {
    use policy_least_loaded::{Clusters, Demand, DemandKind};

    pub(super) const DEMAND: Demand = Demand {
        kind: DemandKind::Claim,
        image: super::DEMAND.image,
        count: super::DEMAND.count,
        sequence: super::DEMAND.sequence,
    };

    pub(super) fn clusters(host: &super::Clusters) -> Clusters {
        Clusters {
            free_slots: host.free_slots.clone(),
            live: host.live.clone(),
            warm_ready: host.warm_ready.clone(),
            weight: host.weight.clone(),
            cpu_free_milli: host.cpu_free_milli.clone(),
            memory_free_mib: host.memory_free_mib.clone(),
            unhealthy: host.unhealthy.clone(),
            with_image: host.with_image.clone(),
        }
    }
}

fn registry(config: HostConfig) -> Arc<Registry> {
    let registry = Registry::new(PluginHost::new(config).expect("host"));
    registry
        .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        .expect("built-ins load");
    registry
}

fn plugin_call(c: &mut Criterion) {
    let mut group = c.benchmark_group("plugin_call");
    let reused = registry(HostConfig::default())
        .placement("least-loaded")
        .unwrap();
    for n in SIZES {
        let clusters = clusters(n);
        let native_clusters = native::clusters(&clusters);
        let expected = policy_least_loaded::place(&native::DEMAND, &native_clusters).unwrap();
        assert_eq!(reused.place_blocking(&DEMAND, &clusters).unwrap(), expected);
        group.bench_function(format!("wasm/{n}"), |b| {
            b.iter(|| {
                reused
                    .place_blocking(black_box(&DEMAND), black_box(&clusters))
                    .unwrap()
            })
        });
        group.bench_function(format!("native/{n}"), |b| {
            b.iter(|| {
                policy_least_loaded::place(black_box(&native::DEMAND), black_box(&native_clusters))
                    .unwrap()
            })
        });
    }
    let fresh = registry(HostConfig {
        reuse_instances: false,
        ..HostConfig::default()
    })
    .placement("least-loaded")
    .unwrap();
    let clusters = clusters(64);
    group.bench_function("instantiate/64", |b| {
        b.iter(|| {
            fresh
                .place_blocking(black_box(&DEMAND), black_box(&clusters))
                .unwrap()
        })
    });
    let baseline_registry = registry(HostConfig::default());
    let host = baseline_registry.host();
    let compiled = host
        .compile_quickly(
            "baseline",
            sandfleet_guests::builtin("least-loaded").unwrap(),
            Source::Memory,
        )
        .unwrap();
    assert_eq!(compiled.tier, Tier::Baseline);
    baseline_registry.install(compiled).unwrap();
    let baseline = baseline_registry.placement("baseline").unwrap();
    assert_eq!(
        baseline.place_blocking(&DEMAND, &clusters).unwrap(),
        reused.place_blocking(&DEMAND, &clusters).unwrap()
    );
    group.bench_function("wasm-baseline/64", |b| {
        b.iter(|| {
            baseline
                .place_blocking(black_box(&DEMAND), black_box(&clusters))
                .unwrap()
        })
    });
    group.finish();
}

/// What a swap is timed to.
#[derive(Clone, Copy, PartialEq)]
enum Until {
    Serving,
    Optimized,
}

/// Renames `bytes` into `dir/<name>.wasm` and waits for the registry to
/// load it and for its optimized build; returns the time from the rename to
/// `until`.
fn swap_in(registry: &Registry, dir: &Path, name: &str, bytes: &[u8], until: Until) -> Duration {
    let staging = dir.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&staging, bytes).unwrap();
    let before = registry.generation();
    let started = Instant::now();
    std::fs::rename(&staging, dir.join(format!("{name}.wasm"))).unwrap();
    let deadline = started + Duration::from_secs(30);
    // Polls an atomic counter, so the waiting takes no time from the load.
    while registry.generation() == before {
        assert!(Instant::now() < deadline, "the new version never loaded");
        std::thread::sleep(Duration::from_micros(50));
    }
    let serving = started.elapsed();
    assert_eq!(registry.load_counts().failed, 0, "a load failed");
    while registry.status(name).unwrap().serving.unwrap().tier != Tier::Optimized {
        assert!(
            Instant::now() < deadline,
            "the optimized build never served"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    match until {
        Until::Serving => serving,
        Until::Optimized => started.elapsed(),
    }
}

fn hot_reload(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_reload");
    // Flat sampling and a short target: a `cold` iteration also waits,
    // untimed, about a second for the optimized build.
    group
        .sample_size(20)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(5));
    let base = sandfleet_guests::builtin("swebench").unwrap();
    assert!(
        base.len() > 900_000,
        "the SWE-bench adapter is {} bytes",
        base.len()
    );
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(HostConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..HostConfig::default()
    });
    registry
        .load_bytes("bench", base, Source::Memory)
        .expect("seed version");
    let _watcher = registry.watch(dir.path()).unwrap();

    let mut salt = 0u64;
    for (id, until) in [
        ("cold", Until::Serving),
        ("cold-optimized", Until::Optimized),
    ] {
        group.bench_function(id, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    salt += 1;
                    let bytes = salted(base, salt, 0);
                    total += swap_in(&registry, dir.path(), "bench", &bytes, until);
                }
                total
            })
        });
    }
    let policy = sandfleet_guests::builtin("least-loaded").unwrap();
    group.bench_function("cold-padded", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                salt += 1;
                total += swap_in(
                    &registry,
                    dir.path(),
                    "policy",
                    &salted(policy, salt, 1 << 20),
                    Until::Serving,
                );
            }
            total
        })
    });

    // Two components compiled once; alternating them always changes the version.
    let pair = [salted(base, u64::MAX, 0), salted(base, u64::MAX - 1, 0)];
    for bytes in &pair {
        swap_in(&registry, dir.path(), "bench", bytes, Until::Optimized);
    }
    // pair[1] serves now, so the first swap brings pair[0].
    let mut turn = 1usize;
    group.bench_function("cached", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                turn += 1;
                total += swap_in(
                    &registry,
                    dir.path(),
                    "bench",
                    &pair[turn % 2],
                    Until::Serving,
                );
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, plugin_call, hot_reload);
criterion_main!(benches);
