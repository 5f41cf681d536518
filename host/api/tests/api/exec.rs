//! Commands: streamed as they print, and never run twice for one
//! `Idempotency-Key`.

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::{Served, image};

/// Reads ndjson or SSE lines from `response` until one holds `needle`.
async fn read_until(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    seen: &mut String,
    needle: &str,
) {
    while !seen.contains(needle) {
        let chunk = tokio::time::timeout(crate::PATIENCE, body.next())
            .await
            .unwrap_or_else(|_| panic!("no `{needle}` in the stream yet: {seen}"))
            .expect("the stream ended early")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn output_streams_as_it_is_produced() {
    let served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await;
    // The command waits for a file the test creates only after it has read
    // the first line from the stream: a buffered answer would never come.
    let gated = "echo ready; while [ ! -e /tmp/go ]; do sleep 0.01; done; echo done; echo bye >&2";
    for accept in ["application/x-ndjson", "text/event-stream"] {
        served
            .exec(&lease.id, json!({"command": "rm -f /tmp/go"}))
            .await;
        let response = served
            .http
            .post(served.url(&format!("/v1/leases/{}/exec", lease.id)))
            .header("accept", accept)
            .json(&json!({ "command": gated, "timeout_s": 30 }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(accept)
        );
        let mut body = response.bytes_stream();
        let mut seen = String::new();
        read_until(&mut body, &mut seen, "ready").await;
        assert!(!seen.contains("done"), "{seen}");
        served
            .exec(&lease.id, json!({"command": "touch /tmp/go"}))
            .await;
        read_until(&mut body, &mut seen, "\"exit_code\"").await;
        while let Some(chunk) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        let events: Vec<Value> = match accept {
            "application/x-ndjson" => seen
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            _ => seen
                .split("\n\n")
                .filter(|e| !e.is_empty())
                .map(|e| {
                    let (name, data) = e.split_once('\n').unwrap();
                    let mut data: Value =
                        serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                    data["event"] = json!(name.strip_prefix("event: ").unwrap());
                    data
                })
                .collect(),
        };
        let text = |stream: &str| -> String {
            events
                .iter()
                .filter(|e| e["event"] == "output" && e["stream"] == stream)
                .map(|e| e["data"].as_str().unwrap())
                .collect()
        };
        assert_eq!(text("stdout"), "ready\ndone\n", "{seen}");
        assert_eq!(text("stderr"), "bye\n", "{seen}");
        let exit = events.last().unwrap();
        assert_eq!(
            (exit["event"].as_str(), exit["exit_code"].as_i64()),
            (Some("exit"), Some(0))
        );
    }
    served.stop().await;
}

async fn keyed(served: &Served, lease: &str, key: &str, body: &Value) -> (u16, Value) {
    let response = served
        .http
        .post(served.url(&format!("/v1/leases/{lease}/exec")))
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json::<Value>().await.unwrap())
}

async fn replays(served: &Served) -> String {
    let text = served.metrics().await;
    text.lines()
        .find(|l| l.starts_with("sandfleet_idempotent_replays_total"))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_exec_with_the_same_key_runs_once() {
    let served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await.id;
    // The first attempt appends a line, then waits on a gate; a retry
    // arrives while it runs (and attaches to it), another after it ended
    // (and is answered from it).
    let append = json!({"command": "echo run >> /tmp/count; while [ ! -e /tmp/gate ]; do sleep 0.01; done; wc -l < /tmp/count"});
    let (first, (attached, ())) = tokio::join!(keyed(&served, &lease, "k1", &append), async {
        crate::eventually("the first attempt to start", || async {
            served
                .exec(&lease, json!({"command": "cat /tmp/count 2>/dev/null"}))
                .await["stdout"]
                == "run\n"
        })
        .await;
        tokio::join!(keyed(&served, &lease, "k1", &append), async {
            crate::eventually("the retry to attach", || async {
                replays(&served).await == "sandfleet_idempotent_replays_total 1"
            })
            .await;
            served
                .exec(&lease, json!({"command": "touch /tmp/gate"}))
                .await;
        })
    });
    let after = keyed(&served, &lease, "k1", &append).await;
    for (status, result) in [&first, &attached, &after] {
        assert_eq!(*status, 200, "{result}");
        assert_eq!(result["stdout"], "1\n", "{result}");
    }
    let count = served
        .exec(&lease, json!({"command": "wc -l < /tmp/count"}))
        .await;
    assert_eq!(count["stdout"], "1\n", "ran more than once");
    // Another key runs again; the same key for another command is refused.
    assert_eq!(
        keyed(&served, &lease, "k2", &append).await.1["stdout"],
        "2\n"
    );
    let (status, refused) = keyed(&served, &lease, "k1", &json!({"command": "true"})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["kind"], "conflict");
    assert_eq!(
        replays(&served).await,
        "sandfleet_idempotent_replays_total 2"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_exec_retried_with_its_key_answers_the_same_status_and_bytes() {
    let served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await.id;
    // The backend refuses the variable's name only as it runs the command,
    // so the execution itself fails and its key keeps the failure.
    let body = json!({"argv": ["true"], "env": {"A=B": "1"}});
    let send = |accept: &'static str| {
        served
            .http
            .post(served.url(&format!("/v1/leases/{lease}/exec")))
            .header("idempotency-key", "refused")
            .header("accept", accept)
            .json(&body)
            .send()
    };
    let first = send("application/json").await.unwrap();
    let status = first.status().as_u16();
    let first = first.bytes().await.unwrap();
    let error: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["kind"], "invalid_request", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`A=B` is not a valid environment variable name"),
        "{message}"
    );

    let retried = send("application/json").await.unwrap();
    assert_eq!(retried.status().as_u16(), status);
    assert_eq!(retried.bytes().await.unwrap(), first);
    // Streamed, the retry ends in an `error` event carrying the same body.
    let streamed = send("application/x-ndjson").await.unwrap();
    assert_eq!(streamed.status().as_u16(), 200);
    let mut event: Value = serde_json::from_slice(&streamed.bytes().await.unwrap()).unwrap();
    assert_eq!(event["event"], "error", "{event}");
    event.as_object_mut().unwrap().remove("event");
    assert_eq!(event, error);
    assert_eq!(
        replays(&served).await,
        "sandfleet_idempotent_replays_total 2"
    );
    served.stop().await;
}

/// The value of the `/metrics` line that starts with `series`, if any.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_backend_call_is_counted_by_cluster_operation_and_outcome() {
    let served = Served::start("", "").await;
    let calls = |text: &str, operation: &str| {
        let series = format!(
            "sandfleet_backend_calls_total{{cluster=\"local\",operation=\"{operation}\",outcome=\"ok\"}}"
        );
        sample(text, &series).unwrap_or(0.0)
    };
    let timed = |text: &str| {
        sample(
            text,
            "sandfleet_backend_call_seconds_count{cluster=\"local\",operation=\"exec\"}",
        )
        .unwrap_or(0.0)
    };
    let lease = served.acquire(image("calc")).await.id;
    let before = served.metrics().await;
    assert!(calls(&before, "claim") >= 1.0, "{before}");
    for _ in 0..3 {
        served.exec(&lease, json!({"command": "true"})).await;
    }
    let after = served.metrics().await;
    assert_eq!(
        calls(&after, "exec") - calls(&before, "exec"),
        3.0,
        "{after}"
    );
    assert_eq!(timed(&after) - timed(&before), 3.0, "{after}");
    served.stop().await;
}
