//! Replace and retry: a task whose sandbox is lost mid-task (the test kills
//! the sandbox's processes) or whose claim fails runs again, once, on
//! another sandbox, and its result line records both attempts; a second
//! loss makes it an `infra_error`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_core::{Backend, ErrorKind};
use sandfleet_engine::{CancellationToken, FleetSettings, RunReport, Strategy};
use sandfleet_test_support::{Op, Scripted, processes_running};
use tokio::task::JoinHandle;

use crate::fixture::{Fixture, row};

/// How long any condition may take to come true.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// Prints the sandbox it runs in, then waits `sleep` seconds (for the test
/// to kill the sandbox, or its `sleep`). Tests run at once: each gives its
/// victim a sleep of its own, so one's `kill` cannot end another's.
pub(crate) fn victim(sleep: &str) -> String {
    format!("echo \"running in $(hostname) .\"; sleep {sleep} || true; echo finished")
}

fn settings() -> FleetSettings {
    FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 1,
        ..FleetSettings::default()
    }
}

/// The sandboxes the victim's log says it ran in, in order.
pub(crate) fn sandboxes_in_log(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split("running in ").nth(1))
        .filter_map(|rest| rest.strip_suffix(" ."))
        .map(str::to_string)
        .collect()
}

/// Waits until the log names its `n`th sandbox, and returns it.
pub(crate) async fn nth_sandbox(log: &Path, n: usize) -> String {
    let until = Instant::now() + PATIENCE;
    loop {
        if let Some(sandbox) = sandboxes_in_log(log).get(n - 1) {
            return sandbox.clone();
        }
        assert!(
            Instant::now() < until,
            "no sandbox #{n} in {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILLs every process whose command line starts with `prefix`, and
/// says how many there were.
fn kill(prefix: &str) -> usize {
    let found = processes_running(prefix);
    for process in &found {
        let pid = process.split(':').next().unwrap();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", pid])
            .status();
    }
    found.len()
}

/// Kills what runs as `prefix` once it runs (the log line before it may
/// come first), and says how many there were.
pub(crate) async fn kill_once_running(prefix: &str) -> usize {
    let until = Instant::now() + PATIENCE;
    while processes_running(prefix).is_empty() {
        assert!(Instant::now() < until, "nothing ran as `{prefix}`");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill(prefix)
}

/// Kills sandbox `id`: its init, and with it everything in its pid
/// namespace.
fn kill_sandbox(fixture: &Fixture, id: &str) {
    kill_sandbox_of(fixture.run_id.as_str(), id);
}

/// Kills sandbox `id` of run `run_id`.
pub(crate) fn kill_sandbox_of(run_id: &str, id: &str) {
    let killed = kill(&format!("sandfleet-sandbox:{run_id}:{id}"));
    assert!(killed > 0, "no init process of sandbox {id}");
}

fn record(fixture: &Fixture) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// Starts a run of the victim, kills the sandbox its first attempt runs
/// in and waits for its second attempt: the run, the victim's log, and the
/// sandboxes of both attempts.
async fn killed_once(
    fixture: &Fixture,
    sleep: &str,
) -> (JoinHandle<RunReport>, PathBuf, String, String) {
    let spec = fixture.spec(fixture.backend(), settings(), CancellationToken::new());
    let items = fixture.items(&[row("victim", "img0", &victim(sleep), 120)]);
    let running = tokio::spawn(async move { sandfleet_engine::run(spec, items).await.unwrap() });
    let log = fixture.out_dir().join("logs").join("victim.log");
    let first = nth_sandbox(&log, 1).await;
    kill_sandbox(fixture, &first);
    let second = nth_sandbox(&log, 2).await;
    (running, log, first, second)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_whose_sandbox_is_killed_runs_again_on_another_and_its_line_records_both() {
    let fixture = Fixture::new(1);
    let (running, log, first, second) = killed_once(&fixture, "37.25").await;
    assert_ne!(first, second, "the retry reused the lost sandbox");
    // Let the second attempt finish.
    assert_eq!(kill_once_running("sleep 37.25").await, 1);
    let report = running.await.unwrap();

    assert_eq!(report.tasks.ok, 1, "{}", report.render());
    assert_eq!(sandboxes_in_log(&log), [first.clone(), second.clone()]);
    assert_eq!(report.infra_retries.get("sandbox_lost"), Some(&1));
    assert_eq!(report.claims, 2);
    assert!(
        report
            .render()
            .contains("tasks run again on another sandbox: 1 sandbox_lost"),
        "{}",
        report.render()
    );
    let record = record(&fixture);
    assert_eq!(record["status"], "ok", "{record}");
    assert_eq!(record["sandbox"], second.as_str());
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{record}");
    assert_eq!(attempts[0]["sandbox"], first.as_str());
    assert_eq!(attempts[0]["retried_for"], "sandbox_lost");
    let why = attempts[0]["error"].as_str().unwrap();
    assert!(why.contains(&first) && why.contains("ended"), "{why}");
    assert_eq!(attempts[1]["sandbox"], second.as_str());
    assert!(attempts[1].get("retried_for").is_none(), "{record}");

    // The picture marks the retry on the lost sandbox's lane, and draws
    // the task on the sandbox that finished it.
    let marks = fixture.events("mark");
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert_eq!(
        (
            &marks[0]["kind"],
            &marks[0]["sandbox"],
            &marks[0]["task"]["id"]
        ),
        (&"retry".into(), &first.as_str().into(), &"victim".into())
    );
    let tasks = fixture.events("task");
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (
            &tasks[0]["sandbox"],
            &tasks[0]["attempts"],
            &tasks[0]["log"]
        ),
        (
            &second.as_str().into(),
            &2.into(),
            &"logs/victim.log".into()
        )
    );
    let claims_of_victim = fixture
        .events("segment")
        .iter()
        .filter(|e| e["kind"] == "claim" && e["task"]["id"] == "victim")
        .count();
    assert_eq!(claims_of_victim, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_loss_makes_the_task_an_infra_error() {
    let fixture = Fixture::new(1);
    let (running, log, first, second) = killed_once(&fixture, "37.5").await;
    kill_sandbox(&fixture, &second);
    let report = running.await.unwrap();

    assert_eq!(report.tasks.infra_error, 1, "{}", report.render());
    assert_eq!(report.infra_retries.get("sandbox_lost"), Some(&1));
    let record = record(&fixture);
    assert_eq!(record["status"], "infra_error");
    let attempts = record["attempts"].as_array().unwrap();
    let ran_in: Vec<&str> = attempts
        .iter()
        .map(|a| a["sandbox"].as_str().unwrap())
        .collect();
    assert_eq!(ran_in, [first.as_str(), second.as_str()]);
    assert!(
        attempts[1]["error"].as_str().unwrap().contains(&second),
        "{record}"
    );
    assert_eq!(sandboxes_in_log(&log).len(), 2, "a third attempt ran");
}

/// A scripted backend behind a one-task run.
async fn scripted_run(backend: Arc<Scripted>, infra_retries: u32) -> (Fixture, RunReport) {
    let fixture = Fixture::new(0);
    let first: Arc<dyn Backend> = backend;
    let spec = fixture.spec(
        first,
        FleetSettings {
            infra_retries,
            ..settings()
        },
        CancellationToken::new(),
    );
    let items = fixture.items(&[row("t0", "img0", "true", 30)]);
    let report = sandfleet_engine::run(spec, items).await.unwrap();
    (fixture, report)
}

#[tokio::test]
async fn a_claim_that_fails_is_made_again_once_and_only_as_often_as_configured() {
    let backend = Arc::new(Scripted::new("s"));
    backend.fail(Op::Claim, 1, ErrorKind::Timeout);
    let (fixture, report) = scripted_run(backend.clone(), 1).await;
    assert_eq!(report.tasks.ok, 1, "{}", report.render());
    assert_eq!(report.infra_retries.get("claim_failed"), Some(&1));
    let record = record(&fixture);
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["sandbox"], serde_json::Value::Null);
    assert_eq!(attempts[0]["retried_for"], "claim_failed");

    let backend = Arc::new(Scripted::new("s"));
    backend.fail(Op::Claim, 1, ErrorKind::Timeout);
    let (_, report) = scripted_run(backend.clone(), 0).await;
    assert_eq!(report.tasks.infra_error, 1, "{}", report.render());
    assert_eq!(backend.calls(Op::Claim), 1);
}

#[tokio::test]
async fn a_sandbox_an_exec_says_is_lost_is_replaced_but_other_exec_failures_are_not() {
    let backend = Arc::new(Scripted::new("s"));
    backend.fail(Op::Exec, 1, ErrorKind::SandboxLost);
    let (fixture, report) = scripted_run(backend.clone(), 1).await;
    assert_eq!(report.tasks.ok, 1, "{}", report.render());
    assert_eq!(backend.calls(Op::Claim), 2);
    let record = record(&fixture);
    let attempts = record["attempts"].as_array().unwrap();
    assert_ne!(attempts[0]["sandbox"], attempts[1]["sandbox"]);

    // A command that may have run (the connection broke after sending) is
    // never run again, not even elsewhere.
    let backend = Arc::new(Scripted::new("s"));
    backend.fail(Op::Exec, 1, ErrorKind::Transport { sent: true });
    let (_, report) = scripted_run(backend.clone(), 1).await;
    assert_eq!(report.tasks.infra_error, 1);
    assert_eq!(backend.calls(Op::Exec), 1);
    assert!(report.infra_retries.is_empty());
}
