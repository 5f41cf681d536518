//! The breaker tears a run down when the run owns far more sandboxes than
//! its plan explains.

use std::sync::Arc;
use std::time::Duration;

use sandfleet_core::Backend;
use sandfleet_engine::{CancellationToken, FleetSettings, RunError, Strategy};

use sandfleet_test_support::sandbox_dirs;

use crate::fixture::{Fixture, row};
use crate::recording::Recording;

#[tokio::test(flavor = "multi_thread")]
async fn the_breaker_trips_against_a_backend_that_over_creates() {
    let fixture = Fixture::new(1);
    let rows: Vec<String> = (0..6)
        .map(|i| row(&format!("t{i}"), "img0", "sleep 2", 30))
        .collect();
    let mut leaky = Recording::new(fixture.backend());
    leaky.leak_per_claim = 4;
    let leaky = Arc::new(leaky);
    let settings = FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 2,
        overcommit_factor: 1.5,
        breaker_interval: Duration::from_millis(50),
        ..FleetSettings::default()
    };
    let error = sandfleet_engine::run(
        fixture.spec(leaky.clone(), settings, CancellationToken::new()),
        fixture.items(&rows),
    )
    .await
    .unwrap_err();
    let RunError::Breaker(reason) = &error else {
        panic!("expected the breaker, got {error}");
    };
    // No warm pools planned, two tasks at a time and as many sandboxes
    // waiting for release: 4 expected, limit 6.
    assert!(
        reason.contains("exceed the limit of 6 (expected 4 × overcommit_factor 1.5"),
        "{reason}"
    );

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture.out_dir().join("report.json")).unwrap())
            .unwrap();
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .starts_with("circuit breaker:")
    );
    assert!(report["tasks"]["not_run"].as_u64().unwrap() > 0);
    let owned = leaky.list_owned(&fixture.run_id).await.unwrap();
    assert!(owned.sandboxes.is_empty(), "teardown left {owned:?}");
    assert_eq!(
        sandbox_dirs(&fixture.state_dir(), fixture.run_id.as_str()),
        0
    );
}
