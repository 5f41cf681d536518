//! One run of a fleet file on fresh devclusters, and what it is measured
//! by: results, commands started twice, objects left over, peak pods,
//! the host's CPU, and the plan's estimate.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use sandfleet_backend_local::{ImageSource, LimitOverrides};
use sandfleet_core::RunId;
use sandfleet_emulator_k8s::{ImageMap, PodRuntime, PullModel};
use sandfleet_engine::plan::Plan;
use sandfleet_engine::wall_estimate::{self, SandboxCosts};
use sandfleet_engine::{CancellationToken, RunReport, RunSpec};
use sandfleet_fleet::{FleetConfig, setup};

use crate::fleet_file::FleetFile;
use crate::peak::{Placement, place_peak};
use crate::{ClusterOutcome, Options, Shape, VariantOutcome, devclusters};

/// The clusters a run gets.
pub(crate) struct Rig<'a> {
    pub(crate) runtime: PodRuntime,
    pub(crate) image_dir: &'a Path,
    pub(crate) images: &'a [String],
    pub(crate) pulls: PullModel,
    pub(crate) shapes: &'a [Shape],
}

/// Runs one variant on fresh clusters and measures it.
pub(crate) async fn run_variant(
    dir: &Path,
    rig: &Rig<'_>,
    fleet: &FleetFile<'_>,
    costs: &dyn Fn(&Plan, &Placement) -> SandboxCosts,
    options: &Options,
) -> anyhow::Result<VariantOutcome> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let git = rig.runtime != PodRuntime::Plain;
    let images: ImageMap = rig
        .images
        .iter()
        .map(|name| {
            let source = ImageSource {
                path: rig.image_dir.to_path_buf(),
                git,
                limits: LimitOverrides::default(),
            };
            (name.clone(), source)
        })
        .collect();
    let setup = devclusters::Setup {
        images,
        pulls: rig.pulls.clone(),
        runtime: rig.runtime,
    };
    let clusters = devclusters::start(rig.shapes.len(), &setup, dir).await?;
    let measured = measure(dir, fleet, rig.shapes, &clusters, costs, options).await;
    for cluster in clusters {
        cluster.emulator.shutdown().await;
    }
    measured
}

async fn measure(
    dir: &Path,
    fleet: &FleetFile<'_>,
    shapes: &[Shape],
    clusters: &[devclusters::Devcluster],
    costs: &dyn Fn(&Plan, &Placement) -> SandboxCosts,
    options: &Options,
) -> anyhow::Result<VariantOutcome> {
    let fleet_path = dir.join("fleet.toml");
    std::fs::write(&fleet_path, fleet.text(shapes))?;
    std::fs::write(dir.join("tasks.jsonl"), fleet.dataset())?;
    let cpu_before = host_cpu();
    let ran = run_fleet(&fleet_path, options).await?;
    let host_cpu_s = host_cpu().saturating_sub(cpu_before).as_secs_f64();
    let estimate = ran
        .plan
        .as_ref()
        .map(|(plan, settings)| wall_estimate::estimate(plan, settings, &costs(plan, &ran.placed)));
    let expected_live = ran.plan.as_ref().map(|(plan, _)| plan.expected_live());
    let results = read_results(&dir.join("out").join(sandfleet_engine::RESULTS_FILE))?;
    let mut markers: BTreeMap<String, u64> = BTreeMap::new();
    let mut left_over = Vec::new();
    let mut outcomes = Vec::new();
    for cluster in clusters {
        // Sent, over a websocket of its own or down a session: at least as
        // often as it ran.
        let executions = cluster.emulator.executions();
        for (marker, count) in executions
            .by_marker
            .into_iter()
            .chain(executions.in_sessions)
        {
            *markers.entry(marker).or_default() += count;
        }
        left_over.extend(cluster.left_over().await?);
        let pods = cluster.emulator.tally("pods");
        let capacity = (cluster.shape.nodes as u64) * u64::from(cluster.shape.pods);
        outcomes.push(ClusterOutcome {
            name: cluster.shape.name.to_string(),
            claims: cluster
                .emulator
                .tally("sandboxclaims.extensions.agents.x-k8s.io")
                .created,
            creates: cluster.emulator.tally("sandboxes.agents.x-k8s.io").created,
            pulls: cluster.emulator.pulls() as u64,
            peak_pods: pods.peak,
            peak_pods_bound: expected_live.map_or(capacity, |live| u64::from(live).min(capacity)),
        });
    }
    let ran_twice = markers.values().filter(|count| **count > 1).count();
    let report = ran.report.as_ref().ok();
    let wall_s = report.map_or(0.0, |r| r.wall_s);
    let plan_estimate_s = estimate.as_ref().map_or(0.0, |e| e.wall_s);
    Ok(VariantOutcome {
        name: fleet.variant.name.clone(),
        strategy: fleet.variant.strategy.to_string(),
        recycle: fleet.variant.recycle,
        placement: fleet.variant.placement.to_string(),
        wall_s,
        plan_estimate_s,
        estimate_ratio: if report.is_some() && plan_estimate_s > 0.0 {
            wall_s / plan_estimate_s
        } else {
            0.0
        },
        estimate,
        pool_hit: ran.placed.pool_hit,
        host_cpu_s,
        claims: report.map_or(0, |r| r.claims),
        creates: outcomes.iter().map(|c| c.creates).sum(),
        pulls: outcomes.iter().map(|c| c.pulls).sum(),
        expected_live: expected_live.unwrap_or(0),
        clusters: outcomes,
        lost: fleet.tasks.len().saturating_sub(results),
        ran_twice,
        left_over: left_over.len(),
        left_over_names: left_over.into_iter().take(20).collect(),
        ok: report.map_or(0, |r| r.tasks.ok),
        failed: report.map_or(0, |r| r.tasks.failed),
        infra_error: report.map_or(0, |r| r.tasks.infra_error),
        error: ran.report.err(),
        broken: Vec::new(),
    })
}

