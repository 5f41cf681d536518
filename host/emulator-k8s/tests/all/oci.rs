//! Pods of OCI images, pulled for real from a registry on loopback (Debian's
//! `docker-registry`, started by the tests) into the local backend's layer store:
//! the pod runs the image's programs and sees its files, not the host's; an image's
//! `Entrypoint`/`Cmd` when the pod names no command; `imagePullPolicy` as Kubernetes
//! defaults and honours it; a missing tag in `ErrImagePull` then `ImagePullBackOff`,
//! pulled once the registry has it; `Never` and an absent image in
//! `ErrImageNeverPull` without asking any registry; a pre-pull DaemonSet that pulls
//! on every node; and agent-sandbox's pods of an image, exec'd into over the wire.

use std::time::{Duration, Instant};

use crate::common::{Api, PODS, SB, events_of, is_true};
use sandfleet_emulator_k8s::{Config, Emulator, K8sArgs, NodeShape, PullModel};
use sandfleet_registry_testing::host::programs;
use sandfleet_registry_testing::image::{Built, Layer, Tar, build_with, push};
use sandfleet_registry_testing::registry::{Auth, Registry, free_port};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// The image the tests push: a shell and a few programs, `/etc/motd` of its own,
/// workdir `/work`, and `Cmd` printing the motd.
fn tool_image() -> Built {
    tool_image_saying(b"from the image\n")
}

/// The tool image with `motd` as its `/etc/motd`.
fn tool_image_saying(motd: &[u8]) -> Built {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let programs = Layer::gzip(programs(&["sh", "cat", "ls", "sleep", "true"]).finish());
    let own = Layer::gzip(
        Tar::new()
            .dir("etc", 0o755)
            .file("etc/motd", motd)
            .dir("work", 0o755)
            .file("work/data.txt", b"image data\n")
            .finish(),
    );
    build_with(
        &[programs, own],
        architecture,
        None,
        json!({
            "Env": ["PATH=/usr/bin:/bin", "FROM_IMAGE=yes"],
            "WorkingDir": "/work",
            "Cmd": ["cat", "/etc/motd"],
        }),
    )
}

async fn registry_with_tool() -> (Registry, String) {
    let registry = Registry::start(Auth::None).await;
    push(&registry, "k8s/tool", "1", &tool_image()).await;
    let reference = format!("{}/k8s/tool:1", registry.host);
    (registry, reference)
}

async fn cluster(nodes: usize, pull_latency: Duration) -> (Emulator, Api) {
    let emulator = Emulator::start(Config {
        with_agent_sandbox: true,
        pulls: PullModel {
            latency: pull_latency,
            ..PullModel::default()
        },
        nodes: NodeShape {
            count: nodes,
            cpu: "8".into(),
            memory: "8Gi".into(),
            pods: 20,
            disk: "10Gi".into(),
        },
        ..Config::default()
    })
    .await
    .expect("the emulator starts");
    let api = Api::new(&emulator);
    (emulator, api)
}

fn pod(name: &str, image: &str, container: Value) -> Value {
    let mut main = json!({"name": "main", "image": image, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}});
    for (k, v) in container.as_object().into_iter().flatten() {
        main[k] = v.clone();
    }
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [main]},
    })
}

