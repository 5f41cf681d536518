//! Grading: the evaluate commands' outputs into R2E-Gym's reward.

use serde::Serialize;

use crate::log_parser::{self, StatusMap};
use crate::reward::{self, Comparison, R2eException, Verdict};
use crate::row::TaskData;
use crate::script::{self, Step};
use crate::settings::Grading;
use crate::test_run::TestRun;
use crate::{CommandOutput, Failure, GradeResult, GradeStatus, Task};

/// Grades the outputs of the evaluate commands `prepare` built for the same
/// `task` and `solution`.
pub(crate) fn grade(
    task: &Task,
    solution: Option<&str>,
    outputs: &[CommandOutput],
) -> Result<GradeResult, Failure> {
    let data = TaskData::of(task)?;
    // One output is a saved test log (`sandfleet grade`): the test run alone.
    let steps = if outputs.len() == 1 {
        vec![Step::RunTests]
    } else {
        script::evaluate_steps(data.grading, solution)
    };
    if outputs.len() != steps.len() {
        let names = steps.iter().map(|step| step.name()).collect::<Vec<_>>();
        return Err(Failure::invalid_input(format!(
            "expected {} outputs, one per evaluate command ({}), got {}",
            steps.len(),
            names.join(", "),
            outputs.len()
        )));
    }
    let report = Report {
        instance_id: &task.id,
        repo_name: &data.repo_name,
        grading: data.grading,
        solution_applied: steps.contains(&Step::ApplySolution),
        error: None,
        run_tests: None,
        parse_logs: None,
        comparison: None,
        r2e_exception: None,
        reward: None,
    };
    for (step, output) in steps.iter().zip(outputs) {
        if let Some(meaning) = step.failure_meaning()
            && output.exit_code != 0
        {
            return Ok(error_result(
                report,
                format!("{meaning}: {}", last_line(output)),
            ));
        }
    }
    let run_output = steps
        .iter()
        .position(|step| *step == Step::RunTests)
        .map(|index| &outputs[index])
        .ok_or_else(|| Failure::internal("the evaluate steps have no test run"))?;
    let run = TestRun::from_output(run_output);
    if run.not_started {
        let detail = format!("the tests did not run: {}", run.output);
        return Ok(error_result(
            Report {
                run_tests: Some(run),
                ..report
            },
            detail,
        ));
    }

    // `parse_logs` picks the parser by repository before it reads the log.
    if let Err(raised) = reward::check_parser(&data.repo_name) {
        return Ok(raised_result(
            Report {
                run_tests: Some(run),
                ..report
            },
            raised,
            &StatusMap::default(),
        ));
    }
    let parsed = log_parser::parse_log_pytest(&run.output);
    let expected = match reward::decode_expected(&data.expected_output_json) {
        Ok(expected) => expected,
        Err(raised) => {
            let report = Report {
                parse_logs: Some(&parsed),
                run_tests: Some(run),
                ..report
            };
            return Ok(raised_result(report, raised, &parsed));
        }
    };
    let comparison = reward::compare(&parsed, &expected);
    if let Some(raised) = comparison.r2e_exception() {
        let report = Report {
            parse_logs: Some(&parsed),
            run_tests: Some(run),
            comparison: Some(comparison),
            ..report
        };
        return Ok(raised_result(report, raised, &parsed));
    }
    let reward = comparison.reward();
    let detail = describe(&comparison, &run);
    let report = Report {
        parse_logs: Some(&parsed),
        run_tests: Some(run),
        comparison: Some(comparison),
        reward,
        ..report
    };
    Ok(GradeResult {
        status: if reward == Some(1.0) {
            GradeStatus::Passed
        } else {
            GradeStatus::Failed
        },
        reward,
        tests: log_parser::test_table(&parsed),
        report: report.to_json(),
        detail,
        infra: None,
    })
}

/// A task that could not be evaluated: no tests, reward 0.
fn error_result(report: Report<'_>, detail: String) -> GradeResult {
    let report = Report {
        error: Some(detail.clone()),
        reward: Some(0.0),
        ..report
    };
    GradeResult {
        status: GradeStatus::Error,
        reward: Some(0.0),
        tests: log_parser::test_table(&StatusMap::default()),
        report: report.to_json(),
        detail,
        infra: None,
    }
}

