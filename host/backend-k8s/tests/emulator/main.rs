//! The driver against the Kubernetes emulator over loopback HTTPS: the
//! real agent-sandbox flow (templates and pools by server-side apply, claims
//! made ready by the shared watch, pods that are local sandboxes), exec over
//! the pods/exec websocket, files, preflight and its one-line failures,
//! capacity, and reaps scoped to their run; images without a shell
//! (`distroless`).

mod distroless;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::node::v1::RuntimeClass;
use sandfleet_backend_k8s::{ExecMode, K8sBackend, K8sClients, K8sConfig};
use sandfleet_core::{
    Backend, BackendError, ErrorKind, ExecRequest, ExecResult, LABEL_TASK, Recycling, RunId,
    SandboxHandle, TemplateRef, TemplateSpec, WarmPools, template_name,
};
use sandfleet_emulator_k8s::{CONTEXT, Config, DenyRule, Emulator, ImageMap, MARKER_ENV, Tuning};

/// The image every test sandbox is made of.
const IMAGE: &str = "calc";

struct Cluster {
    /// Serving until the test ends.
    emulator: Emulator,
    dir: tempfile::TempDir,
}

fn images() -> ImageMap {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/images/calc");
    let source: sandfleet_backend_local::ImageSource =
        toml::from_str(&format!("path = {:?}", path.display().to_string())).unwrap();
    ImageMap::from([(IMAGE.to_string(), source)])
}

impl Cluster {
    async fn start(config: Config) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let emulator = Emulator::start(Config {
            images: images(),
            tuning: Tuning {
                cold_start_after: Duration::from_millis(200),
                ..Tuning::default()
            },
            ..config
        })
        .await
        .expect("the emulator starts");
        let dir = tempfile::tempdir().unwrap();
        emulator
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .unwrap();
        Cluster { emulator, dir }
    }

    async fn agent_sandbox() -> Self {
        Self::start(Config {
            with_agent_sandbox: true,
            ..Config::default()
        })
        .await
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn config(&self) -> K8sConfig {
        K8sConfig {
            kubeconfig: Some(self.kubeconfig()),
            context: Some(CONTEXT.into()),
            ..K8sConfig::default()
        }
    }

    fn backend(&self, config: K8sConfig) -> K8sBackend {
        K8sBackend::new("dev", config, &K8sClients::new()).unwrap()
    }

    /// A kube client of the test's own, to look at what the driver made.
    async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

fn spec(run: &RunId) -> TemplateSpec {
    TemplateSpec {
        name: template_name(run, IMAGE),
        image: IMAGE.into(),
        cpu_milli: 100,
        memory_mib: 64,
        disk_mib: 64,
        network: false,
        env: [("GREETING".to_string(), "hi".to_string())].into(),
        labels: run.labels(),
    }
}

fn command(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        timeout: Duration::from_secs(20),
        ..ExecRequest::default()
    }
}

