//! The same placement policy in Rust, Python and JavaScript, side by side in
//! one run: `sandfleet plugin new placement-policy … --lang L` built by its
//! README (as `tests/e2e/plugins_multilang.rs` does; the tools come from
//! `target/plugin-tools/`), then, per language:
//!
//! - `place/64`: one decision over 64 clusters on a reused instance
//!   (median of batches);
//! - `compile`: Cranelift, no cache, and `baseline`: Winch, what a hot
//!   reload serves first;
//! - `compile, rebuilt`: the project built again by its README (a Python or
//!   JavaScript build is new bytes every time) and compiled by a new host
//!   whose cache holds the first build's functions, not its component (what
//!   `plugin check` reports while a plugin is being written);
//! - `cached load`: a new host compiling the component from a warm on-disk
//!   cache (a restart);
//! - `reload cold`: a new version renamed into a watched plugin directory
//!   whose cache has never seen it, until it serves (Winch), and until the
//!   Cranelift build replaces it (`… optimized`);
//! - `reload cached`: the same with the component already in the cache;
//! - `rust place/64 during a cold reload`: the Rust policy's calls (p50,
//!   p99, max) on another thread while this language's component reloads
//!   cold, from the rename until its optimized build serves, against the
//!   same calls with nothing compiling — what a big component's compile
//!   costs the plugins that keep serving.
//!
//! Run: `cargo bench -p sandfleet --bench plugin_languages`.

#[path = "../../../tests/e2e/plugin_projects.rs"]
#[allow(dead_code, reason = "the e2e tests use more of it than the bench")]
mod plugin_projects;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plugin_projects::{Builder, checked_component};
use sandfleet_plugin::placement::Clusters;
use sandfleet_plugin::{CacheOutcome, HostConfig, PluginHost, Registry, Source, Tier};
use sandfleet_testkit::fixtures::{claim, cluster, clusters};

const LANGS: [&str; 3] = ["rust", "python", "js"];

/// 64 clusters, every seventh unhealthy, free slots spread over 0..100.
fn table() -> Clusters {
    let states: Vec<_> = (0..64u32)
        .map(|i| {
            let mut state = cluster(i * 37 % 101);
            state.healthy = i % 7 != 3;
            state.has_image = i % 2 == 0;
            state.live = i % 13;
            state
        })
        .collect();
    clusters(&states)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

/// Median time per `place` call over 64 clusters on a reused instance.
fn place_64(bytes: &[u8], expected: Option<u32>) -> (Duration, u32) {
    let registry = Registry::new(PluginHost::new(HostConfig::default()).unwrap());
    registry
        .load_bytes("policy", bytes, Source::Memory)
        .unwrap();
    let policy = registry.placement("policy").unwrap();
    let (demand, clusters) = (claim(3), table());
    let answer = policy.place_blocking(&demand, &clusters).unwrap();
    if let Some(expected) = expected {
        assert_eq!(answer, expected, "the languages disagree");
    }
    for _ in 0..200 {
        policy.place_blocking(&demand, &clusters).unwrap();
    }
    let batch = 500;
    let samples = (0..15)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..batch {
                black_box(
                    policy
                        .place_blocking(black_box(&demand), black_box(&clusters))
                        .unwrap(),
                );
            }
            started.elapsed() / batch
        })
        .collect();
    (median(samples), answer)
}