/// Where R2E-Gym's reward code raises: an error with no reward, the tests
/// parsed up to that point, and the exception in the report.
fn raised_result(report: Report<'_>, raised: R2eException, parsed: &StatusMap) -> GradeResult {
    let detail = raised.describe();
    let report = Report {
        r2e_exception: Some(raised),
        reward: None,
        ..report
    };
    GradeResult {
        status: GradeStatus::Error,
        reward: None,
        tests: log_parser::test_table(parsed),
        report: report.to_json(),
        detail,
        infra: None,
    }
}

/// The last non-empty line of what a command printed, for a one-line detail.
fn last_line(output: &CommandOutput) -> String {
    [&output.stderr, &output.stdout]
        .into_iter()
        .find_map(|text| text.lines().rev().find(|line| !line.trim().is_empty()))
        .map_or_else(
            || format!("exit code {}", output.exit_code),
            |line| line.trim().to_owned(),
        )
}

fn describe(comparison: &Comparison<'_>, run: &TestRun) -> String {
    let timed_out = if run.timed_out {
        " (the tests hit the 300 s limit)"
    } else {
        ""
    };
    let detail = match &comparison.verdict {
        Verdict::Match => format!(
            "all {} tests have their expected status",
            comparison.expected.len()
        ),
        Verdict::CountMismatch => format!(
            "{} tests parsed, {} expected",
            comparison.parsed.len(),
            comparison.expected.len()
        ),
        Verdict::StatusMismatch {
            test,
            parsed,
            expected,
        } => format!("`{test}` is {parsed}, expected {expected}"),
        Verdict::UnexpectedTest { test } => {
            format!("`{test}` is not in expected_output_json")
        }
    };
    format!("{detail}{timed_out}")
}

/// The report: what R2E-Gym computed along the way, as JSON.
#[derive(Serialize)]
struct Report<'a> {
    instance_id: &'a str,
    repo_name: &'a str,
    grading: Grading,
    solution_applied: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_tests: Option<TestRun>,
    /// `parse_logs`: the parser's map, in log order.
    #[serde(skip_serializing_if = "Option::is_none")]
    parse_logs: Option<&'a StatusMap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    comparison: Option<Comparison<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    r2e_exception: Option<R2eException>,
    /// None (and absent) where R2E-Gym raises.
    #[serde(skip_serializing_if = "Option::is_none")]
    reward: Option<f64>,
}

