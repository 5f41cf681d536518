//! The plan: the run's image table, the bounds the clusters' capacity puts
//! on it, and what the sizing policy makes of it.
//!
//! Capacity a cluster cannot tell bounds nothing: an unknown disk leaves
//! the disk budget to the clusters that know theirs, and unknown slots
//! leave concurrency unbounded. Known slots clamp it: the plan never asks
//! the clusters for more sandboxes, warm and claimed together, than they
//! hold, and says which bound it applied.

use std::time::Duration;

use sandfleet_core::Capacity;
use sandfleet_plugin::CallError;
use sandfleet_plugin::sizing::{DiskBudget, Limits, SizingPolicy, Strategy as WitStrategy};

use crate::settings::{FleetSettings, Strategy};

/// Which images a run needs and how their pools are sized and ordered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    /// Image names, in order of first appearance in the dataset.
    pub images: Vec<String>,
    /// Tasks per image (one epoch).
    pub tasks: Vec<u32>,
    /// Warm replicas per image.
    pub replicas: Vec<u32>,
    /// Windows of image indices, in the order they run.
    pub windows: Vec<Vec<usize>>,
    /// Most warm sandboxes held at once.
    pub peak_warm: u32,
    /// Tasks that run at once (`max_concurrent`, clamped to capacity).
    pub concurrent: u32,
    /// The bounds capacity put on the plan, and those it could not, one
    /// sentence each.
    pub bounds: Vec<String>,
    /// What each image with a prepare hook costs, in image order.
    pub prepare: Vec<PrepareEstimate>,
}

/// What an image's prepare hook costs the run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PrepareEstimate {
    /// The image's index.
    pub image: usize,
    /// How long one prepare is expected to take (the hook's `expected`);
    /// `None` when the fleet file gives none.
    pub expected: Option<Duration>,
    /// Sandboxes that run the hook: one per claim (fewer when recycling)
    /// and the prepared pool's last refills.
    pub sandboxes: u32,
    /// How long the image's first task waits for prepared sandboxes: the
    /// pool's waves of `warm_create_budget` prepares, or its own claim's.
    pub first_task_waits: Option<Duration>,
    /// The clusters that run the hook once and fork every sandbox of the
    /// image from its snapshot, when every cluster of the run can
    /// ([`forking_clusters`]); `None` where each sandbox runs it.
    pub once_on_clusters: Option<u32>,
}

/// How many clusters prepare an image once and fork its sandboxes: all of
/// `clusters`, when every one has snapshots; `None` when any has not (the
/// plan then counts a prepare per sandbox, the most it can cost).
pub fn forking_clusters(clusters: &[crate::Cluster]) -> Option<u32> {
    let all = clusters
        .iter()
        .all(|cluster| cluster.backend.snapshots().is_some());
    (all && !clusters.is_empty()).then(|| u32::try_from(clusters.len()).unwrap_or(u32::MAX))
}

impl PrepareEstimate {
    /// The estimate for `image` (with `tasks` per epoch and `replicas`
    /// warm) when it has a prepare hook, on `forking` clusters that fork
    /// it ([`forking_clusters`]).
    fn of(
        settings: &FleetSettings,
        image: usize,
        name: &str,
        sizes: (u32, u32),
        concurrent: u32,
        forking: Option<u32>,
    ) -> Option<Self> {
        let (tasks, replicas) = sizes;
        let hook = settings.prepare.for_image(name)?;
        let expected = hook.expected;
        if let Some(clusters) = forking.filter(|_| !hook.each_sandbox) {
            return Some(PrepareEstimate {
                image,
                expected,
                sandboxes: clusters,
                first_task_waits: expected,
                once_on_clusters: Some(clusters),
            });
        }
        let claims = tasks.saturating_mul(settings.epochs.max(1));
        let claimed = if settings.recycle {
            claims
                .div_ceil(settings.max_reuses.max(1))
                .max(claims.min(concurrent))
        } else {
            claims
        };
        // A prepared pool fills to its replicas before the first task, in
        // waves, and refills one for each claim it serves.
        let waves = if replicas > 0 {
            replicas.div_ceil(settings.warm_create_budget.max(1))
        } else {
            1
        };
        Some(PrepareEstimate {
            image,
            expected,
            sandboxes: claimed + replicas,
            first_task_waits: expected.map(|one| one * waves),
            once_on_clusters: None,
        })
    }
}

