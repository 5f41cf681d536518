//! The sandbox a worker or a lease holds between tasks, and recycling it:
//! a task of the same image reuses it only after the backend has scrubbed
//! it, the reset check has reset it, the backend has scrubbed it again and
//! the reset check has judged it clean; a sandbox that fails any of that is
//! quarantined (released, never reused).
//!
//! Where the sandbox's backend restores sandboxes in place (and
//! `reset_by_snapshot`, the default), its baseline is instead a snapshot
//! taken of it fresh, and its reset a restore to that snapshot: every
//! process ends and everything written since goes, workdir and all, so
//! there is nothing for a reset check to verify.
//!
//! A sandbox's reset-check baseline, resets and verdicts come from one
//! version of the reset check, pinned when the baseline is taken: outputs one version
//! recorded mean nothing to another. When that version faults and the
//! built-in fallback answers its calls, a sandbox whose baseline the faulty
//! version took cannot be judged by the built-in and is quarantined; every
//! new sandbox gets the built-in's own baseline and recycles as usual.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandfleet_core::SnapshotRef;
use sandfleet_plugin::adapter::{Command, CommandOutput, Task};
use sandfleet_plugin::reset::{ResetCheck, Verdict};
use sandfleet_report::events::{MarkKind, SegmentKind};

use crate::commands::run_commands;
use crate::error::StepError;
use crate::fleet::{Claimed, Fleet};
use crate::lease::LeaseKeeper;
use crate::phases::Phase;
use crate::prepare::Ready;
use crate::release::ReleaseQueue;
use crate::reset::{ExecContext, Joined};
use crate::results::PluginUse;

/// A sandbox held from its claim to its release.
pub(crate) struct Held {
    pub(crate) claimed: Claimed,
    /// Tasks it has served.
    pub(crate) served: u32,
    /// What its reset check recorded when it was fresh; `None` when the
    /// sandbox cannot be recycled.
    baseline: Option<Baseline>,
    /// Its renewals, where the backend's sandboxes expire.
    pub(crate) lease: LeaseKeeper,
}

/// A fresh sandbox's state, as a reset puts it back.
enum Baseline {
    /// Recorded by a reset check.
    Check(CheckBaseline),
    /// Snapshotted, for a restore in place.
    Snapshot(SnapshotRef),
}

/// A fresh sandbox's state as one version of the reset check recorded it.
struct CheckBaseline {
    /// That version, pinned.
    check: ResetCheck,
    /// Whether its fallback answered the baseline: the outputs are then
    /// the built-in's, and only the built-in can judge against them.
    by_fallback: bool,
    outputs: Vec<CommandOutput>,
}

impl Held {
    /// A sandbox that serves one task, whatever the recycling: it is
    /// released when its holder moves on.
    pub(crate) fn once(claimed: Claimed, lease: LeaseKeeper) -> Held {
        Held {
            claimed,
            served: 0,
            baseline: None,
            lease,
        }
    }

    /// Why the sandbox is gone, when its renewals failed or a call on it
    /// said so.
    pub(crate) fn lost(&self) -> Option<&str> {
        self.lease.lost().or_else(|| self.claimed.lost())
    }

    /// The reset check version that took its baseline, for the records.
    pub(crate) fn reset_check(&self) -> Option<PluginUse> {
        match &self.baseline {
            Some(Baseline::Check(baseline)) => Some(PluginUse::of_reset(&baseline.check)),
            _ => None,
        }
    }
}

/// Why a held sandbox cannot serve another task.
#[derive(Debug, thiserror::Error)]
enum Unfit {
    #[error(transparent)]
    Step(#[from] StepError),
    #[error("the reset commands' output cannot be read: {0}")]
    Output(String),
    #[error("dirty after reset: {0}")]
    Dirty(String),
    #[error(
        "its baseline was recorded by {0}, which faulted since; the built-in answering for it cannot judge that baseline"
    )]
    ForeignBaseline(String),
}

/// Claims sandboxes for tasks and recycles the ones held between tasks.
pub(crate) struct Recycler {
    fleet: Arc<Fleet>,
    releases: Arc<ReleaseQueue>,
    /// The reset check, when recycling is on.
    reset: Option<ResetCheck>,
}

impl Recycler {
    /// Recycles through `reset` when the fleet's settings say `recycle`.
    pub(crate) fn new(
        fleet: Arc<Fleet>,
        releases: Arc<ReleaseQueue>,
        reset: Option<ResetCheck>,
    ) -> Self {
        let reset = reset.filter(|_| fleet.settings.recycle);
        Recycler {
            fleet,
            releases,
            reset,
        }
    }