impl Report<'_> {
    fn to_json(&self) -> String {
        // Serializing plain data to a string cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::TestStatus;

    const PASSING_LOG: &str = "=== short test summary info ===\n\
        PASSED r2e_tests/test_1.py::test_a\n\
        FAILED r2e_tests/test_1.py::test_b - assert 0\n\
        === 1 failed, 1 passed in 0.1s ===";

    fn task(grading: &str, expected: Value) -> Task {
        let row = json!({
            "repo_name": "numpy",
            "docker_image": "namanjain12/numpy_final:abc",
            "commit_hash": "abc",
            "parsed_commit_content": "{}",
            "expected_output_json": expected.to_string(),
        });
        let settings = [crate::Setting {
            key: "grading".into(),
            value: grading.into(),
        }];
        crate::row::load(&row.to_string(), &settings).unwrap()
    }

    fn output(exit_code: i32, stdout: &str) -> CommandOutput {
        CommandOutput {
            exit_code,
            stdout: stdout.into(),
            stderr: String::new(),
            timed_out: false,
            duration_ms: 5,
        }
    }

    fn report(result: &GradeResult) -> Value {
        serde_json::from_str(&result.report).unwrap()
    }

    #[test]
    fn an_exact_match_passes_with_reward_one() {
        let task = task("in-place", json!({"test_a": "PASSED", "test_b": "FAILED"}));
        let outputs = [output(0, ""), output(1, PASSING_LOG), output(0, "")];
        let result = grade(&task, None, &outputs).unwrap();
        assert_eq!(result.status, GradeStatus::Passed);
        assert_eq!(result.reward, Some(1.0));
        assert_eq!(
            log_parser::rows(&result.tests),
            [
                ("test_a", TestStatus::Passed),
                ("test_b", TestStatus::Failed)
            ]
        );
        let report = report(&result);
        assert_eq!(report["reward"], 1.0);
        assert_eq!(report["run_tests"]["error_code"], "Error: Exit code 1");
        assert_eq!(
            report["parse_logs"],
            json!({"test_a": "PASSED", "test_b": "FAILED"})
        );
        assert_eq!(report["comparison"]["verdict"], "match");
    }

    #[test]
    fn the_report_lists_tests_in_log_order() {
        let log = "short test summary info\nPASSED t.py::test_z\nPASSED t.py::test_a\n";
        let task = task("in-place", json!({"test_a": "PASSED", "test_z": "PASSED"}));
        let result = grade(&task, None, &[output(0, ""), output(0, log), output(0, "")]).unwrap();
        assert!(
            result
                .report
                .contains(r#""parse_logs":{"test_z":"PASSED","test_a":"PASSED"}"#),
            "{}",
            result.report
        );
        assert_eq!(log_parser::rows(&result.tests)[0].0, "test_z");
    }

    #[test]
    fn a_differing_status_fails_and_says_which() {
        let task = task("in-place", json!({"test_a": "PASSED", "test_b": "PASSED"}));
        let outputs = [output(0, ""), output(1, PASSING_LOG), output(0, "")];
        let result = grade(&task, None, &outputs).unwrap();
        assert_eq!(result.status, GradeStatus::Failed);
        assert_eq!(result.reward, Some(0.0));
        assert_eq!(result.detail, "`test_b` is FAILED, expected PASSED");
    }

    #[test]
    fn a_patch_that_does_not_apply_is_an_error() {
        let task = task("fresh", json!({"test_a": "PASSED"}));
        let mut rejected = output(1, "");
        rejected.stderr = "error: patch failed: x.py:3\nerror: x.py: patch does not apply\n".into();
        let outputs = [
            output(0, ""),
            rejected,
            output(0, ""),
            output(0, PASSING_LOG),
        ];
        let result = grade(&task, Some("diff --git a/x.py b/x.py\n"), &outputs).unwrap();
        assert_eq!(result.status, GradeStatus::Error);
        assert_eq!(result.reward, Some(0.0));
        assert_eq!(
            result.detail,
            "the solution patch did not apply: error: x.py: patch does not apply"
        );
        assert!(result.tests.name_ends.is_empty());
    }

    #[test]
    fn a_timeout_is_graded_on_r2e_gyms_timeout_message() {
        let task = task("in-place", json!({"test_a": "PASSED"}));
        let mut killed = output(-1, PASSING_LOG);
        killed.timed_out = true;
        let result = grade(&task, None, &[output(0, ""), killed, output(0, "")]).unwrap();
        assert_eq!(result.status, GradeStatus::Failed);
        assert_eq!(
            result.detail,
            "0 tests parsed, 1 expected (the tests hit the 300 s limit)"
        );
        assert_eq!(report(&result)["run_tests"]["error_code"], "-1");
    }

    #[test]
    fn missing_hidden_tests_are_an_error() {
        let task = task("in-place", json!({"test_a": "PASSED"}));
        let mut missing = output(1, "");
        missing.stderr = "the hidden tests are missing: /root/r2e_tests\n".into();
        let result = grade(&task, None, &[missing, output(0, ""), output(0, "")]).unwrap();
        assert_eq!(result.status, GradeStatus::Error);
        assert!(
            result
                .detail
                .starts_with("the hidden tests could not be put back")
        );
    }

    #[test]
    fn a_saved_test_log_alone_is_graded_as_the_test_run() {
        let task = task("in-place", json!({"test_a": "PASSED", "test_b": "FAILED"}));
        let result = grade(&task, None, &[output(1, PASSING_LOG)]).unwrap();
        assert_eq!(
            (result.status, result.reward),
            (GradeStatus::Passed, Some(1.0))
        );
        assert_eq!(report(&result)["solution_applied"], false);
    }

    #[test]
    fn the_number_of_outputs_must_match_the_script() {
        let task = task("in-place", json!({}));
        let failure = grade(&task, None, &[output(0, ""), output(0, "")]).unwrap_err();
        assert!(
            failure.message.contains("expected 3 outputs"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_key_error_in_r2e_gym_is_an_error_without_a_reward() {
        let task = task("in-place", json!({"test_a": "PASSED", "test_c": "FAILED"}));
        let result = grade(
            &task,
            None,
            &[output(0, ""), output(1, PASSING_LOG), output(0, "")],
        )
        .unwrap();
        assert_eq!((result.status, result.reward), (GradeStatus::Error, None));
        let report = report(&result);
        assert_eq!(report["r2e_exception"]["type"], "KeyError");
        assert_eq!(report["r2e_exception"]["message"], "'test_b'");
        assert!(report.get("reward").is_none(), "{report}");
        assert!(
            result
                .detail
                .starts_with("R2E-Gym raises KeyError: 'test_b'"),
            "{}",
            result.detail
        );
        assert_eq!(
            log_parser::rows(&result.tests).len(),
            2,
            "the tests parsed before it raised"
        );
    }
}
