//! Whether recycling pays on a cluster, for `sandfleet plan`: what a task
//! pays for a fresh sandbox against what it pays for a git-restore reset,
//! per backend kind, from costs measured on this project's 2-core machine
//! by `cargo bench -p sandfleet-engine --bench recycle` (BENCHMARKS.md,
//! "Recycling"). A recycled task skips a claim and pays a reset instead, so
//! recycling pays when the reset is the cheaper of the two, in whatever
//! bounds the run: the host's CPU on the local backend (sandboxes and
//! engine share it), the wall time of the task's path on a remote cluster
//! (the reset runs in the sandbox's own CPU). Where a cost was not measured
//! the estimate says so and gives the break-even instead of guessing.
//! OpenSandbox sandboxes are never recycled (its backend cannot scrub them).

use std::time::Duration;

/// What bounds a run on a backend kind, so what the costs are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The host's CPU, which runs the sandboxes too.
    HostCpu,
    /// The wall time on the task's path.
    Wall,
}

/// Costs per task on one backend kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecycleEstimate {
    /// What the costs are in.
    pub bound: Bound,
    /// A fresh sandbox (claim, release), when measured for this kind.
    pub fresh: Option<Duration>,
    /// A reset: scrub, one exec of the joined reset script, the check's
    /// verdict.
    pub reset: Duration,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// Local backend, 600 no-op tasks at concurrency 32: CPU per task of the
/// fresh run, and per reset on an idle sandbox (one joined exec).
const LOCAL: RecycleEstimate = RecycleEstimate {
    bound: Bound::HostCpu,
    fresh: Some(Duration::from_micros(10_900)),
    reset: Duration::from_micros(91_300),
    source: "measured on the local backend, 2 cores: a fresh sandbox 10.9 ms of host CPU per \
             task, a git-restore reset 91 ms; 600 no-op tasks at concurrency 32 took 4.3 s fresh \
             and 32.2 s recycling",
};

/// Kubernetes: a reset over the persistent session on the devcluster
/// (`sandfleet devcluster k8s`, local sandboxes as pods), the quick start
/// at concurrency 4, baselines included; a cold pod start on a real cluster
/// was not measured here.
const KUBERNETES: RecycleEstimate = RecycleEstimate {
    bound: Bound::Wall,
    fresh: None,
    reset: Duration::from_millis(250),
    source: "measured on the Kubernetes devcluster: a git-restore reset in one exec over the \
             session p50 ~250 ms, a claim from its warm pool ~20 ms; a cold pod start on a real \
             cluster was not measured",
};

impl RecycleEstimate {
    /// The estimate for a backend kind (`local`, `k8s`); `None` for a kind
    /// that does not recycle or it knows nothing of.
    pub fn of(kind: &str) -> Option<Self> {
        match kind {
            "local" => Some(LOCAL),
            "k8s" => Some(KUBERNETES),
            _ => None,
        }
    }

    /// Whether recycling pays, when both costs are known.
    pub fn pays(&self) -> Option<bool> {
        self.fresh.map(|fresh| self.reset < fresh)
    }

    /// One line for `sandfleet plan` about cluster `name` of `kind`, whose
    /// backend can scrub a used sandbox when `scrubs`; `recycle` is what the
    /// fleet file asks for.
    pub fn render(name: &str, kind: &str, scrubs: bool, recycle: bool) -> String {
        let asked = if recycle {
            "recycle = true"
        } else {
            "recycle = false"
        };
        if !scrubs {
            return format!(
                "recycling on cluster `{name}` ({kind}, {asked}) never happens: the backend cannot \
                 scrub its sandboxes, so each one serves one task and is released"
            );
        }
        let Some(estimate) = Self::of(kind) else {
            return format!(
                "recycling on cluster `{name}` ({kind}, {asked}): no reset cost measured for this \
                 backend kind"
            );
        };
        let unit = match estimate.bound {
            Bound::HostCpu => "of host CPU",
            Bound::Wall => "of wall time",
        };
        let reset_ms = estimate.reset.as_secs_f64() * 1e3;
        let verdict = match (estimate.pays(), estimate.fresh) {
            (Some(true), Some(fresh)) => format!(
                "pays: a reset costs a task ~{reset_ms:.0} ms {unit}, a fresh sandbox ~{:.0} ms",
                fresh.as_secs_f64() * 1e3
            ),
            (_, Some(fresh)) => format!(
                "does not pay: a reset costs a task ~{reset_ms:.0} ms {unit}, {:.1}x a fresh \
                 sandbox's ~{:.0} ms",
                estimate.reset.as_secs_f64() / fresh.as_secs_f64(),
                fresh.as_secs_f64() * 1e3
            ),
            (_, None) => format!(
                "pays when a fresh sandbox costs a task more than ~{reset_ms:.0} ms {unit} (a \
                 cold pod start usually does; a claim from a warm pool that keeps up does not)"
            ),
        };
        format!(
            "recycling on cluster `{name}` ({kind}, {asked}) {verdict} [{}]",
            estimate.source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_follows_the_cheaper_cost() {
        let mut estimate = LOCAL;
        assert_eq!(estimate.pays(), Some(false));
        estimate.reset = Duration::from_millis(5);
        assert_eq!(estimate.pays(), Some(true));
        assert_eq!(KUBERNETES.pays(), None);
    }

    #[test]
    fn each_kind_gets_a_line_naming_the_cluster_and_the_setting() {
        let local = RecycleEstimate::render("here", "local", true, true);
        assert!(
            local.starts_with("recycling on cluster `here` (local, recycle = true) does not pay"),
            "{local}"
        );
        assert!(local.contains("of host CPU"), "{local}");
        let remote = RecycleEstimate::render("gke", "k8s", true, false);
        assert!(
            remote
                .contains("pays when a fresh sandbox costs a task more than ~250 ms of wall time"),
            "{remote}"
        );
        let never = RecycleEstimate::render("os", "opensandbox", false, true);
        assert!(never.contains("never happens"), "{never}");
        let unknown = RecycleEstimate::render("x", "nomad", true, false);
        assert!(unknown.contains("no reset cost measured"), "{unknown}");
    }
}
