//! Rows: parsing with errors that name the field, and the normalized form
//! kept in `task.data`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use sandfleet_plugin_sdk::types::{Failure, Setting, Task};

use crate::{DEFAULT_TIMEOUT_S, DEFAULT_WORKDIR};

/// A row after validation and defaults.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// The task's id (`id`).
    pub id: String,
    /// The image its sandbox runs (`image`).
    pub image: String,
    /// The shell command whose exit code grades the task (`test`).
    pub test: String,
    /// Shell commands run before the agent starts (`setup`).
    pub setup: Vec<String>,
    /// The exit code of a passing test command (`expected_exit`, default 0).
    pub expected_exit: i32,
    /// The timeout of each setup command and of the test command, in
    /// seconds (`timeout_s`, else the `timeout-s` setting).
    pub timeout_s: u64,
    /// Where the commands run (`workdir`, else the `workdir` setting).
    pub workdir: String,
    /// Environment variables for every command (`env`).
    pub env: BTreeMap<String, String>,
}

/// Defaults from the adapter's settings.
pub(crate) struct Defaults {
    workdir: String,
    timeout_s: u64,
}

impl Defaults {
    pub(crate) fn from_settings(settings: &[Setting]) -> Result<Self, Failure> {
        let mut defaults = Defaults {
            workdir: DEFAULT_WORKDIR.to_string(),
            timeout_s: DEFAULT_TIMEOUT_S,
        };
        for setting in settings {
            match setting.key.as_str() {
                "workdir" => defaults.workdir = setting.value.clone(),
                "timeout-s" => {
                    defaults.timeout_s = setting.value.parse().map_err(|_| {
                        Failure::invalid_input(format!(
                            "setting `timeout-s` must be a whole number of seconds, not `{}`",
                            setting.value
                        ))
                    })?
                }
                other => {
                    return Err(Failure::invalid_input(format!(
                        "unknown setting `{other}` (settings: workdir, timeout-s)"
                    )));
                }
            }
        }
        Ok(defaults)
    }
}

impl Row {
    /// Parses one JSONL row.
    pub(crate) fn parse(text: &str, defaults: &Defaults) -> Result<Row, Failure> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Failure::invalid_input(format!("not valid JSON: {e}")))?;
        let Value::Object(fields) = value else {
            return Err(Failure::invalid_input("a row must be a JSON object"));
        };
        let id = required_string(&fields, "id", None)?;
        let known = [
            "id",
            "image",
            "test",
            "setup",
            "expected_exit",
            "timeout_s",
            "workdir",
            "env",
        ];
        if let Some(unknown) = fields.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(Failure::invalid_input(format!(
                "row `{id}`: unknown field `{unknown}` (fields: {})",
                known.join(", ")
            )));
        }
        let context = Some(id.as_str());
        let row = Row {
            image: required_string(&fields, "image", context)?,
            test: required_string(&fields, "test", context)?,
            setup: match fields.get("setup") {
                None => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| item.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or_else(|| field_error(context, "setup", "must be a list of strings"))?,
                Some(_) => return Err(field_error(context, "setup", "must be a list of strings")),
            },
            expected_exit: match fields.get("expected_exit") {
                None => 0,
                Some(value) => value
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| field_error(context, "expected_exit", "must be an integer"))?,
            },
            timeout_s: match fields.get("timeout_s") {
                None => defaults.timeout_s,
                Some(value) => value.as_u64().filter(|&s| s > 0).ok_or_else(|| {
                    field_error(context, "timeout_s", "must be a positive integer")
                })?,
            },
            workdir: match fields.get("workdir") {
                None => defaults.workdir.clone(),
                Some(Value::String(dir)) if dir.starts_with('/') => dir.clone(),
                Some(_) => return Err(field_error(context, "workdir", "must be an absolute path")),
            },
            env: match fields.get("env") {
                None => BTreeMap::new(),
                Some(Value::Object(vars)) => vars
                    .iter()
                    .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect::<Option<_>>()
                    .ok_or_else(|| field_error(context, "env", "must map names to strings"))?,
                Some(_) => return Err(field_error(context, "env", "must map names to strings")),
            },
            id,
        };
        Ok(row)
    }

    /// The row kept in a task by `load`.
    pub(crate) fn from_task(task: &Task) -> Result<Row, Failure> {
        serde_json::from_str(&task.data).map_err(|e| {
            Failure::invalid_input(format!(
                "task `{}` was not loaded by this adapter: {e}",
                task.id
            ))
        })
    }
}

fn required_string(
    fields: &Map<String, Value>,
    name: &str,
    id: Option<&str>,
) -> Result<String, Failure> {
    match fields.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(field_error(id, name, "must be a non-empty string")),
        None => Err(field_error(id, name, "is missing")),
    }
}

fn field_error(id: Option<&str>, field: &str, problem: &str) -> Failure {
    match id {
        Some(id) => Failure::invalid_input(format!("row `{id}`: field `{field}` {problem}")),
        None => Failure::invalid_input(format!("field `{field}` {problem}")),
    }
}
