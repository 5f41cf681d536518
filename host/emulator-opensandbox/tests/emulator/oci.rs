//! Sandboxes of OCI images pulled from a registry on loopback (Debian's
//! `docker-registry`, started here): a name a fleet file maps with `{ oci =
//! "REF" }` and a reference given as `image.uri` both run in the image, on its
//! files and not the host's; a reference the registry lacks fails the create as
//! the Docker runtime fails a pull, naming the reference, the registry and 404.

use hyper::{Method, StatusCode};
use sandfleet_emulator_opensandbox::{Emulator, EmulatorConfig, Runtime, images_from_fleet};
use sandfleet_registry_testing::host::programs;
use sandfleet_registry_testing::image::{Layer, Tar, build_with, push};
use sandfleet_registry_testing::registry::{Auth, Registry};
use serde_json::{Value, json};

use crate::http::client;
use crate::{Fixture, create_body};

async fn stdout_of(fx: &Fixture, execd: &str, command: &str) -> Vec<String> {
    let mut events = fx.command(execd, &json!({"command": command})).await;
    let seen: Vec<Value> = events.until_terminal().await;
    assert_eq!(
        seen.last().unwrap()["type"],
        "execution_complete",
        "{seen:?}"
    );
    seen.iter()
        .filter(|e| e["type"] == "stdout")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_of_a_mapped_name_and_of_a_reference_run_in_the_image_and_a_missing_tag_fails_the_create()
 {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let built = build_with(
        &[
            Layer::gzip(programs(&["bash", "cat", "rm", "sleep", "kill"]).finish()),
            Layer::gzip(
                Tar::new()
                    .dir("etc", 0o755)
                    .file("etc/motd", b"from the image\n")
                    .dir("work", 0o755)
                    .file("work/data.txt", b"image data\n")
                    .finish(),
            ),
        ],
        architecture,
        None,
        json!({"Env": ["PATH=/usr/bin:/bin"], "WorkingDir": "/work"}),
    );
    let registry = Registry::start(Auth::None).await;
    push(&registry, "os/tool", "1", &built).await;
    let reference = format!("{}/os/tool:1", registry.host);
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(
        &fleet,
        format!(
            "[[clusters]]\nname = \"dev\"\nbackend = \"local\"\n\n[clusters.dev.images]\ntool = {{ oci = \"{reference}\" }}\n"
        ),
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut config = EmulatorConfig::new(images_from_fleet(&fleet).unwrap());
    config.runtime = Runtime::Namespaces;
    config.state_dir = Some(state.path().to_path_buf());
    let fx = Fixture {
        emulator: Emulator::start(config).await.expect("the emulator starts"),
        http: client(),
        _image: dir,
        state,
    };
    let script = "cat /etc/motd; pwd; cat data.txt; if [ -e /etc/os-release ]; then echo host; else echo not-host; fi";
    for uri in ["tool", reference.as_str()] {
        let mut body = create_body();
        body["image"] = json!({"uri": uri});
        let id = fx.create(&body).await;
        let execd = fx.ready_execd(&id).await;
        assert_eq!(
            stdout_of(&fx, &execd, script).await,
            ["from the image", "/work", "image data", "not-host"],
            "{uri}"
        );
        let got = fx
            .api(Method::GET, &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(got.json()["image"]["uri"], uri);
    }
    assert_eq!(fx.emulator.live_sandboxes(), 2);
    // A tag the registry lacks: the create fails, naming what failed.
    let missing = format!("{}/os/tool:2", registry.host);
    let mut body = create_body();
    body["image"] = json!({"uri": missing});
    let reply = fx.api(Method::POST, "/v1/sandboxes", Some(&body)).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(reply.code(), "KUBERNETES::SANDBOX_IMAGE_PULL_FAILED");
    let message = reply.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with(&format!("Failed to pull image {missing}: ")),
        "{message}"
    );
    assert!(
        message.contains(&registry.host) && message.contains("404"),
        "{message}"
    );
    assert_eq!(fx.emulator.live_sandboxes(), 2);
    fx.emulator.shutdown().await;
}
