//! Warm pools sized by the sizing plugin, batch runs, the OpenAPI document.

use serde_json::json;

use crate::{Served, eventually, image};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pools_fill_and_serve_claims() {
    let served = Served::start("", "").await;
    let (status, pools) = served
        .post("/v1/pools", json!({"images": ["calc", "calc", "textkit"]}))
        .await;
    assert_eq!(status, 202, "{pools}");
    let planned = pools["planned"].as_object().unwrap().clone();
    assert!(planned["calc"].as_u64().unwrap() >= planned["textkit"].as_u64().unwrap());
    eventually("the pools to be ready", || async {
        let (_, pools) = served.get("/v1/pools").await;
        let pools = pools["pools"].as_array().unwrap().clone();
        pools.len() == 2
            && pools
                .iter()
                .all(|p| p["desired"].as_u64() > Some(0) && p["ready"] == p["desired"])
    })
    .await;
    let lease = served.acquire(image("calc")).await;
    assert_eq!(
        served.exec(&lease.id, json!({"argv": ["true"]})).await["exit_code"],
        0
    );
    let metrics = served.metrics().await;
    assert!(
        metrics.contains("sandfleet_pool_ready{image=\"calc\",cluster=\"local\"}"),
        "{metrics}"
    );
    let (status, body) = served.post("/v1/pools", json!({})).await;
    assert_eq!(status, 422, "{body}");

    // A pool can go while the daemon runs; the lease taken from it stays.
    let sandboxes_before = served.sandboxes();
    assert_eq!(served.delete("/v1/pools?image=textkit").await, 204);
    eventually("the textkit pool's sandboxes to go", || async {
        served.sandboxes() < sandboxes_before
    })
    .await;
    let (_, pools) = served.get("/v1/pools").await;
    let images: Vec<&str> = pools["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["image"].as_str().unwrap())
        .collect();
    assert_eq!(images, ["calc"], "{pools}");
    assert_eq!(served.delete("/v1/pools?image=textkit").await, 404);
    assert_eq!(served.delete("/v1/pools").await, 422);
    assert_eq!(
        served.exec(&lease.id, json!({"argv": ["true"]})).await["exit_code"],
        0
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_daemon_on_the_same_state_directory_is_refused() {
    let mut served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await;
    let second = sandfleet_api::Daemon::start(sandfleet_api::Options {
        config: served.dir.path().join("fleet.toml"),
        listen: Some("127.0.0.1:0".parse().unwrap()),
    })
    .await;
    let error = format!("{:#}", second.err().expect("the second daemon started"));
    assert!(
        error.contains("another `sandfleet serve`")
            && error.contains(&format!("(pid {})", std::process::id())),
        "{error}"
    );
    // The first daemon's lease survived the attempt.
    assert_eq!(
        served.exec(&lease.id, json!({"argv": ["true"]})).await["exit_code"],
        0
    );
    // Stopped, it lets the next daemon in.
    let first = served.daemon.take().unwrap();
    first.stop();
    first.wait().await.unwrap();
    let again = sandfleet_api::Daemon::start(sandfleet_api::Options {
        config: served.dir.path().join("fleet.toml"),
        listen: Some("127.0.0.1:0".parse().unwrap()),
    })
    .await
    .unwrap();
    again.stop();
    again.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_run_inside_the_daemon() {
    let served = Served::start("", "").await;
    let dataset = served.dir.path().join("two.jsonl");
    std::fs::write(
        &dataset,
        "{\"id\": \"t-ok\", \"image\": \"calc\", \"test\": \"true\"}\n{\"id\": \"t-bad\", \"image\": \"calc\", \"test\": \"false\"}\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(served.dir.path().join("fleet.toml"))
        .unwrap()
        .replace(
            &format!(
                "dataset = \"{}\"",
                sandfleet_test_support::quickstart::repo()
                    .join("examples/quickstart/tasks.jsonl")
                    .display()
            ),
            &format!("dataset = \"{}\"", dataset.display()),
        );
    let (status, run) = served
        .post(
            "/v1/runs",
            json!({"config": text, "base_dir": served.dir.path()}),
        )
        .await;
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    eventually("the run to finish", || async {
        served.get(&format!("/v1/runs/{id}")).await.1["state"] == "finished"
    })
    .await;
    let (_, run) = served.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(
        (run["ok"].as_u64(), run["failed"].as_u64()),
        (Some(1), Some(1)),
        "{run}"
    );
    assert_eq!(run["report"]["tasks"]["ok"], 1);
    let results = served
        .http
        .get(served.url(&format!("/v1/runs/{id}/results")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(results.lines().count(), 2, "{results}");
    let (status, body) = served
        .post("/v1/runs", json!({"path": "/no/such/fleet.toml"}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/no/such/fleet.toml")
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_openapi_document_lists_every_endpoint() {
    let served = Served::start("", "").await;
    let (status, doc) = served.get("/v1/openapi.json").await;
    assert_eq!(status, 200);
    for path in [
        "/v1/leases",
        "/v1/leases:batch",
        "/v1/leases/{id}",
        "/v1/leases/{id}/exec",
        "/v1/leases/{id}/files",
        "/v1/leases/{id}/evaluate",
        "/v1/leases/{id}/recycle",
        "/v1/leases/{id}/renew",
        "/v1/leases/{id}/snapshots",
        "/v1/leases/{id}/restore",
        "/v1/snapshots/{id}",
        "/v1/snapshots/{id}/leases",
        "/v1/pools",
        "/v1/runs",
        "/v1/runs/{id}",
        "/v1/runs/{id}/results",
        "/v1/runs/{id}/report.html",
        "/v1/plugins",
        "/v1/errors",
        "/ui",
        "/metrics",
        "/healthz",
        "/readyz",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["components"]["schemas"]["ExecRequestBody"].is_object());
    let (status, ready) = served.get("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(ready["run_id"], served.run_id());
    served.stop().await;
}
