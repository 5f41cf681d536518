//! Hot reload from a watched directory, with real files and real notify
//! events. Waits are bounded polls, never timing assertions.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sandfleet_plugin::{
    CacheOutcome, HostConfig, LoadCounts, PluginHost, Registry, Source, Tier, VersionInfo,
};

use sandfleet_test_support::salted;

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
    let b = salted(&guest(sandfleet_guests::PICK_LAST), 1, 0);
    let c = salted(&guest(sandfleet_guests::PICK_LAST), 2, 0);
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

/// The ways a plugin directory changes where platform teams deploy.
#[derive(Debug, Clone, Copy)]
enum Deploy {
    /// A Kubernetes ConfigMap or Secret volume: `name.wasm` links to
    /// `..data/name.wasm`, and the kubelet swaps `..data` (a rename) to a
    /// new timestamped directory, then removes the old one.
    ConfigMap,
    /// A temporary file renamed over the plugin.
    Rename,
    /// An editor or `cp` writing the file in place.
    InPlace,
    /// The file deleted, then added back.
    DeleteThenAdd,
}

/// A plugin directory holding `policy.wasm`, changed the way `deploy` says.
struct Directory {
    dir: tempfile::TempDir,
    deploy: Deploy,
    generation: usize,
}

impl Directory {
    fn new(deploy: Deploy, bytes: &[u8]) -> Self {
        let mut directory = Directory {
            dir: tempfile::tempdir().unwrap(),
            deploy,
            generation: 0,
        };
        match deploy {
            Deploy::ConfigMap => {
                directory.write_generation(bytes);
                std::os::unix::fs::symlink("..data/policy.wasm", directory.path()).unwrap();
            }
            _ => std::fs::write(directory.path(), bytes).unwrap(),
        }
        directory
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("policy.wasm")
    }

    /// A new timestamped directory holding `bytes`, made `..data` by a rename.
    fn write_generation(&mut self, bytes: &[u8]) {
        self.generation += 1;
        let name = format!(
            "..2026_01_01_00_00_{:02}.{}",
            self.generation, self.generation
        );
        let generation = self.dir.path().join(&name);
        std::fs::create_dir(&generation).unwrap();
        std::fs::write(generation.join("policy.wasm"), bytes).unwrap();
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("..data")).unwrap();
        if self.generation > 1 {
            let old = format!(
                "..2026_01_01_00_00_{:02}.{}",
                self.generation - 1,
                self.generation - 1
            );
            std::fs::remove_dir_all(self.dir.path().join(old)).unwrap();
        }
    }

    fn replace(&mut self, bytes: &[u8], registry: &Registry) {
        match self.deploy {
            Deploy::ConfigMap => self.write_generation(bytes),
            Deploy::Rename => write_and_rename(&self.path(), bytes),
            Deploy::InPlace => copy_in_place(&self.path(), bytes),
            Deploy::DeleteThenAdd => {
                std::fs::remove_file(self.path()).unwrap();
                eventually("the removal to be seen", || {
                    registry.status("policy").unwrap().removed
                });
                write_and_rename(&self.path(), bytes);
            }
        }
    }
}

/// Deployed as `deploy` says: the new version serves the handle taken
/// before; a corrupt file then keeps it serving and says why; a good file
/// after it serves.
fn reloads_when_deployed_by(deploy: Deploy) {
    let least_loaded = guest(sandfleet_guests::LEAST_LOADED);
    let pick_last = guest(sandfleet_guests::PICK_LAST);
    let mut directory = Directory::new(deploy, &least_loaded);
    let registry = registry();
    registry.load_dir(directory.dir.path()).unwrap();
    let _watcher = registry.watch(directory.dir.path()).unwrap();
    let policy = registry.placement("policy").unwrap();
    let answer = || {
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap()
    };
    assert_eq!(answer(), 1);

    directory.replace(&pick_last, &registry);
    eventually("the new version to serve", || answer() == 2);
    let serving = policy.version().plugin;
    assert_eq!(
        registry.placement("policy").unwrap().version().plugin,
        serving
    );

    let mut corrupt = pick_last.clone();
    corrupt.truncate(corrupt.len() / 3);
    directory.replace(&corrupt, &registry);
    eventually("the failed load to be recorded", || {
        registry.status("policy").unwrap().last_error.is_some()
    });
    let status = registry.status("policy").unwrap();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("does not compile"),
        "{deploy:?}: {status:?}"
    );
    assert_eq!(status.serving.unwrap().plugin, serving, "{deploy:?}");
    assert_eq!(answer(), 2, "{deploy:?}: the old version serves");

    directory.replace(&salted(&least_loaded, 7, 0), &registry);
    eventually("the fixed version to serve", || answer() == 1);
    let status = registry.status("policy").unwrap();
    assert!(
        status.last_error.is_none() && !status.removed,
        "{deploy:?}: {status:?}"
    );
}

#[test]
fn a_configmap_volume_whose_data_link_is_swapped_reloads() {
    reloads_when_deployed_by(Deploy::ConfigMap);
}

#[test]
fn a_file_renamed_into_place_reloads() {
    reloads_when_deployed_by(Deploy::Rename);
}

#[test]
fn a_file_written_in_place_reloads() {
    reloads_when_deployed_by(Deploy::InPlace);
}

#[test]
fn a_file_deleted_and_added_back_reloads_into_the_same_slot() {
    reloads_when_deployed_by(Deploy::DeleteThenAdd);
}
