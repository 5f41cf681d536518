//! `sandfleet canary`: one task twice in one recycled sandbox, reset by the
//! reset check or (the local backend's default) by restoring a snapshot.

use serde_json::json;

use crate::{Scratch, sandfleet, stderr, stdout};

fn canary(task: &str, reset_by_snapshot: bool) -> (bool, serde_json::Value) {
    let scratch = Scratch::new();
    let rows = vec![
        json!({"id": "stable", "image": "a", "test": "echo hello; git status --short"}),
        // A file of its own inside .git/ is neither worktree, ref, config
        // nor index, so git-restore leaves it and the scrub keeps the
        // workdir: the second run sees the first.
        json!({"id": "leaky", "image": "a", "test": "echo run >> .git/runs; cat .git/runs"}),
    ];
    let fleet = scratch.fleet(
        &rows,
        &format!("reset_by_snapshot = {reset_by_snapshot}\n\n[plugins]\nreset = \"git-restore\"\n"),
    );
    let output = sandfleet(&[
        "canary",
        fleet.to_str().unwrap(),
        "--task",
        task,
        "--out",
        scratch.path("out").to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|e| panic!("{e}: {}", stderr(&output)));
    assert_eq!(crate::sandbox_dirs(&scratch.state_dir(), "any"), 0);
    (output.status.success(), report)
}

#[test]
fn a_task_that_leaves_nothing_behind_runs_identically_twice() {
    for reset_by_snapshot in [false, true] {
        let (success, report) = canary("stable", reset_by_snapshot);
        assert!(success, "{report}");
        assert_eq!(report["identical"], true);
        assert_eq!(report["first_sandbox"], report["second_sandbox"]);
    }
}

#[test]
fn state_the_reset_misses_shows_up_as_a_difference() {
    let (success, report) = canary("leaky", false);
    assert!(!success);
    assert_eq!(report["identical"], false);
    assert_eq!(
        report["differences"][0],
        "command 0: stdout differs from byte 4 (line 2; 4 then 8 bytes)"
    );
}

#[test]
fn a_restore_to_the_fresh_snapshot_leaves_nothing_even_where_the_reset_check_would() {
    let (success, report) = canary("leaky", true);
    assert!(success, "{report}");
    assert_eq!(report["identical"], true);
    assert_eq!(report["first_sandbox"], report["second_sandbox"]);
}
