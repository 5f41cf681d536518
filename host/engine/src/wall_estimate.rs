//! How long a run should take: the plan's windows, sandboxes, claims and
//! pulls, priced by what a sandbox's life costs on the clusters. `sandfleet
//! rehearse` checks every run against it; a user sizing a real fleet puts
//! their own cluster's costs in.
//!
//! A run is its windows in turn, as the strategy runs them: `none` and
//! `naive` have one, `sliding` warms each window and then runs it,
//! `pipelined` runs a window while the next one warms. Warming is waves of
//! `warm_create_budget` sandboxes, each as slow as its slowest pull, and
//! no faster than the nodes' pull slots pull the pools' images. Running
//! a window is as slow as the slowest of the budgets its work is spent
//! from in parallel:
//!
//! - the task slots (`concurrent`): every task's own time, the claims on
//!   its path (a warm one where the pool has a sandbox, else a cold one
//!   that pays its image's pull on a node without it) and a reset per
//!   reuse; plus one task's path, for the last to start (list scheduling's
//!   bound);
//! - the nodes' pull slots: every first pull of an image on a node that
//!   the window's claims make, and, under `pipelined`, the next window's
//!   warm pulls made meanwhile (a window warmed before it runs has pulled
//!   for its pools already). Those warm pulls are asked first, as the
//!   window starts, so a claim of it that must pull waits behind them on
//!   its node: half their queue, on average, on its task's path;
//! - the create pacer (`create_rate`): every sandbox created;
//! - the host's CPU, when the clusters run on it (a devcluster).

use std::time::Duration;

use crate::plan::Plan;
use crate::settings::{FleetSettings, Strategy};

/// What a sandbox's life costs on the run's clusters.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxCosts {
    /// One task in a claimed sandbox: set-up, test and grade.
    pub task: Duration,
    /// A claim no warm sandbox serves, its image already on the node.
    pub cold_claim: Duration,
    /// A claim a ready warm sandbox serves.
    pub warm_claim: Duration,
    /// A warm sandbox from its creation to ready, its image on the node.
    pub warm_start: Duration,
    /// How long a claim waits for a pool's refill before its sandbox is
    /// started cold (agent-sandbox: 2 s).
    pub cold_start_after: Duration,
    /// A reset between two tasks in a recycled sandbox.
    pub reset: Duration,
    /// Each image's first pull onto a node, in the plan's image order.
    pub pulls: Vec<Duration>,
    /// Nodes, over every cluster.
    pub nodes: u32,
    /// Pulls one node makes at once.
    pub pulls_per_node: u32,
    /// Of an image's claims, the share the placement policy puts on the
    /// cluster of the image's pool (1: every one, as image affinity does).
    /// The rest find no warm sandbox of theirs and start cold.
    pub pool_hit: f64,
    /// When the clusters share the host's CPU (a devcluster): what their
    /// work costs it.
    pub host_cpu: Option<HostCpu>,
}

/// What a run's work costs a host whose CPU the clusters share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCpu {
    /// A task in a sandbox of its own: the sandbox's claim and release too.
    pub fresh_task: Duration,
    /// A task in a recycled sandbox: its reset too.
    pub reused_task: Duration,
    /// The host's cores.
    pub cores: u32,
}

/// Which budget a run spends most in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The task slots.
    Slots,
    /// The nodes' pull slots.
    Pulls,
    /// The create pacer.
    Creates,
    /// The host's CPU.
    HostCpu,
}

/// The estimate, and what it counted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WallEstimate {
    /// The run's expected wall time, in seconds.
    pub wall_s: f64,
    /// Of which warming pools before their window runs.
    pub warming_s: f64,
    /// What bounds the running of most windows.
    pub limited_by: Limit,
    /// Sandboxes claimed.
    pub claims: u32,
    /// Sandboxes created: claims no pool serves, and every warm one.
    pub creates: u32,
    /// First pulls of an image on a node.
    pub pulls: u32,
}

/// One window's work.
#[derive(Debug, Default)]
struct Window {
    /// Its warm waves, each as slow as its slowest pull and start.
    warming: Duration,
    slot_work: Duration,
    longest_path: Duration,
    /// Pulls for its claims (refills and cold starts on nodes without
    /// the image), and for its pools' warm sandboxes.
    claim_pull_work: Duration,
    warm_pull_work: Duration,
    /// Claims whose sandbox pulls its image on their task's path.
    pulling_claims: u32,
    creates: u32,
    /// Tasks in a sandbox of their own, and in a recycled one.
    fresh_tasks: u32,
    reused_tasks: u32,
}

