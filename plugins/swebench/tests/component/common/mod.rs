//! Shared helpers: the component, where the golden data lives, and how
//! results compare.

#![allow(
    dead_code,
    reason = "the grading benchmark includes this module and uses a subset"
)]

pub(crate) mod big_log;

use std::path::{Path, PathBuf};

use sandfleet_testkit::adapter::{CommandOutput, Script, Setting, TaskAdapter, TestTable};
use sandfleet_testkit::{CallError, CallErrorKind, TestPlugin, fixtures};
use serde_json::{Map, Value, json};

/// The grader versions, as the `grader-version` setting and the golden files
/// name them.
pub(crate) const GRADERS: [&str; 2] = ["swebench-4.1.0", "swebench-5.0.2"];

/// Where the harness puts the model patch and the eval script.
pub(crate) const PATCH_PATH: &str = "/tmp/patch.diff";
pub(crate) const EVAL_SCRIPT_PATH: &str = "/eval.sh";

/// The swebench component, on the test kit's shared host.
pub(crate) fn adapter() -> TaskAdapter {
    TestPlugin::load(sandfleet_guests::SWEBENCH)
        .expect("the swebench component loads")
        .adapter()
        .expect("swebench is a task adapter")
}

/// Settings from `key = value` pairs.
pub(crate) fn settings(pairs: &[(&str, &str)]) -> Vec<Setting> {
    pairs
        .iter()
        .map(|(key, value)| Setting {
            key: (*key).to_owned(),
            value: (*value).to_owned(),
        })
        .collect()
}

/// Just `grader-version`.
pub(crate) fn grader(version: &str) -> Vec<Setting> {
    settings(&[("grader-version", version)])
}

/// What the evaluate command printed: `log`, exit code 0.
pub(crate) fn output(log: &str) -> CommandOutput {
    fixtures::output(0, log)
}

/// The message of a call the adapter declined as invalid input; panics on
/// any other outcome (a trap, an overrun, another failure kind).
pub(crate) fn declined<T: std::fmt::Debug>(result: Result<T, CallError>) -> String {
    match result {
        Err(CallError {
            kind:
                CallErrorKind::Declined {
                    kind: "invalid-input",
                    message,
                },
            ..
        }) => message,
        other => panic!("expected an invalid-input failure, got {other:?}"),
    }
}

/// What a parser raised (`Type: message`), from `parse-log`'s failure
/// message `<parser> (<grader>) raised <Type: message> on this log`.
pub(crate) fn raised(message: &str, parser: &str, grader: &str) -> String {
    message
        .strip_prefix(&format!("{parser} ({grader}) raised "))
        .and_then(|rest| rest.strip_suffix(" on this log"))
        .unwrap_or_else(|| panic!("not a parser exception: {message}"))
        .to_owned()
}

/// The eval script `prepare` writes, as text.
pub(crate) fn eval_script(script: &Script) -> &str {
    let file = script
        .files
        .iter()
        .find(|file| file.path == EVAL_SCRIPT_PATH)
        .expect("the eval script");
    std::str::from_utf8(&file.contents).expect("a UTF-8 eval script")
}

/// The lines of a generated eval script that come from the test patch: the
/// test command with its directives (right after the last start marker) and
/// the reset of the test files (the last line).
pub(crate) fn test_command_and_reset(eval_script: &str) -> (&str, &str) {
    let lines: Vec<&str> = eval_script
        .strip_suffix('\n')
        .expect("a script ending in a newline")
        .split('\n')
        .collect();
    let start = lines
        .iter()
        .rposition(|line| *line == ": '>>>>> Start Test Output'")
        .expect("the start marker");
    (lines[start + 1], lines[lines.len() - 1])
}

/// `shared/data/swebench`, next to the repo checkout.
pub(crate) fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/swebench")
}

pub(crate) fn golden(folder: &str) -> PathBuf {
    data_dir().join("golden").join(folder)
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

pub(crate) fn read_json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The rows of `instances-sample.jsonl`.
pub(crate) fn sample_rows() -> Vec<Value> {
    read(&data_dir().join("instances-sample.jsonl"))
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON row"))
        .collect()
}

pub(crate) fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    entries
}

pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

/// Test results as the status map the harness builds, order included, each
/// status exactly as the parser recorded it.
pub(crate) fn status_map(tests: &TestTable) -> Value {
    let entries: Map<String, Value> = tests
        .iter()
        .map(|test| (test.name.to_owned(), json!(test.value)))
        .collect();
    assert_eq!(entries.len(), tests.len(), "a test is listed twice");
    Value::Object(entries)
}

/// An exception as comparable to a golden `{"exception": {type, message, ..}}`.
pub(crate) fn exception_json(raised: &str) -> Value {
    let (kind, message) = raised.split_once(": ").expect("`Type: message`");
    json!({ "exception": { "type": kind, "message": message } })
}

/// The golden result without the Python traceback, which has no Rust equivalent.
pub(crate) fn comparable_result(expected: &Value) -> Value {
    match expected.get("exception") {
        Some(exception) => {
            json!({ "exception": { "type": exception["type"], "message": exception["message"] } })
        }
        None => expected.clone(),
    }
}

/// Equal as JSON values and in object key order (serde_json keeps insertion
/// order here, with `preserve_order`, so the rendered text differs when the
/// order does).
pub(crate) fn assert_same_json(got: &Value, want: &Value, context: &str) {
    assert_eq!(got, want, "{context}");
    assert_eq!(got.to_string(), want.to_string(), "{context}: key order");
}
