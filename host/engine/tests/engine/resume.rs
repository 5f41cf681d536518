//! A rerun into the same output directory skips finished tasks and loses none.

use sandfleet_engine::{CancellationToken, FleetSettings};

use crate::fixture::{Fixture, row};

#[tokio::test(flavor = "multi_thread")]
async fn a_rerun_skips_finished_tasks_and_runs_the_rest() {
    let mut fixture = Fixture::new(2);
    let rows: Vec<String> = (0..6)
        .map(|i| row(&format!("t{i}"), &format!("img{}", i % 2), "true", 30))
        .collect();
    // A first run over half the tasks, as if the rest had not been reached.
    let first = sandfleet_engine::run(
        fixture.spec(
            fixture.backend(),
            FleetSettings::default(),
            CancellationToken::new(),
        ),
        fixture.items(&rows[..3]),
    )
    .await
    .unwrap();
    assert_eq!(first.tasks.ok, 3);

    fixture.next_run();
    let second = sandfleet_engine::run(
        fixture.spec(
            fixture.backend(),
            FleetSettings::default(),
            CancellationToken::new(),
        ),
        fixture.items(&rows),
    )
    .await
    .unwrap();
    assert_eq!(second.tasks.resumed, 3);
    assert_eq!(
        second.tasks.ok,
        6,
        "counts cover both runs: {}",
        second.render()
    );
    assert_eq!(
        second.claims, 3,
        "only the three new tasks claimed sandboxes"
    );

    let results = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    let mut ids: Vec<String> = results
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["task_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        ["t0", "t1", "t2", "t3", "t4", "t5"],
        "every task exactly once"
    );
}
