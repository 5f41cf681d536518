//! What the adapter's grade decides about a run, with the real swebench
//! component on the local backend (grader 5.0.2, rows with their own eval
//! scripts as 5.x rows have them): a run whose log carries an
//! infrastructure signature (or whose tests time out) is an `infra_error`
//! with its reason, retried by a rerun; and an adapter asking for fresh
//! evaluation gets a second sandbox per task.

use sandfleet_core::{Backend, RunId};
use sandfleet_engine::TaskStatus;

use crate::calc::{Harness, RUN_TEST};

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
