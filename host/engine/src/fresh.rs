//! Evaluation in a fresh sandbox, for adapters whose script asks for it
//! (`evaluate-in: fresh-sandbox`): nothing done in the work sandbox but its
//! changes to the workdir reaches the grade, so an agent that rewrote the
//! hidden tests, the test runner or an installed package gains nothing.
//!
//! 1. After setup, the work sandbox's workdir is snapshotted as a git tree
//!    ([`record_work_tree`]): every file git would add (untracked ones too,
//!    ignored ones not), hashed through a private index so the sandbox's own
//!    index, `HEAD` and files are left as they are.
//! 2. When the work is done, the changes since that tree are taken as a
//!    binary-safe patch ([`work_diff`]).
//! 3. The patch becomes the solution: the adapter prepares the task for it
//!    (a task given a solution as well as changes cannot say which to
//!    grade, and is refused), a new sandbox of the work sandbox's image is
//!    claimed, and the script (setup, files, evaluate) runs there; the new
//!    sandbox is released as soon as its outputs are in
//!    ([`Evaluator::evaluate_fresh`]). The work sandbox is its owner's to
//!    release (or recycle).
//!
//! Runs and daemon leases reach it through the one evaluation
//! ([`crate::evaluation`]): a run has no agent, so its work is what setup
//! left; a lease records the tree at setup and evaluates once its client's
//! work is done.

use std::time::{Duration, Instant};

use sandfleet_core::{Backend, BackendError, ErrorKind, ExecRequest, SandboxHandle};
use sandfleet_plugin::adapter::Script;

use crate::commands::{self, Ran};
use crate::error::StepError;
use crate::evaluation::{EvaluationError, Evaluator, Request};
use crate::fleet::Claimed;
use crate::phases::Phase;
use crate::prepare::Ready;

/// The largest patch a work may hand over; more is refused rather than cut.
pub(crate) const MAX_WORK_DIFF: u64 = 64 * 1024 * 1024;

/// Each git step in the work sandbox gets this long.
const GIT_TIMEOUT: Duration = Duration::from_secs(300);

/// Writes `workdir`'s tree to git's object store through a private index
/// and prints its id; `$1` (when given) names a tree to diff against, and
/// the patch from it to the new tree is printed instead.
const SNAPSHOT: &str = r#"set -e
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
export GIT_INDEX_FILE="$scratch/index"
git() { command git -c safe.directory='*' -c core.autocrlf=false "$@"; }
git read-tree HEAD 2>/dev/null || git read-tree --empty
git add -A .
tree="$(git write-tree)"
if [ -z "$1" ]; then
  echo "$tree"
else
  git diff --binary --full-index --no-color --no-ext-diff --no-renames "$1" "$tree"
fi
"#;

/// The work sandbox's workdir as git saw it after setup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkTree {
    tree: String,
}

/// Runs [`SNAPSHOT`] in `sandbox` and returns what it printed.
async fn snapshot(
    backend: &dyn Backend,
    sandbox: &SandboxHandle,
    workdir: &str,
    against: Option<&WorkTree>,
) -> Result<Vec<u8>, EvaluationError> {
    let mut argv = vec![
        "bash".to_owned(),
        "-c".to_owned(),
        SNAPSHOT.to_owned(),
        "sandfleet-work-tree".to_owned(),
    ];
    argv.extend(against.map(|tree| tree.tree.clone()));
    let request = ExecRequest {
        argv,
        workdir: Some(workdir.to_owned()),
        env: Vec::new(),
        timeout: GIT_TIMEOUT,
        merge_stderr: false,
        stdin: None,
        max_output: Some(MAX_WORK_DIFF),
    };
    let what = if against.is_some() {
        "taking the work's changes"
    } else {
        "recording the work tree"
    };
    let result = backend
        .exec(sandbox, &request, None)
        .await
        .map_err(|e| StepError::backend(format!("{what} in {}", sandbox.id), e))?;
    if result.timed_out {
        let overran = BackendError::new(
            ErrorKind::Timeout,
            &sandbox.cluster,
            format!("took over {} s", GIT_TIMEOUT.as_secs()),
        );
        return Err(StepError::backend(format!("{what} in {}", sandbox.id), overran).into());
    }
    if result.stdout_dropped > 0 {
        return Err(EvaluationError::Unusable(format!(
            "{what}: the patch is larger than {MAX_WORK_DIFF} bytes"
        )));
    }
    if result.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&result.stderr);
        let last = stderr.lines().rev().find(|line| !line.trim().is_empty());
        return Err(EvaluationError::Unusable(format!(
            "{what} in `{workdir}` failed (exit {}): {}; fresh evaluation needs the workdir to be a git repository",
            result.exit_code,
            last.unwrap_or("no message")
        )));
    }
    Ok(result.stdout)
}

