//! `pods/log` against the emulator started in-process: the real `kubectl logs` (1.32)
//! reads a container's output in the order written, with `--tail`, `--limit-bytes`,
//! `--timestamps`, `--since`/`--since-time` and `-f` (each line as it is written, to
//! the container's end); raw requests get the API server's and the kubelet's answers
//! word for word; and RBAC and discovery agree that reading a log is `get` on
//! `pods/log`.

use std::io::BufRead as _;
use std::time::{Duration, Instant, SystemTime};

use crate::common::kubectl::Cluster;
use crate::common::{Api, PODS, condition, image};
use sandfleet_emulator_k8s::{Config, Emulator, PodRuntime, PullModel};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

/// Pods run as plain processes (quick to make): the log is the runtime's, whatever
/// isolates the pod.
fn plain() -> Config {
    Config {
        runtime: PodRuntime::Plain,
        ..Config::default()
    }
}

/// A container of `image` whose main process is `sh -c script` (none: it idles).
fn container(name: &str, image: &str, script: Option<&str>) -> Value {
    let mut c = json!({"name": name, "image": image, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}});
    if let Some(script) = script {
        c["command"] = json!(["sh", "-c", script]);
    }
    c
}

fn pod(name: &str, containers: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": containers},
    })
}

/// Wait until pod `name` is in `phase`; the pod.
async fn in_phase(api: &Api, name: &str, phase: &str) -> Value {
    api.wait(&format!("{PODS}/{name}"), LIMIT, |p| {
        p.is_some_and(|p| p["status"]["phase"] == phase)
    })
    .await
    .expect("the pod exists")
}

/// `GET .../pods/NAME/log?QUERY`: the status, the content type and the body.
async fn get_log(api: &Api, name: &str, query: &str) -> (u16, String, String) {
    let response = api
        .http
        .get(format!("{}{PODS}/{name}/log?{query}", api.base))
        .bearer_auth(&api.token)
        .send()
        .await
        .expect("request");
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().expect("ascii").to_string())
        .unwrap_or_default();
    (code, content_type, response.text().await.expect("body"))
}

