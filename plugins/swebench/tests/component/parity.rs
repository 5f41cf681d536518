//! Cases beyond the golden sample (`tests/parity/`, written by
//! `tools/gen_parity_cases.py` with the official harness's answers): parser
//! values that are not status words, carried exactly through `parse-log`,
//! the status map `grade` returns, and grading, in both harness versions.

use crate::common;

use sandfleet_testkit::adapter::{GradeStatus, TestStatus};
use serde_json::{Value, json};

fn cases(prefix: &str) -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity");
    common::sorted_entries(&dir)
        .into_iter()
        .filter(|path| common::file_name(path).starts_with(prefix))
        .map(|path| (common::file_name(&path), common::read_json(&path)))
        .collect()
}

#[test]
fn parse_log_returns_every_value_as_the_parser_stored_it() {
    let adapter = common::adapter();
    let cases = cases("parser_");
    assert_eq!(cases.len(), 5);
    let mut others = 0;
    for (name, case) in cases {
        let parser = case["parser"].as_str().unwrap();
        let log = case["log"].as_str().unwrap();
        for grader in common::GRADERS {
            let context = format!("{name} ({grader})");
            let tests = adapter
                .parse_log_blocking(parser, log, &common::grader(grader))
                .unwrap_or_else(|error| panic!("{context}: {error}"));
            common::assert_same_json(
                &json!({ "status_map": common::status_map(&tests) }),
                &case["expected"][grader],
                &context,
            );
            // A value that is no status word counts as `other`, never as the
            // word it starts with.
            for test in tests.iter() {
                let word = ["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"].contains(&test.value);
                assert_eq!(
                    test.status == TestStatus::Other,
                    !word,
                    "{context}: {test:?}"
                );
                others += usize::from(!word);
            }
        }
    }
    assert!(
        others >= 10,
        "the cases hold values that are no status word"
    );
}

#[test]
fn grading_judges_raw_values_as_the_harness_does() {
    let adapter = common::adapter();
    let cases = cases("grading_");
    assert_eq!(cases.len(), 4);
    for (name, case) in cases {
        let input = &case["input"];
        for grader in common::GRADERS {
            let context = format!("{name} ({grader})");
            let expected = &case["expected"][grader];
            let task = adapter
                .load_blocking(&input["instance"].to_string(), &common::grader(grader))
                .unwrap_or_else(|error| panic!("{context}: load: {error}"));
            let patch = input["prediction"]["model_patch"].as_str();
            let log = input["log"].as_str().unwrap();
            let outcome = adapter
                .grade_blocking(&task, patch, &[common::output(log)])
                .unwrap_or_else(|error| panic!("{context}: grade: {error}"));
            let report: Value = serde_json::from_str(&outcome.report).unwrap();
            common::assert_same_json(&report, &expected["report"], &context);
            common::assert_same_json(
                &common::status_map(&outcome.tests),
                &expected["get_logs_eval"]["status_map"],
                &format!("{context}: status map"),
            );
            let resolved = expected["resolved"].as_bool().unwrap();
            assert_eq!(outcome.status == GradeStatus::Passed, resolved, "{context}");
            assert_eq!(
                outcome.reward,
                Some(f64::from(u8::from(resolved))),
                "{context}"
            );
        }
    }
}

/// A 100 MB log of 4.3 million tests, past the adapter's default 64 MiB
/// memory cap: `grade` gets limits scaled to its input and gives the
/// harness's report, and its status map holds every test.
#[test]
fn a_100_mb_log_grades_to_the_harness_report() {
    let adapter = common::adapter();
    let (name, case) = cases("large_").pop().expect("the large case");
    let lines = case["lines"].as_u64().unwrap();
    let log = common::big_log::big_log(lines);
    assert!(log.len() > 100_000_000, "{} bytes", log.len());
    for grader in common::GRADERS {
        let context = format!("{name} ({grader})");
        let task = adapter
            .load_blocking(&case["row"].to_string(), &common::grader(grader))
            .unwrap();
        let outcome = adapter
            .grade_blocking(&task, Some("diff"), &[common::output(&log)])
            .unwrap_or_else(|error| panic!("{context}: {error}"));
        let report: Value = serde_json::from_str(&outcome.report).unwrap();
        common::assert_same_json(&report, &case["expected"][grader]["report"], &context);
        assert_eq!(outcome.tests.len() as u64, lines + 1, "{context}");
        let first = outcome.tests.iter().next().unwrap();
        assert_eq!((first.name, first.value), ("could", "ERROR:"), "{context}");
    }
}
