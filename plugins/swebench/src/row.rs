//! Dataset rows into tasks.
//!
//! Rows are read the way the harness reads them: `FAIL_TO_PASS` and
//! `PASS_TO_PASS` may be lists or JSON-encoded strings, and `version` is
//! text (a numeric `version` keeps its literal digits, so `0.20` does not
//! become `0.2`). Which columns matter depends on the grader: 4.1.0 derives
//! the parser and eval type from `repo` and ignores the 5.x columns; 5.0.2
//! reads `image`, `eval_script`, `log_parser` and `eval_type` from the row,
//! falling back to the 4.1.0 derivation for rows that predate them.

use std::collections::HashMap;

use serde_json::value::RawValue;

use crate::error::InvalidInput;
use crate::grader::GraderVersion;
use crate::grading::EvalType;
use crate::image::instance_image;
use crate::parsers::ParserName;
use crate::settings::Settings;
use crate::spec;
use crate::task::{Task, TaskData, WORKDIR};

/// `load`: reads one dataset row into a task.
///
/// # Errors
///
/// When the row is not a JSON object, a field is missing or malformed, or
/// (4.1.0) the repo/version is not in the spec table; the message names the
/// field and the instance.
pub(crate) fn load(row: &str, settings: &Settings) -> Result<Task, InvalidInput> {
    let row = Row::parse(row)?;
    let instance_id = row.required_string("instance_id")?;
    let repo = row.required_string("repo")?;
    let version = row.version()?;
    let grader = settings.grader;
    // 4.1.0 picks by repo and ignores the 5.x columns; 5.0.2 reads them.
    let (log_parser, eval_type, image, eval_script) = match grader {
        GraderVersion::V4_1_0 => {
            let (repo_spec, _) =
                spec::lookup(&repo, &version).map_err(|error| row.error(&error.0))?;
            let eval_type = EvalType::from_fail_only(repo_spec.fail_only);
            (repo_spec.log_parser, eval_type, None, None)
        }
        GraderVersion::V5_0_2 => (
            row.log_parser(&repo)?,
            row.eval_type(&repo)?,
            row.optional_string("image")?,
            row.optional_string("eval_script")?,
        ),
    };
    let image = image.unwrap_or_else(|| {
        let namespace = settings.namespace.as_deref();
        instance_image(
            grader,
            &instance_id,
            namespace,
            settings.arch,
            &settings.tag,
        )
    });
    // 4.1.0 treats a row without the lists as a validation instance; 5.0.2 requires them.
    let lists_required = grader == GraderVersion::V5_0_2;
    let data = TaskData {
        grader,
        instance_id: instance_id.clone(),
        repo,
        version,
        fail_to_pass: row.test_list("FAIL_TO_PASS", lists_required)?,
        pass_to_pass: row.test_list("PASS_TO_PASS", lists_required)?,
        log_parser,
        eval_type,
        base_commit: row.optional_string("base_commit")?,
        test_patch: row.optional_string("test_patch")?,
        eval_script,
        timeout_s: settings.timeout_s,
        evaluation: settings.evaluation,
    };
    Ok(Task {
        id: instance_id,
        image,
        workdir: WORKDIR.to_owned(),
        data: data.encode(),
    })
}

/// A row's fields, unparsed until asked for, and its id for error messages.
struct Row<'a> {
    fields: HashMap<String, &'a RawValue>,
    instance_id: Option<String>,
}

impl<'a> Row<'a> {
    fn parse(row: &'a str) -> Result<Self, InvalidInput> {
        let fields: HashMap<String, &RawValue> = serde_json::from_str(row)
            .map_err(|error| InvalidInput::new(format!("row is not a JSON object: {error}")))?;
        let instance_id = fields
            .get("instance_id")
            .and_then(|raw| serde_json::from_str(raw.get()).ok());
        Ok(Self {
            fields,
            instance_id,
        })
    }

    fn error(&self, message: &str) -> InvalidInput {
        match &self.instance_id {
            Some(id) => InvalidInput::new(format!("instance `{id}`: {message}")),
            None => InvalidInput::new(format!("row: {message}")),
        }
    }

