//! A run pulls the OCI images it needs before it warms, from a real
//! registry (Debian's `docker-registry`) on loopback: what is missing is
//! listed with the bytes to fetch first, each pull is a `pull` phase, and
//! an image the registry lacks makes its own tasks infrastructure errors
//! naming the reference, the registry and the status, while the other
//! image's tasks run.

use std::sync::Arc;

use sandfleet_backend_local::{IsolationMode, LocalBackend, LocalConfig};
use sandfleet_engine::pulls::{self, ClusterPulls};
use sandfleet_engine::{CancellationToken, Cluster, FleetSettings, TaskRecord, TaskStatus};
use sandfleet_registry_testing::host::programs;
use sandfleet_registry_testing::image::{Built, Layer, Tar, build_with, push};
use sandfleet_registry_testing::registry::{Auth, Registry};
use serde_json::json;

use crate::fixture::{Fixture, row};

/// `bash` and what it loads, at the host's paths: what the generic
/// adapter's commands need.
fn bash_layer() -> Layer {
    Layer::gzip(programs(&["bash"]).dir("workspace", 0o755).finish())
}

/// An image of `layers` whose commands run in `/workspace`.
fn image(layers: &[Layer]) -> Built {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    build_with(
        layers,
        architecture,
        None,
        json!({"Env": ["PATH=/usr/bin:/bin"], "WorkingDir": "/workspace"}),
    )
}

/// A layer holding `/etc/marker` with `text`.
fn marker(text: &str) -> Layer {
    Layer::gzip(
        Tar::new()
            .dir("etc", 0o755)
            .file("etc/marker", format!("{text}\n").as_bytes())
            .finish(),
    )
}

fn compressed(layers: &[&Layer]) -> u64 {
    layers.iter().map(|l| l.blob.len() as u64).sum()
}

/// The images `pulls` lists for its only cluster, with their bytes or
/// errors as text.
fn listed(pulls: &[ClusterPulls]) -> Vec<(String, Result<Option<u64>, String>)> {
    assert!(pulls.len() <= 1, "one cluster");
    pulls
        .iter()
        .flat_map(|p| &p.images)
        .map(|i| {
            (
                i.image.clone(),
                i.bytes.as_ref().copied().map_err(ToString::to_string),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_pulls_first_and_an_image_it_cannot_pull_fails_only_its_tasks() {
    let registry = Registry::start(Auth::None).await;
    let bash = bash_layer();
    let (here, other) = (marker("here"), marker("other"));
    push(
        &registry,
        "pulls/here",
        "1",
        &image(&[bash.clone(), here.clone()]),
    )
    .await;
    push(
        &registry,
        "pulls/other",
        "1",
        &image(&[bash.clone(), other.clone()]),
    )
    .await;
    let present = format!("{}/pulls/here:1", registry.host);
    let absent = format!("{}/pulls/absent:1", registry.host);
    let second = format!("{}/pulls/other:1", registry.host);

    let fixture = Fixture::new(0);
    let backend = Arc::new(
        LocalBackend::new(
            "local",
            LocalConfig {
                state_dir: Some(fixture.state_dir()),
                isolation: IsolationMode::Namespaces,
                ..LocalConfig::default()
            },
        )
        .unwrap(),
    );
    let clusters = vec![Cluster {
        name: "local".into(),
        kind: "local".into(),
        weight: 1,
        backend: backend.clone(),
        pace: None,
    }];

    // Before the run: both images missing, the bytes of the one the
    // registry has, the registry's 404 for the other; a line each.
    let before = pulls::images_to_pull(&clusters, &[absent.clone(), present.clone()]).await;
    let before_listed = listed(&before);
    assert_eq!(before_listed.len(), 2, "{before_listed:?}");
    assert_eq!(
        before_listed[1],
        (present.clone(), Ok(Some(compressed(&[&bash, &here]))))
    );
    let (image, missing) = &before_listed[0];
    assert_eq!(image, &absent);
    let error = missing.as_ref().unwrap_err();
    for said in [absent.as_str(), registry.host.as_str(), "404"] {
        assert!(error.contains(said), "`{said}` is not in: {error}");
    }
    let table = pulls::render(&clusters, &before);
    assert!(
        table
            .lines()
            .any(|line| line.starts_with("pull: local: ") && line.contains(&present)),
        "{table}"
    );
    assert!(
        table.contains("2 image(s) missing") && table.contains("(1 cannot be pulled)"),
        "{table}"
    );

    let rows: Vec<String> = ["a", "b"]
        .iter()
        .map(|id| {
            row(
                id,
                &present,
                "read -r seen < /etc/marker && [ \"$seen\" = here ]",
                30,
            )
        })
        .chain(["c", "d"].iter().map(|id| row(id, &absent, "true", 30)))
        .collect();
    let settings = FleetSettings {
        max_concurrent: 2,
        ..FleetSettings::default()
    };
    let report = sandfleet_engine::run(
        fixture.spec(backend.clone(), settings, CancellationToken::new()),
        fixture.items(&rows),
    )
    .await
    .unwrap();
    let results = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    assert_eq!(report.tasks.ok, 2, "{}\n{results}", report.render());
    assert_eq!(report.tasks.infra_error, 2, "{}", report.render());
    assert!(report.render().contains("\npull "), "{}", report.render());
    let records: Vec<TaskRecord> = results
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    for record in &records {
        if record.image == present {
            assert_eq!(record.status, TaskStatus::Ok, "{record:?}");
            continue;
        }
        assert_eq!(record.status, TaskStatus::InfraError, "{record:?}");
        assert_eq!(record.sandbox, None, "never claimed: {record:?}");
        let error = record.error.as_deref().unwrap_or_default();
        for said in [absent.as_str(), registry.host.as_str(), "404"] {
            assert!(error.contains(said), "`{said}` is not in: {error}");
        }
    }
    assert_eq!(records.len(), 4);

    // One pull, the image that could be pulled: a phase of report.json.
    let written: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture.out_dir().join(sandfleet_engine::REPORT_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(written["phases"]["pull"]["count"], 1, "{written:#}");
    assert!(written["phases"]["pull"]["total_s"].as_f64().unwrap() > 0.0);

    // After it: the pulled image is no longer missing, and an image
    // sharing its bash layer costs only its own layer.
    let after = pulls::images_to_pull(&clusters, &[present.clone(), second.clone()]).await;
    assert_eq!(listed(&after), [(second, Ok(Some(compressed(&[&other]))))]);
    let after = pulls::images_to_pull(&clusters, &[present]).await;
    assert!(after.is_empty(), "{:?}", listed(&after));
    assert_eq!(pulls::render(&clusters, &after), "");
}
