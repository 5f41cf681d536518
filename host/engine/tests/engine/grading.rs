//! What the adapter's grade decides about a run, with the real swebench
//! component on the local backend (grader 5.0.2, rows with their own eval
//! scripts as 5.x rows have them): a run whose log carries an
//! infrastructure signature (or whose tests time out) is an `infra_error`
//! with its reason, retried by a rerun; and an adapter asking for fresh
//! evaluation gets a second sandbox per task.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandfleet_backend_local::{
    ImageSource, IsolationMode, LimitOverrides, LocalBackend, LocalConfig,
};
use sandfleet_core::{Backend, RunId};
use sandfleet_engine::{
    CancellationToken, Cluster, FleetSettings, LogProgress, RunReport, RunSpec, TaskRecord,
    TaskStatus, WorkItem,
};
use sandfleet_plugin::adapter::Setting;
use sandfleet_plugin::{HostConfig, KindLimits, Limits, PluginHost, Registry};
use serde_json::json;

/// A repository whose `add` is broken, with the test that checks it.
fn write_image(dir: &Path) {
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        dir.join("tests/test_add.sh"),
        "grep -q 'return a + b' calc.py\n",
    )
    .unwrap();
}

/// An eval script as SWE-bench writes them, whose test command is `test`.
fn eval_script(test: &str) -> String {
    format!(
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\ngit checkout HEAD -- tests/test_add.sh\n\
         : '>>>>> Start Test Output'\n{test}\n: '>>>>> End Test Output'\n\
         git checkout HEAD -- tests/test_add.sh\n"
    )
}

const RUN_TEST: &str = "if bash tests/test_add.sh; then echo 'PASSED tests/test_add.sh::test_add'; \
                        else echo 'FAILED tests/test_add.sh::test_add'; fi";

const FIX: &str = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n\
                   @@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";