/// The estimate for `plan` under `settings`, on clusters that cost `costs`.
pub fn estimate(plan: &Plan, settings: &FleetSettings, costs: &SandboxCosts) -> WallEstimate {
    let warms = settings.strategy != Strategy::None;
    let windows: Vec<Vec<usize>> = match settings.strategy {
        Strategy::None | Strategy::Naive => vec![plan.windows.concat()],
        Strategy::Sliding | Strategy::Pipelined => plan.windows.clone(),
    };
    let (mut claims, mut creates, mut pulls) = (0, 0, 0);
    let mut priced = Vec::with_capacity(windows.len());
    for images in &windows {
        let mut window = Window::default();
        let mut wave = (0u32, Duration::ZERO);
        let budget = settings.warm_create_budget.max(1);
        let epochs = settings.epochs.max(1);
        let window_tasks: u32 = images.iter().map(|&i| plan.tasks[i] * epochs).sum();
        for &image in images {
            let counted = price_image(plan, settings, costs, (image, window_tasks), warms);
            claims += counted.claims;
            creates += counted.creates;
            pulls += counted.pulls;
            window.slot_work += counted.slot_work;
            window.claim_pull_work += counted.pull * counted.claim_pulls;
            window.warm_pull_work += counted.pull * counted.warm_pulls;
            window.pulling_claims += counted.pulling;
            window.longest_path = window.longest_path.max(counted.path);
            window.creates += counted.creates;
            window.fresh_tasks += counted.claims;
            window.reused_tasks += counted.tasks - counted.claims;
            // Pools are warmed in waves of `budget` sandboxes, in image
            // order; a wave waits for its slowest.
            let mut replicas = counted.replicas;
            while replicas > 0 {
                let taken = replicas.min(budget - wave.0);
                replicas -= taken;
                wave = (wave.0 + taken, wave.1.max(counted.pull + costs.warm_start));
                if wave.0 == budget {
                    window.warming += wave.1;
                    wave = (0, Duration::ZERO);
                }
            }
        }
        window.warming += wave.1;
        // However many a wave holds, the nodes pull so many at once.
        window.warming = window
            .warming
            .max(window.warm_pull_work / pull_slots(costs));
        priced.push(window);
    }
    let mut limits = [0usize; 4];
    let mut run = |window: &Window, warming_meanwhile: Duration| {
        let (limit, spent) = run_time(window, warming_meanwhile, plan, settings, costs);
        limits[limit as usize] += 1;
        spent
    };
    let mut wall = Duration::ZERO;
    let mut warming = Duration::ZERO;
    match settings.strategy {
        Strategy::Pipelined => {
            if let Some(first) = priced.first() {
                wall += first.warming;
                warming += first.warming;
            }
            for (index, window) in priced.iter().enumerate() {
                let (next_warming, next_pulls) = priced
                    .get(index + 1)
                    .map_or((Duration::ZERO, Duration::ZERO), |w| {
                        (w.warming, w.warm_pull_work)
                    });
                wall += run(window, next_pulls).max(next_warming);
            }
        }
        _ => {
            for window in &priced {
                wall += window.warming + run(window, Duration::ZERO);
                warming += window.warming;
            }
        }
    }
    let limited_by = [Limit::Slots, Limit::Pulls, Limit::Creates, Limit::HostCpu]
        .into_iter()
        .max_by_key(|limit| limits[*limit as usize])
        .expect("four limits");
    WallEstimate {
        wall_s: wall.as_secs_f64(),
        warming_s: warming.as_secs_f64(),
        limited_by,
        claims,
        creates,
        pulls,
    }
}

/// One image's part in its window.
struct Priced {
    tasks: u32,
    replicas: u32,
    claims: u32,
    creates: u32,
    pulls: u32,
    /// Of its pulls, those its warm sandboxes make and those its claims do.
    warm_pulls: u32,
    claim_pulls: u32,
    /// Claims that pull on their task's path: behind the pool, or away
    /// from it.
    pulling: u32,
    pull: Duration,
    slot_work: Duration,
    /// A task's path, on average.
    path: Duration,
}