    /// The field, unless it is missing or `null` (the harness's `.get()`).
    fn raw(&self, field: &str) -> Option<&'a str> {
        self.fields
            .get(field)
            .map(|raw| raw.get())
            .filter(|raw| *raw != "null")
    }

    fn optional_string(&self, field: &str) -> Result<Option<String>, InvalidInput> {
        self.raw(field)
            .map(|raw| {
                serde_json::from_str(raw)
                    .map_err(|_| self.error(&format!("field `{field}` must be a string")))
            })
            .transpose()
    }

    fn required_string(&self, field: &str) -> Result<String, InvalidInput> {
        self.optional_string(field)?
            .ok_or_else(|| self.error(&format!("field `{field}` is missing")))
    }

    /// `version` as text: a string as is, a number as written.
    fn version(&self) -> Result<String, InvalidInput> {
        let raw = self
            .raw("version")
            .ok_or_else(|| self.error("field `version` is missing"))?;
        match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(serde_json::Value::String(version)) => Ok(version),
            Ok(serde_json::Value::Number(_)) => Ok(raw.to_owned()),
            _ => Err(self.error("field `version` must be a string (or a number)")),
        }
    }

    /// A list of test ids, given as a list or as a JSON-encoded list.
    fn test_list(&self, field: &str, required: bool) -> Result<Vec<String>, InvalidInput> {
        let Some(raw) = self.raw(field) else {
            return if required {
                Err(self.error(&format!("field `{field}` is missing")))
            } else {
                Ok(Vec::new())
            };
        };
        let encoded: Option<String> = serde_json::from_str(raw).ok();
        serde_json::from_str(encoded.as_deref().unwrap_or(raw)).map_err(|_| {
            self.error(&format!(
                "field `{field}` must be a list of test ids or a JSON string holding one"
            ))
        })
    }

    /// The 5.x `log_parser`, or the parser 4.1.0 picks for `repo`.
    fn log_parser(&self, repo: &str) -> Result<ParserName, InvalidInput> {
        match self.optional_string("log_parser")? {
            Some(name) => ParserName::from_registry_name(&name).ok_or_else(|| {
                self.error(&format!(
                    "field `log_parser` names `{name}`, which this adapter does not implement; it has: {}",
                    ParserName::registry_names().collect::<Vec<_>>().join(", ")
                ))
            }),
            None => spec::repo_spec(repo).map(|spec| spec.log_parser).ok_or_else(|| {
                self.error(&format!("field `log_parser` is missing and repo `{repo}` has no default parser"))
            }),
        }
    }

    /// The 5.x `eval_type`, or the one 4.1.0 picks for `repo`.
    fn eval_type(&self, repo: &str) -> Result<EvalType, InvalidInput> {
        match self.optional_string("eval_type")? {
            Some(name) => EvalType::parse(&name).ok_or_else(|| {
                self.error(&format!(
                    "field `eval_type` must be `pass_and_fail` or `fail_only`, not `{name}`"
                ))
            }),
            None => Ok(EvalType::from_fail_only(
                spec::repo_spec(repo).is_some_and(|spec| spec.fail_only),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(grader: &str) -> Settings {
        Settings::parse(&[("grader-version", grader)]).unwrap()
    }

    fn data(task: &Task) -> TaskData {
        TaskData::decode(task).unwrap()
    }

    const ROW: &str = r#"{"instance_id": "pallets__flask-1", "repo": "pallets/flask", "version": "2.3",
        "FAIL_TO_PASS": "[\"t.py::a\"]", "PASS_TO_PASS": ["t.py::b"], "log_parser": "parse_log_django"}"#;

    #[test]
    fn lists_may_be_json_strings_and_4_1_0_ignores_log_parser() {
        let task = load(ROW, &settings("swebench-4.1.0")).unwrap();
        assert_eq!(
            task.image,
            "swebench/sweb.eval.x86_64.pallets_1776_flask-1:latest"
        );
        assert_eq!(task.workdir, "/testbed");
        let data = data(&task);
        assert_eq!(data.fail_to_pass, ["t.py::a"]);
        assert_eq!(data.pass_to_pass, ["t.py::b"]);
        assert_eq!(data.log_parser, ParserName::Pytest);
    }

    #[test]
    fn five_x_reads_the_task_columns() {
        let row = ROW.replace('}', r#", "eval_type": "fail_only", "image": "my/image:1"}"#);
        let task = load(&row, &settings("swebench-5.0.2")).unwrap();
        assert_eq!(task.image, "my/image:1");
        assert_eq!(data(&task).log_parser, ParserName::Django);
        assert_eq!(data(&task).eval_type, EvalType::FailOnly);
    }

    #[test]
    fn numeric_versions_keep_their_digits() {
        let row = r#"{"instance_id": "x__y-1", "repo": "r/r", "version": 0.20, "FAIL_TO_PASS": [], "PASS_TO_PASS": [],
            "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}"#;
        assert_eq!(
            data(&load(row, &settings("swebench-5.0.2")).unwrap()).version,
            "0.20"
        );
    }

    #[test]
    fn errors_name_the_field_and_the_instance() {
        let error = |row: &str, grader| load(row, &settings(grader)).unwrap_err().0;
        assert_eq!(
            error("[1]", "swebench-4.1.0").split(':').next(),
            Some("row is not a JSON object")
        );
        assert_eq!(
            error(r#"{"repo": "a/b"}"#, "swebench-4.1.0"),
            "row: field `instance_id` is missing"
        );
        let bad_list = ROW.replace(r#"["t.py::b"]"#, "7");
        assert!(
            error(&bad_list, "swebench-4.1.0")
                .starts_with("instance `pallets__flask-1`: field `PASS_TO_PASS`")
        );
        let unknown_version = ROW.replace("2.3", "9.9");
        let message = error(&unknown_version, "swebench-4.1.0");
        assert!(
            message.contains("pallets/flask") && message.contains("`9.9`"),
            "{message}"
        );
        let unknown_parser = ROW.replace("parse_log_django", "parse_log_jest");
        assert!(
            error(&unknown_parser, "swebench-5.0.2")
                .contains("field `log_parser` names `parse_log_jest`")
        );
        let no_lists = r#"{"instance_id": "a__b-1", "repo": "pallets/flask", "version": "2.3"}"#;
        assert!(error(no_lists, "swebench-5.0.2").contains("field `FAIL_TO_PASS` is missing"));
        assert!(load(no_lists, &settings("swebench-4.1.0")).is_ok());
    }
}
