//! Random cases with the official harness's answers, written by
//! `tools/gen_differential_cases.py` (which needs the Python package, so the
//! test only runs when `SWEBENCH_DIFFERENTIAL_CASES` names a case file), run
//! through the component.

use crate::common;

use serde_json::{Value, json};

/// The 4.1.0 test command of the repo/version each diff case is scripted as.
const DIFF_REPOS: [(&str, &str, &str); 2] = [
    (
        "django/django",
        "3.0",
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
    ),
    ("pallets/flask", "2.3", "pytest -rA"),
];
const BASE_COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

#[test]
#[ignore = "needs SWEBENCH_DIFFERENTIAL_CASES from tools/gen_differential_cases.py"]
fn random_cases_match_the_official_harness() {
    let path =
        std::env::var("SWEBENCH_DIFFERENTIAL_CASES").expect("SWEBENCH_DIFFERENTIAL_CASES is set");
    let cases = common::read_json(std::path::Path::new(&path));
    let adapter = common::adapter();
    let grader = cases["grader"].as_str().unwrap();
    let settings = common::grader(grader);
    let logs = cases["logs"].as_array().unwrap();
    assert!(!logs.is_empty());
    for (index, case) in logs.iter().enumerate() {
        let log = case["log"].as_str().unwrap();
        for (parser, expected) in case["parsed"].as_object().unwrap() {
            let got = match adapter.parse_log_blocking(parser, log, &settings) {
                Ok(tests) => json!({ "status_map": common::status_map(&tests) }),
                Err(error) => {
                    let message = common::declined::<()>(Err(error));
                    json!({ "exception": common::raised(&message, parser, grader) })
                }
            };
            common::assert_same_json(
                &got,
                expected,
                &format!("log case {index}, {parser}: {log:?}"),
            );
        }
        let task = adapter
            .load_blocking(&case["row"].to_string(), &settings)
            .unwrap();
        let outcome = adapter
            .grade_blocking(&task, case["patch"].as_str(), &[common::output(log)])
            .unwrap();
        let report: Value = serde_json::from_str(&outcome.report).unwrap();
        let expected = case["graded"].get("report").unwrap_or(&Value::Null);
        common::assert_same_json(
            &report,
            expected,
            &format!("log case {index}, report: {log:?}"),
        );
    }
    // What 4.1.0 reads from a test patch shows in the script it generates:
    // the test command's directives and the test files it resets.
    for (index, case) in cases["diffs"].as_array().unwrap().iter().enumerate() {
        let patch = case["patch"].as_str().unwrap();
        let repo = case["repo"].as_str().unwrap();
        let context = format!("diff case {index}: {patch:?}");
        let (_, version, test_cmd) = DIFF_REPOS
            .into_iter()
            .find(|(name, _, _)| *name == repo)
            .unwrap_or_else(|| panic!("{context}: no version for {repo}"));
        let row = json!({
            "instance_id": "org__repo-1",
            "repo": repo,
            "version": version,
            "FAIL_TO_PASS": [],
            "PASS_TO_PASS": [],
            "base_commit": BASE_COMMIT,
            "test_patch": patch,
        });
        let task = adapter.load_blocking(&row.to_string(), &settings).unwrap();
        let prepared = adapter.prepare_blocking(&task, Some("diff"));
        let Some(files) = case["modified_files"]["files"].as_array() else {
            // unidiff raised; the harness builds no eval script either.
            assert_eq!(
                case["modified_files"],
                json!({ "exception": "UnidiffParseError" }),
                "{context}"
            );
            let error = common::declined(prepared);
            assert!(
                error.contains("unidiff cannot parse it"),
                "{context}: {error}"
            );
            continue;
        };
        let script = prepared.unwrap_or_else(|error| panic!("{context}: {error}"));
        let (test_command, reset) = common::test_command_and_reset(common::eval_script(&script));
        let directives: Vec<&str> = case["test_directives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|directive| directive.as_str().unwrap())
            .collect();
        let expected_command = std::iter::once(test_cmd)
            .chain(directives)
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(test_command, expected_command, "{context}");
        let files: Vec<&str> = files.iter().map(|file| file.as_str().unwrap()).collect();
        assert_eq!(
            reset,
            format!("git checkout {BASE_COMMIT} {}", files.join(" ")),
            "{context}"
        );
    }
}
