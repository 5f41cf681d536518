//! A run of OCI images pulls them before it warms, from a real registry
//! (Debian's `docker-registry`) on loopback: `sandfleet plan` lists what
//! is missing and the bytes first, the run shows each layer's pull on
//! stderr and reports a `pull` phase, and an image the registry lacks
//! fails only its own tasks.

use serde_json::json;

use sandfleet_registry_testing::host::programs;
use sandfleet_registry_testing::image::{Layer, Tar, build_with, push};
use sandfleet_registry_testing::registry::{Auth, Registry};

use crate::{Scratch, sandfleet, stderr, stdout};

/// The lines of `plan`'s output about pulls.
fn pull_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("pull: ")).collect()
}

#[test]
fn plan_lists_what_a_run_pulls_and_the_run_pulls_it_first() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bash = Layer::gzip(programs(&["bash"]).dir("workspace", 0o755).finish());
    let marker = Layer::gzip(
        Tar::new()
            .dir("etc", 0o755)
            .file("etc/marker", b"here\n")
            .finish(),
    );
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let built = build_with(
        &[bash.clone(), marker.clone()],
        architecture,
        None,
        json!({"Env": ["PATH=/usr/bin:/bin"], "WorkingDir": "/workspace"}),
    );
    let registry = runtime.block_on(async {
        let registry = Registry::start(Auth::None).await;
        push(&registry, "e2e/here", "1", &built).await;
        registry
    });
    let present = format!("{}/e2e/here:1", registry.host);
    let absent = format!("{}/e2e/absent:1", registry.host);
    let scratch = Scratch::new();
    let check = "read -r seen < /etc/marker && [ \"$seen\" = here ]";
    let rows = [
        json!({"id": "here-1", "image": present, "test": check}),
        json!({"id": "here-2", "image": present, "test": check}),
        json!({"id": "gone", "image": absent, "test": "true"}),
    ];
    let fleet = scratch.fleet(&rows, "");
    let fleet = fleet.to_str().unwrap();

    // Before: both listed, the present one with its compressed bytes.
    let plan = sandfleet(&["plan", fleet]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    let text = stdout(&plan);
    let lines = pull_lines(&text);
    let kib = (bash.blob.len() + marker.blob.len()) as f64 / 1024.0;
    let shown = if kib >= 1024.0 {
        format!("{:.2} MiB to fetch", kib / 1024.0)
    } else {
        format!("{kib:.2} KiB to fetch")
    };
    let here = lines
        .iter()
        .find(|l| l.contains(&present))
        .unwrap_or_else(|| panic!("{present} is not listed: {text}"));
    assert!(here.contains(&shown), "{shown} is not in: {here}");
    let gone = lines
        .iter()
        .find(|l| l.contains(&absent))
        .unwrap_or_else(|| panic!("{absent} is not listed: {text}"));
    assert!(
        gone.contains("404") && gone.contains(&registry.host),
        "{gone}"
    );
    assert!(
        lines.last().unwrap().contains("2 image(s) missing"),
        "{text}"
    );

    // The run: the present image pulled, layer by layer, then its tasks
    // pass; the absent one's task is an infrastructure error.
    let out = scratch.path("out");
    let run = sandfleet(&["run", fleet, "--out", out.to_str().unwrap()]);
    let err = stderr(&run);
    assert!(run.status.success(), "{err}");
    assert!(
        err.contains(&format!("pull: local: pulling {present}")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}: Pull complete",
            &bash.digest.to_string()[7..19]
        )),
        "{err}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["phases"]["pull"]["count"], 1, "{report:#}");
    assert_eq!(report["tasks"]["ok"], 2, "{report:#}");
    assert_eq!(report["tasks"]["infra_error"], 1, "{report:#}");
    assert!(
        stdout(&run).lines().any(|l| l.starts_with("pull ")),
        "{}",
        stdout(&run)
    );
    let results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let failed: serde_json::Value = results
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["task_id"] == "gone")
        .unwrap();
    assert_eq!(failed["status"], "infra_error");
    let error = failed["error"].as_str().unwrap();
    for said in [absent.as_str(), registry.host.as_str(), "404"] {
        assert!(error.contains(said), "`{said}` is not in: {error}");
    }

    // After: the pulled image is no longer listed; the absent one still is.
    let plan = sandfleet(&["plan", fleet]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    let text = stdout(&plan);
    let lines = pull_lines(&text);
    assert!(!lines.iter().any(|l| l.contains(&present)), "{text}");
    assert!(lines.iter().any(|l| l.contains(&absent)), "{text}");
    drop(registry);
}
