//! The component against reference outputs of R2E-Gym's own code
//! (`shared/data/swebench/golden/r2e`, see its README) and the real sympy log
//! embedded in R2E-Gym's `execution_log_parser.py`, called through the test
//! kit.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use sandfleet_testkit::adapter::{GradeStatus, Task, TaskAdapter, TestStatus, TestTable};
use sandfleet_testkit::{TestPlugin, fixtures};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

const R2E_GYM: &str = "r2e-gym@69bc953542b428d1e4c8a59ce3ea1a32e50ef0f0";

/// A status map in file order.
type Statuses = IndexMap<String, String>;

#[derive(Deserialize)]
struct Case {
    case: String,
    input: Input,
    expected: HashMap<String, Expected>,
}

#[derive(Deserialize)]
struct Input {
    repo_name: String,
    output: String,
    exit_code: i32,
    expected_output_json: String,
}

#[derive(Deserialize)]
struct Expected {
    run_tests: RunTests,
    parse_logs: Statuses,
    parse_log_pytest_raw: Statuses,
    /// `None` where R2E-Gym raised instead.
    reward: Option<f64>,
    reward_exception: Option<Exception>,
    exec_command: Vec<String>,
}

#[derive(Deserialize)]
struct RunTests {
    output: String,
    error_code: String,
}

