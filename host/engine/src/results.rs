//! `results.jsonl`: one line per finished task, appended as each finishes, so
//! a crash loses no finished work; a rerun into the same directory skips
//! what is already there.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sandfleet_plugin::PluginRef;
use sandfleet_plugin::adapter::{GradeResult, GradeStatus, InfraFailure, TaskAdapter, TestTable};
use sandfleet_plugin::reset::ResetCheck;
use serde::{Deserialize, Serialize};

/// The file name inside the output directory.
pub const RESULTS_FILE: &str = "results.jsonl";

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Graded as passed.
    Ok,
    /// Ran and did not pass (including a grade of `error`, such as a patch
    /// that does not apply, and commands that overran their timeout).
    Failed,
    /// The infrastructure failed (claim, exec, backend), or the adapter
    /// judged that the environment rather than the solution failed (see
    /// [`TaskRecord::infra_failure`]); says nothing about the task. Rerun
    /// into the same directory to retry these.
    InfraError,
}

impl TaskStatus {
    /// The name in results and reports.
    pub fn name(self) -> &'static str {
        match self {
            TaskStatus::Ok => "ok",
            TaskStatus::Failed => "failed",
            TaskStatus::InfraError => "infra_error",
        }
    }

    /// How a graded task ended: `ok` when it passed, `infra_error` when the
    /// adapter judged that the environment failed (whatever the status),
    /// `failed` otherwise.
    pub fn of_grade(grade: &GradeResult) -> TaskStatus {
        match (grade.status, &grade.infra) {
            (_, Some(_)) => TaskStatus::InfraError,
            (GradeStatus::Passed, None) => TaskStatus::Ok,
            (GradeStatus::Failed | GradeStatus::Error, None) => TaskStatus::Failed,
        }
    }
}

/// Seconds spent on each step of a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Claiming the sandbox (zero when a recycled one was reused).
    pub claim_s: f64,
    /// Files, setup and evaluate commands.
    pub process_s: f64,
    /// The adapter's grade call.
    pub grade_s: f64,
    /// From start to finish.
    pub total_s: f64,
}

/// One test as the adapter's parser saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestRecord {
    /// The test's name.
    pub name: String,
    /// What its status counts as: `passed`, `failed`, `skipped`, `error`,
    /// `xfail` or `other`.
    pub status: String,
    /// The status exactly as the parser recorded it, when that is not
    /// `status` in some letter case (SWE-bench: `ERROR:` for a line that
    /// merely starts with a status word).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Why the adapter judged that the environment, not the solution, failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfraFailureRecord {
    /// The sign, e.g. `out_of_memory` or `tests_timed_out`.
    pub reason: String,
    /// True when the solution cannot plausibly have caused it (SWE-bench
    /// 5.x's `environment` tier); false when either could have (`ambiguous`).
    pub certain: bool,
}

impl TestRecord {
    /// The records of every test in `tests`, in log order.
    pub fn all(tests: &TestTable) -> Vec<TestRecord> {
        tests
            .iter()
            .map(|test| {
                let status = test.status.name();
                TestRecord {
                    name: test.name.to_owned(),
                    status: status.to_owned(),
                    value: (!test.value.eq_ignore_ascii_case(status))
                        .then(|| test.value.to_owned()),
                }
            })
            .collect()
    }
}

impl From<&InfraFailure> for InfraFailureRecord {
    fn from(infra: &InfraFailure) -> Self {
        InfraFailureRecord {
            reason: infra.reason.clone(),
            certain: infra.certain,
        }
    }
}

impl InfraFailureRecord {
    /// `environment` when certain, `ambiguous` otherwise (SWE-bench 5.x's
    /// tiers).
    pub fn tier(&self) -> &'static str {
        if self.certain {
            "environment"
        } else {
            "ambiguous"
        }
    }
}

/// The adapter's grade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradeRecord {
    /// `passed`, `failed` or `error`.
    pub status: String,
    /// The reward; absent when the adapter gives none (R2E-Gym: where its
    /// reward code raises).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    /// One line explaining the status.
    pub detail: String,
    /// Per-test outcomes.
    pub tests: Vec<TestRecord>,
    /// The adapter's native report (JSON).
    pub report: serde_json::Value,
}

