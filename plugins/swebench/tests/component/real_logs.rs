//! Real harness transcripts from `logs/`, through the component. They come
//! from SWE-smith and R2E-Gym runs, whose own parsers made the reference
//! maps; where a swebench parser reads the same format, it must reproduce
//! them, and grading must reproduce SWE-smith's per-instance reports.

use crate::common;

use sandfleet_testkit::adapter::{GradeStatus, Graded, SolutionState};
use serde_json::{Value, json};

fn logs(path: &str) -> std::path::PathBuf {
    common::data_dir().join("logs").join(path)
}

/// The swebench parser that reads each SWE-smith log's format: `-v` lines with
/// a progress column (`id PASSED [ 10%]`) or bare status-last lines.
const SWESMITH_EVAL: [(&str, &str); 3] = [
    ("getmoto__moto.694ce1f4.pr_7331", "parse_log_seaborn"),
    (
        "pandas-dev__pandas.95280573.pr_53652",
        "parse_log_pytest_v2",
    ),
    ("pydantic__pydantic.acb0f10f.pr_8316", "parse_log_seaborn"),
];

#[test]
fn swesmith_eval_logs_grade_to_their_reports() {
    let adapter = common::adapter();
    let v5 = common::grader("swebench-5.0.2");
    let mut graded = Vec::new();
    for (instance_id, parser) in SWESMITH_EVAL {
        let dir = logs(&format!("swesmith-eval/{instance_id}"));
        let log = common::read(&dir.join("test_output.txt"));
        let expected_map = common::read_json(&dir.join("expected_status_map.json"));
        let expected_report = common::read_json(&dir.join("report.json"));
        let tests_status = &expected_report["tests_status"];
        let listed = |list: &str| {
            let outcome = &tests_status[list];
            let mut tests = outcome["success"].as_array().unwrap().clone();
            tests.extend(outcome["failure"].as_array().unwrap().iter().cloned());
            tests
        };
        let row = json!({
            "instance_id": instance_id,
            "repo": format!("swesmith/{instance_id}"),
            "version": "0.0",
            "FAIL_TO_PASS": listed("FAIL_TO_PASS"),
            "PASS_TO_PASS": listed("PASS_TO_PASS"),
            "log_parser": parser,
            "eval_type": "pass_and_fail",
            "image": "swesmith.x86_64",
        });
        let task = adapter.load_blocking(&row.to_string(), &v5).unwrap();
        let outcome = adapter
            .grade_blocking(&task, Some("patch"), &[common::output(&log)])
            .unwrap();

        common::assert_same_json(
            &common::status_map(&outcome.tests),
            &expected_map["status_map"],
            instance_id,
        );
        let report: Value = serde_json::from_str(&outcome.report).unwrap();
        common::assert_same_json(
            &report[instance_id]["tests_status"],
            tests_status,
            instance_id,
        );
        assert_eq!(
            report[instance_id]["resolved"], expected_report["resolved"],
            "{instance_id}"
        );
        assert_eq!(outcome.status, GradeStatus::Passed, "{instance_id}");
        assert_eq!(outcome.reward, Some(1.0), "{instance_id}");
        graded.push(Graded {
            task_id: instance_id.into(),
            status: outcome.status,
            solution: SolutionState::Present,
            infra: outcome.infra,
        });
    }
    let run_report = common::read_json(&logs("swesmith-eval/run_report.json"));
    let summary: Value =
        serde_json::from_str(&adapter.summarize_blocking(&graded, &v5).unwrap()).unwrap();
    assert_eq!(summary["resolved_ids"], run_report["ids_resolved"]);
    assert_eq!(summary["resolved_instances"], json!(3));
}

#[test]
fn swesmith_validation_logs_parse_to_their_maps() {
    let adapter = common::adapter();
    let expected = common::read_json(&logs("swesmith-validation/expected_status_maps.json"));
    for file in ["test_output.txt", "test_output_pre_gold.txt"] {
        let log = common::read(&logs(&format!("swesmith-validation/{file}")));
        for grader in common::GRADERS {
            let tests = adapter
                .parse_log_blocking("parse_log_pytest_v2", &log, &common::grader(grader))
                .unwrap();
            common::assert_same_json(
                &common::status_map(&tests),
                &expected[file],
                &format!("{file} ({grader})"),
            );
        }
    }
}

#[test]
fn r2e_sympy_log_parses_like_swebench_5() {
    let adapter = common::adapter();
    let log = common::read(&logs("r2e-gym-sympy-example/test_output.txt"));
    let expected = common::read_json(&logs("r2e-gym-sympy-example/expected_status_map.json"));
    let tests = adapter
        .parse_log_blocking("parse_log_pytest", &log, &common::grader("swebench-5.0.2"))
        .unwrap();
    common::assert_same_json(
        &common::status_map(&tests),
        &expected["swebench_5.0.2_parse_log_pytest_for_contrast"],
        "r2e",
    );
}
