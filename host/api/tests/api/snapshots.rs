//! Snapshots of leases' sandboxes on the local backend: forks that see
//! the snapshot's files, a restore that drops what came after, a restore
//! to another image refused, idle expiry and deletion when the daemon
//! stops, and forks refused with nothing half made. On OpenSandbox: a
//! runtime without snapshots refuses them naming the cluster, and one with
//! them snapshots but restores nothing in place, so forks and restores
//! are refused naming the cluster.

use sandfleet_emulator_opensandbox::{Emulator, Runtime};
use serde_json::{Value, json};

use crate::{
    Served, eventually, fleet_file_on, image, opensandbox_cluster, opensandbox_emulator_on,
};

/// What `command` prints in `lease`'s sandbox.
async fn run(served: &Served, lease: &str, command: &str) -> String {
    let ran = served.exec(lease, json!({ "command": command })).await;
    ran["stdout"].as_str().unwrap().to_string()
}

/// Snapshots `lease`'s sandbox with `body`; the snapshot's view.
async fn snapshot(served: &Served, lease: &str, body: Value) -> Value {
    let (status, view) = served
        .post(&format!("/v1/leases/{lease}/snapshots"), body)
        .await;
    assert_eq!(status, 201, "{view}");
    view
}

/// Snapshots of leases the daemon's run holds on the local backend's disk
/// (not the engine's own, which reset recycled sandboxes by restoring).
fn on_disk(served: &Served) -> usize {
    let dir = served
        .state_dir()
        .join("runs")
        .join(served.run_id())
        .join("snapshots");
    let of_a_lease = |record: std::path::PathBuf| {
        std::fs::read(record)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .is_some_and(|record| record["labels"]["sandfleet.io/lease"].is_string())
    };
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| of_a_lease(entry.path().join("snapshot.json")))
                .count()
        })
        .unwrap_or(0)
}

