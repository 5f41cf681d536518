//! The harness's grading: from a test log to a status map (`get_logs_eval`),
//! to per-list outcomes (`get_eval_tests_report`), to a resolution
//! (`get_resolution_status`).

use serde::{Deserialize, Serialize};

use crate::eval_script::{END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE};
use crate::grader::GraderVersion;
use crate::parsers::{ParserName, ParserRaised};
use crate::pystr;
use crate::status_map::{ERROR, FAILED, PASSED, SKIPPED, StatusMap, XFAIL};

/// Markers whose presence anywhere in the log voids it (the harness's "bad codes").
const BAD_CODES: [&str; 4] = [
    ">>>>> Patch Apply Failed",
    ">>>>> Reset Failed",
    ">>>>> Tests Errored",
    ">>>>> Tests Timed Out",
];

/// How expected tests are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum EvalType {
    /// A test succeeds when it passed (or xfailed) and fails when it failed,
    /// errored or is missing.
    #[serde(rename = "pass_and_fail")]
    PassAndFail,
    /// For runners that list failures only: a test fails only when it is
    /// recorded as `FAILED`.
    #[serde(rename = "fail_only")]
    FailOnly,
}

impl EvalType {
    /// `EvalType(value)`.
    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value {
            "pass_and_fail" => Some(Self::PassAndFail),
            "fail_only" => Some(Self::FailOnly),
            _ => None,
        }
    }

    /// The eval type for a repo in, or not in, `FAIL_ONLY_REPOS`.
    pub(crate) fn from_fail_only(fail_only: bool) -> Self {
        if fail_only {
            Self::FailOnly
        } else {
            Self::PassAndFail
        }
    }

    /// The value as the harness spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::PassAndFail => "pass_and_fail",
            Self::FailOnly => "fail_only",
        }
    }
}

/// `get_logs_eval`'s answer: the status map, or why the log cannot be used
/// (`found = False`, which the report shows as `patch_successfully_applied: false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogsEval {
    /// The tests ran and this is what the parser read.
    Found(StatusMap),
    /// The log does not describe a usable test run.
    NotFound(NotFound),
}

/// Why `get_logs_eval` rejected a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotFound {
    /// The log contains one of the bad-code markers (the first one listed).
    BadCode(&'static str),
    /// The start or end marker is missing.
    MissingMarkers,
    /// 5.x: nothing parsed and no sign that a test suite ran.
    SuiteDidNotRun,
    /// 5.x: the test command exited with this (non-zero) status, yet no test
    /// failed or errored, so the log does not describe the run.
    ExitCodeContradicts(String),
}

/// `get_logs_eval(test_spec, path)` on a log's text as read in text mode.
///
/// # Errors
///
/// When the parser raises; the harness does not catch that either.
pub(crate) fn get_logs_eval(
    grader: GraderVersion,
    parser: ParserName,
    content: &str,
) -> Result<LogsEval, ParserRaised> {
    if let Some(bad_code) = BAD_CODES.into_iter().find(|code| content.contains(code)) {
        return Ok(LogsEval::NotFound(NotFound::BadCode(bad_code)));
    }
    if !(content.contains(START_TEST_OUTPUT) && content.contains(END_TEST_OUTPUT)) {
        return Ok(LogsEval::NotFound(NotFound::MissingMarkers));
    }
    let mut status_map = parser.parse(grader, between_markers(content))?;
    if status_map.is_empty() {
        // Some runners print results outside the markers (stdout and stderr
        // interleave differently), so the whole log is the fallback.
        status_map = parser.parse(grader, content)?;
    }
    if grader == GraderVersion::V5_0_2 {
        if status_map.is_empty() && !suite_ran(content) {
            return Ok(LogsEval::NotFound(NotFound::SuiteDidNotRun));
        }
        if let Some(exit_code) = recorded_exit_code(content).filter(|code| !code.is_zero) {
            let any_failure = status_map
                .iter()
                .any(|(_, status)| status == FAILED || status == ERROR);
            if !status_map.is_empty() && !any_failure {
                return Ok(LogsEval::NotFound(NotFound::ExitCodeContradicts(
                    exit_code.text,
                )));
            }
        }
    }
    Ok(LogsEval::Found(status_map))
}

/// `content.split(START)[1].split(END)[0]`: from the first start marker up to
/// the next start marker or the first end marker after it, whichever is first.
fn between_markers(content: &str) -> &str {
    let (_, after_start) = content.split_once(START_TEST_OUTPUT).unwrap_or_default();
    let until_next_start = after_start
        .split(START_TEST_OUTPUT)
        .next()
        .unwrap_or_default();
    until_next_start
        .split(END_TEST_OUTPUT)
        .next()
        .unwrap_or_default()
}