fn price_image(
    plan: &Plan,
    settings: &FleetSettings,
    costs: &SandboxCosts,
    (image, window_tasks): (usize, u32),
    warms: bool,
) -> Priced {
    let nodes = costs.nodes.max(1);
    let tasks = plan.tasks[image].saturating_mul(settings.epochs.max(1));
    let replicas = if warms {
        plan.replicas.get(image).copied().unwrap_or(0)
    } else {
        0
    };
    let claims = if settings.recycle {
        // Every task slot holds a sandbox of its own while it works
        // through its share of the window's tasks.
        let share = (plan.concurrent.max(1) * tasks).div_ceil(window_tasks.max(1));
        tasks
            .div_ceil(settings.max_reuses.max(1))
            .max(share)
            .min(tasks)
    } else {
        tasks
    };
    let pull = costs.pulls.get(image).copied().unwrap_or_default();
    // Claims placed away from the pool's cluster start cold there.
    let at_pool = if replicas > 0 {
        (f64::from(claims) * costs.pool_hit.clamp(0.0, 1.0)).round() as u32
    } else {
        claims
    };
    let away = claims - at_pool;
    // A pool serves as many claims as it holds sandboxes at once; a claim
    // behind them takes the pool's refill when it is ready before the
    // claim starts cold. The scheduler spreads an image's pods over the
    // emptiest nodes, so the first `nodes` of them each pull it, the
    // pool's first: a refill or cold start there waits for the pull.
    let warm = at_pool.min(replicas);
    let behind = at_pool - warm;
    let pulls = (claims + replicas).min(nodes);
    let warm_pulls = replicas.min(nodes);
    let pulling = behind.min(nodes.saturating_sub(replicas));
    // Away from the pool, on nodes the pool did not warm, the first claim
    // on each node pulls the image before it starts.
    let away_pulling = away.min(nodes.saturating_sub(warm_pulls + pulling));
    let refilled = |pulled: bool| {
        let pull = if pulled { pull } else { Duration::ZERO };
        if replicas > 0 && costs.warm_start + pull <= costs.cold_start_after {
            costs.warm_start + pull
        } else {
            costs.cold_claim + pull
        }
    };
    let slot_work = costs.task * tasks
        + costs.reset * (tasks - claims)
        + costs.warm_claim * warm
        + refilled(true) * pulling
        + refilled(false) * (behind - pulling)
        + costs.cold_claim * away
        + pull * away_pulling;
    Priced {
        tasks,
        replicas,
        claims,
        creates: claims + replicas,
        pulls,
        warm_pulls,
        claim_pulls: pulls - warm_pulls,
        pulling: pulling + away_pulling,
        pull,
        slot_work,
        path: slot_work.checked_div(tasks).unwrap_or_default(),
    }
}

/// Pulls the nodes make at once.
fn pull_slots(costs: &SandboxCosts) -> u32 {
    costs.nodes.max(1) * costs.pulls_per_node.max(1)
}

