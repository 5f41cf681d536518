//! Every golden grading case, for both harness versions, through the
//! component's `load` and `grade`: the task's test lists and eval type, the
//! harness's `report.json`, the status map, the tests report, the resolution,
//! and the grade the host sees.

use crate::common;

use sandfleet_testkit::adapter::{GradeResult, GradeStatus, Task, TaskAdapter};
use serde_json::Value;

#[test]
fn every_grading_case_matches_both_versions() {
    let adapter = common::adapter();
    let cases = common::sorted_entries(&common::golden("grading"));
    assert_eq!(cases.len(), 40);
    for path in cases {
        let case = common::read_json(&path);
        for grader in common::GRADERS {
            let context = format!("{} ({grader})", common::file_name(&path));
            check_case(
                &adapter,
                &case["input"],
                &case["expected"][grader],
                grader,
                &context,
            );
        }
    }
}

fn check_case(adapter: &TaskAdapter, input: &Value, expected: &Value, grader: &str, context: &str) {
    let task = adapter
        .load_blocking(&input["instance"].to_string(), &common::grader(grader))
        .unwrap_or_else(|error| panic!("{context}: load: {error}"));
    // What `load` fixed for grading, as the task carries it.
    let data: Value = serde_json::from_str(&task.data).expect("task data is JSON");
    assert_eq!(
        data["FAIL_TO_PASS"], expected["test_spec"]["FAIL_TO_PASS"],
        "{context}: FAIL_TO_PASS"
    );
    assert_eq!(
        data["PASS_TO_PASS"], expected["test_spec"]["PASS_TO_PASS"],
        "{context}: PASS_TO_PASS"
    );
    assert_eq!(
        data["eval_type"], expected["eval_type"],
        "{context}: eval type"
    );

    let log = input["log"].as_str().expect("a log");
    let patch = input["prediction"]["model_patch"].as_str();
    let outcome = grade(adapter, &task, patch, log, context);

    // The harness-level result: report.json (or none, when grading raised).
    let expected_logs_eval = &expected["get_logs_eval"];
    if expected_logs_eval.get("exception").is_some() {
        assert_eq!(
            outcome.report, "null",
            "{context}: no report when the parser raises"
        );
        assert_eq!(outcome.status, GradeStatus::Error, "{context}");
        assert_eq!(outcome.reward, Some(0.0), "{context}");
        assert!(
            outcome
                .detail
                .contains(expected_logs_eval["exception"]["message"].as_str().unwrap()),
            "{context}: {}",
            outcome.detail
        );
        return;
    }
    let report: Value =
        serde_json::from_str(&outcome.report).unwrap_or_else(|error| panic!("{context}: {error}"));
    common::assert_same_json(&report, &expected["report"], &format!("{context}: report"));
    let resolved = expected["resolved"].as_bool().unwrap();
    let found = expected_logs_eval["found"].as_bool().unwrap();
    let expected_status = match (found, resolved) {
        (_, true) => GradeStatus::Passed,
        (true, false) => GradeStatus::Failed,
        (false, false) => GradeStatus::Error,
    };
    assert_eq!(outcome.status, expected_status, "{context}: status");
    assert_eq!(
        outcome.reward,
        Some(if resolved { 1.0 } else { 0.0 }),
        "{context}: reward"
    );
    // get_logs_eval's status map (empty when not found), in log order.
    common::assert_same_json(
        &common::status_map(&outcome.tests),
        &expected_logs_eval["status_map"],
        &format!("{context}: tests in log order"),
    );

    // get_eval_tests_report and get_resolution_status, which the harness
    // computes on get_logs_eval's status map whether or not it was found. A
    // found log's report carries the tests report when there is a patch;
    // otherwise it is the one of a run on which no test was found.
    let (tests_report, detail) = if found {
        let graded = match patch {
            Some(_) => outcome,
            None => grade(adapter, &task, Some(""), log, context),
        };
        let report: Value = serde_json::from_str(&graded.report).unwrap();
        (report[&task.id]["tests_status"].clone(), graded.detail)
    } else {
        let empty = grade(adapter, &task, Some(""), &empty_run(grader), context);
        assert!(
            empty.tests.is_empty(),
            "{context}: {:?}",
            empty.tests.iter().collect::<Vec<_>>()
        );
        assert_ne!(
            empty.status,
            GradeStatus::Error,
            "{context}: {}",
            empty.detail
        );
        let report: Value = serde_json::from_str(&empty.report).unwrap();
        (report[&task.id]["tests_status"].clone(), empty.detail)
    };
    common::assert_same_json(
        &tests_report,
        &expected["get_eval_tests_report"],
        &format!("{context}: tests report"),
    );
    let (resolution, _) = detail.split_once(':').expect("`RESOLUTION: counts`");
    assert_eq!(
        resolution, expected["get_resolution_status"],
        "{context}: resolution"
    );
}

fn grade(
    adapter: &TaskAdapter,
    task: &Task,
    patch: Option<&str>,
    log: &str,
    context: &str,
) -> GradeResult {
    adapter
        .grade_blocking(task, patch, &[common::output(log)])
        .unwrap_or_else(|error| panic!("{context}: grade: {error}"))
}

/// A log in which the tests ran and reported nothing: both markers and, for
/// 5.x (which otherwise sees no run), a runner's summary line.
fn empty_run(grader: &str) -> String {
    let summary = if grader == "swebench-5.0.2" {
        "# tests 1\n"
    } else {
        ""
    };
    format!("+ : '>>>>> Start Test Output'\n+ : '>>>>> End Test Output'\n{summary}")
}
