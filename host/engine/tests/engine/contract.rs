//! The engine against the backend contract, on the scripted in-memory
//! backend: which failures are retried and which are not, leases on
//! sandboxes that expire, capacity it cannot know, a plan clamped to the
//! slots there are, releases off the task's path, and two runs sharing one
//! backend.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandfleet_core::{Backend, Capacity, ErrorKind, RunId};
use sandfleet_engine::{
    CancellationToken, Cluster, FleetSettings, Progress, RunReport, RunSpec, Strategy, TaskRecord,
};
use sandfleet_test_support::{Op, Reply, Scripted};

use crate::fixture::{Fixture, row};

/// A run of `tasks` one-command tasks (`t0..`, on image `img0`) on the
/// given clusters.
fn spec_on(
    fixture: &Fixture,
    clusters: &[Arc<Scripted>],
    settings: FleetSettings,
    tasks: usize,
) -> (RunSpec, Vec<sandfleet_engine::WorkItem>) {
    let first: Arc<dyn Backend> = clusters[0].clone();
    let mut spec = fixture.spec(first, settings, CancellationToken::new());
    spec.clusters = clusters
        .iter()
        .map(|backend| Cluster {
            name: backend.name().to_string(),
            kind: "scripted".to_string(),
            weight: 1,
            backend: backend.clone(),
            pace: None,
        })
        .collect();
    let rows: Vec<String> = (0..tasks)
        .map(|i| row(&format!("t{i}"), &format!("img{}", i % 3), "true", 60))
        .collect();
    (spec, fixture.items(&rows))
}

fn cold() -> FleetSettings {
    FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 2,
        ..FleetSettings::default()
    }
}

fn statuses(fixture: &Fixture) -> Vec<(String, String, Option<String>)> {
    let text = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    let mut lines: Vec<(String, String, Option<String>)> = text
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                record["task_id"].as_str().unwrap().to_string(),
                record["status"].as_str().unwrap().to_string(),
                record["error"].as_str().map(str::to_string),
            )
        })
        .collect();
    lines.sort();
    lines
}

async fn run(spec: RunSpec, items: Vec<sandfleet_engine::WorkItem>) -> RunReport {
    sandfleet_engine::run(spec, items).await.unwrap()
}

#[tokio::test]
async fn a_throttled_claim_is_retried_after_the_pause_the_backend_asked_for() {
    let fixture = Fixture::new(0);
    let backend = Arc::new(Scripted::new("s"));
    let asked = Duration::from_millis(700);
    backend.fail(
        Op::Claim,
        1,
        ErrorKind::Throttled {
            retry_after: Some(asked),
        },
    );
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 1);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 1, "{report:?}");
    let claims = backend.call_times(Op::Claim);
    assert_eq!(claims.len(), 2);
    assert!(
        claims[1] - claims[0] >= asked,
        "{:?}",
        claims[1] - claims[0]
    );
    assert_eq!(
        report.retries.get("throttled"),
        Some(&1),
        "{:?}",
        report.retries
    );
}

#[tokio::test]
async fn a_conflict_on_warm_is_retried() {
    let fixture = Fixture::new(0);
    let backend = Arc::new(Scripted::new("s"));
    backend.fail(Op::Warm, 1, ErrorKind::Conflict);
    let settings = FleetSettings {
        strategy: Strategy::Naive,
        ..cold()
    };
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), settings, 3);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 3, "{report:?}");
    assert!(report.warm.total > 0);
    assert_eq!(
        report.retries.get("conflict"),
        Some(&1),
        "{:?}",
        report.retries
    );
    assert!(backend.calls(Op::Warm) >= 2);
}