/// How long running `window` takes while `warming_meanwhile` of pulls
/// warm the next window on the same nodes, and which budget bounds it.
fn run_time(
    window: &Window,
    warming_meanwhile: Duration,
    plan: &Plan,
    settings: &FleetSettings,
    costs: &SandboxCosts,
) -> (Limit, Duration) {
    let concurrent = plan.concurrent.max(1);
    let queued = (warming_meanwhile / pull_slots(costs)) / 2;
    let slot_work = window.slot_work + queued * window.pulling_claims;
    let mut budgets = vec![
        (
            Limit::Slots,
            slot_work / concurrent + window.longest_path + queued,
        ),
        (
            Limit::Pulls,
            (window.claim_pull_work + warming_meanwhile) / pull_slots(costs),
        ),
    ];
    if let Some(rate) = settings.create_rate.filter(|r| *r > 0.0) {
        budgets.push((
            Limit::Creates,
            Duration::from_secs_f64(f64::from(window.creates) / rate),
        ));
    }
    if let Some(cpu) = costs.host_cpu {
        let work = cpu.fresh_task * window.fresh_tasks + cpu.reused_task * window.reused_tasks;
        budgets.push((Limit::HostCpu, work / cpu.cores.max(1)));
    }
    budgets
        .into_iter()
        .max_by_key(|(_, spent)| *spent)
        .expect("two budgets at least")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(
        tasks: Vec<u32>,
        replicas: Vec<u32>,
        windows: Vec<Vec<usize>>,
        concurrent: u32,
    ) -> Plan {
        Plan {
            images: (0..tasks.len()).map(|i| format!("img{i}")).collect(),
            windows,
            peak_warm: replicas.iter().sum(),
            tasks,
            replicas,
            concurrent,
            bounds: Vec::new(),
            prepare: Vec::new(),
        }
    }

    fn one(tasks: u32, replicas: u32, concurrent: u32) -> Plan {
        plan(vec![tasks], vec![replicas], vec![vec![0]], concurrent)
    }

    fn costs(images: usize) -> SandboxCosts {
        SandboxCosts {
            task: Duration::from_secs(1),
            cold_claim: Duration::from_secs(2),
            warm_claim: Duration::ZERO,
            warm_start: Duration::from_secs(1),
            cold_start_after: Duration::from_secs(1),
            reset: Duration::from_millis(500),
            pulls: vec![Duration::from_secs(4); images],
            nodes: 2,
            pulls_per_node: 1,
            pool_hit: 1.0,
            host_cpu: None,
        }
    }

    fn roomy(images: usize) -> SandboxCosts {
        SandboxCosts {
            pulls_per_node: 4,
            ..costs(images)
        }
    }

    fn settings(strategy: Strategy) -> FleetSettings {
        FleetSettings {
            strategy,
            ..FleetSettings::default()
        }
    }

    #[test]
    fn cold_claims_carry_their_cold_start_and_pulls_on_the_task_path() {
        // 4 × (1 s + 2 s) and a 4 s pull on each of the 2 nodes, over 2
        // slots, and one 5 s path for the last task to start.
        let estimate = estimate(&one(4, 0, 2), &settings(Strategy::None), &costs(1));
        assert_eq!(estimate.wall_s, 10.0 + 5.0);
        assert_eq!(estimate.limited_by, Limit::Slots);
        assert_eq!(
            (estimate.claims, estimate.creates, estimate.pulls),
            (4, 4, 2)
        );
    }

    #[test]
    fn a_pool_serves_its_sandboxes_then_refills_that_beat_the_cold_start() {
        // 2 warm claims, then 2 that take the refills on nodes with the
        // image (1 s, within the 1 s a claim waits): 6 s of work over 2
        // slots and a 1.5 s path, after a 5 s wave (pull and start).
        let estimate = estimate(&one(4, 2, 2), &settings(Strategy::Naive), &roomy(1));
        assert_eq!(estimate.wall_s, 5.0 + 3.0 + 1.5);
        assert_eq!(estimate.warming_s, 5.0);
        assert_eq!(estimate.creates, 6);
    }

    #[test]
    fn claims_placed_away_from_their_pool_start_cold() {
        // Half the 4 claims land where the pool of 2 is and are served
        // warm; the other half start cold on another cluster (2 s each):
        // 8 s of work over 2 slots and a 2 s path, after the 5 s wave.
        let away = SandboxCosts {
            pool_hit: 0.5,
            ..roomy(1)
        };
        let estimate = estimate(&one(4, 2, 2), &settings(Strategy::Naive), &away);
        assert_eq!(estimate.wall_s, 5.0 + 4.0 + 2.0);
        // Without a pool every claim is cold wherever it lands.
        let none = estimate_none(&away);
        assert_eq!(none, estimate_none(&roomy(1)));
    }

    #[test]
    fn claims_away_from_their_pool_pull_on_nodes_it_did_not_warm() {
        // As above with 6 nodes: the pool of 2 warmed two of them, so the
        // 2 claims away start cold and pull (2 s + 4 s each): 16 s of
        // work over 2 slots and a 4 s path, after the 5 s wave.
        let away = SandboxCosts {
            pool_hit: 0.5,
            nodes: 6,
            ..roomy(1)
        };
        let estimate = estimate(&one(4, 2, 2), &settings(Strategy::Naive), &away);
        assert_eq!(estimate.wall_s, 5.0 + 8.0 + 4.0);
    }

    fn estimate_none(costs: &SandboxCosts) -> f64 {
        estimate(&one(4, 0, 2), &settings(Strategy::None), costs).wall_s
    }

    #[test]
    fn a_refill_that_must_pull_loses_to_the_cold_start() {
        // 1 warm claim; of the 3 behind it, one lands on the node without
        // the image, whose refill (1 s + 4 s pull) is slower than the 1 s
        // wait, so it starts cold and pulls (2 s + 4 s); two take refills
        // (1 s). 4 s of tasks + 8 s over 4 slots, and a 3 s path.
        let estimate = estimate(&one(4, 1, 4), &settings(Strategy::Naive), &roomy(1));
        assert_eq!(estimate.wall_s, 5.0 + 3.0 + 3.0);
    }

    #[test]
    fn many_images_are_bound_by_the_nodes_pull_slots_after_their_waves() {
        let estimate = estimate(
            &plan(vec![1; 40], vec![1; 40], vec![(0..40).collect()], 40),
            &settings(Strategy::Naive),
            &costs(40),
        );
        // The pools' 40 pulls of 4 s over 2 pull slots, slower than their
        // 3 waves of at most 16 (15 s); then the refills' 40 on the other
        // node, the same again.
        assert_eq!(estimate.limited_by, Limit::Pulls);
        assert_eq!(estimate.warming_s, 80.0);
        assert_eq!(estimate.wall_s, 80.0 + 80.0);
    }

    #[test]
    fn sliding_warms_between_windows_and_pipelined_warms_behind_them() {
        let two = plan(vec![4, 4], vec![2, 2], vec![vec![0], vec![1]], 2);
        let sliding = estimate(&two, &settings(Strategy::Sliding), &roomy(2));
        assert_eq!(sliding.wall_s, 2.0 * (5.0 + 4.5));
        let pipelined = estimate(&two, &settings(Strategy::Pipelined), &roomy(2));
        assert_eq!(pipelined.wall_s, 5.0 + 5.0 + 4.5);
        assert_eq!(pipelined.warming_s, 5.0);
    }

    #[test]
    fn a_pipelined_window_shares_the_pull_slots_with_the_next_ones_warming() {
        // Two windows of 10 images, 2 tasks and a warm sandbox each, on 2
        // nodes pulling one 4 s image at a time. Each window's pools pull
        // 10 images (20 s over the 2 slots), its refills 10 more on the
        // other node. The first window warms alone (20 s); it runs while
        // the second warms, both pulling: 80 s of pulls over 2 slots; the
        // second runs alone: 40 s over 2 slots.
        let images: Vec<usize> = (0..20).collect();
        let two = plan(
            vec![2; 20],
            vec![1; 20],
            vec![images[..10].to_vec(), images[10..].to_vec()],
            20,
        );
        let pipelined = estimate(&two, &settings(Strategy::Pipelined), &costs(20));
        assert_eq!(pipelined.warming_s, 20.0);
        assert_eq!(pipelined.limited_by, Limit::Pulls);
        assert_eq!(pipelined.wall_s, 20.0 + 40.0 + 20.0);
        // With 8 pull slots the slots bound it, and each of the first
        // window's 10 claims that pull (a cold start, 6 s) waits behind
        // half the second window's warm pulls (40 s over 8 slots: 2.5 s):
        // (20 s of tasks + 60 s of claims + 25 s queued) over 20 slots, a
        // 4 s path and one wait, after 5 s of warming; then 80 s over 20
        // slots and the path.
        let roomy = estimate(&two, &settings(Strategy::Pipelined), &roomy(20));
        assert_eq!(roomy.limited_by, Limit::Slots);
        assert_eq!(roomy.wall_s, 5.0 + (5.25 + 4.0 + 2.5) + (4.0 + 4.0));
    }

    #[test]
    fn recycling_claims_once_per_reuse_budget_and_pays_resets() {
        let mut recycling = settings(Strategy::None);
        recycling.recycle = true;
        recycling.max_reuses = 10;
        let estimate = estimate(&one(40, 0, 4), &recycling, &costs(1));
        assert_eq!(estimate.claims, 4);
        // 40 × 1 s + 36 × 0.5 s + 4 cold starts × 2 s + 2 pulls × 4 s =
        // 74 s over 4 slots, and the mean path of 1.85 s.
        assert!(
            (estimate.wall_s - (18.5 + 1.85)).abs() < 1e-9,
            "{estimate:?}"
        );
    }

    #[test]
    fn a_create_rate_or_the_host_cpu_can_be_the_bound() {
        let mut paced = settings(Strategy::None);
        paced.create_rate = Some(0.1);
        let slow = estimate(&one(4, 0, 2), &paced, &costs(1));
        assert_eq!((slow.limited_by, slow.wall_s), (Limit::Creates, 40.0));
        let mut busy = costs(1);
        busy.host_cpu = Some(HostCpu {
            fresh_task: Duration::from_secs(30),
            reused_task: Duration::from_secs(10),
            cores: 2,
        });
        let cpu = estimate(&one(4, 0, 2), &settings(Strategy::None), &busy);
        assert_eq!((cpu.limited_by, cpu.wall_s), (Limit::HostCpu, 60.0));
        // 4 fresh tasks and 36 reused ones.
        let mut recycling = settings(Strategy::None);
        recycling.recycle = true;
        recycling.max_reuses = 10;
        let reused = estimate(&one(40, 0, 4), &recycling, &busy);
        assert_eq!(reused.wall_s, (4.0 * 30.0 + 36.0 * 10.0) / 2.0);
    }
}
