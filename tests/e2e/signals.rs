//! Stopping a run: SIGTERM tears everything down and a rerun resumes;
//! after SIGKILL, `sandfleet reap` removes what the run left.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{
    Scratch, eventually, processes_running, results, run_id, sandbox_dirs, sandfleet, stderr,
};

const PATIENCE: Duration = Duration::from_secs(60);

/// Two quick tasks and two that sleep `slow` seconds (a distinctive number,
/// so the test can find exactly those processes).
fn rows(slow: &str) -> Vec<serde_json::Value> {
    vec![
        json!({"id": "quick-a", "image": "a", "test": "true"}),
        json!({"id": "quick-b", "image": "b", "test": "true"}),
        json!({"id": "slow-a", "image": "a", "test": format!("sleep {slow}")}),
        json!({"id": "slow-b", "image": "b", "test": format!("sleep {slow}")}),
    ]
}

fn start(fleet: &Path, out: &Path, id: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args([
            "run",
            fleet.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--run-id",
            id,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

pub(crate) fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

pub(crate) fn wait(child: &mut Child) -> std::process::ExitStatus {
    let until = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < until, "sandfleet did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_tears_everything_down_and_a_rerun_finishes_the_rest() {
    let scratch = Scratch::new();
    let slow = "3.5871";
    let fleet = scratch.fleet(&rows(slow), "");
    let out = scratch.path("out");
    let id = run_id("sigterm");
    let mut child = start(&fleet, &out, &id);
    eventually("both slow tasks to run", || {
        processes_running(&format!("sleep {slow}")).len() == 2
    });
    eventually("the quick tasks to finish", || results(&out).len() == 2);

    signal(&child, "-TERM");
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(130), "{status}");
    assert_eq!(sandbox_dirs(&scratch.state_dir(), &id), 0);
    assert_eq!(
        processes_running(&format!("sleep {slow}")),
        Vec::<String>::new()
    );
    assert_eq!(
        processes_running(&format!("sandfleet-sandbox:{id}")),
        Vec::<String>::new()
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["tasks"]["not_run"], 2);

    // The rerun runs only the two interrupted tasks, and loses none.
    let rerun = sandfleet(&[
        "run",
        fleet.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let mut ids: Vec<String> = results(&out)
        .iter()
        .map(|r| r["task_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, ["quick-a", "quick-b", "slow-a", "slow-b"]);
    assert!(results(&out).iter().all(|r| r["status"] == "ok"));
}

#[test]
fn after_sigkill_reap_removes_everything_the_run_left() {
    let scratch = Scratch::new();
    let slow = "120.5871";
    let fleet = scratch.fleet(&rows(slow), "");
    let out = scratch.path("out");
    let id = run_id("sigkill");
    let mut child = start(&fleet, &out, &id);
    eventually("both slow tasks to run", || {
        processes_running(&format!("sleep {slow}")).len() == 2
    });

    signal(&child, "-KILL");
    wait(&mut child);
    // Killed without teardown: the sandboxes are still there.
    assert!(sandbox_dirs(&scratch.state_dir(), &id) > 0);
    assert_eq!(processes_running(&format!("sleep {slow}")).len(), 2);

    // The picture of the crashed run, drawn from what it recorded: the
    // tasks it was running show as unfinished.
    let drawn = sandfleet(&["report", out.to_str().unwrap()]);
    assert!(drawn.status.success(), "{}", stderr(&drawn));
    assert!(
        String::from_utf8_lossy(&drawn.stdout).contains("the run did not finish"),
        "{}",
        String::from_utf8_lossy(&drawn.stdout)
    );
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let data = page
        .split(r#"<script id="report-data" type="application/json">"#)
        .nth(1)
        .and_then(|rest| rest.split("</script>").next())
        .unwrap();
    let picture: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(picture["finished"], false);
    for slow in ["slow-a", "slow-b"] {
        let task = picture["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == slow)
            .unwrap_or_else(|| panic!("{slow} is not drawn: {}", picture["tasks"]));
        assert_eq!(task["status"], "unfinished", "{task}");
    }

    let reap = sandfleet(&["reap", "--run-id", &id, fleet.to_str().unwrap()]);
    assert!(reap.status.success(), "{}", stderr(&reap));
    assert!(String::from_utf8_lossy(&reap.stdout).contains(&format!("run {id}: removed")));
    eventually("the sandboxes' processes to die", || {
        processes_running(&format!("sleep {slow}")).is_empty()
    });
    assert_eq!(sandbox_dirs(&scratch.state_dir(), &id), 0);
    assert_eq!(
        processes_running(&format!("sandfleet-sandbox:{id}")),
        Vec::<String>::new()
    );

    // Reaping again finds nothing.
    let again = sandfleet(&["reap", "--run-id", &id, fleet.to_str().unwrap()]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(String::from_utf8_lossy(&again.stdout).contains("removed 0 sandbox(es)"));
}
