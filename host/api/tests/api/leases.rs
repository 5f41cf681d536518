//! A lease from acquire to release, the quickstart graded through it,
//! recycling, idle expiry and all-or-nothing batches.

use serde_json::json;

use crate::{Served, eventually, image, quickstart_rows};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acquire_exec_files_recycle_release() {
    let served = Served::start("", "").await;
    let lease = served
        .acquire(json!({"image": "calc", "labels": {"team": "rl"}, "run_id": "trainer-7"}))
        .await;
    assert_eq!(
        (lease.cluster.as_str(), lease.image.as_str()),
        ("local", "calc")
    );
    assert_eq!(lease.labels["team"], "rl");
    assert_eq!(served.sandboxes(), 1);

    let ran = served
        .exec(
            &lease.id,
            json!({"argv": ["sh", "-c", "ls; echo oops >&2; exit 3"]}),
        )
        .await;
    assert_eq!(ran["exit_code"], 3);
    assert!(ran["stdout"].as_str().unwrap().contains("calc"), "{ran}");
    assert_eq!(ran["stderr"], "oops\n");
    let shell = served
        .exec(
            &lease.id,
            json!({"command": "cat", "stdin": "from stdin", "env": {"X": "1"}}),
        )
        .await;
    assert_eq!(shell["stdout"], "from stdin");

    // Files: every byte value survives the round trip.
    let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let put = served
        .http
        .put(served.url(&format!(
            "/v1/leases/{}/files?path=/workspace/blob.bin",
            lease.id
        )))
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 204);
    let got = served
        .http
        .get(served.url(&format!(
            "/v1/leases/{}/files?path=/workspace/blob.bin",
            lease.id
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap().to_vec(), bytes);
    let exact = served
        .post(
            &format!("/v1/leases/{}/exec?encoding=base64", lease.id),
            json!({"argv": ["head", "-c", "3", "/workspace/blob.bin"]}),
        )
        .await
        .1;
    assert_eq!(exact["stdout"], "AAEC");

    // Recycling resets the sandbox through git-restore: the file is gone
    // and the sandbox is the same one.
    let (status, recycled) = served
        .post(&format!("/v1/leases/{}/recycle", lease.id), json!({}))
        .await;
    assert_eq!(status, 200, "{recycled}");
    assert_eq!(recycled["reset"], "clean");
    assert_eq!(recycled["lease"]["sandbox"], lease.sandbox.as_str());
    assert_eq!(recycled["lease"]["reuses"], 1);
    let listed = served
        .exec(
            &lease.id,
            json!({"command": "test -e /workspace/blob.bin; echo $?"}),
        )
        .await;
    assert_eq!(listed["stdout"], "1\n");

    let (_, mine) = served.get("/v1/leases?run_id=trainer-7").await;
    assert_eq!(mine["leases"].as_array().unwrap().len(), 1);
    served.release(&lease.id).await;
    let (status, gone) = served.get(&format!("/v1/leases/{}", lease.id)).await;
    assert_eq!(status, 404, "{gone}");
    assert_eq!(gone["error"]["kind"], "not_found");
    eventually("the sandbox to be released", || async {
        served.sandboxes() == 0
    })
    .await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_quickstart_graded_through_leases_matches_a_run() {
    let served = Served::start("", "").await;
    let evaluations = quickstart_rows().into_iter().map(|(row, solution)| {
        let served = &served;
        async move {
            let lease = served.acquire(json!({ "task": row })).await;
            let (status, evaluated) = served
                .post(
                    &format!("/v1/leases/{}/evaluate", lease.id),
                    json!({ "solution": solution }),
                )
                .await;
            assert_eq!(status, 200, "{evaluated}");
            served.release(&lease.id).await;
            (
                row["id"].as_str().unwrap().to_string(),
                evaluated["status"].as_str().unwrap().to_string(),
                evaluated["grade"]["status"]
                    .as_str()
                    .unwrap_or("-")
                    .to_string(),
            )
        }
    });
    let mut graded = futures_util::future::join_all(evaluations).await;
    graded.sort();
    assert_eq!(
        graded,
        sandfleet_test_support::quickstart::expected_statuses()
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_lease_is_released_and_a_renewed_one_is_not() {
    let served = Served::start("idle_timeout = \"1s\"", "").await;
    let idle = served.acquire(image("calc")).await;
    let kept = served
        .acquire(json!({"image": "calc", "ttl_s": 3600}))
        .await;
    eventually("the idle lease to expire", || async {
        served.get(&format!("/v1/leases/{}", idle.id)).await.0 == 404
    })
    .await;
    eventually("its sandbox to be released", || async {
        served.sandboxes() == 1
    })
    .await;
    let (status, renewed) = served
        .post(
            &format!("/v1/leases/{}/renew", kept.id),
            json!({"ttl_s": 7200}),
        )
        .await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(served.get(&format!("/v1/leases/{}", kept.id)).await.0, 200);
    let metrics = served.metrics().await;
    assert!(
        metrics.contains("sandfleet_leases_expired_total 1"),
        "{metrics}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_is_all_or_nothing() {
    let served = Served::start("", "").await;
    let (status, batch) = served
        .post(
            "/v1/leases:batch",
            json!({"leases": [image("calc"), image("textkit"), image("no-such-image"), image("calc")]}),
        )
        .await;
    assert_eq!(status, 400, "{batch}");
    let message = batch["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("leases[2] of 4: image `no-such-image`"),
        "{message}"
    );
    assert_eq!(served.get("/v1/leases").await.1["leases"], json!([]));
    eventually("the acquired ones to be released", || async {
        served.sandboxes() == 0
    })
    .await;

    let (status, batch) = served
        .post(
            "/v1/leases:batch",
            json!({"leases": [image("calc"), image("shellutils")]}),
        )
        .await;
    assert_eq!(status, 201, "{batch}");
    assert_eq!(batch["leases"].as_array().unwrap().len(), 2);
    assert_eq!(served.sandboxes(), 2);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_behind_image_rewrite_is_served_from_its_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::fleet_file(dir.path(), "", "");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "name = \"apitest\"",
        "name = \"apitest\"\nimage_rewrite = { \"registry.example/swe/\" = \"\" }",
    );
    std::fs::write(&config, text).unwrap();
    let served = Served::start_in(dir, config).await;
    // The local cluster makes `calc`; the client asks for the original name.
    let lease = served.acquire(image("registry.example/swe/calc")).await;
    assert_eq!(lease.image, "registry.example/swe/calc");
    let ran = served.exec(&lease.id, json!({"argv": ["ls"]})).await;
    assert!(ran["stdout"].as_str().unwrap().contains("calc"), "{ran}");
    // Outside the rewritten prefix a reference is pulled as written: from a
    // loopback port nothing listens on, so the lease is refused as
    // unavailable, naming the reference it tried — not served as `calc`.
    let (status, body) = served
        .post("/v1/leases", image("127.0.0.1:1/other/calc"))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:1/other/calc"),
        "{body}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leased_sandbox_of_an_image_with_a_prepare_hook_is_prepared_first() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::fleet_file(dir.path(), "", "");
    // Per sandbox: on a cluster with snapshots the hook would otherwise run
    // once and every sandbox be a fork of it (the engine's tests cover that).
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[api]",
        "[prepare.\"calc\"]\ncommands = [\"hostname >> /tmp/prepared\"]\neach_sandbox = true\n\n[api]",
    );
    std::fs::write(&config, text).unwrap();
    let served = Served::start_in(dir, config).await;
    let lease = served.acquire(image("calc")).await;
    let ran = served
        .exec(
            &lease.id,
            json!({"argv": ["sh", "-c", "cat /tmp/prepared; hostname"]}),
        )
        .await;
    let lines: Vec<&str> = ran["stdout"].as_str().unwrap().lines().collect();
    // Once, in this very sandbox, before the lease was handed out.
    assert_eq!(lines.len(), 2, "{ran}");
    assert_eq!(lines[0], lines[1], "{ran}");
    let unprepared = served.acquire(image("textkit")).await;
    let ran = served
        .exec(
            &unprepared.id,
            json!({"argv": ["test", "-e", "/tmp/prepared"]}),
        )
        .await;
    assert_eq!(ran["exit_code"], 1, "{ran}");
    let metrics = served.metrics().await;
    assert!(
        metrics.contains("sandfleet_prepares_total{outcome=\"prepared\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sandfleet_prepares_total{outcome=\"failed\"} 0"),
        "{metrics}"
    );
    served.release(&lease.id).await;
    served.release(&unprepared.id).await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_recycle_leaves_no_hollow_lease_for_concurrent_calls() {
    let served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await;

    // The reset check cannot restore a sandbox without its repository, so
    // the recycle quarantines it and claims a fresh one, which cannot be
    // made: the built images are gone.
    served
        .exec(&lease.id, json!({"argv": ["rm", "-rf", ".git"]}))
        .await;
    std::fs::remove_dir_all(served.state_dir().join("images")).unwrap();

    let recycle = format!("/v1/leases/{}/recycle", lease.id);
    let exec = format!("/v1/leases/{}/exec", lease.id);
    let calls = (0..8).map(|_| served.post(&exec, json!({"argv": ["true"]})));
    let ((status, body), answers) = tokio::join!(
        served.post(&recycle, json!({})),
        futures_util::future::join_all(calls)
    );
    assert!(status >= 400, "{status} {body}");
    // Each concurrent call ran before the recycle, or found the lease
    // released after it: none found it without a sandbox.
    for (status, answer) in answers {
        assert!(matches!(status, 200 | 404), "{status} {answer}");
    }
    let (status, body) = served.get(&format!("/v1/leases/{}", lease.id)).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(served.get("/v1/leases").await.1["leases"], json!([]));
    served.stop().await;
}
