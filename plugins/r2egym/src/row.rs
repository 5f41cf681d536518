//! Dataset rows into tasks.
//!
//! R2E-Gym rows (`R2E-Gym/R2E-Gym-Lite`, `R2E-Gym-Subset`, ...) carry
//! `repo_name`, `docker_image`, `commit_hash`, `parsed_commit_content`,
//! `expected_output_json` (a JSON object encoded as a string), the prompt and
//! problem statement, and analysis columns the adapter does not need. They
//! have no `instance_id`: the commit hash names the task unless a derived
//! dataset adds one. Like `DockerRuntime.__init__`, the adapter falls back to
//! `image_name` for the image and `repo` for the repository name.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::reward::ExpectedField;
use crate::script::{HIDDEN_FROM_REPO, REPO_PATH};
use crate::settings::{Grading, Settings};
use crate::{Failure, Setting, Task};

/// What the adapter keeps in `task.data` (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaskData {
    /// `f"{repo_name}"`, as R2E-Gym hands it to `parse_log_fn`.
    pub(crate) repo_name: String,
    /// As in the row: R2E-Gym decodes it at grading time, and raises there
    /// when it cannot.
    pub(crate) expected_output_json: ExpectedField,
    pub(crate) grading: Grading,
    /// Read by the `git-restore` reset check: the untracked entries of the
    /// repository that setup moves away on purpose, so a recycled sandbox
    /// without them is still clean.
    pub(crate) git_restore: GitRestoreHints,
}

/// The part of `task.data` meant for the `git-restore` reset check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GitRestoreHints {
    pub(crate) may_vanish: Vec<String>,
}

impl TaskData {
    /// Reads the data `load` stored in `task`.
    pub(crate) fn of(task: &Task) -> Result<TaskData, Failure> {
        serde_json::from_str(&task.data).map_err(|error| {
            Failure::invalid_input(format!(
                "task `{}` has no r2egym data (was it loaded by another adapter?): {error}",
                task.id
            ))
        })
    }
}

/// Reads one dataset row (a JSON object) into a task.
pub(crate) fn load(row: &str, settings: &[Setting]) -> Result<Task, Failure> {
    let settings = Settings::parse(settings)?;
    let row: Map<String, Value> = serde_json::from_str(row).map_err(|error| {
        Failure::invalid_input(format!("the row is not a JSON object: {error}"))
    })?;
    let fields = Fields(&row);

    let id = fields.first_string(&["instance_id", "commit_hash"])?;
    let image = fields.first_string(&["docker_image", "image_name"])?;
    reject_other_harnesses(&image)?;
    // Any value: R2E-Gym formats it into a string and only raises when
    // grading, where no parser matches it.
    let repo_name = fields.first_python_str(&["repo_name", "repo"])?;
    // Checked because R2E-Gym decodes it when it builds the runtime; only its
    // shape matters here, so the (often large) values are skipped, not built.
    let parsed_commit = fields.first_string(&["parsed_commit_content"])?;
    serde_json::from_str::<BTreeMap<String, IgnoredAny>>(&parsed_commit).map_err(|error| {
        Failure::invalid_input(format!(
            "`parsed_commit_content` is not a JSON object: {error}"
        ))
    })?;
    // Read only when grading, as R2E-Gym reads it, so what it cannot decode
    // fails that grade, not the load.
    let expected_output_json = match row.get("expected_output_json") {
        None => ExpectedField::Missing,
        Some(Value::String(text)) => ExpectedField::Text(text.clone()),
        Some(other) => ExpectedField::NotText(python_type(other).to_owned()),
    };

    let data = TaskData {
        repo_name,
        expected_output_json,
        grading: settings.grading,
        git_restore: GitRestoreHints {
            may_vanish: HIDDEN_FROM_REPO
                .iter()
                .map(|&name| name.to_owned())
                .collect(),
        },
    };
    Ok(Task {
        id,
        image,
        workdir: REPO_PATH.to_owned(),
        data: serde_json::to_string(&data)
            .map_err(|error| Failure::internal(format!("cannot encode the task data: {error}")))?,
    })
}

/// R2E-Gym grades SWE-bench and SWE-smith images with those harnesses, not
/// with the exact-map reward; they belong to their own adapters.
fn reject_other_harnesses(image: &str) -> Result<(), Failure> {
    for harness in ["swebench", "swesmith"] {
        if image.contains(harness) {
            return Err(Failure::invalid_input(format!(
                "`docker_image` `{image}` is a {harness} image, which R2E-Gym grades with the \
                 {harness} harness; use that adapter"
            )));
        }
    }
    Ok(())
}

struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    /// `f"{value}"` of the first of `names` the row has.
    fn first_python_str(&self, names: &[&str]) -> Result<String, Failure> {
        let value = names
            .iter()
            .find_map(|name| self.0.get(*name))
            .ok_or_else(|| {
                let listed = names
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>();
                Failure::invalid_input(format!("the row has no {}", listed.join(" or ")))
            })?;
        Ok(match value {
            Value::String(text) => text.clone(),
            Value::Null => "None".to_owned(),
            Value::Bool(true) => "True".to_owned(),
            Value::Bool(false) => "False".to_owned(),
            // Python spells containers differently; only the message shows it.
            other => other.to_string(),
        })
    }

    /// The first of `names` the row has, which must be a non-empty string.
    fn first_string(&self, names: &[&str]) -> Result<String, Failure> {
        let Some((name, value)) = names
            .iter()
            .find_map(|name| self.0.get(*name).map(|value| (name, value)))
        else {
            let listed = names
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(" or ");
            return Err(Failure::invalid_input(format!("the row has no {listed}")));
        };
        match value {
            Value::String(text) if !text.is_empty() => Ok(text.clone()),
            Value::String(_) => Err(Failure::invalid_input(format!("`{name}` is empty"))),
            other => Err(Failure::invalid_input(format!(
                "`{name}` must be a string, not {}",
                json_kind(other)
            ))),
        }
    }
}