/// The error's message, from its JSON.
fn message(answer: &Value) -> &str {
    answer["error"]["message"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_forks_see_the_snapshots_files_and_not_what_came_after() {
    let served = Served::start("", "").await;
    let source = served
        .acquire(json!({"image": "calc", "run_id": "trainer-3"}))
        .await;
    run(&served, &source.id, "echo before > /workspace/marker").await;
    let taken = snapshot(&served, &source.id, json!({})).await;
    let id = taken["id"].as_str().unwrap();
    assert_eq!(
        (&taken["lease"], &taken["cluster"], &taken["image"]),
        (&json!(source.id), &json!("local"), &json!("calc"))
    );
    assert_eq!(taken["restores_in_place"], true);
    assert_eq!(on_disk(&served), 1);
    run(&served, &source.id, "echo after > /workspace/later").await;

    let (status, forked) = served
        .post(&format!("/v1/snapshots/{id}/leases"), json!({"count": 3}))
        .await;
    assert_eq!(status, 201, "{forked}");
    let forks = forked["leases"].as_array().unwrap();
    assert_eq!(forks.len(), 3);
    for fork in forks {
        let lease = fork["id"].as_str().unwrap();
        assert_eq!(fork["image"], "calc");
        assert_eq!(fork["run_id"], "trainer-3", "a fork keeps the lease's run");
        let seen = run(
            &served,
            lease,
            "cat /workspace/marker; test -e /workspace/later && echo later",
        )
        .await;
        assert_eq!(seen, "before\n", "fork {lease}");
        // Each fork's writes are its own.
        run(&served, lease, &format!("echo {lease} > /workspace/own")).await;
    }
    for fork in forks {
        let lease = fork["id"].as_str().unwrap();
        assert_eq!(
            run(&served, lease, "cat /workspace/own").await,
            format!("{lease}\n")
        );
    }
    assert_eq!(
        run(&served, &source.id, "cat /workspace/later").await,
        "after\n",
        "the snapshotted lease serves on with its own files"
    );

    let metrics = served.metrics().await;
    for line in [
        "sandfleet_snapshots_taken_total 1",
        "sandfleet_snapshots_live 1",
        "sandfleet_leases_forked_total 3",
        "sandfleet_fork_seconds_count 1",
        "sandfleet_restore_seconds_count 0",
        "operation=\"snapshot\",outcome=\"ok\"}",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }

    // Deleted: gone for the daemon and on disk; the forks serve on.
    assert_eq!(served.delete(&format!("/v1/snapshots/{id}")).await, 204);
    assert_eq!(served.get(&format!("/v1/snapshots/{id}")).await.0, 404);
    eventually("the snapshot deleted on disk", || async {
        on_disk(&served) == 0
    })
    .await;
    let lease = forks[0]["id"].as_str().unwrap();
    assert_eq!(
        run(&served, lease, "cat /workspace/marker").await,
        "before\n"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_drops_what_came_after_and_refuses_a_snapshot_of_another_image() {
    let served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await;
    run(&served, &lease.id, "echo before > /workspace/marker").await;
    let taken = snapshot(&served, &lease.id, json!({})).await;
    let id = taken["id"].as_str().unwrap();
    run(
        &served,
        &lease.id,
        "echo changed > /workspace/marker; echo after > /workspace/later",
    )
    .await;

    let path = format!("/v1/leases/{}/restore", lease.id);
    let (status, view) = served.post(&path, json!({ "snapshot": id })).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["id"], json!(lease.id));
    assert_eq!(view["sandbox"], json!(lease.sandbox), "restored in place");
    let seen = run(
        &served,
        &lease.id,
        "cat /workspace/marker; test -e /workspace/later && echo later",
    )
    .await;
    assert_eq!(seen, "before\n");

    // A snapshot of another image: refused naming both, the lease unharmed.
    let other = served.acquire(image("textkit")).await;
    let theirs = snapshot(&served, &other.id, json!({})).await;
    let theirs = theirs["id"].as_str().unwrap();
    let (status, refused) = served.post(&path, json!({ "snapshot": theirs })).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["kind"], "invalid_request");
    for named in [&lease.id, theirs, "calc", "textkit"] {
        assert!(message(&refused).contains(named), "{named}: {refused}");
    }
    assert_eq!(
        run(&served, &lease.id, "cat /workspace/marker").await,
        "before\n"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_snapshot_expires_and_the_rest_are_deleted_when_the_daemon_stops() {
    let served = Served::start("idle_timeout = \"1h\"", "").await;
    let lease = served.acquire(image("calc")).await;
    let brief = snapshot(&served, &lease.id, json!({"ttl_s": 1})).await;
    let brief = brief["id"].as_str().unwrap().to_string();
    let kept = snapshot(&served, &lease.id, json!({})).await;
    let kept = kept["id"].as_str().unwrap().to_string();
    assert_eq!(on_disk(&served), 2);
    eventually("the idle snapshot to expire", || async {
        served.get(&format!("/v1/snapshots/{brief}")).await.0 == 404
    })
    .await;
    eventually("its deletion on disk", || async { on_disk(&served) == 1 }).await;
    assert_eq!(served.get(&format!("/v1/snapshots/{kept}")).await.0, 200);
    assert!(
        served
            .metrics()
            .await
            .contains("sandfleet_snapshots_expired_total 1")
    );

    let (state, run_id) = (served.state_dir(), served.run_id());
    served.stop().await;
    let left = std::fs::read_dir(state.join("runs").join(run_id).join("snapshots"))
        .map(|entries| entries.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "the daemon left snapshots behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forks_past_capacity_and_snapshots_of_released_leases_leave_nothing_behind() {
    let served = Served::start("max_leases = 4", "").await;
    let source = served.acquire(image("calc")).await;
    let held = served.acquire(image("calc")).await;
    let taken = snapshot(&served, &source.id, json!({})).await;
    let id = taken["id"].as_str().unwrap();
    let forks = format!("/v1/snapshots/{id}/leases");
    for (count, status) in [(0, 422), (5, 422), (3, 503)] {
        let (got, refused) = served.post(&forks, json!({ "count": count })).await;
        assert_eq!(got, status, "{count}: {refused}");
        if status == 422 {
            assert!(message(&refused).contains(id), "{refused}");
        }
        let (_, leases) = served.get("/v1/leases").await;
        assert_eq!(leases["leases"].as_array().unwrap().len(), 2, "{count}");
    }
    eventually("no sandbox but the two leases'", || async {
        served.sandboxes() == 2
    })
    .await;

    served.release(&held.id).await;
    let path = format!("/v1/leases/{}/snapshots", held.id);
    let (status, refused) = served.post(&path, json!({})).await;
    assert_eq!(status, 404, "{refused}");
    assert!(message(&refused).contains(&held.id), "{refused}");
    assert_eq!(on_disk(&served), 1);
    served.stop().await;
}

/// A daemon whose one cluster, `os`, is an OpenSandbox emulator of `runtime`.
async fn on_opensandbox(runtime: Runtime) -> (Served, Emulator) {
    let emulator = opensandbox_emulator_on(runtime, "").await;
    let dir = tempfile::tempdir().unwrap();
    let path = fleet_file_on(dir.path(), "", "", &opensandbox_cluster(&emulator, ""));
    (Served::start_in(dir, path).await, emulator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_on_an_opensandbox_runtime_without_snapshots_names_the_cluster() {
    let (served, emulator) = on_opensandbox(Runtime::Plain).await;
    let lease = served.acquire(image("calc")).await;
    let (status, refused) = served
        .post(&format!("/v1/leases/{}/snapshots", lease.id), json!({}))
        .await;
    assert_eq!(status, 501, "{refused}");
    assert_eq!(refused["error"]["kind"], "backend");
    assert!(message(&refused).contains("os:"), "{refused}");
    assert_eq!(emulator.live_snapshots(), 0);
    assert!(
        served
            .metrics()
            .await
            .contains("sandfleet_snapshots_live 0")
    );
    assert_eq!(run(&served, &lease.id, "echo serving").await, "serving\n");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_opensandbox_a_snapshot_forks_leases_and_a_restore_in_place_names_the_cluster() {
    let (served, emulator) = on_opensandbox(Runtime::Namespaces).await;
    let lease = served.acquire(image("calc")).await;
    let taken = snapshot(&served, &lease.id, json!({})).await;
    let id = taken["id"].as_str().unwrap();
    assert_eq!(
        (&taken["cluster"], &taken["restores_in_place"]),
        (&json!("os"), &json!(false))
    );
    assert_eq!(emulator.live_snapshots(), 1);

    // Forks are the server's own creates from the snapshot.
    let (status, forked) = served
        .post(&format!("/v1/snapshots/{id}/leases"), json!({"count": 2}))
        .await;
    assert_eq!(status, 201, "{forked}");
    let forks = forked["leases"].as_array().unwrap();
    assert_eq!(forks.len(), 2);
    for fork in forks {
        assert_eq!(fork["cluster"], "os");
        let fork = fork["id"].as_str().unwrap();
        assert_eq!(run(&served, fork, "echo serving").await, "serving\n");
    }
    let (_, leases) = served.get("/v1/leases").await;
    assert_eq!(leases["leases"].as_array().unwrap().len(), 3);

    let path = format!("/v1/leases/{}/restore", lease.id);
    let (status, refused) = served.post(&path, json!({ "snapshot": id })).await;
    assert_eq!(status, 501, "{refused}");
    assert!(message(&refused).contains("cluster `os`"), "{refused}");
    assert_eq!(run(&served, &lease.id, "echo serving").await, "serving\n");

    assert_eq!(served.delete(&format!("/v1/snapshots/{id}")).await, 204);
    eventually("the snapshot deleted on the server", || async {
        emulator.live_snapshots() == 0
    })
    .await;
    served.stop().await;
}
