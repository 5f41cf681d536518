//! Prepare hooks on the local backend: every new sandbox of the image runs
//! them once before any task gets it, warm or cold; a sandbox whose prepare
//! fails or overruns is released and replaced, and no task runs in it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sandfleet_engine::{
    CancellationToken, FleetSettings, PrepareHook, PrepareHooks, RunReport, Strategy,
};

use crate::fixture::{Fixture, row};

fn hook(script: &str, timeout: Duration) -> PrepareHooks {
    hook_of(script, timeout, true)
}

/// A hook of `img0`; `each_sandbox` keeps it from forking a prepared
/// snapshot on the local backend, which has snapshots.
fn hook_of(script: &str, timeout: Duration, each_sandbox: bool) -> PrepareHooks {
    PrepareHooks::new(
        BTreeMap::from([(
            "img0".to_string(),
            PrepareHook {
                commands: vec![vec!["sh".into(), "-c".into(), script.into()]],
                timeout,
                workdir: None,
                expected: None,
                each_sandbox,
            },
        )]),
        None,
    )
}

/// Each result line as (task, status, sandbox, error).
fn results(fixture: &Fixture) -> Vec<(String, String, String, String)> {
    std::fs::read_to_string(fixture.out_dir().join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            let text = |key: &str| r[key].as_str().unwrap_or_default().to_string();
            (
                text("task_id"),
                text("status"),
                text("sandbox"),
                text("error"),
            )
        })
        .collect()
}

