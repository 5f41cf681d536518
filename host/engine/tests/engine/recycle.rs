//! Recycling: same-image tasks reuse a sandbox after the reset check says it
//! is clean, and a sandbox the reset cannot clean is quarantined, so the
//! next task never sees its dirt.

use sandfleet_engine::{CancellationToken, FleetSettings, Strategy};

use crate::fixture::{Fixture, row};

#[tokio::test(flavor = "multi_thread")]
async fn recycled_sandboxes_are_clean_and_dirt_the_reset_cannot_undo_is_quarantined() {
    let fixture = Fixture::new(1);
    let rows = vec![
        // Dirt the reset undoes: a changed tracked file, an untracked file,
        // a file in /tmp.
        row(
            "dirty-files",
            "img0",
            "echo dirt >> README && echo junk > untracked.txt && touch /tmp/left-behind",
            30,
        ),
        row(
            "sees-clean-files",
            "img0",
            "git diff --quiet && test ! -e untracked.txt && test ! -e /tmp/left-behind",
            30,
        ),
        // Dirt it cannot undo: the repository's configuration.
        row(
            "dirty-config",
            "img0",
            "git config --local sandfleet.dirt yes",
            30,
        ),
        row(
            "sees-clean-config",
            "img0",
            "test -z \"$(git config --local --get sandfleet.dirt)\"",
            30,
        ),
    ];
    let mut spec = fixture.spec(
        fixture.backend_with_images(true),
        FleetSettings {
            strategy: Strategy::None,
            max_concurrent: 1,
            recycle: true,
            max_reuses: 8,
            ..FleetSettings::default()
        },
        CancellationToken::new(),
    );
    spec.reset = Some(fixture.reset_check("git-restore"));
    let report = sandfleet_engine::run(spec, fixture.items(&rows))
        .await
        .unwrap();
    assert_eq!(report.tasks.ok, 4, "{}", report.render());
    assert_eq!(report.recycle.quarantined, 1, "{}", report.render());
    assert_eq!(
        report.claims, 2,
        "one sandbox, then one to replace the quarantined one"
    );
    assert_eq!(report.recycle.reused, 2);

    let results = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    let sandbox_of = |task: &str| -> String {
        results
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .find(|r| r["task_id"] == task)
            .map(|r| r["sandbox"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(sandbox_of("dirty-files"), sandbox_of("sees-clean-files"));
    assert_eq!(sandbox_of("sees-clean-files"), sandbox_of("dirty-config"));
    assert_ne!(sandbox_of("dirty-config"), sandbox_of("sees-clean-config"));
}
