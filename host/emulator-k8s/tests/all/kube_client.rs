//! kube-rs (the Kubernetes driver's client library) against the emulator: watch
//! correctness under faults with its runtime watcher, which resumes from the last event
//! or bookmark when a watch ends and relists on 410 Gone; and a long-lived exec session
//! fed on stdin over its websocket exec, alone in its pod, its output streamed through
//! and not kept.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use sandfleet_emulator_k8s::{Config, Emulator};
use serde_json::json;
use tokio::sync::mpsc;

/// Updates made to the watched object, paced so that several watch drops fall among them.
const UPDATES: u32 = 30;

async fn client(emulator: &Emulator, dir: &tempfile::TempDir) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = dir.path().join("kubeconfig");
    emulator.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// What the watcher saw of the counter: (was it a relist's InitApply, its value).
async fn run(faults: &str) -> (Vec<(bool, u32)>, usize) {
    let emulator = Emulator::start(Config {
        faults: faults.into(),
        bookmark_interval: Duration::from_millis(150),
        ..Config::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = client(&emulator, &dir).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let counter: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "counter"}, "data": {"v": "0"}}))
            .unwrap();
    api.create(&PostParams::default(), &counter).await.unwrap();
    // Another object changes too, so bookmarks carry RVs past events this watch filters out.
    let noise: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "noise"}, "data": {"v": "0"}})).unwrap();
    api.create(&PostParams::default(), &noise).await.unwrap();

    let (tx, mut rx) = mpsc::unbounded_channel();
    let config = watcher::Config::default().fields("metadata.name=counter");
    let stream = watcher::watcher(api.clone(), config).default_backoff();
    let watching = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let _ = tx.send(event);
        }
    });
    let mut seen = Vec::new();
    let mut relists = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    // Updates start once the first list is in: a list slower than the first update
    // would show that update as listed, not applied.
    while !record(next(&mut rx, deadline).await, &mut seen, &mut relists) {}
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    for i in 1..=UPDATES {
        pace.tick().await;
        for name in ["counter", "noise"] {
            let patch = json!({"data": {"v": i.to_string()}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    }
    while seen.last().map(|(_, v)| *v) != Some(UPDATES) {
        record(next(&mut rx, deadline).await, &mut seen, &mut relists);
    }
    watching.abort();
    emulator.shutdown().await;
    (seen, relists)
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>, deadline: Instant) -> T {
    let left = deadline.saturating_duration_since(Instant::now());
    tokio::time::timeout(left, rx.recv())
        .await
        .expect("the last update within 20 s")
        .expect("stream open")
}

/// Note one watcher event; returns whether it ended a list.
fn record(
    event: Result<Event<ConfigMap>, watcher::Error>,
    seen: &mut Vec<(bool, u32)>,
    relists: &mut usize,
) -> bool {
    match event {
        Ok(Event::Init) => *relists += 1,
        Ok(Event::InitApply(cm)) => seen.push((true, value(&cm))),
        Ok(Event::Apply(cm)) => seen.push((false, value(&cm))),
        Ok(Event::InitDone) => return true,
        Ok(Event::Delete(_)) => {}
        // Errors (the 410) are what the watcher recovers from.
        Err(_) => {}
    }
    false
}

fn value(cm: &ConfigMap) -> u32 {
    cm.data
        .as_ref()
        .and_then(|d| d.get("v"))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resuming_from_bookmarks_through_dropped_watches_sees_every_update_once_in_order()
{
    let (seen, relists) = run("watch-drop=0.7").await;
    let applied: Vec<u32> = seen
        .iter()
        .filter(|(init, _)| !init)
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(applied, (1..=UPDATES).collect::<Vec<_>>(), "{seen:?}");
    assert_eq!(
        relists, 1,
        "only the first list: every drop resumed from an RV"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_relisting_on_410_sees_no_update_twice_or_out_of_order() {
    let (seen, relists) = run("watch-drop=0.7,gone-burst").await;
    assert!(relists >= 2, "410s made the watcher relist: {relists}");
    let applied: Vec<u32> = seen
        .iter()
        .filter(|(init, _)| !init)
        .map(|(_, v)| *v)
        .collect();
    assert!(
        applied.windows(2).all(|w| w[0] < w[1]),
        "no update twice or out of order: {seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[0].1 <= w[1].1),
        "a relist never goes back: {seen:?}"
    );
    assert_eq!(seen.last().unwrap().1, UPDATES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_shell_over_kube_exec_runs_many_commands_fed_on_stdin_alone_in_its_pod_keeping_no_output()
 {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::AttachParams;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let image = tempfile::tempdir().unwrap();
    let mut images = sandfleet_emulator_k8s::ImageMap::new();
    images.insert(
        "py".into(),
        sandfleet_backend_local::ImageSource {
            path: image.path().to_path_buf(),
            git: false,
            limits: Default::default(),
        },
    );
    let emulator = Emulator::start(Config {
        images,
        ..Config::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = client(&emulator, &dir).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "shell"}, "spec": {"containers": [{"name": "main", "image": "py"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while pods
        .get("shell")
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase)
        .as_deref()
        != Some("Running")
    {
        assert!(Instant::now() < deadline, "pod never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut session = pods
        .exec(
            "shell",
            ["sh"],
            &AttachParams::default()
                .stdin(true)
                .stdout(true)
                .stderr(true),
        )
        .await
        .unwrap();
    let mut stdin = session.stdin().unwrap();
    let mut stdout = session.stdout().unwrap();
    let status = session.take_status().unwrap();
    // One command at a time, each answered before the next is sent.
    let mut all = String::new();
    for i in 0..20 {
        stdin
            .write_all(format!("echo line-$(({i} * 2))\n").as_bytes())
            .await
            .unwrap();
        let mut buf = vec![0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), stdout.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert_eq!(got, format!("line-{}\n", i * 2));
        all.push_str(&got);
    }
    // The pod runs its init and the shell, nothing else: no helper feeds stdin.
    stdin
        .write_all(b"for d in /proc/[0-9]*; do printf '%s ' \"$(tr '\\0' ' ' < $d/cmdline)\"; done; echo\n")
        .await
        .unwrap();
    let listed = read_line(&mut stdout).await;
    let commands: Vec<&str> = listed.trim().split("  ").collect();
    assert_eq!(commands.len(), 2, "{listed}");
    assert!(
        commands[0].starts_with("sandfleet-sandbox:") && commands[1] == "sh",
        "{listed}"
    );
    // Output streams through without being kept: 128 MiB read by the client
    // leave the process (emulator and client) no bigger by that much.
    const STREAMED: u64 = 128 << 20;
    let before = rss_mib();
    stdin
        .write_all(format!("head -c {STREAMED} /dev/zero; echo\n").as_bytes())
        .await
        .unwrap();
    let mut received = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    while received <= STREAMED {
        let n = tokio::time::timeout(Duration::from_secs(60), stdout.read(&mut buf))
            .await
            .expect("output within 60 s")
            .unwrap();
        assert!(n > 0, "the stream ended after {received} bytes");
        received += n as u64;
    }
    let grown = rss_mib().saturating_sub(before);
    assert!(
        grown < 48,
        "the process grew by {grown} MiB while streaming"
    );
    stdin.write_all(b"exit 4\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(10), status)
        .await
        .unwrap()
        .expect("a status");
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let code = status
        .details
        .and_then(|d| d.causes)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.message);
    assert_eq!(code.as_deref(), Some("4"));
    session.join().await.unwrap();
    assert_eq!(all.lines().count(), 20);
    emulator.shutdown().await;
}

/// The next line of a session's output (lines arrive whole: the shell writes each in
/// one call).
async fn read_line(stdout: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    use tokio::io::AsyncReadExt;
    let mut line = Vec::new();
    while line.last() != Some(&b'\n') {
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), stdout.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "the session ended");
        line.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(line).unwrap()
}

/// This process's resident memory, in MiB.
fn rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap();
    kib >> 10
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tty_exec_runs_on_a_terminal_with_stderr_on_it() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::AttachParams;
    use tokio::io::AsyncReadExt;

    let image = tempfile::tempdir().unwrap();
    let mut images = sandfleet_emulator_k8s::ImageMap::new();
    images.insert(
        "py".into(),
        sandfleet_backend_local::ImageSource {
            path: image.path().to_path_buf(),
            git: false,
            limits: Default::default(),
        },
    );
    let emulator = Emulator::start(Config {
        images,
        ..Config::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = client(&emulator, &dir).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "tty"}, "spec": {"containers": [{"name": "main", "image": "py"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while pods
        .get("tty")
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase)
        .as_deref()
        != Some("Running")
    {
        assert!(Instant::now() < deadline, "pod never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut session = pods
        .exec(
            "tty",
            [
                "sh",
                "-c",
                "test -t 1 && echo on-a-tty; echo err >&2; exit 5",
            ],
            &AttachParams::default().stdout(true).stderr(false).tty(true),
        )
        .await
        .unwrap();
    let mut stdout = session.stdout().unwrap();
    let status = session.take_status().unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), stdout.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out, "on-a-tty\r\nerr\r\n");
    let status = status.await.expect("a status");
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    emulator.shutdown().await;
}
