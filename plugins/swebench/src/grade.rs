//! `grade`: a task's evaluate output into a grade, as the harness's
//! `run_instance` and `get_eval_report` would judge it.

use std::borrow::Cow;

use crate::error::InvalidInput;
use crate::grader::GraderVersion;
use crate::grading::{
    LogsEval, NotFound, Resolution, TestsReport, eval_tests_report, get_logs_eval,
};
use crate::infra::{self, InfraFailure};
use crate::pystr;
use crate::report::{Evaluation, instance_report};
use crate::status_map::StatusMap;
use crate::task::{Task, TaskData};

/// What one evaluate command produced (the fields grading reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CommandOutput {
    /// Output; with `merge-stderr` it holds stderr too, interleaved.
    pub(crate) stdout: String,
    /// Output the host kept apart; appended after `stdout`.
    pub(crate) stderr: String,
    /// Whether the host killed the command at its timeout.
    pub(crate) timed_out: bool,
}

/// The overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GradeStatus {
    /// Resolved.
    Passed,
    /// Evaluated and not resolved.
    Failed,
    /// Not evaluated: no patch, the patch did not apply, the log is unusable,
    /// the tests timed out, or the parser raised.
    Error,
}

/// The result of grading one task.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GradeOutcome {
    /// The verdict.
    pub(crate) status: GradeStatus,
    /// 1.0 when resolved, else 0.0.
    pub(crate) reward: f64,
    /// The status map grading used, in log order (empty when the log was unusable).
    pub(crate) tests: StatusMap,
    /// The harness's `report.json` text, or `null` where the harness writes none.
    pub(crate) report: String,
    /// One line on why.
    pub(crate) detail: String,
    /// 5.x: how `make_run_report` classifies this instance's failure, when
    /// it does (never for a resolved instance or an empty patch).
    pub(crate) infra: Option<InfraFailure>,
}

/// The notice the harness appends to a test log that timed out.
fn ends_with_timeout_notice(log: &str) -> bool {
    crate::lazy_regex!(r"\n\nTimeout error: \d+ seconds exceeded\.\z").is_match(log)
}

/// `grade`: judges the output of the script `prepare` built. `outputs` holds
/// one entry, the evaluate command's (the eval script's log, or the patch
/// failure notice when no apply command worked).
///
/// # Errors
///
/// When the task is not this adapter's or `outputs` does not hold exactly one output.
pub(crate) fn grade(
    task: &Task,
    solution: Option<&str>,
    outputs: &[CommandOutput],
) -> Result<GradeOutcome, InvalidInput> {
    let data = TaskData::decode(task)?;
    let grader = data.grader;
    let id = &data.instance_id;
    if solution.is_none() {
        let report = instance_report(grader, id, Evaluation::NoPatch);
        return Ok(unevaluated(
            report,
            "no model patch (model_patch is null); the harness does not evaluate it",
        ));
    }
    let [output] = outputs else {
        return Err(InvalidInput::new(format!(
            "task `{id}`: grade takes the output of the one evaluate command, got {} outputs",
            outputs.len()
        )));
    };
    let combined = if output.stderr.is_empty() {
        Cow::Borrowed(output.stdout.as_str())
    } else {
        Cow::Owned(format!("{}{}", output.stdout, output.stderr))
    };
    // The harness reads the log in text mode.
    let log = pystr::universal_newlines(&combined);
    // 5.x's run report classifies every unresolved instance of a non-empty
    // patch (`make_run_report`); 4.1.0 classifies nothing.
    let classify = |log: &str| {
        let classified =
            grader == GraderVersion::V5_0_2 && solution.is_some_and(|patch| !patch.is_empty());
        classified.then(|| infra::classify(log)).flatten()
    };
    if output.timed_out || ends_with_timeout_notice(&log) {
        // The harness appends its notice to the log before classifying it.
        let noticed = if output.timed_out {
            Cow::Owned(format!("{log}{}", timeout_notice(data.timeout_s)))
        } else {
            Cow::Borrowed(log.as_ref())
        };
        return Ok(GradeOutcome {
            infra: classify(&noticed),
            ..unevaluated(
                "null".into(),
                &format!(
                    "tests timed out after {} s; the harness writes no report",
                    data.timeout_s
                ),
            )
        });
    }
    let logs_eval = match get_logs_eval(grader, data.log_parser, &log) {
        Ok(logs_eval) => logs_eval,
        Err(raised) => {
            let parser = data.log_parser.name();
            return Ok(GradeOutcome {
                infra: classify(&log),
                ..unevaluated(
                    "null".into(),
                    &format!("{parser} raised {raised}; the harness writes no report"),
                )
            });
        }
    };
    let status_map = match logs_eval {
        LogsEval::Found(status_map) => status_map,
        LogsEval::NotFound(why) => {
            let infra = (grader == GraderVersion::V5_0_2)
                .then(|| infra::classify(&log))
                .flatten();
            let report = instance_report(grader, id, Evaluation::NotFound { infra });
            let infra_note = infra.map_or(String::new(), |infra| {
                format!(" (infra failure signature: {})", infra.reason)
            });
            return Ok(GradeOutcome {
                infra: classify(&log),
                ..unevaluated(report, &format!("{}{infra_note}", not_found_detail(&why)))
            });
        }
    };
    let tests = eval_tests_report(
        grader,
        &status_map,
        &data.fail_to_pass,
        &data.pass_to_pass,
        data.eval_type,
    );
    let resolution = tests.resolution();
    let resolved = resolution == Resolution::Full;
    Ok(GradeOutcome {
        status: if resolved {
            GradeStatus::Passed
        } else {
            GradeStatus::Failed
        },
        reward: if resolved { 1.0 } else { 0.0 },
        report: instance_report(
            grader,
            id,
            Evaluation::Graded {
                tests: &tests,
                resolved,
            },
        ),
        detail: graded_detail(resolution, &tests, data.eval_type.as_str()),
        infra: if resolved { None } else { classify(&log) },
        tests: status_map,
    })
}

