//! One task of a run: get it a sandbox (a recycled one after a verified
//! reset, or a fresh claim), evaluate it there (see [`crate::evaluation`],
//! which a daemon lease's evaluation shares), and make the task's record. A
//! task whose sandbox was lost, or whose claim failed, runs again on
//! another sandbox, `infra_retries` times at most. The sandbox is released
//! afterwards, off the task's path (`release`). A member of a group starts
//! from its group's set-up instead (see [`crate::groups`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use sandfleet_core::file_stem;
use sandfleet_plugin::adapter::{Task, TaskAdapter};
use sandfleet_report::events::{MarkKind, TaskKey};
use tracing::Instrument;

use crate::error::StepError;
use crate::evaluation::{Evaluation, Evaluator, Request, SetUp};
use crate::fleet::Fleet;
use crate::groups::{Base, Group, Groups, Member};
use crate::recycle::{Held, Recycler};
use crate::results::{
    AttemptRecord, GradeRecord, GroupRecord, PluginUse, TaskPlugins, TaskRecord, TaskStatus,
    Timings,
};
use crate::text;
use crate::timeline::{On, Timeline};

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
    /// Which rollout of its task's group this is ([`WorkItem::group`]);
    /// `None` for a task run once.
    pub member: Option<Member>,
}

/// Runs a run's tasks, one at a time per worker.
pub(crate) struct TaskRunner {
    pub(crate) recycler: Recycler,
    pub(crate) evaluator: Evaluator,
    pub(crate) adapter: TaskAdapter,
    pub(crate) logs: PathBuf,
    pub(crate) groups: Groups,
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
    /// Where a group member started from.
    group: Option<GroupRecord>,
}

impl Attempt {
    /// An attempt that had no sandbox to evaluate in, after `claim_started`.
    fn unstarted(
        evaluation: Evaluation,
        claim_started: Instant,
        replaceable: Option<&'static str>,
    ) -> Self {
        Attempt {
            evaluation,
            claim_s: claim_started.elapsed().as_secs_f64(),
            cluster: None,
            sandbox: None,
            reuse: 0,
            reset: None,
            replaceable,
            group: None,
        }
    }
}

/// How a group member's sandbox was had.
enum MemberStart {
    /// Set up, here or in the snapshot it is a fork of.
    SetUp { set_up: SetUp, record: GroupRecord },
    /// To set up as a task of its own (the group's cluster cannot
    /// snapshot).
    Own(GroupRecord),
}

/// Why a group member has no sandbox to evaluate in.
enum Unstarted {
    /// No sandbox could be claimed or forked.
    Claim(StepError),
    /// The group's set-up failed in the member's sandbox.
    SetUp(crate::evaluation::EvaluationError),
}

impl TaskRunner {
    pub(crate) fn fleet(&self) -> &Arc<Fleet> {
        &self.evaluator.fleet
    }

    /// Runs `item` in the sandbox `held` (replacing it when it cannot serve)
    /// and returns the task's record. Without recycling, a sandbox serves
    /// one task: the caller releases it once the record is written.
    pub(crate) async fn run(&self, item: &WorkItem, held: &mut Option<Held>) -> TaskRecord {
        let key = TaskKey {
            id: item.task.id.clone(),
            epoch: item.epoch,
            member: item.member.map(|member| member.index),
        };
        Timeline::for_task(key, self.run_unscoped(item, held)).await
    }

