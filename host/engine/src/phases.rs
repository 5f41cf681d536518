//! Timing of the run's phases, for the report.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// The phases a run reports on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Backend checks before anything is created.
    Preflight,
    /// Fetching an image a cluster lacks, before anything is warmed.
    Pull,
    /// Sizing and the image table.
    Plan,
    /// Templates and warm pool requests.
    CreateWarmpool,
    /// Waiting for warm waves to become ready.
    WaitPoolReady,
    /// Claiming a sandbox for a task.
    Claim,
    /// Running an image's prepare hook on a new sandbox.
    Prepare,
    /// Writing files and running the task's commands.
    Process,
    /// Grading the outputs.
    Grade,
    /// Resetting and verifying a sandbox for reuse.
    Reset,
    /// Replacing a sandbox whose reset failed.
    Quarantine,
    /// Releasing a sandbox.
    Release,
    /// Removing everything at the end.
    Teardown,
}

impl Phase {
    /// Every phase, in report order.
    pub const ALL: [Phase; 13] = [
        Phase::Preflight,
        Phase::Pull,
        Phase::Plan,
        Phase::CreateWarmpool,
        Phase::WaitPoolReady,
        Phase::Claim,
        Phase::Prepare,
        Phase::Process,
        Phase::Grade,
        Phase::Reset,
        Phase::Quarantine,
        Phase::Release,
        Phase::Teardown,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Preflight => "preflight",
            Phase::Pull => "pull",
            Phase::Plan => "plan",
            Phase::CreateWarmpool => "create_warmpool",
            Phase::WaitPoolReady => "wait_pool_ready",
            Phase::Claim => "claim",
            Phase::Prepare => "prepare",
            Phase::Process => "process",
            Phase::Grade => "grade",
            Phase::Reset => "reset",
            Phase::Quarantine => "quarantine",
            Phase::Release => "release",
            Phase::Teardown => "teardown",
        }
    }
}

/// Count and distribution of one phase's durations, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseStats {
    /// How many times the phase ran.
    pub count: usize,
    /// Their sum.
    pub total_s: f64,
    /// Median.
    pub p50_s: f64,
    /// 95th percentile.
    pub p95_s: f64,
    /// Longest.
    pub max_s: f64,
}

impl PhaseStats {
    /// Statistics of `samples` (nearest-rank percentiles).
    pub fn of(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return PhaseStats::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank =
            |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        PhaseStats {
            count: sorted.len(),
            total_s: sorted.iter().sum(),
            p50_s: rank(0.50),
            p95_s: rank(0.95),
            max_s: *sorted.last().expect("not empty"),
        }
    }
}

/// Durations recorded per phase; shared by every task of a run.
#[derive(Debug, Default)]
pub(crate) struct PhaseTimes {
    samples: Mutex<BTreeMap<Phase, Vec<f64>>>,
}

impl PhaseTimes {
    /// Records one run of `phase`.
    pub(crate) fn record(&self, phase: Phase, took: Duration) {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(phase)
            .or_default()
            .push(took.as_secs_f64());
    }

    /// Statistics for every phase, including those that never ran.
    pub(crate) fn stats(&self) -> BTreeMap<&'static str, PhaseStats> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        Phase::ALL
            .iter()
            .map(|&phase| {
                let stats = samples
                    .get(&phase)
                    .map_or_else(PhaseStats::default, |s| PhaseStats::of(s));
                (phase.name(), stats)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=20).map(f64::from).collect();
        let stats = PhaseStats::of(&samples);
        assert_eq!(stats.count, 20);
        assert_eq!(stats.total_s, 210.0);
        assert_eq!(stats.p50_s, 10.0);
        assert_eq!(stats.p95_s, 19.0);
        assert_eq!(stats.max_s, 20.0);
        assert_eq!(PhaseStats::of(&[3.0]).p95_s, 3.0);
        assert_eq!(PhaseStats::of(&[]), PhaseStats::default());
    }
}
