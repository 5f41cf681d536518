//! Hot reload under load, and a corrupt plugin file.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::Value;

use crate::{Served, eventually, fleet_file, image};

fn builtin(name: &str) -> &'static [u8] {
    sandfleet_guests::BUILTINS
        .iter()
        .find(|b| b.name == name)
        .unwrap()
        .wasm
}

/// Puts `bytes` in place as `dir/name.wasm` the way a deploy does: written
/// to a hidden file, then renamed over the old one.
fn install(dir: &Path, name: &str, bytes: &[u8]) {
    let hidden = dir.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&hidden, bytes).unwrap();
    std::fs::rename(&hidden, dir.join(format!("{name}.wasm"))).unwrap();
}

async fn placement(served: &Served) -> Value {
    let (_, plugins) = served.get("/v1/plugins").await;
    plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "least-loaded")
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_replaced_under_load_fails_no_call_and_a_corrupt_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install(&plugins, "least-loaded", builtin("least-loaded"));
    let config = fleet_file(
        dir.path(),
        "",
        &format!(
            "dir = \"{}\"\nplacement = \"least-loaded\"",
            plugins.display()
        ),
    );
    let served = Served::start_in(dir, config).await;
    let before = placement(&served).await;
    assert!(
        before["source"]
            .as_str()
            .unwrap()
            .ends_with("least-loaded.wasm"),
        "{before}"
    );

    // Eight clients acquire (each a placement decision), run `true` and
    // release, while the file is replaced.
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let served = Arc::new(served);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (served, stop, calls, failures) = (
                served.clone(),
                stop.clone(),
                calls.clone(),
                failures.clone(),
            );
            tokio::spawn(async move {
                // Bounded: at most 200 rounds per client.
                for _ in 0..200 {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let (status, lease) = served.post("/v1/leases", image("calc")).await;
                    calls.fetch_add(1, Ordering::Relaxed);
                    if status != 201 {
                        eprintln!("acquire failed: {status} {lease}");
                        failures.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let id = lease["id"].as_str().unwrap();
                    served.exec(id, serde_json::json!({"argv": ["true"]})).await;
                    served.release(id).await;
                }
            })
        })
        .collect();
    eventually("the clients to get going", || async {
        calls.load(Ordering::Relaxed) >= 8
    })
    .await;
    install(&plugins, "least-loaded", builtin("round-robin"));
    eventually("the new version to serve", || async {
        placement(&served).await["version"] != before["version"]
    })
    .await;
    let swapped_at = calls.load(Ordering::Relaxed);
    eventually("calls on the new version", || async {
        calls.load(Ordering::Relaxed) >= swapped_at + 16
    })
    .await;
    stop.store(true, Ordering::Release);
    for client in clients {
        client.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "calls failed during the reload"
    );
    let serving = placement(&served).await;
    assert_eq!(serving["last_error"], Value::Null);

    // A corrupt file: the old version keeps serving and says why.
    std::fs::write(plugins.join(".broken.tmp"), b"\0asm not really a component").unwrap();
    std::fs::rename(
        plugins.join(".broken.tmp"),
        plugins.join("least-loaded.wasm"),
    )
    .unwrap();
    eventually("the failed load to be reported", || async {
        placement(&served).await["last_error"].is_string()
    })
    .await;
    let after = placement(&served).await;
    assert_eq!(after["version"], serving["version"]);
    assert!(
        after["last_error"]
            .as_str()
            .unwrap()
            .contains("least-loaded.wasm"),
        "{after}"
    );
    let lease = served.acquire(image("calc")).await;
    served.release(&lease.id).await;
    let metrics = served.metrics().await;
    assert!(
        metrics.contains("sandfleet_plugin_loads_total{outcome=\"failed\"} 1"),
        "{metrics}"
    );
    Arc::into_inner(served).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_placement_fault_is_answered_by_the_builtin_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install(
        &plugins,
        "misbehave",
        &std::fs::read(sandfleet_guests::MISBEHAVE).unwrap(),
    );
    let config = fleet_file(
        dir.path(),
        "",
        &format!(
            "dir = \"{}\"\nplacement = \"misbehave\"\nfallback = \"builtin\"",
            plugins.display()
        ),
    );
    // A fourth image: the misbehaving policy traps on image index 3.
    let text = std::fs::read_to_string(&config).unwrap();
    let calc = sandfleet_test_support::quickstart::repo().join("examples/quickstart/images/calc");
    let text = text.replace(
        "[clusters.local.images]\n",
        &format!(
            "[clusters.local.images]\nfourth = {{ path = \"{}\", git = true }}\n",
            calc.display()
        ),
    );
    std::fs::write(&config, text).unwrap();
    let served = Served::start_in(dir, config).await;
    for name in ["calc", "textkit", "shellutils"] {
        let lease = served.acquire(image(name)).await;
        served.release(&lease.id).await;
    }
    let lease = served.acquire(image("fourth")).await;
    assert_eq!(lease.image, "fourth");
    let (_, listed) = served.get("/v1/plugins").await;
    let misbehave = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "misbehave")
        .unwrap()
        .clone();
    assert_eq!(misbehave["fallbacks"], 1, "{misbehave}");
    assert_eq!(misbehave["source"], "built-in", "{misbehave}");
    let error = misbehave["last_error"].as_str().unwrap();
    assert!(
        error.contains("place") && error.contains("the built-in `least-loaded` serves"),
        "{error}"
    );
    let metrics = served.metrics().await;
    assert!(
        metrics.contains("sandfleet_plugin_fallbacks_total{plugin=\"misbehave\"} 1"),
        "{metrics}"
    );
    // The file's version faulted once (after answering for an image before
    // it); the built-in serving under its name has not faulted.
    let counted = |family: &str| -> Vec<(String, u64)> {
        let prefix = format!("sandfleet_{family}_total{{plugin=\"misbehave\",version=\"");
        metrics
            .lines()
            .filter_map(|line| line.strip_prefix(prefix.as_str()))
            .map(|rest| {
                let (version, value) = rest.split_once("\"} ").unwrap();
                (version.to_string(), value.parse().unwrap())
            })
            .collect()
    };
    let serving = misbehave["version"].as_str().unwrap();
    let faults = counted("plugin_faults");
    let faulted: Vec<_> = faults.iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(faulted.len(), 1, "{metrics}");
    assert_eq!(faulted[0].1, 1, "{metrics}");
    assert_ne!(faulted[0].0, serving, "{metrics}");
    let calls = counted("plugin_calls");
    let file_calls = calls.iter().find(|(v, _)| *v == faulted[0].0).unwrap().1;
    assert!(file_calls >= 2, "{metrics}");
    assert!(
        calls.iter().any(|(v, n)| v == serving && *n >= 1),
        "{metrics}"
    );
    served.stop().await;
}
