//! The generic adapter, called as the real component through the test kit.

use sandfleet_testkit::adapter::{
    GradeStatus, Graded, Setting, SolutionState, TaskAdapter, TestStatus, TimeoutRule,
};
use sandfleet_testkit::{CallErrorKind, TestPlugin, fixtures};

fn adapter() -> TaskAdapter {
    TestPlugin::load(sandfleet_guests::GENERIC)
        .unwrap()
        .adapter()
        .unwrap()
}

const ROW: &str = r#"{"id": "calc-add", "image": "calc", "test": "python3 -m unittest -v", "setup": ["true"], "timeout_s": 30, "env": {"A": "1"}}"#;

#[test]
fn a_row_becomes_a_task_and_a_script() {
    let adapter = adapter();
    let task = adapter.load_blocking(ROW, &[]).unwrap();
    assert_eq!(
        (task.id.as_str(), task.image.as_str(), task.workdir.as_str()),
        ("calc-add", "calc", "/workspace")
    );

    let script = adapter
        .prepare_blocking(&task, Some("diff --git a/x b/x\n"))
        .unwrap();
    assert_eq!(script.files.len(), 1);
    assert_eq!(script.files[0].path, "/tmp/sandfleet/solution.patch");
    assert_eq!(script.setup.len(), 1);
    let argvs: Vec<Vec<String>> = script.evaluate.iter().map(|c| c.argv.clone()).collect();
    assert_eq!(argvs[0][..2], ["git".to_string(), "apply".to_string()]);
    assert_eq!(argvs[1], ["bash", "-c", "python3 -m unittest -v"]);
    assert_eq!(script.evaluate[1].timeout_ms, 30_000);
    assert!(script.evaluate[1].merge_stderr);
    assert_eq!(script.timeout_rule, TimeoutRule::Fail);
    assert_eq!(
        (script.env[0].key.as_str(), script.env[0].value.as_str()),
        ("A", "1")
    );

    // Without a solution there is nothing to apply.
    let script = adapter.prepare_blocking(&task, None).unwrap();
    assert!(script.files.is_empty());
    assert_eq!(script.evaluate.len(), 1);
}

#[test]
fn grading_follows_the_exit_code_apply_and_timeout() {
    let adapter = adapter();
    let task = adapter.load_blocking(ROW, &[]).unwrap();
    let patch = Some("diff");
    let log = "test_add (tests.test_calc.TestCalc.test_add) ... ok\ntest_sub (tests.test_calc.TestCalc.test_sub) ... FAIL\n";

    let passed = adapter
        .grade_blocking(
            &task,
            patch,
            &[fixtures::output(0, ""), fixtures::output(0, log)],
        )
        .unwrap();
    assert_eq!(passed.status, GradeStatus::Passed);
    assert_eq!(passed.reward, Some(1.0));
    let tests: Vec<(&str, TestStatus)> = passed.tests.iter().map(|t| (t.name, t.status)).collect();
    assert_eq!(
        tests,
        vec![
            ("tests.test_calc.TestCalc.test_add", TestStatus::Passed),
            ("tests.test_calc.TestCalc.test_sub", TestStatus::Failed),
        ]
    );

    let failed = adapter
        .grade_blocking(
            &task,
            patch,
            &[fixtures::output(0, ""), fixtures::output(1, log)],
        )
        .unwrap();
    assert_eq!(
        (failed.status, failed.reward),
        (GradeStatus::Failed, Some(0.0))
    );
    assert_eq!(failed.detail, "the test command exited 1, expected 0");

    let mut rejected = fixtures::output(1, "");
    rejected.stderr =
        "error: patch failed: calc.py:3\nerror: calc.py: patch does not apply\n".into();
    let error = adapter
        .grade_blocking(&task, patch, &[rejected, fixtures::output(1, log)])
        .unwrap();
    assert_eq!(error.status, GradeStatus::Error);
    assert_eq!(
        error.detail,
        "the solution does not apply: error: patch failed: calc.py:3"
    );

    let mut overran = fixtures::output(-1, "");
    overran.timed_out = true;
    let timed_out = adapter.grade_blocking(&task, None, &[overran]).unwrap();
    assert_eq!(timed_out.status, GradeStatus::Failed);
    assert_eq!(timed_out.detail, "the test command timed out after 30 s");
    let report: serde_json::Value = serde_json::from_str(&timed_out.report).unwrap();
    assert_eq!(report["timed_out"], true);
}

#[test]
fn bad_rows_name_the_field() {
    let adapter = adapter();
    for (row, message) in [
        (r#"{"image": "calc", "test": "x"}"#, "field `id` is missing"),
        (
            r#"{"id": "t1", "test": "x"}"#,
            "row `t1`: field `image` is missing",
        ),
        (
            r#"{"id": "t1", "image": "calc", "test": "x", "setup": "make"}"#,
            "row `t1`: field `setup` must be a list of strings",
        ),
        (
            r#"{"id": "t1", "image": "calc", "test": "x", "workdir": "rel"}"#,
            "row `t1`: field `workdir` must be an absolute path",
        ),
        (
            r#"{"id": "t1", "image": "calc", "test": "x", "colour": 1}"#,
            "row `t1`: unknown field `colour`",
        ),
        ("[1, 2]", "a row must be a JSON object"),
        ("{", "not valid JSON"),
    ] {
        let error = adapter.load_blocking(row, &[]).unwrap_err();
        match error.kind {
            CallErrorKind::Declined {
                kind: "invalid-input",
                message: got,
            } => {
                assert!(got.contains(message), "{row}: {got}")
            }
            other => panic!("{row}: expected invalid-input, got {other:?}"),
        }
    }
}

#[test]
fn settings_give_defaults_and_unknown_settings_are_refused() {
    let adapter = adapter();
    let settings = [Setting {
        key: "workdir".into(),
        value: "/src".into(),
    }];
    let task = adapter
        .load_blocking(r#"{"id": "t", "image": "i", "test": "true"}"#, &settings)
        .unwrap();
    assert_eq!(task.workdir, "/src");
    let bad = [Setting {
        key: "colour".into(),
        value: "red".into(),
    }];
    let error = adapter.load_blocking(ROW, &bad).unwrap_err().to_string();
    assert!(error.contains("unknown setting `colour`"), "{error}");
}

#[test]
fn parse_log_and_summarize() {
    let adapter = adapter();
    let tests = adapter
        .parse_log_blocking("tap", "ok 1 - a\nnot ok 2 - b\n", &[])
        .unwrap();
    assert_eq!(tests.len(), 2);
    assert_eq!(
        tests.iter().nth(1).map(|t| t.status),
        Some(TestStatus::Failed)
    );
    let error = adapter
        .parse_log_blocking("junit", "", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("unknown parser `junit` (parsers: unittest, tap)"),
        "{error}"
    );

    let graded = |id: &str, status, solution| Graded {
        task_id: id.into(),
        status,
        solution,
        infra: None,
    };
    let summary = adapter
        .summarize_blocking(
            &[
                graded("a", GradeStatus::Passed, SolutionState::Present),
                graded("b", GradeStatus::Error, SolutionState::Present),
                graded("c", GradeStatus::Failed, SolutionState::Missing),
            ],
            &[],
        )
        .unwrap();
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["total"], 3);
    assert_eq!(summary["passed_ids"], serde_json::json!(["a"]));
    assert_eq!(summary["error_ids"], serde_json::json!(["b"]));
    assert_eq!(summary["without_solution_ids"], serde_json::json!(["c"]));
}
