//! The run report: what happened, how long each phase took, and on what.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

use crate::fleet::FleetCounts;
use crate::groups::GroupCounts;
use crate::phases::{Phase, PhaseStats};
use crate::plugins::PluginServed;
use crate::results::{ResultKey, TaskRecord, TaskStatus};
use crate::run::Engine;

/// Task outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TaskCounts {
    /// Passed.
    pub ok: usize,
    /// Did not pass (or could not be graded).
    pub failed: usize,
    /// Hit an infrastructure error.
    pub infra_error: usize,
    /// Finished by an earlier run into the same directory, not run again.
    pub resumed: usize,
    /// Not run: the run stopped first.
    pub not_run: usize,
}

/// The `infra_error` tasks an adapter judged to have failed for their
/// environment rather than their solution (SWE-bench 5.x's classification),
/// apart from the infrastructure's own failures, as the harness's run report
/// lists them apart from model failures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InfraFailureCounts {
    /// The solution cannot have caused it (`environment` tier).
    pub environment: usize,
    /// The solution might have (`ambiguous` tier).
    pub ambiguous: usize,
    /// Tasks by the sign the adapter named, e.g. `out_of_memory`.
    pub reasons: BTreeMap<String, usize>,
}

/// Warm pool totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WarmCounts {
    /// Warm replicas asked for over the run.
    pub total: u64,
    /// Most warm replicas at once.
    pub peak: u64,
}

/// Sandbox recycling totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RecycleCounts {
    /// Tasks that ran in a recycled sandbox.
    pub reused: usize,
    /// Sandboxes released because their reset failed or was not clean.
    pub quarantined: usize,
    /// Resets made by restoring a snapshot of the sandbox fresh (on
    /// backends that restore in place); the others ran the reset check.
    pub restored: u64,
}

/// Sandbox releases, made off the tasks' path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReleaseCounts {
    /// Released by the backend.
    pub released: u64,
    /// Still failing after their retries; the run's reap removed them.
    pub failed: u64,
}

/// One cluster in the environment section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterInfo {
    /// Its name.
    pub name: String,
    /// Its backend kind.
    pub backend: String,
}

/// Where the run ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Environment {
    /// sandfleet's version.
    pub sandfleet: String,
    /// The clusters.
    pub clusters: Vec<ClusterInfo>,
    /// The machine the host ran on.
    pub machine: Machine,
    /// Role (`adapter`, `placement`, `sizing`, `reset`) → the plugin and
    /// version serving it when the run started.
    pub plugins: BTreeMap<String, String>,
}

/// The host machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// Operating system and architecture.
    pub os: String,
    /// Logical CPUs.
    pub cpus: usize,
}