    /// Whether sandboxes are recycled.
    pub(crate) fn recycles(&self) -> bool {
        self.reset.is_some()
    }

    /// Gives a sandbox nobody needs any more to the release queue, and
    /// deletes the snapshot of it fresh (the run's reap removes one whose
    /// delete fails).
    pub(crate) fn release(&self, held: Held) {
        if let Some(Baseline::Snapshot(snapshot)) = held.baseline {
            let fleet = Arc::clone(&self.fleet);
            let cluster = held.claimed.cluster;
            tokio::spawn(async move {
                if let Some(snapshots) = fleet.clusters[cluster].backend.snapshots()
                    && let Err(error) = snapshots.delete_snapshot(&snapshot).await
                {
                    tracing::warn!(snapshot = %snapshot.id, %error, "deleting a recycled sandbox's snapshot failed");
                }
            });
        }
        self.releases.submit(held.claimed);
    }

    /// A sandbox of `image` ready for `task`: `current` after a verified
    /// reset, or a fresh claim (whose baseline the reset check records when
    /// recycling is on); a `current` that cannot serve goes to the release
    /// queue.
    ///
    /// # Errors
    ///
    /// When no sandbox could be claimed; `current` is released then.
    pub(crate) async fn sandbox_for(
        &self,
        image: usize,
        task: &Task,
        current: Option<Held>,
    ) -> Result<Held, StepError> {
        if let Some(current) = current {
            let reusable = current.claimed.image == image
                && current.served <= self.fleet.settings.max_reuses
                && current.baseline.is_some()
                && current.lost().is_none();
            if reusable {
                let started = Instant::now();
                let verdict = self.reset_and_verify(&current, task).await;
                self.fleet.phases.record(Phase::Reset, started.elapsed());
                let on = self.fleet.on(&current.claimed);
                self.fleet
                    .timeline
                    .segment(SegmentKind::Reset, started, on, verdict.is_ok());
                match verdict {
                    Ok(()) => return Ok(current),
                    Err(reason) => {
                        tracing::warn!(sandbox = %current.claimed.handle.id, task = %task.id, "quarantined: {reason}");
                        self.fleet.phases.record(Phase::Quarantine, Duration::ZERO);
                        let on = self.fleet.on(&current.claimed);
                        self.fleet.timeline.mark(
                            MarkKind::Quarantined,
                            Some(on),
                            &reason.to_string(),
                        );
                        self.release(current);
                    }
                }
            } else {
                self.release(current);
            }
        }
        self.releases.room().await;
        let Ready { claimed, lease } = self.fleet.claim_ready(image, &task.id).await?;
        Ok(self.held_fresh(claimed, lease, task).await)
    }

    /// A sandbox no task has used yet (claimed, or forked), held with its
    /// baseline for `task` where it will be recycled.
    pub(crate) async fn held_fresh(
        &self,
        claimed: Claimed,
        lease: LeaseKeeper,
        task: &Task,
    ) -> Held {
        // After the prepare hook: a reset keeps what it made.
        let baseline = match &self.reset {
            Some(_) if self.restores(claimed.cluster) => {
                let started = Instant::now();
                let baseline = self.snapshot_baseline(&claimed).await;
                self.fleet.phases.record(Phase::Reset, started.elapsed());
                baseline
                    .inspect_err(|e| tracing::warn!(sandbox = %claimed.handle.id, "no snapshot, so no recycling: {e}"))
                    .ok()
            }
            Some(check) if self.fleet.can_scrub(claimed.cluster) => {
                let started = Instant::now();
                let baseline = self.baseline(check.pin(), &claimed, task).await;
                self.fleet.phases.record(Phase::Reset, started.elapsed());
                baseline
                    .inspect_err(|e| tracing::warn!(sandbox = %claimed.handle.id, "no baseline, so no recycling: {e}"))
                    .ok()
            }
            _ => None,
        };
        Held {
            claimed,
            served: 0,
            baseline,
            lease,
        }
    }

    /// Whether sandboxes of `cluster` are reset by restoring a snapshot.
    fn restores(&self, cluster: usize) -> bool {
        self.fleet.settings.reset_by_snapshot
            && self.fleet.clusters[cluster]
                .backend
                .snapshots()
                .is_some_and(|snapshots| snapshots.restores_in_place())
    }

    async fn snapshot_baseline(&self, claimed: &Claimed) -> Result<Baseline, StepError> {
        let snapshots = self.fleet.clusters[claimed.cluster]
            .backend
            .snapshots()
            .expect("only a cluster with snapshots restores");
        let deadline = Instant::now() + self.fleet.settings.claim_timeout;
        let snapshot = snapshots
            .snapshot(&claimed.handle, &self.fleet.run_id.labels(), deadline)
            .await
            .map_err(|e| {
                claimed.note(&e);
                StepError::backend("snapshot of a fresh sandbox", e)
            })?;
        Ok(Baseline::Snapshot(snapshot))
    }

