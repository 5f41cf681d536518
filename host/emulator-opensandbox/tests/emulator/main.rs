//! The emulator driven over real sockets by a plain HTTP client, as the
//! official SDK and the driver use it.

mod http;
mod oci;
mod snapshots;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use http::{End, Events, Http, Reply, call, client, eventually};
use hyper::{Method, StatusCode};
use sandfleet_emulator_opensandbox::{
    Emulator, EmulatorConfig, Faults, MARKER_ENV, Runtime, parse_image_arg,
};
use serde_json::{Value, json};

struct Fixture {
    emulator: Emulator,
    http: Http,
    _image: tempfile::TempDir,
    state: tempfile::TempDir,
}

async fn start_with(runtime: Runtime, faults: &str) -> Fixture {
    let image = tempfile::tempdir().unwrap();
    std::fs::write(image.path().join("README"), "an image\n").unwrap();
    let state = tempfile::tempdir().unwrap();
    let (reference, source) = parse_image_arg(&format!("calc={}", image.path().display())).unwrap();
    let mut config = EmulatorConfig::new(BTreeMap::from([(reference, source)]));
    config.runtime = runtime;
    config.faults = faults.parse::<Faults>().unwrap();
    config.state_dir = Some(state.path().to_path_buf());
    let emulator = Emulator::start(config).await.expect("the emulator starts");
    Fixture {
        emulator,
        http: client(),
        _image: image,
        state,
    }
}

async fn start(faults: &str) -> Fixture {
    start_with(Runtime::Plain, faults).await
}