#[tokio::test]
async fn a_command_that_may_have_reached_the_sandbox_is_not_retried() {
    let fixture = Fixture::new(0);
    let backend = Arc::new(Scripted::new("s"));
    backend.fail(Op::Exec, 1, ErrorKind::Transport { sent: true });
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 1);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.infra_error, 1, "{report:?}");
    assert_eq!(backend.calls(Op::Exec), 1, "the command was sent again");
    assert!(report.retries.is_empty(), "{:?}", report.retries);
    let lines = statuses(&fixture);
    assert_eq!(lines[0].1, "infra_error");
    assert!(
        lines[0].2.as_deref().unwrap().contains("transport"),
        "{lines:?}"
    );
}

/// A six-second command on a backend whose sandboxes live two seconds
/// unless renewed.
fn slow_task_on_a_short_lease() -> Arc<Scripted> {
    Arc::new(
        Scripted::new("s")
            .with_lease_ttl(Duration::from_secs(2))
            .respond(|request| Reply {
                delay: if request.argv.iter().any(|a| a.contains("true")) {
                    Duration::from_secs(6)
                } else {
                    Duration::ZERO
                },
                ..Reply::default()
            }),
    )
}

#[tokio::test]
async fn a_lease_renewed_at_a_third_of_its_ttl_outlives_a_long_task() {
    let fixture = Fixture::new(0);
    let backend = slow_task_on_a_short_lease();
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 1);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 1, "{:?}", statuses(&fixture));
    // 6 s at one renewal per 2/3 s.
    assert!(
        backend.calls(Op::Renew) >= 6,
        "{}",
        backend.calls(Op::Renew)
    );
}

#[tokio::test]
async fn a_lease_that_cannot_be_renewed_makes_the_task_an_infra_error() {
    let fixture = Fixture::new(0);
    let backend = slow_task_on_a_short_lease();
    backend.fail_renewals_from(1);
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 1);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.infra_error, 1, "{:?}", statuses(&fixture));
    assert_eq!((report.tasks.ok, report.tasks.failed), (0, 0));
    let lines = statuses(&fixture);
    let error = lines[0].2.as_deref().unwrap();
    assert!(
        error.contains("lease") || error.contains("expired"),
        "{error}"
    );
}

#[tokio::test]
async fn a_cluster_that_cannot_tell_its_disk_leaves_the_disk_budget_to_the_others() {
    let fixture = Fixture::new(0);
    let knows = Arc::new(Scripted::new("knows"));
    let unknown = Arc::new(Scripted::new("unknown").with_capacity(Capacity::default()));
    let settings = FleetSettings {
        strategy: Strategy::Naive,
        avg_image_mib: Some(100),
        ..cold()
    };
    let (spec, items) = spec_on(&fixture, &[knows.clone(), unknown.clone()], settings, 6);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 6, "{report:?}");
    // A disk budget of 0 would have planned no warm sandboxes at all.
    assert!(report.warm.total > 0, "{report:?}");
}

#[tokio::test]
async fn concurrency_above_the_clusters_slots_is_clamped_and_the_run_completes() {
    let fixture = Fixture::new(0);
    let slots = 8;
    let backend = Arc::new(Scripted::new("s").with_capacity(Capacity {
        sandbox_slots: Some(slots),
        ..Capacity::default()
    }));
    let settings = FleetSettings {
        strategy: Strategy::Naive,
        max_concurrent: 32,
        max_warmpool_size: 32,
        ..FleetSettings::default()
    };
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), settings, 30);
    // The backend refuses pools that do not fit its slots: a plan for 32
    // at once would fail mid-run.
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 30, "{report:?}");
    assert!(report.warm.peak <= u64::from(slots), "{report:?}");
}

/// Watches each task's record arrive: whether its line is in the results
/// file by then, and how many releases had finished.
struct WatchRecords {
    backend: Arc<Scripted>,
    results: std::path::PathBuf,
    seen: Mutex<Vec<(bool, usize)>>,
}