/// The events of `name` once they include every one of `wanted` (the kubelet records
/// them just after the status it reports).
async fn events_including(
    api: &Api,
    name: &str,
    wanted: &[(&str, String)],
) -> Vec<(String, String)> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let events = events_of(api, name).await;
        if wanted
            .iter()
            .all(|(r, m)| events.iter().any(|(er, em)| er == r && em == m))
        {
            return events;
        }
        assert!(Instant::now() < deadline, "{wanted:?} not among {events:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn finished(api: &Api, name: &str) -> Value {
    api.wait(&format!("{PODS}/{name}"), LIMIT, |o| {
        o.is_some_and(|p| matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
    })
    .await
    .unwrap()
}

async fn log(api: &Api, name: &str) -> String {
    match api.get(&format!("{PODS}/{name}/log")).await {
        Some(Value::String(text)) => text,
        other => panic!("log of {name}: {other:?}"),
    }
}

async fn waiting_reason(api: &Api, name: &str, reason: &str) -> Value {
    api.wait(&format!("{PODS}/{name}"), LIMIT, |o| {
        o.is_some_and(|p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == reason
        })
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_a_pushed_image_runs_its_programs_on_its_files_with_the_pull_latency_on_top() {
    let (_registry, reference) = registry_with_tool().await;
    let (emulator, api) = cluster(1, Duration::from_millis(300)).await;
    let script = "cat /etc/motd; cat data.txt; pwd; echo $FROM_IMAGE; \
                  if [ -e /etc/os-release ]; then echo host; else echo not-host; fi; ls /usr/bin";
    api.create(
        PODS,
        pod(
            "first",
            &reference,
            json!({"command": ["sh", "-c", script]}),
        ),
    )
    .await;
    let first = finished(&api, "first").await;
    assert_eq!(first["status"]["phase"], "Succeeded", "{first}");
    assert_eq!(
        log(&api, "first").await,
        "from the image\nimage data\n/work\nyes\nnot-host\ncat\ndash\nls\nsh\nsleep\ntrue\n"
    );
    // A tagged reference defaults to IfNotPresent; the pull is real, the
    // latency comes on top, and the kubelet's words report it.
    assert_eq!(
        first["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    let events = events_of(&api, "first").await;
    assert!(
        events.contains(&("Pulling".into(), format!("Pulling image \"{reference}\""))),
        "{events:?}"
    );
    let pulled = events
        .iter()
        .find(|(r, _)| r == "Pulled")
        .map(|(_, m)| m.clone())
        .expect("a Pulled event");
    let prefix = format!("Successfully pulled image \"{reference}\" in ");
    let secs: f64 = pulled
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split('s').next())
        .and_then(|n| n.parse().ok())
        .expect(&pulled);
    assert!(secs >= 0.3, "{pulled}");
    assert!(
        pulled.contains("including waiting). Image size: "),
        "{pulled}"
    );
    let image_id = first["status"]["containerStatuses"][0]["imageID"]
        .as_str()
        .unwrap();
    let repo = reference.trim_end_matches(":1");
    assert!(
        image_id.starts_with(&format!("{repo}@sha256:")),
        "{image_id}"
    );
    let node = api.get("/api/v1/nodes/sandfleet-node-0").await.unwrap();
    assert!(
        node["status"]["images"][0]["names"]
            .as_array()
            .unwrap()
            .contains(&json!(reference)),
        "{node}"
    );
    assert!(
        node["status"]["images"][0]["sizeBytes"].as_u64().unwrap() > 0,
        "{node}"
    );

    // No command: the image's Cmd runs; the node has it now.
    api.create(PODS, pod("cmd", &reference, json!({}))).await;
    assert_eq!(finished(&api, "cmd").await["status"]["phase"], "Succeeded");
    assert_eq!(log(&api, "cmd").await, "from the image\n");
    events_including(
        &api,
        "cmd",
        &[(
            "Pulled",
            format!("Container image \"{reference}\" already present on machine"),
        )],
    )
    .await;
    // Args alone replace the Cmd.
    api.create(
        PODS,
        pod(
            "args",
            &reference,
            json!({"command": ["cat"], "args": ["data.txt"]}),
        ),
    )
    .await;
    finished(&api, "args").await;
    assert_eq!(log(&api, "args").await, "image data\n");
    // Always asks the registry again, present or not.
    api.create(
        PODS,
        pod(
            "always",
            &reference,
            json!({"imagePullPolicy": "Always", "command": ["true"]}),
        ),
    )
    .await;
    api.wait(&format!("{PODS}/always"), LIMIT, |o| {
        o.is_some_and(|p| p["status"]["phase"] != "Pending")
    })
    .await;
    let events = events_of(&api, "always").await;
    assert!(events.iter().any(|(r, _)| r == "Pulling"), "{events:?}");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_tag_backs_off_until_the_registry_has_it_and_never_asks_no_registry() {
    let registry = Registry::start(Auth::None).await;
    let missing = format!("{}/k8s/tool:2", registry.host);
    let (emulator, api) = cluster(1, Duration::ZERO).await;
    api.create(
        PODS,
        pod("later", &missing, json!({"command": ["cat", "/etc/motd"]})),
    )
    .await;
    let pulling = waiting_reason(&api, "later", "ErrImagePull").await;
    let message = pulling["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with(&format!(
            "rpc error: code = NotFound desc = failed to pull and unpack image \"{missing}\": failed to resolve reference \"{missing}\": "
        )),
        "{message}"
    );
    assert!(
        message.contains(&registry.host) && message.contains("404"),
        "{message}"
    );
    let stuck = waiting_reason(&api, "later", "ImagePullBackOff").await;
    assert_eq!(stuck["status"]["phase"], "Pending");
    events_including(
        &api,
        "later",
        &[
            (
                "Failed",
                format!("Failed to pull image \"{missing}\": {message}"),
            ),
            ("Failed", "Error: ErrImagePull".to_string()),
            ("BackOff", format!("Back-off pulling image \"{missing}\"")),
            ("Failed", "Error: ImagePullBackOff".to_string()),
        ],
    )
    .await;
    assert_eq!(emulator.running_pods(), 0);
    // The kubelet tries again with back-off: once the tag is pushed, the pod runs.
    push(&registry, "k8s/tool", "2", &tool_image()).await;
    let done = finished(&api, "later").await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done}");
    assert_eq!(log(&api, "later").await, "from the image\n");

    // Never, and the node lacks it: no registry is asked (nothing listens there).
    let nowhere = format!("127.0.0.1:{}/k8s/none:1", free_port());
    api.create(
        PODS,
        pod(
            "never",
            &nowhere,
            json!({"imagePullPolicy": "Never", "command": ["true"]}),
        ),
    )
    .await;
    let never = waiting_reason(&api, "never", "ErrImageNeverPull").await;
    let expected =
        format!("Container image \"{nowhere}\" is not present with pull policy of Never");
    assert_eq!(
        never["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        json!(expected)
    );
    let events = events_including(
        &api,
        "never",
        &[
            ("ErrImageNeverPull", expected),
            ("Failed", "Error: ErrImageNeverPull".into()),
        ],
    )
    .await;
    assert!(!events.iter().any(|(r, _)| r == "Pulling"), "{events:?}");
    // Untagged and :latest default to Always, as Kubernetes defaults them.
    for (name, image) in [
        ("untagged", format!("127.0.0.1:{}/k8s/x", free_port())),
        ("latest", format!("127.0.0.1:{}/k8s/x:latest", free_port())),
    ] {
        let made = api
            .create(PODS, pod(name, &image, json!({"command": ["true"]})))
            .await;
        assert_eq!(
            made["spec"]["containers"][0]["imagePullPolicy"], "Always",
            "{made}"
        );
    }
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepull_daemonset_pulls_on_every_node_and_sandboxes_of_the_image_exec_over_the_wire() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::AttachParams;

    let (_registry, reference) = registry_with_tool().await;
    let (emulator, api) = cluster(2, Duration::ZERO).await;
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "prepull"},
        "spec": {"selector": {"matchLabels": {"app": "prepull"}}, "template": {"metadata": {"labels": {"app": "prepull"}}, "spec": {
            "initContainers": [{"name": "pull", "image": reference, "command": ["true"]}],
            "containers": [{"name": "pause", "image": reference, "command": ["sleep", "3600"]}],
        }}},
    });
    api.create("/apis/apps/v1/namespaces/default/daemonsets", ds)
        .await;
    api.wait(
        "/apis/apps/v1/namespaces/default/daemonsets/prepull",
        LIMIT,
        |o| {
            o.is_some_and(|d| {
                d["status"]["numberReady"] == 2 && d["status"]["desiredNumberScheduled"] == 2
            })
        },
    )
    .await;
    for i in 0..2 {
        let node = api
            .get(&format!("/api/v1/nodes/sandfleet-node-{i}"))
            .await
            .unwrap();
        assert!(
            node["status"]["images"][0]["names"]
                .as_array()
                .unwrap()
                .contains(&json!(reference)),
            "{node}"
        );
    }
    // agent-sandbox's Sandbox of the image: its pod starts from the node's cache,
    // and an exec over the websocket runs in the image.
    let sandbox = json!({
        "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": "box"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": reference, "command": ["sleep", "3600"]}]}}},
    });
    api.create(SB, sandbox).await;
    api.wait(&format!("{SB}/box"), LIMIT, |o| is_true(o, "Ready"))
        .await;
    let pod_name = "box";
    events_including(
        &api,
        pod_name,
        &[(
            "Pulled",
            format!("Container image \"{reference}\" already present on machine"),
        )],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    emulator.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let pods: kube::Api<Pod> =
        kube::Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let mut session = pods
        .exec(
            pod_name,
            ["sh", "-c", "cat /etc/motd; pwd"],
            &AttachParams::default().stdout(true).stderr(false),
        )
        .await
        .unwrap();
    let mut stdout = session.stdout().unwrap();
    let mut out = String::new();
    let deadline = Instant::now() + LIMIT;
    tokio::time::timeout_at(
        deadline.into(),
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut out),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out, "from the image\n/work\n");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_from_maps_names_to_references_beside_directories_and_a_bare_miss_pulls_nothing() {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: K8sArgs,
    }
    let (_registry, reference) = registry_with_tool().await;
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("calc")).unwrap();
    std::fs::write(work.path().join("calc/marker.txt"), "a directory image\n").unwrap();
    let fleet = work.path().join("fleet.toml");
    std::fs::write(
        &fleet,
        format!(
            "[[clusters]]\nname = \"dev\"\nbackend = \"local\"\n\n[clusters.dev.images]\n\
             calc = \"calc\"\ntool = {{ oci = \"{reference}\" }}\n"
        ),
    )
    .unwrap();
    let cli = Cli::try_parse_from([
        "k8s".to_string(),
        "--nodes=1".into(),
        format!("--images-from={}", fleet.display()),
        format!("--state-dir={}", work.path().join("state").display()),
    ])
    .unwrap();
    let emulator = Emulator::start(cli.args.config().unwrap()).await.unwrap();
    let api = Api::new(&emulator);
    api.create(
        PODS,
        pod("tool", "tool", json!({"command": ["cat", "/etc/motd"]})),
    )
    .await;
    assert_eq!(finished(&api, "tool").await["status"]["phase"], "Succeeded");
    assert_eq!(log(&api, "tool").await, "from the image\n");
    api.create(
        PODS,
        pod("calc", "calc", json!({"command": ["cat", "marker.txt"]})),
    )
    .await;
    let calc = finished(&api, "calc").await;
    assert_eq!(calc["status"]["phase"], "Succeeded", "{calc}");
    assert_eq!(
        calc["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(log(&api, "calc").await, "a directory image\n");
    // A bare name mapped to nothing is no reference: nothing is pulled, no
    // registry (docker.io) is asked, and the pod waits in ErrImagePull.
    api.create(PODS, pod("typo", "toool", json!({"command": ["true"]})))
        .await;
    let typo = waiting_reason(&api, "typo", "ErrImagePull").await;
    let message = typo["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("no directory or OCI image is mapped to it"),
        "{message}"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_follows_a_moved_tag_and_if_not_present_keeps_the_nodes_image() {
    let registry = Registry::start(Auth::None).await;
    push(&registry, "k8s/moving", "1", &tool_image_saying(b"first\n")).await;
    let reference = format!("{}/k8s/moving:1", registry.host);
    let (emulator, api) = cluster(1, Duration::ZERO).await;
    let run = |name: &str, policy: &str| {
        pod(
            name,
            &reference,
            json!({"imagePullPolicy": policy, "command": ["cat", "/etc/motd"]}),
        )
    };
    api.create(PODS, run("before", "IfNotPresent")).await;
    finished(&api, "before").await;
    assert_eq!(log(&api, "before").await, "first\n");
    let first_id = api.get(&format!("{PODS}/before")).await.unwrap()["status"]["containerStatuses"]
        [0]["imageID"]
        .clone();
    push(
        &registry,
        "k8s/moving",
        "1",
        &tool_image_saying(b"second\n"),
    )
    .await;
    // IfNotPresent: the node has the tag, the registry is not asked.
    api.create(PODS, run("cached", "IfNotPresent")).await;
    finished(&api, "cached").await;
    assert_eq!(log(&api, "cached").await, "first\n");
    // Always: the registry is asked, and the moved tag's image runs.
    api.create(PODS, run("moved", "Always")).await;
    let moved = finished(&api, "moved").await;
    assert_eq!(log(&api, "moved").await, "second\n");
    assert_ne!(moved["status"]["containerStatuses"][0]["imageID"], first_id);
    emulator.shutdown().await;
}

/// A pod of the tool image whose init containers run `init` (one `sh -c`
/// script each) with an `emptyDir` at `/shared`, then whose main container
/// prints what they left there.
fn pod_with_init(name: &str, image: &str, restart: &str, init: &[&str]) -> Value {
    let mount = json!([{"name": "shared", "mountPath": "/shared"}]);
    let init: Vec<Value> = init
        .iter()
        .enumerate()
        .map(|(i, script)| {
            json!({"name": format!("init-{i}"), "image": image, "command": ["sh", "-c", script], "volumeMounts": mount})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": init,
            "containers": [{"name": "main", "image": image, "command": ["sh", "-c", "cat /shared/*"],
                            "volumeMounts": [{"name": "shared", "mountPath": "/shared", "readOnly": true}]}],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_and_hand_files_to_the_main_one_through_an_empty_dir() {
    let (_registry, reference) = registry_with_tool().await;
    let (emulator, api) = cluster(1, Duration::ZERO).await;
    api.create(
        PODS,
        pod_with_init(
            "handed",
            &reference,
            "Never",
            &[
                "echo first > /shared/a",
                // The second sees what the first wrote.
                "cat /shared/a > /shared/b; echo second >> /shared/b; echo init-log",
            ],
        ),
    )
    .await;
    let handed = finished(&api, "handed").await;
    assert_eq!(handed["status"]["phase"], "Succeeded", "{handed}");
    assert_eq!(log(&api, "handed").await, "first\nfirst\nsecond\n");
    let init_log = api
        .get(&format!("{PODS}/handed/log?container=init-1"))
        .await;
    assert_eq!(init_log, Some(Value::String("init-log\n".into())));

    // A failing init container fails a pod that is never restarted, with its
    // exit code; the main container never runs.
    api.create(
        PODS,
        pod_with_init(
            "broken",
            &reference,
            "Never",
            &[
                "echo ok > /shared/a",
                "echo cannot >&2; exit 3",
                "echo never",
            ],
        ),
    )
    .await;
    let broken = finished(&api, "broken").await;
    assert_eq!(broken["status"]["phase"], "Failed", "{broken}");
    let statuses = &broken["status"]["initContainerStatuses"];
    assert_eq!(statuses[0]["state"]["terminated"]["reason"], "Completed");
    assert_eq!(statuses[1]["state"]["terminated"]["exitCode"], 3);
    assert_eq!(statuses[1]["state"]["terminated"]["message"], "cannot");
    assert_eq!(statuses[2]["state"]["waiting"]["reason"], "PodInitializing");
    assert_eq!(
        broken["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let (code, refusal) = api
        .send(reqwest::Method::GET, &format!("{PODS}/broken/log"), None)
        .await;
    assert_eq!(code, 400, "{refusal}");
    assert_eq!(
        refusal["message"],
        "container \"main\" in pod \"broken\" is waiting to start: PodInitializing"
    );

    // Restarted pods wait in CrashLoopBackOff instead, Pending.
    api.create(
        PODS,
        pod_with_init("looping", &reference, "Always", &["exit 1"]),
    )
    .await;
    let looping = api
        .wait(&format!("{PODS}/looping"), LIMIT, |o| {
            o.is_some_and(|p| {
                p["status"]["initContainerStatuses"][0]["state"]["waiting"]["reason"]
                    == "CrashLoopBackOff"
            })
        })
        .await
        .unwrap();
    assert_eq!(looping["status"]["phase"], "Pending", "{looping}");
    assert_eq!(
        looping["status"]["initContainerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        1
    );
    events_including(
        &api,
        "looping",
        &[(
            "BackOff",
            "Back-off restarting failed container init-0 in pod looping".into(),
        )],
    )
    .await;
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_own_process_writes_past_its_storage_limit_is_evicted() {
    let (_registry, reference) = registry_with_tool().await;
    let (emulator, api) = cluster(1, Duration::ZERO).await;
    // The main process itself (not an exec) fills the sandbox's layer.
    let script =
        "i=0; while [ $i -lt 200 ]; do cat /bin/sh >> /work/big; i=$((i+1)); done; sleep 60";
    api.create(
        PODS,
        pod(
            "filler",
            &reference,
            json!({"command": ["sh", "-c", script],
                   "resources": {"limits": {"ephemeral-storage": "4Mi"}}}),
        ),
    )
    .await;
    let evicted = finished(&api, "filler").await;
    assert_eq!(evicted["status"]["phase"], "Failed", "{evicted}");
    assert_eq!(evicted["status"]["reason"], "Evicted", "{evicted}");
    assert_eq!(
        evicted["status"]["message"],
        "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. "
    );
    events_including(
        &api,
        "filler",
        &[(
            "Evicted",
            "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. ".into(),
        )],
    )
    .await;
    emulator.shutdown().await;
}
