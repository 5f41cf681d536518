//! One task: prepare its script, get a sandbox (a recycled one after a
//! verified reset, or a fresh claim), run the script, grade the outputs,
//! and make the task's record. The sandbox is released afterwards, off the
//! task's path (`release`).
//!
//! Only the infrastructure (claims, exec, backend, a lost lease) or a grade
//! whose adapter judged the environment at fault (`infra`) makes a task an
//! `infra_error`; a task the adapter cannot prepare, a command that overruns
//! under the `error` timeout rule, or any other grade of `error` make it
//! `failed`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sandfleet_plugin::adapter::{EvaluationSite, GradeResult, Task, TaskAdapter, TimeoutRule};
use sandfleet_plugin::reset::ResetCheck;
use tracing::Instrument;

use crate::fleet::Fleet;
use crate::fresh::FreshError;
use crate::phases::{Phase, PhaseTimes};
use crate::recycle::Held;
use crate::release::ReleaseQueue;
use crate::results::{
    AttemptRecord, GradeRecord, InfraFailureRecord, TaskRecord, TaskStatus, TestRecord, Timings,
};
use crate::retry::Retries;
use crate::settings::FleetSettings;
use crate::text;

/// Bytes of an error or grade detail kept in a result line.
const MAX_ERROR: usize = 4096;

/// Why an attempt was repeated: its sandbox was gone.
const SANDBOX_LOST: &str = "sandbox_lost";
/// Why an attempt was repeated: no sandbox could be claimed for it.
const CLAIM_FAILED: &str = "claim_failed";

/// A task to run, with the solution to evaluate.
#[derive(Debug, Clone)]
pub struct WorkItem {
    /// The task as the adapter loaded it.
    pub task: Task,
    /// The candidate solution (e.g. a model patch), if any.
    pub solution: Option<String>,
    /// The pass over the dataset, from 0.
    pub epoch: u32,
}

pub(crate) struct TaskRunner {
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) adapter: TaskAdapter,
    pub(crate) reset: Option<ResetCheck>,
    pub(crate) settings: FleetSettings,
    pub(crate) phases: Arc<PhaseTimes>,
    pub(crate) retries: Arc<Retries>,
    pub(crate) releases: Arc<ReleaseQueue>,
    pub(crate) logs: PathBuf,
}

/// How far a task got, for its record.
struct Progress {
    started: Instant,
    timings: Timings,
    cluster: Option<String>,
    sandbox: Option<String>,
    reuse: u32,
    output_dropped: u64,
    fresh_sandbox: Option<String>,
    /// Set when the attempt failed in a way another sandbox can mend: its
    /// sandbox was lost, or its claim failed. The reason, for the record.
    replaceable: Option<&'static str>,
}

enum Outcome {
    Graded { grade: GradeResult, timed_out: bool },
    Ungraded { error: String, timed_out: bool },
    Infra(String),
}

impl TaskRunner {
    /// Runs `item` in the sandbox `held` (replacing it when it cannot serve)
    /// and returns the task's record. Without recycling, a sandbox serves
    /// one task: the caller releases it once the record is written.
    pub(crate) async fn run(&self, item: &WorkItem, held: &mut Option<Held>) -> TaskRecord {
        let span = tracing::info_span!("task", task = %item.task.id, epoch = item.epoch);
        let mut progress = Progress {
            started: Instant::now(),
            timings: Timings::default(),
            cluster: None,
            sandbox: None,
            reuse: 0,
            output_dropped: 0,
            fresh_sandbox: None,
            replaceable: None,
        };
        // Replace and retry: a task whose sandbox was lost, or whose claim
        // failed, runs again on another sandbox (the lost one is released
        // by then), `infra_retries` times at most.
        let mut attempts = Vec::new();
        let outcome = loop {
            let outcome = self
                .attempt(item, held, &mut progress)
                .instrument(span.clone())
                .await;
            match (outcome, progress.replaceable.take()) {
                (Outcome::Infra(error), Some(reason))
                    if attempts.len() < self.settings.infra_retries as usize =>
                {
                    tracing::warn!(parent: &span, %error, "{reason}: running the task again on another sandbox");
                    attempts.push(AttemptRecord {
                        sandbox: progress.sandbox.take(),
                        cluster: progress.cluster.take(),
                        retried_for: Some(reason.to_string()),
                        error: Some(text::truncated(&error, MAX_ERROR)),
                    });
                }
                (outcome, _) => break outcome,
            }
        };
        progress.timings.total_s = progress.started.elapsed().as_secs_f64();
        let mut infra_failure = None;
        let (status, timed_out, error, grade) = match outcome {
            Outcome::Graded { grade, timed_out } => {
                let status = TaskStatus::of_grade(&grade);
                infra_failure = grade.infra.as_ref().map(InfraFailureRecord::from);
                let error = infra_failure.as_ref().map(|infra| {
                    format!(
                        "the adapter judged the environment at fault ({}, {}): {}",
                        infra.reason,
                        infra.tier(),
                        grade.detail
                    )
                });
                (status, timed_out, error, Some(grade_record(grade)))
            }
            Outcome::Ungraded { error, timed_out } => {
                (TaskStatus::Failed, timed_out, Some(error), None)
            }
            Outcome::Infra(error) => (TaskStatus::InfraError, false, Some(error), None),
        };
        if !attempts.is_empty() {
            attempts.push(AttemptRecord {
                sandbox: progress.sandbox.clone(),
                cluster: progress.cluster.clone(),
                retried_for: None,
                error: error.as_ref().map(|e| text::truncated(e, MAX_ERROR)),
            });
        }
        TaskRecord {
            task_id: item.task.id.clone(),
            epoch: item.epoch,
            status,
            image: item.task.image.clone(),
            cluster: progress.cluster,
            sandbox: progress.sandbox,
            reuse: progress.reuse,
            timed_out,
            error: error.map(|error| text::truncated(&error, MAX_ERROR)),
            output_dropped: progress.output_dropped,
            timings: progress.timings,
            grade,
            infra_failure,
            fresh_sandbox: progress.fresh_sandbox,
            attempts,
            finished_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string(),
        }
    }