async fn run(fixture: &Fixture, settings: FleetSettings, rows: &[String]) -> RunReport {
    let mut spec = fixture.spec(
        fixture.backend_with_images(true),
        settings,
        CancellationToken::new(),
    );
    spec.plugins = fixture.plugins(Some("git-restore"));
    sandfleet_engine::run(spec, fixture.items(rows))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prepare_hook_runs_once_per_sandbox_and_every_task_sees_its_marker() {
    // From a warm pool of prepared sandboxes, from cold claims, and with
    // recycling (a reset keeps what the prepare made in the workdir: its
    // baseline is taken after it; a scrub keeps nothing outside the
    // workdir, so the marker lives there).
    for (strategy, recycle) in [
        (Strategy::Naive, false),
        (Strategy::None, false),
        (Strategy::Naive, true),
    ] {
        let fixture = Fixture::new(1);
        let settings = FleetSettings {
            strategy,
            recycle,
            max_concurrent: 2,
            prepare: hook(
                "hostname >> /workspace/prepared-in; echo made > /workspace/prepared.txt",
                Duration::from_secs(60),
            ),
            ..FleetSettings::default()
        };
        // Exactly one line, naming this sandbox: the prepare ran here, once.
        let sees_the_marker =
            "test \"$(cat prepared-in)\" = \"$(hostname)\" && grep -qx made prepared.txt";
        let rows: Vec<String> = (0..6)
            .map(|i| row(&format!("t{i}"), "img0", sees_the_marker, 30))
            .collect();
        let report = run(&fixture, settings, &rows).await;
        let label = format!("{strategy:?}, recycle {recycle}");
        assert_eq!(report.tasks.ok, 6, "{label}: {}", report.render());
        assert_eq!(report.prepare_failed, 0, "{label}");
        // No sandbox was prepared twice. (A pool's refill that the run's
        // end stops is claimed but never prepared, so claims may be more.)
        assert!(
            report.prepared <= report.claims,
            "{label}: {}",
            report.render()
        );
        assert_eq!(
            report.phases["prepare"].count as u64, report.prepared,
            "{label}"
        );
        let sandboxes: BTreeSet<String> = results(&fixture).into_iter().map(|r| r.2).collect();
        assert!(report.prepared >= sandboxes.len() as u64, "{label}");
        if recycle {
            assert!(report.recycle.reused > 0, "{label}: {}", report.render());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_whose_prepare_fails_is_replaced_and_no_task_runs_in_it() {
    // Sandbox ids end in a number the backend counts up: the prepare fails
    // on every odd one.
    let fails_on_odd =
        "case $(hostname) in *[13579]) echo odd sandbox >&2; exit 3;; esac; touch /tmp/prepared";
    for strategy in [Strategy::None, Strategy::Naive] {
        let fixture = Fixture::new(1);
        let settings = FleetSettings {
            strategy,
            max_concurrent: 1,
            warm_create_budget: 1,
            prepare: hook(fails_on_odd, Duration::from_secs(60)),
            ..FleetSettings::default()
        };
        let rows: Vec<String> = (0..4)
            .map(|i| row(&format!("t{i}"), "img0", "test -e /tmp/prepared", 30))
            .collect();
        let report = run(&fixture, settings, &rows).await;
        assert_eq!(report.tasks.ok, 4, "{strategy:?}: {}", report.render());
        assert!(
            report.prepare_failed > 0,
            "{strategy:?}: {}",
            report.render()
        );
        // The run's summary says so.
        let summary = format!(
            "prepared {} sandboxes ({} released: prepare_failed)",
            report.prepared, report.prepare_failed
        );
        assert!(report.render().contains(&summary), "{}", report.render());
        assert!(
            report.prepared + report.prepare_failed <= report.claims,
            "{strategy:?}: {}",
            report.render()
        );
        assert_eq!(
            report.phases["prepare"].count as u64,
            report.prepared + report.prepare_failed,
            "{strategy:?}"
        );
        // The picture marks each replaced sandbox, and draws its failed
        // prepare step.
        let replaced = fixture.events("mark");
        assert_eq!(replaced.len() as u64, report.prepare_failed, "{replaced:?}");
        assert!(replaced.iter().all(|m| m["kind"] == "replaced"));
        let failed_prepares = fixture
            .events("segment")
            .iter()
            .filter(|e| e["kind"] == "prepare" && e["ok"] == false)
            .count();
        assert_eq!(failed_prepares as u64, report.prepare_failed);
        for (task, _, sandbox, _) in results(&fixture) {
            let last = sandbox.chars().last().unwrap();
            assert!(
                "02468".contains(last),
                "{strategy:?}: {task} ran in {sandbox}, whose prepare failed"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prepare_that_overruns_its_timeout_is_replaced_then_the_task_is_an_infra_error() {
    let fixture = Fixture::new(1);
    let settings = FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 1,
        infra_retries: 0,
        prepare: hook("sleep 5", Duration::from_millis(300)),
        ..FleetSettings::default()
    };
    let report = run(&fixture, settings, &[row("t0", "img0", "true", 30)]).await;
    assert_eq!(report.tasks.infra_error, 1, "{}", report.render());
    assert_eq!(
        report.prepare_failed,
        sandfleet_engine::PREPARE_ATTEMPTS as u64
    );
    assert_eq!(report.prepared, 0);
    let (_, _, sandbox, error) = results(&fixture).remove(0);
    assert!(sandbox.is_empty(), "no task ran: {sandbox}");
    assert!(
        error.contains("image `img0`: prepare failed on 3 sandboxes")
            && error.contains("overran the prepare timeout (300ms)"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn where_a_cluster_snapshots_the_hook_runs_once_there_and_every_sandbox_forks_it() {
    // Two clusters, each the local backend (which has snapshots); the hook
    // takes 5 s and names the sandbox it ran in.
    let fixture = Fixture::new(1);
    let settings = FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 8,
        prepare: hook_of(
            "sleep 5; hostname > /workspace/prepared-in; echo made > /workspace/prepared.txt",
            Duration::from_secs(60),
            false,
        ),
        ..FleetSettings::default()
    };
    // Every task's sandbox holds what the hook made, in another sandbox.
    let forked = "grep -qx made prepared.txt && test \"$(cat prepared-in)\" != \"$(hostname)\"";
    let rows: Vec<String> = (0..64)
        .map(|i| row(&format!("t{i}"), "img0", forked, 30))
        .collect();
    let mut spec = fixture.spec(
        fixture.backend_with_images(true),
        settings,
        CancellationToken::new(),
    );
    let mut second = spec.clusters[0].clone();
    second.name = "local-b".into();
    second.backend = fixture.backend_with_images(true);
    spec.clusters.push(second);
    spec.plugins = fixture.plugins(Some("git-restore"));
    let report = sandfleet_engine::run(spec, fixture.items(&rows))
        .await
        .unwrap();

    assert_eq!(report.tasks.ok, 64, "{}", report.render());
    let clusters: BTreeSet<String> =
        std::fs::read_to_string(fixture.out_dir().join("results.jsonl"))
            .unwrap()
            .lines()
            .map(|line| {
                serde_json::from_str::<serde_json::Value>(line).unwrap()["cluster"].to_string()
            })
            .collect();
    // Once per cluster that ran tasks, and never again.
    assert_eq!(
        report.prepared,
        clusters.len() as u64,
        "{}",
        report.render()
    );
    assert_eq!(report.phases["prepare"].count as u64, report.prepared);
    assert_eq!(report.prepare_failed, 0);
    assert_eq!(report.forked, 64, "{}", report.render());
}