/// Records `workdir`'s tree in the work sandbox, after setup and before
/// any work: the changes [`work_diff`] later takes are relative to it.
///
/// # Errors
///
/// [`EvaluationError::Infra`] when the exec fails;
/// [`EvaluationError::Unusable`] when git fails there (no repository, no
/// git) or takes too long.
pub(crate) async fn record_work_tree(
    backend: &dyn Backend,
    sandbox: &SandboxHandle,
    workdir: &str,
) -> Result<WorkTree, EvaluationError> {
    let printed = snapshot(backend, sandbox, workdir, None).await?;
    let tree = String::from_utf8_lossy(&printed).trim().to_owned();
    if tree.is_empty() || !tree.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(EvaluationError::Unusable(format!(
            "recording the work tree in `{workdir}` printed `{tree}`, not a tree id"
        )));
    }
    Ok(WorkTree { tree })
}

/// The changes to `workdir` since `since`, as a patch `git apply` takes
/// (binary files included); empty when nothing changed.
///
/// # Errors
///
/// As [`record_work_tree`], and [`EvaluationError::Unusable`] when the
/// patch is larger than [`MAX_WORK_DIFF`] or not UTF-8 (a solution is text).
pub(crate) async fn work_diff(
    backend: &dyn Backend,
    sandbox: &SandboxHandle,
    workdir: &str,
    since: &WorkTree,
) -> Result<String, EvaluationError> {
    let patch = snapshot(backend, sandbox, workdir, Some(since)).await?;
    String::from_utf8(patch).map_err(|error| {
        EvaluationError::Unusable(format!(
            "the work's changes in `{workdir}` are not UTF-8 text (byte {}), which a solution must be",
            error.utf8_error().valid_up_to()
        ))
    })
}

/// What a fresh sandbox produced.
pub(crate) struct FreshRun {
    /// The outputs of the script that ran there.
    pub(crate) ran: Ran,
    /// The solution it evaluated (and `grade` must be given): the work's
    /// changes, or, when there were none, the task's own solution.
    pub(crate) solution: Option<String>,
    /// The fresh sandbox's id.
    pub(crate) sandbox: String,
}