impl Machine {
    /// This machine.
    pub fn current() -> Self {
        Machine {
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
            os: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// The report written to `report.json` and printed at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The run.
    pub run_id: String,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Task outcomes, counting the latest result of every task and epoch.
    pub tasks: TaskCounts,
    /// Of `tasks.infra_error`, those the adapter classified.
    pub infra_failures: InfraFailureCounts,
    /// Sandboxes claimed.
    pub claims: u64,
    /// Warm pool totals.
    pub warm: WarmCounts,
    /// Recycling totals.
    pub recycle: RecycleCounts,
    /// Release totals.
    pub releases: ReleaseCounts,
    /// Requests retried, by the kind of error that caused the retry.
    pub retries: BTreeMap<String, u64>,
    /// Tasks run again on another sandbox, by why (`sandbox_lost`,
    /// `claim_failed`): one per repeated attempt.
    pub infra_retries: BTreeMap<String, u64>,
    /// Sandboxes whose image's prepare hook ran and passed.
    pub prepared: u64,
    /// Sandboxes released and replaced because their prepare hook failed
    /// or overran its timeout.
    pub prepare_failed: u64,
    /// Sandboxes started from their image's prepared snapshot, with no
    /// hook of their own to run (clusters with snapshots).
    pub forked: u64,
    /// Tasks run as groups of rollouts (`group_size`).
    pub groups: GroupCounts,
    /// Timing per phase.
    pub phases: BTreeMap<&'static str, PhaseStats>,
    /// Where it ran.
    pub environment: Environment,
    /// Every plugin version that served the run, in the order they took
    /// over their names: a file replaced mid-run shows both versions.
    pub plugins: Vec<PluginServed>,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
}

/// The latest record of each task, epoch and group member.
fn latest(records: &[TaskRecord]) -> BTreeMap<ResultKey<'_>, &TaskRecord> {
    records
        .iter()
        .map(|record| (record.key(), record))
        .collect()
}

/// The adapter-classified infrastructure failures among the latest records.
fn infra_failures(records: &[TaskRecord]) -> InfraFailureCounts {
    let mut counts = InfraFailureCounts::default();
    for record in latest(records).values() {
        let Some(infra) = &record.infra_failure else {
            continue;
        };
        if infra.certain {
            counts.environment += 1;
        } else {
            counts.ambiguous += 1;
        }
        *counts.reasons.entry(infra.reason.clone()).or_default() += 1;
    }
    counts
}

/// Repeated attempts in `records`, by why they were repeated.
fn infra_retries(records: &[TaskRecord]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for reason in records
        .iter()
        .flat_map(|record| &record.attempts)
        .filter_map(|attempt| attempt.retried_for.as_ref())
    {
        *counts.entry(reason.clone()).or_default() += 1;
    }
    counts
}

/// Counts the latest record of each task and epoch.
pub(crate) fn count(records: &[TaskRecord]) -> TaskCounts {
    let mut counts = TaskCounts::default();
    for record in latest(records).values() {
        match record.status {
            TaskStatus::Ok => counts.ok += 1,
            TaskStatus::Failed => counts.failed += 1,
            TaskStatus::InfraError => counts.infra_error += 1,
        }
    }
    counts
}

impl RunReport {
    /// A table for the terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let t = &self.tasks;
        writeln!(
            out,
            "run {}: {} ok, {} failed, {} infra_error{}{} in {:.1}s",
            self.run_id,
            t.ok,
            t.failed,
            t.infra_error,
            if t.resumed > 0 {
                format!(" ({} from an earlier run)", t.resumed)
            } else {
                String::new()
            },
            if t.not_run > 0 {
                format!(", {} not run", t.not_run)
            } else {
                String::new()
            },
            self.wall_s
        )
        .expect("write to String");
        let infra = &self.infra_failures;
        if !infra.reasons.is_empty() {
            let reasons: Vec<String> = infra
                .reasons
                .iter()
                .map(|(reason, count)| format!("{count} {reason}"))
                .collect();
            writeln!(
                out,
                "infra_error judged by the adapter: {} environment, {} ambiguous ({})",
                infra.environment,
                infra.ambiguous,
                reasons.join(", ")
            )
            .expect("write to String");
        }
        writeln!(
            out,
            "claims {}, warm replicas {} (peak {}), recycled {} ({} reset by restoring a \
             snapshot), quarantined {}",
            self.claims,
            self.warm.total,
            self.warm.peak,
            self.recycle.reused,
            self.recycle.restored,
            self.recycle.quarantined
        )
        .expect("write to String");
        if self.prepared + self.prepare_failed > 0 {
            writeln!(
                out,
                "prepared {} sandboxes ({} released: prepare_failed); {} forked from a prepared \
                 snapshot",
                self.prepared, self.prepare_failed, self.forked
            )
            .expect("write to String");
        }
        if self.groups.set_ups > 0 {
            writeln!(
                out,
                "groups: {} set-ups, {} members forked from a set-up",
                self.groups.set_ups, self.groups.forked
            )
            .expect("write to String");
        }
        if !self.infra_retries.is_empty() {
            let retried: Vec<String> = self
                .infra_retries
                .iter()
                .map(|(reason, count)| format!("{count} {reason}"))
                .collect();
            writeln!(
                out,
                "tasks run again on another sandbox: {}",
                retried.join(", ")
            )
            .expect("write to String");
        }
        if self.releases.failed > 0 {
            writeln!(
                out,
                "releases: {} failed after retries (reaped at teardown)",
                self.releases.failed
            )
            .expect("write to String");
        }
        let reloaded: BTreeSet<&str> = {
            let mut names = BTreeSet::new();
            self.plugins
                .iter()
                .filter(|p| !names.insert(p.name.as_str()))
                .map(|p| p.name.as_str())
                .collect()
        };
        for plugin in self
            .plugins
            .iter()
            .filter(|p| p.faults > 0 || reloaded.contains(p.name.as_str()))
        {
            writeln!(
                out,
                "plugin {} {} (from {}, serving since {}): {} calls, {} faults, {} answered by the built-in",
                plugin.name,
                plugin.version,
                plugin.source,
                plugin.took_over_at,
                plugin.calls,
                plugin.faults,
                plugin.fallbacks
            )
            .expect("write to String");
        }
        if !self.retries.is_empty() {
            let retried: Vec<String> = self
                .retries
                .iter()
                .map(|(kind, count)| format!("{count} {kind}"))
                .collect();
            writeln!(out, "retried: {}", retried.join(", ")).expect("write to String");
        }
        writeln!(
            out,
            "{:<16} {:>6} {:>10} {:>9} {:>9} {:>9}",
            "phase", "count", "total_s", "p50_s", "p95_s", "max_s"
        )
        .expect("write to String");
        for name in Phase::ALL.map(Phase::name) {
            let Some(stats) = self.phases.get(name).filter(|s| s.count > 0) else {
                continue;
            };
            writeln!(
                out,
                "{:<16} {:>6} {:>10.3} {:>9.3} {:>9.3} {:>9.3}",
                name, stats.count, stats.total_s, stats.p50_s, stats.p95_s, stats.max_s
            )
            .expect("write to String");
        }
        if let Some(error) = &self.error {
            writeln!(out, "stopped: {error}").expect("write to String");
        }
        out
    }
}

