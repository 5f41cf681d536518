//! Images without a shell, as distroless images are: no `/bin/sh`, no
//! `tail`, no `true`, nothing but the task's files. Pulled for real from a
//! registry on loopback (Debian's `docker-registry`) into the devcluster,
//! whose pods run them in namespaces with nothing of the host's. Without a
//! toolbox the keep-alive cannot start and the claim fails with the
//! kubelet's reason; with one (an image of a static busybox, as
//! `busybox:musl` is), claims, commands, files, timeouts, scrubs and
//! pre-pulls all work, and commands still run the image's own programs
//! first.

use std::path::Path;
use std::time::{Duration, Instant};

use sandfleet_backend_k8s::{K8sBackend, K8sConfig};
use sandfleet_core::{Backend, ErrorKind, Recycling, RunId, TemplateSpec, template_name};
use sandfleet_registry_testing::image::{Built, Layer, Tar, build_with, push};
use sandfleet_registry_testing::registry::{Auth, Registry};
use serde_json::json;

use super::{Cluster, command, node_images, soon, spec};

fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The task image: its files and programs of its own (a static busybox
/// and its `cat`, standing for the task's interpreter), but no shell, no
/// `tail`, no `true`.
fn distroless() -> Built {
    let files = Tar::new()
        .dir("app", 0o755)
        .file("app/data.txt", b"the task's data\n")
        .dir("usr", 0o755)
        .dir("usr/bin", 0o755)
        .host_entry("usr/bin/busybox", &busybox())
        .symlink("usr/bin/cat", "busybox")
        .dir("etc", 0o755)
        .file("etc/passwd", b"root:x:0:0:root:/root:/sbin/nologin\n")
        .finish();
    build_with(
        &[Layer::gzip(files)],
        architecture(),
        None,
        json!({"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": "/app"}),
    )
}

/// The toolbox: a static busybox at `/bin/busybox`, as in `busybox:musl`.
fn toolbox() -> Built {
    let files = Tar::new()
        .dir("bin", 0o755)
        .host_entry("bin/busybox", &busybox())
        .finish();
    build_with(&[Layer::gzip(files)], architecture(), None, json!({}))
}

/// Debian's `busybox-static` (installed by `.ci/run`).
fn busybox() -> std::path::PathBuf {
    let path = Path::new("/bin/busybox").canonicalize().unwrap();
    let elf = std::fs::read(&path).expect("busybox-static is installed");
    // A dynamically linked busybox names an interpreter the image lacks.
    assert!(
        !has_interpreter(&elf),
        "{} is not statically linked",
        path.display()
    );
    path
}

/// Whether a 64-bit little-endian ELF file has a `PT_INTERP` program header.
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let at = |offset: usize, size: usize| -> u64 {
        elf[offset..offset + size]
            .iter()
            .rev()
            .fold(0, |value, &byte| value << 8 | u64::from(byte))
    };
    let (table, entry, count) = (
        at(0x20, 8) as usize,
        at(0x36, 2) as usize,
        at(0x38, 2) as usize,
    );
    (0..count).any(|i| at(table + i * entry, 4) as u32 == PT_INTERP)
}

/// A devcluster with agent-sandbox and a registry holding both images.
struct Images {
    cluster: Cluster,
    _registry: Registry,
    image: String,
    toolbox: String,
}

impl Images {
    async fn start() -> Images {
        let registry = Registry::start(Auth::None).await;
        push(&registry, "task/distroless", "1", &distroless()).await;
        push(&registry, "tools/busybox", "musl", &toolbox()).await;
        Images {
            cluster: Cluster::agent_sandbox().await,
            image: format!("{}/task/distroless:1", registry.host),
            toolbox: format!("{}/tools/busybox:musl", registry.host),
            _registry: registry,
        }
    }

    fn config(&self, toolbox: bool) -> K8sConfig {
        K8sConfig {
            toolbox: toolbox.then(|| self.toolbox.clone()),
            ..self.cluster.config()
        }
    }

    fn backend(&self, toolbox: bool) -> K8sBackend {
        self.cluster.backend(self.config(toolbox))
    }

