//! A real SWE-bench instance graded end to end: `pytest-dev__pytest-11143`,
//! its image built by the in-repo recipe (`sandfleet_registry_testing::swebench`:
//! Debian 12 by mmdebstrap, a venv of the harness's pins for pytest 8.0
//! behind a `conda activate` shim, `/testbed` at the base commit installed
//! editable; cached between runs) and pushed to a loopback registry under
//! the name the swebench adapter derives for the row. The fleet file's
//! `image_rewrite` points that official name (`swebench/sweb.eval.…`) at
//! the registry, so the run resolves exactly what a user with Docker Hub
//! would run. On the local backend and in both devclusters (`sandfleet
//! devcluster k8s` and `opensandbox`, which pull the reference into their
//! own layer stores), with the network off in the sandbox, the official
//! eval script grades the gold patch `resolved` and an empty patch
//! unresolved.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use sandfleet_registry_testing::image::{Built, push};
use sandfleet_registry_testing::registry::{Auth, Registry};
use sandfleet_registry_testing::swebench::{Recipe, default_cache};

use crate::k8s::Devcluster;
use crate::signals::{signal, wait};
use crate::{repo, results, stderr};

const INSTANCE: &str = "pytest-dev__pytest-11143";
const FAIL_TO_PASS: &str =
    "testing/test_assertrewrite.py::TestIssue11140::test_constant_not_picked_as_module_docstring";

