//! The sandbox a worker holds between tasks, and recycling it: a task of
//! the same image reuses it only after the backend has scrubbed it and the
//! reset check has reset it and judged it clean; a sandbox that fails any
//! of that is quarantined (released, never reused).

use std::time::Instant;

use sandfleet_plugin::adapter::{CommandOutput, Task};
use sandfleet_plugin::reset::{ResetCheck, Verdict};

use crate::fleet::Claimed;
use crate::lease::LeaseKeeper;
use crate::phases::Phase;
use crate::prepare::Ready;
use crate::task::TaskRunner;

/// A sandbox a worker holds, from its claim to its release.
pub(crate) struct Held {
    pub(crate) claimed: Claimed,
    /// Tasks it has served.
    pub(crate) served: u32,
    /// Outputs of the reset check's baseline commands; `None` when the
    /// sandbox cannot be recycled.
    baseline: Option<Vec<CommandOutput>>,
    /// Its renewals, where the backend's sandboxes expire.
    pub(crate) lease: LeaseKeeper,
}

impl Held {
    /// Why the sandbox is gone, when its renewals failed or a call on it
    /// said so.
    pub(crate) fn lost(&self) -> Option<&str> {
        self.lease.lost().or_else(|| self.claimed.lost())
    }
}

impl TaskRunner {
    /// Gives a sandbox the worker no longer needs to the release queue.
    pub(crate) fn release(&self, held: Held) {
        self.releases.submit(held.claimed);
    }

    /// Leaves in `held` a sandbox of `image` ready for the task: the one
    /// held after a verified reset, or a fresh claim.
    pub(crate) async fn sandbox_for(
        &self,
        image: usize,
        task: &Task,
        held: &mut Option<Held>,
    ) -> Result<(), String> {
        if let Some(current) = held.take() {
            let reusable = self.settings.recycle
                && current.claimed.image == image
                && current.served <= self.settings.max_reuses
                && current.baseline.is_some()
                && current.lost().is_none();
            if reusable {
                let started = Instant::now();
                let verdict = self.reset_and_verify(&current, task).await;
                self.phases.record(Phase::Reset, started.elapsed());
                match verdict {
                    Ok(()) => {
                        *held = Some(current);
                        return Ok(());
                    }
                    Err(reason) => {
                        tracing::warn!(sandbox = %current.claimed.handle.id, task = %task.id, "quarantined: {reason}");
                        self.phases
                            .record(Phase::Quarantine, std::time::Duration::ZERO);
                        self.release(current);
                    }
                }
            } else {
                self.release(current);
            }
        }
        self.releases.room().await;
        let Ready { claimed, lease } = self
            .fleet
            .claim_ready(image, &task.id)
            .await
            .map_err(|e| format!("claim: {e}"))?;
        // After the prepare hook: a reset keeps what it made.
        let baseline = match (&self.reset, self.settings.recycle) {
            (Some(check), true) => {
                let started = Instant::now();
                let baseline = self.baseline(check, &claimed, task).await;
                self.phases.record(Phase::Reset, started.elapsed());
                baseline
                    .inspect_err(|e| tracing::warn!(sandbox = %claimed.handle.id, "no baseline, so no recycling: {e}"))
                    .ok()
            }
            _ => None,
        };
        *held = Some(Held {
            claimed,
            served: 0,
            baseline,
            lease,
        });
        Ok(())
    }

    async fn baseline(
        &self,
        check: &ResetCheck,
        claimed: &Claimed,
        task: &Task,
    ) -> Result<Vec<CommandOutput>, String> {
        let commands = check.baseline(task).await.map_err(|e| e.to_string())?;
        self.run_reset_phase(claimed, &commands, &task.workdir)
            .await
    }

    /// Scrubs the held sandbox (the backend stops whatever the last task
    /// left running, which a reset check inside the sandbox could miss, and
    /// puts back what lies outside the check's reach), resets it, scrubs it
    /// again (whatever the reset's commands started, a task's trap among
    /// them, must not live into the next task) and asks the reset check
    /// whether it is clean.
    async fn reset_and_verify(&self, held: &Held, task: &Task) -> Result<(), String> {
        let check = self.reset.clone().ok_or("no reset check configured")?;
        let baseline = held.baseline.clone().ok_or("no baseline was recorded")?;
        let backend = &self.fleet.clusters[held.claimed.cluster].backend;
        backend
            .scrub(&held.claimed.handle)
            .await
            .map_err(|e| format!("scrub: {e}"))?;
        let commands = check
            .reset(task, &baseline)
            .await
            .map_err(|e| format!("reset: {e}"))?;
        let outputs = self
            .run_reset_phase(&held.claimed, &commands, &task.workdir)
            .await?;
        backend
            .scrub(&held.claimed.handle)
            .await
            .map_err(|e| format!("scrub after the reset: {e}"))?;
        match check.verify(task, &baseline, &outputs).await {
            Ok(Verdict::Clean) => Ok(()),
            Ok(Verdict::Dirty(reason)) => Err(format!("dirty after reset: {reason}")),
            Err(e) => Err(format!("verify: {e}")),
        }
    }
}
