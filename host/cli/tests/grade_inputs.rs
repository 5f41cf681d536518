//! `sandfleet grade` and `parse-log` on inputs the harness's own files do
//! not exercise: statuses that are not status words reach `status_map.json`
//! exactly as the parser stored them, a log of 100 MB grades, and bad input
//! (an unknown grader version or parser, a log that is not UTF-8, an
//! `exit_code` that is not a number) is one line naming the flag or file
//! while every other instance is still graded.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn sandfleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(args)
        .output()
        .expect("run sandfleet")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// A 5.0.2 row of a pytest repository.
fn row(id: &str, parser: &str) -> Value {
    json!({
        "instance_id": id,
        "repo": "pallets/flask",
        "version": "2.3",
        "FAIL_TO_PASS": ["t.py::f"],
        "PASS_TO_PASS": [],
        "log_parser": parser,
        "eval_type": "pass_and_fail",
    })
}

const LOG: &str = "+ : '>>>>> Start Test Output'\nERROR: could not import plugin\nPASSED t.py::f\n\
                   + : '>>>>> End Test Output'\n";

/// A row, its log (none: no file) and its `exit_code` file's text.
type Instance<'a> = (Value, Option<&'a [u8]>, Option<&'a str>);

/// Writes instances, predictions and each instance's log directory.
fn lay_out(dir: &Path, instances: &[Instance<'_>]) {
    let mut rows = String::new();
    let mut predictions = String::new();
    for (row, log, exit_code) in instances {
        let id = row["instance_id"].as_str().unwrap();
        rows.push_str(&format!("{row}\n"));
        predictions.push_str(&format!(
            "{}\n",
            json!({"instance_id": id, "model_name_or_path": "m", "model_patch": "diff"})
        ));
        let logs = dir.join("logs").join(id);
        std::fs::create_dir_all(&logs).unwrap();
        if let Some(log) = log {
            std::fs::write(logs.join("test_output.txt"), log).unwrap();
        }
        if let Some(exit_code) = exit_code {
            std::fs::write(logs.join("exit_code"), exit_code).unwrap();
        }
    }
    std::fs::write(dir.join("instances.jsonl"), rows).unwrap();
    std::fs::write(dir.join("predictions.jsonl"), predictions).unwrap();
}

fn grade(dir: &Path, grader_version: &str) -> Output {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    sandfleet(&[
        "grade",
        "--adapter",
        "swebench",
        "--grader-version",
        grader_version,
        "--instances",
        &path("instances.jsonl"),
        "--predictions",
        &path("predictions.jsonl"),
        "--log-dir",
        &path("logs"),
    ])
}

#[test]
fn status_map_json_holds_each_value_as_the_parser_stored_it() {
    let dir = tempfile::tempdir().unwrap();
    lay_out(
        dir.path(),
        &[(
            row("pallets__flask-1", "parse_log_pytest"),
            Some(LOG.as_bytes()),
            None,
        )],
    );
    for version in ["swebench-4.1.0", "swebench-5.0.2"] {
        let output = grade(dir.path(), version);
        assert!(output.status.success(), "{version}: {}", stderr(&output));
        let logs = dir.path().join("logs/pallets__flask-1");
        let status_map = read_json(&logs.join("status_map.json"));
        assert_eq!(
            status_map,
            json!({"could": "ERROR:", "t.py::f": "PASSED"}),
            "{version}"
        );
        let grade = read_json(&logs.join("grade.json"));
        assert_eq!(grade["status"], "passed", "{version}");
        assert_eq!(grade["reward"], 1.0, "{version}");
        assert_eq!(
            grade["tests"][0],
            json!({"name": "could", "status": "other", "value": "ERROR:"}),
            "{version}"
        );
        assert_eq!(
            grade["tests"][1],
            json!({"name": "t.py::f", "status": "passed"})
        );
    }
    let log = dir.path().join("logs/pallets__flask-1/test_output.txt");
    let output = sandfleet(&[
        "parse-log",
        "--adapter",
        "swebench",
        "--grader-version",
        "swebench-5.0.2",
        "--parser",
        "parse_log_pytest",
        log.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(printed, json!({"could": "ERROR:", "t.py::f": "PASSED"}));
}

#[test]
fn bad_instances_are_named_one_line_each_and_the_rest_are_graded() {
    let dir = tempfile::tempdir().unwrap();
    let latin1 =
        b"+ : '>>>>> Start Test Output'\nPASSED t.py::f \xe9t\xe9\n+ : '>>>>> End Test Output'\n";
    lay_out(
        dir.path(),
        &[
            (
                row("pallets__flask-1", "parse_log_pytest"),
                Some(LOG.as_bytes()),
                Some("0\n"),
            ),
            (
                row("pallets__flask-2", "parse_log_pytest"),
                Some(latin1),
                None,
            ),
            (
                row("pallets__flask-3", "parse_log_pytest"),
                Some(LOG.as_bytes()),
                Some("killed\n"),
            ),
            (
                row("pallets__flask-4", "parse_log_nope"),
                Some(LOG.as_bytes()),
                None,
            ),
        ],
    );
    let output = grade(dir.path(), "swebench-5.0.2");
    assert!(!output.status.success());
    let stderr = stderr(&output);
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(errors.len(), 3, "{stderr}");
    assert!(
        errors[0].contains("pallets__flask-2/test_output.txt") && errors[0].contains("not UTF-8"),
        "{stderr}"
    );
    assert!(
        errors[1].contains("pallets__flask-3/exit_code") && errors[1].contains("`killed`"),
        "{stderr}"
    );
    assert!(
        errors[2].contains("instances.jsonl:4") && errors[2].contains("parse_log_nope"),
        "{stderr}"
    );
    let logs = dir.path().join("logs");
    assert!(logs.join("pallets__flask-1/report.json").exists());
    for bad in ["pallets__flask-2", "pallets__flask-3", "pallets__flask-4"] {
        assert!(!logs.join(bad).join("grade.json").exists(), "{bad}");
    }
    let run_report = read_json(&logs.join("run_report.json"));
    assert_eq!(run_report["resolved_ids"], json!(["pallets__flask-1"]));
}

#[test]
fn an_unknown_grader_version_or_parser_names_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    lay_out(
        dir.path(),
        &[(
            row("pallets__flask-1", "parse_log_pytest"),
            Some(LOG.as_bytes()),
            None,
        )],
    );
    let output = grade(dir.path(), "swebench-9.9.9");
    assert!(!output.status.success());
    let stderr_text = stderr(&output);
    assert_eq!(stderr_text.lines().count(), 1, "{stderr_text}");
    assert!(
        stderr_text.contains("--grader-version swebench-9.9.9")
            && stderr_text.contains("swebench-4.1.0, swebench-5.0.2"),
        "{stderr_text}"
    );
    assert!(!dir.path().join("logs/run_report.json").exists());

    let log = dir.path().join("logs/pallets__flask-1/test_output.txt");
    let output = sandfleet(&[
        "parse-log",
        "--adapter",
        "swebench",
        "--grader-version",
        "swebench-5.0.2",
        "--parser",
        "parse_log_nope",
        log.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr_text = stderr(&output);
    assert_eq!(stderr_text.lines().count(), 1, "{stderr_text}");
    assert!(
        stderr_text.contains("--parser parse_log_nope") && stderr_text.contains("parse_log_pytest"),
        "{stderr_text}"
    );
}