impl From<GradeResult> for GradeRecord {
    fn from(grade: GradeResult) -> Self {
        GradeRecord {
            status: grade.status.name().to_string(),
            reward: grade.reward,
            detail: crate::text::truncated(&grade.detail, MAX_DETAIL),
            tests: TestRecord::all(&grade.tests),
            report: serde_json::from_str(&grade.report)
                .unwrap_or(serde_json::Value::String(grade.report)),
        }
    }
}

/// Bytes of a grade's detail kept in a result line.
const MAX_DETAIL: usize = 4096;

/// One attempt of a task that ran more than once: the infrastructure
/// failed an attempt (its sandbox was lost, its claim failed) and the task
/// ran again on another sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The sandbox it ran in; none when its claim failed.
    pub sandbox: Option<String>,
    /// That sandbox's cluster.
    pub cluster: Option<String>,
    /// Why the task ran again after it: `sandbox_lost` or `claim_failed`;
    /// absent for the last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_for: Option<String>,
    /// What went wrong in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task.
    pub task_id: String,
    /// The pass over the dataset, from 0.
    pub epoch: u32,
    /// How it ended.
    pub status: TaskStatus,
    /// The image it ran in.
    pub image: String,
    /// The cluster that ran it.
    pub cluster: Option<String>,
    /// The sandbox that ran it.
    pub sandbox: Option<String>,
    /// Tasks the sandbox had served before this one (recycling).
    pub reuse: u32,
    /// True when a command overran its timeout.
    pub timed_out: bool,
    /// What went wrong, for `infra_error` and tasks that could not be graded
    /// (at most 4 KiB; longer messages are cut, saying so).
    pub error: Option<String>,
    /// Bytes the task's commands wrote past the output limit, dropped
    /// before grading.
    #[serde(default)]
    pub output_dropped: u64,
    /// Where the time went.
    pub timings: Timings,
    /// The adapter's grade, when it graded.
    pub grade: Option<GradeRecord>,
    /// The fresh sandbox the evaluation ran in, when the adapter asked for
    /// one (`sandbox` is then the work sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_sandbox: Option<String>,
    /// Set when the adapter judged that the environment, not the solution,
    /// failed (the task is then an `infra_error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infra_failure: Option<InfraFailureRecord>,
    /// Every attempt, in order, when the task ran more than once (the
    /// record's other fields are the last one's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// The plugin versions that prepared and graded the task and reset its
    /// sandbox, each pinned when the task (or the sandbox) started.
    #[serde(default)]
    pub plugins: TaskPlugins,
    /// Which rollout of its task's group it was, when the task ran as a
    /// group (`group_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupRecord>,
    /// When it finished (RFC 3339).
    pub finished_at: String,
}

/// A group member's place in its group: the group is the record's task and
/// epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// Rollouts in the group.
    pub size: u32,
    /// This one, from 0.
    pub member: u32,
    /// The snapshot of the group's set-up the member ran from (its own
    /// sandbox's, or the one it is a fork of); absent where the cluster
    /// could not snapshot and every member set up its own sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The set-up ran in this member's sandbox.
    pub set_up_here: bool,
}

/// What identifies a result: a task, an epoch and, in a group, a member.
pub type ResultKey<'a> = (&'a str, u32, Option<u32>);

impl TaskRecord {
    /// The task, epoch and group member this is the result of.
    pub fn key(&self) -> ResultKey<'_> {
        (
            &self.task_id,
            self.epoch,
            self.group.as_ref().map(|group| group.member),
        )
    }
}

/// One plugin version a task used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginUse {
    /// The plugin's name.
    pub name: String,
    /// Its version (`sha256:` and 12 hex digits).
    pub version: String,
    /// The built-in (`name@version`) that answered some of its calls after
    /// it faulted (`[plugins] fallback = "builtin"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl PluginUse {
    /// The use of `serving`, whose calls `fallback` answered after a fault
    /// when it is given.
    pub fn new(serving: &PluginRef, fallback: Option<PluginRef>) -> Self {
        PluginUse {
            name: serving.name.to_string(),
            version: serving.version.to_string(),
            fallback: fallback.map(|builtin| format!("{}@{}", builtin.name, builtin.version)),
        }
    }

    /// The use of the version pinned by `adapter`.
    pub(crate) fn of_adapter(adapter: &TaskAdapter) -> Self {
        PluginUse::new(
            &adapter.version().plugin,
            adapter.fallback().filter(|_| adapter.fell_back()),
        )
    }

    /// The use of the version pinned by `check`.
    pub(crate) fn of_reset(check: &ResetCheck) -> Self {
        PluginUse::new(
            &check.version().plugin,
            check.fallback().filter(|_| check.fell_back()),
        )
    }
}