struct Harness {
    dir: tempfile::TempDir,
    registry: Arc<Registry>,
    backend: Arc<LocalBackend>,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("images/calc");
        write_image(&image);
        let config = LocalConfig {
            state_dir: Some(dir.path().join("state")),
            workdir: "/testbed".into(),
            isolation: IsolationMode::Namespaces,
            images: [(
                "calc".to_owned(),
                ImageSource {
                    path: image,
                    git: true,
                    limits: LimitOverrides::default(),
                },
            )]
            .into_iter()
            .collect(),
            ..LocalConfig::default()
        };
        let registry = Registry::new(
            PluginHost::new(HostConfig {
                limits: KindLimits::uniform(Limits {
                    deadline: Duration::from_secs(30),
                    ..Limits::default()
                }),
                ..HostConfig::default()
            })
            .unwrap(),
        );
        registry
            .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
            .unwrap();
        Harness {
            backend: Arc::new(LocalBackend::new("local", config).unwrap()),
            registry,
            dir,
        }
    }

    fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// A task per `(id, test command)`, each with the fix as its solution.
    fn items(&self, settings: &[(&str, &str)], tasks: &[(&str, &str)]) -> Vec<WorkItem> {
        let adapter = self.registry.adapter("swebench").unwrap();
        let settings: Vec<Setting> = settings
            .iter()
            .map(|(key, value)| Setting {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect();
        tasks
            .iter()
            .map(|(id, test)| {
                let row = json!({
                    "instance_id": id,
                    "repo": "calc/calc",
                    "version": "1.0",
                    "FAIL_TO_PASS": ["tests/test_add.sh::test_add"],
                    "PASS_TO_PASS": [],
                    "log_parser": "parse_log_pytest",
                    "eval_type": "pass_and_fail",
                    "image": "calc",
                    "eval_script": eval_script(test),
                });
                WorkItem {
                    task: adapter.load_blocking(&row.to_string(), &settings).unwrap(),
                    solution: Some(FIX.to_owned()),
                    epoch: 0,
                }
            })
            .collect()
    }

    async fn run(&self, items: Vec<WorkItem>) -> RunReport {
        let spec = RunSpec {
            run_id: RunId::generate("grading-test"),
            settings: FleetSettings {
                strategy: sandfleet_engine::Strategy::None,
                ..FleetSettings::default()
            },
            clusters: vec![Cluster {
                name: "local".into(),
                kind: "local".into(),
                weight: 1,
                backend: self.backend.clone() as Arc<dyn Backend>,
            }],
            adapter: self.registry.adapter("swebench").unwrap(),
            placement: self.registry.placement("least-loaded").unwrap(),
            sizing: self.registry.sizing("proportional").unwrap(),
            reset: None,
            out_dir: self.out_dir(),
            cancel: CancellationToken::new(),
            progress: Arc::new(LogProgress),
        };
        sandfleet_engine::run(spec, items).await.unwrap()
    }

    fn results(&self) -> Vec<TaskRecord> {
        std::fs::read_to_string(self.out_dir().join("results.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

/// swebench 5.0.2 `harness/infra_failure.py`: `out_of_memory` (environment
/// tier, `^Killed$`) and `tests_timed_out` (ambiguous, the notice
/// `run_instance` appends to a timed-out log, `run_evaluation.py`); a log
/// that merely fails its test is no infrastructure failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classified_failures_are_infra_errors_that_a_rerun_retries() {
    let harness = Harness::new();
    let settings = [("grader-version", "swebench-5.0.2"), ("timeout-s", "2")];
    let tasks = [
        ("calc__calc-oom", "echo Killed; exit 137"),
        ("calc__calc-slow", "sleep 30"),
        (
            "calc__calc-fails",
            "echo 'FAILED tests/test_add.sh::test_add'; exit 1",
        ),
    ];
    let report = harness.run(harness.items(&settings, &tasks)).await;
    assert_eq!(
        (report.tasks.infra_error, report.tasks.failed),
        (2, 1),
        "{report:?}"
    );
    assert_eq!(report.infra_failures.environment, 1);
    assert_eq!(report.infra_failures.ambiguous, 1);
    assert_eq!(
        report.infra_failures.reasons.keys().collect::<Vec<_>>(),
        ["out_of_memory", "tests_timed_out"]
    );

    let first = harness.results();
    let record = |id: &str| first.iter().find(|r| r.task_id == id).unwrap().clone();
    let oom = record("calc__calc-oom");
    assert_eq!(oom.status, TaskStatus::InfraError);
    let infra = oom.infra_failure.as_ref().expect("the reason is recorded");
    assert_eq!(
        (infra.reason.as_str(), infra.certain),
        ("out_of_memory", true)
    );
    assert!(
        oom.error.as_deref().unwrap().contains("out_of_memory"),
        "{oom:?}"
    );
    let report_json = &oom.grade.as_ref().unwrap().report;
    assert_eq!(report_json["calc__calc-oom"]["infra_failure"], true);
    let slow = record("calc__calc-slow");
    assert!(slow.timed_out);
    assert_eq!(slow.status, TaskStatus::InfraError);
    assert_eq!(slow.infra_failure.unwrap().reason, "tests_timed_out");
    let fails = record("calc__calc-fails");
    assert_eq!(
        (fails.status, fails.infra_failure),
        (TaskStatus::Failed, None)
    );

    // A rerun into the same directory runs the infrastructure errors again,
    // and only them.
    let report = harness.run(harness.items(&settings, &tasks)).await;
    assert_eq!(report.tasks.resumed, 1);
    let rerun: Vec<String> = harness.results()[first.len()..]
        .iter()
        .map(|r| r.task_id.clone())
        .collect();
    assert_eq!(rerun.len(), 2, "{rerun:?}");
    assert!(rerun.iter().all(|id| id != "calc__calc-fails"), "{rerun:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_evaluation_claims_a_second_sandbox_and_releases_both() {
    let harness = Harness::new();
    let settings = [
        ("grader-version", "swebench-5.0.2"),
        ("evaluation", "fresh"),
    ];
    let items = harness.items(
        &settings,
        &[("calc__calc-1", RUN_TEST), ("calc__calc-2", RUN_TEST)],
    );
    let report = harness.run(items).await;
    assert_eq!(report.tasks.ok, 2, "{report:?}");
    assert_eq!(report.claims, 4, "a work and a fresh sandbox per task");
    assert_eq!(report.phases["claim"].count, 4);
    assert_eq!(report.releases.released, 4);
    for record in harness.results() {
        let fresh = record.fresh_sandbox.as_deref().expect("a fresh sandbox");
        assert_ne!(Some(fresh), record.sandbox.as_deref(), "{record:?}");
    }
    let run_id = RunId::new(report.run_id.clone()).unwrap();
    let left = harness.backend.list_owned(&run_id).await.unwrap();
    assert!(left.sandboxes.is_empty(), "{left:?}");
}
