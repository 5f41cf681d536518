//! A loaded task, and the adapter-private state it carries between calls.

use serde::{Deserialize, Serialize};

use crate::error::InvalidInput;
use crate::grader::GraderVersion;
use crate::grading::EvalType;
use crate::parsers::ParserName;

/// Where every SWE-bench image has the repo checked out.
pub(crate) const WORKDIR: &str = "/testbed";

/// A task as the host sees it (the WIT `task`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Task {
    /// The instance id.
    pub(crate) id: String,
    /// The image the instance runs in.
    pub(crate) image: String,
    /// Where commands run.
    pub(crate) workdir: String,
    /// [`TaskData`] as JSON.
    pub(crate) data: String,
}

/// Everything `prepare` and `grade` need, fixed at `load`: the row's fields
/// (named as in the dataset) with the version-specific choices already made,
/// and the settings later calls cannot see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaskData {
    /// The harness the task is graded like.
    pub(crate) grader: GraderVersion,
    /// `instance_id`.
    pub(crate) instance_id: String,
    /// `repo`, e.g. `django/django`.
    pub(crate) repo: String,
    /// `version`, always as text (`"0.20"`).
    pub(crate) version: String,
    /// `FAIL_TO_PASS`, decoded.
    #[serde(rename = "FAIL_TO_PASS")]
    pub(crate) fail_to_pass: Vec<String>,
    /// `PASS_TO_PASS`, decoded.
    #[serde(rename = "PASS_TO_PASS")]
    pub(crate) pass_to_pass: Vec<String>,
    /// The parser grading uses: 4.1.0's choice by repo, or 5.x's `log_parser`.
    pub(crate) log_parser: ParserName,
    /// The eval type grading uses: 4.1.0's choice by repo, or 5.x's `eval_type`.
    pub(crate) eval_type: EvalType,
    /// `base_commit`, needed to generate an eval script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) base_commit: Option<String>,
    /// `test_patch`, needed to generate an eval script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) test_patch: Option<String>,
    /// The 5.x `eval_script` column, when the row has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) eval_script: Option<String>,
    /// The `timeout-s` setting.
    pub(crate) timeout_s: u64,
    /// The `evaluation` setting.
    #[serde(default)]
    pub(crate) evaluation: crate::settings::Evaluation,
}

impl TaskData {
    /// Reads a task's `data`.
    ///
    /// # Errors
    ///
    /// When `data` was not written by this adapter's `load`.
    pub(crate) fn decode(task: &Task) -> Result<Self, InvalidInput> {
        serde_json::from_str(&task.data).map_err(|error| {
            InvalidInput::new(format!(
                "task `{}`: data is not a swebench task loaded by this adapter ({error})",
                task.id
            ))
        })
    }

    /// The JSON stored in [`Task::data`].
    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self).expect("task data is plain JSON")
    }
}