    async fn attempt(
        &self,
        item: &WorkItem,
        held: &mut Option<Held>,
        progress: &mut Progress,
    ) -> Outcome {
        let task = &item.task;
        let script = match self.adapter.prepare(task, item.solution.as_deref()).await {
            Ok(script) => script,
            Err(e) if !e.is_plugin_fault() => {
                return Outcome::Ungraded {
                    error: format!("the adapter cannot prepare this task: {e}"),
                    timed_out: false,
                };
            }
            Err(e) => return Outcome::Infra(format!("prepare: {e}")),
        };
        let image = self
            .fleet
            .images
            .iter()
            .position(|i| *i == task.image)
            .expect("images come from the tasks");

        let claim_started = Instant::now();
        if let Err(error) = self.sandbox_for(image, task, held).await {
            progress.replaceable = Some(CLAIM_FAILED);
            return Outcome::Infra(error);
        }
        progress.timings.claim_s = claim_started.elapsed().as_secs_f64();
        let current = held.as_mut().expect("sandbox_for leaves a sandbox");
        progress.cluster = Some(self.fleet.clusters[current.claimed.cluster].name.clone());
        progress.sandbox = Some(current.claimed.handle.id.clone());
        progress.reuse = current.served;
        current.served += 1;
        let claimed = current.claimed.clone();

        let process_started = Instant::now();
        let mut solution = item.solution.clone();
        let outputs = match script.evaluate_in {
            EvaluationSite::WorkSandbox => {
                let outputs = self.execute(&claimed, item, &script).await;
                self.phases
                    .record(Phase::Process, process_started.elapsed());
                outputs
            }
            EvaluationSite::FreshSandbox => {
                match self
                    .set_up_then_evaluate_fresh(&claimed, item, &script)
                    .await
                {
                    Ok(fresh) => {
                        progress.fresh_sandbox = Some(fresh.sandbox);
                        solution = fresh.solution;
                        Ok(fresh.ran)
                    }
                    Err(FreshError::Infra(error)) => Err(error),
                    Err(FreshError::Unusable(error)) => {
                        return Outcome::Ungraded {
                            error,
                            timed_out: false,
                        };
                    }
                }
            }
        };
        progress.timings.process_s = process_started.elapsed().as_secs_f64();
        let lost = held.as_ref().and_then(Held::lost).map(str::to_string);
        if lost.is_some() {
            progress.replaceable = Some(SANDBOX_LOST);
        }
        let outputs = match (outputs, lost) {
            // Outputs from a sandbox whose lease lapsed are not graded.
            (_, Some(lost)) | (Err(lost), None) => {
                // The sandbox is in an unknown state: never reuse it.
                if let Some(broken) = held.take() {
                    self.release(broken);
                }
                return Outcome::Infra(lost);
            }
            (Ok(ran), None) => {
                progress.output_dropped = ran.dropped;
                ran.outputs
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

        let grade_started = Instant::now();
        let graded = self
            .adapter
            .grade(task, solution.as_deref(), &outputs)
            .await;
        progress.timings.grade_s = grade_started.elapsed().as_secs_f64();
        self.phases.record(Phase::Grade, grade_started.elapsed());
        match graded {
            Ok(grade) => Outcome::Graded { grade, timed_out },
            Err(e) if !e.is_plugin_fault() => Outcome::Ungraded {
                error: format!("the adapter cannot grade this task: {e}"),
                timed_out,
            },
            Err(e) => Outcome::Infra(format!("grade: {e}")),
        }
    }
}

fn grade_record(grade: GradeResult) -> GradeRecord {
    GradeRecord {
        status: grade.status.name().to_string(),
        reward: grade.reward,
        detail: text::truncated(&grade.detail, MAX_ERROR),
        tests: TestRecord::all(&grade.tests),
        report: serde_json::from_str(&grade.report)
            .unwrap_or(serde_json::Value::String(grade.report)),
    }
}
