//! The `task-adapter` world.

use super::{check_commands, off_runtime};
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
    /// [`TaskAdapter::describe_blocking`] on tokio's blocking pool; the form
    /// to call from async code (see [`TaskAdapter`]). So are the other
    /// methods without a `_blocking` suffix.
    ///
    /// # Errors
    ///
    /// As [`TaskAdapter::describe_blocking`]; [`CallErrorKind::HostPanic`]
    /// when the host panicked during the call.
    ///
    /// [`CallErrorKind::HostPanic`]: crate::CallErrorKind::HostPanic
    pub fn describe(
        &self,
    ) -> impl Future<Output = Result<AdapterInfo, CallError>> + Send + 'static + use<> {
        let this = self.clone();
        off_runtime(self.0.plugin(), "describe", move || {
            this.describe_blocking()
        })
    }

    /// As [`TaskAdapter::load_blocking`], on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`TaskAdapter::load_blocking`], and as [`TaskAdapter::describe`].
    pub fn load(
        &self,
        row: &str,
        settings: &[Setting],
    ) -> impl Future<Output = Result<Task, CallError>> + Send + 'static + use<> {
        let (this, row, settings) = (self.clone(), row.to_string(), settings.to_vec());
        off_runtime(self.0.plugin(), "load", move || {
            this.load_blocking(&row, &settings)
        })
    }

    /// As [`TaskAdapter::prepare_blocking`], on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`TaskAdapter::prepare_blocking`], and as [`TaskAdapter::describe`].
    pub fn prepare(
        &self,
        task: &Task,
        solution: Option<&str>,
    ) -> impl Future<Output = Result<Script, CallError>> + Send + 'static + use<> {
        let (this, task) = (self.clone(), task.clone());
        let solution = solution.map(str::to_string);
        off_runtime(self.0.plugin(), "prepare", move || {
            this.prepare_blocking(&task, solution.as_deref())
        })
    }

    /// As [`TaskAdapter::grade_blocking`], on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`TaskAdapter::grade_blocking`], and as [`TaskAdapter::describe`].
    pub fn grade(
        &self,
        task: &Task,
        solution: Option<&str>,
        outputs: &[CommandOutput],
    ) -> impl Future<Output = Result<GradeResult, CallError>> + Send + 'static + use<> {
        let (this, task, outputs) = (self.clone(), task.clone(), outputs.to_vec());
        let solution = solution.map(str::to_string);
        off_runtime(self.0.plugin(), "grade", move || {
            this.grade_blocking(&task, solution.as_deref(), &outputs)
        })
    }

    /// As [`TaskAdapter::parse_log_blocking`], on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`TaskAdapter::parse_log_blocking`], and as [`TaskAdapter::describe`].
    pub fn parse_log(
        &self,
        parser: &str,
        log: &str,
        settings: &[Setting],
    ) -> impl Future<Output = Result<Vec<TestResult>, CallError>> + Send + 'static + use<> {
        let (this, parser) = (self.clone(), parser.to_string());
        let (log, settings) = (log.to_string(), settings.to_vec());
        off_runtime(self.0.plugin(), "parse-log", move || {
            this.parse_log_blocking(&parser, &log, &settings)
        })
    }

    /// As [`TaskAdapter::summarize_blocking`], on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`TaskAdapter::summarize_blocking`], and as [`TaskAdapter::describe`].
    pub fn summarize(
        &self,
        results: &[Graded],
        settings: &[Setting],
    ) -> impl Future<Output = Result<String, CallError>> + Send + 'static + use<> {
        let (this, results, settings) = (self.clone(), results.to_vec(), settings.to_vec());
        off_runtime(self.0.plugin(), "summarize", move || {
            this.summarize_blocking(&results, &settings)
        })
    }

    /// Name, version and accepted settings, on the calling thread, which
    /// must not be an async runtime's worker.
    ///
    /// # Errors
    ///
    /// When the plugin traps or overruns a limit.
    pub fn describe_blocking(&self) -> Result<AdapterInfo, CallError> {
        let plugin = self.0.current();
        plugin.call("describe", |instance, store| {
            instance.sandfleet_plugin_adapter().call_describe(store)
        })
    }

    /// Reads one dataset row (a JSON object) into a task, on the calling
    /// thread.
    ///
    /// # Errors
    ///
    /// When the plugin declines (a malformed row: the message names the
    /// field), traps, overruns a limit, or returns a task without an id,
    /// image or absolute workdir.
    pub fn load_blocking(&self, row: &str, settings: &[Setting]) -> Result<Task, CallError> {
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

    /// Builds the script that evaluates `solution` on `task`, on the
    /// calling thread.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a script
    /// with a relative path or an empty command.
    pub fn prepare_blocking(
        &self,
        task: &Task,
        solution: Option<&str>,
    ) -> Result<Script, CallError> {
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

    /// Grades the outputs of the script's evaluate commands, on the calling
    /// thread.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a reward
    /// that is not a finite number.
    pub fn grade_blocking(
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

    /// Runs the adapter's log parser `parser` on `log`, on the calling
    /// thread.
    ///
    /// # Errors
    ///
    /// When the plugin declines (for example an unknown parser), traps or
    /// overruns a limit.
    pub fn parse_log_blocking(
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

    /// The run-level report in the adapter's native format (JSON), on the
    /// calling thread.
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns text
    /// that is not JSON.
    pub fn summarize_blocking(
        &self,
        results: &[Graded],
        settings: &[Setting],
    ) -> Result<String, CallError> {
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
