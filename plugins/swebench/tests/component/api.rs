//! The component's contract beyond the golden data: what `describe` lists,
//! and how each call refuses bad input.

use crate::common;

use sandfleet_testkit::adapter::{GradeStatus, Graded, SolutionState, Task, TestStatus};

#[test]
fn describe_lists_the_settings_with_their_defaults() {
    let info = common::adapter().describe_blocking().unwrap();
    assert_eq!(info.name, "swebench");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    let settings: Vec<(&str, Option<&str>)> = info
        .settings
        .iter()
        .map(|setting| (setting.key.as_str(), setting.default_value.as_deref()))
        .collect();
    assert_eq!(
        settings,
        [
            ("grader-version", None),
            ("namespace", Some("swebench")),
            ("arch", Some("x86_64")),
            ("tag", Some("latest")),
            ("timeout-s", Some("1800")),
            ("evaluation", Some("in-place")),
        ]
    );
    assert!(
        info.settings
            .iter()
            .all(|setting| !setting.summary.is_empty())
    );
}

#[test]
fn a_repo_version_outside_the_4_1_0_table_is_refused_by_name() {
    let row = r#"{"instance_id": "django__django-1", "repo": "django/django", "version": "9.9",
        "FAIL_TO_PASS": [], "PASS_TO_PASS": []}"#;
    let error =
        common::declined(common::adapter().load_blocking(row, &common::grader("swebench-4.1.0")));
    assert!(
        error.contains("django__django-1")
            && error.contains("django/django")
            && error.contains("`9.9`"),
        "{error}"
    );
}

#[test]
fn marked_is_graded_but_4_1_0_scripts_only_python() {
    let adapter = common::adapter();
    let row = r#"{"instance_id": "markedjs__marked-1", "repo": "markedjs/marked", "version": "1.2",
        "FAIL_TO_PASS": ["a"], "PASS_TO_PASS": [], "base_commit": "abc", "test_patch": ""}"#;
    let task = adapter
        .load_blocking(row, &common::grader("swebench-4.1.0"))
        .unwrap();
    let error = common::declined(adapter.prepare_blocking(&task, Some("diff")));
    assert!(
        error.contains("Python repos only") && error.contains("markedjs/marked"),
        "{error}"
    );
}

#[test]
fn prepare_names_the_missing_fields_of_a_grading_only_row() {
    let adapter = common::adapter();
    let row = r#"{"instance_id": "pallets__flask-1", "repo": "pallets/flask", "version": "2.3",
        "FAIL_TO_PASS": [], "PASS_TO_PASS": []}"#;
    let task = adapter
        .load_blocking(row, &common::grader("swebench-4.1.0"))
        .unwrap();
    let error = common::declined(adapter.prepare_blocking(&task, Some("diff")));
    assert!(
        error.contains("pallets__flask-1") && error.contains("base_commit"),
        "{error}"
    );
}

#[test]
fn tasks_from_elsewhere_are_refused() {
    let adapter = common::adapter();
    let task = Task {
        id: "x".into(),
        image: "i".into(),
        workdir: "/testbed".into(),
        data: "{}".into(),
    };
    let prepared = common::declined(adapter.prepare_blocking(&task, None));
    assert!(prepared.contains("task `x`"), "{prepared}");
    let graded = common::declined(adapter.grade_blocking(&task, None, &[]));
    assert!(graded.contains("task `x`"), "{graded}");
}

#[test]
fn parse_log_runs_any_registry_name_and_refuses_unknown_ones() {
    let adapter = common::adapter();
    let v4 = common::grader("swebench-4.1.0");
    let v5 = common::grader("swebench-5.0.2");
    let tests = adapter
        .parse_log_blocking("parse_log_astropy", "PASSED a.py::t\n", &v5)
        .unwrap();
    let tests: Vec<_> = tests.iter().map(|t| (t.name, t.value, t.status)).collect();
    assert_eq!(tests, [("a.py::t", "PASSED", TestStatus::Passed)]);

    let unknown = common::declined(adapter.parse_log_blocking("parse_log_jest", "", &v5));
    assert!(
        unknown.contains("parse_log_jest") && unknown.contains("parse_log_sympy"),
        "{unknown}"
    );
    let no_version = common::declined(adapter.parse_log_blocking("parse_log_pytest", "", &[]));
    assert!(no_version.contains("grader-version"), "{no_version}");
    let raised = common::declined(adapter.parse_log_blocking("parse_log_seaborn", "FAILED\n", &v4));
    assert_eq!(
        common::raised(&raised, "parse_log_seaborn", "swebench-4.1.0"),
        "IndexError: list index out of range"
    );
    assert!(
        adapter
            .parse_log_blocking("parse_log_seaborn", "FAILED\n", &v5)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn summarize_writes_the_run_report_of_the_configured_version() {
    let adapter = common::adapter();
    let results = [Graded {
        task_id: "a".into(),
        status: GradeStatus::Passed,
        solution: SolutionState::Present,
        infra: None,
    }];
    let report = adapter
        .summarize_blocking(&results, &common::grader("swebench-5.0.2"))
        .unwrap();
    assert!(
        report.starts_with("{\n    \"total_instances\": 1,\n") && report.ends_with("}\n"),
        "{report}"
    );
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["resolved_ids"], serde_json::json!(["a"]));
    assert_eq!(report["infra_failure_ids"], serde_json::json!([]));
    let unknown = common::declined(adapter.summarize_blocking(&results, &common::grader("4.1.0")));
    assert!(unknown.contains("grader-version `4.1.0`"), "{unknown}");
}