/// 5.x's `SUITE_RAN`: a runner's summary with a non-zero count. `[\s\x1C-\x1F]`
/// and `[\p{L}\p{N}_]` are Python's `\s` and `\w`.
fn suite_ran(content: &str) -> bool {
    crate::lazy_regex!(concat!(
        r"(?m)Executed [1-9]\d* of \d+",
        r"|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)",
        r"|[1-9]\d* passing",
        r"|Tests:[\s\x1C-\x1F]+[1-9]\d*",
        r"|Test Suites:[\s\x1C-\x1F]+(?:\d+ [\p{L}\p{N}_]+, )*[1-9]\d* total",
        r"|^# tests [1-9]\d*",
        r"|[1-9]\d* specs?, \d+ failures?",
        r"|': ok$",
    ))
    .is_match(content)
}

/// The first `>>>>> Test Exit Code: N` in the log.
struct ExitCode {
    text: String,
    is_zero: bool,
}

fn recorded_exit_code(content: &str) -> Option<ExitCode> {
    let pattern = crate::lazy_regex!(&format!(r"{TEST_EXIT_CODE}:{}*(-?\d+)", pystr::SPACE_CLASS));
    let text = pattern.captures(content)?.get(1)?.as_str();
    // Python's int() reads any Unicode decimal digits.
    let is_zero = text
        .trim_start_matches('-')
        .chars()
        .all(pystr::is_zero_digit);
    Some(ExitCode {
        text: text.to_owned(),
        is_zero,
    })
}

/// Which expected list a test is on; 5.x judges them differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expectation {
    FailToPass,
    PassToPass,
}

/// The tests of one expected list, split by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Tests that came out as expected.
    pub(crate) success: Vec<String>,
    /// Tests that did not.
    pub(crate) failure: Vec<String>,
}

/// `get_eval_tests_report` for `FAIL_TO_PASS` and `PASS_TO_PASS` (the
/// harness never fills its `FAIL_TO_FAIL` and `PASS_TO_FAIL` lists).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TestsReport {
    /// `FAIL_TO_PASS` outcomes.
    pub(crate) fail_to_pass: Outcome,
    /// `PASS_TO_PASS` outcomes.
    pub(crate) pass_to_pass: Outcome,
}

/// `get_eval_tests_report(status_map, gold, eval_type=eval_type)`.
pub(crate) fn eval_tests_report(
    grader: GraderVersion,
    status_map: &StatusMap,
    fail_to_pass: &[String],
    pass_to_pass: &[String],
    eval_type: EvalType,
) -> TestsReport {
    let judge = |tests: &[String], expectation| {
        let mut outcome = Outcome::default();
        for test in tests {
            match verdict(grader, eval_type, expectation, test, status_map) {
                Some(true) => outcome.success.push(test.clone()),
                Some(false) => outcome.failure.push(test.clone()),
                // A status that is neither passing nor failing lands on no list.
                None => {}
            }
        }
        outcome
    };
    TestsReport {
        fail_to_pass: judge(fail_to_pass, Expectation::FailToPass),
        pass_to_pass: judge(pass_to_pass, Expectation::PassToPass),
    }
}

/// Success, failure, or neither (`None`) for one expected test.
fn verdict(
    grader: GraderVersion,
    eval_type: EvalType,
    expectation: Expectation,
    test: &str,
    status_map: &StatusMap,
) -> Option<bool> {
    if eval_type == EvalType::FailOnly {
        // Exact ids only, in both versions.
        return Some(status_map.get(test) != Some(FAILED));
    }
    let status = match grader {
        GraderVersion::V4_1_0 => status_map.get(test),
        GraderVersion::V5_0_2 => resolve_truncated(test, status_map),
    };
    match status {
        Some(PASSED | XFAIL) => Some(true),
        None | Some(FAILED | ERROR) => Some(false),
        // 5.x: a skipped PASS_TO_PASS test is no regression, but a skipped
        // FAIL_TO_PASS test is no fix either.
        Some(SKIPPED) if grader == GraderVersion::V5_0_2 => {
            Some(expectation == Expectation::PassToPass)
        }
        Some(_) => None,
    }
}

/// 5.x's `_resolve_case`: the status of `test`, where an id cut short inside
/// its parameters (more `[` than `]`) may stand for the parsed ids it
/// prefixes, provided they all agree on passing or not; the first one counts.
fn resolve_truncated<'a>(test: &str, status_map: &'a StatusMap) -> Option<&'a str> {
    if let Some(status) = status_map.get(test) {
        return Some(status);
    }
    if test.matches('[').count() <= test.matches(']').count() {
        return None;
    }
    let passing = |status: &str| status == PASSED || status == XFAIL;
    let mut candidates = status_map
        .iter()
        .filter(|(id, _)| id.starts_with(test))
        .map(|(_, status)| status);
    let first = candidates.next()?;
    candidates
        .all(|status| passing(status) == passing(first))
        .then_some(first)
}

