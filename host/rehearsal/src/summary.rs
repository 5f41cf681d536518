//! What a rehearsal found: `rehearsal.json`, the table, and the
//! invariants every variant must hold.

use std::fmt::Write as _;

use sandfleet_engine::wall_estimate::WallEstimate;
use serde::Serialize;

/// The file a rehearsal writes into its output directory.
pub const REHEARSAL_FILE: &str = "rehearsal.json";

/// How far the wall time may run past the plan's estimate.
pub const ESTIMATE_TOLERANCE: f64 = 1.2;

/// A whole rehearsal.
#[derive(Debug, Clone, Serialize)]
pub struct Rehearsal {
    /// The workload's name.
    pub workload: String,
    /// Its size against the published one.
    pub scale: f64,
    /// Tasks per variant.
    pub tasks: usize,
    /// Distinct images.
    pub images: usize,
    /// The devclusters, by name, and their nodes.
    pub clusters: Vec<(String, usize)>,
    /// What a sandbox's life cost on this machine, measured before the
    /// variants ran; the plan's estimates are priced with it.
    pub calibration: Vec<Calibration>,
    /// One run per variant.
    pub variants: Vec<VariantOutcome>,
}

/// Costs measured by a short run of the workload's own pods.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// Whether its sandboxes were recycled.
    pub recycle: bool,
    /// Tasks it ran.
    pub tasks: usize,
    /// A task's set-up, test and grade, mean.
    pub task_s: f64,
    /// A claim with nothing warm, median.
    pub cold_claim_s: f64,
    /// Of that, the pod's start (what a warm pool's member takes).
    pub warm_start_s: f64,
    /// A reset, mean (recycled only).
    pub reset_s: f64,
    /// The host's CPU (every process) per task in a sandbox of its own.
    pub host_cpu_fresh_task_s: f64,
    /// The host's CPU per task in a recycled sandbox, its reset included
    /// (recycled only).
    pub host_cpu_reused_task_s: f64,
}

/// One variant's run.
#[derive(Debug, Clone, Serialize)]
pub struct VariantOutcome {
    /// The variant's name.
    pub name: String,
    /// `[fleet] strategy`.
    pub strategy: String,
    /// `[fleet] recycle`.
    pub recycle: bool,
    /// `[plugins] placement`.
    pub placement: String,
    /// The run's wall time.
    pub wall_s: f64,
    /// The plan's estimate of it.
    pub plan_estimate_s: f64,
    /// Wall over estimate.
    pub estimate_ratio: f64,
    /// The estimate's terms (none when the plan was refused).
    pub estimate: Option<WallEstimate>,
    /// Of an image's claims, the share the placement policy put on its
    /// pool's cluster before the run (the rest the estimate prices cold).
    pub pool_hit: f64,
    /// The host's CPU the run used (every process).
    pub host_cpu_s: f64,
    /// Claims the engine made (its report).
    pub claims: u64,
    /// Sandboxes the clusters created.
    pub creates: u64,
    /// Image pulls the nodes made.
    pub pulls: u64,
    /// Sandboxes the plan expects at once, over every cluster.
    pub expected_live: u32,
    /// Per cluster.
    pub clusters: Vec<ClusterOutcome>,
    /// Tasks with no result.
    pub lost: usize,
    /// Test commands the clusters were sent more than once, over websockets
    /// of their own or down sessions: at least those that ran twice.
    pub ran_twice: usize,
    /// Objects left in the clusters after the run, as kubectl listed them.
    pub left_over: usize,
    /// The first of them, by name.
    pub left_over_names: Vec<String>,
    /// Tasks that passed, failed, and failed for the infrastructure.
    pub ok: usize,
    /// Tasks whose test failed.
    pub failed: usize,
    /// Tasks the infrastructure failed.
    pub infra_error: usize,
    /// Why the run did not complete: its plan refused, or the engine's error.
    pub error: Option<String>,
    /// The invariants it broke, one sentence each.
    pub broken: Vec<String>,
}

/// One cluster's part in a variant.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterOutcome {
    /// The cluster's name.
    pub name: String,
    /// SandboxClaims created.
    pub claims: u64,
    /// Sandboxes created.
    pub creates: u64,
    /// Image pulls its nodes made.
    pub pulls: u64,
    /// The most pods that existed at once.
    pub peak_pods: u64,
    /// What the plan allows it: the run's expected live sandboxes, or the
    /// pods its nodes hold, whichever is less.
    pub peak_pods_bound: u64,
}

