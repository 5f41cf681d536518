//! The driver against `sandfleet devcluster opensandbox`'s emulator, over
//! real sockets on loopback: the whole claim → exec → files → release
//! path, each production fault, bad input, and snapshots with their forks.
//! The emulator's counters say whether any command ran twice and whether
//! any sandbox or snapshot was left.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use sandfleet_backend_opensandbox::{OpenSandboxBackend, OpenSandboxConfig, ResourceLimits};
use sandfleet_core::{
    Backend, BackendError, ErrorKind, ExecRequest, RunId, SandboxHandle, Snapshots, TemplateRef,
    TemplateSpec,
};
use sandfleet_emulator_opensandbox::{
    Created, Emulator, EmulatorConfig, Faults, Runtime, images_from_fleet,
};
use sandfleet_test_support::snapshots as contract;
use sandfleet_transport::{Clients, TransportConfig};

/// An emulator serving the quickstart's images as plain sandboxes (fast,
/// and enough for everything but paths inside a sandbox).
async fn emulator(faults: &str) -> Emulator {
    emulator_on(Runtime::Plain, faults).await
}

async fn emulator_on(runtime: Runtime, faults: &str) -> Emulator {
    let fleet = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.toml");
    let mut config = EmulatorConfig::new(images_from_fleet(&fleet).unwrap());
    config.runtime = runtime;
    config.faults = faults.parse::<Faults>().unwrap();
    Emulator::start(config).await.unwrap()
}

fn backend_with(emulator: &Emulator, config: OpenSandboxConfig) -> OpenSandboxBackend {
    let clients = Clients::new();
    OpenSandboxBackend::with_server(
        "os",
        config,
        &emulator.base_url(),
        Some(emulator.api_key().to_string()),
        &clients,
    )
    .unwrap()
}

fn backend(emulator: &Emulator) -> OpenSandboxBackend {
    backend_with(emulator, OpenSandboxConfig::default())
}

async fn template(backend: &OpenSandboxBackend, run: &RunId) -> TemplateRef {
    template_of(backend, run, "calc").await
}

/// The template of `image` for `run`: 500m, 256 MiB, 512 MiB of disk.
/// A server pool takes only a template with the network (an offline one
/// asks for a policy the server refuses with a pool).
fn spec(run: &RunId, image: &str, network: bool) -> TemplateSpec {
    TemplateSpec {
        name: format!("sf-{image}"),
        image: image.into(),
        cpu_milli: 500,
        memory_mib: 256,
        disk_mib: 512,
        network,
        env: Default::default(),
        labels: run.labels(),
    }
}

async fn template_of(backend: &OpenSandboxBackend, run: &RunId, image: &str) -> TemplateRef {
    backend
        .ensure_template(&spec(run, image, false))
        .await
        .unwrap()
}

async fn claim(backend: &OpenSandboxBackend, run: &RunId) -> SandboxHandle {
    claim_of(backend, run, "calc").await.unwrap()
}

async fn claim_of(
    backend: &OpenSandboxBackend,
    run: &RunId,
    image: &str,
) -> Result<SandboxHandle, BackendError> {
    claim_spec(backend, &spec(run, image, false)).await
}

async fn claim_spec(
    backend: &OpenSandboxBackend,
    spec: &TemplateSpec,
) -> Result<SandboxHandle, BackendError> {
    let run = spec.run_id().unwrap();
    let template = backend.ensure_template(spec).await?;
    backend
        .claim(
            &template,
            &run.labels(),
            Instant::now() + Duration::from_secs(30),
        )
        .await
}