/// `get_resolution_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Every expected test succeeded.
    Full,
    /// Some but not all `FAIL_TO_PASS` tests succeeded, and no `PASS_TO_PASS` test failed.
    Partial,
    /// Anything else.
    No,
}

impl Resolution {
    /// The value as the harness spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Full => "RESOLVED_FULL",
            Self::Partial => "RESOLVED_PARTIAL",
            Self::No => "RESOLVED_NO",
        }
    }
}

impl TestsReport {
    /// `get_resolution_status(report)`. An empty list scores 1, so only
    /// failures matter: FULL without any, PARTIAL when `FAIL_TO_PASS` has
    /// both outcomes and `PASS_TO_PASS` no failure.
    pub(crate) fn resolution(&self) -> Resolution {
        let fail_to_pass = &self.fail_to_pass;
        let maintained = self.pass_to_pass.failure.is_empty();
        if fail_to_pass.failure.is_empty() && maintained {
            Resolution::Full
        } else if !fail_to_pass.success.is_empty() && !fail_to_pass.failure.is_empty() && maintained
        {
            Resolution::Partial
        } else {
            Resolution::No
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> StatusMap {
        let mut map = StatusMap::default();
        for (test, status) in entries {
            map.insert(test, status);
        }
        map
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn the_slice_stops_at_a_second_start_marker() {
        assert_eq!(
            between_markers(
                "a>>>>> Start Test Outputb>>>>> Start Test Outputc>>>>> End Test Output"
            ),
            "b"
        );
        assert_eq!(
            between_markers("a>>>>> Start Test Outputb>>>>> End Test Outputc"),
            "b"
        );
    }

    #[test]
    fn skipped_tests_count_differently_per_version() {
        let status_map = map(&[("f", SKIPPED), ("p", SKIPPED)]);
        let report = |grader| {
            eval_tests_report(
                grader,
                &status_map,
                &ids(&["f"]),
                &ids(&["p"]),
                EvalType::PassAndFail,
            )
        };
        let old = report(GraderVersion::V4_1_0);
        assert!(old.fail_to_pass.success.is_empty() && old.fail_to_pass.failure.is_empty());
        assert_eq!(old.resolution(), Resolution::Full);
        let new = report(GraderVersion::V5_0_2);
        assert_eq!(new.fail_to_pass.failure, ["f"]);
        assert_eq!(new.pass_to_pass.success, ["p"]);
        assert_eq!(new.resolution(), Resolution::No);
    }

    #[test]
    fn truncated_ids_resolve_only_when_candidates_agree() {
        let status_map = map(&[
            ("t[a b]", PASSED),
            ("t[a c]", XFAIL),
            ("u[a b]", PASSED),
            ("u[a c]", FAILED),
        ]);
        assert_eq!(resolve_truncated("t[a", &status_map), Some(PASSED));
        assert_eq!(resolve_truncated("u[a", &status_map), None);
        assert_eq!(resolve_truncated("t", &status_map), None);
    }

    #[test]
    fn fail_only_fails_just_the_recorded_failures() {
        let status_map = map(&[("a", FAILED), ("b", ERROR)]);
        let report = eval_tests_report(
            GraderVersion::V5_0_2,
            &status_map,
            &ids(&["a", "b", "c"]),
            &[],
            EvalType::FailOnly,
        );
        assert_eq!(report.fail_to_pass.failure, ["a"]);
        assert_eq!(report.fail_to_pass.success, ["b", "c"]);
        assert_eq!(report.resolution(), Resolution::Partial);
    }

    #[test]
    fn a_contradicting_exit_code_voids_an_all_pass_log_in_5x() {
        let log = ">>>>> Start Test Output\nPASSED t::a\n>>>>> End Test Output\n>>>>> Test Exit Code: 1\n";
        let found = get_logs_eval(GraderVersion::V4_1_0, ParserName::Pytest, log).unwrap();
        assert!(matches!(found, LogsEval::Found(_)));
        let voided = get_logs_eval(GraderVersion::V5_0_2, ParserName::Pytest, log).unwrap();
        assert_eq!(
            voided,
            LogsEval::NotFound(NotFound::ExitCodeContradicts("1".into()))
        );
        let arabic_zero = log.replace("Code: 1", "Code: \u{660}");
        assert!(matches!(
            get_logs_eval(GraderVersion::V5_0_2, ParserName::Pytest, &arabic_zero),
            Ok(LogsEval::Found(_))
        ));
    }
}
