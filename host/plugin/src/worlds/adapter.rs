//! The `task-adapter` world.

use super::{check_commands, off_runtime};
use crate::bindings::v0_1_0;
use crate::error::CallError;

pub use crate::bindings::latest::adapter::exports::sandfleet::plugin::adapter::{
    AdapterInfo, EvaluationSite, File, GradeResult, GradeStatus, Graded, InfraFailure, Script,
    SettingInfo, SolutionState, TestStatus, TestTable, TimeoutRule,
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
    /// What the status counts as, as reports spell it: `passed`, `failed`,
    /// `skipped`, `error`, `xfail` or `other` (the parser's own value is in
    /// the [`TestTable`]).
    pub fn name(self) -> &'static str {
        match self {
            TestStatus::Passed => "passed",
            TestStatus::Failed => "failed",
            TestStatus::Skipped => "skipped",
            TestStatus::Error => "error",
            TestStatus::Xfail => "xfail",
            TestStatus::Other => "other",
        }
    }
}

/// One row of a [`TestTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestEntry<'a> {
    /// The test's name.
    pub name: &'a str,
    /// Its status exactly as the parser recorded it (SWE-bench: `PASSED`,
    /// `ERROR:`, ...).
    pub value: &'a str,
    /// What that status counts as.
    pub status: TestStatus,
}

/// One row of a [`TestTable`], owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    /// The test's name.
    pub name: String,
    /// Its status exactly as the parser recorded it.
    pub value: String,
    /// What that status counts as.
    pub status: TestStatus,
}

impl IntoIterator for TestTable {
    type Item = TestResult;
    type IntoIter = std::vec::IntoIter<TestResult>;

    /// The tests in log order, each with its own strings.
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
            .map(|test| TestResult {
                name: test.name.to_owned(),
                value: test.value.to_owned(),
                status: test.status,
            })
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl TestTable {
    /// A table of no tests.
    pub fn empty() -> Self {
        TestTable {
            names: String::new(),
            name_ends: Vec::new(),
            statuses: Vec::new(),
            status_values: Vec::new(),
            status_kinds: Vec::new(),
        }
    }

    /// Appends a test whose status the parser recorded as `value`, which
    /// counts as `status`.
    ///
    /// # Panics
    ///
    /// When the names outgrow the contract's 32-bit offsets (4 GiB).
    pub fn push(&mut self, name: &str, value: &str, status: TestStatus) {
        let index = match self.status_values.iter().position(|known| known == value) {
            Some(index) => index,
            None => {
                self.status_values.push(value.to_owned());
                self.status_kinds.push(status);
                self.status_values.len() - 1
            }
        };
        self.names.push_str(name);
        let end = u32::try_from(self.names.len()).expect("test names fit in 4 GiB");
        self.name_ends.push(end);
        self.statuses.push(index as u32);
    }

    /// How many tests it holds.
    pub fn len(&self) -> usize {
        self.name_ends.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.name_ends.is_empty()
    }

    /// The tests in log order. The table must be well formed, as every
    /// table a plugin returned is (the host checks it).
    pub fn iter(&self) -> impl Iterator<Item = TestEntry<'_>> + '_ {
        let starts = std::iter::once(0).chain(self.name_ends.iter().copied());
        starts
            .zip(&self.name_ends)
            .zip(&self.statuses)
            .map(move |((start, &end), &status)| TestEntry {
                name: &self.names[start as usize..end as usize],
                value: &self.status_values[status as usize],
                status: self.status_kinds[status as usize],
            })
    }

    /// Checks what [`TestTable::iter`] relies on: one end and one status per
    /// test, ends that never go back and fall on character boundaries, and
    /// statuses that name a value with a kind.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.name_ends.len() != self.statuses.len() {
            return Err(format!(
                "the test table has {} name ends but {} statuses",
                self.name_ends.len(),
                self.statuses.len()
            ));
        }
        if self.status_values.len() != self.status_kinds.len() {
            return Err(format!(
                "the test table has {} status values but {} status kinds",
                self.status_values.len(),
                self.status_kinds.len()
            ));
        }
        let mut start = 0;
        for (test, &end) in self.name_ends.iter().enumerate() {
            if end < start || !self.names.is_char_boundary(end as usize) {
                return Err(format!(
                    "test {test}'s name ends at byte {end}, which is not a character boundary of the names after byte {start}"
                ));
            }
            start = end;
        }
        if let Some((test, status)) = self
            .statuses
            .iter()
            .enumerate()
            .find(|&(_, &status)| status as usize >= self.status_values.len())
        {
            return Err(format!(
                "test {test} has status {status}, but there are {} status values",
                self.status_values.len()
            ));
        }
        Ok(())
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

impl EvaluationSite {
    /// `work-sandbox` or `fresh-sandbox`.
    pub fn name(self) -> &'static str {
        match self {
            EvaluationSite::WorkSandbox => "work-sandbox",
            EvaluationSite::FreshSandbox => "fresh-sandbox",
        }
    }
}

