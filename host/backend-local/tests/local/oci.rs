//! Sandboxes of OCI images: pulled on first use, the image's layers as the
//! whole root (nothing of the host's), its config honoured, its layers'
//! whiteouts and opaque directories applied, hundreds of layers mounted,
//! the image pinned while used, and a failed pull named.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use sandfleet_backend_local::{IsolationMode, LocalBackend, LocalConfig, Volume, layer_ownership};
use sandfleet_core::{Backend, ErrorKind, RunId, SandboxHandle, TemplateSpec};
use sandfleet_images::{Reference, Store};
use sandfleet_registry_testing::image::{Layer, Tar};
use sandfleet_registry_testing::registry::free_port;
use serde_json::json;

use crate::common::{PATIENCE, sh, sh_ok};
use crate::oci_image::{self, IMAGE_PATH};

/// A namespaced backend over a state directory of its own, and a run.
fn backend(state: &tempfile::TempDir) -> (LocalBackend, RunId) {
    backend_with(state, |_| {})
}

/// [`backend`], with `configure` changing its configuration first.
fn backend_with(
    state: &tempfile::TempDir,
    configure: impl FnOnce(&mut LocalConfig),
) -> (LocalBackend, RunId) {
    let mut config = LocalConfig {
        state_dir: Some(state.path().to_path_buf()),
        isolation: IsolationMode::Namespaces,
        ..LocalConfig::default()
    };
    configure(&mut config);
    (
        LocalBackend::new("local", config).unwrap(),
        RunId::generate("oci"),
    )
}

/// A claimed sandbox of `reference`.
async fn claimed(backend: &LocalBackend, run_id: &RunId, reference: &str) -> SandboxHandle {
    let template = backend
        .ensure_template(&spec(run_id, reference, &[]))
        .await
        .unwrap();
    backend
        .claim(&template, &run_id.labels(), Instant::now() + PATIENCE)
        .await
        .unwrap()
}

fn spec(run_id: &RunId, image: &str, env: &[(&str, &str)]) -> TemplateSpec {
    TemplateSpec {
        name: "oci".into(),
        image: image.into(),
        cpu_milli: 1000,
        memory_mib: 512,
        disk_mib: 256,
        network: false,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        labels: run_id.labels(),
    }
}