/// The image table of `task_images` (one entry per task): names in order of
/// first appearance, and the tasks of each.
pub fn image_table<'a>(task_images: impl IntoIterator<Item = &'a str>) -> (Vec<String>, Vec<u32>) {
    let mut images: Vec<String> = Vec::new();
    let mut tasks: Vec<u32> = Vec::new();
    for image in task_images {
        match images.iter().position(|known| known == image) {
            Some(index) => tasks[index] += 1,
            None => {
                images.push(image.to_string());
                tasks.push(1);
            }
        }
    }
    (images, tasks)
}

/// The sizing contract's limits for `settings` on clusters of `capacity`,
/// and the bounds that shaped them.
pub fn limits(settings: &FleetSettings, capacity: &[Capacity]) -> (Limits, Vec<String>) {
    let mut bounds = Vec::new();
    let warms = settings.strategy != Strategy::None;
    let mut max_concurrent = settings.max_concurrent;
    let mut max_warmpool_size = settings.max_warmpool_size;
    let slots: Option<Vec<u32>> = capacity.iter().map(|c| c.sandbox_slots).collect();
    match &slots {
        Some(slots) if !slots.is_empty() => {
            let total: u32 = slots.iter().sum();
            // Claimed sandboxes and the pools refilling behind them share
            // the slots: half each when there are pools.
            let room = if warms {
                (total / 2).max(1)
            } else {
                total.max(1)
            };
            if max_concurrent > room {
                bounds.push(format!(
                    "max_concurrent {max_concurrent} lowered to {room}: the clusters hold {total} \
                     sandboxes{}",
                    if warms {
                        ", half of them for warm pools"
                    } else {
                        ""
                    }
                ));
                max_concurrent = room;
            }
            // One pool lives on one cluster.
            let largest = slots.iter().copied().max().unwrap_or(0);
            let pool_room = if warms {
                largest
                    .saturating_sub(max_concurrent.min(largest / 2))
                    .max(1)
            } else {
                largest.max(1)
            };
            if warms && max_warmpool_size > pool_room {
                bounds.push(format!(
                    "max_warmpool_size {max_warmpool_size} lowered to {pool_room}: the largest \
                     cluster holds {largest} sandboxes"
                ));
                max_warmpool_size = pool_room;
            }
        }
        _ => bounds.push(
            "sandbox slots not bounded: some cluster cannot tell how many it holds".to_string(),
        ),
    }
    let at_once = max_concurrent.saturating_add(if warms { max_warmpool_size } else { 0 });
    bounds.extend(unschedulable(settings, capacity, at_once).map(|said| {
        format!("{said} (lower max_concurrent or max_warmpool_size, or the sandboxes' size)")
    }));
    let disk = settings.disk().and_then(|disk| {
        let known: Vec<&Capacity> = capacity
            .iter()
            .filter(|c| c.disk_mib_per_node.is_some())
            .collect();
        if known.is_empty() {
            bounds.push(
                "the disk bound (avg_image_mib) is not applied: no cluster can tell its disk"
                    .to_string(),
            );
            return None;
        }
        if known.len() < capacity.len() {
            bounds.push(format!(
                "the disk bound uses the {} of {} clusters that can tell their disk",
                known.len(),
                capacity.len()
            ));
        }
        Some(DiskBudget {
            avg_image_mib: disk.avg_image_mib,
            node_disk_mib: known
                .iter()
                .filter_map(|c| c.disk_mib_per_node)
                .min()
                .unwrap_or(0),
            nodes: known.iter().map(|c| c.nodes.unwrap_or(1)).sum(),
            headroom_percent: disk.headroom_percent,
        })
    });
    let limits = Limits {
        strategy: match settings.strategy {
            Strategy::None => WitStrategy::None,
            Strategy::Naive => WitStrategy::Naive,
            Strategy::Sliding => WitStrategy::Sliding,
            Strategy::Pipelined => WitStrategy::Pipelined,
        },
        max_concurrent,
        max_warmpool_size,
        warm_per_task: settings.warm_per_task,
        disk,
    };
    (limits, bounds)
}