impl Evaluator {
    /// Evaluates the work done in `work` since `since` in a fresh sandbox of
    /// the same image: takes the changes, has the adapter prepare the task
    /// for them (`script` is the request's own, reused when there are
    /// none), claims the fresh sandbox, runs the script there (setup,
    /// files, evaluate, logged to the request's log) and releases it.
    ///
    /// # Errors
    ///
    /// [`EvaluationError::Infra`] when a claim, an exec or the fresh
    /// sandbox's lease fails; [`EvaluationError::Unusable`] when the work
    /// cannot be evaluated (see [`work_diff`]), comes with a solution as
    /// well, or the adapter declines to prepare it.
    pub(crate) async fn evaluate_fresh(
        &self,
        work: &Claimed,
        since: &WorkTree,
        request: &Request<'_>,
        script: &Script,
    ) -> Result<FreshRun, EvaluationError> {
        let backend = &self.fleet.clusters[work.cluster].backend;
        let workdir = script.workdir.as_str();
        let changes = work_diff(backend.as_ref(), &work.handle, workdir, since).await?;
        let given = request.solution.filter(|patch| !patch.is_empty());
        let solution = match (changes.is_empty(), given) {
            (true, _) => request.solution.map(str::to_owned),
            (false, None) => Some(changes),
            (false, Some(_)) => {
                return Err(EvaluationError::Unusable(format!(
                    "task `{}` has a solution and its work sandbox has changes too; a fresh evaluation grades one of them",
                    request.task.id
                )));
            }
        };
        let prepared = if solution.as_deref() == request.solution {
            None
        } else {
            let prepared = request
                .adapter
                .prepare(request.task, solution.as_deref())
                .await;
            Some(prepared.map_err(|e| {
                if e.is_plugin_fault() {
                    EvaluationError::Infra(StepError::plugin("prepare", e))
                } else {
                    EvaluationError::Unusable(format!(
                        "the adapter cannot prepare the work's changes: {e}"
                    ))
                }
            })?)
        };
        let script = prepared.as_ref().unwrap_or(script);

        self.releases.room().await;
        // Prepared like any new sandbox of the image.
        let Ready {
            claimed: fresh,
            lease,
        } = self.fleet.claim_ready(work.image, &request.task.id).await?;
        let started = Instant::now();
        let ran = commands::execute(&self.fleet, &fresh, script, Some(request.log)).await;
        self.fleet.phases.record(Phase::Process, started.elapsed());
        let lost = lease.lost().or_else(|| fresh.lost()).map(str::to_owned);
        drop(lease);
        let sandbox = fresh.handle.id.clone();
        self.releases.submit(fresh);
        match (ran, lost) {
            (_, Some(lost)) => {
                Err(StepError::Lost(format!("fresh sandbox {sandbox}: {lost}")).into())
            }
            (Err(error), None) => Err(error.into()),
            (Ok(ran), None) => Ok(FreshRun {
                ran,
                solution,
                sandbox,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The functions a daemon lease calls, on the real local backend with the
    //! real swebench component (5.0.2, `evaluation = fresh`, a row with its
    //! own eval script as 5.x rows have): a work sandbox where an agent
    //! works, evaluated in a fresh sandbox.

    use std::sync::Arc;

    use sandfleet_backend_local::LocalBackend;
    use sandfleet_core::{Capacity, RunId};
    use sandfleet_plugin::adapter::{EvaluationSite, GradeResult, Setting, Task, TaskAdapter};
    use sandfleet_plugin::{HostConfig, KindLimits, Limits, PluginHost, Registry};
    use sandfleet_test_support::calc;

    use super::*;
    use crate::fleet::{Cluster, Fleet, FleetSpec};
    use crate::phases::PhaseTimes;
    use crate::release::ReleaseQueue;
    use crate::retry::Retries;
    use crate::settings::FleetSettings;

    struct Harness {
        _dir: tempfile::TempDir,
        log: std::path::PathBuf,
        evaluator: Evaluator,
        adapter: TaskAdapter,
        task: Task,
    }

    /// Compiled components cached beside the test binaries
    /// (`target/debug/plugin-cache`): the built-ins are compiled once, not
    /// by every test (3 s of CPU each time in a debug build).
    fn plugin_cache() -> std::path::PathBuf {
        let binary = std::env::current_exe().unwrap();
        let deps = binary.parent().unwrap();
        deps.parent().unwrap().join("plugin-cache")
    }

    fn harness() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let config = calc::local_config(dir.path());
        let backend: Arc<dyn Backend> = Arc::new(LocalBackend::new("local", config).unwrap());
        let limits = KindLimits::uniform(Limits {
            deadline: Duration::from_secs(30),
            ..Limits::default()
        });
        let registry = Registry::new(
            PluginHost::new(HostConfig {
                limits,
                cache_dir: Some(plugin_cache()),
                ..HostConfig::default()
            })
            .unwrap(),
        );
        registry
            .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
            .unwrap();
        let adapter = registry.adapter("swebench").unwrap();
        let row = calc::row("calc__calc-1", calc::RUN_TEST);
        let settings = [
            ("grader-version", "swebench-5.0.2"),
            ("evaluation", "fresh"),
        ]
        .map(|(key, value)| Setting {
            key: key.into(),
            value: value.into(),
        });
        let task = adapter.load_blocking(&row.to_string(), &settings).unwrap();
        let phases = Arc::new(PhaseTimes::default());
        let retries = Arc::new(Retries::new(8));
        let fleet = Arc::new(Fleet::new(
            FleetSpec {
                run_id: RunId::generate("fresh-test"),
                clusters: vec![Cluster {
                    name: "local".into(),
                    kind: "local".into(),
                    weight: 1,
                    backend,
                    pace: None,
                }],
                capacity: vec![Capacity::default()],
                images: vec![calc::IMAGE.into()],
                settings: FleetSettings::default(),
                placement: registry.placement("least-loaded").unwrap(),
                timeline: std::sync::Arc::new(crate::timeline::Timeline::off()),
            },
            phases.clone(),
            retries.clone(),
        ));
        let releases = Arc::new(ReleaseQueue::start(fleet.clone(), phases, retries, 4));
        Harness {
            evaluator: Evaluator { fleet, releases },
            adapter,
            task,
            log: dir.path().join("calc.log"),
            _dir: dir,
        }
    }

    impl Harness {
        fn request<'a>(&'a self, solution: Option<&'a str>) -> Request<'a> {
            Request {
                task: &self.task,
                solution,
                adapter: &self.adapter,
                log: &self.log,
            }
        }

        async fn script(&self) -> Script {
            let script = self.adapter.prepare(&self.task, None).await.unwrap();
            assert_eq!(script.evaluate_in, EvaluationSite::FreshSandbox);
            script
        }

        /// A work sandbox after setup, with its tree recorded.
        async fn work_sandbox(&self) -> (Claimed, WorkTree) {
            let work = self.evaluator.fleet.claim(0, &self.task.id).await.unwrap();
            let backend = &self.evaluator.fleet.clusters[work.cluster].backend;
            let tree = record_work_tree(backend.as_ref(), &work.handle, "/testbed")
                .await
                .unwrap();
            (work, tree)
        }

        /// The agent's turn: a shell command in the work sandbox.
        async fn agent(&self, work: &Claimed, command: &str) {
            let backend = &self.evaluator.fleet.clusters[work.cluster].backend;
            let request = ExecRequest {
                argv: vec!["bash".into(), "-c".into(), command.into()],
                workdir: Some("/testbed".into()),
                env: Vec::new(),
                timeout: Duration::from_secs(30),
                merge_stderr: true,
                stdin: None,
                max_output: None,
            };
            let done = backend.exec(&work.handle, &request, None).await.unwrap();
            assert_eq!(
                done.exit_code,
                0,
                "{}",
                String::from_utf8_lossy(&done.stdout)
            );
        }

        /// The work since `tree` evaluated in a fresh sandbox, and graded.
        async fn fresh_grade(&self, work: &Claimed, tree: &WorkTree) -> (FreshRun, GradeResult) {
            let script = self.script().await;
            let fresh = self
                .evaluator
                .evaluate_fresh(work, tree, &self.request(None), &script)
                .await
                .unwrap();
            let grade = self
                .adapter
                .grade(&self.task, fresh.solution.as_deref(), &fresh.ran.outputs)
                .await
                .unwrap();
            (fresh, grade)
        }
    }

    const WRONG_FIX: &str = "sed -i 's/a - b/a * b/' calc.py";
    const RIGHT_FIX: &str = "sed -i 's/a - b/a + b/' calc.py";
    const EDIT_TEST: &str = "printf 'exit 0\\n' > tests/test_add.sh";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_agent_that_edits_a_test_file_does_not_change_the_grade() {
        let h = harness();
        let mut grades = Vec::new();
        for (agent, edits_test) in [
            (WRONG_FIX.to_owned(), false),
            (format!("{WRONG_FIX} && {EDIT_TEST}"), true),
            (RIGHT_FIX.to_owned(), false),
            (format!("{RIGHT_FIX} && {EDIT_TEST}"), true),
        ] {
            let (work, tree) = h.work_sandbox().await;
            h.agent(&work, &agent).await;
            let (fresh, grade) = h.fresh_grade(&work, &tree).await;
            let patch = fresh.solution.as_deref().unwrap();
            // The edit crossed over with the work's changes, and the fresh
            // sandbox put the test back before running it.
            assert_eq!(patch.contains("b/tests/test_add.sh"), edits_test, "{patch}");
            assert_ne!(
                fresh.sandbox, work.handle.id,
                "evaluated in another sandbox"
            );
            grades.push((grade.status, grade.reward, grade.detail));
        }
        assert_eq!(grades[0].0, sandfleet_plugin::adapter::GradeStatus::Failed);
        assert_eq!(grades[1], grades[0], "editing the test changed the grade");
        assert_eq!(grades[2].0, sandfleet_plugin::adapter::GradeStatus::Passed);
        assert_eq!(grades[3], grades[2], "editing the test changed the grade");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_work_diff_holds_the_work_since_the_tree_only() {
        let h = harness();
        let (work, _) = h.work_sandbox().await;
        let backend = &h.evaluator.fleet.clusters[work.cluster].backend;
        // What happened before the tree was recorded (setup) is no work.
        h.agent(&work, "printf 'setup\\n' > setup.txt").await;
        let tree = record_work_tree(backend.as_ref(), &work.handle, "/testbed")
            .await
            .unwrap();
        let nothing = work_diff(backend.as_ref(), &work.handle, "/testbed", &tree)
            .await
            .unwrap();
        assert_eq!(nothing, "");
        h.agent(&work, &format!("{RIGHT_FIX} && printf 'x\\n' > notes.txt"))
            .await;
        let diff = work_diff(backend.as_ref(), &work.handle, "/testbed", &tree)
            .await
            .unwrap();
        assert!(diff.contains("+    return a + b"), "{diff}");
        assert!(
            diff.contains("b/notes.txt"),
            "untracked files count: {diff}"
        );
        assert!(!diff.contains("setup.txt"), "{diff}");
        // Recording and diffing left the sandbox's own index alone.
        h.agent(&work, "test -z \"$(git diff --cached --name-only)\"")
            .await;

        // A work with changes and a solution too cannot say which to grade.
        let script = h.script().await;
        let refused = h
            .evaluator
            .evaluate_fresh(&work, &tree, &h.request(Some(&diff)), &script)
            .await;
        assert!(
            matches!(&refused, Err(EvaluationError::Unusable(m)) if m.contains("a solution and")),
            "{:?}",
            refused.err()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_workdir_that_is_no_git_repository_is_named() {
        let h = harness();
        let work = h.evaluator.fleet.claim(0, "x").await.unwrap();
        let backend = &h.evaluator.fleet.clusters[work.cluster].backend;
        let error = record_work_tree(backend.as_ref(), &work.handle, "/tmp")
            .await
            .unwrap_err();
        assert!(
            matches!(&error, EvaluationError::Unusable(m) if m.contains("`/tmp`") && m.contains("git repository")),
            "{error:?}"
        );
    }
}
