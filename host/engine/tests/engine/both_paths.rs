//! One evaluation for runs and leases: the same SWE-bench task, through a
//! batch run and through a lease of the engine's session (what the daemon
//! serves), ends with the same status, grade and reward, for a pass, a
//! failure, an adapter's infrastructure classification, a lost sandbox and
//! a timeout.

use std::path::Path;

use sandfleet_core::{RunId, file_stem};
use sandfleet_engine::{
    Evaluation, FleetSettings, Purpose, Session, SessionSpec, TaskRecord, TaskStatus, WorkItem,
};

use crate::calc::{FIX, Harness, RUN_TEST};
use crate::replace::{kill_sandbox_of, nth_sandbox, victim};

/// swebench 5.0.2, whose timed-out test runs are an infrastructure sign;
/// every eval script gets 8 s.
const SETTINGS: [(&str, &str); 2] = [("grader-version", "swebench-5.0.2"), ("timeout-s", "8")];

/// The task whose sandbox the test kills once it runs.
const LOST: &str = "calc__calc-lost";

/// Each case: the task and its test command.
fn cases() -> [(&'static str, String); 5] {
    [
        ("calc__calc-pass", RUN_TEST.to_string()),
        (
            "calc__calc-fail",
            "echo 'FAILED tests/test_add.sh::test_add'".to_string(),
        ),
        ("calc__calc-oom", "echo Killed; exit 137".to_string()),
        (LOST, victim("41.25")),
        ("calc__calc-slow", "sleep 30".to_string()),
    ]
}

/// What both paths must agree on.
#[derive(Debug, PartialEq)]
struct Outcome {
    status: TaskStatus,
    grade: Option<String>,
    reward: Option<f64>,
    infra_reason: Option<String>,
    timed_out: bool,
}

impl From<&TaskRecord> for Outcome {
    fn from(record: &TaskRecord) -> Self {
        Outcome {
            status: record.status,
            grade: record.grade.as_ref().map(|g| g.status.clone()),
            reward: record.grade.as_ref().and_then(|g| g.reward),
            infra_reason: record.infra_failure.as_ref().map(|i| i.reason.clone()),
            timed_out: record.timed_out,
        }
    }
}

impl From<&Evaluation> for Outcome {
    fn from(evaluation: &Evaluation) -> Self {
        Outcome {
            status: evaluation.status,
            grade: evaluation
                .grade
                .as_ref()
                .map(|g| g.status.name().to_string()),
            reward: evaluation.grade.as_ref().and_then(|g| g.reward),
            infra_reason: evaluation.infra_failure.as_ref().map(|i| i.reason.clone()),
            timed_out: evaluation.timed_out,
        }
    }
}

/// A lost sandbox is an `infra_error` on both paths, not mended by a retry.
fn settings() -> FleetSettings {
    FleetSettings {
        infra_retries: 0,
        ..FleetSettings::default()
    }
}

/// Kills the sandbox the victim's `log` names once it names one.
async fn kill_when_running(run_id: &RunId, log: &Path) {
    let sandbox = nth_sandbox(log, 1).await;
    kill_sandbox_of(run_id.as_str(), &sandbox);
}

async fn batch(harness: &Harness, items: Vec<WorkItem>) -> Vec<TaskRecord> {
    let run_id = RunId::generate("both-paths-run");
    let spec = harness.spec(run_id.clone(), settings());
    let log = harness.out_dir().join("logs").join(format!("{LOST}.log"));
    let (report, ()) = tokio::join!(
        sandfleet_engine::run(spec, items),
        kill_when_running(&run_id, &log)
    );
    report.unwrap();
    harness.results()
}

async fn leases(harness: &Harness, items: &[WorkItem]) -> Vec<(String, Evaluation)> {
    let run_id = RunId::generate("both-paths-lease");
    let logs = harness.dir.path().join("lease-logs");
    let session = Session::start(SessionSpec {
        run_id: run_id.clone(),
        settings: settings(),
        clusters: harness.clusters(),
        plugins: harness.plugins(),
        logs: logs.clone(),
    })
    .await
    .unwrap();
    let mut evaluations = Vec::new();
    for item in items {
        let name = format!("lease-{}", item.task.id);
        let mut lease = session
            .acquire(&name, Purpose::Task(item.task.clone()))
            .await
            .unwrap();
        let evaluating = session.evaluate(&mut lease, None, item.solution.as_deref());
        let evaluation = if item.task.id == LOST {
            let log = logs.join(format!("{}.log", file_stem(&name)));
            tokio::join!(evaluating, kill_when_running(&run_id, &log)).0
        } else {
            evaluating.await
        };
        evaluations.push((item.task.id.clone(), evaluation.unwrap()));
        session.release(lease);
    }
    session.close().await.unwrap();
    evaluations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_ends_alike_in_a_run_and_in_a_lease() {
    let harness = Harness::new();
    let cases = cases();
    let tasks: Vec<(&str, &str)> = cases
        .iter()
        .map(|(id, test)| (*id, test.as_str()))
        .collect();
    let items = harness.items(&SETTINGS, &tasks);
    assert!(
        items
            .iter()
            .all(|item| item.solution.as_deref() == Some(FIX))
    );
    let records = batch(&harness, items.clone()).await;
    let evaluations = leases(&harness, &items).await;

    let expected = |status, grade: Option<&str>, infra: Option<&str>, timed_out| {
        (
            status,
            grade.map(str::to_string),
            infra.map(str::to_string),
            timed_out,
        )
    };
    let want = [
        (
            "calc__calc-pass",
            expected(TaskStatus::Ok, Some("passed"), None, false),
        ),
        (
            "calc__calc-fail",
            expected(TaskStatus::Failed, Some("failed"), None, false),
        ),
        (
            "calc__calc-oom",
            expected(
                TaskStatus::InfraError,
                Some("error"),
                Some("out_of_memory"),
                false,
            ),
        ),
        (LOST, expected(TaskStatus::InfraError, None, None, false)),
        (
            "calc__calc-slow",
            expected(
                TaskStatus::InfraError,
                Some("error"),
                Some("tests_timed_out"),
                true,
            ),
        ),
    ];
    for (id, (status, grade, infra_reason, timed_out)) in want {
        let record = records.iter().find(|r| r.task_id == id).unwrap();
        let (_, evaluation) = evaluations.iter().find(|(task, _)| task == id).unwrap();
        let in_run = Outcome::from(record);
        assert_eq!(
            (
                &in_run.status,
                &in_run.grade,
                &in_run.infra_reason,
                in_run.timed_out
            ),
            (&status, &grade, &infra_reason, timed_out),
            "{id} in a run: {record:?}"
        );
        assert_eq!(in_run, Outcome::from(evaluation), "{id}: {evaluation:?}");
        // Both name the adapter version that prepared and graded the task.
        assert_eq!(record.plugins.adapter, evaluation.adapter, "{id}");
    }
    let lost = &evaluations.iter().find(|(task, _)| task == LOST).unwrap().1;
    assert!(
        lost.error.as_deref().is_some_and(|e| !e.is_empty()),
        "{lost:?}"
    );
}