    async fn run_unscoped(&self, item: &WorkItem, held: &mut Option<Held>) -> TaskRecord {
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
                    let fleet = self.fleet();
                    let on = attempt
                        .cluster
                        .as_deref()
                        .zip(attempt.sandbox.as_deref())
                        .map(|(cluster, sandbox)| On {
                            cluster,
                            sandbox,
                            image: &item.task.image,
                        });
                    fleet
                        .timeline
                        .mark(MarkKind::Retry, on, &format!("{reason}: {error}"));
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
        self.groups.finished(item, self.fleet()).await;
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
        let log = self.log_path(item);
        let claim_started = Instant::now();
        let (mut set_up, group) = match self.groups.group_of(item) {
            None => match self.recycler.sandbox_for(image, task, held.take()).await {
                Ok(sandbox) => {
                    *held = Some(sandbox);
                    (None, None)
                }
                Err(error) => {
                    let failed = Evaluation::infra(error, adapter);
                    return Attempt::unstarted(failed, claim_started, Some(CLAIM_FAILED));
                }
            },
            Some(group) => {
                let started = self
                    .start_member(item, image, adapter, held, &group, &log)
                    .await;
                match started {
                    Ok(MemberStart::SetUp { set_up, record }) => (Some(set_up), Some(record)),
                    Ok(MemberStart::Own(record)) => (None, Some(record)),
                    Err(Unstarted::Claim(error)) => {
                        let failed = Evaluation::infra(error, adapter);
                        return Attempt::unstarted(failed, claim_started, Some(CLAIM_FAILED));
                    }
                    Err(Unstarted::SetUp(error)) => {
                        let failed = Evaluation::unset_up(error, adapter);
                        let lost = held.as_ref().is_some_and(|h| h.lost().is_some());
                        if lost && let Some(broken) = held.take() {
                            self.recycler.release(broken);
                        }
                        let replaceable = (lost && failed.status == TaskStatus::InfraError)
                            .then_some(SANDBOX_LOST);
                        return Attempt::unstarted(failed, claim_started, replaceable);
                    }
                }
            }
        };
        let current = held.as_mut().expect("a started attempt holds a sandbox");
        let claim_s = claim_started.elapsed().as_secs_f64();
        let cluster = Some(self.fleet().clusters[current.claimed.cluster].name.clone());
        let sandbox = Some(current.claimed.handle.id.clone());
        let reuse = current.served;
        let reset = current.reset_check();
        current.served += 1;
        let request = Request {
            task,
            solution: item.solution.as_deref(),
            adapter,
            log: &log,
        };
        let evaluation = self.evaluator.evaluate(current, &mut set_up, request).await;
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
            group,
        }
    }

    /// A sandbox in `held` for `member` of `group`: the first member to
    /// come claims one, sets the task up there and snapshots it; the
    /// others fork the snapshot (or, where the cluster cannot snapshot,
    /// claim and set up their own).
    async fn start_member(
        &self,
        item: &WorkItem,
        image: usize,
        adapter: &TaskAdapter,
        held: &mut Option<Held>,
        group: &Group,
        log: &std::path::Path,
    ) -> Result<MemberStart, Unstarted> {
        let task = &item.task;
        let member = item.member.expect("groups are of members");
        let fleet = self.fleet();
        let mut set_up_here = None;
        let base = {
            let (held, set_up_here) = (&mut *held, &mut set_up_here);
            group
                .base
                .get_or_try_init(|| async move {
                    let sandbox = self
                        .recycler
                        .sandbox_for(image, task, held.take())
                        .await
                        .map_err(Unstarted::Claim)?;
                    let sandbox = held.insert(sandbox);
                    let cluster = sandbox.claimed.cluster;
                    let Some(snapshots) = fleet.clusters[cluster].backend.snapshots() else {
                        self.groups.say_unforkable(fleet, cluster);
                        return Ok(Base::EachSetsUp);
                    };
                    fleet.counts.group_set_ups.fetch_add(1, Ordering::Relaxed);
                    let set_up = self
                        .evaluator
                        .set_up(&sandbox.claimed, task, adapter.clone(), log)
                        .await
                        .map_err(Unstarted::SetUp)?;
                    *set_up_here = Some(set_up.clone());
                    let deadline = Instant::now() + fleet.settings.claim_timeout;
                    match snapshots
                        .snapshot(&sandbox.claimed.handle, &fleet.run_id.labels(), deadline)
                        .await
                    {
                        Ok(snapshot) => Ok(Base::Snapshot {
                            snapshot,
                            cluster,
                            set_up: Arc::new(set_up),
                        }),
                        Err(error) => {
                            sandbox.claimed.note(&error);
                            tracing::warn!(task = %task.id, %error, "no snapshot of the group's set-up: every member sets up its own sandbox");
                            Ok(Base::EachSetsUp)
                        }
                    }
                })
                .await?
                .clone()
        };
        let snapshot_id = match &base {
            Base::Snapshot { snapshot, .. } => Some(snapshot.id.clone()),
            Base::EachSetsUp => None,
        };
        let record = |set_up_here: bool| GroupRecord {
            size: member.size,
            member: member.index,
            snapshot: snapshot_id.clone(),
            set_up_here,
        };
        if let Some(set_up) = set_up_here {
            return Ok(MemberStart::SetUp {
                set_up,
                record: record(true),
            });
        }
        match base {
            Base::Snapshot {
                snapshot,
                cluster,
                set_up,
            } => {
                // A sandbox held from another task cannot hold this one's set-up.
                if let Some(previous) = held.take() {
                    self.recycler.release(previous);
                }
                self.evaluator.releases.room().await;
                let claimed = fleet
                    .fork_member(&snapshot, cluster, image, item)
                    .await
                    .map_err(Unstarted::Claim)?;
                let lease = fleet.keep(&claimed);
                *held = Some(Held::once(claimed, lease));
                fleet.counts.group_forks.fetch_add(1, Ordering::Relaxed);
                Ok(MemberStart::SetUp {
                    set_up: SetUp::clone(&set_up),
                    record: record(false),
                })
            }
            Base::EachSetsUp => {
                let sandbox = self
                    .recycler
                    .sandbox_for(image, task, held.take())
                    .await
                    .map_err(Unstarted::Claim)?;
                *held = Some(sandbox);
                fleet.counts.group_set_ups.fetch_add(1, Ordering::Relaxed);
                Ok(MemberStart::Own(record(true)))
            }
        }
    }

    /// The log file of `item`.
    fn log_path(&self, item: &WorkItem) -> PathBuf {
        self.logs.join(log_name(
            &item.task.id,
            item.epoch,
            item.member.map(|member| member.index),
            self.fleet().settings.epochs,
        ))
    }
}

/// The name of a task's log in `logs/`, for `epoch` of `epochs` and a group
/// `member`: distinct ids get distinct files (`col/a` and `col_a`
/// included).
pub(crate) fn log_name(task_id: &str, epoch: u32, member: Option<u32>, epochs: u32) -> String {
    let mut name = file_stem(task_id);
    if epochs > 1 {
        name.push_str(&format!(".epoch{epoch}"));
    }
    if let Some(member) = member {
        name.push_str(&format!(".member{member}"));
    }
    name + ".log"
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
        group: last.group,
        finished_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    }
}

/// The record of `item`, which never ran: the infrastructure failed before
/// any sandbox could be had for it (its image could not be pulled).
pub(crate) fn unstarted(item: &WorkItem, adapter: &TaskAdapter, error: StepError) -> TaskRecord {
    let now = Instant::now();
    let last = Attempt::unstarted(Evaluation::infra(error, adapter), now, None);
    into_record(item, last, Vec::new(), now)
}
