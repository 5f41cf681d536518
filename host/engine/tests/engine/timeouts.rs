//! A command that overruns its timeout is killed, with everything it
//! started, and its task is recorded as failed with `timed_out`.

use std::time::Duration;

use sandfleet_engine::{CancellationToken, FleetSettings, TaskStatus};

use sandfleet_test_support::{processes_running, sandbox_dirs};

use crate::fixture::{Fixture, row};

#[tokio::test(flavor = "multi_thread")]
async fn an_overrunning_task_is_killed_and_recorded_as_timed_out() {
    let fixture = Fixture::new(1);
    // Distinctive durations, so the test finds exactly these processes.
    let rows = vec![
        row("hangs", "img0", "sleep 4711 & sleep 4712", 1),
        row("quick", "img0", "true", 30),
    ];
    let backend = fixture.backend();
    let report = sandfleet_engine::run(
        fixture.spec(backend, FleetSettings::default(), CancellationToken::new()),
        fixture.items(&rows),
    )
    .await
    .unwrap();
    assert_eq!((report.tasks.ok, report.tasks.failed), (1, 1));

    let results = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    let hung: serde_json::Value = results
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|record| record["task_id"] == "hangs")
        .unwrap();
    assert_eq!(
        hung["status"],
        serde_json::to_value(TaskStatus::Failed).unwrap()
    );
    assert_eq!(hung["timed_out"], true);
    assert_eq!(
        hung["grade"]["detail"],
        "the test command timed out after 1 s"
    );
    assert!(hung["timings"]["process_s"].as_f64().unwrap() < 10.0);

    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_running("sleep 471"), Vec::<String>::new());
    assert_eq!(
        sandbox_dirs(&fixture.state_dir(), fixture.run_id.as_str()),
        0
    );
}
