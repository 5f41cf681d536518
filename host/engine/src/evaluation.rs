//! One evaluation of a task, for batch tasks (`task`) and daemon leases
//! (`session`) alike: the adapter prepares the task's script, the script
//! runs (in the work sandbox, or set up there and evaluated in a fresh
//! sandbox of the same image, see `fresh`), the adapter grades the
//! outputs, and one mapping turns what happened into `ok`, `failed` or
//! `infra_error`:
//!
//! - `infra_error` when the infrastructure failed (a claim, an exec, a
//!   backend, a lost lease, a plugin fault nothing answered) or the adapter
//!   judged the environment at fault (the grade's `infra`);
//! - `failed` when the adapter cannot prepare or grade the task (it
//!   declined), a command overran under the `error` timeout rule, the work
//!   cannot be evaluated in a fresh sandbox, or the grade is not `passed`;
//! - `ok` when the grade is `passed`.
//!
//! The adapter is pinned by the caller for the whole evaluation, so one
//! version prepares and grades it whatever reloads come meanwhile.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandfleet_plugin::adapter::{
    EvaluationSite, GradeResult, Script, Task, TaskAdapter, TimeoutRule,
};

use sandfleet_report::events::SegmentKind;

use crate::commands::{self, Ran};
use crate::error::StepError;
use crate::fleet::{Claimed, Fleet};
use crate::fresh::{WorkTree, record_work_tree};
use crate::phases::Phase;
use crate::recycle::Held;
use crate::release::ReleaseQueue;
use crate::results::{InfraFailureRecord, PluginUse, TaskStatus};

/// How an evaluation ended, as a run records it and a lease answers it.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// `ok`, `failed` or `infra_error` (see the module's documentation).
    pub status: TaskStatus,
    /// The adapter's grade, when it graded.
    pub grade: Option<GradeResult>,
    /// An evaluate command overran its timeout.
    pub timed_out: bool,
    /// What went wrong: why there is no grade, or why the adapter judged
    /// the environment at fault.
    pub error: Option<String>,
    /// Why the adapter judged the environment at fault, when it did.
    pub infra_failure: Option<InfraFailureRecord>,
    /// The fresh sandbox the evaluation ran in, when the adapter asked for
    /// one.
    pub fresh_sandbox: Option<String>,
    /// Bytes the commands wrote past the output limit, dropped before
    /// grading.
    pub output_dropped: u64,
    /// Time spent running the script (setup, files, evaluate).
    pub process: Duration,
    /// Time spent in the adapter's grade call.
    pub grading: Duration,
    /// Wall time of the whole evaluation.
    pub duration: Duration,
    /// The adapter version that prepared and graded it.
    pub adapter: PluginUse,
}

/// Why a step of an evaluation could not be done.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EvaluationError {
    /// The infrastructure failed: the task says nothing about the work and
    /// may be retried.
    #[error(transparent)]
    Infra(#[from] StepError),
    /// The work cannot be evaluated as asked: its workdir is no git
    /// repository, its patch is not UTF-8 or is too large, it comes with a
    /// solution as well, or the adapter declines to prepare it.
    #[error("{0}")]
    Unusable(String),
}

/// The adapter's setup, run in a work sandbox for one task.
#[derive(Clone)]
pub(crate) struct SetUp {
    task_id: String,
    /// The adapter version that set it up, pinned: the evaluations of the
    /// task in this sandbox prepare and grade with it.
    pub(crate) adapter: TaskAdapter,
    /// The workdir as setup left it, where the script evaluates in a fresh
    /// sandbox: the work is what changed since.
    work_tree: Option<WorkTree>,
}

impl SetUp {
    /// The task set up.
    pub(crate) fn task_id(&self) -> &str {
        &self.task_id
    }
}

/// What to evaluate.
pub(crate) struct Request<'a> {
    pub(crate) task: &'a Task,
    pub(crate) solution: Option<&'a str>,
    /// Pinned for this evaluation.
    pub(crate) adapter: &'a TaskAdapter,
    /// Where the commands' output goes.
    pub(crate) log: &'a Path,
}

/// What happened, before it is mapped to a status.
enum Outcome {
    Graded { grade: GradeResult, timed_out: bool },
    Ungraded { error: String, timed_out: bool },
    Infra(StepError),
}

/// Facts about the run of the script, for the evaluation.
#[derive(Default)]
struct Details {
    fresh_sandbox: Option<String>,
    output_dropped: u64,
    process: Duration,
    grading: Duration,
}

