//! Snapshots as SDK 1.1.1 drives them (`SandboxManager.create_snapshot`,
//! `get_snapshot` polled, `list_snapshots`, `Sandbox.create(snapshot_id=…)`,
//! `delete_snapshot`), and the answers of a runtime without them.

use std::time::Duration;

use hyper::{Method, StatusCode};
use sandfleet_emulator_opensandbox::Runtime;
use serde_json::{Value, json};

use crate::http::eventually;
use crate::{Fixture, create_body, start, start_with};

impl Fixture {
    /// Runs `script` in sandbox `id` through execd: its stdout lines.
    async fn run(&self, id: &str, script: &str) -> Vec<String> {
        let execd = self.ready_execd(id).await;
        let mut events = self.command(&execd, &json!({"command": script})).await;
        events
            .until_terminal()
            .await
            .iter()
            .filter(|e| e["type"] == "stdout")
            .map(|e| e["text"].as_str().unwrap().to_string())
            .collect()
    }

    async fn snapshot_of(&self, sandbox: &str, body: Option<&Value>) -> Value {
        let reply = self
            .api(
                Method::POST,
                &format!("/v1/sandboxes/{sandbox}/snapshots"),
                body,
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let snapshot = reply.json();
        assert_eq!(
            reply.headers["location"],
            format!("/v1/snapshots/{}", snapshot["id"].as_str().unwrap())
        );
        snapshot
    }

    /// Polls the snapshot until it leaves `Creating`, as the SDK's users do.
    async fn settled(&self, snapshot: &str) -> Value {
        let path = format!("/v1/snapshots/{snapshot}");
        eventually(Duration::from_secs(60), "the snapshot settles", || async {
            let read = self.api(Method::GET, &path, None).await;
            assert_eq!(read.status, StatusCode::OK);
            let read = read.json();
            (read["status"]["state"] != "Creating").then_some(read)
        })
        .await
    }

    async fn list_snapshots(&self, query: &str) -> Vec<Value> {
        let reply = self
            .api(Method::GET, &format!("/v1/snapshots?{query}"), None)
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        reply.json()["items"].as_array().unwrap().clone()
    }
}

/// The SDK's create of a sandbox of a snapshot: its default entrypoint,
/// resources and timeout, no image.
fn restore_body(snapshot: &str) -> Value {
    json!({
        "snapshotId": snapshot,
        "entrypoint": ["tail", "-f", "/dev/null"],
        "resourceLimits": {"cpu": "1", "memory": "2Gi"},
        "timeout": 600,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_snapshot_sequence_restores_the_files_into_a_new_sandbox() {
    let fx = start_with(Runtime::Namespaces, "").await;
    let source = fx.create(&create_body()).await;
    fx.run(&source, "echo kept > kept.txt").await;

    // create_snapshot: 202, `Creating`, the Location of the snapshot.
    let created = fx
        .snapshot_of(&source, Some(&json!({"name": "before-import"})))
        .await;
    assert_eq!(created["status"]["state"], "Creating");
    assert_eq!(created["status"]["reason"], "snapshot_accepted");
    assert_eq!(created["sandboxId"], source.as_str());
    assert_eq!(created["name"], "before-import");
    assert!(created["createdAt"].as_str().is_some());
    let id = created["id"].as_str().unwrap().to_string();
    // get_snapshot until it is Ready.
    let ready = fx.settled(&id).await;
    assert_eq!(ready["status"]["state"], "Ready", "{ready}");
    assert_eq!(ready["status"]["reason"], "snapshot_ready");
    fx.run(&source, "echo later > later.txt").await;

    // list_snapshots by source, name and state; an unnamed one has no name.
    let unnamed = fx.snapshot_of(&source, None).await;
    assert!(unnamed.get("name").is_none(), "{unnamed}");
    fx.settled(unnamed["id"].as_str().unwrap()).await;
    let by_source = fx.list_snapshots(&format!("sandboxId={source}")).await;
    assert_eq!(by_source.len(), 2);
    let named = fx
        .list_snapshots("name=before-import&state=Ready&state=Failed")
        .await;
    assert_eq!(named.len(), 1);
    assert_eq!(named[0]["id"], id.as_str());
    assert!(fx.list_snapshots("state=Failed").await.is_empty());
    let paged = fx
        .api(Method::GET, "/v1/snapshots?page=2&pageSize=1", None)
        .await
        .json();
    assert_eq!(paged["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        paged["pagination"],
        json!({"page": 2, "pageSize": 1, "totalItems": 2, "totalPages": 2, "hasNextPage": false})
    );

    // Sandbox.create(snapshot_id=…): the snapshot's files, not what came
    // after; the source keeps its own.
    let restored = fx.create(&restore_body(&id)).await;
    let read = fx
        .api(Method::GET, &format!("/v1/sandboxes/{restored}"), None)
        .await
        .json();
    assert_eq!(read["snapshotId"], id.as_str());
    assert!(read.get("image").is_none(), "{read}");
    let endpoint =
        |port: u16| format!("/v1/sandboxes/{restored}/endpoints/{port}?use_server_proxy=false");
    let (execd_path, egress_path) = (endpoint(44772), endpoint(18080));
    let (execd, egress) = tokio::join!(
        fx.api(Method::GET, &execd_path, None),
        fx.api(Method::GET, &egress_path, None),
    );
    assert_eq!(
        (execd.status, egress.status),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(
        fx.run(
            &restored,
            "cat kept.txt; ls later.txt 2>/dev/null; echo end"
        )
        .await,
        ["kept", "end"]
    );
    fx.run(&restored, "echo mine > mine.txt").await;
    assert_eq!(
        fx.run(&source, "cat later.txt; ls mine.txt 2>/dev/null; echo end")
            .await,
        ["later", "end"]
    );

    // delete_snapshot: 204, then 404 everywhere; its sandbox runs on.
    let path = format!("/v1/snapshots/{id}");
    assert_eq!(
        fx.api(Method::DELETE, &path, None).await.status,
        StatusCode::NO_CONTENT
    );
    for method in [Method::DELETE, Method::GET] {
        let again = fx.api(method, &path, None).await;
        assert_eq!(
            (again.status, again.code().as_str()),
            (StatusCode::NOT_FOUND, "SNAPSHOT::NOT_FOUND")
        );
    }
    let gone = fx
        .api(Method::POST, "/v1/sandboxes", Some(&restore_body(&id)))
        .await;
    assert_eq!(
        (gone.status, gone.code().as_str()),
        (StatusCode::NOT_FOUND, "SNAPSHOT::NOT_FOUND")
    );
    assert_eq!(fx.run(&restored, "cat mine.txt").await, ["mine"]);
    assert_eq!(fx.emulator.live_snapshots(), 1);
    fx.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshot_requests_get_the_real_shapes() {
    let fx = start_with(Runtime::Namespaces, "").await;
    let unknown = fx
        .api(Method::POST, "/v1/sandboxes/nope/snapshots", None)
        .await;
    assert_eq!(
        (unknown.status, unknown.code().as_str()),
        (StatusCode::NOT_FOUND, "KUBERNETES::SANDBOX_NOT_FOUND")
    );
    let source = fx.create(&create_body()).await;
    let empty = fx
        .api(
            Method::POST,
            &format!("/sandboxes/{source}/snapshots"),
            Some(&json!({"name": ""})),
        )
        .await;
    assert_eq!(empty.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(empty.json()["detail"][0]["loc"], json!(["body", "name"]));
    let both = fx
        .api(
            Method::POST,
            "/v1/sandboxes",
            Some(&json!({"image": {"uri": "calc"}, "snapshotId": "s", "entrypoint": ["x"], "resourceLimits": {}})),
        )
        .await;
    assert_eq!(both.status, StatusCode::UNPROCESSABLE_ENTITY);
    let page = fx
        .api(Method::GET, "/v1/snapshots?pageSize=201", None)
        .await;
    assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(fx.emulator.live_snapshots(), 0);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn a_runtime_without_snapshots_answers_501_and_lists_none() {
    // Plain sandboxes: the local backend has no snapshots.
    let fx = start("").await;
    let source = fx.create(&create_body()).await;
    let refused = fx
        .api(
            Method::POST,
            &format!("/v1/sandboxes/{source}/snapshots"),
            Some(&json!({})),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (StatusCode::NOT_IMPLEMENTED, "SNAPSHOT::NOT_IMPLEMENTED")
    );
    assert!(fx.list_snapshots("").await.is_empty());
    let restore = fx
        .api(Method::POST, "/v1/sandboxes", Some(&restore_body("s-1")))
        .await;
    assert_eq!(
        (restore.status, restore.code().as_str()),
        (StatusCode::NOT_FOUND, "SNAPSHOT::NOT_FOUND")
    );
    assert_eq!(fx.emulator.live_sandboxes(), 1);
    fx.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_removes_every_snapshot_with_the_sandboxes() {
    let fx = start_with(Runtime::Namespaces, "").await;
    let source = fx.create(&create_body()).await;
    let snapshot = fx.snapshot_of(&source, None).await;
    fx.settled(snapshot["id"].as_str().unwrap()).await;
    let state = fx.state.path().to_path_buf();
    fx.emulator.shutdown().await;
    // The local backend's run (its sandboxes and snapshots) is reaped.
    let runs = state.join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|dir| dir.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_still_creating_is_neither_deleted_nor_restored() {
    // It stays `Creating` far longer than the test takes.
    let fx = start_with(Runtime::Namespaces, "snapshot-late=60s").await;
    let source = fx.create(&create_body()).await;
    let snapshot = fx.snapshot_of(&source, None).await;
    let id = snapshot["id"].as_str().unwrap();
    let path = format!("/v1/snapshots/{id}");
    assert_eq!(
        fx.api(Method::GET, &path, None).await.json()["status"]["state"],
        "Creating"
    );
    let delete = fx.api(Method::DELETE, &path, None).await;
    assert_eq!(
        (delete.status, delete.code().as_str()),
        (StatusCode::CONFLICT, "SNAPSHOT::INVALID_STATE")
    );
    let restore = fx
        .api(Method::POST, "/v1/sandboxes", Some(&restore_body(id)))
        .await;
    assert_eq!(
        (restore.status, restore.code().as_str()),
        (StatusCode::CONFLICT, "SNAPSHOT::NOT_READY")
    );
    assert_eq!(fx.list_snapshots("state=Creating").await.len(), 1);
    // Shutdown does not wait for it.
    tokio::time::timeout(Duration::from_secs(30), fx.emulator.shutdown())
        .await
        .expect("shutdown waited for a snapshot's lateness");
}