    fn spec(&self, run: &RunId) -> TemplateSpec {
        TemplateSpec {
            name: template_name(run, "distroless"),
            image: self.image.clone(),
            env: Default::default(),
            ..spec(run)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_toolbox_a_shell_less_image_fails_its_claim_with_the_kubelets_reason() {
    let images = Images::start().await;
    let backend = images.cluster.backend(K8sConfig {
        bind_timeout: Some(Duration::from_secs(2)),
        ..images.config(false)
    });
    let run = RunId::new("run-no-toolbox").unwrap();
    let template = backend.ensure_template(&images.spec(&run)).await.unwrap();
    let error = backend
        .claim(&template, &run.labels(), soon())
        .await
        .expect_err("a keep-alive the image lacks ran");
    // The kubelet backs off and starts it again, as a real one would, so
    // the claim times out (twice: it is made again once); it says why, and
    // what to do.
    assert!(
        matches!(error.kind(), ErrorKind::Timeout | ErrorKind::Unavailable),
        "{error}"
    );
    for said in [
        "CrashLoopBackOff",
        "StartError",
        "exec: \"tail\": executable file not found in $PATH",
        "toolbox = \"busybox:1.37-musl\"",
    ] {
        assert!(error.message().contains(said), "{said}: {error}");
    }
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_toolbox_a_shell_less_image_runs_commands_files_timeouts_and_scrubs() {
    let images = Images::start().await;
    let backend = images.backend(true);
    let run = RunId::new("run-toolbox").unwrap();
    let template = backend.ensure_template(&images.spec(&run)).await.unwrap();
    let handle = backend
        .claim(&template, &run.labels(), soon())
        .await
        .unwrap();
    // A program the image has is the image's; one it lacks, the
    // toolbox's; the workdir is the image's.
    // (The first mapping of a static program is its own file.)
    let program = |argv: &'static [&'static str]| {
        let backend = &backend;
        let handle = &handle;
        async move {
            let ran = backend.exec(handle, &command(argv), None).await.unwrap();
            let maps = String::from_utf8_lossy(&ran.stdout).into_owned();
            let first = maps.lines().next().unwrap_or_default();
            first
                .split_whitespace()
                .last()
                .unwrap_or_default()
                .to_string()
        }
    };
    assert_eq!(
        program(&["cat", "/proc/self/maps"]).await,
        "/usr/bin/busybox"
    );
    assert_eq!(
        program(&["tail", "-n", "+1", "/proc/self/maps"]).await,
        "/.sandfleet/bin/busybox"
    );
    let ran = backend
        .exec(&handle, &command(&["cat", "data.txt"]), None)
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "the task's data\n");
    let path = backend
        .exec(&handle, &command(&["sh", "-c", "echo \"$PATH\""]), None)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&path.stdout),
        "/usr/local/bin:/usr/bin:/bin:/.sandfleet/bin\n"
    );
    // The toolbox cannot be changed by a task.
    let write = backend
        .exec(
            &handle,
            &command(&["cp", "/app/data.txt", "/.sandfleet/bin/x"]),
            None,
        )
        .await
        .unwrap();
    assert_ne!(write.exit_code, 0, "{write:?}");
    // Files travel through the toolbox's programs.
    backend
        .put_file(&handle, "/app/out/result.json", b"{\"ok\": true}", 0o644)
        .await
        .unwrap();
    assert_eq!(
        backend
            .get_file(&handle, "/app/out/result.json")
            .await
            .unwrap(),
        b"{\"ok\": true}"
    );
    // A timeout kills the command's group with the toolbox's kill.
    let mut slow = command(&["sleep", "30"]);
    slow.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let timed_out = backend.exec(&handle, &slow, None).await.unwrap();
    assert!(timed_out.timed_out, "{timed_out:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // A scrub kills what a task left, sparing the toolbox's keep-alive.
    backend
        .exec(
            &handle,
            &command(&["sh", "-c", "nohup sleep 300 >/dev/null 2>&1 & exit 0"]),
            None,
        )
        .await
        .unwrap();
    backend.scrub(&handle).await.unwrap();
    let left = backend
        .exec(
            &handle,
            &command(&["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]),
            None,
        )
        .await
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left.contains("sleep 300") && left.contains("/.sandfleet/bin/tail -f /dev/null"),
        "{left}"
    );
    backend.release(&handle).await.unwrap();
    backend.reap(&run).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_toolbox_a_shell_less_image_is_pre_pulled_on_every_node() {
    let images = Images::start().await;
    let backend = images.backend(true).pre_pulling(Duration::from_secs(60));
    let run = RunId::new("run-pull").unwrap();
    let pulls = backend.pulls().expect("asked to pre-pull");
    pulls
        .pull_image(&images.image, &run.labels(), &|_| {})
        .await
        .unwrap();
    for held in node_images(&images.cluster.client().await).await {
        assert!(held.contains(&images.image), "{held:?}");
    }
}
