//! Bad requests get a 4xx naming what is wrong, and the daemon keeps serving.

use serde_json::json;

use crate::{Served, image};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_are_named_and_the_daemon_keeps_serving() {
    let served = Served::start("max_body_kib = 4", "").await;
    let lease = served.acquire(image("calc")).await;
    let raw = |path: &str, body: &'static str| {
        served
            .http
            .post(served.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let check = |status: u16, body: serde_json::Value, want: u16, kind: &str, says: &str| {
        assert_eq!(status, want, "{body}");
        assert_eq!(body["error"]["kind"], kind, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message} does not say {says}");
    };
    let malformed = raw("/v1/leases", "{\"image\": ").await.unwrap();
    check(
        malformed.status().as_u16(),
        malformed.json().await.unwrap(),
        400,
        "invalid_request",
        "not valid JSON",
    );
    let (status, body) = served.post("/v1/leases", json!({"imag": "calc"})).await;
    check(status, body, 422, "invalid_request", "unknown field `imag`");
    let (status, body) = served.post("/v1/leases", json!({})).await;
    check(
        status,
        body,
        422,
        "invalid_request",
        "missing field `image`",
    );
    // Well-formed, but no cluster makes the image: the request is wrong.
    let (status, body) = served.post("/v1/leases", image("no-such-image")).await;
    check(
        status,
        body,
        400,
        "invalid_request",
        "image `no-such-image`",
    );
    let (status, body) = served
        .post("/v1/leases/l-unknown/exec", json!({"argv": ["true"]}))
        .await;
    check(status, body, 404, "not_found", "lease `l-unknown`");
    let exec = format!("/v1/leases/{}/exec", lease.id);
    let (status, body) = served.post(&exec, json!({"timeout_s": 5})).await;
    check(status, body, 422, "invalid_request", "missing field `argv`");
    let (status, body) = served.post(&exec, json!({"argv": []})).await;
    check(status, body, 422, "invalid_request", "`argv`");
    let (status, body) = served.post(&exec, json!({"argv": "ls"})).await;
    check(status, body, 422, "invalid_request", "argv");
    let big = "x".repeat(8 << 10);
    let (status, body) = served.post(&exec, json!({"command": big})).await;
    check(status, body, 413, "too_large", "max_body_kib");
    let (status, body) = served
        .post("/v1/leases", json!({"task": {"image": "calc"}}))
        .await;
    check(status, body, 422, "invalid_request", "task:");
    let files = served
        .http
        .put(served.url(&format!("/v1/leases/{}/files", lease.id)))
        .body("x")
        .send()
        .await
        .unwrap();
    check(
        files.status().as_u16(),
        files.json().await.unwrap(),
        422,
        "invalid_request",
        "`path`",
    );
    let (status, body) = served.get("/v1/nothing-here").await;
    check(status, body, 404, "not_found", "no such endpoint");

    // Still serving.
    assert_eq!(served.get("/healthz").await.0, 200);
    let ran = served
        .exec(&lease.id, json!({"argv": ["echo", "fine"]}))
        .await;
    assert_eq!(ran["stdout"], "fine\n");
    served.stop().await;
}
