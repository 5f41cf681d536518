//! Each strategy warms and unwarms pools in its own order.

use std::collections::BTreeSet;
use std::sync::Arc;

use sandfleet_engine::{CancellationToken, FleetSettings, Strategy, TaskStatus};

use crate::fixture::{Fixture, row};
use crate::recording::{Event, Recording};

/// Runs 4 images × 2 quick tasks under `strategy` with 2 tasks at a time
/// (so each image gets 1 replica; sliding windows hold 2 images, pipelined 1).
async fn run(strategy: Strategy) -> Vec<Event> {
    run_epochs(strategy, 1, false).await
}

async fn run_epochs(strategy: Strategy, epochs: u32, keep_warm: bool) -> Vec<Event> {
    let fixture = Fixture::new(4);
    let rows: Vec<String> = (0..8)
        .map(|i| row(&format!("t{i}"), &format!("img{}", i % 4), "true", 30))
        .collect();
    let recording = Arc::new(Recording::new(fixture.backend()));
    let settings = FleetSettings {
        strategy,
        max_concurrent: 2,
        epochs,
        keep_warm,
        ..FleetSettings::default()
    };
    let items = (0..epochs)
        .flat_map(|epoch| {
            fixture.items(&rows).into_iter().map(move |mut item| {
                item.epoch = epoch;
                item
            })
        })
        .collect();
    let report = sandfleet_engine::run(
        fixture.spec(recording.clone(), settings, CancellationToken::new()),
        items,
    )
    .await
    .unwrap();
    let tasks = 8 * epochs as usize;
    assert_eq!(report.tasks.ok, tasks, "{}", report.render());
    let results = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    assert_eq!(results.lines().count(), tasks);
    assert!(results.contains(&format!("{:?}", TaskStatus::Ok).to_lowercase()));
    recording.events()
}

fn warm_and_unwarm(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Warm(image, _) => Some(format!("warm {image}")),
            Event::Unwarm(image) => Some(format!("unwarm {image}")),
            Event::Claim(_) => None,
        })
        .collect()
}

/// Most pools held at once.
fn most_held(events: &[Event]) -> usize {
    let mut held = BTreeSet::new();
    let mut most = 0;
    for event in events {
        match event {
            Event::Warm(image, _) => {
                held.insert(image.clone());
            }
            Event::Unwarm(image) => {
                held.remove(image);
            }
            Event::Claim(_) => {}
        }
        most = most.max(held.len());
    }
    most
}

/// The claims for `image` all come after its pool was warmed and before it
/// was released.
fn claims_inside_their_window(events: &[Event]) {
    for (at, event) in events.iter().enumerate() {
        let Event::Claim(image) = event else { continue };
        let warmed = events[..at]
            .iter()
            .any(|e| matches!(e, Event::Warm(i, _) if i == image));
        let released = events[..at]
            .iter()
            .any(|e| matches!(e, Event::Unwarm(i) if i == image));
        assert!(
            warmed && !released,
            "claim of {image} outside its window: {events:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn none_never_warms() {
    let events = run(Strategy::None).await;
    assert!(warm_and_unwarm(&events).is_empty(), "{events:?}");
    assert_eq!(events.len(), 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn naive_warms_everything_first_and_releases_it_last() {
    let events = run(Strategy::Naive).await;
    assert_eq!(
        warm_and_unwarm(&events),
        [
            "warm img0",
            "warm img1",
            "warm img2",
            "warm img3",
            "unwarm img0",
            "unwarm img1",
            "unwarm img2",
            "unwarm img3"
        ]
    );
    let first_claim = events
        .iter()
        .position(|e| matches!(e, Event::Claim(_)))
        .unwrap();
    let first_unwarm = events
        .iter()
        .position(|e| matches!(e, Event::Unwarm(_)))
        .unwrap();
    assert_eq!(first_claim, 4);
    assert_eq!(first_unwarm, 12);
    claims_inside_their_window(&events);
}

#[tokio::test(flavor = "multi_thread")]
async fn sliding_holds_one_window_at_a_time() {
    let events = run(Strategy::Sliding).await;
    assert_eq!(
        warm_and_unwarm(&events),
        [
            "warm img0",
            "warm img1",
            "unwarm img0",
            "unwarm img1",
            "warm img2",
            "warm img3",
            "unwarm img2",
            "unwarm img3"
        ]
    );
    assert_eq!(most_held(&events), 2);
    claims_inside_their_window(&events);
}

#[tokio::test(flavor = "multi_thread")]
async fn pipelined_warms_the_next_window_while_one_runs_and_never_holds_more_than_two() {
    let events = run(Strategy::Pipelined).await;
    let order = warm_and_unwarm(&events);
    // Windows of one image: the next warms before the current is released.
    assert_eq!(
        order,
        [
            "warm img0",
            "warm img1",
            "unwarm img0",
            "warm img2",
            "unwarm img1",
            "warm img3",
            "unwarm img2",
            "unwarm img3"
        ]
    );
    assert_eq!(most_held(&events), 2);
    claims_inside_their_window(&events);
}

#[tokio::test(flavor = "multi_thread")]
async fn keep_warm_keeps_the_pools_across_epochs() {
    let events = run_epochs(Strategy::Naive, 2, true).await;
    // Warmed once, released once at teardown; 16 claims over the two epochs.
    assert_eq!(
        warm_and_unwarm(&events),
        [
            "warm img0",
            "warm img1",
            "warm img2",
            "warm img3",
            "unwarm img0",
            "unwarm img1",
            "unwarm img2",
            "unwarm img3"
        ]
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Claim(_)))
            .count(),
        16
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_keep_warm_each_epoch_warms_and_releases_again() {
    let events = run_epochs(Strategy::Naive, 2, false).await;
    let order = warm_and_unwarm(&events);
    assert_eq!(order.len(), 16, "{order:?}");
    assert_eq!(
        order[..4],
        ["warm img0", "warm img1", "warm img2", "warm img3"]
    );
    assert_eq!(
        order[4..8],
        ["unwarm img0", "unwarm img1", "unwarm img2", "unwarm img3"]
    );
    assert_eq!(order[8..12], order[..4]);
}