impl Engine {
    /// The report of a run that started at `started` with `total` tasks,
    /// `resumed` of them finished by an earlier run.
    pub(crate) fn report(
        &self,
        started: Instant,
        total: usize,
        resumed: usize,
        error: Option<String>,
    ) -> RunReport {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = self.results.previous().to_vec();
        all.extend(records.iter().cloned());
        let mut tasks = count(&all);
        let infra_failures = infra_failures(&all);
        tasks.resumed = resumed;
        tasks.not_run = total.saturating_sub(resumed + records.len());
        let fleet = self.fleet.as_ref().map(|fleet| &fleet.counts);
        let fleet_count = |count: fn(&FleetCounts) -> &AtomicU64| {
            fleet.map_or(0, |counts| count(counts).load(Ordering::Relaxed))
        };
        let releases = self.releases.as_ref().map(|queue| &queue.counts);
        let phases = self.phases.stats();
        RunReport {
            run_id: self.spec.run_id.to_string(),
            wall_s: started.elapsed().as_secs_f64(),
            tasks,
            infra_failures,
            claims: fleet_count(|c| &c.claims),
            warm: WarmCounts {
                total: fleet_count(|c| &c.warm_total),
                peak: fleet_count(|c| &c.warm_peak),
            },
            recycle: RecycleCounts {
                reused: records.iter().filter(|r| r.reuse > 0).count(),
                quarantined: phases[Phase::Quarantine.name()].count,
                restored: fleet_count(|c| &c.restored),
            },
            releases: ReleaseCounts {
                released: releases.map_or(0, |c| c.released.load(Ordering::Relaxed)),
                failed: releases.map_or(0, |c| c.failed.load(Ordering::Relaxed)),
            },
            retries: self.retries.spent(),
            infra_retries: infra_retries(&records),
            prepared: fleet_count(|c| &c.prepared),
            prepare_failed: fleet_count(|c| &c.prepare_failed),
            forked: fleet_count(|c| &c.forked),
            groups: GroupCounts {
                set_ups: fleet_count(|c| &c.group_set_ups),
                forked: fleet_count(|c| &c.group_forks),
            },
            phases,
            environment: self.environment(),
            plugins: self.calls_at_start.served(&self.spec.plugins),
            error,
        }
    }

    fn environment(&self) -> Environment {
        let spec = &self.spec;
        Environment {
            sandfleet: env!("CARGO_PKG_VERSION").to_string(),
            clusters: spec
                .clusters
                .iter()
                .map(|c| ClusterInfo {
                    name: c.name.clone(),
                    backend: c.kind.clone(),
                })
                .collect(),
            machine: Machine::current(),
            plugins: self.plugins_at_start.clone(),
        }
    }
}