impl Progress for WatchRecords {
    fn started(&self, _: usize, _: usize) {}
    fn step(&self, _: &str) {}
    fn finished(&self, record: &TaskRecord, _: usize, _: usize) {
        let written = std::fs::read_to_string(&self.results)
            .unwrap_or_default()
            .contains(&format!("\"task_id\":\"{}\"", record.task_id));
        self.seen
            .lock()
            .unwrap()
            .push((written, self.backend.calls(Op::Release)));
    }
    fn done(&self) {}
}

#[tokio::test]
async fn a_result_is_written_before_its_slow_release_finishes() {
    let fixture = Fixture::new(0);
    let backend = Arc::new(Scripted::new("s"));
    backend.delay_releases(Duration::from_secs(2));
    let (mut spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 1);
    let watch = Arc::new(WatchRecords {
        backend: backend.clone(),
        results: fixture.out_dir().join("results.jsonl"),
        seen: Mutex::new(Vec::new()),
    });
    spec.progress = watch.clone();
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 1);
    assert_eq!(*watch.seen.lock().unwrap(), [(true, 0)]);
    // Teardown waited for the release.
    assert_eq!(backend.calls(Op::Release), 1);
    assert_eq!(report.releases.released, 1);
}

#[tokio::test]
async fn a_release_that_fails_twice_is_retried_and_leaves_nothing_behind() {
    let fixture = Fixture::new(0);
    let backend = Arc::new(Scripted::new("s"));
    backend.fail(Op::Release, 1, ErrorKind::Unavailable);
    backend.fail(Op::Release, 2, ErrorKind::Transport { sent: false });
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 1);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 1);
    assert_eq!(backend.calls(Op::Release), 3);
    assert_eq!((report.releases.released, report.releases.failed), (1, 0));
    assert_eq!(backend.live(&fixture.run_id), 0);
    assert_eq!(
        report.retries.values().sum::<u64>(),
        2,
        "{:?}",
        report.retries
    );
}

#[tokio::test]
async fn a_failed_release_does_not_change_the_result_and_the_reap_removes_it() {
    let fixture = Fixture::new(0);
    let backend = Arc::new(Scripted::new("s"));
    for nth in 1..=6 {
        backend.fail(Op::Release, nth, ErrorKind::Unavailable);
    }
    let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 1);
    let report = run(spec, items).await;
    assert_eq!(report.tasks.ok, 1);
    assert_eq!(report.releases.failed, 1);
    assert_eq!(statuses(&fixture)[0].1, "ok");
    assert_eq!(backend.live(&fixture.run_id), 0, "teardown's reap left it");
}

#[tokio::test]
async fn two_runs_on_one_backend_each_reap_only_their_own() {
    let mut fixture = Fixture::new(0);
    let backend = Arc::new(Scripted::new("shared"));
    // Another run (a daemon's client, say) holds a sandbox on the same
    // backend instance throughout.
    let other = RunId::generate("other");
    let template = backend
        .ensure_template(&sandfleet_core::TemplateSpec {
            name: "other".into(),
            image: "img0".into(),
            cpu_milli: 100,
            memory_mib: 64,
            disk_mib: 64,
            network: false,
            env: Default::default(),
            labels: other.labels(),
        })
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let held = backend
        .claim(&template, &other.labels(), deadline)
        .await
        .unwrap();
    for _ in 0..2 {
        fixture.next_run();
        let (spec, items) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 3);
        let report = run(spec, items).await;
        assert_eq!(report.tasks.ok, 3);
        assert_eq!(backend.live(&fixture.run_id), 0);
        assert_eq!(backend.live(&other), 1, "a run's teardown took another's");
        backend
            .exec(&held, &Default::default(), None)
            .await
            .unwrap();
    }
    let (spec, _) = spec_on(&fixture, std::slice::from_ref(&backend), cold(), 0);
    let reaped = sandfleet_engine::reap(&spec.clusters, &other)
        .await
        .unwrap();
    assert_eq!((reaped.sandboxes, backend.live(&other)), (1, 0));
}
