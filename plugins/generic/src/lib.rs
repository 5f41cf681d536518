//! `generic`: a task adapter for plain JSONL datasets, so sandfleet is
//! useful before a dataset has an adapter of its own.
//!
//! A row:
//!
//! ```json
//! {"id": "calc-add", "image": "calc", "test": "python3 -m unittest -v",
//!  "setup": ["make"], "expected_exit": 0, "timeout_s": 60,
//!  "workdir": "/workspace", "env": {"PYTHONHASHSEED": "0"}}
//! ```
//!
//! `id`, `image` and `test` are required. A solution is a patch: it is
//! written to [`SOLUTION_PATH`] and applied with `git apply` before the test
//! runs. The task passes when the test command exits with `expected_exit`; a
//! patch that does not apply is an error (the task could not be evaluated);
//! a test that overruns its timeout fails.

mod row;
mod tests_parse;

// Contract 0.1.0's adapter: the component keeps loading in hosts that serve
// only 0.1.0.
use sandfleet_plugin_sdk::types::{Command, CommandOutput, Failure, Setting, Task};
use sandfleet_plugin_sdk::v0_1_0::adapter::exports::sandfleet::plugin::adapter::{
    AdapterInfo, File, GradeResult, GradeStatus, Graded, Guest, Script, SettingInfo, SolutionState,
    TestResult, TimeoutRule,
};

pub use row::Row;

/// Where the solution patch is written inside the sandbox.
pub const SOLUTION_PATH: &str = "/tmp/sandfleet/solution.patch";

const DEFAULT_WORKDIR: &str = "/workspace";
const DEFAULT_TIMEOUT_S: u64 = 600;
const APPLY_TIMEOUT_MS: u64 = 60_000;

struct Generic;

impl Guest for Generic {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "generic".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            summary: "JSONL rows naming an image, setup commands, a test command and its expected exit code".to_string(),
            settings: vec![
                SettingInfo {
                    key: "workdir".to_string(),
                    summary: "working directory of rows that name none".to_string(),
                    default_value: Some(DEFAULT_WORKDIR.to_string()),
                },
                SettingInfo {
                    key: "timeout-s".to_string(),
                    summary: "test timeout in seconds for rows that name none".to_string(),
                    default_value: Some(DEFAULT_TIMEOUT_S.to_string()),
                },
            ],
        }
    }

    fn load(row: String, settings: Vec<Setting>) -> Result<Task, Failure> {
        let defaults = row::Defaults::from_settings(&settings)?;
        let row = Row::parse(&row, &defaults)?;
        Ok(Task {
            id: row.id.clone(),
            image: row.image.clone(),
            workdir: row.workdir.clone(),
            data: serde_json::to_string(&row).expect("rows serialize"),
        })
    }

    fn prepare(task: Task, solution: Option<String>) -> Result<Script, Failure> {
        let row = Row::from_task(&task)?;
        let mut files = Vec::new();
        let mut evaluate = Vec::new();
        if let Some(patch) = solution.filter(|s| !s.is_empty()) {
            files.push(File {
                path: SOLUTION_PATH.to_string(),
                contents: patch.into_bytes(),
                mode: 0o644,
            });
            evaluate.push(Command {
                argv: ["git", "apply", "--whitespace=nowarn", SOLUTION_PATH]
                    .map(String::from)
                    .to_vec(),
                timeout_ms: APPLY_TIMEOUT_MS,
                merge_stderr: false,
            });
        }
        evaluate.push(shell(&row.test, row.timeout_s * 1000));
        Ok(Script {
            files,
            setup: row
                .setup
                .iter()
                .map(|cmd| shell(cmd, row.timeout_s * 1000))
                .collect(),
            evaluate,
            env: row
                .env
                .iter()
                .map(|(key, value)| Setting {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            workdir: row.workdir,
            timeout_rule: TimeoutRule::Fail,
        })
    }

    fn grade(
        task: Task,
        solution: Option<String>,
        outputs: Vec<CommandOutput>,
    ) -> Result<GradeResult, Failure> {
        let row = Row::from_task(&task)?;
        // Two outputs (apply, test) from a run with a solution; one (the
        // test) from a run without, or for a saved log.
        let applied = outputs.len() == 2 && solution.as_deref().is_some_and(|s| !s.is_empty());
        if outputs.is_empty() || outputs.len() > 1 + usize::from(applied) {
            return Err(Failure::invalid_input(format!(
                "expected the test command's output, after the solution's `git apply` output when there is a solution; got {} outputs",
                outputs.len()
            )));
        }
        let test = outputs.last().expect("checked above");
        let tests = tests_parse::parse_any(&test.stdout);
        let report = serde_json::json!({
            "task_id": row.id,
            "exit_code": test.exit_code,
            "expected_exit": row.expected_exit,
            "timed_out": test.timed_out,
            "tests": tests.len(),
        });
        let (status, detail) = if applied && outputs[0].exit_code != 0 {
            let why = first_line(&outputs[0].stderr).unwrap_or("git apply failed");
            (
                GradeStatus::Error,
                format!("the solution does not apply: {why}"),
            )
        } else if test.timed_out {
            (
                GradeStatus::Failed,
                format!("the test command timed out after {} s", row.timeout_s),
            )
        } else if test.exit_code == row.expected_exit {
            (
                GradeStatus::Passed,
                format!("the test command exited {}", test.exit_code),
            )
        } else {
            (
                GradeStatus::Failed,
                format!(
                    "the test command exited {}, expected {}",
                    test.exit_code, row.expected_exit
                ),
            )
        };
        Ok(GradeResult {
            reward: if status == GradeStatus::Passed {
                1.0
            } else {
                0.0
            },
            status,
            tests,
            report: report.to_string(),
            detail,
        })
    }

    fn parse_log(
        parser: String,
        log: String,
        _settings: Vec<Setting>,
    ) -> Result<Vec<TestResult>, Failure> {
        tests_parse::parse_named(&parser, &log).ok_or_else(|| {
            Failure::invalid_input(format!(
                "unknown parser `{parser}` (parsers: {})",
                tests_parse::PARSERS.join(", ")
            ))
        })
    }

    fn summarize(results: Vec<Graded>, _settings: Vec<Setting>) -> Result<String, Failure> {
        let ids = |wanted: GradeStatus| -> Vec<&str> {
            results
                .iter()
                .filter(|r| r.status == wanted)
                .map(|r| r.task_id.as_str())
                .collect()
        };
        let without_solution: Vec<&str> = results
            .iter()
            .filter(|r| r.solution != SolutionState::Present)
            .map(|r| r.task_id.as_str())
            .collect();
        Ok(serde_json::json!({
            "total": results.len(),
            "passed": ids(GradeStatus::Passed).len(),
            "failed": ids(GradeStatus::Failed).len(),
            "error": ids(GradeStatus::Error).len(),
            "passed_ids": ids(GradeStatus::Passed),
            "failed_ids": ids(GradeStatus::Failed),
            "error_ids": ids(GradeStatus::Error),
            "without_solution_ids": without_solution,
        })
        .to_string())
    }
}

fn shell(script: &str, timeout_ms: u64) -> Command {
    Command {
        argv: vec!["bash".to_string(), "-c".to_string(), script.to_string()],
        timeout_ms,
        merge_stderr: true,
    }
}

fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|line| !line.is_empty())
}

sandfleet_plugin_sdk::task_adapter!(Generic, v0_1_0);