/// What the nodes' allocatable holds of sandboxes of `settings`' size,
/// said when `at_once` is more: where a scheduler reserves each sandbox's
/// requests, the rest would wait unscheduled until their claims time out.
/// Said only when every cluster reserves and tells its resources (a local
/// host shares its cores; its limits only cap).
pub fn unschedulable(
    settings: &FleetSettings,
    capacity: &[Capacity],
    at_once: u32,
) -> Option<String> {
    let asks = [
        ("cpu", u64::from(settings.cpu_milli)),
        ("memory", u64::from(settings.memory_mib)),
        ("ephemeral-storage", u64::from(settings.disk_mib)),
    ];
    let mut fit = 0u64;
    let mut scarcest: Option<(&str, u64)> = None;
    for cluster in capacity {
        if !cluster.reserves_requests {
            return None;
        }
        let nodes = u64::from(cluster.nodes?);
        let has = [
            ("cpu", cluster.cpu_milli?),
            ("memory", cluster.memory_mib?),
            (
                "ephemeral-storage",
                cluster.disk_mib_per_node?.saturating_mul(nodes),
            ),
        ];
        let (resource, room) = asks
            .iter()
            .zip(has)
            .filter(|((_, ask), _)| *ask > 0)
            .map(|((resource, ask), (_, total))| (*resource, total / ask))
            .min_by_key(|(_, room)| *room)?;
        let room = cluster
            .sandbox_slots
            .map_or(room, |slots| room.min(u64::from(slots)));
        fit += room;
        if scarcest.is_none_or(|(_, least)| room < least) {
            scarcest = Some((resource, room));
        }
    }
    let (resource, _) = scarcest?;
    (u64::from(at_once) > fit).then(|| {
        format!(
            "up to {at_once} sandboxes at once ask {} millicores, {} MiB of memory and {} MiB of \
             ephemeral storage each; the nodes' allocatable holds about {fit} ({resource} runs out \
             first): the rest would wait unscheduled until their claims time out",
            settings.cpu_milli, settings.memory_mib, settings.disk_mib
        )
    })
}

/// Why a plan cannot run on the clusters.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The sizing policy failed or declined.
    #[error(transparent)]
    Policy(#[from] CallError),
    /// The plan holds more sandboxes at once than the clusters do.
    #[error(
        "the plan holds {needed} sandboxes at once ({warm} warm + {concurrent} running) but the clusters hold {slots}; lower max_concurrent or max_warmpool_size, or use the sliding strategy"
    )]
    TooBig {
        /// Sandboxes the plan needs at once.
        needed: u32,
        /// Of which warm.
        warm: u32,
        /// Of which running tasks.
        concurrent: u32,
        /// What the clusters hold.
        slots: u32,
    },
    /// The plan holds more sandboxes at once than the circuit breaker
    /// allows, so the run would be torn down part-way.
    #[error(
        "the plan holds {needed} sandboxes at once ({warm} warm + {concurrent} running), above [fleet] max_live_sandboxes = {cap}, where the circuit breaker tears the run down; lower max_warmpool_size or max_concurrent, use the sliding or pipelined strategy, or raise max_live_sandboxes"
    )]
    AboveBreaker {
        /// Sandboxes the plan needs at once.
        needed: u32,
        /// Of which warm.
        warm: u32,
        /// Of which running tasks.
        concurrent: u32,
        /// `max_live_sandboxes`.
        cap: u32,
    },
}

/// Whether `plan` fits on clusters of `slots` (None: unknown) and under the
/// circuit breaker's cap: its warm peak and its running tasks all exist at
/// once, so a plan above either fails for certain, better before anything
/// is created than part-way.
fn fits(plan: &Plan, settings: &FleetSettings, slots: Option<u32>) -> Result<(), PlanError> {
    let (warm, concurrent) = (plan.peak_warm, plan.concurrent);
    let needed = warm + concurrent;
    if let Some(slots) = slots
        && needed > slots
    {
        return Err(PlanError::TooBig {
            needed,
            warm,
            concurrent,
            slots,
        });
    }
    if needed > settings.max_live_sandboxes {
        return Err(PlanError::AboveBreaker {
            needed,
            warm,
            concurrent,
            cap: settings.max_live_sandboxes,
        });
    }
    Ok(())
}