#[derive(Deserialize, Debug, PartialEq)]
struct Exception {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

/// The parts of the adapter's report the reference data pins.
#[derive(Deserialize)]
struct Report {
    run_tests: ReportRun,
    /// The parser's map as grading read it, statuses as R2E-Gym spells them.
    parse_logs: Statuses,
    r2e_exception: Option<Exception>,
    /// Absent where R2E-Gym raised.
    reward: Option<f64>,
}

#[derive(Deserialize)]
struct ReportRun {
    error_code: String,
}

#[derive(Deserialize)]
struct SympyExample {
    r2e_parse_log_pytest: Statuses,
}

fn adapter() -> TaskAdapter {
    TestPlugin::load(sandfleet_guests::R2EGYM)
        .expect("the r2egym component loads")
        .adapter()
        .expect("r2egym is a task adapter")
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/swebench")
}

fn read<T: DeserializeOwned>(path: &Path) -> T {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn expected_pairs(map: &Statuses) -> Vec<(String, String)> {
    map.iter()
        .map(|(name, status)| (name.clone(), status.clone()))
        .collect()
}

/// Test results as ordered `(name, status)` pairs, so order is compared too;
/// each status is R2E-Gym's word, counted as what it says.
fn pairs(tests: &TestTable) -> Vec<(String, String)> {
    tests
        .iter()
        .map(|test| {
            let kind = match test.value {
                "PASSED" => TestStatus::Passed,
                "FAILED" => TestStatus::Failed,
                "ERROR" => TestStatus::Error,
                other => panic!("R2E-Gym's parser never reports {other}"),
            };
            assert_eq!(test.status, kind, "{test:?}");
            (test.name.to_owned(), test.value.to_owned())
        })
        .collect()
}

fn task_for(adapter: &TaskAdapter, case: &Case) -> Task {
    let row = json!({
        "repo_name": case.input.repo_name,
        "docker_image": format!("namanjain12/{}_final:{}", case.input.repo_name, case.case),
        "commit_hash": case.case,
        "parsed_commit_content": "{\"file_diffs\": []}",
        "expected_output_json": case.input.expected_output_json,
    });
    adapter.load_blocking(&row.to_string(), &[]).unwrap()
}

#[test]
fn every_r2e_reference_case_matches_r2e_gym() {
    let adapter = adapter();
    let mut paths: Vec<_> = fs::read_dir(data_dir().join("golden/r2e"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 8, "the reference set has 8 R2E-Gym cases");

    for path in paths {
        let case: Case = read(&path);
        let name = case.case.as_str();
        let expected = &case.expected[R2E_GYM];
        let task = task_for(&adapter, &case);

        // The command R2E-Gym executes, byte for byte.
        let script = adapter.prepare_blocking(&task, None).unwrap();
        let run_command = script
            .evaluate
            .iter()
            .find(|command| command.argv[0] == "/bin/sh")
            .unwrap();
        assert_eq!(run_command.argv, expected.exec_command, "{name}: command");

        // Grading in place without a patch: expose the tests, run them, hide
        // them again.
        let raw = fixtures::output(case.input.exit_code, &case.input.output);
        let outputs = [fixtures::output(0, ""), raw, fixtures::output(0, "")];
        assert_eq!(outputs.len(), script.evaluate.len(), "{name}");
        let result = adapter.grade_blocking(&task, None, &outputs).unwrap();
        let report: Report = serde_json::from_str(&result.report)
            .unwrap_or_else(|error| panic!("{name}: {error}: {}", result.report));

        // run_tests: the error code, and the output the parser read. The
        // report does not carry the output itself; grading parsed exactly
        // what parsing R2E-Gym's run_tests output gives.
        assert_eq!(
            report.run_tests.error_code, expected.run_tests.error_code,
            "{name}: error code"
        );
        let from_run_output = adapter
            .parse_log_blocking("parse_log_pytest", &expected.run_tests.output, &[])
            .unwrap();
        assert_eq!(
            expected_pairs(&report.parse_logs),
            pairs(&from_run_output),
            "{name}: grading read R2E-Gym's run_tests output"
        );

        // parse_logs, in order, and the parser on the raw output.
        assert_eq!(
            expected_pairs(&report.parse_logs),
            expected_pairs(&expected.parse_logs),
            "{name}: parse_logs"
        );
        let from_raw = adapter
            .parse_log_blocking("parse_log_pytest", &case.input.output, &[])
            .unwrap();
        assert_eq!(
            pairs(&from_raw),
            expected_pairs(&expected.parse_log_pytest_raw),
            "{name}: the parser on the raw output"
        );

        // The reward; where R2E-Gym raised, no reward, an error, and the
        // same exception.
        let status = match (expected.reward, &expected.reward_exception) {
            (Some(reward), None) => {
                assert_eq!(result.reward, Some(reward), "{name}: reward");
                assert_eq!(report.r2e_exception, None, "{name}: no exception");
                if reward == 1.0 {
                    GradeStatus::Passed
                } else {
                    GradeStatus::Failed
                }
            }
            (None, Some(exception)) => {
                assert_eq!(
                    result.reward, None,
                    "{name}: no reward where R2E-Gym raised"
                );
                assert_eq!(report.r2e_exception.as_ref(), Some(exception), "{name}");
                assert!(
                    result.detail.starts_with(&format!(
                        "R2E-Gym raises {}: {}",
                        exception.kind, exception.message
                    )),
                    "{name}: {}",
                    result.detail
                );
                GradeStatus::Error
            }
            _ => panic!("{name}: a case has either a reward or an exception"),
        };
        assert_eq!(report.reward, result.reward, "{name}: the report's reward");
        assert_eq!(result.status, status, "{name}: status");
        assert_eq!(
            pairs(&result.tests),
            expected_pairs(&expected.parse_logs),
            "{name}: tests"
        );
    }
}

#[test]
fn the_real_sympy_log_parses_as_r2e_gym_parses_it() {
    let adapter = adapter();
    let dir = data_dir().join("logs/r2e-gym-sympy-example");
    let log = fs::read_to_string(dir.join("test_output.txt")).unwrap();
    let example: SympyExample = read(&dir.join("expected_status_map.json"));
    for parser in ["parse_log_pytest", "r2e_parse_log_pytest"] {
        let parsed = adapter.parse_log_blocking(parser, &log, &[]).unwrap();
        assert_eq!(
            pairs(&parsed),
            expected_pairs(&example.r2e_parse_log_pytest),
            "{parser}"
        );
    }
}
