//! Recycling: same-image tasks reuse a sandbox after the reset check says it
//! is clean, and a sandbox the reset cannot clean is quarantined, so the
//! next task never sees its dirt; where the backend restores in place (the
//! local backend), a restore to the sandbox's fresh snapshot resets it
//! instead, and undoes what the reset check cannot.

use sandfleet_engine::{CancellationToken, FleetSettings, RunReport, Strategy};

use crate::fixture::{Fixture, row};
use crate::recording::Recording;

/// Runs `rows` one at a time on git images, recycling through git-restore
/// (never a snapshot's restore).
pub(crate) async fn run_recycling(fixture: &Fixture, rows: &[String]) -> RunReport {
    run_recycling_on(fixture, fixture.backend_with_images(true), rows, false).await
}

/// [`run_recycling`] on `backend`, resetting by restoring a snapshot where
/// `by_snapshot` and the backend can.
async fn run_recycling_on(
    fixture: &Fixture,
    backend: std::sync::Arc<dyn sandfleet_core::Backend>,
    rows: &[String],
    by_snapshot: bool,
) -> RunReport {
    let mut spec = fixture.spec(
        backend,
        FleetSettings {
            strategy: Strategy::None,
            max_concurrent: 1,
            recycle: true,
            max_reuses: 8,
            reset_by_snapshot: by_snapshot,
            ..FleetSettings::default()
        },
        CancellationToken::new(),
    );
    spec.plugins = fixture.plugins(Some("git-restore"));
    sandfleet_engine::run(spec, fixture.items(rows))
        .await
        .unwrap()
}

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
    let report = run_recycling(&fixture, &rows).await;
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

    // The picture: a reset before each reuse, drawn on the task it readied,
    // the one that failed marked where the sandbox was quarantined.
    let resets: Vec<(String, bool)> = fixture
        .events("segment")
        .iter()
        .filter(|e| e["kind"] == "reset")
        .map(|e| {
            (
                e["task"]["id"].as_str().unwrap().to_string(),
                e["ok"] == true,
            )
        })
        .collect();
    assert_eq!(
        resets,
        [
            ("sees-clean-files".to_string(), true),
            ("dirty-config".to_string(), true),
            ("sees-clean-config".to_string(), false),
        ]
    );
    let marks = fixture.events("mark");
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert_eq!(marks[0]["kind"], "quarantined");
    assert_eq!(marks[0]["sandbox"], sandbox_of("dirty-config").as_str());
    assert_eq!(marks[0]["task"]["id"], "sees-clean-config");
    assert!(fixture.out_dir().join("report.html").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_a_task_leaves_running_cannot_tamper_with_the_next_task() {
    let rows = vec![
        // Out of its command's process group, silent, hidden from the
        // sandbox's /proc if it can be (a bind mount over its entry, which
        // commands are denied), and waiting for the next task to start (for
        // 30 s at most) before it rewrites the file that task checks: the
        // reset check sees a clean tree.
        row(
            "leaves-a-tamperer",
            "img0",
            "setsid sh -c 'mount --bind /proc/1 /proc/$$ 2>/dev/null; \
             for i in $(seq 3000); do [ -e /workspace/.next ] && break; sleep 0.01; done; \
             echo tampered > /workspace/README' </dev/null >/dev/null 2>&1 &",
            30,
        ),
        // Watches the file for a second after telling the tamperer to go.
        row(
            "sees-the-file-untouched",
            "img0",
            "touch /workspace/.next; for i in $(seq 100); do grep -q tampered README && exit 1; \
             sleep 0.01; done; grep -q '^image 0$' README",
            30,
        ),
    ];
    for by_snapshot in [false, true] {
        let fixture = Fixture::new(1);
        let backend = fixture.backend_with_images(true);
        let report = run_recycling_on(&fixture, backend, &rows, by_snapshot).await;
        // Recycled (so the tamperer had its chance), and clean.
        assert_eq!(report.recycle.reused, 1, "{}", report.render());
        assert_eq!(report.recycle.restored, u64::from(by_snapshot));
        assert_eq!(report.tasks.ok, 2, "{}", report.render());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_to_the_fresh_snapshot_undoes_what_a_reset_check_cannot() {
    let fixture = Fixture::new(1);
    let rows = vec![
        row(
            "dirties-everything",
            "img0",
            "echo dirt >> README && echo junk > untracked.txt && touch /tmp/left-behind \
             && git config --local sandfleet.dirt yes && git -c user.name=t -c user.email=t@t commit -qam dirt",
            30,
        ),
        row(
            "sees-it-fresh",
            "img0",
            "git diff --quiet && test ! -e untracked.txt && test ! -e /tmp/left-behind \
             && test -z \"$(git config --local --get sandfleet.dirt)\" \
             && test \"$(git log --oneline | wc -l)\" = 1",
            30,
        ),
        row(
            "sees-it-fresh-again",
            "img0",
            "git diff --quiet && test ! -e untracked.txt",
            30,
        ),
    ];
    let backend = fixture.backend_with_images(true);
    let report = run_recycling_on(&fixture, backend, &rows, true).await;
    assert_eq!(report.tasks.ok, 3, "{}", report.render());
    // One sandbox served all three: nothing was quarantined.
    assert_eq!(report.claims, 1, "{}", report.render());
    assert_eq!(report.recycle.reused, 2);
    assert_eq!(report.recycle.restored, 2);
    assert_eq!(report.recycle.quarantined, 0);
    assert!(
        report
            .render()
            .contains("(2 reset by restoring a snapshot)"),
        "{}",
        report.render()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backend_that_cannot_scrub_gets_no_baseline_and_no_reuse_under_recycle() {
    let fixture = Fixture::new(1);
    let rows: Vec<String> = (0..3)
        .map(|i| row(&format!("t{i}"), "img0", "true", 30))
        .collect();
    let backend = std::sync::Arc::new(Recording {
        without_scrub: true,
        ..Recording::new(fixture.backend_with_images(true))
    });
    let report = run_recycling_on(&fixture, backend.clone(), &rows, true).await;
    assert_eq!(report.tasks.ok, 3, "{}", report.render());
    // Each task in a sandbox of its own, none quarantined: nothing was
    // promised reuse, so nothing failed it.
    assert_eq!(report.claims, 3, "{}", report.render());
    assert_eq!(report.recycle.reused, 0, "{}", report.render());
    assert_eq!(report.recycle.quarantined, 0, "{}", report.render());
    // Only the tasks' own commands ran: no baseline of the reset check.
    let execs = backend.execs.lock().unwrap().clone();
    assert!(
        execs.iter().all(|argv| !argv.join(" ").contains("git ")),
        "{execs:?}"
    );
}