/// Renames `bytes` into `dir/policy.wasm`; the time until the registry
/// serves it, and until its optimized build does.
fn swap_in(registry: &Registry, dir: &Path, bytes: &[u8]) -> (Duration, Duration) {
    let staging = dir.join(".policy.wasm.tmp");
    std::fs::write(&staging, bytes).unwrap();
    let before = registry.generation();
    let started = Instant::now();
    std::fs::rename(&staging, dir.join("policy.wasm")).unwrap();
    let deadline = started + Duration::from_secs(120);
    while registry.generation() == before {
        assert!(Instant::now() < deadline, "the new version never loaded");
        std::thread::sleep(Duration::from_micros(100));
    }
    let serving = started.elapsed();
    assert_eq!(registry.load_counts().failed, 0, "a load failed");
    while registry.status("policy").unwrap().serving.unwrap().tier != Tier::Optimized {
        assert!(
            Instant::now() < deadline,
            "the optimized build never served"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    (serving, started.elapsed())
}

/// A registry caching in `cache`, serving the small built-in
/// `least-loaded` as `policy`, watching a new directory.
fn watched(
    cache: &Path,
) -> (
    Arc<Registry>,
    tempfile::TempDir,
    sandfleet_plugin::PluginWatcher,
) {
    let registry = Registry::new(
        PluginHost::new(HostConfig {
            cache_dir: Some(cache.to_path_buf()),
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let small = sandfleet_guests::BUILTINS
        .iter()
        .find(|b| b.name == "least-loaded")
        .unwrap();
    registry
        .load_bytes("policy", small.wasm, Source::Memory)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let watcher = registry.watch(dir.path()).unwrap();
    (registry, dir, watcher)
}

/// Latencies of the small built-in policy's calls on another thread for as
/// long as `during` runs (at least 2,000 calls): p50, p99 and max.
fn calls_while(during: impl FnOnce()) -> [Duration; 3] {
    let registry = Registry::new(PluginHost::new(HostConfig::default()).unwrap());
    registry
        .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        .unwrap();
    let policy = registry.placement("least-loaded").unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut latencies = std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            let (demand, clusters) = (claim(3), table());
            let mut latencies = Vec::new();
            while latencies.len() < 2_000 || !done.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                black_box(policy.place_blocking(&demand, &clusters).unwrap());
                latencies.push(started.elapsed());
                // A caller that decides now and then, not a spinning one.
                std::thread::sleep(Duration::from_micros(200));
            }
            latencies
        });
        during();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        caller.join().unwrap()
    });
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    [at(0.5), at(0.99), at(1.0)]
}

fn us(latencies: [Duration; 3]) -> String {
    let [p50, p99, max] = latencies.map(|d| d.as_secs_f64() * 1e6);
    format!("{p50:.1} / {p99:.1} / {max:.0} µs")
}

struct Row {
    lang: &'static str,
    size: usize,
    place: Duration,
    compile: Duration,
    rebuilt: Duration,
    baseline: Duration,
    cached_load: Duration,
    cold: Duration,
    cold_optimized: Duration,
    cached_reload: Duration,
    calls_during_reload: [Duration; 3],
}

/// Median time to compile `rebuilt` afresh on a new host whose cache holds
/// only the functions compiled from `bytes`.
fn compile_rebuilt(bytes: &[u8], rebuilt: &[u8], runs: usize) -> Duration {
    let first = tempfile::tempdir().unwrap();
    let host = |dir: &Path| {
        PluginHost::new(HostConfig {
            cache_dir: Some(dir.to_path_buf()),
            ..HostConfig::default()
        })
        .unwrap()
    };
    host(first.path())
        .compile_fresh("first", bytes, Source::Memory)
        .unwrap();
    let functions = first.path().join("functions.pack");
    median(
        (0..runs)
            .map(|_| {
                let cache = tempfile::tempdir().unwrap();
                std::fs::copy(&functions, cache.path().join("functions.pack")).unwrap();
                let compiled = host(cache.path())
                    .compile_fresh("rebuilt", rebuilt, Source::Memory)
                    .unwrap();
                let reuse = compiled.functions.unwrap();
                assert!(reuse.reused > 0, "nothing reused: {reuse:?}");
                compiled.compile_time
            })
            .collect(),
    )
}

