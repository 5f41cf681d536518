//! Per-test results from common test-runner output: Python's `unittest -v`
//! and TAP (`ok 1 - name` / `not ok 2 - name`).

use sandfleet_plugin_sdk::v0_1_0::adapter::exports::sandfleet::plugin::adapter::{
    TestResult, TestStatus,
};

/// Parser names `parse-log` accepts.
pub(crate) const PARSERS: [&str; 2] = ["unittest", "tap"];

pub(crate) fn parse_named(parser: &str, log: &str) -> Option<Vec<TestResult>> {
    match parser {
        "unittest" => Some(unittest(log)),
        "tap" => Some(tap(log)),
        _ => None,
    }
}

/// Whichever parser finds tests.
pub(crate) fn parse_any(log: &str) -> Vec<TestResult> {
    let found = unittest(log);
    if found.is_empty() { tap(log) } else { found }
}

/// `test_name (module.Class.test_name) ... ok`, as unittest prints with `-v`.
fn unittest(log: &str) -> Vec<TestResult> {
    log.lines()
        .filter_map(|line| {
            let (test, outcome) = line.split_once(" ... ")?;
            let (name, qualified) = test.split_once(" (")?;
            let qualified = qualified.strip_suffix(')')?;
            let status = match outcome.trim() {
                "ok" => TestStatus::Passed,
                "FAIL" => TestStatus::Failed,
                "ERROR" => TestStatus::Error,
                "expected failure" => TestStatus::Xfail,
                skipped if skipped.starts_with("skipped") => TestStatus::Skipped,
                _ => return None,
            };
            // Python 3.11+ prints the qualified name including the method.
            let name = if qualified.ends_with(&format!(".{name}")) {
                qualified.to_string()
            } else {
                format!("{qualified}.{name}")
            };
            Some(TestResult { name, status })
        })
        .collect()
}

/// TAP lines; a `# SKIP` directive marks a skipped test.
fn tap(log: &str) -> Vec<TestResult> {
    log.lines()
        .filter_map(|line| {
            let (passed, rest) = if let Some(rest) = line.strip_prefix("not ok ") {
                (false, rest)
            } else {
                (true, line.strip_prefix("ok ")?)
            };
            let rest = rest
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            let rest = rest.strip_prefix("- ").unwrap_or(rest);
            let (name, directive) = rest.split_once(" # ").unwrap_or((rest, ""));
            let status = if directive.to_ascii_uppercase().starts_with("SKIP") {
                TestStatus::Skipped
            } else if passed {
                TestStatus::Passed
            } else {
                TestStatus::Failed
            };
            Some(TestResult {
                name: name.trim().to_string(),
                status,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statuses(results: &[TestResult]) -> Vec<(&str, TestStatus)> {
        results
            .iter()
            .map(|r| (r.name.as_str(), r.status))
            .collect()
    }

    #[test]
    fn unittest_verbose_lines_in_both_python_styles() {
        let log = "test_add (tests.test_calc.TestCalc.test_add) ... ok\n\
                   test_div (tests.test_calc.TestCalc) ... FAIL\n\
                   test_neg (tests.test_calc.TestCalc.test_neg) ... skipped 'later'\n\
                   noise ... ok\n";
        assert_eq!(
            statuses(&unittest(log)),
            vec![
                ("tests.test_calc.TestCalc.test_add", TestStatus::Passed),
                ("tests.test_calc.TestCalc.test_div", TestStatus::Failed),
                ("tests.test_calc.TestCalc.test_neg", TestStatus::Skipped),
            ]
        );
    }

    #[test]
    fn tap_lines_with_numbers_dashes_and_skips() {
        let log = "1..3\nok 1 - upper\nnot ok 2 - lower\nok 3 trim # SKIP no input\n";
        assert_eq!(
            statuses(&tap(log)),
            vec![
                ("upper", TestStatus::Passed),
                ("lower", TestStatus::Failed),
                ("trim", TestStatus::Skipped),
            ]
        );
    }
}
