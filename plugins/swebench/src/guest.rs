//! The component's exports: WIT types in, native calls, WIT types out.

use sandfleet_plugin_sdk::adapter::{
    AdapterInfo, Command, CommandOutput, EvaluationSite, Failure, File, GradeResult, GradeStatus,
    Graded, InfraFailure, Script, Setting, SettingInfo, SolutionState, Task, TaskAdapter,
    TestStatus, TestTable, TimeoutRule,
};

use crate::settings::Evaluation;
use crate::status_map::StatusMap;
use crate::{error, grade, infra, script, status_map, summary, task};

struct SwebenchAdapter;

impl TaskAdapter for SwebenchAdapter {
    fn describe() -> AdapterInfo {
        let info = crate::describe();
        AdapterInfo {
            name: info.name.into(),
            version: info.version.into(),
            summary: info.summary.into(),
            settings: info
                .settings
                .iter()
                .map(|doc| SettingInfo {
                    key: doc.key.into(),
                    summary: doc.summary.into(),
                    default_value: doc.default.map(Into::into),
                })
                .collect(),
        }
    }

    fn load(row: String, settings: Vec<Setting>) -> Result<Task, Failure> {
        let task = crate::load(&row, &pairs(&settings)).map_err(failure)?;
        Ok(Task {
            id: task.id,
            image: task.image,
            workdir: task.workdir,
            data: task.data,
        })
    }

    fn prepare(task: Task, solution: Option<String>) -> Result<Script, Failure> {
        let script::Script {
            files,
            evaluate,
            workdir,
            evaluation,
        } = script::prepare(&native_task(task), solution.as_deref()).map_err(failure)?;
        Ok(Script {
            files: files
                .into_iter()
                .map(|file| File {
                    path: file.path,
                    contents: file.contents.into_bytes(),
                    mode: file.mode,
                })
                .collect(),
            setup: Vec::new(),
            evaluate: evaluate
                .into_iter()
                .map(|command| Command {
                    argv: command.argv,
                    timeout_ms: command.timeout_ms,
                    merge_stderr: command.merge_stderr,
                })
                .collect(),
            env: Vec::new(),
            workdir,
            // A timed-out run is graded: an error without a report, as the
            // harness has it, which 5.x's run report classifies.
            timeout_rule: TimeoutRule::Fail,
            evaluate_in: match evaluation {
                Evaluation::InPlace => EvaluationSite::WorkSandbox,
                Evaluation::Fresh => EvaluationSite::FreshSandbox,
            },
        })
    }

    fn grade(
        task: Task,
        solution: Option<String>,
        outputs: Vec<CommandOutput>,
    ) -> Result<GradeResult, Failure> {
        let outputs: Vec<grade::CommandOutput> = outputs
            .into_iter()
            .map(|output| grade::CommandOutput {
                stdout: output.stdout,
                stderr: output.stderr,
                timed_out: output.timed_out,
            })
            .collect();
        let outcome =
            grade::grade(&native_task(task), solution.as_deref(), &outputs).map_err(failure)?;
        Ok(GradeResult {
            status: match outcome.status {
                grade::GradeStatus::Passed => GradeStatus::Passed,
                grade::GradeStatus::Failed => GradeStatus::Failed,
                grade::GradeStatus::Error => GradeStatus::Error,
            },
            reward: Some(outcome.reward),
            tests: test_table(outcome.tests),
            report: outcome.report,
            detail: outcome.detail,
            infra: outcome.infra.map(infra_failure),
        })
    }

    fn parse_log(
        parser: String,
        log: String,
        settings: Vec<Setting>,
    ) -> Result<TestTable, Failure> {
        let tests = crate::parse_log(&parser, &log, &pairs(&settings)).map_err(failure)?;
        drop(log);
        Ok(test_table(tests))
    }

    fn summarize(results: Vec<Graded>, settings: Vec<Setting>) -> Result<String, Failure> {
        let results: Vec<summary::Graded> = results
            .into_iter()
            .map(|result| summary::Graded {
                task_id: result.task_id,
                status: match result.status {
                    GradeStatus::Passed => grade::GradeStatus::Passed,
                    GradeStatus::Failed => grade::GradeStatus::Failed,
                    GradeStatus::Error => grade::GradeStatus::Error,
                },
                solution: match result.solution {
                    SolutionState::Missing => summary::SolutionState::Missing,
                    SolutionState::Empty => summary::SolutionState::Empty,
                    SolutionState::Present => summary::SolutionState::Present,
                },
                infra: result.infra.map(|infra| summary::Classified {
                    reason: infra.reason,
                    environment: infra.certain,
                }),
            })
            .collect();
        crate::summarize(&results, &pairs(&settings)).map_err(failure)
    }
}

fn pairs(settings: &[Setting]) -> Vec<(&str, &str)> {
    settings
        .iter()
        .map(|setting| (setting.key.as_str(), setting.value.as_str()))
        .collect()
}

fn native_task(task: Task) -> task::Task {
    task::Task {
        id: task.id,
        image: task.image,
        workdir: task.workdir,
        data: task.data,
    }
}

/// The status map as the contract's columns: its own buffers, moved.
fn test_table(tests: StatusMap) -> TestTable {
    let columns = tests.into_columns();
    TestTable {
        status_kinds: columns
            .values
            .iter()
            .map(|value| match status_map::TestStatus::of(value) {
                status_map::TestStatus::Passed => TestStatus::Passed,
                status_map::TestStatus::Failed => TestStatus::Failed,
                status_map::TestStatus::Skipped => TestStatus::Skipped,
                status_map::TestStatus::Error => TestStatus::Error,
                status_map::TestStatus::Xfail => TestStatus::Xfail,
                status_map::TestStatus::Other => TestStatus::Other,
            })
            .collect(),
        names: columns.names,
        name_ends: columns.ends,
        statuses: columns.statuses,
        status_values: columns.values,
    }
}

fn infra_failure(infra: infra::InfraFailure) -> InfraFailure {
    InfraFailure {
        reason: infra.reason.to_owned(),
        certain: infra.environment,
    }
}

fn failure(error: error::InvalidInput) -> Failure {
    Failure::invalid_input(error.0)
}

sandfleet_plugin_sdk::task_adapter!(SwebenchAdapter);