/// A run of a fleet file: the plan it followed (none when the plan was
/// refused), where the placement policy puts its peak, and the engine's
/// report or why there is none.
struct Ran {
    plan: Option<(Plan, sandfleet_engine::FleetSettings)>,
    placed: Placement,
    report: Result<RunReport, String>,
}

/// Runs the fleet file as `sandfleet run` does, with the plan
/// `sandfleet plan` prints. A plan refused or a run that fails is what the
/// rehearsal found, not an error of its own.
///
/// # Errors
///
/// When the fleet file or its clusters cannot be set up.
async fn run_fleet(fleet_path: &Path, options: &Options) -> anyhow::Result<Ran> {
    let config = FleetConfig::load(fleet_path)?;
    let plugins = setup::plugins(&config)?;
    let dataset = setup::dataset(&config, &plugins.adapter)?;
    let clusters = setup::clusters(&config)?;
    setup::check_images(&config, &clusters, &dataset.tasks)?;
    let items = setup::work_items(&config, &dataset, &Default::default());
    let capacity = setup::capacity(&clusters).await?;
    let planned = match setup::plan(&config, &plugins, &dataset, &clusters, &capacity).await {
        Ok(planned) => planned,
        Err(refused) => {
            return Ok(Ran {
                plan: None,
                placed: Placement {
                    per_cluster: Vec::new(),
                    pool_hit: 1.0,
                },
                report: Err(format!("the plan was refused: {refused:#}")),
            });
        }
    };
    let settings = config.fleet.clone();
    let weights: Vec<u32> = clusters.iter().map(|c| c.weight).collect();
    let placed = place_peak(&planned, &plugins.placement, &capacity, &weights).await?;
    let out_dir = config
        .run
        .out
        .clone()
        .context("the rehearsal's fleet file sets [run] out")?;
    let spec = RunSpec {
        run_id: RunId::generate(&config.run.name),
        settings: config.fleet,
        clusters,
        plugins,
        out_dir,
        cancel: CancellationToken::new(),
        progress: (options.progress)(),
    };
    let report = sandfleet_engine::run(spec, items)
        .await
        .map_err(|e| format!("the run failed: {e}"));
    Ok(Ran {
        plan: Some((planned, settings)),
        placed,
        report,
    })
}

/// Distinct tasks (id and epoch) with a result.
fn read_results(path: &Path) -> anyhow::Result<usize> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        // A run refused or failed before its first result.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut seen = HashSet::new();
    for (line, row) in text.lines().enumerate() {
        let record: serde_json::Value = serde_json::from_str(row)
            .with_context(|| format!("{}:{}: not JSON", path.display(), line + 1))?;
        seen.insert((record["task_id"].to_string(), record["epoch"].to_string()));
    }
    Ok(seen.len())
}

/// CPU every process on the host has used since boot: `/proc/stat`'s
/// busy time (user, nice, system, irq, softirq, steal), in the kernel's
/// fixed 100 ticks a second (`USER_HZ`). A devcluster's sandboxes, the
/// engine and the emulators all spend the host's CPU, and some of them are
/// no child of this process.
pub(crate) fn host_cpu() -> Duration {
    const USER_HZ: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return Duration::ZERO;
    };
    let fields: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: f64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| fields.get(i))
        .sum();
    Duration::from_secs_f64(busy / USER_HZ)
}