super::typed_world!(
    /// A task adapter: loads dataset rows, prepares scripts, grades outputs.
    ///
    /// Adapters of contract 0.1.0 answer in 0.2.0's shapes: every test
    /// status is one of the five words, the reward is always there, no
    /// infra failure is reported and scripts evaluate in the work sandbox.
    TaskAdapter,
    AdapterWorld,
    Adapter,
    adapter::{TaskAdapterPre, TaskAdapter},
    AdapterPre,
    AdapterInstance
);

/// Calls `$call` with `$args` on the instance's adapter export, whatever
/// its contract version; `$old` turns a 0.1.0 answer into the latest shape.
macro_rules! on_adapter {
    ($instance:expr, $store:expr, $call:ident($($arg:expr),*), $old:expr) => {
        match $instance {
            AdapterInstance::V0_1_0(old) => old
                .sandfleet_plugin_adapter()
                .$call($store, $($arg),*)
                .map(|answer| answer.map($old)),
            AdapterInstance::V0_2_0(latest) => latest
                .sandfleet_plugin_adapter()
                .$call($store, $($arg),*),
        }
    };
}

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
    ) -> impl Future<Output = Result<TestTable, CallError>> + Send + 'static + use<> {
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
        plugin.call("describe", |instance, store| match instance {
            AdapterInstance::V0_1_0(old) => old
                .sandfleet_plugin_adapter()
                .call_describe(store)
                .map(AdapterInfo::from),
            AdapterInstance::V0_2_0(latest) => {
                latest.sandfleet_plugin_adapter().call_describe(store)
            }
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
            |instance, store| match instance {
                AdapterInstance::V0_1_0(old) => old
                    .sandfleet_plugin_adapter()
                    .call_load(store, row, settings),
                AdapterInstance::V0_2_0(latest) => latest
                    .sandfleet_plugin_adapter()
                    .call_load(store, row, settings),
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
                on_adapter!(instance, store, call_prepare(task, solution), Script::from)
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
    /// thread. The call's memory cap and deadline grow with the size of
    /// `outputs` ([`crate::Limits::scaled_for_input`]).
    ///
    /// # Errors
    ///
    /// When the plugin declines, traps, overruns a limit, or returns a reward
    /// that is not a finite number or a malformed test table.
    pub fn grade_blocking(
        &self,
        task: &Task,
        solution: Option<&str>,
        outputs: &[CommandOutput],
    ) -> Result<GradeResult, CallError> {
        let input = outputs
            .iter()
            .map(|output| output.stdout.len() + output.stderr.len())
            .sum();
        self.0.call_sized(
            "grade",
            input,
            |instance, store| {
                on_adapter!(
                    instance,
                    store,
                    call_grade(task, solution, outputs),
                    GradeResult::from
                )
            },
            |grade| {
                grade.reward.map_or(Ok(()), check_reward)?;
                grade.tests.check()
            },
        )
    }

    /// Runs the adapter's log parser `parser` on `log`, on the calling
    /// thread, under limits scaled for the log's size (as `grade`).
    ///
    /// # Errors
    ///
    /// When the plugin declines (for example an unknown parser), traps,
    /// overruns a limit or returns a malformed test table.
    pub fn parse_log_blocking(
        &self,
        parser: &str,
        log: &str,
        settings: &[Setting],
    ) -> Result<TestTable, CallError> {
        self.0.call_sized(
            "parse-log",
            log.len(),
            |instance, store| {
                on_adapter!(
                    instance,
                    store,
                    call_parse_log(parser, log, settings),
                    v0_1_0::parsed_tests
                )
            },
            TestTable::check,
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
            |instance, store| match instance {
                AdapterInstance::V0_1_0(old) => {
                    let results: Vec<_> = results.iter().map(Into::into).collect();
                    old.sandfleet_plugin_adapter()
                        .call_summarize(store, &results, settings)
                }
                AdapterInstance::V0_2_0(latest) => latest
                    .sandfleet_plugin_adapter()
                    .call_summarize(store, results, settings),
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