/// The row, the image built (or taken from the cache) and the name the
/// swebench adapter gives the row's image.
fn instance(dir: &Path) -> (Value, Built, String) {
    let data = repo().join("../shared/data/swebench");
    let recipe = Recipe::pytest_11143(&data).unwrap_or_else(|error| panic!("{error}"));
    let started = Instant::now();
    let cache = default_cache();
    let built = recipe
        .build(&cache)
        .unwrap_or_else(|error| panic!("{error}"));
    eprintln!(
        "swebench: the image of {INSTANCE} ready in {:.1?} (cache {})",
        started.elapsed(),
        cache.display()
    );
    let row: Value = std::fs::read_to_string(data.join("instances-sample.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|row| row["instance_id"] == INSTANCE)
        .unwrap();
    std::fs::write(dir.join("instances.jsonl"), format!("{row}\n")).unwrap();
    // The adapter's own name for the image, as `sandfleet prepare` writes it.
    let prepared = dir.join("prepared");
    let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["prepare", "--adapter", "swebench"])
        .args(["--grader-version", "swebench-4.1.0", "--instances"])
        .arg(dir.join("instances.jsonl"))
        .arg("--out")
        .arg(&prepared)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let task: Value =
        serde_json::from_slice(&std::fs::read(prepared.join(INSTANCE).join("task.json")).unwrap())
            .unwrap();
    let image = task["image"].as_str().unwrap().to_string();
    (row, built, image)
}

/// Writes a fleet file grading `patch` for the row on `clusters` (the
/// fleet file's `[fleet]` and `[[clusters]]` tables); returns its path.
fn fleet(dir: &Path, name: &str, patch: &str, rewrite: (&str, &str), clusters: &str) -> PathBuf {
    let predictions = dir.join(format!("{name}.predictions.jsonl"));
    let prediction =
        json!({"instance_id": INSTANCE, "model_name_or_path": name, "model_patch": patch});
    std::fs::write(&predictions, format!("{prediction}\n")).unwrap();
    let config = format!(
        r#"[run]
name = "swebench-{name}"
dataset = "instances.jsonl"
solutions = "{name}.predictions.jsonl"
image_rewrite = {{ "{from}" = "{to}" }}

[adapter]
name = "swebench"
settings = {{ grader-version = "swebench-4.1.0" }}

{clusters}"#,
        from = rewrite.0,
        to = rewrite.1,
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    path
}

/// `sandfleet run` of `config` into `out`; the one result line and the
/// graded log.
fn run(config: &Path, out: &Path, env: &[(String, String)]) -> (Value, String) {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .arg("run")
        .arg(config)
        .arg("--out")
        .arg(out)
        .current_dir(config.parent().unwrap())
        .env("SANDFLEET_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    eprintln!(
        "swebench: {} took {:.1?}",
        config.file_name().unwrap().to_string_lossy(),
        started.elapsed()
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let results = results(out);
    assert_eq!(results.len(), 1, "{results:#?}");
    let log = std::fs::read_to_string(out.join("logs").join(format!("{INSTANCE}.log")))
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    (results[0].clone(), log)
}

/// The instance's image in a loopback registry under its official name,
/// and the `image_rewrite` mirror that points the name there.
struct Published {
    registry: Registry,
    row: Value,
    _runtime: tokio::runtime::Runtime,
}

impl Published {
    fn new(dir: &Path) -> Published {
        let (row, built, image) = instance(dir);
        assert!(image.starts_with("swebench/sweb.eval."), "{image}");
        let (repository, tag) = image.rsplit_once(':').unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let registry = runtime.block_on(async {
            let registry = Registry::start(Auth::None).await;
            push(&registry, repository, tag, &built).await;
            registry
        });
        Published {
            registry,
            row,
            _runtime: runtime,
        }
    }

    fn mirror(&self) -> String {
        format!("{}/swebench/", self.registry.host)
    }
}

/// Grades the gold patch and the empty patch on `clusters` (with `env`
/// for `sandfleet run`) and checks both grades and logs.
fn grades_gold_and_empty(
    dir: &Path,
    published: &Published,
    clusters: &str,
    env: &[(String, String)],
) {
    let row = &published.row;
    let mirror = published.mirror();
    let rewrite = ("swebench/", mirror.as_str());

    // The gold patch: resolved, the FAIL_TO_PASS test among those that ran.
    let gold = fleet(
        dir,
        "gold",
        row["patch"].as_str().unwrap(),
        rewrite,
        clusters,
    );
    let (result, log) = run(&gold, &dir.join("out-gold"), env);
    assert_eq!(result["status"], "ok", "{result:#}");
    assert_eq!(result["grade"]["status"], "passed", "{result:#}");
    let graded = report(&result);
    assert_eq!(graded[INSTANCE]["resolved"], true, "{graded:#}");
    assert!(
        log.contains(&format!("PASSED {FAIL_TO_PASS}")),
        "the gold log does not pass {FAIL_TO_PASS}:\n{}",
        tail(&log)
    );
    assert!(log.contains("116 passed"), "{}", tail(&log));
    // The eval script's offline `python -m pip install -e .` worked.
    assert!(
        log.contains("Successfully installed pytest-8.0.0.dev0"),
        "{}",
        tail(&log)
    );

    // The empty patch: graded, unresolved, the FAIL_TO_PASS test failing.
    let empty = fleet(dir, "empty", "", rewrite, clusters);
    let (result, log) = run(&empty, &dir.join("out-empty"), env);
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(result["grade"]["status"], "failed", "{result:#}");
    let graded = report(&result);
    assert_eq!(graded[INSTANCE]["resolved"], false, "{graded:#}");
    assert!(
        log.contains(&format!("FAILED {FAIL_TO_PASS}")),
        "the empty patch's log does not fail {FAIL_TO_PASS}:\n{}",
        tail(&log)
    );
}

#[test]
fn a_real_instance_is_graded_by_its_official_image_on_the_local_backend() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let published = Published::new(dir.path());
    let clusters = r#"[fleet]
max_concurrent = 1

[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "state"
"#;
    grades_gold_and_empty(dir.path(), &published, clusters, &[]);
    eprintln!(
        "swebench: the local backend's test took {:.1?}",
        started.elapsed()
    );
}

#[test]
fn a_real_instance_is_graded_by_its_official_image_on_devcluster_k8s() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let published = Published::new(dir.path());
    // Pods of a reference are pulled into the devcluster's own layer store.
    let cluster = Devcluster::start(dir.path(), "swebench", &[]);
    let kubeconfig = dir.path().join("swebench.yaml");
    let clusters = r#"[fleet]
strategy = "sliding"
max_concurrent = 1
max_warmpool_size = 1
claim_timeout = "300s"
cpu_milli = 1000
memory_mib = 2048

[[clusters]]
name = "k8s"
backend = "k8s"

[clusters.k8s]
namespace = "default"
lease = "10m"
"#;
    let env = [("KUBECONFIG".to_string(), kubeconfig.display().to_string())];
    grades_gold_and_empty(dir.path(), &published, clusters, &env);
    drop(cluster);
    eprintln!(
        "swebench: the devcluster k8s test took {:.1?}",
        started.elapsed()
    );
}

#[test]
fn a_real_instance_is_graded_by_its_official_image_on_devcluster_opensandbox() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let published = Published::new(dir.path());
    // Sandboxes of a reference are pulled into the devcluster's own store.
    let (mut server, env) = crate::opensandbox::start_devcluster(&[]);
    assert_eq!(env.len(), 2, "the devcluster printed {env:?}");
    let clusters = r#"[fleet]
strategy = "none"
max_concurrent = 1
claim_timeout = "300s"

[[clusters]]
name = "opensandbox"
backend = "opensandbox"

[clusters.opensandbox]
url_env = "OPENSANDBOX_BASE_URL"
api_key_env = "OPENSANDBOX_API_KEY"
timeout = "10m"
limits = { memory = "2Gi" }
"#;
    grades_gold_and_empty(dir.path(), &published, clusters, &env);
    signal(&server, "-TERM");
    let status = wait(&mut server);
    assert!(status.success(), "devcluster exited {status}");
    eprintln!(
        "swebench: the devcluster opensandbox test took {:.1?}",
        started.elapsed()
    );
}

/// The harness's report of a result (a JSON string or object).
fn report(result: &Value) -> Value {
    match &result["grade"]["report"] {
        Value::String(text) => serde_json::from_str(text).unwrap(),
        other => other.clone(),
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