/// The plugin versions one task used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlugins {
    /// The adapter that prepared and graded it.
    pub adapter: PluginUse,
    /// The reset check that took its sandbox's baseline and reset it
    /// before the task; absent when the sandbox is not recycled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<PluginUse>,
}

/// The results file of an output directory.
pub struct ResultsStore {
    path: PathBuf,
    file: Mutex<File>,
    finished: HashSet<(String, u32, Option<u32>)>,
    previous: Vec<TaskRecord>,
}

impl ResultsStore {
    /// Opens (or creates) `dir/results.jsonl` and reads what earlier runs
    /// finished. A torn last line (a crash mid-write) is ignored; its task runs again.
    ///
    /// # Errors
    ///
    /// When the directory or file cannot be created, read or written.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(RESULTS_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let mut previous = Vec::new();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<TaskRecord>(line) {
                Ok(record) => previous.push(record),
                Err(e) => tracing::warn!(
                    "{}:{}: ignoring an unreadable result line ({e}); that task runs again",
                    path.display(),
                    number + 1
                ),
            }
        }
        if !text.is_empty() && !text.ends_with('\n') {
            file.seek(SeekFrom::End(0))?;
            file.write_all(b"\n")?;
        }
        // Infrastructure errors say nothing about the task: retry them.
        let finished = previous
            .iter()
            .filter(|r| r.status != TaskStatus::InfraError)
            .map(|r| {
                let (task, epoch, member) = r.key();
                (task.to_string(), epoch, member)
            })
            .collect();
        Ok(ResultsStore {
            path,
            file: Mutex::new(file),
            finished,
            previous,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when an earlier run finished this task in this epoch (as
    /// this member of its group).
    pub fn is_finished(&self, (task_id, epoch, member): ResultKey<'_>) -> bool {
        self.finished
            .contains(&(task_id.to_string(), epoch, member))
    }

    /// Records found when the store was opened.
    pub fn previous(&self) -> &[TaskRecord] {
        &self.previous
    }

    /// Appends one record as a single line, flushed before returning.
    ///
    /// # Errors
    ///
    /// When the file cannot be written.
    pub fn append(&self, record: &TaskRecord) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&line)?;
        file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, status: TaskStatus) -> TaskRecord {
        TaskRecord {
            task_id: id.to_string(),
            epoch: 0,
            status,
            image: "img".to_string(),
            cluster: None,
            sandbox: None,
            reuse: 0,
            timed_out: false,
            error: None,
            output_dropped: 0,
            timings: Timings::default(),
            grade: None,
            fresh_sandbox: None,
            infra_failure: None,
            attempts: Vec::new(),
            plugins: TaskPlugins::default(),
            group: None,
            finished_at: "2026-01-01T00:00:00Z".to_string(),
        }
    }

    #[test]
    fn reopening_skips_finished_tasks_but_retries_infra_errors() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        store.append(&record("a", TaskStatus::Ok)).unwrap();
        store.append(&record("b", TaskStatus::Failed)).unwrap();
        store.append(&record("c", TaskStatus::InfraError)).unwrap();
        drop(store);

        let store = ResultsStore::open(dir.path()).unwrap();
        assert!(store.is_finished(("a", 0, None)));
        assert!(store.is_finished(("b", 0, None)));
        assert!(!store.is_finished(("c", 0, None)));
        assert!(!store.is_finished(("a", 1, None)));
        assert_eq!(store.previous().len(), 3);
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_later_lines_stay_readable() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        store.append(&record("a", TaskStatus::Ok)).unwrap();
        drop(store);
        let path = dir.path().join(RESULTS_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"task_id":"b","epo"#);
        std::fs::write(&path, text).unwrap();

        let store = ResultsStore::open(dir.path()).unwrap();
        assert!(store.is_finished(("a", 0, None)));
        assert!(!store.is_finished(("b", 0, None)));
        store.append(&record("b", TaskStatus::Ok)).unwrap();
        drop(store);
        let store = ResultsStore::open(dir.path()).unwrap();
        assert!(store.is_finished(("b", 0, None)));
    }
}