#[tokio::test]
async fn an_image_runs_as_its_config_says_with_nothing_of_the_host() {
    let served = oci_image::serve(
        "oci/config",
        &[],
        json!({
            "Env": [format!("PATH={IMAGE_PATH}:/opt/tool/bin"), "FROM_IMAGE=1", "SHADOWED=image"],
            "WorkingDir": "/workspace",
        }),
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    let (backend, run_id) = backend(&state);
    // A reference is made; a bare word that is no image's name is not.
    let images = backend.capabilities().images;
    assert!(images.can_make(&served.reference));
    assert!(!images.can_make("nowhere"));
    // No mapping: the reference itself is the image, pulled on first use.
    let template = backend
        .ensure_template(&spec(
            &run_id,
            &served.reference,
            &[("SHADOWED", "template")],
        ))
        .await
        .unwrap();
    let sandbox = backend
        .claim(&template, &run_id.labels(), Instant::now() + PATIENCE)
        .await
        .unwrap();
    let seen = sh_ok(
        &backend,
        &sandbox,
        "pwd; echo $PATH; echo $FROM_IMAGE $SHADOWED; cat /etc/hostname; ls tests",
    )
    .await;
    assert_eq!(
        seen,
        format!(
            "/workspace\n{IMAGE_PATH}:/opt/tool/bin\n1 template\n{}\n__init__.py\ntest_ops.py\n",
            sandbox.id
        )
    );
    // Nothing of the host's root: not this test's binary, not the host's
    // /etc, not its tools beyond the image's.
    let exe = std::env::current_exe().unwrap();
    for host_only in [
        exe.display().to_string(),
        "/etc/os-release".into(),
        "/usr/bin/nsenter".into(),
        state.path().display().to_string(),
    ] {
        let found = sh(&backend, &sandbox, &format!("test -e {host_only}")).await;
        assert_ne!(found.exit_code, 0, "{host_only} is visible in the sandbox");
    }
    // The image is pinned while a template uses it.
    let store = Store::open(state.path(), layer_ownership(0x7000_0000).unwrap()).unwrap();
    let reference = Reference::parse(&served.reference).unwrap();
    let busy = store.remove(&reference).await.unwrap_err();
    assert!(busy.to_string().contains("in use"), "{busy}");
    backend.release(&sandbox).await.unwrap();
    drop(backend);
    store.remove(&reference).await.unwrap();
}

#[tokio::test]
async fn whiteouts_opaque_directories_and_hundreds_of_layers_are_the_images() {
    let mut extra = vec![
        Layer::new(
            Tar::new()
                .dir("data", 0o755)
                .file("data/keep", b"keep")
                .file("data/gone", b"gone")
                .dir("data/dir", 0o755)
                .file("data/dir/old", b"old")
                .finish(),
            sandfleet_images::Compression::Gzip,
        ),
        Layer::new(
            Tar::new()
                .file("data/.wh.gone", b"")
                .file("data/dir/.wh..wh..opq", b"")
                .file("data/dir/new", b"new")
                .finish(),
            sandfleet_images::Compression::Zstd,
        ),
    ];
    // More layers than one page of mount options could name by path.
    const MANY: usize = 260;
    for n in 0..MANY {
        let tar = Tar::new()
            .dir("layers", 0o755)
            .file(&format!("layers/{n}"), b"")
            .file("layers/top", format!("{n}\n").as_bytes())
            .finish();
        extra.push(Layer::new(tar, sandfleet_images::Compression::None));
    }
    let served = oci_image::serve("oci/layers", &extra, oci_image::escape_config()).await;
    let state = tempfile::tempdir().unwrap();
    let (backend, run_id) = backend(&state);
    let sandbox = claimed(&backend, &run_id, &served.reference).await;
    let seen = sh_ok(
        &backend,
        &sandbox,
        "ls /data; ls /data/dir; ls /layers | wc -l; cat /layers/top",
    )
    .await;
    assert_eq!(
        seen,
        format!("dir\nkeep\nnew\n{}\n{}\n", MANY + 1, MANY - 1)
    );
    // A sandbox's changes to the image stay in its own layer.
    sh_ok(
        &backend,
        &sandbox,
        "echo changed > /data/keep; rm /layers/top",
    )
    .await;
    let other = claimed(&backend, &run_id, &served.reference).await;
    let seen = sh_ok(&backend, &other, "cat /data/keep; cat /layers/top").await;
    assert_eq!(seen, format!("keep{}\n", MANY - 1));
    backend.release(&sandbox).await.unwrap();
    backend.release(&other).await.unwrap();
}

#[tokio::test]
async fn commands_run_as_the_images_user() {
    let served = oci_image::serve(
        "oci/user",
        &[],
        json!({"Env": [format!("PATH={IMAGE_PATH}")], "User": "agent"}),
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    let (backend, run_id) = backend(&state);
    let sandbox = claimed(&backend, &run_id, &served.reference).await;
    let result = sh(&backend, &sandbox, "id -u; id -g; pwd").await;
    if rustix::process::geteuid().is_root() {
        assert_eq!(
            String::from_utf8_lossy(&result.stdout),
            "1000\n1000\n/workspace\n",
            "{result:?}"
        );
    } else {
        // Unprivileged, a sandbox maps its root alone, and says so.
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(stderr.contains("cannot be taken"), "{stderr}");
    }
    backend.release(&sandbox).await.unwrap();
}

#[tokio::test]
async fn a_failed_pull_names_the_reference_the_registry_and_the_status() {
    let served = oci_image::serve("oci/present", &[], oci_image::escape_config()).await;
    let state = tempfile::tempdir().unwrap();
    let (backend, run_id) = backend(&state);
    let missing = format!("{}/oci/absent:1", served.registry.host);
    let error = backend
        .ensure_template(&spec(&run_id, &missing, &[]))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    let message = error.to_string();
    for said in [missing.as_str(), served.registry.host.as_str(), "404"] {
        assert!(message.contains(said), "{said:?} is not said: {message}");
    }
    let down = format!("127.0.0.1:{}/oci/any:1", free_port());
    let error = backend
        .ensure_template(&spec(&run_id, &down, &[]))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error.to_string().contains(&down) && error.to_string().contains("unreachable"),
        "{error}"
    );
}

#[tokio::test]
async fn the_configured_platform_is_the_one_taken_from_a_multi_platform_image() {
    use sandfleet_images::spec::Compression;
    use sandfleet_registry_testing::image::{build_with, push_index};
    use sandfleet_registry_testing::registry::{Auth, Registry};

    let registry = Registry::start(Auth::None).await;
    // Both entries run the host's programs; only a file says which it is.
    let built: Vec<_> = ["amd64", "arm64"]
        .iter()
        .map(|arch| {
            let marker = Tar::new()
                .dir("etc", 0o755)
                .file("etc/platform", arch.as_bytes());
            let layers: Vec<Layer> = oci_image::base_layers()
                .iter()
                .cloned()
                .chain([Layer::new(marker.finish(), Compression::None)])
                .collect();
            build_with(&layers, arch, None, oci_image::escape_config())
        })
        .collect();
    push_index(
        &registry,
        "oci/multi",
        "1",
        &[(&built[0], "amd64"), (&built[1], "arm64")],
    )
    .await;
    let reference = format!("{}/oci/multi:1", registry.host);
    let host = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "amd64"
    };
    let other = if host == "amd64" { "arm64" } else { "amd64" };
    for (platform, expected) in [(None, host), (Some(format!("linux/{other}")), other)] {
        let state = tempfile::tempdir().unwrap();
        let (backend, run_id) = backend_with(&state, |config| {
            if let Some(platform) = &platform {
                config.registries.platform = platform.parse().unwrap();
            }
        });
        let sandbox = claimed(&backend, &run_id, &reference).await;
        let seen = sh_ok(&backend, &sandbox, "cat /etc/platform").await;
        assert_eq!(seen, expected, "platform {platform:?}");
        backend.release(&sandbox).await.unwrap();
    }
}