fn shell(script: &str) -> ExecRequest {
    ExecRequest {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        timeout: Duration::from_secs(30),
        ..ExecRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_is_claimed_driven_and_released() {
    // Isolated sandboxes: the file's path is the sandbox's own /tmp.
    let emulator = emulator_on(Runtime::Namespaces, "").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-driver");
    let sandbox = claim(&backend, &run).await;

    let ran = backend
        .exec(
            &sandbox,
            &shell("echo hi; echo oops >&2; printf 'a\\n\\nb\\n'; exit 3"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ran.exit_code, 3);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "hi\na\n\nb\n");
    assert_eq!(String::from_utf8_lossy(&ran.stderr), "oops\n");

    backend
        .put_file(
            &sandbox,
            "/tmp/sandfleet/patch.diff",
            b"--- a\n+++ b\n",
            0o644,
        )
        .await
        .unwrap();
    let back = backend
        .get_file(&sandbox, "/tmp/sandfleet/patch.diff")
        .await
        .unwrap();
    assert_eq!(back, b"--- a\n+++ b\n");
    let cat = backend
        .exec(&sandbox, &shell("cat /tmp/sandfleet/patch.diff"), None)
        .await
        .unwrap();
    assert_eq!(cat.stdout, b"--- a\n+++ b\n");

    backend
        .renew(&sandbox, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(
        backend.list_owned(&run).await.unwrap().sandboxes,
        std::slice::from_ref(&sandbox.id)
    );
    backend.release(&sandbox).await.unwrap();
    // Released twice is released once (the repeat DELETE answers 404).
    backend.release(&sandbox).await.unwrap();
    assert_eq!(emulator.live_sandboxes(), 0);
    assert!(emulator.executions().repeated_markers().is_empty());
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn output_is_the_bytes_the_command_wrote_whatever_ends_its_lines() {
    // Plain sandboxes, where a command's /tmp is a directory on the host:
    // execd's files of its output are read back there all the same.
    let emulator = emulator_on(Runtime::Plain, "").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-exact");
    let sandbox = claim(&backend, &run).await;

    // execd streams these as the lines a, b, c, "\n", last: every line end
    // and the missing last one are only in what the command wrote.
    let (sink, mut chunks) = tokio::sync::mpsc::channel(64);
    let ran = backend
        .exec(
            &sandbox,
            &shell("printf 'a\\r\\nb\\rc\\n\\nlast'; printf 'e1\\r\\ne2' >&2"),
            Some(&sink),
        )
        .await
        .unwrap();
    drop(sink);
    assert_eq!(ran.stdout, b"a\r\nb\rc\n\nlast");
    assert_eq!(ran.stderr, b"e1\r\ne2");
    // The live stream had the lines as they came.
    let mut streamed = Vec::new();
    while let Some(chunk) = chunks.recv().await {
        if chunk.stream == sandfleet_core::OutputStream::Stdout {
            streamed.extend(chunk.bytes);
        }
    }
    assert_eq!(streamed, b"a\nb\nc\n\nlast\n");

    // Merged, in the order written, without a newline added.
    let merged = backend
        .exec(
            &sandbox,
            &ExecRequest {
                merge_stderr: true,
                ..shell("printf 1; printf 2 >&2; printf 3; printf 4 >&2")
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        (merged.stdout.as_slice(), merged.stderr.as_slice()),
        (&b"1234"[..], &b""[..])
    );

    // Past the limit: its head, and the rest counted, not read.
    let capped = backend
        .exec(
            &sandbox,
            &ExecRequest {
                max_output: Some(5),
                ..shell("printf '0123456789\\n'")
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(capped.stdout_dropped, 6);
    assert!(
        capped
            .stdout
            .starts_with(b"01234\n[sandfleet: 6 more bytes"),
        "{}",
        String::from_utf8_lossy(&capped.stdout)
    );

    // execd's files of them are gone once read. (A plain sandbox's /tmp
    // is its TMPDIR.)
    let tmp = backend
        .exec(&sandbox, &shell("ls -a \"$TMPDIR\""), None)
        .await
        .unwrap();
    let listing = String::from_utf8_lossy(&tmp.stdout);
    assert!(
        !listing.contains(".stdout") && !listing.contains(".stderr"),
        "{listing}"
    );
    backend.release(&sandbox).await.unwrap();
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_ends_at_its_terminal_event_not_at_the_end_of_the_stream() {
    // execd holds every stream open after the exit status; here for a
    // minute. A client that read to the end would wait that long.
    let emulator = emulator("grace-tail=60s").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-tail");
    let sandbox = claim(&backend, &run).await;
    for _ in 0..3 {
        let ran = tokio::time::timeout(
            Duration::from_secs(20),
            backend.exec(&sandbox, &shell("true"), None),
        )
        .await
        .expect("the command waited for the stream's end")
        .unwrap();
        assert_eq!(ran.exit_code, 0);
    }
    backend.release(&sandbox).await.unwrap();
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_production_faults_lose_nothing_and_run_nothing_twice() {
    let emulator = emulator("keepalive=1s,execd-late=500,cut-tail,flaky=0.1").await;
    let backend = backend_with(
        &emulator,
        OpenSandboxConfig {
            transport: TransportConfig {
                idle_timeout: Duration::from_millis(500),
                ..TransportConfig::default()
            },
            ..OpenSandboxConfig::default()
        },
    );
    let run = RunId::generate("os-faults");
    let template = template(&backend, &run).await;
    let (mut claimed, mut refused) = (Vec::new(), 0);
    for _ in 0..6 {
        match backend
            .claim(
                &template,
                &run.labels(),
                Instant::now() + Duration::from_secs(30),
            )
            .await
        {
            Ok(sandbox) => claimed.push(sandbox),
            // A flaky create is refused, never repeated.
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
                refused += 1;
            }
        }
    }
    assert!(!claimed.is_empty());
    let mut finished = 0;
    for (i, sandbox) in claimed.iter().enumerate() {
        if i > 0 {
            // Longer than the server's keep-alive.
            tokio::time::sleep(Duration::from_millis(1200)).await;
        }
        let ran = backend
            .exec(sandbox, &shell("echo done"), None)
            .await
            .unwrap();
        assert_eq!(ran.stdout, b"done\n");
        finished += 1;
    }
    assert_eq!(finished, claimed.len());
    let executions = emulator.executions();
    assert!(executions.repeated_markers().is_empty(), "{executions:?}");
    assert_eq!(
        executions.sandboxes_created as usize,
        claimed.len(),
        "refused {refused}"
    );
    let reaped = backend.reap(&run).await.unwrap();
    assert_eq!(reaped.sandboxes, claimed.len());
    assert_eq!(emulator.live_sandboxes(), 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_pool_falls_back_to_a_direct_create_or_says_so() {
    let emulator = emulator("pool-max=1").await;
    let pooled = OpenSandboxConfig {
        pool: Some("swe-pool".into()),
        ..OpenSandboxConfig::default()
    };
    let backend = backend_with(&emulator, pooled.clone());
    let run = RunId::generate("os-pool");
    let first = claim_spec(&backend, &spec(&run, "calc", true))
        .await
        .unwrap();
    let second = claim_spec(&backend, &spec(&run, "calc", true))
        .await
        .unwrap();
    assert_ne!(first.id, second.id);

    let strict = backend_with(
        &emulator,
        OpenSandboxConfig {
            pool_fallback: false,
            ..pooled
        },
    );
    let error = claim_spec(&strict, &spec(&run, "calc", true))
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Throttled { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("os: create a sandbox of sf-calc"),
        "{error}"
    );
    assert!(
        error.to_string().contains("POOL_CAPACITY_EXHAUSTED"),
        "{error}"
    );
    backend.reap(&run).await.unwrap();
    assert_eq!(emulator.live_sandboxes(), 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn only_an_image_mapped_to_a_server_pool_takes_from_it_and_a_full_one_falls_back_or_says_so()
{
    let emulator = emulator("pool-max=1").await;
    let mapped = OpenSandboxConfig {
        pools: [("calc".to_string(), "calc-pool".to_string())].into(),
        ..OpenSandboxConfig::default()
    };
    let backend = backend_with(&emulator, mapped.clone());
    let run = RunId::generate("os-pools");
    let pooled = claim_spec(&backend, &spec(&run, "calc", true))
        .await
        .unwrap();
    let direct = claim_spec(&backend, &spec(&run, "textkit", true))
        .await
        .unwrap();
    // The pool holds one sandbox: the next of its image is created directly.
    let fell_back = claim_spec(&backend, &spec(&run, "calc", true))
        .await
        .unwrap();
    let pool_refs = emulator.pool_refs();
    assert_eq!(pool_refs[&pooled.id].as_deref(), Some("calc-pool"));
    assert_eq!(pool_refs[&direct.id], None, "{pool_refs:?}");
    assert_eq!(pool_refs[&fell_back.id], None, "{pool_refs:?}");

    let strict = backend_with(
        &emulator,
        OpenSandboxConfig {
            pool_fallback: false,
            ..mapped
        },
    );
    let error = claim_spec(&strict, &spec(&run, "calc", true))
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Throttled { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with("os: create a sandbox of sf-calc (calc) from server pool `calc-pool`"),
        "{message}"
    );
    assert!(message.contains("POOL_CAPACITY_EXHAUSTED"), "{message}");
    // A full pool is no concern of an image that has none.
    let unmapped = claim_spec(&strict, &spec(&run, "textkit", true))
        .await
        .unwrap();
    assert_eq!(emulator.pool_refs()[&unmapped.id], None);
    assert_eq!(emulator.executions().sandboxes_created, 4);
    backend.reap(&run).await.unwrap();
    assert_eq!(emulator.live_sandboxes(), 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fleets_network_and_disk_reach_the_create_and_requests_stay_apart_from_limits() {
    let emulator = emulator("").await;
    let capped = backend_with(
        &emulator,
        OpenSandboxConfig {
            limits: ResourceLimits {
                cpu: Some("2".into()),
                memory: Some("1Gi".into()),
                ephemeral_storage: Some("4Gi".into()),
            },
            ..OpenSandboxConfig::default()
        },
    );
    let run = RunId::generate("os-shape");
    let offline = claim(&capped, &run).await;
    let online = claim_spec(&backend(&emulator), &spec(&run, "textkit", true))
        .await
        .unwrap();
    let created: HashMap<String, Created> = emulator
        .created()
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    let quantities = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // Requests are [fleet]'s; limits the cluster's, each defaulting to
    // its request.
    let asked = quantities(&[
        ("cpu", "500m"),
        ("memory", "256Mi"),
        ("ephemeral-storage", "512Mi"),
    ]);
    let offline = &created[&offline.id];
    assert_eq!(offline.requests, asked);
    assert_eq!(
        offline.limits,
        quantities(&[
            ("cpu", "2"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "4Gi")
        ])
    );
    assert_eq!(
        offline.network_policy,
        Some(serde_json::json!({"defaultAction": "deny", "egress": []}))
    );
    let online = &created[&online.id];
    assert_eq!((&online.requests, &online.limits), (&asked, &asked));
    assert_eq!(online.network_policy, None);

    // Offline from a server pool cannot be kept: refused before any create.
    let pooled = backend_with(
        &emulator,
        OpenSandboxConfig {
            pools: [("calc".to_string(), "calc-pool".to_string())].into(),
            ..OpenSandboxConfig::default()
        },
    );
    let error = pooled
        .ensure_template(&spec(&run, "calc", false))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid);
    let message = error.to_string();
    assert!(
        message.starts_with("os: template sf-calc (calc): [fleet] network = false"),
        "{message}"
    );
    assert!(
        message.contains(r#"clusters.os.opensandbox.pools."calc" sends calc to pool `calc-pool`"#),
        "{message}"
    );
    assert_eq!(emulator.executions().sandboxes_created, 2);
    capped.reap(&run).await.unwrap();
    assert_eq!(emulator.live_sandboxes(), 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_one_line_naming_the_cluster_and_nothing_is_created() {
    let emulator = emulator("").await;
    let clients = Clients::new();
    let wrong_key = OpenSandboxBackend::with_server(
        "os",
        OpenSandboxConfig::default(),
        &emulator.base_url(),
        Some("not-the-key".into()),
        &clients,
    )
    .unwrap();
    let found = wrong_key.preflight().await;
    assert_eq!(found.failures.len(), 1, "{found:?}");
    assert!(found.failures[0].contains("401"), "{found:?}");
    assert!(
        found.failures[0].contains("check the key in $OPENSANDBOX_API_KEY"),
        "{found:?}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = OpenSandboxBackend::with_server(
        "os",
        OpenSandboxConfig::default(),
        &nowhere,
        None,
        &clients,
    )
    .unwrap();
    let found = unreachable.preflight().await;
    assert!(found.failures[0].contains("cannot connect"), "{found:?}");

    let backend = backend(&emulator);
    let run = RunId::generate("os-bad");
    let template = template(&backend, &run).await;
    let mut labels = run.labels();
    labels.insert("team".into(), "-leading-dash".into());
    let error = backend
        .claim(&template, &labels, Instant::now() + Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    assert!(
        error
            .to_string()
            .starts_with("os: metadata of a sandbox of sf-calc"),
        "{error}"
    );

    let unknown = template_of(&backend, &run, "no-such-image").await;
    let error = backend
        .claim(
            &unknown,
            &run.labels(),
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert!(!error.kind().is_retryable(), "{error}");
    assert!(error.to_string().contains("no-such-image"), "{error}");
    assert_eq!(emulator.executions().sandboxes_created, 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reap_takes_only_its_own_runs_sandboxes() {
    let emulator = emulator("").await;
    let backend = backend(&emulator);
    let (mine, theirs) = (RunId::generate("os-mine"), RunId::generate("os-theirs"));
    for _ in 0..3 {
        claim(&backend, &mine).await;
    }
    let kept = claim(&backend, &theirs).await;
    assert_eq!(backend.reap(&mine).await.unwrap().sandboxes, 3);
    assert_eq!(
        backend.list_owned(&theirs).await.unwrap().sandboxes,
        std::slice::from_ref(&kept.id)
    );
    let still = backend
        .exec(&kept, &shell("echo alive"), None)
        .await
        .unwrap();
    assert_eq!(still.stdout, b"alive\n");
    backend.reap(&theirs).await.unwrap();
    assert_eq!(emulator.live_sandboxes(), 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_that_fails_on_the_server_is_not_repeated_and_leaves_nothing() {
    // The first create collides on a port (500), as Docker hosts do.
    let emulator = emulator("port-500").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-port");
    let template = template(&backend, &run).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let error = backend
        .claim(&template, &run.labels(), deadline)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Failed, "{error}");
    assert!(error.to_string().contains("500"), "{error}");
    assert_eq!(emulator.executions().sandboxes_created, 0);
    let sandbox = backend
        .claim(&template, &run.labels(), deadline)
        .await
        .unwrap();
    assert_eq!(backend.list_owned(&run).await.unwrap().sandboxes.len(), 1);
    backend.release(&sandbox).await.unwrap();
    assert_eq!(emulator.live_sandboxes(), 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn long_commands_are_polled_and_keep_their_streams_apart_through_a_cut_stream() {
    // The stream announcing a background command is cut right after its
    // first terminal event: the command is still followed by polling.
    let emulator = emulator_on(Runtime::Namespaces, "cut-tail").await;
    let backend = backend_with(
        &emulator,
        OpenSandboxConfig {
            background_after: Duration::from_secs(20),
            ..OpenSandboxConfig::default()
        },
    );
    let run = RunId::generate("os-background");
    let sandbox = claim(&backend, &run).await;
    let long = |merge_stderr: bool| ExecRequest {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "echo out; printf 'err\\r\\n!' >&2; sleep 0.3; echo late; exit 4".into(),
        ],
        timeout: Duration::from_secs(30),
        merge_stderr,
        ..ExecRequest::default()
    };

    let before = emulator.executions().commands;
    let (sink, mut chunks) = tokio::sync::mpsc::channel(64);
    let ran = backend
        .exec(&sandbox, &long(false), Some(&sink))
        .await
        .unwrap();
    drop(sink);
    assert_eq!(ran.exit_code, 4);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "out\nlate\n");
    assert_eq!(String::from_utf8_lossy(&ran.stderr), "err\r\n!");
    // Polled, then its stderr read back: two commands on the server.
    assert_eq!(emulator.executions().commands - before, 2);
    let mut streamed = Vec::new();
    while let Some(chunk) = chunks.recv().await {
        if chunk.stream == sandfleet_core::OutputStream::Stderr {
            streamed.extend(chunk.bytes);
        }
    }
    assert_eq!(streamed, b"err\r\n!");
    // Nothing of it is left where a reset check would see it. (A short
    // command, streamed: a polled one would list its own stderr file.)
    let listing = ExecRequest {
        timeout: Duration::from_secs(5),
        ..shell("ls -a /tmp")
    };
    let tmp = backend.exec(&sandbox, &listing, None).await.unwrap();
    assert!(
        !String::from_utf8_lossy(&tmp.stdout).contains(".sandfleet-stderr"),
        "{}",
        String::from_utf8_lossy(&tmp.stdout)
    );

    // Asked merged, both streams are one, in the order written.
    let merged = backend.exec(&sandbox, &long(true), None).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&merged.stdout),
        "out\nerr\r\n!late\n"
    );
    assert!(merged.stderr.is_empty());
    assert!(emulator.executions().repeated_markers().is_empty());
    backend.release(&sandbox).await.unwrap();
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_release_is_sent_once_for_the_engine_to_retry_while_a_reap_retries_itself() {
    let emulator = emulator("throttle-deletes").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-driver");
    let sandbox = claim(&backend, &run).await;

    // The engine retries a release within its budget, so the driver sends
    // it once and hands back the throttle with the pause asked for.
    let error = backend.release(&sandbox).await.unwrap_err();
    assert_eq!(
        error.kind(),
        ErrorKind::Throttled {
            retry_after: Some(Duration::from_secs(1))
        },
        "{error}"
    );
    assert_eq!(emulator.executions().delete_requests, 1);

    // A reap is nobody else's to retry: the transport tries again itself.
    let before = emulator.executions().delete_requests;
    assert!(backend.reap(&run).await.is_err());
    let sent = emulator.executions().delete_requests - before;
    assert_eq!(sent, TransportConfig::default().attempts as u64);
    emulator.shutdown().await;
}

fn snapshots(backend: &OpenSandboxBackend) -> &dyn Snapshots {
    backend.snapshots().expect("the driver has snapshots")
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_snapshot_contract_holds_and_there_is_no_restore_in_place() {
    // Snapshots are the local backend's, which isolated sandboxes have.
    let emulator = emulator_on(Runtime::Namespaces, "").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-snap");
    let source = claim(&backend, &run).await;
    let patience = Duration::from_secs(60);
    let (snapshot, forks) = contract::forks_hold_the_snapshot_and_their_own_writes(
        &backend, &source, &run, 3, patience,
    )
    .await;
    assert_eq!(snapshot.template.image, "calc");
    let owned = backend.list_owned(&run).await.unwrap();
    assert_eq!(owned.snapshots, std::slice::from_ref(&snapshot.id));
    assert_eq!(owned.sandboxes.len(), 4);

    // No restore in place: the cluster says so, and the sandbox is intact.
    assert!(!snapshots(&backend).restores_in_place());
    let error = snapshots(&backend)
        .restore(&source, &snapshot, soon())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    assert_eq!(error.cluster(), "os");

    let other = RunId::generate("os-snap-other");
    contract::refused_forks_make_nothing(&backend, &snapshot, &run, &other, patience).await;
    assert_eq!(emulator.live_snapshots(), 0);
    for fork in &forks {
        backend.release(fork).await.unwrap();
    }
    backend.release(&source).await.unwrap();
    assert_eq!(emulator.live_sandboxes(), 0);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reap_removes_the_runs_snapshots_and_forks_and_no_other_runs() {
    let emulator = emulator_on(Runtime::Namespaces, "").await;
    let backend = backend(&emulator);
    let (mine, theirs) = (
        RunId::generate("os-snap-mine"),
        RunId::generate("os-snap-theirs"),
    );
    let source = claim(&backend, &mine).await;
    let first = snapshots(&backend)
        .snapshot(&source, &mine.labels(), soon())
        .await
        .unwrap();
    snapshots(&backend)
        .snapshot(&source, &mine.labels(), soon())
        .await
        .unwrap();
    snapshots(&backend)
        .fork(&first, 1, &mine.labels(), soon())
        .await
        .unwrap();
    let kept = claim(&backend, &theirs).await;
    let kept_snapshot = snapshots(&backend)
        .snapshot(&kept, &theirs.labels(), soon())
        .await
        .unwrap();

    let reaped = backend.reap(&mine).await.unwrap();
    assert_eq!((reaped.sandboxes, reaped.snapshots), (2, 2), "{reaped:?}");
    assert_eq!(backend.list_owned(&mine).await.unwrap(), Default::default());
    let owned = backend.list_owned(&theirs).await.unwrap();
    assert_eq!(owned.snapshots, std::slice::from_ref(&kept_snapshot.id));
    assert_eq!(owned.sandboxes, std::slice::from_ref(&kept.id));

    let reaped = backend.reap(&theirs).await.unwrap();
    assert_eq!((reaped.sandboxes, reaped.snapshots), (1, 1), "{reaped:?}");
    assert_eq!(
        (emulator.live_sandboxes(), emulator.live_snapshots()),
        (0, 0)
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_whose_runtime_has_no_snapshots_says_so() {
    // Plain sandboxes have no snapshots on the local backend: the emulator
    // answers 501 as a runtime without them does.
    let emulator = emulator("").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-snap-none");
    let source = claim(&backend, &run).await;
    let error = snapshots(&backend)
        .snapshot(&source, &run.labels(), soon())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    assert!(error.to_string().contains("NOT_IMPLEMENTED"), "{error}");
    assert!(
        snapshots(&backend)
            .list_snapshots(&run)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(emulator.live_snapshots(), 0);
    backend.release(&source).await.unwrap();
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_that_fails_part_way_releases_the_forks_it_made() {
    // Under the quota are the source and one fork: of three forks made at
    // once, one is made and two are refused.
    let emulator = emulator_on(Runtime::Namespaces, "quota=2").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-snap-quota");
    let source = claim(&backend, &run).await;
    let snapshot = snapshots(&backend)
        .snapshot(&source, &run.labels(), soon())
        .await
        .unwrap();
    let error = snapshots(&backend)
        .fork(&snapshot, 3, &run.labels(), soon())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("QUOTA_EXCEEDED"), "{error}");
    assert!(error.to_string().contains("after 1 were made"), "{error}");
    assert!(!error.kind().is_retryable(), "{error}");
    let counted = emulator.executions();
    assert_eq!(
        (counted.sandboxes_created, counted.sandboxes_deleted),
        (2, 1)
    );
    assert_eq!(
        backend.list_owned(&run).await.unwrap().sandboxes,
        std::slice::from_ref(&source.id)
    );
    // With room again, a fork is made whole.
    let forks = snapshots(&backend)
        .fork(&snapshot, 1, &run.labels(), soon())
        .await
        .unwrap();
    assert_eq!(forks.len(), 1);
    let reaped = backend.reap(&run).await.unwrap();
    assert_eq!((reaped.sandboxes, reaped.snapshots), (2, 1), "{reaped:?}");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_late_for_its_deadline_times_out_and_the_reap_gets_it_once_it_settles() {
    let emulator = emulator_on(Runtime::Namespaces, "snapshot-late=2s").await;
    let backend = backend(&emulator);
    let run = RunId::generate("os-snap-late");
    let source = claim(&backend, &run).await;
    let error = snapshots(&backend)
        .snapshot(
            &source,
            &run.labels(),
            Instant::now() + Duration::from_millis(500),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    // Still being captured, it cannot be deleted: the run holds it.
    assert_eq!(backend.list_owned(&run).await.unwrap().snapshots.len(), 1);
    let refused = backend.reap(&run).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Conflict, "{refused}");
    assert!(
        refused.message().contains("1 of the 2 objects of run")
            && refused.message().contains("(1 sandboxes, 1 snapshots)"),
        "{refused}"
    );
    assert_eq!(emulator.live_sandboxes(), 0);
    // A reap once it is ready removes it.
    let until = Instant::now() + Duration::from_secs(30);
    let reaped = loop {
        match backend.reap(&run).await {
            Ok(reaped) => break reaped,
            Err(error) if error.kind() == ErrorKind::Conflict && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("{error}"),
        }
    };
    assert_eq!((reaped.sandboxes, reaped.snapshots), (0, 1), "{reaped:?}");
    assert_eq!(emulator.live_snapshots(), 0);
    emulator.shutdown().await;
}