fn create_body() -> Value {
    json!({
        "image": {"uri": "calc"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "resourceLimits": {"cpu": "1", "memory": "2Gi"},
        "timeout": 600,
        "metadata": {"sandfleet.io/run-id": "test-run"},
    })
}

impl Fixture {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.emulator.base_url())
    }

    async fn api(&self, method: Method, path: &str, body: Option<&Value>) -> Reply {
        let mut request = call(&self.http, method, &self.url(path))
            .header("OPEN-SANDBOX-API-KEY", self.emulator.api_key());
        if let Some(body) = body {
            request = request.json(body);
        }
        request.send().await
    }

    async fn create(&self, body: &Value) -> String {
        let reply = self.api(Method::POST, "/v1/sandboxes", Some(body)).await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()["id"].as_str().unwrap().to_string()
    }

    async fn execd(&self, id: &str) -> String {
        let reply = self
            .api(
                Method::GET,
                &format!("/v1/sandboxes/{id}/endpoints/44772"),
                None,
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        format!("http://{}", reply.json()["endpoint"].as_str().unwrap())
    }

    async fn ready_execd(&self, id: &str) -> String {
        let execd = self.execd(id).await;
        let ping = format!("{execd}/ping");
        eventually(Duration::from_secs(10), "execd answers /ping", || async {
            let reply = call(&self.http, Method::GET, &ping).open().await.ok()?;
            (reply.status() == StatusCode::OK).then_some(())
        })
        .await;
        execd
    }

    async fn command(&self, execd: &str, body: &Value) -> Events {
        let response = call(&self.http, Method::POST, &format!("{execd}/command"))
            .json(body)
            .open()
            .await
            .expect("execd answers");
        Events::new(response)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_wire_sequence_runs_true_in_an_isolated_sandbox() {
    let fx = start_with(Runtime::Namespaces, "").await;
    // 1. create.
    let reply = fx
        .api(Method::POST, "/v1/sandboxes", Some(&create_body()))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    assert!(reply.headers.contains_key("x-request-id"));
    let created = reply.json();
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["status"]["state"], "Running");
    assert_eq!(created["metadata"]["sandfleet.io/run-id"], "test-run");
    assert_eq!(created["entrypoint"], json!(["tail", "-f", "/dev/null"]));
    assert!(created["createdAt"].as_str().is_some() && created["expiresAt"].as_str().is_some());
    // 2. both endpoints, in parallel, direct mode.
    let execd_path = format!("/v1/sandboxes/{id}/endpoints/44772?use_server_proxy=false");
    let egress_path = format!("/v1/sandboxes/{id}/endpoints/18080?use_server_proxy=false");
    let (execd, egress) = tokio::join!(
        fx.api(Method::GET, &execd_path, None),
        fx.api(Method::GET, &egress_path, None),
    );
    assert_eq!(
        (execd.status, egress.status),
        (StatusCode::OK, StatusCode::OK)
    );
    let endpoint = execd.json()["endpoint"].as_str().unwrap().to_string();
    assert!(
        !endpoint.contains("://") && endpoint.ends_with(":44772"),
        "{endpoint}"
    );
    assert!(
        egress.json()["endpoint"]
            .as_str()
            .unwrap()
            .ends_with(":18080")
    );
    // 3. ping until 200 (execd is unauthenticated).
    let execd = fx.ready_execd(&id).await;
    // 4. the SDK's metrics event.
    let metrics = fx
        .api(
            Method::POST,
            "/v1/metrics/events",
            Some(&json!({"eventType": "sandbox.create", "createDurationMs": 12, "success": true, "sandboxId": id, "image": "calc"})),
        )
        .await;
    assert_eq!(metrics.status, StatusCode::NO_CONTENT);
    // 5. run("true"), read to EOF.
    let mut events = fx
        .command(
            &execd,
            &json!({"command": "true", "envs": {MARKER_ENV: "m-true"}}),
        )
        .await;
    let seen = events.until_terminal().await;
    assert_eq!(seen[0]["type"], "init");
    let command_id = seen[0]["text"].as_str().unwrap().to_string();
    assert_eq!(seen.last().unwrap()["type"], "execution_complete");
    assert!(seen.last().unwrap()["execution_time"].as_u64().is_some());
    assert_eq!(events.end().await.0, End::Clean);
    // The command ran in the sandbox: its workdir holds the image.
    let mut cat = fx
        .command(&execd, &json!({"command": "cat README; pwd"}))
        .await;
    let lines: Vec<Value> = cat.until_terminal().await;
    let texts: Vec<&str> = lines
        .iter()
        .filter(|e| e["type"] == "stdout")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["an image", "/workspace"]);
    // 6. delete; a repeat is 404.
    assert_eq!(
        fx.api(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let again = fx
        .api(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    assert_eq!(again.code(), "KUBERNETES::SANDBOX_NOT_FOUND");
    let counted = fx.emulator.executions();
    assert_eq!(counted.by_command_id[&command_id], 1);
    assert_eq!(counted.by_marker["m-true"], 1);
    assert_eq!(
        (
            counted.sandboxes_created,
            counted.sandboxes_deleted,
            counted.sandboxes_live
        ),
        (1, 1, 0)
    );
    // execd is gone with its sandbox.
    assert!(
        call(&fx.http, Method::GET, &format!("{execd}/ping"))
            .open()
            .await
            .is_err()
    );
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn keys_are_checked_except_on_exempt_paths_and_request_ids_come_back() {
    let fx = start("").await;
    let missing = call(&fx.http, Method::GET, &fx.url("/v1/sandboxes"))
        .send()
        .await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (StatusCode::UNAUTHORIZED, "MISSING_API_KEY")
    );
    let wrong = call(&fx.http, Method::GET, &fx.url("/sandboxes"))
        .header("OPEN-SANDBOX-API-KEY", "nope")
        .send()
        .await;
    assert_eq!(
        (wrong.status, wrong.code().as_str()),
        (StatusCode::UNAUTHORIZED, "INVALID_API_KEY")
    );
    assert!(wrong.headers.contains_key("x-request-id"));
    let health = call(&fx.http, Method::GET, &fx.url("/health"))
        .header("X-Request-ID", "req-7")
        .send()
        .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.headers["x-request-id"], "req-7");
    let version = call(&fx.http, Method::GET, &fx.url("/version"))
        .send()
        .await;
    assert_eq!(version.json()["version"], "1.1.1");
    let bare = fx.api(Method::GET, "/sandboxes", None).await;
    assert_eq!(bare.status, StatusCode::OK);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn bad_creates_get_the_real_shapes() {
    let fx = start("").await;
    let mut short = create_body();
    short["timeout"] = json!(30);
    let reply = fx.api(Method::POST, "/v1/sandboxes", Some(&short)).await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    let detail = &reply.json()["detail"][0];
    assert_eq!(detail["loc"], json!(["body", "timeout"]));
    assert_eq!(detail["type"], "greater_than_equal");
    for field in ["entrypoint", "resourceLimits"] {
        let mut body = create_body();
        body.as_object_mut().unwrap().remove(field);
        let reply = fx.api(Method::POST, "/v1/sandboxes", Some(&body)).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{field}");
        assert!(
            reply.json()["detail"][0]["msg"]
                .as_str()
                .unwrap()
                .contains(field.trim_end_matches('s'))
                || field == "entrypoint"
        );
    }
    let mut label = create_body();
    label["metadata"] = json!({"bad key": "x"});
    let reply = fx.api(Method::POST, "/v1/sandboxes", Some(&label)).await;
    assert_eq!(
        (reply.status, reply.code().as_str()),
        (StatusCode::BAD_REQUEST, "SANDBOX::INVALID_METADATA_LABEL")
    );
    let mut image = create_body();
    image["image"] = json!({"uri": "docker.io/unknown:1"});
    let reply = fx.api(Method::POST, "/v1/sandboxes", Some(&image)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.code().ends_with("::IMAGE_NOT_FOUND"));
    let junk = call(&fx.http, Method::POST, &fx.url("/v1/sandboxes"))
        .header("OPEN-SANDBOX-API-KEY", fx.emulator.api_key())
        .body("application/json", b"{not json".to_vec())
        .send()
        .await;
    assert_eq!(junk.status, StatusCode::UNPROCESSABLE_ENTITY);
    // What the emulator cannot honour is FastAPI's 422, naming the field.
    for (field, value) in [
        ("networkPolicy", json!({"defaultAction": "allow"})),
        (
            "volumes",
            json!([{"name": "d", "mountPath": "/d", "pvc": {"claimName": "c"}}]),
        ),
        ("platform", json!({"os": "windows", "arch": "amd64"})),
        ("lifecycle", json!({"preStart": {"command": ["true"]}})),
    ] {
        let mut body = create_body();
        body[field] = value;
        let reply = fx.api(Method::POST, "/v1/sandboxes", Some(&body)).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{field}");
        let detail = &reply.json()["detail"][0];
        assert_eq!(detail["type"], "value_error", "{field}");
        assert_eq!(detail["loc"], json!(["body", field]));
        assert!(
            detail["msg"]
                .as_str()
                .unwrap()
                .starts_with(&format!("Value error, {field} is not supported")),
            "{detail}"
        );
    }
    assert_eq!(fx.emulator.live_sandboxes(), 0);
    let mut offline = create_body();
    offline["networkPolicy"] = json!({"defaultAction": "deny", "egress": []});
    fx.create(&offline).await;
    assert_eq!(
        fx.emulator.created()[0].network_policy,
        Some(offline["networkPolicy"].clone())
    );
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn list_filters_pages_patches_and_renews() {
    let fx = start("").await;
    let mut ids = Vec::new();
    for team in ["a", "a", "b"] {
        let mut body = create_body();
        body["metadata"]["team"] = json!(team);
        body["resourceRequests"] = json!({"cpu": "250m", "memory": "512Mi"});
        ids.push(fx.create(&body).await);
    }
    let page = fx
        .api(
            Method::GET,
            "/v1/sandboxes?metadata=team%3Da&pageSize=1&state=Running&state=Paused",
            None,
        )
        .await
        .json();
    assert_eq!(page["pagination"]["totalItems"], 2);
    assert_eq!(page["pagination"]["hasNextPage"], true);
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let none = fx
        .api(Method::GET, "/v1/sandboxes?state=Paused", None)
        .await
        .json();
    assert_eq!(none["pagination"]["totalItems"], 0);
    let too_big = fx
        .api(Method::GET, "/v1/sandboxes?pageSize=201", None)
        .await;
    assert_eq!(too_big.status, StatusCode::UNPROCESSABLE_ENTITY);
    let malformed = fx
        .api(Method::GET, "/v1/sandboxes?metadata=team", None)
        .await;
    assert_eq!(malformed.code(), "SANDBOX::INVALID_METADATA_FORMAT");
    // Merge patch: null deletes, strings set.
    let patched = fx
        .api(
            Method::PATCH,
            &format!("/v1/sandboxes/{}/metadata", ids[2]),
            Some(&json!({"team": null, "owner": "me"})),
        )
        .await
        .json();
    assert_eq!(
        patched["metadata"],
        json!({"sandfleet.io/run-id": "test-run", "owner": "me"})
    );
    // Requests are kept apart from limits.
    let debug = fx.api(Method::GET, "/debug/sandboxes", None).await.json();
    let first = debug["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == ids[0].as_str())
        .unwrap()
        .clone();
    assert_eq!(first["resourceRequests"]["cpu"], "250m");
    assert_eq!(first["resourceLimits"]["cpu"], "1");
    // Renew: past is refused, future is taken as given.
    let path = format!("/v1/sandboxes/{}/renew-expiration", ids[0]);
    let past = fx
        .api(
            Method::POST,
            &path,
            Some(&json!({"expiresAt": "2001-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(
        (past.status, past.code().as_str()),
        (StatusCode::BAD_REQUEST, "KUBERNETES::INVALID_EXPIRATION")
    );
    let at = "2099-01-01T00:00:00+00:00";
    let renewed = fx
        .api(Method::POST, &path, Some(&json!({"expiresAt": at})))
        .await;
    assert_eq!(renewed.status, StatusCode::OK);
    assert!(
        renewed.json()["expiresAt"]
            .as_str()
            .unwrap()
            .starts_with("2099-01-01T00:00:00")
    );
    let read = fx
        .api(Method::GET, &format!("/v1/sandboxes/{}", ids[0]), None)
        .await
        .json();
    assert!(read["expiresAt"].as_str().unwrap().starts_with("2099"));
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn a_sandbox_not_renewed_is_deleted_at_its_expiry() {
    let fx = start("").await;
    let id = fx.create(&create_body()).await;
    let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_millis(500);
    let renewed = fx
        .api(
            Method::POST,
            &format!("/v1/sandboxes/{id}/renew-expiration"),
            Some(&json!({"expiresAt": soon.to_string()})),
        )
        .await;
    assert_eq!(renewed.status, StatusCode::OK);
    eventually(Duration::from_secs(10), "the sandbox expires", || async {
        let reply = fx
            .api(Method::GET, &format!("/v1/sandboxes/{id}"), None)
            .await;
        (reply.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    let counted = fx.emulator.executions();
    assert_eq!((counted.sandboxes_expired, counted.sandboxes_live), (1, 0));
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn commands_stream_lines_and_exit_codes_with_the_grace_tail() {
    let fx = start("").await;
    let id = fx.create(&create_body()).await;
    let execd = fx.ready_execd(&id).await;
    let mut events = fx
        .command(
            &execd,
            &json!({"command": "printf 'a\\n\\nb\\r\\nc\\rd\\n'; echo oops >&2; printf tail; exit 3"}),
        )
        .await;
    let seen = events.until_terminal().await;
    let out: Vec<&str> = seen
        .iter()
        .filter(|e| e["type"] == "stdout")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    // Each of \n, \r\n and \r ends a line, sent without it.
    assert_eq!(out, ["a", "\n", "b", "c", "d", "tail"]);
    let err: Vec<&str> = seen
        .iter()
        .filter(|e| e["type"] == "stderr")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(err, ["oops"]);
    let last = seen.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["error"]["ename"], "CommandExecError");
    assert_eq!(last["error"]["evalue"], "3");
    // What the command wrote, byte for byte, stays where execd keeps it.
    let command_id = seen[0]["text"].as_str().unwrap();
    for (name, written) in [
        ("stdout", &b"a\n\nb\r\nc\rd\ntail"[..]),
        ("stderr", &b"oops\n"[..]),
    ] {
        let file = call(
            &fx.http,
            Method::GET,
            &format!("{execd}/files/download?path=/tmp/{command_id}.{name}"),
        )
        .send()
        .await;
        assert_eq!(file.body.as_ref(), written, "{name}");
    }
    // Only a background command has logs.
    let logs = call(
        &fx.http,
        Method::GET,
        &format!("{execd}/command/{command_id}/logs"),
    )
    .send()
    .await;
    assert_eq!(logs.status, StatusCode::BAD_REQUEST);
    let terminal_at = Instant::now();
    let (end, ended_at) = events.end().await;
    assert_eq!(end, End::Clean);
    // The stream is held open after the terminal event, as real execd does.
    assert!(
        ended_at - terminal_at >= Duration::from_millis(800),
        "{:?}",
        ended_at - terminal_at
    );
    // A timeout kills the command: evalue -1.
    let mut slow = fx
        .command(&execd, &json!({"command": "sleep 30", "timeout": 300}))
        .await;
    let seen = slow.until_terminal().await;
    assert_eq!(seen.last().unwrap()["error"]["evalue"], "-1");
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn cut_tail_drops_the_connection_right_after_the_terminal_event() {
    let fx = start("cut-tail").await;
    let id = fx.create(&create_body()).await;
    let execd = fx.ready_execd(&id).await;
    let mut events = fx.command(&execd, &json!({"command": "echo hi"})).await;
    let seen = events.until_terminal().await;
    assert_eq!(seen.last().unwrap()["type"], "execution_complete");
    assert_eq!(events.end().await.0, End::Cut);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn a_command_survives_its_client_and_background_commands_are_polled() {
    let fx = start("").await;
    let id = fx.create(&create_body()).await;
    let execd = fx.ready_execd(&id).await;
    // The client goes away after init; the command goes on.
    let mut events = fx
        .command(&execd, &json!({"command": "sleep 0.3; echo survived > survived.txt", "envs": {MARKER_ENV: "m-1"}}))
        .await;
    let init = events.next().await.unwrap();
    let command_id = init["text"].as_str().unwrap().to_string();
    drop(events);
    let status_url = format!("{execd}/command/status/{command_id}");
    let status: Value = eventually(Duration::from_secs(10), "the command finishes", || async {
        let status = call(&fx.http, Method::GET, &status_url).send().await.json();
        (status["running"] == false).then_some(status)
    })
    .await;
    assert_eq!(status["exit_code"], 0);
    let file = call(
        &fx.http,
        Method::GET,
        &format!("{execd}/files/download?path=survived.txt"),
    )
    .send()
    .await;
    assert_eq!(file.body.as_ref(), b"survived\n");
    assert_eq!(fx.emulator.executions().by_marker["m-1"], 1);
    // Background: init and an immediate complete; logs by cursor.
    let mut background = fx
        .command(
            &execd,
            &json!({"command": "for i in 1 2 3; do echo $i; done; sleep 30", "background": true}),
        )
        .await;
    let seen = background.until_terminal().await;
    assert_eq!(
        seen.iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["init", "execution_complete"]
    );
    let bg = seen[0]["text"].as_str().unwrap().to_string();
    let logs_url = format!("{execd}/command/{bg}/logs");
    eventually(Duration::from_secs(10), "three lines logged", || async {
        let logs = call(&fx.http, Method::GET, &logs_url).send().await;
        (logs.body.as_ref() == b"1\n2\n3\n").then_some(())
    })
    .await;
    // The cursor is a byte offset into the output file.
    let tail = call(&fx.http, Method::GET, &format!("{logs_url}?cursor=4"))
        .send()
        .await;
    assert_eq!(tail.body.as_ref(), b"3\n");
    assert_eq!(tail.headers["execd-commands-tail-cursor"], "6");
    let garbled = call(&fx.http, Method::GET, &format!("{logs_url}?cursor=x"))
        .send()
        .await;
    assert_eq!(garbled.body.as_ref(), b"1\n2\n3\n");
    // Interrupt it.
    let killed = call(
        &fx.http,
        Method::DELETE,
        &format!("{execd}/command?id={bg}"),
    )
    .send()
    .await;
    assert_eq!(killed.status, StatusCode::OK);
    let status: Value = eventually(
        Duration::from_secs(10),
        "the background command is killed",
        || async {
            let status = call(
                &fx.http,
                Method::GET,
                &format!("{execd}/command/status/{bg}"),
            )
            .send()
            .await
            .json();
            (status["running"] == false).then_some(status)
        },
    )
    .await;
    assert_eq!(status["exit_code"], -1);
    let unknown = call(
        &fx.http,
        Method::GET,
        &format!("{execd}/command/status/nope"),
    )
    .send()
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    fx.emulator.shutdown().await;
}

fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "sandfleet-test-boundary";
    let mut body = Vec::new();
    for (name, filename, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let disposition = match filename {
            Some(f) => {
                format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n")
            }
            None => format!("Content-Disposition: form-data; name=\"{name}\"\r\n"),
        };
        body.extend_from_slice(disposition.as_bytes());
        body.extend_from_slice(b"Content-Type: application/octet-stream\r\n\r\n");
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn files_upload_in_pairs_and_download_with_ranges() {
    let fx = start("").await;
    let id = fx.create(&create_body()).await;
    let execd = fx.ready_execd(&id).await;
    let meta = br#"{"path":"/workspace/dir/f.txt","owner":"root","group":"root","mode":600}"#;
    let (kind, body) = multipart(&[
        ("metadata", Some("metadata"), meta),
        ("file", Some("f.txt"), b"0123456789"),
    ]);
    let up = call(&fx.http, Method::POST, &format!("{execd}/files/upload"))
        .body(&kind, body)
        .send()
        .await;
    assert_eq!(
        up.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&up.body)
    );
    let url = format!("{execd}/files/download?path=/workspace/dir/f.txt");
    assert_eq!(
        call(&fx.http, Method::GET, &url).send().await.body.as_ref(),
        b"0123456789"
    );
    let part = call(&fx.http, Method::GET, &url)
        .header("Range", "bytes=2-4")
        .send()
        .await;
    assert_eq!(part.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.body.as_ref(), b"234");
    assert_eq!(part.headers["content-range"], "bytes 2-4/10");
    let mut mode = fx
        .command(&execd, &json!({"command": "stat -c %a dir/f.txt"}))
        .await;
    let seen = mode.until_terminal().await;
    assert_eq!(seen[1]["text"], "600");
    // Metadata as a plain field does not count: the pairs do not match.
    let (kind, body) = multipart(&[("metadata", None, meta), ("file", Some("f.txt"), b"x")]);
    let bad = call(&fx.http, Method::POST, &format!("{execd}/files/upload"))
        .body(&kind, body)
        .send()
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let missing = call(
        &fx.http,
        Method::GET,
        &format!("{execd}/files/download?path=/nope"),
    )
    .send()
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    // Removing takes several paths; one already gone is no failure.
    let removed = call(
        &fx.http,
        Method::DELETE,
        &format!("{execd}/files?path=/workspace/dir/f.txt&path=/workspace/gone"),
    )
    .send()
    .await;
    assert_eq!(
        removed.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&removed.body)
    );
    let after = call(&fx.http, Method::GET, &url).send().await;
    assert_eq!(after.status, StatusCode::NOT_FOUND);
    let nameless = call(&fx.http, Method::DELETE, &format!("{execd}/files"))
        .send()
        .await;
    assert_eq!(nameless.status, StatusCode::BAD_REQUEST);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn the_server_proxy_reaches_execd_and_fails_like_1_1_1() {
    let fx = start("").await;
    let id = fx.create(&create_body()).await;
    fx.ready_execd(&id).await;
    let reply = fx
        .api(
            Method::GET,
            &format!("/v1/sandboxes/{id}/endpoints/44772?use_server_proxy=true"),
            None,
        )
        .await;
    let endpoint = reply.json()["endpoint"].as_str().unwrap().to_string();
    assert_eq!(
        endpoint,
        format!("{}/v1/sandboxes/{id}/proxy/44772", fx.emulator.address())
    );
    let base = format!("http://{endpoint}");
    let ping = call(&fx.http, Method::GET, &format!("{base}/ping"))
        .send()
        .await;
    assert_eq!(ping.status, StatusCode::OK);
    let response = call(&fx.http, Method::POST, &format!("{base}/command"))
        .header("OPEN-SANDBOX-API-KEY", fx.emulator.api_key())
        .json(&json!({"command": "echo via-proxy"}))
        .open()
        .await
        .unwrap();
    let mut events = Events::new(response);
    let seen = events.until_terminal().await;
    assert_eq!(seen[1]["text"], "via-proxy");
    let nothing = call(
        &fx.http,
        Method::GET,
        &fx.url(&format!("/v1/sandboxes/{id}/proxy/9/ping")),
    )
    .send()
    .await;
    assert_eq!(
        (nothing.status, nothing.code().as_str()),
        (StatusCode::BAD_GATEWAY, "BACKEND_CONNECTION_FAILED")
    );
    assert!(
        nothing.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("Could not connect to the backend sandbox")
    );
    let unknown = call(
        &fx.http,
        Method::GET,
        &fx.url("/v1/sandboxes/nope/proxy/44772/ping"),
    )
    .send()
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn a_late_execd_refuses_then_answers() {
    let fx = start("execd-late=1500").await;
    let id = fx.create(&create_body()).await;
    let execd = fx.execd(&id).await;
    let direct = call(&fx.http, Method::GET, &format!("{execd}/ping"))
        .open()
        .await;
    assert!(
        direct.unwrap_err().is_connect(),
        "a direct connect is refused while execd is late"
    );
    let proxied = call(
        &fx.http,
        Method::GET,
        &fx.url(&format!("/v1/sandboxes/{id}/proxy/44772/ping")),
    )
    .send()
    .await;
    assert_eq!(
        (proxied.status, proxied.code().as_str()),
        (StatusCode::BAD_GATEWAY, "BACKEND_CONNECTION_FAILED")
    );
    fx.ready_execd(&id).await;
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn keepalive_drops_requests_on_idle_connections_but_not_busy_ones() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = start("keepalive=300ms").await;
    let mut socket = tokio::net::TcpStream::connect(fx.emulator.address())
        .await
        .unwrap();
    socket
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = vec![0u8; 4096];
    let n = socket.read(&mut buffer).await.unwrap();
    assert!(buffer[..n].starts_with(b"HTTP/1.1 200"));
    // Idle past the keep-alive (the scenario's gap, not a wait for an
    // event): the next request on the socket goes unanswered.
    tokio::time::sleep(Duration::from_millis(600)).await;
    socket
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buffer))
        .await
        .expect("the server dropped the connection within 10 s");
    assert!(
        matches!(answer, Ok(0) | Err(_)),
        "answered on a dead socket: {:?}",
        answer.map(|n| String::from_utf8_lossy(&buffer[..n]).into_owned())
    );
    // A command stream longer than the keep-alive is not cut.
    let id = fx.create(&create_body()).await;
    let execd = fx.ready_execd(&id).await;
    let mut events = fx
        .command(&execd, &json!({"command": "sleep 1; echo late"}))
        .await;
    let seen = events.until_terminal().await;
    assert_eq!(seen.last().unwrap()["type"], "execution_complete");
    assert_eq!(events.end().await.0, End::Clean);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn pool_max_answers_429_with_retry_after() {
    let fx = start("pool-max=1").await;
    let pooled =
        json!({"image": {"uri": "calc"}, "entrypoint": ["x"], "extensions": {"poolRef": "pool-a"}});
    let first = fx.create(&pooled).await;
    let full = fx.api(Method::POST, "/v1/sandboxes", Some(&pooled)).await;
    assert_eq!(
        (full.status, full.code().as_str()),
        (
            StatusCode::TOO_MANY_REQUESTS,
            "KUBERNETES::POOL_CAPACITY_EXHAUSTED"
        )
    );
    assert_eq!(full.headers["retry-after"], "30");
    // A direct create is not pooled.
    fx.create(&create_body()).await;
    assert_eq!(
        fx.api(Method::DELETE, &format!("/v1/sandboxes/{first}"), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    fx.create(&pooled).await;
    assert_eq!(fx.emulator.live_sandboxes(), 2);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn quota_answers_403_until_a_sandbox_is_deleted() {
    let fx = start("quota=1").await;
    let first = fx.create(&create_body()).await;
    let over = fx
        .api(Method::POST, "/v1/sandboxes", Some(&create_body()))
        .await;
    assert_eq!(
        (over.status, over.code().as_str()),
        (StatusCode::FORBIDDEN, "KUBERNETES::QUOTA_EXCEEDED")
    );
    assert_eq!(
        fx.api(Method::DELETE, &format!("/v1/sandboxes/{first}"), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    fx.create(&create_body()).await;
    assert_eq!(fx.emulator.executions().sandboxes_created, 2);
    fx.emulator.shutdown().await;
}

async fn flaky_pattern(fx: &Fixture) -> Vec<bool> {
    let mut pattern = Vec::new();
    for _ in 0..40 {
        let reply = fx.api(Method::GET, "/v1/sandboxes", None).await;
        assert!(matches!(
            reply.status,
            StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE
        ));
        pattern.push(reply.status == StatusCode::SERVICE_UNAVAILABLE);
    }
    pattern
}

#[tokio::test]
async fn flaky_fails_a_seeded_fraction_of_lifecycle_calls() {
    let (a, b) = (
        start("flaky=0.3,seed=42").await,
        start("flaky=0.3,seed=42").await,
    );
    let (pa, pb) = (flaky_pattern(&a).await, flaky_pattern(&b).await);
    assert_eq!(pa, pb, "the same seed fails the same calls");
    let failed = pa.iter().filter(|f| **f).count();
    assert!((3..=25).contains(&failed), "{failed} of 40 failed");
    // Health is never failed.
    for _ in 0..20 {
        assert_eq!(
            call(&a.http, Method::GET, &a.url("/health"))
                .send()
                .await
                .status,
            StatusCode::OK
        );
    }
    a.emulator.shutdown().await;
    b.emulator.shutdown().await;
}

#[tokio::test]
async fn port_500_fails_the_first_create_only_and_leaves_nothing() {
    let fx = start("port-500").await;
    let first = fx
        .api(Method::POST, "/v1/sandboxes", Some(&create_body()))
        .await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        first.json()["message"]
            .as_str()
            .unwrap()
            .contains("port is already allocated")
    );
    assert_eq!(fx.emulator.live_sandboxes(), 0);
    fx.create(&create_body()).await;
    assert_eq!(fx.emulator.live_sandboxes(), 1);
    fx.emulator.shutdown().await;
}

#[tokio::test]
async fn shutdown_removes_every_sandbox() {
    let fx = start("").await;
    let mut execds = Vec::new();
    for _ in 0..3 {
        let id = fx.create(&create_body()).await;
        execds.push(fx.ready_execd(&id).await);
    }
    assert_eq!(fx.emulator.live_sandboxes(), 3);
    let state = fx.state.path().to_path_buf();
    let http = fx.http.clone();
    fx.emulator.shutdown().await;
    let runs = state.join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in {}: {left:?}", runs.display());
    for execd in execds {
        assert!(
            call(&http, Method::GET, &format!("{execd}/ping"))
                .open()
                .await
                .is_err()
        );
    }
}