fn sh(script: &str) -> ExecRequest {
    command(&["sh", "-c", script])
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

async fn warm_template(backend: &K8sBackend, run: &RunId, replicas: u32) -> TemplateRef {
    let template = backend.ensure_template(&spec(run)).await.unwrap();
    if replicas > 0 {
        backend
            .warm(&template, replicas, &run.labels())
            .await
            .unwrap();
        let status = backend
            .wait_pool_ready(&template, replicas, soon())
            .await
            .unwrap();
        assert!(status.ready >= replicas, "{status:?}");
    }
    template
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_claim_runs_commands_over_one_session_with_exit_codes_streams_stdin_and_files() {
    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(cluster.config());
    assert!(
        backend.preflight().await.failures.is_empty(),
        "{:?}",
        backend.preflight().await
    );
    let run = RunId::new("run-a").unwrap();
    let template = warm_template(&backend, &run, 1).await;
    let mut labels = run.labels();
    labels.insert(LABEL_TASK.into(), "task-1".into());
    let handle = backend.claim(&template, &labels, soon()).await.unwrap();
    // A warm sandbox keeps the pool's generated name; the handle reads it
    // from the claim's status and the pod from the annotation.
    assert!(handle.hostname.starts_with(&template.name), "{handle:?}");
    assert!(
        handle.endpoint.as_deref().unwrap().starts_with("127.42."),
        "{handle:?}"
    );

    let out = backend
        .exec(&handle, &sh("echo out; echo err >&2; exit 3"), None)
        .await
        .unwrap();
    assert_eq!(
        (out.exit_code, &out.stdout[..], &out.stderr[..]),
        (3, &b"out\n"[..], &b"err\n"[..])
    );
    let merged = ExecRequest {
        merge_stderr: true,
        ..sh("echo a; echo b >&2; echo c")
    };
    let out = backend.exec(&handle, &merged, None).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\nb\nc\n");
    assert!(out.stderr.is_empty());
    // Environment, workdir, stdin (binary) and no trailing newline.
    let request = ExecRequest {
        env: vec![("X".into(), "it's \"quoted\"".into())],
        workdir: Some("/tmp".into()),
        stdin: Some(vec![0, 1, 2, 255, b'\n', b'%']),
        ..sh("printf '%s|' \"$X\" \"$PWD\" \"$GREETING\"; od -An -tu1 | tr -s ' '")
    };
    let out = backend.exec(&handle, &request, None).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "it's \"quoted\"|/tmp|hi| 0 1 2 255 10 37\n"
    );
    let out = backend
        .exec(&handle, &command(&["printf", "no newline"]), None)
        .await
        .unwrap();
    assert_eq!(out.stdout, b"no newline");
    // A request's PATH is the one its program is looked for on; a name no
    // shell exports is refused before anything runs.
    let own_path = ExecRequest {
        env: vec![("PATH".into(), "/nowhere".into())],
        ..command(&["true"])
    };
    let out = backend.exec(&handle, &own_path, None).await.unwrap();
    assert_eq!(out.exit_code, 127, "{out:?}");
    let bad_name = ExecRequest {
        env: vec![("A-B".into(), "1".into())],
        ..command(&["true"])
    };
    let refused = backend.exec(&handle, &bad_name, None).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Invalid, "{refused}");
    assert!(refused.message().contains("`A-B`"), "{refused}");

    // A timeout kills the command's whole process group.
    let slow = ExecRequest {
        timeout: Duration::from_millis(500),
        ..sh("sleep 30 & echo $! > /tmp/child; sleep 30")
    };
    let out = backend.exec(&handle, &slow, None).await.unwrap();
    assert!(out.timed_out && out.exit_code == -1, "{out:?}");
    let child = backend.get_file(&handle, "/tmp/child").await.unwrap();
    let child = String::from_utf8(child).unwrap();
    let alive = backend
        .exec(
            &handle,
            &sh(&format!(
                "kill -0 {} 2>/dev/null && echo alive || echo gone",
                child.trim()
            )),
            None,
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&alive.stdout), "gone\n");

    // Files: binary, larger than one websocket frame, with parents made.
    let contents: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 256) as u8).collect();
    backend
        .put_file(&handle, "/tmp/deep/dir/blob.bin", &contents, 0o640)
        .await
        .unwrap();
    assert_eq!(
        backend
            .get_file(&handle, "/tmp/deep/dir/blob.bin")
            .await
            .unwrap(),
        contents
    );
    let mode = backend
        .exec(
            &handle,
            &command(&["stat", "-c", "%a", "/tmp/deep/dir/blob.bin"]),
            None,
        )
        .await
        .unwrap();
    assert_eq!(mode.stdout, b"640\n");
    let missing = backend.get_file(&handle, "/tmp/none").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");

    backend.release(&handle).await.unwrap();
    backend.release(&handle).await.unwrap();
    let lost = backend
        .renew(&handle, Duration::from_secs(600))
        .await
        .unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::SandboxLost, "{lost}");
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_claims_bind_through_an_empty_pool_and_one_shot_exec_gives_the_status_channels_code() {
    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(K8sConfig {
        exec: ExecMode::Oneshot,
        ..cluster.config()
    });
    let run = RunId::new("run-cold").unwrap();
    let template = warm_template(&backend, &run, 0).await;
    let handle = backend
        .claim(&template, &run.labels(), soon())
        .await
        .unwrap();
    // A cold sandbox is named like its claim.
    assert_eq!(handle.hostname, handle.id);
    let out = backend
        .exec(&handle, &sh("echo cold; exit 7"), None)
        .await
        .unwrap();
    assert_eq!((out.exit_code, &out.stdout[..]), (7, &b"cold\n"[..]));
    backend.release(&handle).await.unwrap();
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_claims_shares_one_api_connection_and_sessions_upgrade_beside_it() {
    let cluster = Cluster::agent_sandbox().await;
    let backend = Arc::new(cluster.backend(cluster.config()));
    let run = RunId::new("run-burst").unwrap();
    let template = warm_template(&backend, &run, 24).await;
    let claims = (0..24).map(|_| {
        let (backend, template, labels) = (backend.clone(), template.clone(), run.labels());
        tokio::spawn(async move { backend.claim(&template, &labels, soon()).await.unwrap() })
    });
    let mut handles = Vec::new();
    for claim in claims {
        handles.push(claim.await.unwrap());
    }
    // The 24 creates, sandbox reads and the run's watch were streams of one
    // HTTP/2 connection (over HTTP/1.1 they took a connection each, and
    // four stayed open idle).
    assert_eq!(cluster.emulator.connections(), 1);
    // A websocket upgrade has only HTTP/1.1: sessions go over connections
    // of their own.
    for handle in &handles[..3] {
        let out = backend
            .exec(handle, &command(&["true"]), None)
            .await
            .unwrap();
        assert_eq!(out.exit_code, 0);
    }
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaping_one_run_leaves_another_runs_objects_in_the_namespace_whole() {
    let cluster = Cluster::agent_sandbox().await;
    let backend = Arc::new(cluster.backend(cluster.config()));
    let doomed = RunId::new("run-doomed").unwrap();
    let kept = RunId::new("run-kept").unwrap();
    let mut handles = Vec::new();
    for run in [&doomed, &kept] {
        let template = warm_template(&backend, run, 1).await;
        handles.push(
            backend
                .claim(&template, &run.labels(), soon())
                .await
                .unwrap(),
        );
    }
    // Each pool replaces the sandbox its claim took; the controller may
    // not have made the replacement yet.
    let settled = Instant::now() + Duration::from_secs(30);
    for run in [&doomed, &kept] {
        while backend.list_owned(run).await.unwrap().sandboxes.len() < 2 {
            assert!(Instant::now() < settled, "{run}: no replacement sandbox");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let before = backend.list_owned(&kept).await.unwrap();
    let owned = backend.list_owned(&doomed).await.unwrap();
    // The claimed sandbox and the pool's replacement for it.
    assert_eq!(
        (
            owned.templates.len(),
            owned.pools.len(),
            owned.sandboxes.len()
        ),
        (1, 1, 2),
        "{owned:?}"
    );

    let reaped = backend.reap(&doomed).await.unwrap();
    assert_eq!(
        (reaped.templates, reaped.pools, reaped.sandboxes),
        (1, 1, 2),
        "{reaped:?}"
    );
    let after = backend.list_owned(&doomed).await.unwrap();
    assert!(
        after.templates.is_empty() && after.pools.is_empty() && after.sandboxes.is_empty(),
        "{after:?}"
    );
    assert_eq!(backend.list_owned(&kept).await.unwrap(), before);
    // The other run's sandbox still runs commands.
    let out = backend
        .exec(&handles[1], &command(&["true"]), None)
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(backend.reap(&doomed).await.unwrap().sandboxes, 0);
    backend.reap(&kept).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_counts_the_nodes_the_selector_matches() {
    let cluster = Cluster::agent_sandbox().await;
    let all = cluster.backend(cluster.config()).capacity().await.unwrap();
    assert_eq!(all.nodes, Some(3));
    assert_eq!(all.cpu_milli, Some(3 * 8000));
    assert_eq!(all.memory_mib, Some(3 * 32 * 1024));
    assert_eq!(all.sandbox_slots, Some(3 * 110));
    // The scheduler reserves each pod's requests on a node.
    assert!(all.reserves_requests);
    assert_eq!(all.disk_mib_per_node, Some(100 * 1024));
    let one = cluster
        .backend(K8sConfig {
            node_selector: [(
                "kubernetes.io/hostname".to_string(),
                "sandfleet-node-1".to_string(),
            )]
            .into(),
            ..cluster.config()
        })
        .capacity()
        .await
        .unwrap();
    assert_eq!((one.nodes, one.cpu_milli), (Some(1), Some(8000)));
}

/// Preflight's only failure for a cluster configured with `config` on an
/// emulator started with `emulator`.
async fn the_failure(emulator: Config, config: impl FnOnce(&Cluster) -> K8sConfig) -> String {
    let cluster = Cluster::start(emulator).await;
    let backend = cluster.backend(config(&cluster));
    let found = backend.preflight().await;
    assert_eq!(found.failures.len(), 1, "{found:?}");
    let failure = found.failures[0].clone();
    assert!(!failure.contains('\n'), "{failure}");
    // Nothing was created.
    let owned = backend.list_owned(&RunId::new("preflight").unwrap()).await;
    if let Ok(owned) = owned {
        assert!(
            owned.templates.is_empty() && owned.pools.is_empty(),
            "{owned:?}"
        );
    }
    failure
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_preflight_line_before_anything_is_created() {
    let with = || Config {
        with_agent_sandbox: true,
        ..Config::default()
    };
    let failure = the_failure(with(), |c| K8sConfig {
        kubeconfig: Some(c.dir.path().join("missing.yaml")),
        ..c.config()
    })
    .await;
    assert!(
        failure.starts_with("kubeconfig ") && failure.contains("missing.yaml"),
        "{failure}"
    );
    let failure = the_failure(with(), |c| K8sConfig {
        context: Some("prod".into()),
        ..c.config()
    })
    .await;
    assert!(
        failure.contains("has no context `prod` (it has: sandfleet-devcluster)"),
        "{failure}"
    );
    let failure = the_failure(with(), |c| K8sConfig {
        namespace: "nowhere".into(),
        ..c.config()
    })
    .await;
    assert_eq!(failure, "namespace `nowhere` does not exist");
    let failure = the_failure(Config::default(), Cluster::config).await;
    assert!(
        failure.starts_with("agent-sandbox CRDs not installed: sandboxes.agents.x-k8s.io"),
        "{failure}"
    );
    let denied = Config {
        deny: vec![
            "create:sandboxclaims.extensions.agents.x-k8s.io"
                .parse::<DenyRule>()
                .unwrap(),
        ],
        ..with()
    };
    let failure = the_failure(denied, Cluster::config).await;
    assert!(
        failure.starts_with(
            "RBAC forbids create on sandboxclaims.extensions.agents.x-k8s.io in namespace `default`"
        ),
        "{failure}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_finds_a_controller_without_extensions_and_a_prepull_the_account_may_not_make() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};

    // A pre-pull's DaemonSets are reviewed only for a run that pre-pulls.
    let cluster = Cluster::start(Config {
        with_agent_sandbox: true,
        deny: vec!["create:daemonsets.apps".parse::<DenyRule>().unwrap()],
        ..Config::default()
    })
    .await;
    let found = cluster.backend(cluster.config()).preflight().await;
    assert!(found.failures.is_empty(), "{found:?}");
    let found = cluster
        .backend(cluster.config())
        .pre_pulling(Duration::from_secs(60))
        .preflight()
        .await;
    assert_eq!(found.failures.len(), 1, "{found:?}");
    assert!(
        found.failures[0]
            .starts_with("RBAC forbids create on daemonsets.apps in namespace `default`"),
        "{found:?}"
    );

    // The controller as sandbox.yaml alone deploys it, or with the flag
    // turned off again: nothing would answer a claim.
    let deployments: kube::Api<Deployment> =
        kube::Api::namespaced(cluster.client().await, "agent-sandbox-system");
    for args in [
        serde_json::json!(["--leader-elect=true"]),
        serde_json::json!(["--extensions", "--leader-elect=true", "-extensions=false"]),
    ] {
        let patch = serde_json::json!({"spec": {"template": {"spec": {"containers": [
            {"name": "agent-sandbox-controller", "args": args},
        ]}}}});
        deployments
            .patch(
                "agent-sandbox-controller",
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
            .unwrap();
        let found = cluster.backend(cluster.config()).preflight().await;
        assert_eq!(found.failures.len(), 1, "{args}: {found:?}");
        assert!(
            found.failures[0].contains(
                "agent-sandbox-system/agent-sandbox-controller runs without --extensions"
            ),
            "{found:?}"
        );
    }
}

/// The names of the images each node reports holding.
async fn node_images(client: &kube::Client) -> Vec<Vec<String>> {
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    assert!(!nodes.items.is_empty());
    nodes
        .items
        .into_iter()
        .map(|node| {
            node.status
                .and_then(|s| s.images)
                .unwrap_or_default()
                .into_iter()
                .flat_map(|i| i.names.unwrap_or_default())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepull_puts_the_images_on_every_matching_node_and_leaves_no_daemon_set() {
    let cluster = Cluster::agent_sandbox().await;
    // Without being asked to, a cluster pulls nothing ahead.
    assert!(cluster.backend(cluster.config()).pulls().is_none());
    let backend = cluster
        .backend(cluster.config())
        .pre_pulling(Duration::from_secs(60));
    let run = RunId::new("run-pull").unwrap();
    let pulls = backend.pulls().expect("asked to pre-pull");
    let listed = pulls.images_to_pull(&[IMAGE.to_string()]).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].bytes.as_ref().ok(), Some(&None));
    pulls
        .pull_image(IMAGE, &run.labels(), &|_| {})
        .await
        .unwrap();
    let client = cluster.client().await;
    for images in node_images(&client).await {
        assert!(images.iter().any(|i| i.contains(IMAGE)), "{images:?}");
    }
    let left = kube::Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client, "default")
        .list(&Default::default())
        .await
        .unwrap();
    assert!(left.items.is_empty(), "{:?}", left.items.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrub_stops_what_a_task_left_running_and_spares_the_entrypoint() {
    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(cluster.config());
    let run = RunId::new("run-scrub").unwrap();
    let template = warm_template(&backend, &run, 0).await;
    let handle = backend
        .claim(&template, &run.labels(), soon())
        .await
        .unwrap();
    let comms = sh("for d in /proc/[0-9]*; do cat $d/comm 2>/dev/null; done | sort | tr '\\n' ' '");
    // Returns once the background process is `sleep` (not still `nohup`
    // on its way there), so the listing below cannot race its exec.
    let left = sh(
        "nohup sleep 300 >/dev/null 2>&1 & p=$!; until read -r c </proc/$p/comm && [ \"$c\" = sleep ]; do :; done; exit 0",
    );
    assert_eq!(
        backend.exec(&handle, &left, None).await.unwrap().exit_code,
        0
    );
    let before = backend.exec(&handle, &comms, None).await.unwrap();
    assert!(
        String::from_utf8_lossy(&before.stdout).contains("sleep"),
        "{before:?}"
    );
    backend.scrub(&handle).await.unwrap();
    let after = backend.exec(&handle, &comms, None).await.unwrap();
    let after = String::from_utf8_lossy(&after.stdout).into_owned();
    assert!(
        !after.contains("sleep") && after.contains("tail"),
        "{after}"
    );
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_without_network_gets_a_policy_that_denies_all_egress() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(cluster.config());
    let run = RunId::new("run-net").unwrap();
    let offline = backend.ensure_template(&spec(&run)).await.unwrap();
    let online = backend
        .ensure_template(&TemplateSpec {
            name: template_name(&run, "calc-online"),
            network: true,
            ..spec(&run)
        })
        .await
        .unwrap();
    let policies = kube::Api::<NetworkPolicy>::namespaced(cluster.client().await, "default");
    let policy_of = |template: &TemplateRef| {
        let (policies, name) = (
            policies.clone(),
            format!("{}-network-policy", template.name),
        );
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some(policy) = policies.get_opt(&name).await.unwrap() {
                    break policy.spec.unwrap();
                }
                assert!(Instant::now() < deadline, "no {name}");
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    };
    let closed = policy_of(&offline).await;
    assert_eq!(
        closed.policy_types.as_deref(),
        Some(&["Ingress".to_string(), "Egress".to_string()][..])
    );
    assert!(closed.egress.unwrap_or_default().is_empty());
    let from = &closed.ingress.unwrap()[0].from.clone().unwrap()[0];
    assert_eq!(
        from.pod_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["app"],
        "sandbox-router"
    );
    // A template that may use the network keeps the controller's default:
    // out to public addresses.
    let open = policy_of(&online).await;
    let to = open.egress.unwrap()[0].to.clone().unwrap();
    assert_eq!(to[0].ip_block.as_ref().unwrap().cidr, "0.0.0.0/0");
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reaches_the_network_only_where_its_templates_policy_lets_it() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use sandfleet_emulator_k8s::PodNetwork;
    let cluster = Cluster::start(Config {
        with_agent_sandbox: true,
        pod_network: PodNetwork::Host,
        ..Config::default()
    })
    .await;
    let backend = cluster.backend(cluster.config());
    let run = RunId::new("run-egress").unwrap();
    let offline = backend.ensure_template(&spec(&run)).await.unwrap();
    let online = backend
        .ensure_template(&TemplateSpec {
            name: template_name(&run, "calc-online"),
            network: true,
            ..spec(&run)
        })
        .await
        .unwrap();
    // The controller writes each template's policy; pods made before it
    // are kept offline, so the claims wait for both.
    let policies = kube::Api::<NetworkPolicy>::namespaced(cluster.client().await, "default");
    for template in [&offline, &online] {
        let name = format!("{}-network-policy", template.name);
        let deadline = Instant::now() + Duration::from_secs(20);
        while policies.get_opt(&name).await.unwrap().is_none() {
            assert!(Instant::now() < deadline, "no {name}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    // A server on the host's loopback, which only a pod sharing the host's
    // network can reach (a pod's own loopback has nothing listening).
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let reach = sh(&format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5)'"
    ));
    let open = backend.claim(&online, &run.labels(), soon()).await.unwrap();
    let reached = backend.exec(&open, &reach, None).await.unwrap();
    assert_eq!(reached.exit_code, 0, "{reached:?}");
    let closed = backend
        .claim(&offline, &run.labels(), soon())
        .await
        .unwrap();
    let refused = backend.exec(&closed, &reach, None).await.unwrap();
    assert_ne!(refused.exit_code, 0, "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Connection refused"),
        "{refused:?}"
    );
    backend.reap(&run).await.unwrap();
}

/// The production faults of issue 13's acceptance run.
const PRODUCTION_FAULTS: &str = "conflict=0.2,watch-drop=3,gone-burst,flaky=0.02,throttle=50";

/// `op`'s value, made again while it fails in a way that making an
/// idempotent request again can help (as the engine's retry budget does).
async fn idempotent<T, F: Future<Output = Result<T, BackendError>>>(op: impl Fn() -> F) -> T {
    for _ in 0..20 {
        match op().await {
            Err(error) if error.kind().is_retryable() => continue,
            other => return other.unwrap(),
        }
    }
    panic!("still failing after 20 attempts")
}

/// A command that appends its marker (`MARKER_ENV`, set to `id`) to
/// `/tmp/ran`, then runs `then`.
fn appending(id: &str, then: &str) -> ExecRequest {
    ExecRequest {
        env: vec![(MARKER_ENV.to_string(), id.to_string())],
        ..sh(&format!("echo \"${MARKER_ENV}\" >> /tmp/ran; {then}"))
    }
}

/// How often each marker appears in the sandbox's `/tmp/ran`.
async fn ran(
    backend: &K8sBackend,
    handle: &SandboxHandle,
) -> std::collections::BTreeMap<String, usize> {
    let text = idempotent(|| backend.get_file(handle, "/tmp/ran")).await;
    let mut counts = std::collections::BTreeMap::new();
    for id in String::from_utf8(text).unwrap().lines() {
        *counts.entry(id.to_string()).or_default() += 1;
    }
    counts
}

/// Runs 30 commands one after another in `handle`, every tenth ending the
/// shell that runs it (so its connection is lost after it ran), and checks
/// against the sandbox's record that each ran exactly once when it
/// succeeded or may have been sent, and never when it was not sent.
async fn every_command_runs_once(backend: &K8sBackend, handle: &SandboxHandle, prefix: &str) {
    let mut outcomes: Vec<(String, bool, Result<ExecResult, BackendError>)> = Vec::new();
    for i in 0..30 {
        let id = format!("{prefix}-{i}");
        let killer = i % 10 == 9;
        let then = if killer { "kill -KILL $PPID" } else { "true" };
        let outcome = backend.exec(handle, &appending(&id, then), None).await;
        outcomes.push((id, killer, outcome));
    }
    let counts = ran(backend, handle).await;
    for (id, killer, outcome) in &outcomes {
        let times = counts.get(id).copied().unwrap_or(0);
        match outcome {
            Ok(result) => {
                assert!(!killer && result.exit_code == 0, "{id}: {result:?}");
                assert_eq!(times, 1, "{id} succeeded and ran {times} times");
            }
            Err(error) if error.kind() == (ErrorKind::Transport { sent: true }) => {
                assert!(killer, "{id}: {error}");
                assert_eq!(
                    times, 1,
                    "{id} was lost after it ran, and ran {times} times"
                );
            }
            Err(error) => {
                assert!(error.kind().is_retryable() && !killer, "{id}: {error}");
                assert_eq!(
                    times, 0,
                    "{id} was not sent ({error}) and ran {times} times"
                );
            }
        }
    }
    // The connections of the commands that ended their shells were lost.
    assert_eq!(
        outcomes
            .iter()
            .filter(|(_, _, o)| o
                .as_ref()
                .is_err_and(|e| e.kind() == (ErrorKind::Transport { sent: true })))
            .count(),
        3,
        "{outcomes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_production_faults_no_command_runs_twice_over_sessions_or_one_shot_execs() {
    let cluster = Cluster::start(Config {
        with_agent_sandbox: true,
        faults: PRODUCTION_FAULTS.into(),
        ..Config::default()
    })
    .await;
    let sessions = cluster.backend(cluster.config());
    let one_shot = cluster.backend(K8sConfig {
        exec: ExecMode::Oneshot,
        ..cluster.config()
    });
    let run = RunId::new("run-once").unwrap();
    let (spec, labels) = (spec(&run), run.labels());
    let template = idempotent(|| sessions.ensure_template(&spec)).await;
    idempotent(|| sessions.warm(&template, 2, &labels)).await;
    idempotent(|| sessions.wait_pool_ready(&template, 2, soon())).await;
    let in_session = idempotent(|| sessions.claim(&template, &labels, soon())).await;
    let alone = idempotent(|| one_shot.claim(&template, &labels, soon())).await;
    tokio::join!(
        every_command_runs_once(&sessions, &in_session, "session"),
        every_command_runs_once(&one_shot, &alone, "oneshot"),
    );
    // No command went over two websockets of its own.
    let executions = cluster.emulator.executions();
    let repeated: Vec<_> = executions
        .by_marker
        .iter()
        .filter(|(_, n)| **n > 1)
        .collect();
    assert!(repeated.is_empty(), "{repeated:?}");
    assert!(executions.by_marker.len() >= 30, "{executions:?}");
    idempotent(|| sessions.reap(&run)).await;
}

/// A session shell that runs the first command it reads and then ends
/// cleanly without reading another, as a shell with an idle timeout does.
const ONE_COMMAND_SHELL: &str = "#!/bin/sh\nIFS= read -r command && eval \"$command\"\nexit 0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_shell_that_ends_cleanly_before_reading_a_command_hands_it_to_a_websocket_of_its_own()
 {
    let cluster = Cluster::agent_sandbox().await;
    let shell = "/workspace/one-command-shell";
    let backend = cluster.backend(K8sConfig {
        shell: shell.into(),
        ..cluster.config()
    });
    let run = RunId::new("run-handover").unwrap();
    let template = warm_template(&backend, &run, 1).await;
    let handle = backend
        .claim(&template, &run.labels(), soon())
        .await
        .unwrap();
    backend
        .put_file(&handle, shell, ONE_COMMAND_SHELL.as_bytes(), 0o755)
        .await
        .unwrap();
    let sessions_before = cluster.emulator.executions().with_stdin;
    let mut outcomes = Vec::new();
    for id in ["first", "handed-over", "next"] {
        let outcome = backend
            .exec(&handle, &appending(id, "echo ran"), None)
            .await
            .unwrap();
        outcomes.push((
            outcome.exit_code,
            String::from_utf8(outcome.stdout).unwrap(),
        ));
    }
    assert_eq!(outcomes, vec![(0, "ran\n".to_string()); 3]);
    let counts = ran(&backend, &handle).await;
    assert_eq!(
        counts,
        [("first", 1), ("handed-over", 1), ("next", 1)]
            .map(|(id, n)| (id.to_string(), n))
            .into()
    );
    // The first and the last went over sessions of their own (the shell
    // ends after one command), the one between over a websocket of its
    // own, once.
    let executions = cluster.emulator.executions();
    assert_eq!(executions.with_stdin - sessions_before, 2, "{executions:?}");
    assert_eq!(
        executions.by_marker.get("handed-over"),
        Some(&1),
        "{executions:?}"
    );
    assert!(
        !executions.by_marker.contains_key("first") && !executions.by_marker.contains_key("next"),
        "{executions:?}"
    );
    // Down the sessions went the first and the last, once each; the
    // handed-over one at most once (to a shell that ended unread, or not
    // at all when the session had already closed).
    let sent = |id: &str| executions.in_sessions.get(id).copied().unwrap_or(0);
    assert_eq!((sent("first"), sent("next")), (1, 1), "{executions:?}");
    assert!(sent("handed-over") <= 1, "{executions:?}");
    backend.reap(&run).await.unwrap();
}

/// A deadline no test reaches: a claim that ends before it ended on what
/// the controller said, not on time.
fn never() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_pod_is_evicted_ends_at_once_as_the_sandbox_lost_and_is_deleted() {
    let cluster = Cluster::start(Config {
        with_agent_sandbox: true,
        faults: "evict=1".into(),
        ..Config::default()
    })
    .await;
    let backend = cluster.backend(K8sConfig {
        bind_timeout: Some(Duration::from_secs(600)),
        ..cluster.config()
    });
    let run = RunId::new("run-evicted").unwrap();
    let template = warm_template(&backend, &run, 0).await;
    let error = backend
        .claim(&template, &run.labels(), never())
        .await
        .unwrap_err();
    // Lost, so the engine claims again; a failed pod is never restarted.
    assert_eq!(error.kind(), ErrorKind::SandboxLost, "{error}");
    assert!(error.message().contains("PodFailed"), "{error}");
    let claims: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        cluster.client().await,
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "extensions.agents.x-k8s.io",
                "v1beta1",
                "SandboxClaim",
            ),
            "sandboxclaims",
        ),
    );
    let left = claims
        .list(&kube::api::ListParams::default())
        .await
        .unwrap();
    assert!(
        left.items
            .iter()
            .all(|c| c.metadata.deletion_timestamp.is_some()),
        "the lost claim is deleted: {:?}",
        left.items
            .iter()
            .map(|c| &c.metadata.name)
            .collect::<Vec<_>>()
    );
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_the_ephemeral_storage_limit_evict_the_pod_and_lose_the_sandbox() {
    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(cluster.config());
    let run = RunId::new("run-disk").unwrap();
    // The pod's ephemeral-storage limit is the template's disk (16Mi).
    let spec = TemplateSpec {
        disk_mib: 16,
        ..spec(&run)
    };
    let template = backend.ensure_template(&spec).await.unwrap();
    let handle = backend
        .claim(&template, &run.labels(), soon())
        .await
        .unwrap();
    let within = backend
        .exec(&handle, &sh("head -c 4M /dev/zero > /tmp/small"), None)
        .await
        .unwrap();
    assert_eq!(within.exit_code, 0);
    let error = backend
        .exec(
            &handle,
            &sh("for i in $(seq 40); do head -c 1M /dev/zero > /tmp/f$i; done; exec sleep 300"),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SandboxLost, "{error}");
    assert!(
        error.message().contains(
            "Evicted: Pod ephemeral local storage usage exceeds the total limit of containers 16Mi."
        ),
        "{error}"
    );
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_into_a_pod_that_has_failed_finds_the_sandbox_lost() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::wait::await_condition;

    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(K8sConfig {
        exec: ExecMode::Oneshot,
        ..cluster.config()
    });
    let run = RunId::new("run-failed").unwrap();
    let template = warm_template(&backend, &run, 0).await;
    let handle = backend
        .claim(&template, &run.labels(), soon())
        .await
        .unwrap();
    // The pod's main process (the driver's keep-alive) ends in error, and
    // with it the pod. A ready pod's keep-alive may not have exec'd `tail`
    // yet (under load it was still its init's child), so the command looks
    // until it finds it. It may be cut by the pod's end: its outcome is not
    // the point.
    let _ = backend
        .exec(
            &handle,
            &sh("while :; do for p in /proc/[0-9]*; do \
                 case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in 'tail -f /dev/null '*) kill ${p#/proc/}; exit;; esac; \
                 done; done"),
            None,
        )
        .await;
    let pods: kube::Api<Pod> = kube::Api::namespaced(cluster.client().await, "default");
    let failed = |pod: Option<&Pod>| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            == Some("Failed")
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(pods, &handle.hostname, failed),
    )
    .await
    .expect("the pod fails")
    .unwrap();
    let error = backend
        .exec(&handle, &command(&["true"]), None)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SandboxLost, "{error}");
    assert!(error.message().contains("has ended (Failed"), "{error}");
    let error = backend
        .get_file(&handle, "/etc/hostname")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SandboxLost, "{error}");
    backend.release(&handle).await.unwrap();
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reap_in_a_namespace_of_5000_foreign_sandboxes_reads_only_its_own() {
    use futures_util::{StreamExt, TryStreamExt};
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};

    const FOREIGN: usize = 5000;
    const SANDBOXES: &str = "sandboxes.agents.x-k8s.io";
    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(cluster.config());
    let run = RunId::new("run-among-many").unwrap();
    let template = warm_template(&backend, &run, 1).await;
    backend
        .claim(&template, &run.labels(), soon())
        .await
        .unwrap();
    // Another team's sandboxes, suspended (no pods), in the same namespace.
    let sandboxes: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        cluster.client().await,
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("agents.x-k8s.io", "v1beta1", "Sandbox"),
            "sandboxes",
        ),
    );
    futures_util::stream::iter(0..FOREIGN)
        .map(|n| {
            let sandboxes = sandboxes.clone();
            async move {
                let body = serde_json::json!({
                    "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                    "metadata": {"name": format!("foreign-{n}"), "labels": {"team": "other"}},
                    "spec": {
                        "operatingMode": "Suspended",
                        "podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}},
                    },
                });
                sandboxes
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(body).unwrap(),
                    )
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
        .unwrap();

    let before = cluster.emulator.listed_objects(SANDBOXES);
    let owned = backend.list_owned(&run).await.unwrap();
    // The claimed sandbox and the pool's replacement for it.
    assert_eq!(owned.sandboxes.len(), 2, "{owned:?}");
    let reaped = backend.reap(&run).await.unwrap();
    assert_eq!(reaped.sandboxes, 2, "{reaped:?}");
    let read = cluster.emulator.listed_objects(SANDBOXES) - before;
    eprintln!("list_owned + reap among {FOREIGN} foreign Sandboxes read {read} Sandboxes");
    // Its own two, a few times over while the reap waits for them to go;
    // listing the namespace would read 5,000 at each look.
    assert!(read < 100, "the driver read {read} Sandboxes");
    let left = sandboxes
        .list_metadata(&ListParams::default().labels("team=other"))
        .await
        .unwrap();
    assert_eq!(left.items.len(), FOREIGN);
}

/// A claim of `template` that must time out (the bind timeout is 6 s).
async fn timed_out(backend: &K8sBackend, template: &TemplateSpec, run: &RunId) -> BackendError {
    let template = backend.ensure_template(template).await.unwrap();
    let error = backend
        .claim(
            &template,
            &run.labels(),
            Instant::now() + Duration::from_secs(8),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_times_out_says_what_the_scheduler_or_the_kubelet_said() {
    let cluster = Cluster::agent_sandbox().await;
    let backend = cluster.backend(K8sConfig {
        bind_timeout: Some(Duration::from_secs(6)),
        ..cluster.config()
    });
    let run = RunId::new("run-waiting").unwrap();
    // More scratch space than any node has, and an image no registry has.
    let too_big = TemplateSpec {
        disk_mib: 1024 * 1024,
        ..spec(&run)
    };
    let unknown = TemplateSpec {
        name: template_name(&run, "nowhere"),
        image: "nowhere".into(),
        ..spec(&run)
    };
    // The kubelet says ErrImagePull, then ImagePullBackOff until it tries
    // again.
    let cases: [(TemplateSpec, &[&str]); 2] = [
        (
            too_big,
            &["its pod: Unschedulable: 0/3 nodes are available: 3 Insufficient ephemeral-storage"],
        ),
        (
            unknown,
            &[
                "its pod: ErrImagePull: rpc error",
                "its pod: ImagePullBackOff: Back-off pulling image \"nowhere\"",
            ],
        ),
    ];
    for (template, said) in cases {
        let error = timed_out(&backend, &template, &run).await;
        assert!(
            said.iter().any(|said| error.message().contains(said)),
            "{error}"
        );
    }
    backend.reap(&run).await.unwrap();
    // A RuntimeClass whose handler the nodes' runtime lacks: the pod stays
    // Pending with nothing in its status, and its Warning event says why.
    let classes: kube::Api<RuntimeClass> = kube::Api::all(cluster.client().await);
    let class: RuntimeClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gvisor"}, "handler": "runsc",
    }))
    .unwrap();
    classes
        .create(&kube::api::PostParams::default(), &class)
        .await
        .unwrap();
    let sandboxed = cluster.backend(K8sConfig {
        bind_timeout: Some(Duration::from_secs(6)),
        runtime_class: Some("gvisor".into()),
        ..cluster.config()
    });
    let error = timed_out(&sandboxed, &spec(&run), &run).await;
    assert!(
        error.message().contains(
            "its pod: FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \"runsc\" is configured"
        ),
        "{error}"
    );
    sandboxed.reap(&run).await.unwrap();
}