/// Evaluates tasks in the fleet's sandboxes.
pub(crate) struct Evaluator {
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) releases: Arc<ReleaseQueue>,
}

impl Evaluator {
    /// Runs the adapter's setup for `task` in `work` with `adapter`
    /// (pinned), and records the work tree when its script evaluates in a
    /// fresh sandbox: a daemon lease sets up once, then its client works.
    ///
    /// # Errors
    ///
    /// When the adapter cannot prepare the task, a command cannot run, or
    /// the work tree cannot be recorded.
    pub(crate) async fn set_up(
        &self,
        work: &Claimed,
        task: &Task,
        adapter: TaskAdapter,
        log: &Path,
    ) -> Result<SetUp, EvaluationError> {
        let script = adapter
            .prepare(task, None)
            .await
            .map_err(|e| StepError::plugin("prepare", e))?;
        let work_tree = self.run_setup(work, &script, log).await?;
        Ok(SetUp {
            task_id: task.id.clone(),
            adapter,
            work_tree,
        })
    }

    /// Runs the script's setup commands in `work`; returns the work tree
    /// after them when the script evaluates in a fresh sandbox.
    async fn run_setup(
        &self,
        work: &Claimed,
        script: &Script,
        log: &Path,
    ) -> Result<Option<WorkTree>, EvaluationError> {
        let env = commands::environment(script);
        commands::set_up(&self.fleet, work, script, &env, Some(log)).await?;
        match script.evaluate_in {
            EvaluationSite::WorkSandbox => Ok(None),
            EvaluationSite::FreshSandbox => {
                let backend = &self.fleet.clusters[work.cluster].backend;
                let tree =
                    record_work_tree(backend.as_ref(), &work.handle, &script.workdir).await?;
                Ok(Some(tree))
            }
        }
    }

    /// Evaluates `request` with the sandbox `work`; `set_up` says what
    /// setup already ran there, and holds this task's afterwards.
    pub(crate) async fn evaluate(
        &self,
        work: &Held,
        set_up: &mut Option<SetUp>,
        request: Request<'_>,
    ) -> Evaluation {
        let started = Instant::now();
        let mut details = Details::default();
        let outcome = self.run(work, set_up, &request, &mut details).await;
        let mut evaluation = outcome.into_evaluation(details, request.adapter);
        evaluation.duration = started.elapsed();
        evaluation
    }

    async fn run(
        &self,
        work: &Held,
        set_up: &mut Option<SetUp>,
        request: &Request<'_>,
        details: &mut Details,
    ) -> Outcome {
        let Request {
            task,
            solution,
            adapter,
            log,
        } = *request;
        let mut script = match adapter.prepare(task, solution).await {
            Ok(script) => script,
            Err(e) if !e.is_plugin_fault() => {
                return Outcome::Ungraded {
                    error: format!("the adapter cannot prepare this task: {e}"),
                    timed_out: false,
                };
            }
            Err(e) => return Outcome::Infra(StepError::plugin("prepare", e)),
        };
        let done_here = set_up.take().filter(|done| done.task_id == task.id);
        let set_up_here = done_here.is_some();
        let mut work_tree = done_here.and_then(|done| done.work_tree);
        let started = Instant::now();
        let mut solution = solution.map(str::to_string);
        let ran = match script.evaluate_in {
            EvaluationSite::WorkSandbox => {
                if set_up_here {
                    script.setup.clear();
                }
                let ran = commands::execute(&self.fleet, &work.claimed, &script, Some(log)).await;
                self.fleet.phases.record(Phase::Process, started.elapsed());
                ran.map_err(EvaluationError::from)
            }
            // The work since setup, graded in a sandbox it never touched.
            EvaluationSite::FreshSandbox => {
                let since = match work_tree.clone() {
                    Some(tree) => Ok(tree),
                    None => self
                        .run_setup(&work.claimed, &script, log)
                        .await
                        .and_then(|tree| {
                            tree.ok_or_else(|| {
                                EvaluationError::Unusable("no work tree was recorded".into())
                            })
                        }),
                };
                work_tree = since.as_ref().ok().cloned();
                let fresh = match since {
                    Ok(since) => {
                        let request = Request {
                            solution: solution.as_deref(),
                            ..*request
                        };
                        self.evaluate_fresh(&work.claimed, &since, &request, &script)
                            .await
                    }
                    Err(error) => Err(error),
                };
                fresh.map(|fresh| {
                    details.fresh_sandbox = Some(fresh.sandbox);
                    solution = fresh.solution;
                    fresh.ran
                })
            }
        };
        details.process = started.elapsed();
        *set_up = Some(SetUp {
            task_id: task.id.clone(),
            adapter: adapter.clone(),
            work_tree,
        });
        let outputs = match (ran, work.lost()) {
            // Outputs from a sandbox whose lease lapsed are not graded.
            (_, Some(lost)) => return Outcome::Infra(StepError::Lost(lost.to_string())),
            (Err(EvaluationError::Infra(error)), None) => return Outcome::Infra(error),
            (Err(EvaluationError::Unusable(error)), None) => {
                return Outcome::Ungraded {
                    error,
                    timed_out: false,
                };
            }
            (Ok(Ran { outputs, dropped }), None) => {
                details.output_dropped = dropped;
                outputs
            }
        };
        let timed_out = outputs.iter().any(|o| o.timed_out);
        if timed_out && script.timeout_rule == TimeoutRule::Error {
            let which = outputs.iter().position(|o| o.timed_out).unwrap_or_default();
            return Outcome::Ungraded {
                error: format!(
                    "evaluate command {which} overran its timeout; not graded (timeout rule: error)"
                ),
                timed_out,
            };
        }
        let started = Instant::now();
        let graded = adapter.grade(task, solution.as_deref(), &outputs).await;
        details.grading = started.elapsed();
        self.fleet.phases.record(Phase::Grade, details.grading);
        self.fleet.timeline.segment(
            SegmentKind::Grade,
            started,
            self.fleet.on(&work.claimed),
            graded.is_ok(),
        );
        match graded {
            Ok(grade) => Outcome::Graded { grade, timed_out },
            Err(e) if !e.is_plugin_fault() => Outcome::Ungraded {
                error: format!("the adapter cannot grade this task: {e}"),
                timed_out,
            },
            Err(e) => Outcome::Infra(StepError::plugin("grade", e)),
        }
    }
}

