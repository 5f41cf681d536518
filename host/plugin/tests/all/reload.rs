//! Hot reload from a watched directory, with real files and real notify
//! events. Waits are bounded polls, never timing assertions.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sandfleet_plugin::{Registry, Source};

use crate::{demand, registry, three_clusters};

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
    let registry = registry();
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
                        .place(&demand(0), &clusters)
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
    assert_eq!(policy.place(&demand(0), &three_clusters()).unwrap(), 1);
    assert_eq!(registry.load_counts().failed, 1);

    // Fixing the file clears the error and swaps the new version in.
    write_and_rename(&path, &guest(sandfleet_guests::PICK_LAST));
    eventually("the fixed version to serve", || {
        registry.status("policy").unwrap().last_error.is_none()
    });
    assert_eq!(policy.place(&demand(0), &three_clusters()).unwrap(), 2);
}

#[test]
fn dropping_a_file_over_a_builtin_overrides_it_and_removing_it_restores_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    registry.add_builtins(sandfleet_guests::BUILTINS).unwrap();
    let _watcher = registry.watch(dir.path()).unwrap();
    let policy = registry.placement("least-loaded").unwrap();
    assert_eq!(policy.place(&demand(0), &three_clusters()).unwrap(), 1);

    let path = dir.path().join("least-loaded.wasm");
    copy_in_place(&path, &guest(sandfleet_guests::PICK_LAST));
    eventually("the file to override the built-in", || {
        serving_source(&registry, "least-loaded") == Some(Source::File(path.clone()))
    });
    assert_eq!(policy.place(&demand(0), &three_clusters()).unwrap(), 2);

    std::fs::remove_file(&path).unwrap();
    eventually("the built-in to serve again", || {
        serving_source(&registry, "least-loaded") == Some(Source::Builtin)
    });
    assert_eq!(policy.place(&demand(0), &three_clusters()).unwrap(), 1);
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
    assert_eq!(policy.place(&demand(0), &three_clusters()).unwrap(), 2);
}
