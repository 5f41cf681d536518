//! One task of a run: get it a sandbox (a recycled one after a verified
//! reset, or a fresh claim), evaluate it there (see [`crate::evaluation`],
//! which a daemon lease's evaluation shares), and make the task's record. A
//! task whose sandbox was lost, or whose claim failed, runs again on
//! another sandbox, `infra_retries` times at most. The sandbox is released
//! afterwards, off the task's path (`release`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sandfleet_core::file_stem;
use sandfleet_plugin::adapter::{Task, TaskAdapter};
use tracing::Instrument;

use crate::error::StepError;
use crate::evaluation::{Evaluation, Evaluator, Request};
use crate::fleet::Fleet;
use crate::recycle::{Held, Recycler};
use crate::results::{
    AttemptRecord, GradeRecord, PluginUse, TaskPlugins, TaskRecord, TaskStatus, Timings,
};
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

/// Runs a run's tasks, one at a time per worker.
pub(crate) struct TaskRunner {
    pub(crate) recycler: Recycler,
    pub(crate) evaluator: Evaluator,
    pub(crate) adapter: TaskAdapter,
    pub(crate) logs: PathBuf,
}

/// One attempt of a task, before its record.
struct Attempt {
    evaluation: Evaluation,
    claim_s: f64,
    cluster: Option<String>,
    sandbox: Option<String>,
    reuse: u32,
    /// The reset check that readied the sandbox.
    reset: Option<PluginUse>,
    /// Set when another sandbox may mend what failed: the reason.
    replaceable: Option<&'static str>,
}

impl TaskRunner {
    pub(crate) fn fleet(&self) -> &Arc<Fleet> {
        &self.evaluator.fleet
    }

    /// Runs `item` in the sandbox `held` (replacing it when it cannot serve)
    /// and returns the task's record. Without recycling, a sandbox serves
    /// one task: the caller releases it once the record is written.
    pub(crate) async fn run(&self, item: &WorkItem, held: &mut Option<Held>) -> TaskRecord {
        let span = tracing::info_span!("task", task = %item.task.id, epoch = item.epoch);
        let started = Instant::now();
        // One adapter version prepares and grades the task, every attempt.
        let adapter = self.adapter.pin();
        let mut attempts = Vec::new();
        let last = loop {
            let attempt = self
                .attempt(item, &adapter, held)
                .instrument(span.clone())
                .await;
            match attempt.replaceable {
                Some(reason) if attempts.len() < self.fleet().settings.infra_retries as usize => {
                    let error = attempt.evaluation.error.clone().unwrap_or_default();
                    tracing::warn!(parent: &span, %error, "{reason}: running the task again on another sandbox");
                    attempts.push(AttemptRecord {
                        sandbox: attempt.sandbox,
                        cluster: attempt.cluster,
                        retried_for: Some(reason.to_string()),
                        error: Some(text::truncated(&error, MAX_ERROR)),
                    });
                }
                _ => break attempt,
            }
        };
        into_record(item, last, attempts, started)
    }

    async fn attempt(
        &self,
        item: &WorkItem,
        adapter: &TaskAdapter,
        held: &mut Option<Held>,
    ) -> Attempt {
        let task = &item.task;
        let image = self
            .fleet()
            .images
            .iter()
            .position(|i| *i == task.image)
            .expect("images come from the tasks");
        let claim_started = Instant::now();
        let current = match self.recycler.sandbox_for(image, task, held.take()).await {
            Ok(sandbox) => held.insert(sandbox),
            Err(error) => {
                return Attempt {
                    evaluation: Evaluation::infra(error, adapter),
                    claim_s: claim_started.elapsed().as_secs_f64(),
                    cluster: None,
                    sandbox: None,
                    reuse: 0,
                    reset: None,
                    replaceable: Some(CLAIM_FAILED),
                };
            }
        };
        let claim_s = claim_started.elapsed().as_secs_f64();
        let cluster = Some(self.fleet().clusters[current.claimed.cluster].name.clone());
        let sandbox = Some(current.claimed.handle.id.clone());
        let reuse = current.served;
        let reset = current.reset_check();
        current.served += 1;
        let log = self.log_path(item);
        let request = Request {
            task,
            solution: item.solution.as_deref(),
            adapter,
            log: &log,
        };
        let evaluation = self.evaluator.evaluate(current, &mut None, request).await;
        let lost = current.lost().is_some();
        if lost && let Some(broken) = held.take() {
            // The sandbox is in an unknown state: never reuse it.
            self.recycler.release(broken);
        }
        Attempt {
            replaceable: (lost && evaluation.status == TaskStatus::InfraError)
                .then_some(SANDBOX_LOST),
            evaluation,
            claim_s,
            cluster,
            sandbox,
            reuse,
            reset,
        }
    }

    /// The log file of `item`: distinct ids get distinct files (`col/a` and
    /// `col_a` included).
    fn log_path(&self, item: &WorkItem) -> PathBuf {
        let name = if self.fleet().settings.epochs > 1 {
            format!("{}.epoch{}.log", file_stem(&item.task.id), item.epoch)
        } else {
            format!("{}.log", file_stem(&item.task.id))
        };
        self.logs.join(name)
    }
}

/// The record of `item` whose last attempt was `last`, after `attempts`
/// (empty when it ran once), started at `started`.
fn into_record(
    item: &WorkItem,
    last: Attempt,
    mut attempts: Vec<AttemptRecord>,
    started: Instant,
) -> TaskRecord {
    let evaluation = last.evaluation;
    let error = evaluation
        .error
        .map(|error| text::truncated(&error, MAX_ERROR));
    if !attempts.is_empty() {
        attempts.push(AttemptRecord {
            sandbox: last.sandbox.clone(),
            cluster: last.cluster.clone(),
            retried_for: None,
            error: error.clone(),
        });
    }
    TaskRecord {
        task_id: item.task.id.clone(),
        epoch: item.epoch,
        status: evaluation.status,
        image: item.task.image.clone(),
        cluster: last.cluster,
        sandbox: last.sandbox,
        reuse: last.reuse,
        timed_out: evaluation.timed_out,
        error,
        output_dropped: evaluation.output_dropped,
        timings: Timings {
            claim_s: last.claim_s,
            process_s: evaluation.process.as_secs_f64(),
            grade_s: evaluation.grading.as_secs_f64(),
            total_s: started.elapsed().as_secs_f64(),
        },
        grade: evaluation.grade.map(GradeRecord::from),
        infra_failure: evaluation.infra_failure,
        fresh_sandbox: evaluation.fresh_sandbox,
        attempts,
        plugins: TaskPlugins {
            adapter: evaluation.adapter,
            reset: last.reset,
        },
        finished_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    }
}

/// The record of `item`, which never ran: the infrastructure failed before
/// any sandbox could be had for it (its image could not be pulled).
pub(crate) fn unstarted(item: &WorkItem, adapter: &TaskAdapter, error: StepError) -> TaskRecord {
    let last = Attempt {
        evaluation: Evaluation::infra(error, adapter),
        claim_s: 0.0,
        cluster: None,
        sandbox: None,
        reuse: 0,
        reset: None,
        replaceable: None,
    };
    into_record(item, last, Vec::new(), Instant::now())
}