impl Evaluation {
    /// An evaluation that could not start: the infrastructure failed
    /// before (no sandbox could be had).
    pub(crate) fn infra(error: StepError, adapter: &TaskAdapter) -> Self {
        Outcome::Infra(error).into_evaluation(Details::default(), adapter)
    }

    /// An evaluation whose set-up failed: `failed` when the adapter
    /// declined the task or the work cannot be evaluated, `infra_error`
    /// otherwise, as if the set-up had run in [`Evaluator::evaluate`].
    pub(crate) fn unset_up(error: EvaluationError, adapter: &TaskAdapter) -> Self {
        let outcome = match error {
            EvaluationError::Infra(StepError::Plugin { source, .. })
                if !source.is_plugin_fault() =>
            {
                Outcome::Ungraded {
                    error: format!("the adapter cannot prepare this task: {source}"),
                    timed_out: false,
                }
            }
            EvaluationError::Infra(error) => Outcome::Infra(error),
            EvaluationError::Unusable(error) => Outcome::Ungraded {
                error,
                timed_out: false,
            },
        };
        outcome.into_evaluation(Details::default(), adapter)
    }
}

impl Outcome {
    /// The one mapping from what happened to a status.
    fn into_evaluation(self, details: Details, adapter: &TaskAdapter) -> Evaluation {
        let (status, grade, timed_out, error, infra_failure) = match self {
            Outcome::Graded { grade, timed_out } => {
                let infra = grade.infra.as_ref().map(InfraFailureRecord::from);
                let error = infra.as_ref().map(|infra| {
                    format!(
                        "the adapter judged the environment at fault ({}, {}): {}",
                        infra.reason,
                        infra.tier(),
                        grade.detail
                    )
                });
                (
                    TaskStatus::of_grade(&grade),
                    Some(grade),
                    timed_out,
                    error,
                    infra,
                )
            }
            Outcome::Ungraded { error, timed_out } => {
                (TaskStatus::Failed, None, timed_out, Some(error), None)
            }
            Outcome::Infra(error) => (
                TaskStatus::InfraError,
                None,
                false,
                Some(error.to_string()),
                None,
            ),
        };
        Evaluation {
            status,
            grade,
            timed_out,
            error,
            infra_failure,
            fresh_sandbox: details.fresh_sandbox,
            output_dropped: details.output_dropped,
            process: details.process,
            grading: details.grading,
            duration: Duration::ZERO,
            adapter: PluginUse::of_adapter(adapter),
        }
    }
}