/// The Python type `json.loads` makes of `value`.
fn python_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row() -> Value {
        json!({
            "repo_name": "pandas",
            "docker_image": "namanjain12/pandas_final:0a1b2c",
            "commit_hash": "0a1b2c",
            "parsed_commit_content": "{\"file_diffs\": []}",
            "expected_output_json": "{\"test_a\": \"PASSED\"}",
            "problem_statement": "Fix it",
        })
    }

    fn load_value(row: &Value) -> Result<Task, Failure> {
        load(&row.to_string(), &[])
    }

    #[test]
    fn a_row_becomes_a_task_in_testbed() {
        let task = load_value(&row()).unwrap();
        assert_eq!(task.id, "0a1b2c");
        assert_eq!(task.image, "namanjain12/pandas_final:0a1b2c");
        assert_eq!(task.workdir, "/testbed");
        let data = TaskData::of(&task).unwrap();
        assert_eq!(data.repo_name, "pandas");
        assert_eq!(data.grading, Grading::InPlace);
        assert_eq!(data.git_restore.may_vanish, ["run_tests.sh", "r2e_tests"]);
        assert_eq!(
            data.expected_output_json,
            ExpectedField::Text(r#"{"test_a": "PASSED"}"#.into())
        );
    }

    #[test]
    fn fallbacks_follow_r2e_gym() {
        let mut row = row();
        let fields = row.as_object_mut().unwrap();
        fields.insert("instance_id".into(), json!("pandas-1"));
        let image = fields.remove("docker_image").unwrap();
        fields.insert("image_name".into(), image);
        let repo = fields.remove("repo_name").unwrap();
        fields.insert("repo".into(), repo);
        let task = load_value(&row).unwrap();
        assert_eq!(task.id, "pandas-1");
        assert_eq!(task.image, "namanjain12/pandas_final:0a1b2c");
        assert_eq!(TaskData::of(&task).unwrap().repo_name, "pandas");
    }

    #[test]
    fn the_grading_setting_is_kept_in_the_task() {
        let fresh = [Setting {
            key: "grading".into(),
            value: "fresh".into(),
        }];
        let task = load(&row().to_string(), &fresh).unwrap();
        assert_eq!(TaskData::of(&task).unwrap().grading, Grading::Fresh);
    }

    /// What R2E-Gym reads only when computing a reward loads whatever it
    /// holds; grading raises where R2E-Gym does (`reward::decode_expected`,
    /// `reward::check_parser`).
    #[test]
    fn fields_r2e_gym_reads_when_grading_load_as_they_are() {
        let cases = [
            ("expected_output_json", json!("[1]"), None),
            ("expected_output_json", json!({"a": 1}), None),
            ("expected_output_json", Value::Null, None),
            ("repo_name", json!(""), Some("")),
            ("repo_name", json!(null), Some("None")),
            ("repo_name", json!(7), Some("7")),
        ];
        for (field, value, repo_name) in cases {
            let mut row = row();
            row[field] = value.clone();
            let data = TaskData::of(&load_value(&row).unwrap()).unwrap();
            match repo_name {
                Some(name) => assert_eq!(data.repo_name, name, "{value}"),
                None => assert_eq!(
                    data.expected_output_json,
                    match &value {
                        Value::String(text) => ExpectedField::Text(text.clone()),
                        other => ExpectedField::NotText(python_type(other).into()),
                    }
                ),
            }
        }
        let mut row = row();
        row.as_object_mut().unwrap().remove("expected_output_json");
        let data = TaskData::of(&load_value(&row).unwrap()).unwrap();
        assert_eq!(data.expected_output_json, ExpectedField::Missing);
    }

    #[test]
    fn malformed_rows_name_the_field() {
        let cases: [(&str, Value, &str); 4] = [
            ("docker_image", Value::Null, "`image_name`"),
            (
                "parsed_commit_content",
                json!("{"),
                "`parsed_commit_content`",
            ),
            ("repo_name", Value::Null, "`repo_name` or `repo`"),
            (
                "commit_hash",
                json!(7),
                "`commit_hash` must be a string, not a number",
            ),
        ];
        for (field, value, named) in cases {
            let mut row = row();
            if value.is_null() {
                row.as_object_mut().unwrap().remove(field);
            } else {
                row[field] = value;
            }
            let failure = load_value(&row).unwrap_err();
            assert_eq!(
                failure.kind,
                sandfleet_plugin_sdk::FailureKind::InvalidInput
            );
            assert!(
                failure.message.contains(named),
                "{field}: {}",
                failure.message
            );
        }
    }

    #[test]
    fn swebench_images_are_refused() {
        let mut row = row();
        row["docker_image"] =
            json!("slimshetty/swebench-verified:sweb.eval.x86_64.astropy__astropy-12907");
        let failure = load_value(&row).unwrap_err();
        assert!(failure.message.contains("swebench"), "{}", failure.message);
    }

    #[test]
    fn a_row_that_is_not_an_object_is_refused() {
        assert!(load("[]", &[]).unwrap_err().message.contains("JSON object"));
    }
}