/// What `run_instance` appends to the log of a test run it stopped.
fn timeout_notice(timeout_s: u64) -> String {
    format!("\n\nTimeout error: {timeout_s} seconds exceeded.")
}

fn unevaluated(report: String, detail: &str) -> GradeOutcome {
    GradeOutcome {
        status: GradeStatus::Error,
        reward: 0.0,
        tests: StatusMap::default(),
        report,
        detail: detail.to_owned(),
        infra: None,
    }
}

fn not_found_detail(why: &NotFound) -> String {
    match why {
        NotFound::BadCode(code) => {
            format!("the log contains `{code}`; the harness grades it as not applied")
        }
        NotFound::MissingMarkers => {
            "the log lacks the start/end test output markers; the tests did not run".into()
        }
        NotFound::SuiteDidNotRun => "no test results and no sign that a test suite ran".into(),
        NotFound::ExitCodeContradicts(code) => {
            format!(
                "the tests exited with {code} but the log shows no failure; the log does not describe the run"
            )
        }
    }
}

fn graded_detail(resolution: Resolution, tests: &TestsReport, eval_type: &str) -> String {
    let counts = |outcome: &crate::grading::Outcome| {
        format!(
            "{}/{}",
            outcome.success.len(),
            outcome.success.len() + outcome.failure.len()
        )
    };
    format!(
        "{}: FAIL_TO_PASS {} and PASS_TO_PASS {} succeeded ({eval_type})",
        resolution.as_str(),
        counts(&tests.fail_to_pass),
        counts(&tests.pass_to_pass)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    const ROW: &str = r#"{"instance_id": "pallets__flask-1", "repo": "pallets/flask", "version": "2.3",
        "FAIL_TO_PASS": ["t.py::a"], "PASS_TO_PASS": []}"#;
    const PASSING_LOG: &str =
        "+ : '>>>>> Start Test Output'\nPASSED t.py::a\n+ : '>>>>> End Test Output'\n";

    fn task(grader: &str) -> Task {
        crate::row::load(
            ROW,
            &Settings::parse(&[("grader-version", grader)]).unwrap(),
        )
        .unwrap()
    }

    fn output(log: &str) -> CommandOutput {
        CommandOutput {
            stdout: log.to_owned(),
            ..CommandOutput::default()
        }
    }

    #[test]
    fn a_passing_log_resolves() {
        let outcome = grade(
            &task("swebench-4.1.0"),
            Some("diff"),
            &[output(PASSING_LOG)],
        )
        .unwrap();
        assert_eq!(outcome.status, GradeStatus::Passed);
        assert_eq!(outcome.reward, 1.0);
        assert_eq!(
            outcome.tests.iter().collect::<Vec<_>>(),
            [("t.py::a", "PASSED")]
        );
        assert_eq!(outcome.infra, None);
        assert!(
            outcome.detail.starts_with("RESOLVED_FULL"),
            "{}",
            outcome.detail
        );
    }

    #[test]
    fn a_failed_apply_is_an_error_with_the_harness_report() {
        let log = ">>>>> Patch Apply Failed:\nerror: corrupt patch at line 3\n";
        let outcome = grade(&task("swebench-5.0.2"), Some("diff"), &[output(log)]).unwrap();
        assert_eq!(outcome.status, GradeStatus::Error);
        let report: serde_json::Value = serde_json::from_str(&outcome.report).unwrap();
        assert_eq!(
            report["pallets__flask-1"]["patch_successfully_applied"],
            false
        );
        assert_eq!(report["pallets__flask-1"]["infra_failure"], false);
        assert!(
            outcome.detail.contains("Patch Apply Failed"),
            "{}",
            outcome.detail
        );
    }

    #[test]
    fn a_timeout_is_an_error_without_a_report() {
        let timed_out = CommandOutput {
            timed_out: true,
            ..output(PASSING_LOG)
        };
        let outcome = grade(&task("swebench-4.1.0"), Some("diff"), &[timed_out]).unwrap();
        assert_eq!(
            (outcome.status, outcome.report.as_str()),
            (GradeStatus::Error, "null")
        );
        let noticed = format!("{PASSING_LOG}\n\nTimeout error: 1800 seconds exceeded.");
        let outcome = grade(&task("swebench-4.1.0"), Some("diff"), &[output(&noticed)]).unwrap();
        assert_eq!(
            (outcome.status, outcome.report.as_str()),
            (GradeStatus::Error, "null")
        );
    }

    #[test]
    fn no_patch_reports_patch_is_none() {
        let outcome = grade(&task("swebench-4.1.0"), None, &[]).unwrap();
        assert_eq!(outcome.status, GradeStatus::Error);
        let report: serde_json::Value = serde_json::from_str(&outcome.report).unwrap();
        assert_eq!(report["pallets__flask-1"]["patch_is_None"], true);
    }

    #[test]
    fn outputs_must_come_from_the_one_evaluate_command() {
        let error = grade(&task("swebench-4.1.0"), Some("diff"), &[]).unwrap_err();
        assert!(error.0.contains("got 0 outputs"), "{error}");
    }
}
