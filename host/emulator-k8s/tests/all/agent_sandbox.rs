//! End-to-end with the real `kubectl` (1.32) against an emulator whose pods are
//! isolated local sandboxes: the agent-sandbox flow from the CRD YAMLs to an exec into
//! a claimed sandbox and its cleanup by garbage collection.

use std::time::{Duration, Instant};

use crate::common::kubectl::Cluster;
use crate::common::{Api, EXT, crd_dir, is_true};
use sandfleet_emulator_k8s::Config;

const TEMPLATE: &str = "apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: python
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: python:3.12
        resources: {requests: {cpu: 100m, memory: 64Mi}}
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: warm
spec:
  replicas: 2
  sandboxTemplateRef: {name: python}
";

const CLAIM: &str = "apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata:
  name: job-1
spec:
  warmPoolRef: {name: warm}
";

async fn wait_for(cluster: &Cluster, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cluster.kubectl(args).await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {args:?} never got there: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_runs_the_agent_sandbox_flow_from_crds_to_exec_and_cleanup() {
    let cluster = Cluster::with_image(Config::default()).await;
    let out = cluster
        .ok(&["apply", "-f", crd_dir().to_str().unwrap()])
        .await;
    assert_eq!(out.matches("created").count(), 4, "{out}");
    let file = cluster.file("pool.yaml", TEMPLATE);
    cluster.ok(&["apply", "-f", file.to_str().unwrap()]).await;
    // `get sandboxwarmpools` prints the CRD's printer columns, ready replicas first.
    let table = wait_for(&cluster, &["get", "sandboxwarmpools"], |t| {
        t.lines().nth(1).is_some_and(|row| {
            row.split_whitespace().take(3).collect::<Vec<_>>() == ["warm", "2", "2"]
        })
    })
    .await;
    assert!(table.starts_with("NAME"), "{table}");
    assert_eq!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "READY", "DESIRED", "AGE"]
    );

    // `get sandboxclaims -w` until Ready, in the background while the claim is made.
    let claim = cluster.file("claim.yaml", CLAIM);
    let watcher = cluster.kubectl_with(&["get", "sandboxclaims", "-w"], None, "8s");
    let creator = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.ok(&["create", "-f", claim.to_str().unwrap()]).await
    };
    let (watched, created) = tokio::join!(watcher, creator);
    assert!(
        created.contains("sandboxclaim.extensions.agents.x-k8s.io/job-1 created"),
        "{created}"
    );
    let watched = String::from_utf8_lossy(&watched.stdout).into_owned();
    assert!(
        watched
            .lines()
            .any(|l| l.starts_with("job-1") && l.split_whitespace().nth(1) == Some("True")),
        "the watch shows the claim Ready: {watched}"
    );
    assert_eq!(
        watched.matches("NAME").count(),
        1,
        "one header for list and watch: {watched}"
    );
    let out = cluster
        .ok(&[
            "wait",
            "--for=condition=Ready",
            "sandboxclaim/job-1",
            "--timeout=20s",
        ])
        .await;
    assert!(out.contains("condition met"), "{out}");

    let sandbox = cluster
        .ok(&[
            "get",
            "sandboxclaim",
            "job-1",
            "-o",
            "jsonpath={.status.sandbox.name}",
        ])
        .await;
    assert!(sandbox.starts_with("warm-"), "{sandbox}");
    let pod = cluster
        .ok(&[
            "get",
            "sandbox",
            &sandbox,
            "-o",
            "jsonpath={.metadata.annotations.agents\\.x-k8s\\.io/pod-name}",
        ])
        .await;
    let exec = cluster
        .kubectl(&["exec", &pod, "--", "sh", "-c", "echo hi; exit 3"])
        .await;
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "hi\n");
    assert_eq!(
        exec.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&exec.stderr)
    );
    assert!(String::from_utf8_lossy(&exec.stderr).contains("command terminated with exit code 3"));
    // The image's files are there, and stderr comes back on its own channel.
    let exec = cluster
        .kubectl(&[
            "exec",
            &pod,
            "--",
            "sh",
            "-c",
            "cat marker.txt; echo oops >&2",
        ])
        .await;
    assert_eq!(exec.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "image python:3.12\n");
    assert_eq!(Cluster::exec_stderr(&exec), "oops\n");
    // A long-lived shell reading commands from stdin.
    let session = cluster
        .kubectl_with(
            &["exec", "-i", &pod, "--", "sh"],
            Some("x=41\necho $((x+1))\ncd /tmp && pwd\nexit 7\n"),
            "10s",
        )
        .await;
    assert_eq!(
        String::from_utf8_lossy(&session.stdout),
        "42\n/tmp\n",
        "{session:?}"
    );
    assert_eq!(
        session.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&session.stderr)
    );

    // `get pods -l` with the sandbox's tracking label.
    let hash = cluster
        .ok(&[
            "get",
            "pod",
            &pod,
            "-o",
            "jsonpath={.metadata.labels.agents\\.x-k8s\\.io/sandbox-name-hash}",
        ])
        .await;
    let selected = cluster
        .ok(&[
            "get",
            "pods",
            "-l",
            &format!("agents.x-k8s.io/sandbox-name-hash={hash}"),
            "-o",
            "name",
        ])
        .await;
    assert_eq!(selected.trim(), format!("pod/{pod}"));
    let table = cluster
        .ok(&["get", "pods", "-l", "agents.x-k8s.io/sandbox-name-hash"])
        .await;
    assert_eq!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert!(
        table
            .lines()
            .skip(1)
            .all(|l| l.contains("1/1") && l.contains("Running")),
        "{table}"
    );

    // Deleting the claim removes Sandbox, Pod (and with them the sandbox) by GC.
    let out = cluster.ok(&["delete", "sandboxclaim", "job-1"]).await;
    assert!(out.contains("deleted"), "{out}");
    let api = Api::new(&cluster.emulator);
    api.wait(
        &format!("/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/{sandbox}"),
        Duration::from_secs(20),
        |o| o.is_none(),
    )
    .await;
    api.wait(
        &format!("/api/v1/namespaces/default/pods/{pod}"),
        Duration::from_secs(20),
        |o| o.is_none(),
    )
    .await;
    // The pool refilled after the adoption: its two plus nothing else.
    api.wait(
        &format!("{EXT}/sandboxwarmpools/warm"),
        Duration::from_secs(20),
        |o| o.is_some_and(|p| p["status"]["readyReplicas"] == 2),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.emulator.running_pods() != 2 {
        assert!(
            Instant::now() < deadline,
            "{} pod sandboxes",
            cluster.emulator.running_pods()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_service_asked_for_is_reachable_by_claim_and_cleaned_up_with_the_claim() {
    let cluster = Cluster::with_image(Config {
        with_agent_sandbox: true,
        ..Config::default()
    })
    .await;
    let api = Api::new(&cluster.emulator);
    let mut t = crate::common::template("svc", "python:3.12", None);
    t["spec"]["service"] = serde_json::json!(true);
    t["spec"]["podTemplate"]["spec"]["containers"][0]["ports"] =
        serde_json::json!([{"containerPort": 8888, "name": "http"}]);
    api.create(&format!("{EXT}/sandboxtemplates"), t).await;
    api.create(
        &format!("{EXT}/sandboxwarmpools"),
        crate::common::pool("p", "svc", 1),
    )
    .await;
    api.create(
        &format!("{EXT}/sandboxclaims"),
        crate::common::claim("c", "p"),
    )
    .await;
    let claim = api
        .wait(
            &format!("{EXT}/sandboxclaims/c"),
            Duration::from_secs(20),
            |o| is_true(o, "Ready"),
        )
        .await
        .unwrap();
    let name = claim["status"]["sandbox"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let svc = api
        .get(&format!("/api/v1/namespaces/default/services/{name}"))
        .await
        .expect("service");
    assert_eq!(svc["spec"]["ports"][0]["port"], 8888);
    cluster.ok(&["delete", "sandboxclaim", "c"]).await;
    api.wait(
        &format!("/api/v1/namespaces/default/services/{name}"),
        Duration::from_secs(20),
        |o| o.is_none(),
    )
    .await;
    cluster.emulator.shutdown().await;
}
