//! The `task-adapter` world.

use super::check_commands;
use crate::bindings::latest::adapter as bindings;
use crate::error::CallError;
use crate::store::StoreState;

pub use crate::bindings::latest::adapter::exports::sandfleet::plugin::adapter::{
    AdapterInfo, File, GradeResult, GradeStatus, Graded, Script, SettingInfo, SolutionState,
    TestResult, TestStatus, TimeoutRule,
};
pub use crate::bindings::types::{Command, CommandOutput, Setting, Task};

impl GradeStatus {
    /// The status as reports spell it: `passed`, `failed` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            GradeStatus::Passed => "passed",
            GradeStatus::Failed => "failed",
            GradeStatus::Error => "error",
        }
    }
}

impl TestStatus {
    /// The status as reports spell it: `passed`, `failed`, `skipped`,
    /// `error` or `xfail` (the SWE-bench harness writes them upper-case).
    pub fn name(self) -> &'static str {
        match self {
            TestStatus::Passed => "passed",
            TestStatus::Failed => "failed",
            TestStatus::Skipped => "skipped",
            TestStatus::Error => "error",
            TestStatus::Xfail => "xfail",
        }
    }
}

impl TimeoutRule {
    /// `fail` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            TimeoutRule::Fail => "fail",
            TimeoutRule::Error => "error",
        }
    }
}

super::typed_world!(
    /// A task adapter: loads dataset rows, prepares scripts, grades outputs.
    TaskAdapter,
    AdapterWorld,
    Adapter,
    bindings::TaskAdapterPre<StoreState>,
    bindings::TaskAdapter
);

impl TaskAdapter {
    /// Name, version and accepted settings.
    ///
    /// # Errors
    ///
    /// When the plugin traps or overruns a limit.
    pub fn describe(&self) -> Result<AdapterInfo, CallError> {
        let plugin = self.0.current();
        plugin.call("describe", |instance, store| {
            instance.sandfleet_plugin_adapter().call_describe(store)
        })
    }

    /// Reads one dataset row (a JSON object) into a task.
    ///
    /// # Errors
    ///
    /// When the plugin declines (a malformed row: the message names the
    /// field), traps, overruns a limit, or returns a task without an id,
    /// image or absolute workdir.
    pub fn load(&self, row: &str, settings: &[Setting]) -> Result<Task, CallError> {
        self.0.call(
            "load",
            |instance, store| {
                instance
                    .sandfleet_plugin_adapter()
                    .call_load(store, row, settings)
            },
            |task| check_task(&task.id, &task.image, &task.workdir),
        )
    }

    /// Builds the script that evaluates `solution` on `task`.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a script
    /// with a relative path or an empty command.
    pub fn prepare(&self, task: &Task, solution: Option<&str>) -> Result<Script, CallError> {
        self.0.call(
            "prepare",
            |instance, store| {
                instance
                    .sandfleet_plugin_adapter()
                    .call_prepare(store, task, solution)
            },
            |script| {
                check_script(
                    script.files.iter().map(|file| file.path.as_str()),
                    &script.workdir,
                    script.setup.iter().map(|c| c.argv.as_slice()),
                    script.evaluate.iter().map(|c| c.argv.as_slice()),
                )
            },
        )
    }

    /// Grades the outputs of the script's evaluate commands.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a reward
    /// that is not a finite number.
    pub fn grade(
        &self,
        task: &Task,
        solution: Option<&str>,
        outputs: &[CommandOutput],
    ) -> Result<GradeResult, CallError> {
        self.0.call(
            "grade",
            |instance, store| {
                instance
                    .sandfleet_plugin_adapter()
                    .call_grade(store, task, solution, outputs)
            },
            |grade| check_reward(grade.reward),
        )
    }

    /// Runs the adapter's log parser `parser` on `log`.
    ///
    /// # Errors
    ///
    /// When the plugin declines (for example an unknown parser), traps or
    /// overruns a limit.
    pub fn parse_log(
        &self,
        parser: &str,
        log: &str,
        settings: &[Setting],
    ) -> Result<Vec<TestResult>, CallError> {
        self.0.call(
            "parse-log",
            |instance, store| {
                instance
                    .sandfleet_plugin_adapter()
                    .call_parse_log(store, parser, log, settings)
            },
            |_| Ok(()),
        )
    }

    /// The run-level report in the adapter's native format (JSON).
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns text
    /// that is not JSON.
    pub fn summarize(&self, results: &[Graded], settings: &[Setting]) -> Result<String, CallError> {
        self.0.call(
            "summarize",
            |instance, store| {
                instance
                    .sandfleet_plugin_adapter()
                    .call_summarize(store, results, settings)
            },
            |_| Ok(()),
        )
    }
}

pub(crate) fn check_task(id: &str, image: &str, workdir: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("the task has an empty id".into());
    }
    if image.is_empty() {
        return Err(format!("task `{id}` names no image"));
    }
    if !workdir.starts_with('/') {
        return Err(format!("task `{id}` has a relative workdir `{workdir}`"));
    }
    Ok(())
}

pub(crate) fn check_script<'a>(
    mut file_paths: impl Iterator<Item = &'a str>,
    workdir: &str,
    setup: impl Iterator<Item = &'a [String]>,
    evaluate: impl Iterator<Item = &'a [String]>,
) -> Result<(), String> {
    if let Some(path) = file_paths.find(|path| !path.starts_with('/')) {
        return Err(format!("file path `{path}` is not absolute"));
    }
    if !workdir.starts_with('/') {
        return Err(format!("workdir `{workdir}` is not absolute"));
    }
    check_commands(setup, "setup")?;
    check_commands(evaluate, "evaluate")
}

pub(crate) fn check_reward(reward: f64) -> Result<(), String> {
    if reward.is_finite() {
        Ok(())
    } else {
        Err(format!("reward {reward} is not a finite number"))
    }
}