fn measure(lang: &'static str, bytes: &[u8], rebuilt: &[u8], expected: Option<u32>) -> (Row, u32) {
    let (place, answer) = place_64(bytes, expected);
    let uncached = PluginHost::new(HostConfig::default()).unwrap();
    let runs = if lang == "rust" { 5 } else { 3 };
    let compile = median(
        (0..runs)
            .map(|_| {
                let compiled = uncached.compile(lang, bytes, Source::Memory).unwrap();
                assert_eq!(compiled.tier, Tier::Optimized);
                compiled.compile_time
            })
            .collect(),
    );
    let rebuilt = compile_rebuilt(bytes, rebuilt, runs);
    let baseline = median(
        (0..runs)
            .map(|_| {
                let compiled = uncached
                    .compile_quickly(lang, bytes, Source::Memory)
                    .unwrap();
                assert_eq!(compiled.tier, Tier::Baseline);
                compiled.compile_time
            })
            .collect(),
    );
    let cache = tempfile::tempdir().unwrap();
    let config = HostConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..HostConfig::default()
    };
    PluginHost::new(config.clone())
        .unwrap()
        .compile(lang, bytes, Source::Memory)
        .unwrap();
    let cached_load = median(
        (0..5)
            .map(|_| {
                let host = PluginHost::new(config.clone()).unwrap();
                let started = Instant::now();
                let compiled = host.compile(lang, bytes, Source::Memory).unwrap();
                let elapsed = started.elapsed();
                assert_eq!(
                    compiled.cache,
                    CacheOutcome::Hit,
                    "{lang}: not from the cache"
                );
                elapsed
            })
            .collect(),
    );
    let (mut cold, mut cold_optimized) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let empty = tempfile::tempdir().unwrap();
        let (registry, dir, _watcher) = watched(empty.path());
        let (serving, optimized) = swap_in(&registry, dir.path(), bytes);
        cold.push(serving);
        cold_optimized.push(optimized);
    }
    // The cache holds the component now (from `cached load`); swapping back
    // and forth with the small policy always changes the version.
    let (registry, dir, _watcher) = watched(cache.path());
    let small = sandfleet_guests::BUILTINS
        .iter()
        .find(|b| b.name == "least-loaded")
        .unwrap()
        .wasm;
    let cached_reload = median(
        (0..5)
            .map(|_| {
                let (serving, _) = swap_in(&registry, dir.path(), bytes);
                swap_in(&registry, dir.path(), small);
                serving
            })
            .collect(),
    );
    let empty = tempfile::tempdir().unwrap();
    let (registry, dir, _watcher) = watched(empty.path());
    let calls_during_reload = calls_while(|| {
        swap_in(&registry, dir.path(), bytes);
    });
    let row = Row {
        lang,
        size: bytes.len(),
        place,
        compile,
        rebuilt,
        baseline,
        cached_load,
        cold: median(cold),
        cold_optimized: median(cold_optimized),
        cached_reload,
        calls_during_reload,
    };
    (row, answer)
}

fn main() {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let builder = Builder {
        sandfleet: PathBuf::from(env!("CARGO_BIN_EXE_sandfleet")),
        target,
    };
    let home = tempfile::tempdir().unwrap();
    let mut components = Vec::new();
    for lang in LANGS {
        let name = format!("bench-{lang}");
        let project = builder.new_project("placement-policy", &name, lang, home.path());
        let started = Instant::now();
        let Some((tools, outputs)) = builder.build_by_readme(&project) else {
            eprintln!("{lang}: its build tools cannot be installed; no benchmark");
            return;
        };
        eprintln!(
            "{lang}: built and tested by its README in {:.1?}",
            started.elapsed()
        );
        let component = checked_component(&project, &outputs).path;
        let bytes = std::fs::read(&component).unwrap();
        let builds = outputs
            .iter()
            .map(|(step, _)| step)
            .filter(|step| !step.starts_with("sandfleet plugin"));
        for step in builds {
            builder.run_step(step, &project, &tools);
        }
        let rebuilt = std::fs::read(&component).unwrap();
        components.push((lang, bytes, rebuilt));
    }
    let idle = calls_while(|| std::thread::sleep(Duration::from_secs(1)));
    let mut rows = Vec::new();
    let mut expected = None;
    for (lang, bytes, rebuilt) in &components {
        let (row, answer) = measure(lang, bytes, rebuilt, expected);
        expected = Some(answer);
        eprintln!("{lang}: measured");
        rows.push(row);
    }
    println!(
        "| language | component | place/64 (reused instance) | compile (Cranelift) | compile, rebuilt | baseline (Winch) | cached load | reload cold: serving | reload cold: optimized | reload cached |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        println!(
            "| {} | {} | {:.2} µs | {} | {} | {} | {} | {} | {} | {} |",
            row.lang,
            if row.size >= 1_000_000 {
                format!("{:.1} MB", row.size as f64 / 1e6)
            } else {
                format!("{} KB", row.size / 1_000)
            },
            row.place.as_secs_f64() * 1e6,
            ms(row.compile),
            ms(row.rebuilt),
            ms(row.baseline),
            ms(row.cached_load),
            ms(row.cold),
            ms(row.cold_optimized),
            ms(row.cached_reload),
        );
    }
    println!();
    println!("| rust place/64 on another thread (p50 / p99 / max) | |");
    println!("|---|---|");
    println!("| nothing compiling | {} |", us(idle));
    for row in &rows {
        println!(
            "| during a cold reload of the {} component | {} |",
            row.lang,
            us(row.calls_during_reload)
        );
    }
}
