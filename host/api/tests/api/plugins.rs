//! Hot reload under load, and a corrupt plugin file.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use sandfleet_test_support::install_plugin;
use serde_json::Value;

use crate::{Served, eventually, fleet_file, image};

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
    install_plugin(
        &plugins,
        "least-loaded",
        sandfleet_guests::builtin("least-loaded").unwrap(),
    );
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
    install_plugin(
        &plugins,
        "least-loaded",
        sandfleet_guests::builtin("round-robin").unwrap(),
    );
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
    install_plugin(
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
    // Four images: the misbehaving policy spins on image index 1 (the
    // second one asked for), hogs memory on 2 and traps on 3.
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
    // The file's version still serves its name; from its first fault on
    // (its spin on the second image, or any earlier overrun on a loaded
    // machine) the built-in answers its calls without trying it again.
    assert!(
        misbehave["source"]
            .as_str()
            .unwrap()
            .ends_with("misbehave.wasm"),
        "{misbehave}"
    );
    let fault = misbehave["fault"].as_str().unwrap();
    assert!(
        fault.contains("place: ") && fault.contains("the built-in `least-loaded`"),
        "{fault}"
    );
    assert_eq!(misbehave["last_error"], Value::Null, "no load failed");
    let serving = misbehave["version"].as_str().unwrap().to_string();
    let metrics = served.metrics().await;
    let count = |family| by_version(&metrics, family, "misbehave")[0].1;
    assert_eq!(
        by_version(&metrics, "plugin_faults", "misbehave"),
        [(serving.clone(), 1)],
        "{metrics}"
    );
    let (calls, fallbacks) = (count("plugin_calls"), count("plugin_fallbacks"));
    assert_eq!(misbehave["fallbacks"], fallbacks, "{misbehave}");
    // Four decisions: the file answered before its fault, the built-in
    // from it on.
    assert_eq!(calls - 1 + fallbacks, 4, "{metrics}");
    let again = served.acquire(image("calc")).await;
    served.release(&again.id).await;
    let metrics = served.metrics().await;
    let count = |family| by_version(&metrics, family, "misbehave")[0].1;
    assert_eq!(count("plugin_calls"), calls, "{metrics}");
    assert_eq!(count("plugin_fallbacks"), fallbacks + 1, "{metrics}");
    served.stop().await;
}

/// `sandfleet_<family>_total` of `plugin`, per version, from `/metrics`.
fn by_version(metrics: &str, family: &str, plugin: &str) -> Vec<(String, u64)> {
    let prefix = format!("sandfleet_{family}_total{{plugin=\"{plugin}\",version=\"");
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .map(|rest| {
            let (version, value) = rest.split_once("\"} ").unwrap();
            (version.to_string(), value.parse().unwrap())
        })
        .collect()
}