/// A failed log request's Status: its code, reason and message.
async fn log_error(api: &Api, name: &str, query: &str) -> (u16, String, String) {
    let (code, content_type, body) = get_log(api, name, query).await;
    assert_eq!(content_type, "application/json", "{body}");
    let status: Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    (
        code,
        status["reason"].as_str().unwrap_or_default().to_string(),
        status["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_shows_stdout_and_stderr_in_the_order_written_with_tail_limit_since_and_timestamps()
 {
    let cluster = Cluster::with_image(plain()).await;
    let api = Api::new(&cluster.emulator);
    let started = SystemTime::now();
    api.create(
        PODS,
        pod(
            "talk",
            json!([container(
                "main",
                "python:3.12",
                Some("echo one; echo two >&2; echo three; echo four >&2")
            )]),
        ),
    )
    .await;
    in_phase(&api, "talk", "Succeeded").await;
    let all = "one\ntwo\nthree\nfour\n";
    assert_eq!(cluster.ok(&["logs", "talk"]).await, all);
    assert_eq!(cluster.ok(&["logs", "talk", "--tail=1"]).await, "four\n");
    assert_eq!(
        cluster.ok(&["logs", "talk", "--tail=2"]).await,
        "three\nfour\n"
    );
    assert_eq!(
        cluster.ok(&["logs", "talk", "--limit-bytes=6"]).await,
        "one\ntw"
    );
    assert_eq!(cluster.ok(&["logs", "talk", "--since=1h"]).await, all);
    assert_eq!(
        cluster
            .ok(&["logs", "talk", "--since-time=2100-01-01T00:00:00Z"])
            .await,
        ""
    );

    let stamped = cluster.ok(&["logs", "talk", "--timestamps"]).await;
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 4, "{stamped}");
    let mut last = started;
    for (line, text) in lines.iter().zip(["one", "two", "three", "four"]) {
        let (stamp, rest) = line
            .split_once(' ')
            .expect("a timestamp, a space, the line");
        assert_eq!(rest, text);
        // RFC 3339 with nanoseconds, as the kubelet writes it (2006-01-02T15:04:05.000000000Z).
        assert_eq!(stamp.len(), 30, "{stamp}");
        let at = humantime::parse_rfc3339(stamp).expect("an RFC 3339 timestamp");
        assert!(at >= last && at <= SystemTime::now(), "{stamped}");
        last = at;
    }

    let err = cluster.fails(&["logs", "talk", "-c", "nope"]).await;
    assert!(
        err.contains("container nope is not valid for pod talk"),
        "{err}"
    );
    let err = cluster.fails(&["logs", "talk", "--previous"]).await;
    assert!(
        err.contains(
            "Error from server (BadRequest): previous terminated container \"main\" in pod \"talk\" not found"
        ),
        "{err}"
    );
    cluster.emulator.shutdown().await;
}

/// kubectl's next line of output, or None at its end.
async fn next_line(received: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    tokio::time::timeout(LIMIT, received.recv())
        .await
        .expect("kubectl printed a line or ended within the limit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_follow_streams_each_line_as_it_is_written_and_ends_with_the_container() {
    // Isolated, as `sandfleet devcluster k8s` runs pods by default: the file is made in
    // the pod's own filesystem.
    let cluster = Cluster::with_image(Config::default()).await;
    let api = Api::new(&cluster.emulator);
    // The pod's own behaviour: a line, then (for at most 30 s) waiting for a file the
    // test makes, then another line.
    let script = "echo first; i=0; while ! test -e go && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo second";
    api.create(
        PODS,
        pod(
            "waits",
            json!([container("main", "python:3.12", Some(script))]),
        ),
    )
    .await;
    in_phase(&api, "waits", "Running").await;

    let mut follower = cluster.kubectl_running(&["logs", "-f", "waits"]);
    let stdout = follower.stdout.take().expect("stdout piped");
    let (lines, mut received) = tokio::sync::mpsc::unbounded_channel();
    // Ends at kubectl's end of output.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if lines.send(line.expect("kubectl's output reads")).is_err() {
                return;
            }
        }
    });
    assert_eq!(next_line(&mut received).await.as_deref(), Some("first"));
    // The second line is not written yet: the container is still waiting for the file.
    let phase = cluster
        .ok(&["get", "pod", "waits", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_eq!(phase, "Running");
    cluster.ok(&["exec", "waits", "--", "touch", "go"]).await;
    assert_eq!(next_line(&mut received).await.as_deref(), Some("second"));
    // The container has ended, and so has the stream: kubectl exits, successfully.
    assert_eq!(next_line(&mut received).await, None);
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = follower.try_wait().expect("kubectl's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = follower.kill();
            panic!("kubectl logs -f did not exit after its stream ended");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
    in_phase(&api, "waits", "Succeeded").await;
    cluster.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_endpoint_answers_with_the_api_servers_and_the_kubelets_words() {
    let (_image, images) = image("py");
    let emulator = Emulator::start(Config { images, ..plain() })
        .await
        .expect("emulator starts");
    let api = Api::new(&emulator);
    api.create(
        PODS,
        pod(
            "duo",
            json!([
                container("a", "py", Some("echo from a; echo oops >&2; exit 3")),
                container("b", "py", None),
            ]),
        ),
    )
    .await;
    let failed = in_phase(&api, "duo", "Failed").await;
    // A failed container's message is its log's tail, as with FallbackToLogsOnError.
    assert_eq!(
        failed["status"]["containerStatuses"][0]["state"]["terminated"]["message"],
        "from a\noops"
    );

    assert_eq!(
        log_error(&api, "duo", "").await,
        (
            400,
            "BadRequest".into(),
            "a container name must be specified for pod duo, choose one of: [a b]".into()
        )
    );
    assert_eq!(
        log_error(&api, "duo", "container=nope").await,
        (
            400,
            "BadRequest".into(),
            "container nope is not valid for pod duo".into()
        )
    );
    assert_eq!(
        get_log(&api, "duo", "container=a").await,
        (200, "text/plain".into(), "from a\noops\n".into())
    );
    // Only the first container runs a command; the second's log is empty.
    assert_eq!(
        get_log(&api, "duo", "container=b").await,
        (200, "text/plain".into(), String::new())
    );
    // Following a container that has ended gives its log and ends.
    assert_eq!(
        get_log(&api, "duo", "container=a&follow=true&tailLines=1").await,
        (200, "text/plain".into(), "oops\n".into())
    );
    assert_eq!(
        log_error(&api, "duo", "container=a&previous=true").await,
        (
            400,
            "BadRequest".into(),
            "previous terminated container \"a\" in pod \"duo\" not found".into()
        )
    );
    assert_eq!(
        log_error(&api, "duo", "container=a&tailLines=-1").await,
        (
            422,
            "Invalid".into(),
            "PodLogOptions \"duo\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0".into()
        )
    );
    assert_eq!(
        log_error(&api, "duo", "container=a&limitBytes=0").await.0,
        422
    );
    assert_eq!(
        log_error(&api, "ghost", "").await,
        (404, "NotFound".into(), "pods \"ghost\" not found".into())
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_not_yet_running_has_no_log_and_says_why() {
    let (_image, images) = image("py");
    // Every first pull takes an hour: a scheduled pod stays in ContainerCreating.
    let emulator = Emulator::start(Config {
        images,
        pulls: PullModel {
            latency: Duration::from_secs(3600),
            ..PullModel::default()
        },
        ..plain()
    })
    .await
    .expect("emulator starts");
    let api = Api::new(&emulator);
    api.create(
        PODS,
        pod("slow", json!([container("main", "py", Some("echo hi"))])),
    )
    .await;
    let mut nowhere = pod("nowhere", json!([container("main", "py", Some("echo hi"))]));
    nowhere["spec"]["nodeSelector"] = json!({"disk": "none-has-it"});
    api.create(PODS, nowhere).await;
    api.wait(&format!("{PODS}/slow"), LIMIT, |p| {
        p.is_some_and(|p| p["spec"]["nodeName"].is_string())
    })
    .await;
    assert_eq!(
        log_error(&api, "slow", "").await,
        (
            400,
            "BadRequest".into(),
            "container \"main\" in pod \"slow\" is waiting to start: ContainerCreating".into()
        )
    );
    // No node, no kubelet to ask: the API server answers with nothing.
    api.wait(&format!("{PODS}/nowhere"), LIMIT, |p| {
        p.and_then(|p| condition(p, "PodScheduled"))
            .is_some_and(|c| c["reason"] == "Unschedulable")
    })
    .await;
    assert_eq!(
        get_log(&api, "nowhere", "").await,
        (204, String::new(), String::new())
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_log_is_get_on_pods_log_in_discovery_and_in_rbac() {
    let emulator = Emulator::start(Config {
        deny: vec!["get:pods/log".parse().expect("a deny rule")],
        ..Config::default()
    })
    .await
    .expect("emulator starts");
    let api = Api::new(&emulator);
    let resources = api.get("/api/v1").await.expect("discovery")["resources"].clone();
    let log = resources
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "pods/log")
        .expect("pods/log is listed");
    assert_eq!(
        (&log["kind"], &log["verbs"]),
        (&json!("Pod"), &json!(["get"]))
    );
    assert_eq!(
        log_error(&api, "ghost", "").await,
        (
            403,
            "Forbidden".into(),
            "pods \"ghost\" is forbidden: User \"sandfleet-devcluster\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"default\"".into()
        )
    );
    emulator.shutdown().await;
}
