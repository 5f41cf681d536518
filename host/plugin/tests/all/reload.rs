//! Hot reload from a watched directory, with real files and real notify
//! events. Waits are bounded polls, never timing assertions.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sandfleet_plugin::{
    CacheOutcome, HostConfig, LoadCounts, PluginHost, Registry, Source, Tier, VersionInfo,
};

use crate::{demand, patient_registry, registry, registry_with, three_clusters};

const PATIENCE: Duration = Duration::from_secs(20);

/// Polls `condition` until it holds; panics after [`PATIENCE`].
fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn guest(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// Writes the way `cp` does: in place, in chunks.
fn copy_in_place(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    for chunk in bytes.chunks(4096) {
        file.write_all(chunk).unwrap();
    }
}

/// Writes the way editors do: a temporary file renamed over the target.
fn write_and_rename(path: &Path, bytes: &[u8]) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn serving_source(registry: &Registry, name: &str) -> Option<Source> {
    registry
        .status(name)
        .and_then(|s| s.serving)
        .map(|info| info.source)
}

#[test]
fn replacing_a_plugin_under_load_fails_no_call_and_later_calls_get_the_new_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.wasm");
    std::fs::write(&path, guest(sandfleet_guests::LEAST_LOADED)).unwrap();
    let registry = patient_registry();
    registry.load_dir(dir.path()).unwrap();
    let _watcher = registry.watch(dir.path()).unwrap();
    let first_version = registry
        .status("policy")
        .unwrap()
        .serving
        .unwrap()
        .plugin
        .version;

    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let policy = registry.placement("policy").unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let clusters = three_clusters();
                // (started at, answer) for every call.
                let mut calls = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let answer = policy
                        .place_blocking(&demand(0), &clusters)
                        .expect("no call fails during a reload");
                    calls.push((started, answer));
                }
                calls
            })
        })
        .collect();

    std::thread::sleep(Duration::from_millis(50));
    copy_in_place(&path, &guest(sandfleet_guests::PICK_LAST));
    eventually("the new version to serve", || {
        registry
            .status("policy")
            .unwrap()
            .serving
            .unwrap()
            .plugin
            .version
            != first_version
    });
    let swapped = Instant::now();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);

    let mut before = 0;
    let mut after = 0;
    for caller in callers {
        for (started, answer) in caller.join().expect("caller thread") {
            if started >= swapped {
                assert_eq!(
                    answer, 2,
                    "a call that started after the swap got the old answer"
                );
                after += 1;
            } else {
                assert!(answer == 1 || answer == 2, "unexpected answer {answer}");
                before += 1;
            }
        }
    }
    assert!(
        before > 0 && after > 0,
        "calls before: {before}, after: {after}"
    );
    assert_eq!(registry.load_counts().failed, 0);
}

#[test]
fn a_corrupt_file_leaves_the_old_version_serving_and_the_status_shows_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.wasm");
    std::fs::write(&path, guest(sandfleet_guests::LEAST_LOADED)).unwrap();
    let registry = registry();
    registry.load_dir(dir.path()).unwrap();
    let _watcher = registry.watch(dir.path()).unwrap();
    let policy = registry.placement("policy").unwrap();
    let version = policy.version().plugin.version;

    let mut corrupt = guest(sandfleet_guests::PICK_LAST);
    corrupt.truncate(corrupt.len() / 3);
    write_and_rename(&path, &corrupt);
    eventually("the failed load to be recorded", || {
        registry.status("policy").unwrap().last_error.is_some()
    });

    let status = registry.status("policy").unwrap();
    let error = status.last_error.unwrap();
    assert!(error.starts_with(&path.display().to_string()), "{error}");
    assert!(error.contains("does not compile"), "{error}");
    assert_eq!(status.serving.unwrap().plugin.version, version);
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        1
    );
    assert_eq!(registry.load_counts().failed, 1);

    // Fixing the file clears the error and swaps the new version in.
    write_and_rename(&path, &guest(sandfleet_guests::PICK_LAST));
    eventually("the fixed version to serve", || {
        registry.status("policy").unwrap().last_error.is_none()
    });
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        2
    );
}

#[test]
fn dropping_a_file_over_a_builtin_overrides_it_and_removing_it_restores_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    registry
        .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        .unwrap();
    let _watcher = registry.watch(dir.path()).unwrap();
    let policy = registry.placement("least-loaded").unwrap();
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        1
    );

    let path = dir.path().join("least-loaded.wasm");
    copy_in_place(&path, &guest(sandfleet_guests::PICK_LAST));
    eventually("the file to override the built-in", || {
        serving_source(&registry, "least-loaded") == Some(Source::File(path.clone()))
    });
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        2
    );

    std::fs::remove_file(&path).unwrap();
    eventually("the built-in to serve again", || {
        serving_source(&registry, "least-loaded") == Some(Source::Builtin)
    });
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        1
    );
}