/// Asks the sizing policy for the plan of `images` with `tasks` each, on
/// clusters of `capacity`.
///
/// # Errors
///
/// When the policy fails or declines, or its plan does not fit.
pub async fn plan(
    sizing: &SizingPolicy,
    settings: &FleetSettings,
    capacity: &[Capacity],
    images: Vec<String>,
    tasks: Vec<u32>,
    forking: Option<u32>,
) -> Result<Plan, PlanError> {
    let (limits, bounds) = limits(settings, capacity);
    let fleet = sizing.plan(&tasks, &limits).await?;
    let prepare = images
        .iter()
        .enumerate()
        .filter_map(|(image, name)| {
            let replicas = fleet.replicas.get(image).copied().unwrap_or(0);
            PrepareEstimate::of(
                settings,
                image,
                name,
                (tasks[image], replicas),
                limits.max_concurrent,
                forking,
            )
        })
        .collect();
    let plan = Plan {
        images,
        tasks,
        replicas: fleet.replicas,
        windows: fleet
            .windows
            .into_iter()
            .map(|w| w.images.into_iter().map(|i| i as usize).collect())
            .collect(),
        peak_warm: fleet.peak_warm,
        concurrent: limits.max_concurrent,
        bounds,
        prepare,
    };
    let slots: Option<u32> = capacity.iter().map(|c| c.sandbox_slots).sum();
    fits(&plan, settings, slots)?;
    Ok(plan)
}

impl Plan {
    /// Warm replicas over all images.
    pub fn total_warm(&self) -> u32 {
        self.replicas.iter().sum()
    }

    /// Sandboxes the run expects to exist at once: the warm peak, one
    /// claimed sandbox per concurrent task, and as many again waiting in
    /// the release queue. The breaker compares live sandboxes with this.
    pub fn expected_live(&self) -> u32 {
        self.peak_warm + 2 * self.concurrent
    }