/// A registry that answers every request 503, counting them.
async fn unavailable_registry() -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\n\
                          content-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
            });
        }
    });
    (host, requests)
}

#[tokio::test]
async fn a_template_whose_registry_is_unavailable_is_tried_once_for_the_engine_to_retry() {
    let (host, requests) = unavailable_registry().await;
    let state = tempfile::tempdir().unwrap();
    let (backend, run_id) = backend(&state);
    let reference = format!("{host}/oci/busy:1");
    let error = backend
        .ensure_template(&spec(&run_id, &reference, &[]))
        .await
        .unwrap_err();
    assert!(error.kind().is_retryable(), "{error}");
    // One attempt: the engine's retry is the only one, not one inside it.
    assert_eq!(requests.load(Ordering::SeqCst), 1, "{error}");
}

/// A sandbox of `reference` with `volumes` mounted.
async fn claimed_with_volumes(
    backend: &LocalBackend,
    run_id: &RunId,
    reference: &str,
    volumes: Vec<Volume>,
) -> Result<SandboxHandle, sandfleet_core::BackendError> {
    let template = backend
        .ensure_template(&spec(run_id, reference, &[]))
        .await
        .unwrap();
    backend
        .claim_with_volumes(
            &template,
            &run_id.labels(),
            volumes,
            Instant::now() + PATIENCE,
        )
        .await
}

fn volume(source: &std::path::Path, target: &str, read_only: bool) -> Volume {
    Volume {
        source: source.canonicalize().unwrap(),
        target: target.into(),
        read_only,
    }
}

#[tokio::test]
async fn a_volume_is_shared_by_sandboxes_and_read_only_where_asked() {
    let served = oci_image::serve("oci/volumes", &[], oci_image::escape_config()).await;
    let state = tempfile::tempdir().unwrap();
    let shared = tempfile::tempdir().unwrap();
    let (backend, run_id) = backend(&state);
    let writer = claimed_with_volumes(
        &backend,
        &run_id,
        &served.reference,
        vec![volume(shared.path(), "/sandfleet/shared", false)],
    )
    .await
    .unwrap();
    sh_ok(
        &backend,
        &writer,
        "echo from-the-writer > /sandfleet/shared/note",
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(shared.path().join("note")).unwrap(),
        "from-the-writer\n"
    );
    let reader = claimed_with_volumes(
        &backend,
        &run_id,
        &served.reference,
        vec![volume(shared.path(), "/data/in", true)],
    )
    .await
    .unwrap();
    assert_eq!(
        sh_ok(&backend, &reader, "cat /data/in/note").await,
        "from-the-writer\n"
    );
    let refused = sh(&backend, &reader, "echo more > /data/in/note").await;
    assert_ne!(refused.exit_code, 0, "a read-only volume took a write");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Read-only file system"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // A sandbox without the volume does not see it.
    let other = claimed(&backend, &run_id, &served.reference).await;
    assert_eq!(
        sh(&backend, &other, "ls /sandfleet/shared").await.exit_code,
        2
    );
    backend.reap(&run_id).await.unwrap();
}

#[tokio::test]
async fn a_link_in_the_image_on_a_volumes_path_is_refused_not_followed() {
    // The image links the volume's parent to its /etc: followed, the volume
    // would land at /etc/sub, over what the image holds there.
    let links = Layer::new(
        Tar::new().symlink("opt", "/etc").finish(),
        sandfleet_images::spec::Compression::None,
    );
    let served = oci_image::serve("oci/linked", &[links], oci_image::escape_config()).await;
    let state = tempfile::tempdir().unwrap();
    let shared = tempfile::tempdir().unwrap();
    let (backend, run_id) = backend(&state);
    let error = claimed_with_volumes(
        &backend,
        &run_id,
        &served.reference,
        vec![volume(shared.path(), "/opt/sub", false)],
    )
    .await
    .expect_err("a volume mounted through the image's link");
    assert!(
        error
            .to_string()
            .contains("/opt is not a directory reached without links"),
        "{error}"
    );
    let outside = claimed_with_volumes(
        &backend,
        &run_id,
        &served.reference,
        vec![volume(shared.path(), "/data/../etc", false)],
    )
    .await
    .expect_err("a mount point with `..`");
    assert_eq!(outside.kind(), ErrorKind::Invalid, "{outside}");
    backend.reap(&run_id).await.unwrap();
}
