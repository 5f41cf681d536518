//! `{{name}}`: a sandfleet task adapter for JSONL rows such as
//! `{"id": "calc-add", "image": "calc", "test": "python3 -m unittest"}`.
//! A solution is a patch applied with `git apply`; the task passes when the
//! test command exits 0.

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::adapter::{
    AdapterInfo, Command, CommandOutput, EvaluationSite, File, GradeResult, GradeStatus, Graded,
    Script, Setting, Task, TaskAdapter, TestTable, TimeoutRule,
};
use serde_json::{Value, json};

const WORKDIR: &str = "/workspace";
const PATCH: &str = "/tmp/solution.patch";

struct Adapter;

fn shell(script: &str) -> Command {
    Command {
        argv: vec!["bash".to_string(), "-c".to_string(), script.to_string()],
        timeout_ms: 600_000,
        merge_stderr: true,
    }
}

fn field<'a>(row: &'a Value, key: &str) -> Result<&'a str, Failure> {
    row.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Failure::invalid_input(format!("the row has no string `{key}`")))
}

impl TaskAdapter for Adapter {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "{{name}}".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            summary: "JSONL rows naming an image and a test command".to_string(),
            settings: Vec::new(),
        }
    }

    fn load(row: String, _settings: Vec<Setting>) -> Result<Task, Failure> {
        let parsed: Value = serde_json::from_str(&row)
            .map_err(|e| Failure::invalid_input(format!("the row is not JSON: {e}")))?;
        let test = field(&parsed, "test")?;
        Ok(Task {
            id: field(&parsed, "id")?.to_string(),
            image: field(&parsed, "image")?.to_string(),
            workdir: WORKDIR.to_string(),
            data: json!({ "test": test }).to_string(),
        })
    }

    fn prepare(task: Task, solution: Option<String>) -> Result<Script, Failure> {
        let data: Value = serde_json::from_str(&task.data)
            .map_err(|e| Failure::internal(format!("task data: {e}")))?;
        let test = field(&data, "test")?;
        let mut files = Vec::new();
        let mut setup = Vec::new();
        if let Some(patch) = solution.filter(|patch| !patch.trim().is_empty()) {
            files.push(File {
                path: PATCH.to_string(),
                contents: patch.into_bytes(),
                mode: 0o644,
            });
            setup.push(shell(&format!("git apply {PATCH}")));
        }
        Ok(Script {
            files,
            setup,
            evaluate: vec![shell(test)],
            env: Vec::new(),
            workdir: task.workdir,
            timeout_rule: TimeoutRule::Fail,
            evaluate_in: EvaluationSite::WorkSandbox,
        })
    }

    fn grade(
        _task: Task,
        _solution: Option<String>,
        outputs: Vec<CommandOutput>,
    ) -> Result<GradeResult, Failure> {
        let passed = outputs.last().is_some_and(|test| test.exit_code == 0);
        let status = if passed {
            GradeStatus::Passed
        } else {
            GradeStatus::Failed
        };
        Ok(GradeResult {
            status,
            reward: Some(if passed { 1.0 } else { 0.0 }),
            tests: empty_table(),
            report: json!({ "passed": passed }).to_string(),
            detail: String::new(),
            infra: None,
        })
    }

    fn parse_log(
        _parser: String,
        _log: String,
        _settings: Vec<Setting>,
    ) -> Result<TestTable, Failure> {
        Ok(empty_table())
    }

    fn summarize(results: Vec<Graded>, _settings: Vec<Setting>) -> Result<String, Failure> {
        let passed = results
            .iter()
            .filter(|graded| graded.status == GradeStatus::Passed)
            .count();
        Ok(json!({ "total": results.len(), "passed": passed }).to_string())
    }
}

fn empty_table() -> TestTable {
    TestTable {
        names: String::new(),
        name_ends: Vec::new(),
        statuses: Vec::new(),
        status_values: Vec::new(),
        status_kinds: Vec::new(),
    }
}

sandfleet_plugin_sdk::task_adapter!(Adapter);
