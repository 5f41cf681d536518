//! The README's main command on the bundled quickstart.

use std::path::Path;

use sandfleet_test_support::chromium;
use sandfleet_test_support::quickstart::{expected_statuses, statuses};

use crate::{results, run_id, sandfleet, stderr, stdout};

#[test]
fn the_quickstart_runs_end_to_end_with_real_passes_and_failures() {
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().to_str().unwrap();
    let id = run_id("quickstart");
    let output = sandfleet(&[
        "run",
        "examples/quickstart.toml",
        "--out",
        out_dir,
        "--run-id",
        &id,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains(&format!("run {id}: 8 ok, 5 failed, 0 infra_error")),
        "{}",
        stdout(&output)
    );

    assert_eq!(statuses(out.path()), expected_statuses());
    let truncate = results(out.path())
        .into_iter()
        .find(|r| r["task_id"] == "textkit-truncate")
        .unwrap();
    assert_eq!(truncate["timed_out"], true);

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["run_id"], id.as_str());
    assert_eq!(report["tasks"]["ok"], 8);
    assert_eq!(report["tasks"]["failed"], 5);
    assert_eq!(report["tasks"]["infra_error"], 0);
    assert_eq!(report["claims"], 13);
    assert!(report["warm"]["total"].as_u64().unwrap() >= 3);
    assert!(report["warm"]["peak"].as_u64().unwrap() <= 4);
    for phase in [
        "preflight",
        "plan",
        "create_warmpool",
        "wait_pool_ready",
        "claim",
        "process",
        "grade",
        "release",
        "teardown",
    ] {
        let stats = &report["phases"][phase];
        for key in ["count", "total_s", "p50_s", "p95_s", "max_s"] {
            assert!(stats[key].is_number(), "{phase}.{key}: {stats}");
        }
        assert!(stats["count"].as_u64().unwrap() > 0, "{phase} never ran");
    }
    assert_eq!(report["phases"]["claim"]["count"], 13);
    assert!(out.path().join("logs/calc-clamp.log").exists());

    the_picture_shows_every_task(out.path(), &output);
}

/// `report.html` of the quickstart, opened in headless Chromium: a task
/// bar per task, a segment per recorded step, the failed and timed-out
/// tasks marked; and `sandfleet report` draws the same page again.
fn the_picture_shows_every_task(out: &Path, run: &std::process::Output) {
    let picture = out.join("report.html");
    assert!(
        stdout(run).contains(&format!("picture: {}", picture.display())),
        "{}",
        stdout(run)
    );
    let steps = std::fs::read_to_string(out.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter(|line| line.starts_with(r#"{"e":"segment""#))
        .count();
    let url = format!("file://{}", picture.display());
    let dom = chromium::dump_dom(&url);
    assert!(
        dom.contains(r#"data-rendered="true""#),
        "the page did not finish drawing"
    );
    let elements = classes(&dom);
    let with = |wanted: &[&str]| {
        elements
            .iter()
            .filter(|classes| wanted.iter().all(|w| classes.contains(w)))
            .count()
    };
    assert_eq!(with(&["task-bar"]), 13);
    assert_eq!(with(&["segment"]), steps);
    // Every task shows its claim, its run, its grade and its release.
    for kind in ["kind-claim", "kind-run", "kind-grade", "kind-release"] {
        assert_eq!(with(&["segment", kind]), 13, "{kind}");
    }
    assert_eq!(with(&["task-bar", "failed"]), 5);
    assert_eq!(with(&["task-bar", "ok"]), 8);
    assert_eq!(with(&["task-bar", "timed-out"]), 1);
    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&screenshots).unwrap();
    let shot = screenshots.join("quickstart-report.png");
    chromium::screenshot(&url, &shot, (1600, 1000));
    println!(
        "screenshot of the quickstart's report.html: {}",
        shot.display()
    );

    std::fs::remove_file(&picture).unwrap();
    let again = sandfleet(&["report", out.to_str().unwrap()]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stdout(&again).contains(&format!("13 tasks, {steps} steps")),
        "{}",
        stdout(&again)
    );
    assert!(!stdout(&again).contains("did not finish"));
    let redrawn = chromium::dump_dom(&url);
    assert_eq!(classes(&redrawn).len(), elements.len());
}

/// The class lists of every element of `dom` that has one.
fn classes(dom: &str) -> Vec<Vec<&str>> {
    dom.split(" class=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|list| list.split_whitespace().collect())
        .collect()
}
