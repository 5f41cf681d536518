//! The README's main command on the bundled quickstart.

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
}
