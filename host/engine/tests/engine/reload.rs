//! Plugins reloaded and faulting during a run: a placement policy replaced
//! mid-run serves the next decisions, while the task in flight is graded
//! by the adapter version that prepared it; a custom reset check that
//! faults is answered by the built-in `git-restore`, with a baseline of
//! its own, instead of quarantining every sandbox.

use std::time::Instant;

use sandfleet_engine::{
    CancellationToken, FleetSettings, PluginServed, RunReport, Strategy, TaskRecord,
};
use sandfleet_test_support::{install_plugin, salted};

use crate::fixture::{Fixture, row};
use crate::replace::{PATIENCE, kill_once_running, nth_sandbox, victim};

/// Polls until `condition` holds; panics after [`PATIENCE`].
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn records(fixture: &Fixture) -> Vec<TaskRecord> {
    std::fs::read_to_string(fixture.out_dir().join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn served<'a>(report: &'a RunReport, name: &str) -> Vec<&'a PluginServed> {
    report.plugins.iter().filter(|p| p.name == name).collect()
}

fn one_at_a_time() -> FleetSettings {
    FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 1,
        ..FleetSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_replaced_mid_run_serves_the_next_decisions_and_the_task_in_flight_keeps_its_adapter()
 {
    let fixture = Fixture::new(1);
    let (dir, _watcher) = fixture.plugin_dir(&[
        ("mine", sandfleet_guests::builtin("least-loaded").unwrap()),
        (
            "generic",
            &salted(sandfleet_guests::builtin("generic").unwrap(), 1, 0),
        ),
    ]);
    let version = |name: &str| {
        let status = fixture.registry().status(name).unwrap();
        status.serving.unwrap().plugin.version.to_string()
    };
    let (placement_before, adapter_before) = (version("mine"), version("generic"));
    let spec = fixture.spec(fixture.backend(), one_at_a_time(), CancellationToken::new());
    let spec = sandfleet_engine::RunSpec {
        plugins: fixture.plugins_named("mine", None),
        ..spec
    };
    let items = fixture.items(&[
        row("t0", "img0", &victim("38.125"), 120),
        row("t1", "img0", "true", 30),
        row("t2", "img0", "true", 30),
    ]);
    let running = tokio::spawn(sandfleet_engine::run(spec, items));

    // t0 was placed and prepared; both files are replaced while it runs.
    nth_sandbox(&fixture.out_dir().join("logs/t0.log"), 1).await;
    let pick_last = std::fs::read(sandfleet_guests::PICK_LAST).unwrap();
    install_plugin(&dir, "mine", &pick_last);
    install_plugin(
        &dir,
        "generic",
        &salted(sandfleet_guests::builtin("generic").unwrap(), 2, 0),
    );
    eventually("both new versions to serve", || {
        version("mine") != placement_before && version("generic") != adapter_before
    })
    .await;
    let (placement_after, adapter_after) = (version("mine"), version("generic"));
    assert_eq!(kill_once_running("sleep 38.125").await, 1);
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.tasks.ok, 3, "{}", report.render());

    // Each task was prepared and graded by one version: t0 by the one
    // serving when it started.
    let adapters: Vec<(String, String)> = records(&fixture)
        .into_iter()
        .map(|r| (r.task_id, r.plugins.adapter.version))
        .collect();
    assert_eq!(
        adapters,
        [
            ("t0".to_string(), adapter_before.clone()),
            ("t1".to_string(), adapter_after.clone()),
            ("t2".to_string(), adapter_after.clone()),
        ]
    );
    // The report lists both versions of each, with when they took over:
    // the placement decided t0's claim, then t1's and t2's.
    let placements = served(&report, "mine");
    let decisions: Vec<(&str, u64)> = placements
        .iter()
        .map(|p| (p.version.as_str(), p.calls))
        .collect();
    assert_eq!(
        decisions,
        [
            (placement_before.as_str(), 1),
            (placement_after.as_str(), 2)
        ],
        "{:?}",
        report.plugins
    );
    assert!(placements[0].took_over_at < placements[1].took_over_at);
    let adapter_calls: Vec<(&str, u64)> = served(&report, "generic")
        .iter()
        .map(|p| (p.version.as_str(), p.calls))
        .collect();
    // A prepare and a grade per task.
    assert_eq!(
        adapter_calls,
        [(adapter_before.as_str(), 2), (adapter_after.as_str(), 4)],
        "{:?}",
        report.plugins
    );
    let rendered = report.render();
    assert!(
        rendered.contains(&format!("plugin mine {placement_after}")),
        "{rendered}"
    );
    // The picture names both placements, the new one from when it took over.
    let placements: Vec<(String, u64)> = fixture
        .events("plugin")
        .iter()
        .filter(|e| e["role"] == "placement")
        .map(|e| {
            (
                e["plugin"].as_str().unwrap().into(),
                e["at"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(placements.len(), 2, "{placements:?}");
    assert_eq!(placements[0].0, format!("mine {placement_before}"));
    assert_eq!(placements[1].0, format!("mine {placement_after}"));
    assert!(placements[1].1 > placements[0].1, "{placements:?}");
}

/// Four tasks of one image, one at a time, recycling through the reset
/// check `faulty-reset` (it traps in every reset), with or without the
/// built-in fallback.
async fn recycled_through_a_faulty_reset(fallback: bool) -> (Fixture, RunReport) {
    let fixture = Fixture::with_fallback(1, fallback);
    let faulty = std::fs::read(sandfleet_guests::FAULTY_RESET).unwrap();
    let (_dir, _watcher) = fixture.plugin_dir(&[("faulty-reset", &faulty)]);
    let spec = fixture.spec(
        fixture.backend_with_images(true),
        FleetSettings {
            recycle: true,
            reset_by_snapshot: false,
            ..one_at_a_time()
        },
        CancellationToken::new(),
    );
    let spec = sandfleet_engine::RunSpec {
        plugins: fixture.plugins_named("least-loaded", Some("faulty-reset")),
        ..spec
    };
    let rows: Vec<String> = (0..4)
        .map(|i| row(&format!("t{i}"), "img0", "true", 30))
        .collect();
    let report = sandfleet_engine::run(spec, fixture.items(&rows))
        .await
        .unwrap();
    assert_eq!(report.tasks.ok, 4, "{}", report.render());
    (fixture, report)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_faulting_reset_check_is_answered_by_git_restore_with_its_own_baseline() {
    let (fixture, report) = recycled_through_a_faulty_reset(true).await;
    // The first sandbox's baseline was the faulty check's: the built-in
    // cannot judge it, so that sandbox goes. Every later one gets the
    // built-in's baseline and is reused.
    assert_eq!(report.recycle.quarantined, 1, "{}", report.render());
    assert_eq!(report.recycle.reused, 2, "{}", report.render());
    assert_eq!(report.claims, 2);
    let resets: Vec<(String, Option<String>)> = records(&fixture)
        .into_iter()
        .map(|r| {
            let reset = r.plugins.reset.expect("a recycled sandbox names its check");
            assert_eq!(reset.name, "faulty-reset");
            (
                r.task_id,
                reset
                    .fallback
                    .map(|f| f.split('@').next().unwrap().to_string()),
            )
        })
        .collect();
    let git_restore = Some("git-restore".to_string());
    assert_eq!(
        resets,
        [
            ("t0".to_string(), None),
            ("t1".to_string(), git_restore.clone()),
            ("t2".to_string(), git_restore.clone()),
            ("t3".to_string(), git_restore),
        ]
    );
    let faulty = served(&report, "faulty-reset");
    assert_eq!(faulty.len(), 1, "{:?}", report.plugins);
    assert_eq!(faulty[0].faults, 1, "{:?}", report.plugins);
    assert!(faulty[0].fallbacks >= 3, "{:?}", report.plugins);
    assert!(
        report.render().contains("plugin faulty-reset"),
        "{}",
        report.render()
    );

    // Without the fallback, every reset faults and every sandbox goes.
    let (_, report) = recycled_through_a_faulty_reset(false).await;
    assert_eq!(report.recycle.quarantined, 3, "{}", report.render());
    assert_eq!(report.recycle.reused, 0);
}
