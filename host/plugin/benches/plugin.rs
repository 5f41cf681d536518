//! Plugin call and hot-reload costs.
//!
//! `plugin_call`: a placement decision over N clusters by `least-loaded`, as a
//! component on a reused instance (`wasm/N`), the same function compiled
//! natively (`native/N`), and on a fresh instance from `InstancePre` with the
//! pooling allocator (`instantiate/64`).
//!
//! `hot_reload`: from writing a component file into a watched directory to
//! the new version serving, uncached (`cold`, ~1 MB component: the built-in
//! placement policy padded with a 1 MiB custom section, salted so every
//! iteration compiles) and from the compiled cache (`cached`).
//!
//! Run: `cargo bench -p sandfleet-plugin --bench plugin`; results land in
//! `target/criterion/<group>/<id>/new/estimates.json`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind};
use sandfleet_plugin::{HostConfig, PluginHost, Registry, Source};

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
        .add_builtins(sandfleet_guests::BUILTINS)
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
        assert_eq!(reused.place(&DEMAND, &clusters).unwrap(), expected);
        group.bench_function(format!("wasm/{n}"), |b| {
            b.iter(|| {
                reused
                    .place(black_box(&DEMAND), black_box(&clusters))
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
                .place(black_box(&DEMAND), black_box(&clusters))
                .unwrap()
        })
    });
    group.finish();
}

/// A valid component of about 1 MiB: `base` with a custom section appended;
/// `salt` makes each one unique, so its hash is new to the cache.
fn padded_component(base: &[u8], salt: u64) -> Vec<u8> {
    const PADDING: usize = 1 << 20;
    let name = b"sandfleet-bench-padding";
    let mut payload = Vec::with_capacity(PADDING + 64);
    payload.push(name.len() as u8);
    payload.extend_from_slice(name);
    payload.extend_from_slice(&salt.to_le_bytes());
    payload.resize(PADDING, 0xa5);
    let mut component = base.to_vec();
    component.push(0); // custom section id
    let mut size = payload.len();
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        if size == 0 {
            component.push(byte);
            break;
        }
        component.push(byte | 0x80);
    }
    component.extend_from_slice(&payload);
    component
}

/// Renames `bytes` into `dir/bench.wasm` and waits until a version other
/// than `previous` serves; returns that version and the elapsed time.
fn swap_in(registry: &Registry, dir: &Path, bytes: &[u8], previous: &str) -> (String, Duration) {
    let staging = dir.join(".bench.wasm.tmp");
    std::fs::write(&staging, bytes).unwrap();
    let started = Instant::now();
    std::fs::rename(&staging, dir.join("bench.wasm")).unwrap();
    let deadline = started + Duration::from_secs(30);
    loop {
        let version = registry
            .status("bench")
            .and_then(|s| s.serving)
            .map(|info| info.plugin.version.to_string())
            .unwrap_or_default();
        if !version.is_empty() && version != previous {
            return (version, started.elapsed());
        }
        assert!(Instant::now() < deadline, "the new version never served");
        std::thread::yield_now();
    }
}

fn hot_reload(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_reload");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(20));
    let base = sandfleet_guests::BUILTINS
        .iter()
        .find(|b| b.name == "least-loaded")
        .unwrap()
        .wasm;
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
    let mut serving = registry
        .status("bench")
        .unwrap()
        .serving
        .unwrap()
        .plugin
        .version
        .to_string();

    let mut salt = 0u64;
    group.bench_function("cold", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                salt += 1;
                let (version, took) = swap_in(
                    &registry,
                    dir.path(),
                    &padded_component(base, salt),
                    &serving,
                );
                serving = version;
                total += took;
            }
            total
        })
    });

    // Two components compiled once; alternating them always changes the version.
    let pair = [
        padded_component(base, u64::MAX),
        padded_component(base, u64::MAX - 1),
    ];
    for bytes in &pair {
        serving = swap_in(&registry, dir.path(), bytes, &serving).0;
    }
    // pair[1] serves now, so the first swap brings pair[0].
    let mut turn = 1usize;
    group.bench_function("cached", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                turn += 1;
                let (version, took) = swap_in(&registry, dir.path(), &pair[turn % 2], &serving);
                serving = version;
                total += took;
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, plugin_call, hot_reload);
criterion_main!(benches);
