//! Watch semantics over real HTTPS with reqwest: replay from a resourceVersion, 410 for
//! compacted history, bookmarks to resume from, selector transitions.

use std::time::Duration;

use crate::common::{Api, Lines, rv};
use sandfleet_emulator_k8s::{Config, Emulator};
use serde_json::{Value, json};

async fn create_cm(client: &Api, name: &str, labels: Value) -> Value {
    client
        .create(
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
        )
        .await
}

/// Open a watch on the default namespace's configmaps.
async fn watch(client: &Api, query: &str) -> Lines {
    client
        .watch(&format!(
            "/api/v1/namespaces/default/configmaps?watch=true&{query}"
        ))
        .await
}

fn summary(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap().to_string(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test]
async fn a_watch_from_a_resource_version_gets_exactly_the_later_events_in_order() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let client = Api::new(&emulator);
    let a = create_cm(&client, "a", json!({})).await;
    let b = create_cm(&client, "b", json!({})).await;
    let mut changed = a.clone();
    changed["data"]["k"] = json!("w");
    let (code, _) = client
        .send(
            reqwest::Method::PUT,
            "/api/v1/namespaces/default/configmaps/a",
            Some(changed),
        )
        .await;
    assert_eq!(code, 200);
    create_cm(&client, "c", json!({})).await;
    let (code, _) = client
        .send(
            reqwest::Method::DELETE,
            "/api/v1/namespaces/default/configmaps/b",
            None,
        )
        .await;
    assert_eq!(code, 200);

    // From b's RV: exactly what happened after it; timeoutSeconds ends the stream.
    let mut lines = watch(
        &client,
        &format!("resourceVersion={}&timeoutSeconds=1", rv(&b)),
    )
    .await;
    let mut seen = Vec::new();
    let mut last = 0;
    while let Some(event) = lines.next().await {
        let this = rv(&event["object"]);
        assert!(this > last, "RVs increase: {event}");
        last = this;
        seen.push(summary(&event));
    }
    let expected = [("MODIFIED", "a"), ("ADDED", "c"), ("DELETED", "b")];
    assert_eq!(seen, expected.map(|(t, n)| (t.to_string(), n.to_string())));

    // From the start (no RV): the current objects as ADDED.
    let mut lines = watch(&client, "timeoutSeconds=1").await;
    let mut initial = Vec::new();
    while let Some(event) = lines.next().await {
        initial.push(summary(&event));
    }
    assert_eq!(
        initial,
        [("ADDED", "a"), ("ADDED", "c")].map(|(t, n)| (t.to_string(), n.to_string()))
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn an_rv_older_than_the_kept_history_gets_410_expired() {
    let emulator = Emulator::start(Config {
        history: 5,
        ..Config::default()
    })
    .await
    .unwrap();
    let client = Api::new(&emulator);
    let first = create_cm(&client, "first", json!({})).await;
    for i in 0..10 {
        create_cm(&client, &format!("m{i}"), json!({})).await;
    }
    let mut lines = watch(&client, &format!("resourceVersion={}", rv(&first))).await;
    let event = lines.next().await.expect("an ERROR event");
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    assert!(
        lines.next().await.is_none(),
        "the stream ends after the error"
    );

    // A continue token from before the kept history is 410 too.
    let (code, page) = client
        .send(
            reqwest::Method::GET,
            "/api/v1/namespaces/default/configmaps?limit=2",
            None,
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["metadata"]["remainingItemCount"], 9);
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    let (code, next) = client
        .send(
            reqwest::Method::GET,
            &format!("/api/v1/namespaces/default/configmaps?limit=20&continue={token}"),
            None,
        )
        .await;
    assert_eq!(code, 200, "{next}");
    assert_eq!(next["items"].as_array().unwrap().len(), 9);
    for i in 0..6 {
        create_cm(&client, &format!("late{i}"), json!({})).await;
    }
    let (code, expired) = client
        .send(
            reqwest::Method::GET,
            &format!("/api/v1/namespaces/default/configmaps?limit=20&continue={token}"),
            None,
        )
        .await;
    assert_eq!(code, 410, "{expired}");
    assert_eq!(expired["reason"], "Expired");
    emulator.shutdown().await;
}

#[tokio::test]
async fn bookmarks_carry_a_resource_version_to_resume_from_without_loss() {
    let emulator = Emulator::start(Config {
        bookmark_interval: Duration::from_millis(100),
        ..Config::default()
    })
    .await
    .unwrap();
    let client = Api::new(&emulator);
    let start = create_cm(&client, "s", json!({})).await;
    let mut lines = watch(
        &client,
        &format!(
            "resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds=30",
            rv(&start)
        ),
    )
    .await;
    let made = create_cm(&client, "x", json!({})).await;
    let mut bookmark = None;
    for _ in 0..100 {
        let event = lines.next().await.expect("stream open");
        if event["type"] == "BOOKMARK" && rv(&event["object"]) >= rv(&made) {
            assert_eq!(event["object"]["kind"], "ConfigMap");
            bookmark = Some(rv(&event["object"]));
            break;
        }
    }
    let bookmark = bookmark.expect("a bookmark at or after the last change");
    drop(lines);
    let after = create_cm(&client, "y", json!({})).await;
    let mut resumed = watch(
        &client,
        &format!("resourceVersion={bookmark}&timeoutSeconds=1"),
    )
    .await;
    let event = resumed.next().await.expect("the event after the bookmark");
    assert_eq!(summary(&event), ("ADDED".into(), "y".into()));
    assert_eq!(rv(&event["object"]), rv(&after));
    assert!(resumed.next().await.is_none(), "nothing else happened");
    emulator.shutdown().await;
}

#[tokio::test]
async fn objects_entering_and_leaving_a_label_selector_are_added_and_deleted() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let client = Api::new(&emulator);
    let obj = create_cm(&client, "sel", json!({"app": "other"})).await;
    let mut lines = watch(
        &client,
        &format!(
            "resourceVersion={}&labelSelector=app%3Dx&timeoutSeconds=2",
            rv(&obj)
        ),
    )
    .await;
    let patch = |labels: Value| {
        client
            .http
            .patch(format!(
                "{}/api/v1/namespaces/default/configmaps/sel",
                client.base
            ))
            .bearer_auth(&client.token)
            .header("content-type", "application/merge-patch+json")
            .body(json!({"metadata": {"labels": labels}}).to_string())
            .send()
    };
    assert_eq!(
        patch(json!({"app": "x"})).await.unwrap().status().as_u16(),
        200
    );
    assert_eq!(
        patch(json!({"app": "x", "more": "1"}))
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        patch(json!({"app": "y"})).await.unwrap().status().as_u16(),
        200
    );
    let mut seen = Vec::new();
    while let Some(event) = lines.next().await {
        seen.push(summary(&event).0);
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);
    emulator.shutdown().await;
}

#[tokio::test]
async fn requests_without_the_token_get_401_and_discovery_never_406() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let client = Api::new(&emulator);
    let resp = client
        .http
        .get(format!("{}/api/v1/namespaces", client.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Unauthorized");
    for accept in [
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        "application/json",
        "text/plain",
        "application/vnd.kubernetes.protobuf",
    ] {
        let resp = client
            .http
            .get(format!("{}/apis", client.base))
            .bearer_auth(&client.token)
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{accept}");
    }
    let (code, malformed) = client
        .send(
            reqwest::Method::POST,
            "/api/v1/namespaces/default/configmaps",
            None,
        )
        .await;
    assert_eq!(code, 400, "{malformed}");
    assert_eq!(malformed["kind"], "Status");
    emulator.shutdown().await;
}
