//! The engine's errors keep their kinds up to the HTTP answer: a throttled
//! claim is a 429 with `Retry-After`, an image no cluster makes a 400, a
//! lost sandbox a 410 and a lease whose state says `lost`; the `kind`
//! values are an enum in the OpenAPI document.

use std::time::Instant;

use sandfleet_test_support::processes_running;
use serde_json::{Value, json};

use crate::{
    PATIENCE, Served, fleet_file_on, image, online, opensandbox_cluster, opensandbox_emulator,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_throttled_claim_is_a_429_with_the_backends_retry_after() {
    // Every create in the server pool answers 429 `Retry-After: 30`, the
    // driver does not fall back to a direct create, and the engine spends
    // no retry on it.
    let emulator = opensandbox_emulator("pool-max=0").await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = opensandbox_cluster(
        &emulator,
        "pools = { calc = \"calc-pool\" }\npool_fallback = false",
    );
    let path = fleet_file_on(dir.path(), "", "", &cluster);
    online(&path);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("recycle = true", "recycle = true\nretry_budget = 0");
    std::fs::write(&path, text).unwrap();
    let served = Served::start_in(dir, path).await;
    let response = served
        .http
        .post(served.url("/v1/leases"))
        .json(&image("calc"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    assert_eq!(retry_after.as_deref(), Some("30"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["kind"], "throttled", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("claim"),
        "{body}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_sandbox_is_a_410_and_its_lease_says_lost() {
    let served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await;
    let (_, view) = served.get(&format!("/v1/leases/{}", lease.id)).await;
    assert_eq!(view["state"], "ready", "{view}");

    // The sandbox's init killed from outside, as a node failure would.
    served.kill_sandbox(&lease.sandbox);
    let init = format!("sandfleet-sandbox:{}:{}", served.run_id(), lease.sandbox);
    let until = Instant::now() + PATIENCE;
    while !processes_running(&init).is_empty() {
        assert!(Instant::now() < until, "{init} still runs");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let exec = format!("/v1/leases/{}/exec", lease.id);
    let (status, body) = served.post(&exec, json!({"argv": ["true"]})).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["error"]["kind"], "sandbox_lost", "{body}");
    let (status, view) = served.get(&format!("/v1/leases/{}", lease.id)).await;
    assert_eq!(status, 200);
    assert_eq!(view["state"], "lost", "{view}");
    assert!(view["lost"].is_string(), "{view}");
    // Every later call says so too, without trying the sandbox again.
    let (status, body) = served.post(&exec, json!({"argv": ["true"]})).await;
    assert_eq!(
        (status, &body["error"]["kind"]),
        (410, &json!("sandbox_lost"))
    );
    served.release(&lease.id).await;
    served.stop().await;
}

#[test]
fn error_kinds_are_an_enum_in_the_openapi_document() {
    let document = sandfleet_api::openapi();
    let kind = &document["components"]["schemas"]["ErrorKind"];
    let kinds: Vec<&str> = kind["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("no enum: {kind}"))
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    for expected in [
        "invalid_request",
        "not_found",
        "conflict",
        "throttled",
        "unavailable",
        "sandbox_lost",
        "plugin",
        "internal",
    ] {
        assert!(kinds.contains(&expected), "{expected} in {kinds:?}");
    }
    let detail = &document["components"]["schemas"]["ErrorDetail"]["properties"]["kind"];
    assert_eq!(detail["$ref"], "#/components/schemas/ErrorKind", "{detail}");
}
