//! The cluster around the controllers: scheduling, the kubelet's image cache and pulls,
//! DaemonSets, and what the Kubernetes driver relies on (access reviews and `--deny`,
//! namespaces, RuntimeClasses and Secrets, CRDs served only once applied, the
//! connection count), and `sandfleet devcluster k8s` leaving nothing behind.

use std::time::{Duration, Instant};

use crate::common::{Api, PODS, condition, events_of, image};
use reqwest::Method;
use sandfleet_emulator_k8s::{
    Config, DenyRule, Emulator, K8sArgs, NodeShape, PodRuntime, PullModel,
};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

fn pod(name: &str, image: &str, extra: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "t"}},
        "spec": {"containers": [{"name": "main", "image": image, "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
    });
    if let Some(spec) = extra.as_object() {
        for (k, v) in spec {
            p["spec"][k] = v.clone();
        }
    }
    p
}

async fn running(api: &Api, name: &str) -> Value {
    api.wait(&format!("{PODS}/{name}"), LIMIT, |o| {
        o.is_some_and(|p| p["status"]["phase"] == "Running")
    })
    .await
    .unwrap()
}

/// An emulator of plain pods that can run image `py` (kept while the
/// directory lives).
async fn plain_with_py() -> (tempfile::TempDir, Emulator) {
    let (dir, images) = image("py");
    let emulator = Emulator::start(Config {
        images,
        runtime: PodRuntime::Plain,
        ..Config::default()
    })
    .await
    .unwrap();
    (dir, emulator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_pull_of_an_image_on_a_node_pays_the_latency_and_later_pods_start_from_cache() {
    let (_dir, images) = image("py");
    let emulator = Emulator::start(Config {
        images,
        runtime: PodRuntime::Plain,
        pulls: PullModel {
            latency: Duration::from_millis(700),
            ..PullModel::default()
        },
        nodes: NodeShape {
            count: 1,
            cpu: "8".into(),
            memory: "8Gi".into(),
            pods: 10,
            disk: "10Gi".into(),
        },
        ..Config::default()
    })
    .await
    .unwrap();
    let api = Api::new(&emulator);
    api.create(PODS, pod("first", "py", json!({}))).await;
    let first = running(&api, "first").await;
    api.create(PODS, pod("second", "py", json!({}))).await;
    running(&api, "second").await;
    let pulled = events_of(&api, "first").await;
    let message = pulled
        .iter()
        .find(|(r, _)| r == "Pulled")
        .map(|(_, m)| m.clone())
        .expect("a Pulled event");
    let secs: f64 = message
        .trim_start_matches("Successfully pulled image \"py\" in ")
        .trim_end_matches('s')
        .parse()
        .expect(&message);
    assert!(secs >= 0.7, "{message}");
    assert!(
        pulled
            .iter()
            .any(|(r, m)| r == "Pulling" && m == "Pulling image \"py\""),
        "{pulled:?}"
    );
    let cached = events_of(&api, "second").await;
    assert!(
        cached.contains(&(
            "Pulled".into(),
            "Container image \"py\" already present on machine".into()
        )),
        "{cached:?}"
    );
    assert!(!cached.iter().any(|(r, _)| r == "Pulling"), "{cached:?}");
    // The node lists the image it now holds; the pod has a loopback address and status.
    let node = api.get("/api/v1/nodes/sandfleet-node-0").await.unwrap();
    assert_eq!(node["status"]["images"][0]["names"][0], "py");
    assert!(
        first["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("127.42.")
    );
    assert_eq!(first["status"]["hostIP"], "127.42.1.1");
    assert!(first["status"]["containerStatuses"][0]["state"]["running"].is_object());
    assert!(
        events_of(&api, "first")
            .await
            .iter()
            .any(|(r, m)| r == "Scheduled"
                && m == "Successfully assigned default/first to sandfleet-node-0")
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_pulls_one_image_at_a_time_each_at_its_size_over_the_bandwidth() {
    // Three images on one node of one pull slot: 100 ms plus 2 MiB at
    // 10 MiB/s each, so each pull takes at least 0.3 s, one at a time.
    let (_dir, one) = image("a");
    let source = one["a"].clone();
    let images = ["a", "b", "c"].map(|name| (name.to_string(), source.clone()));
    let emulator = Emulator::start(Config {
        images: images.into_iter().collect(),
        runtime: PodRuntime::Plain,
        pulls: PullModel {
            latency: Duration::from_millis(100),
            bandwidth: Some(10 << 20),
            sizes: ["a", "b", "c"]
                .map(|name| (name.to_string(), 2 << 20))
                .into(),
            per_node: Some(1),
        },
        nodes: NodeShape {
            count: 1,
            cpu: "8".into(),
            memory: "8Gi".into(),
            pods: 10,
            disk: "10Gi".into(),
        },
        ..Config::default()
    })
    .await
    .unwrap();
    let api = Api::new(&emulator);
    let created = std::time::Instant::now();
    for name in ["a", "b", "c"] {
        api.create(PODS, pod(name, name, json!({}))).await;
    }
    for name in ["a", "b", "c"] {
        running(&api, name).await;
        let message = events_of(&api, name)
            .await
            .into_iter()
            .find(|(reason, _)| reason == "Pulled")
            .map(|(_, message)| message)
            .expect("a Pulled event");
        // `in 0.300s (0.300s including waiting). Image size: 2097152 bytes.`
        let rest = message.split(" in ").nth(1).expect(&message);
        let seconds: f64 = rest[..rest.find('s').expect(&message)]
            .parse()
            .expect(&message);
        assert!(seconds >= 0.3, "{message}");
        assert!(message.ends_with("Image size: 2097152 bytes."), "{message}");
    }
    // One after another: the last pull cannot end before three have.
    let all_running = created.elapsed();
    assert!(
        all_running >= Duration::from_millis(900),
        "three pulls of 0.3 s ran in {all_running:?} on one slot"
    );
    assert_eq!(
        emulator.peak_pulls(),
        1,
        "two pulls ran at once on one node"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_with_no_directory_leaves_the_pod_pending_in_err_image_pull() {
    let (_dir, emulator) = plain_with_py().await;
    let api = Api::new(&emulator);
    // A bare name mapped to nothing: no registry is asked (a reference would be
    // pulled, with isolated pods; see the `oci` module, against a loopback registry).
    api.create(PODS, pod("nope", "none-such", json!({}))).await;
    let stuck = api
        .wait(&format!("{PODS}/nope"), LIMIT, |o| {
            o.is_some_and(|p| {
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                    == "ImagePullBackOff"
            })
        })
        .await
        .unwrap();
    assert_eq!(stuck["status"]["phase"], "Pending");
    let events = events_of(&api, "nope").await;
    assert!(
        events.iter().any(|(r, m)| r == "Failed"
            && m.starts_with("Failed to pull image \"none-such\": rpc error: code = NotFound")
            && m.contains("no directory or OCI image is mapped to it")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Failed" && m == "Error: ErrImagePull"),
        "{events:?}"
    );
    assert_eq!(emulator.running_pods(), 0);
    // Plain pods cannot run an OCI image; nothing is pulled.
    api.create(PODS, pod("oci", "127.0.0.1:9/team/tool:1", json!({})))
        .await;
    api.wait(&format!("{PODS}/oci"), LIMIT, |o| {
        o.is_some_and(|p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
        })
    })
    .await;
    let events = events_of(&api, "oci").await;
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Failed" && m.contains("OCI images run in isolated pods only")),
        "{events:?}"
    );
    // The server goes on serving, and other pods run.
    api.create(PODS, pod("fine", "py", json!({}))).await;
    running(&api, "fine").await;
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_bind_by_requests_and_selectors_and_wait_unschedulable_until_room_frees() {
    let (_dir, images) = image("py");
    let emulator = Emulator::start(Config {
        images,
        runtime: PodRuntime::Plain,
        nodes: NodeShape {
            count: 2,
            cpu: "2".into(),
            memory: "8Gi".into(),
            pods: 10,
            disk: "10Gi".into(),
        },
        ..Config::default()
    })
    .await
    .unwrap();
    let api = Api::new(&emulator);
    for i in 0..4 {
        api.create(PODS, pod(&format!("p{i}"), "py", json!({})))
            .await;
    }
    for i in 0..4 {
        running(&api, &format!("p{i}")).await;
    }
    let nodes: Vec<String> = api
        .list(PODS)
        .await
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        nodes.iter().filter(|n| *n == "sandfleet-node-0").count(),
        2,
        "{nodes:?}"
    );
    api.create(PODS, pod("extra", "py", json!({}))).await;
    let waiting = api
        .wait(&format!("{PODS}/extra"), LIMIT, |o| {
            o.and_then(|p| condition(p, "PodScheduled")).is_some()
        })
        .await
        .unwrap();
    let scheduled = condition(&waiting, "PodScheduled").unwrap();
    assert_eq!(scheduled["reason"], "Unschedulable");
    assert!(
        scheduled["message"]
            .as_str()
            .unwrap()
            .starts_with("0/2 nodes are available: 2 Insufficient cpu."),
        "{scheduled}"
    );
    let (code, _) = api.delete(&format!("{PODS}/p0")).await;
    assert_eq!(code, 200);
    running(&api, "extra").await;
    // A node selector no node matches.
    api.create(
        PODS,
        pod("picky", "py", json!({"nodeSelector": {"zone": "mars"}})),
    )
    .await;
    let picky = api
        .wait(&format!("{PODS}/picky"), LIMIT, |o| {
            o.and_then(|p| condition(p, "PodScheduled")).is_some()
        })
        .await
        .unwrap();
    assert!(
        condition(&picky, "PodScheduled").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("didn't match Pod's node affinity/selector")
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepull_daemonset_runs_one_pod_per_node_and_fills_every_nodes_cache() {
    let (_dir, images) = image("py");
    let emulator = Emulator::start(Config {
        images,
        runtime: PodRuntime::Plain,
        pulls: PullModel {
            latency: Duration::from_millis(200),
            ..PullModel::default()
        },
        ..Config::default()
    })
    .await
    .unwrap();
    let api = Api::new(&emulator);
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "prepull"},
        "spec": {"selector": {"matchLabels": {"app": "prepull"}}, "template": {"metadata": {"labels": {"app": "prepull"}}, "spec": {
            "initContainers": [{"name": "pull", "image": "py", "command": ["true"]}],
            "containers": [{"name": "pause", "image": "py"}],
        }}},
    });
    api.create("/apis/apps/v1/namespaces/default/daemonsets", ds)
        .await;
    api.wait(
        "/apis/apps/v1/namespaces/default/daemonsets/prepull",
        LIMIT,
        |o| {
            o.is_some_and(|d| {
                d["status"]["numberReady"] == 3 && d["status"]["desiredNumberScheduled"] == 3
            })
        },
    )
    .await;
    let pods = api.list(PODS).await;
    let mut nodes: Vec<&str> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap())
        .collect();
    nodes.sort_unstable();
    assert_eq!(
        nodes,
        ["sandfleet-node-0", "sandfleet-node-1", "sandfleet-node-2"]
    );
    for i in 0..3 {
        let node = api
            .get(&format!("/api/v1/nodes/sandfleet-node-{i}"))
            .await
            .unwrap();
        assert_eq!(node["status"]["images"][0]["names"][0], "py", "{node}");
    }
    // Pods after the pre-pull start from the cache on whichever node they land.
    api.create(PODS, pod("later", "py", json!({}))).await;
    running(&api, "later").await;
    assert!(events_of(&api, "later").await.contains(&(
        "Pulled".into(),
        "Container image \"py\" already present on machine".into()
    )));
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_reviews_answer_allowed_and_denied_and_denied_requests_get_403() {
    let emulator = Emulator::start(Config {
        with_agent_sandbox: true,
        deny: vec![
            "create:sandboxclaims.extensions.agents.x-k8s.io"
                .parse::<DenyRule>()
                .unwrap(),
        ],
        ..Config::default()
    })
    .await
    .unwrap();
    let api = Api::new(&emulator);
    let review = |verb: &str, resource: &str| {
        json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "group": "extensions.agents.x-k8s.io", "resource": resource}},
        })
    };
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (code, denied) = api
        .send(Method::POST, path, Some(review("create", "sandboxclaims")))
        .await;
    assert_eq!(code, 201, "{denied}");
    assert_eq!(denied["status"]["allowed"], false);
    assert_eq!(denied["spec"]["resourceAttributes"]["verb"], "create");
    let (_, allowed) = api
        .send(Method::POST, path, Some(review("list", "sandboxclaims")))
        .await;
    assert_eq!(allowed["status"]["allowed"], true);
    let (_, other) = api
        .send(
            Method::POST,
            path,
            Some(review("create", "sandboxwarmpools")),
        )
        .await;
    assert_eq!(other["status"]["allowed"], true);
    let (code, status) = api
        .send(
            Method::POST,
            &format!("{}/sandboxclaims", crate::common::EXT),
            Some(crate::common::claim("c", "p")),
        )
        .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden");
    assert!(status["message"].as_str().unwrap().contains("cannot create resource \"sandboxclaims\" in API group \"extensions.agents.x-k8s.io\" in the namespace \"default\""), "{status}");
    // Discovery says reviews are create-only.
    let (_, apis) = api
        .send(Method::GET, "/apis/authorization.k8s.io/v1", None)
        .await;
    assert_eq!(apis["resources"][0]["verbs"], json!(["create"]));
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_runtime_class_is_admitted_and_run_as_the_api_server_and_the_kubelet_do() {
    let (_dir, emulator) = plain_with_py().await;
    let api = Api::new(&emulator);
    // No such RuntimeClass: the admission plugin refuses the pod.
    let (code, status) = api
        .send(
            Method::POST,
            PODS,
            Some(pod("nope", "py", json!({"runtimeClassName": "gvisor"}))),
        )
        .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "pods \"nope\" is forbidden: pod rejected: RuntimeClass \"gvisor\" not found"
    );
    assert!(api.get(&format!("{PODS}/nope")).await.is_none());
    let class = |name: &str, handler: &str| {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
            "handler": handler, "overhead": {"podFixed": {"cpu": "250m", "memory": "32Mi"}}})
    };
    let classes = "/apis/node.k8s.io/v1/runtimeclasses";
    api.create(classes, class("gvisor", "runsc")).await;
    api.create(classes, class("standard", "runc")).await;
    // A class whose handler the nodes' runtime lacks: admitted, its overhead
    // set, and left Pending by the kubelet with the CRI's error.
    let admitted = api
        .create(
            PODS,
            pod("gvisor", "py", json!({"runtimeClassName": "gvisor"})),
        )
        .await;
    assert_eq!(
        admitted["spec"]["overhead"],
        json!({"cpu": "250m", "memory": "32Mi"})
    );
    let deadline = Instant::now() + LIMIT;
    let refused = loop {
        let events = events_of(&api, "gvisor").await;
        if let Some((_, message)) = events.iter().find(|(r, _)| r == "FailedCreatePodSandBox") {
            break message.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no FailedCreatePodSandBox: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(
        refused,
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \"runsc\" is configured"
    );
    // A handler it has: the pod runs.
    api.create(
        PODS,
        pod("standard", "py", json!({"runtimeClassName": "standard"})),
    )
    .await;
    running(&api, "standard").await;
    let stuck = api.get(&format!("{PODS}/gvisor")).await.unwrap();
    assert_eq!(stuck["status"]["phase"], "Pending", "{stuck}");
    // An overhead the pod states that is not its class's: refused.
    let (code, status) = api
        .send(
            Method::POST,
            PODS,
            Some(pod(
                "cheat",
                "py",
                json!({"runtimeClassName": "standard", "overhead": {"cpu": "1m"}}),
            )),
        )
        .await;
    assert_eq!(code, 403, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with(
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        ),
        "{status}"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_runtime_classes_secrets_and_crds_behave_as_a_real_server() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let api = Api::new(&emulator);
    // Into a namespace that does not exist: 404 naming the namespace.
    let (code, status) = api
        .send(
            Method::POST,
            "/api/v1/namespaces/ghost/secrets",
            Some(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})),
        )
        .await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["message"], "namespaces \"ghost\" not found");
    api.create(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ghost"}}),
    )
    .await;
    let secret = api.create("/api/v1/namespaces/ghost/secrets", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque", "data": {"token": "c2VjcmV0"}})).await;
    assert_eq!(secret["data"]["token"], "c2VjcmV0");
    let rc = api.create("/apis/node.k8s.io/v1/runtimeclasses", json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc"})).await;
    assert_eq!(rc["handler"], "runsc");
    assert_eq!(
        api.get("/apis/node.k8s.io/v1/runtimeclasses/gvisor")
            .await
            .unwrap()["handler"],
        "runsc"
    );
    // Without --with-agent-sandbox the CRDs are not served until applied.
    let (code, _) = api
        .send(
            Method::GET,
            "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes",
            None,
        )
        .await;
    assert_eq!(code, 404);
    let (_, groups) = api.send(Method::GET, "/apis", None).await;
    assert!(!groups.to_string().contains("agents.x-k8s.io"), "{groups}");
    // A v1alpha1-only CRD (an older controller's) serves v1alpha1 alone.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "sandboxes.agents.x-k8s.io"},
        "spec": {"group": "agents.x-k8s.io", "scope": "Namespaced", "names": {"plural": "sandboxes", "singular": "sandbox", "kind": "Sandbox", "listKind": "SandboxList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    api.create(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd,
    )
    .await;
    let (code, _) = api
        .send(
            Method::GET,
            "/apis/agents.x-k8s.io/v1alpha1/namespaces/default/sandboxes",
            None,
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = api
        .send(
            Method::GET,
            "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes",
            None,
        )
        .await;
    assert_eq!(code, 404);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_count_is_the_clients_connections_not_their_requests() {
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let before = emulator.connections();
    assert_eq!(before, 0);
    let api = Api::new(&emulator);
    // Two watches hold a connection each (HTTP/1.1); requests reuse a pooled one.
    let w1 = api
        .watch("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=5")
        .await;
    let w2 = api
        .watch("/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=5")
        .await;
    // hyper's pool may race one extra connect while the first request is in flight.
    for _ in 0..5 {
        api.get("/api/v1/namespaces").await.unwrap();
    }
    let held = emulator.connections();
    assert!((3..=4).contains(&held), "{held}");
    for _ in 0..50 {
        api.get("/api/v1/namespaces").await.unwrap();
    }
    let after = emulator.connections();
    // A count of requests would be 50 more; hyper may open one or two
    // while a finished request's connection is being returned to its pool.
    assert!(
        after <= held + 2,
        "50 sequential requests opened {} connections",
        after - held
    );
    let (_, debug) = api
        .send(Method::GET, "/debug/sandfleet/connections", None)
        .await;
    assert_eq!(
        debug["connections"].as_u64(),
        Some(emulator.connections() as u64)
    );
    let second = Api::new(&emulator);
    second.get("/api/v1/namespaces").await.unwrap();
    assert!(
        emulator.connections() > after,
        "a second client's connection is counted"
    );
    drop((w1, w2, second));
    drop(api);
    let deadline = Instant::now() + LIMIT;
    while emulator.connections() != 0 {
        assert!(
            Instant::now() < deadline,
            "{} connections stayed open",
            emulator.connections()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_k8s_prints_its_kubeconfig_and_removes_every_sandbox_at_shutdown() {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: K8sArgs,
    }
    let (image_dir, _) = image("py");
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let kubeconfig = work.path().join("kc");
    let cli = Cli::try_parse_from([
        "k8s".to_string(),
        "--nodes=2".into(),
        "--node-cpu=4".into(),
        format!("--image=py={}", image_dir.path().display()),
        "--runtime=plain".into(),
        format!("--state-dir={}", state.display()),
        format!("--write-kubeconfig={}", kubeconfig.display()),
        "--with-agent-sandbox".into(),
        "--deny=delete:namespaces".into(),
        "--pull-bandwidth=100Mi".into(),
        "--image-size=py=1Mi".into(),
        "--node-pulls=1".into(),
    ])
    .expect("flags parse");
    let pulls = cli.args.config().unwrap().pulls;
    assert_eq!(
        (pulls.bandwidth, pulls.sizes["py"], pulls.per_node),
        (Some(100 << 20), 1 << 20, Some(1))
    );
    let refused = Cli::try_parse_from(["k8s", "--image-size=py"])
        .err()
        .expect("a size without a name is refused")
        .to_string();
    assert!(
        refused.contains("--image-size") && refused.contains("NAME=QUANTITY"),
        "{refused}"
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(sandfleet_emulator_k8s::serve(cli.args, async move {
        let _ = stopped.await;
    }));
    let deadline = Instant::now() + LIMIT;
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "no kubeconfig written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    let token = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .to_string();
    let (kc, home) = (kubeconfig.clone(), work.path().join("home"));
    let run = move |args: Vec<String>| {
        std::process::Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &kc)
            .env("HOME", &home)
            .output()
            .unwrap()
    };
    let pods = (0..3).map(|i| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\nspec:\n  containers: [{{name: main, image: py}}]\n")).collect::<Vec<_>>().join("---\n");
    std::fs::write(work.path().join("pods.yaml"), pods).unwrap();
    let out = tokio::task::spawn_blocking({
        let run = run.clone();
        let file = work.path().join("pods.yaml");
        move || {
            run(vec![
                "apply".into(),
                "-f".into(),
                file.display().to_string(),
            ])
        }
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let nodes = tokio::task::spawn_blocking(move || {
        run(vec![
            "get".into(),
            "nodes".into(),
            "-o".into(),
            "name".into(),
        ])
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&nodes.stdout).lines().count(), 2);
    assert!(server.starts_with("https://127.0.0.1:"), "{server}");
    assert!(!token.is_empty());
    // Wait for the three sandboxes to exist on disk.
    let runs = state.join("runs");
    let count = || walkdir_count(&runs);
    let deadline = Instant::now() + LIMIT;
    while count() < 3 {
        assert!(
            Instant::now() < deadline,
            "sandboxes were not made: {}",
            count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(()).unwrap();
    served.await.unwrap().expect("serve ends cleanly");
    assert_eq!(count(), 0, "every sandbox was removed");
}

/// Sandbox directories under the state directory's runs.
fn walkdir_count(runs: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(runs) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|run| std::fs::read_dir(run.path().join("sandboxes")).ok())
        .map(|s| s.flatten().count())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_and_patches_get_a_status_and_the_server_keeps_serving() {
    let emulator = Emulator::start(Config {
        with_agent_sandbox: true,
        ..Config::default()
    })
    .await
    .unwrap();
    let api = Api::new(&emulator);
    let bad = [
        (
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            "{\"metadata\": ",
            400,
            "BadRequest",
        ),
        (
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            "application/yaml",
            "metadata: [unclosed",
            400,
            "BadRequest",
        ),
        (
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            "text/csv",
            "a,b",
            415,
            "UnsupportedMediaType",
        ),
        (
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/x",
            "application/apply-patch+yaml",
            "kind: [",
            400,
            "BadRequest",
        ),
        (
            Method::POST,
            "/apis/example.com/v1/namespaces/default/nopes",
            "application/json",
            "{}",
            404,
            "NotFound",
        ),
    ];
    for (method, path, content_type, body, code, reason) in bad {
        let resp = api
            .http
            .request(method.clone(), format!("{}{path}", api.base))
            .bearer_auth(&api.token)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status().as_u16(),
            code,
            "{method} {path} {content_type}"
        );
        let status: Value = resp.json().await.unwrap();
        assert_eq!(
            (status["kind"].as_str(), status["reason"].as_str()),
            (Some("Status"), Some(reason)),
            "{status}"
        );
        assert!(!status["message"].as_str().unwrap().is_empty());
    }
    // A claim failing its schema: required field, wrong type, bad enum.
    let claim = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim", "metadata": {"name": "c"},
        "spec": {"lifecycle": {"shutdownPolicy": "Sometimes", "ttlSecondsAfterFinished": "soon"}}});
    let (code, status) = api
        .send(
            Method::POST,
            &format!("{}/sandboxclaims", crate::common::EXT),
            Some(claim),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    let message = status["message"].as_str().unwrap();
    for field in [
        "spec.warmPoolRef: Required value",
        "spec.lifecycle.shutdownPolicy: Unsupported value: \"Sometimes\"",
        "spec.lifecycle.ttlSecondsAfterFinished",
    ] {
        assert!(message.contains(field), "{field} in {message}");
    }
    assert!(
        api.get("/api/v1/namespaces/default").await.is_some(),
        "still serving"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_older_than_the_event_ttl_are_deleted_and_newer_ones_kept() {
    let emulator = Emulator::start(Config {
        event_ttl: Duration::from_secs(20),
        ..Config::default()
    })
    .await
    .unwrap();
    let api = Api::new(&emulator);
    let event = |name: &str, at: std::time::SystemTime| {
        let at = humantime::format_rfc3339_seconds(at).to_string();
        json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Tested", "message": "m", "type": "Normal",
            "firstTimestamp": at, "lastTimestamp": at, "count": 1,
        })
    };
    let now = std::time::SystemTime::now();
    let events = "/api/v1/namespaces/default/events";
    api.create(events, event("old", now - Duration::from_secs(7200)))
        .await;
    api.create(events, event("new", now)).await;
    api.wait(&format!("{events}/old"), LIMIT, |event| event.is_none())
        .await;
    // The sweep that deleted the expired one kept it.
    assert!(api.get(&format!("{events}/new")).await.is_some());
    emulator.shutdown().await;
}

/// Every exec websocket is a TLS connection of its own: a client that comes
/// back resumes its session from a ticket, as Go's servers issue them,
/// instead of a full handshake, also after other clients made more
/// connections than a server-side session cache would hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sessions_resume_from_tickets_after_a_burst_of_other_clients() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let _ = rustls::crypto::ring::default_provider().install_default();
    let emulator = Emulator::start(Config::default()).await.unwrap();
    let client = || {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(emulator.ca_pem().as_bytes()).unwrap())
            .unwrap();
        std::sync::Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    let address = emulator.url().trim_start_matches("https://").to_string();
    let connect = |config: std::sync::Arc<rustls::ClientConfig>| {
        let address = address.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
            let host = address.rsplit_once(':').unwrap().0.to_string();
            let mut tls = tokio_rustls::TlsConnector::from(config)
                .connect(ServerName::try_from(host).unwrap(), tcp)
                .await
                .unwrap();
            // TLS 1.3 tickets come after the handshake: read to the end.
            tls.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let _ = tls.read_to_end(&mut Vec::new()).await;
            tls.get_ref().1.handshake_kind()
        }
    };
    let returning = client();
    assert_eq!(
        connect(returning.clone()).await,
        Some(rustls::HandshakeKind::Full)
    );
    // Other clients, more connections than rustls's default cache of 256
    // sessions holds.
    for _ in 0..6 {
        let burst: Vec<_> = (0..50).map(|_| tokio::spawn(connect(client()))).collect();
        for connection in burst {
            connection.await.unwrap();
        }
    }
    assert_eq!(
        connect(returning).await,
        Some(rustls::HandshakeKind::Resumed)
    );
    emulator.shutdown().await;
}