#[test]
fn a_new_file_appears_as_a_new_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let _watcher = registry.watch(dir.path()).unwrap();
    write_and_rename(
        &dir.path().join("fresh.wasm"),
        &guest(sandfleet_guests::PICK_LAST),
    );
    eventually("the new plugin to load", || {
        registry.placement("fresh").is_ok()
    });
    let policy = registry.placement("fresh").unwrap();
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        2
    );
}

/// `bytes` with a custom section appended: another version, the same code.
fn salted(bytes: &[u8], salt: u8) -> Vec<u8> {
    let name = b"salt";
    let mut salted = bytes.to_vec();
    salted.extend_from_slice(&[0, 1 + name.len() as u8 + 1, name.len() as u8]);
    salted.extend_from_slice(name);
    salted.push(salt);
    salted
}

fn serving(registry: &Registry, name: &str) -> VersionInfo {
    registry.status(name).unwrap().serving.unwrap()
}

#[test]
fn a_reload_serves_a_baseline_build_until_the_optimized_build_replaces_it() {
    let cache = tempfile::tempdir().unwrap();
    let config = || HostConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..HostConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.wasm");
    std::fs::write(&path, guest(sandfleet_guests::LEAST_LOADED)).unwrap();
    let registry = registry_with(config());
    registry.load_dir(dir.path()).unwrap();
    assert_eq!(serving(&registry, "policy").tier, Tier::Optimized);
    let _watcher = registry.watch(dir.path()).unwrap();

    // B replaces A, and C replaces B while B may still be a baseline build:
    // B's optimized build must never displace C.
    let b = salted(&guest(sandfleet_guests::PICK_LAST), 1);
    let c = salted(&guest(sandfleet_guests::PICK_LAST), 2);
    let version_of = |bytes: &[u8]| {
        let host = PluginHost::new(HostConfig::default()).unwrap();
        host.compile("policy", bytes, Source::Memory)
            .unwrap()
            .plugin
            .version
    };
    let (b_version, c_version) = (version_of(&b), version_of(&c));
    write_and_rename(&path, &b);
    eventually("B to serve", || {
        serving(&registry, "policy").plugin.version == b_version
    });
    write_and_rename(&path, &c);
    eventually("C's optimized build to serve", || {
        let info = serving(&registry, "policy");
        info.plugin.version == c_version && info.tier == Tier::Optimized
    });
    // The optimizer takes jobs in order: B's is done, and C still serves.
    assert_eq!(serving(&registry, "policy").plugin.version, c_version);
    let policy = registry.placement("policy").unwrap();
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        2
    );
    // Tier upgrades are not loads.
    assert_eq!(
        registry.load_counts(),
        LoadCounts {
            loaded: 3,
            failed: 0
        }
    );

    // The optimized build went to the cache: a quick compile now finds it.
    let host = PluginHost::new(config()).unwrap();
    let compiled = host.compile_quickly("policy", &c, Source::Memory).unwrap();
    assert_eq!(
        (compiled.tier, compiled.cache),
        (Tier::Optimized, CacheOutcome::Hit)
    );
}

#[test]
fn quick_compiles_use_the_baseline_compiler_only_without_an_optimized_build_at_hand() {
    let cache = tempfile::tempdir().unwrap();
    let bytes = guest(sandfleet_guests::LEAST_LOADED);
    let host = PluginHost::new(HostConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..HostConfig::default()
    })
    .unwrap();
    let quick = host.compile_quickly("p", &bytes, Source::Memory).unwrap();
    assert_eq!(quick.tier, Tier::Baseline);
    let optimized = host.compile("p", &bytes, Source::Memory).unwrap();
    assert_eq!(
        (optimized.tier, optimized.cache),
        (Tier::Optimized, CacheOutcome::Miss)
    );
    let quick = host.compile_quickly("p", &bytes, Source::Memory).unwrap();
    assert_eq!(
        (quick.tier, quick.cache),
        (Tier::Optimized, CacheOutcome::Hit)
    );

    let without_baseline = PluginHost::new(HostConfig {
        baseline_first: false,
        ..HostConfig::default()
    })
    .unwrap();
    let quick = without_baseline
        .compile_quickly("p", &bytes, Source::Memory)
        .unwrap();
    assert_eq!(quick.tier, Tier::Optimized);
}