    /// A human-readable summary, one image per line, then the bounds.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let width = self
            .images
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(5)
            .max(5);
        writeln!(
            out,
            "{:<width$}  {:>5}  {:>8}  window",
            "image", "tasks", "replicas"
        )
        .expect("write to String");
        for (window_index, window) in self.windows.iter().enumerate() {
            for &image in window {
                writeln!(
                    out,
                    "{:<width$}  {:>5}  {:>8}  {}",
                    self.images[image],
                    self.tasks[image],
                    self.replicas[image],
                    window_index + 1
                )
                .expect("write to String");
            }
        }
        let tasks: u32 = self.tasks.iter().sum();
        writeln!(
            out,
            "{} tasks over {} images in {} window(s); {} warm replicas in all, at most {} warm at once; {} running at once",
            tasks,
            self.images.len(),
            self.windows.len(),
            self.total_warm(),
            self.peak_warm,
            self.concurrent
        )
        .expect("write to String");
        for estimate in &self.prepare {
            writeln!(out, "{}", self.render_prepare(estimate)).expect("write to String");
        }
        for bound in &self.bounds {
            writeln!(out, "bound: {bound}").expect("write to String");
        }
        out
    }

    /// One line on what an image's prepare hook costs.
    fn render_prepare(&self, estimate: &PrepareEstimate) -> String {
        let image = &self.images[estimate.image];
        let sandboxes = estimate.sandboxes;
        if let Some(clusters) = estimate.once_on_clusters {
            let each = estimate.expected.map_or_else(
                || "no `expected` time in the fleet file".to_string(),
                |one| format!("{} (expected)", humantime::format_duration(one)),
            );
            return format!(
                "prepare {image}: once on each of {clusters} cluster(s), whose sandboxes fork its \
                 snapshot: {each}, which is what its first task waits"
            );
        }
        let (Some(one), Some(waits)) = (estimate.expected, estimate.first_task_waits) else {
            return format!(
                "prepare {image}: about {sandboxes} sandboxes run its hook; no `expected` time \
                 in the fleet file, so not estimated"
            );
        };
        let total = one * sandboxes;
        let pooled = self.replicas[estimate.image] > 0;
        format!(
            "prepare {image}: {} each (expected) on about {sandboxes} sandboxes, {} of sandbox \
             time; its first task waits {} for {}",
            humantime::format_duration(one),
            humantime::format_duration(total),
            humantime::format_duration(waits),
            if pooled {
                "the prepared pool to fill"
            } else {
                "its claim's prepare, as every claim does (no warm pool)"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(slots: u32, disk: u64) -> Capacity {
        Capacity {
            nodes: Some(1),
            cpu_milli: Some(2000),
            memory_mib: Some(8192),
            disk_mib_per_node: Some(disk),
            sandbox_slots: Some(slots),
            reserves_requests: false,
        }
    }

    #[test]
    fn the_image_table_keeps_first_appearance_order() {
        let (images, tasks) = image_table(["b", "a", "b", "c", "a", "b"]);
        assert_eq!(images, ["b", "a", "c"]);
        assert_eq!(tasks, [3, 2, 1]);
    }

    #[test]
    fn concurrency_above_the_clusters_is_clamped_and_said() {
        let settings = FleetSettings {
            max_concurrent: 32,
            ..FleetSettings::default()
        };
        let (limits, bounds) = limits(&settings, &[known(8, 1000)]);
        assert_eq!(limits.max_concurrent, 4);
        assert!(
            limits.max_warmpool_size <= 4,
            "{}",
            limits.max_warmpool_size
        );
        assert!(
            bounds[0].contains("max_concurrent 32 lowered to 4"),
            "{bounds:?}"
        );
        // Without pools every slot can run a task.
        let none = FleetSettings {
            strategy: Strategy::None,
            ..settings
        };
        assert_eq!(limits_of(&none, &[known(8, 1000)]).max_concurrent, 8);
    }

    #[test]
    fn sandboxes_the_nodes_cannot_hold_are_said_with_the_resource_that_runs_out() {
        // Three nodes of 8 cores, 32 GiB and 100 GiB of scratch, as the
        // Kubernetes devcluster's.
        let nodes = Capacity {
            nodes: Some(3),
            cpu_milli: Some(3 * 8000),
            memory_mib: Some(3 * 32 * 1024),
            disk_mib_per_node: Some(100 * 1024),
            sandbox_slots: Some(3 * 110),
            reserves_requests: true,
        };
        let settings = FleetSettings {
            strategy: Strategy::None,
            max_concurrent: 128,
            cpu_milli: 100,
            memory_mib: 256,
            disk_mib: 4096,
            ..FleetSettings::default()
        };
        let (_, bounds) = limits(&settings, &[nodes]);
        let said = bounds
            .iter()
            .find(|b| b.contains("unscheduled"))
            .unwrap_or_else(|| panic!("{bounds:?}"));
        assert!(
            said.contains("up to 128 sandboxes")
                && said.contains("holds about 75 (ephemeral-storage runs out first)"),
            "{said}"
        );
        // What fits is not said; nor is anything where nothing is reserved.
        let small = FleetSettings {
            disk_mib: 1024,
            ..settings.clone()
        };
        assert_eq!(unschedulable(&small, &[nodes], 128), None);
        let shared = Capacity {
            reserves_requests: false,
            ..nodes
        };
        assert_eq!(unschedulable(&settings, &[shared], 128), None);
    }

    fn limits_of(settings: &FleetSettings, capacity: &[Capacity]) -> Limits {
        limits(settings, capacity).0
    }

    #[test]
    fn unknown_capacity_bounds_nothing() {
        let settings = FleetSettings {
            max_concurrent: 32,
            avg_image_mib: Some(100),
            ..FleetSettings::default()
        };
        let unknown = Capacity::default();
        let (applied, bounds) = limits(&settings, &[unknown, known(64, 5000)]);
        assert_eq!(applied.max_concurrent, 32);
        // The disk budget comes from the cluster that knows its disk, not 0.
        let disk = applied.disk.unwrap();
        assert_eq!((disk.node_disk_mib, disk.nodes), (5000, 1));
        assert!(
            bounds
                .iter()
                .any(|b| b.contains("sandbox slots not bounded")),
            "{bounds:?}"
        );
        assert!(
            bounds.iter().any(|b| b.contains("1 of 2 clusters")),
            "{bounds:?}"
        );
        let (nothing, bounds) = limits(&settings, &[unknown]);
        assert!(nothing.disk.is_none());
        assert!(
            bounds.iter().any(|b| b.contains("not applied")),
            "{bounds:?}"
        );
    }

    fn with_lean_hook(expected: Option<Duration>) -> FleetSettings {
        let hook = crate::PrepareHook {
            commands: vec![vec!["lake".into(), "build".into()]],
            timeout: Duration::from_secs(1200),
            workdir: None,
            expected,
            each_sandbox: false,
        };
        FleetSettings {
            warm_create_budget: 2,
            prepare: crate::PrepareHooks::new([("lean".to_string(), hook)].into(), None),
            ..FleetSettings::default()
        }
    }

    fn plan_of(settings: &FleetSettings, tasks: u32, replicas: u32) -> Plan {
        plan_forking(settings, tasks, replicas, None)
    }

    fn plan_forking(
        settings: &FleetSettings,
        tasks: u32,
        replicas: u32,
        forking: Option<u32>,
    ) -> Plan {
        let concurrent = 4;
        Plan {
            images: vec!["python".into(), "lean".into()],
            tasks: vec![3, tasks],
            replicas: vec![1, replicas],
            windows: vec![vec![0, 1]],
            peak_warm: 1 + replicas,
            concurrent,
            bounds: Vec::new(),
            prepare: ["python", "lean"]
                .iter()
                .enumerate()
                .filter_map(|(image, name)| {
                    PrepareEstimate::of(
                        settings,
                        image,
                        name,
                        (tasks, replicas),
                        concurrent,
                        forking,
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn the_plan_counts_each_prepared_sandbox_and_the_pool_s_waves() {
        let settings = with_lean_hook(Some(Duration::from_secs(900)));
        let plan = plan_of(&settings, 10, 4);
        // Only lean has a hook: every one of its 10 claims takes a prepared
        // sandbox, and the pool refills its 4 behind the last ones.
        assert_eq!(
            plan.prepare,
            [PrepareEstimate {
                image: 1,
                expected: Some(Duration::from_secs(900)),
                sandboxes: 14,
                first_task_waits: Some(Duration::from_secs(1800)),
                once_on_clusters: None,
            }]
        );
        assert!(
            plan.render().contains(
                "prepare lean: 15m each (expected) on about 14 sandboxes, 3h 30m of sandbox \
                 time; its first task waits 30m for the prepared pool to fill"
            ),
            "{}",
            plan.render()
        );
        let cold = plan_of(&settings, 10, 0);
        assert_eq!(
            cold.prepare[0].first_task_waits,
            Some(Duration::from_secs(900))
        );
        assert!(
            cold.render().contains("as every claim does (no warm pool)"),
            "{}",
            cold.render()
        );
        let recycling = FleetSettings {
            recycle: true,
            max_reuses: 5,
            epochs: 2,
            ..settings
        };
        // 20 claims over two epochs, 5 tasks per sandbox, and at least one
        // sandbox per task running at once.
        assert_eq!(plan_of(&recycling, 10, 4).prepare[0].sandboxes, 4 + 4);
        assert_eq!(plan_of(&recycling, 40, 4).prepare[0].sandboxes, 16 + 4);
    }

    #[test]
    fn where_every_cluster_forks_the_hook_runs_once_per_cluster() {
        let settings = with_lean_hook(Some(Duration::from_secs(900)));
        let plan = plan_forking(&settings, 10, 4, Some(2));
        assert_eq!(plan.prepare[0].sandboxes, 2);
        assert_eq!(
            plan.prepare[0].first_task_waits,
            Some(Duration::from_secs(900))
        );
        assert!(
            plan.render().contains(
                "prepare lean: once on each of 2 cluster(s), whose sandboxes fork its snapshot: \
                 15m (expected), which is what its first task waits"
            ),
            "{}",
            plan.render()
        );
        // A hook that must run in each sandbox is counted per sandbox.
        let mut each = settings.clone();
        each.prepare = crate::PrepareHooks::new(
            [(
                "lean".to_string(),
                crate::PrepareHook {
                    each_sandbox: true,
                    ..settings.prepare.for_image("lean").unwrap().clone()
                },
            )]
            .into(),
            None,
        );
        assert_eq!(plan_forking(&each, 10, 4, Some(2)).prepare[0].sandboxes, 14);
    }

    #[test]
    fn a_plan_above_the_clusters_or_the_breaker_is_refused_before_it_runs() {
        let settings = FleetSettings::default();
        let mut planned = plan_of(&settings, 3, 251);
        // 252 warm + 4 running: the breaker's 256 exactly.
        assert!(fits(&planned, &settings, None).is_ok());
        assert!(matches!(
            fits(&planned, &settings, Some(255)),
            Err(PlanError::TooBig { needed: 256, .. })
        ));
        planned.peak_warm += 1;
        let refused = fits(&planned, &settings, None).unwrap_err();
        assert!(matches!(
            refused,
            PlanError::AboveBreaker {
                needed: 257,
                warm: 253,
                concurrent: 4,
                cap: 256
            }
        ));
        assert!(
            refused.to_string().contains("max_live_sandboxes = 256"),
            "{refused}"
        );
    }

    #[test]
    fn a_hook_without_an_expected_time_is_counted_but_not_timed() {
        let plan = plan_of(&with_lean_hook(None), 10, 4);
        assert_eq!(plan.prepare[0].first_task_waits, None);
        assert!(
            plan.render().contains(
                "prepare lean: about 14 sandboxes run its hook; no `expected` time in the fleet \
                 file, so not estimated"
            ),
            "{}",
            plan.render()
        );
        assert!(plan_of(&FleetSettings::default(), 10, 4).prepare.is_empty());
    }
}