impl VariantOutcome {
    /// Checks the invariants, filling [`VariantOutcome::broken`].
    pub fn check(&mut self) {
        let mut broken = Vec::new();
        if let Some(error) = &self.error {
            broken.push(error.clone());
        }
        if self.lost > 0 {
            broken.push(format!("{} task(s) have no result", self.lost));
        }
        if self.failed + self.infra_error > 0 {
            broken.push(format!(
                "{} task(s) failed and {} failed for the infrastructure, where every test passes",
                self.failed, self.infra_error
            ));
        }
        if self.ran_twice > 0 {
            broken.push(format!("{} test command(s) ran twice", self.ran_twice));
        }
        if self.left_over > 0 {
            broken.push(format!(
                "{} object(s) left in the clusters: {}",
                self.left_over,
                self.left_over_names.join(", ")
            ));
        }
        for cluster in &self.clusters {
            if cluster.peak_pods > cluster.peak_pods_bound {
                broken.push(format!(
                    "{} held {} pods at once, above the plan's bound of {}",
                    cluster.name, cluster.peak_pods, cluster.peak_pods_bound
                ));
            }
        }
        if self.estimate_ratio > ESTIMATE_TOLERANCE {
            broken.push(format!(
                "the run took {:.1} s, {:.2}× the plan's estimate of {:.1} s (at most {ESTIMATE_TOLERANCE}×)",
                self.wall_s, self.estimate_ratio, self.plan_estimate_s
            ));
        }
        self.broken = broken;
    }
}

impl Rehearsal {
    /// Whether every variant held every invariant.
    pub fn held(&self) -> bool {
        self.variants.iter().all(|v| v.broken.is_empty())
    }

    /// The table: one variant a row.
    pub fn render(&self) -> String {
        let mut out = String::new();
        writeln!(
            out,
            "{} at scale {}: {} tasks over {} images on {} devcluster(s)",
            self.workload,
            self.scale,
            self.tasks,
            self.images,
            self.clusters.len()
        )
        .expect("write to String");
        let peaks_header = format!(
            "peak pods ({})",
            self.clusters
                .iter()
                .map(|(name, _)| name.trim_start_matches("fleet-"))
                .collect::<Vec<_>>()
                .join("/")
        );
        writeln!(
            out,
            "{:<18} {:>7} {:>8} {:>5} {:>6} {:>7} {:>6}  {:<20} {:>5} {:>4} {:>5} {:>4}",
            "variant",
            "wall s",
            "plan s",
            "×",
            "claims",
            "creates",
            "pulls",
            peaks_header,
            "bound",
            "lost",
            "twice",
            "left"
        )
        .expect("write to String");
        for v in &self.variants {
            let peaks: Vec<String> = v.clusters.iter().map(|c| c.peak_pods.to_string()).collect();
            writeln!(
                out,
                "{:<18} {:>7.1} {:>8.1} {:>5.2} {:>6} {:>7} {:>6}  {:<20} {:>5} {:>4} {:>5} {:>4}",
                v.name,
                v.wall_s,
                v.plan_estimate_s,
                v.estimate_ratio,
                v.claims,
                v.creates,
                v.pulls,
                peaks.join("/"),
                v.expected_live,
                v.lost,
                v.ran_twice,
                v.left_over
            )
            .expect("write to String");
        }
        for v in &self.variants {
            for broken in &v.broken {
                writeln!(out, "{}: {broken}", v.name).expect("write to String");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandfleet_engine::wall_estimate::Limit;

    fn outcome() -> VariantOutcome {
        VariantOutcome {
            name: "sliding".into(),
            strategy: "sliding".into(),
            recycle: false,
            placement: "least-loaded".into(),
            wall_s: 10.0,
            plan_estimate_s: 10.0,
            estimate_ratio: 1.0,
            pool_hit: 1.0,
            estimate: Some(WallEstimate {
                wall_s: 10.0,
                warming_s: 0.0,
                limited_by: Limit::Slots,
                claims: 4,
                creates: 4,
                pulls: 2,
            }),
            host_cpu_s: 1.0,
            claims: 4,
            creates: 4,
            pulls: 2,
            expected_live: 8,
            clusters: vec![ClusterOutcome {
                name: "fleet-a".into(),
                claims: 4,
                creates: 4,
                pulls: 2,
                peak_pods: 8,
                peak_pods_bound: 8,
            }],
            lost: 0,
            ran_twice: 0,
            left_over: 0,
            left_over_names: Vec::new(),
            ok: 4,
            failed: 0,
            infra_error: 0,
            error: None,
            broken: Vec::new(),
        }
    }

    #[test]
    fn a_run_that_holds_every_invariant_breaks_none() {
        let mut held = outcome();
        held.check();
        assert!(held.broken.is_empty(), "{:?}", held.broken);
    }

    #[test]
    fn each_invariant_is_named_when_broken() {
        let mut broken = outcome();
        broken.lost = 1;
        broken.ran_twice = 2;
        broken.left_over = 1;
        broken.left_over_names = vec!["fleet-a: pod/default/x".into()];
        broken.clusters[0].peak_pods = 9;
        broken.estimate_ratio = 1.3;
        broken.infra_error = 1;
        broken.error = Some("the plan was refused: too big".into());
        broken.check();
        let said = broken.broken.join("\n");
        for words in [
            "1 task(s) have no result",
            "2 test command(s) ran twice",
            "pod/default/x",
            "fleet-a held 9 pods at once, above the plan's bound of 8",
            "1.30× the plan's estimate",
            "0 task(s) failed and 1 failed for the infrastructure",
            "the plan was refused: too big",
        ] {
            assert!(said.contains(words), "{words:?} not in {said}");
        }
    }
}