    async fn baseline(
        &self,
        check: ResetCheck,
        claimed: &Claimed,
        task: &Task,
    ) -> Result<Baseline, Unfit> {
        let commands = check
            .baseline(task)
            .await
            .map_err(|e| StepError::plugin("reset baseline", e))?;
        let by_fallback = check.fell_back();
        let outputs = self
            .run_reset_phase(claimed, &commands, &task.workdir)
            .await?;
        Ok(Baseline::Check(CheckBaseline {
            check,
            by_fallback,
            outputs,
        }))
    }

    /// Scrubs the held sandbox (the backend stops whatever the last task
    /// left running, which a reset check inside the sandbox could miss, and
    /// puts back what lies outside the check's reach), resets it, scrubs it
    /// again (whatever the reset's commands started, a task's trap among
    /// them, must not live into the next task) and asks the reset check
    /// whether it is clean.
    async fn reset_and_verify(&self, held: &Held, task: &Task) -> Result<(), Unfit> {
        let baseline = match &held.baseline {
            None => return Err(Unfit::Dirty("no baseline was recorded".into())),
            Some(Baseline::Snapshot(snapshot)) => return self.restore(held, snapshot).await,
            Some(Baseline::Check(baseline)) => baseline,
        };
        let check = &baseline.check;
        let foreign = || {
            let plugin = check.version().plugin;
            Unfit::ForeignBaseline(format!("`{}` ({})", plugin.name, plugin.version))
        };
        let backend = &self.fleet.clusters[held.claimed.cluster].backend;
        let Some(recycling) = backend.recycling() else {
            return Err(Unfit::Dirty("its backend cannot recycle sandboxes".into()));
        };
        recycling
            .scrub(&held.claimed.handle)
            .await
            .map_err(|e| StepError::backend("scrub", e))?;
        let commands = check
            .reset(task, &baseline.outputs)
            .await
            .map_err(|e| StepError::plugin("reset", e))?;
        if check.fell_back() != baseline.by_fallback {
            return Err(foreign());
        }
        let outputs = self
            .run_reset_phase(&held.claimed, &commands, &task.workdir)
            .await?;
        recycling
            .scrub(&held.claimed.handle)
            .await
            .map_err(|e| StepError::backend("scrub after the reset", e))?;
        let verdict = check
            .verify(task, &baseline.outputs, &outputs)
            .await
            .map_err(|e| StepError::plugin("reset verify", e))?;
        if check.fell_back() != baseline.by_fallback {
            return Err(foreign());
        }
        match verdict {
            Verdict::Clean => Ok(()),
            Verdict::Dirty(reason) => Err(Unfit::Dirty(reason)),
        }
    }

    /// Puts the held sandbox back to the snapshot of it fresh.
    async fn restore(&self, held: &Held, snapshot: &SnapshotRef) -> Result<(), Unfit> {
        let backend = &self.fleet.clusters[held.claimed.cluster].backend;
        let Some(snapshots) = backend.snapshots() else {
            return Err(Unfit::Dirty("its backend cannot restore sandboxes".into()));
        };
        let deadline = Instant::now() + self.fleet.settings.claim_timeout;
        snapshots
            .restore(&held.claimed.handle, snapshot, deadline)
            .await
            .map_err(|e| {
                held.claimed.note(&e);
                StepError::backend("restore to the snapshot of it fresh", e)
            })?;
        self.fleet.counts.restored.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Runs a reset phase's commands in `claimed` in one exec (one exec
    /// each when they are too long for one script) and returns one output
    /// per command; every command runs even when an earlier one fails.
    async fn run_reset_phase(
        &self,
        claimed: &Claimed,
        commands: &[Command],
        workdir: &str,
    ) -> Result<Vec<CommandOutput>, Unfit> {
        let Some(joined) = Joined::new(commands) else {
            let ran = run_commands(&self.fleet, claimed, commands, workdir, &[], None).await?;
            return Ok(ran.outputs);
        };
        let context = ExecContext {
            workdir,
            env: &[],
            max_output: self.fleet.settings.max_output,
        };
        let backend = &self.fleet.clusters[claimed.cluster].backend;
        let result = backend
            .exec(&claimed.handle, &joined.request(&context), None)
            .await
            .map_err(|e| {
                claimed.note(&e);
                StepError::backend(
                    format!("exec of the {} joined reset commands", commands.len()),
                    e,
                )
            })?;
        joined.split(&result).map_err(Unfit::Output)
    }
}
