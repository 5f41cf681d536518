//! `sandfleet rehearse`: a seed workload at scale through the real engine
//! and the real Kubernetes driver, on up to four devclusters that behave
//! like fleets (nodes with allocatable resources, an image cache per node,
//! pulls that cost their image's size), one fresh set of clusters per
//! variant.
//!
//! Before the variants, a short calibration run of the workload's own pods
//! measures what a sandbox's life costs on this machine; the plan's wall
//! estimate ([`sandfleet_engine::wall_estimate`]) is priced with it and the
//! pull model, and every variant is held to it and to the invariants of
//! [`summary::VariantOutcome::check`].

mod devclusters;
mod summary;
mod workload;

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sandfleet_backend_local::{ImageSource, LimitOverrides};
use sandfleet_core::RunId;
use sandfleet_emulator_k8s::{CONTEXT, ImageMap, PodRuntime, PullModel};
use sandfleet_engine::plan::{self, Plan};
use sandfleet_engine::wall_estimate::{self, HostCpu, SandboxCosts};
use sandfleet_engine::{CancellationToken, Progress, RunReport, RunSpec};
use sandfleet_fleet::{FleetConfig, setup};
use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind, PlacementPolicy};

pub use devclusters::{PULLS_PER_NODE, SHAPES, Shape};
pub use summary::{
    Calibration, ClusterOutcome, ESTIMATE_TOLERANCE, REHEARSAL_FILE, Rehearsal, VariantOutcome,
};
pub use workload::{MAX_REUSES, Task, Variant, WORKLOADS, Workload, image_bytes};

/// Tasks that run at once in every variant.
pub const CONCURRENT: u32 = 32;

/// What every pull costs on top of its bytes.
pub const PULL_LATENCY: Duration = Duration::from_millis(500);

/// Bytes a second a node pulls at.
pub const PULL_BANDWIDTH: u64 = 1_000_000_000;

/// Tasks in a calibration run: two for each task slot, so the costs are
/// measured at the variants' own concurrency.
const CALIBRATION_TASKS: usize = 2 * CONCURRENT as usize;

/// How to rehearse.
pub struct Options {
    /// The workload.
    pub workload: Workload,
    /// Its size against the published one.
    pub scale: f64,
    /// Where each variant's fleet file, kubeconfigs and run go, and
    /// `rehearsal.json`.
    pub out: PathBuf,
    /// Devclusters to run on (1–4, largest first).
    pub clusters: usize,
    /// Only this variant (default: every one).
    pub variant: Option<String>,
    /// The placement policy of every variant, in place of the workload's.
    pub placement: Option<String>,
    /// What a task's test takes.
    pub task_time: Duration,
    /// Progress for each run.
    pub progress: Box<dyn Fn() -> Arc<dyn Progress>>,
}

/// Runs the rehearsal: calibration, then each variant on fresh clusters;
/// writes `rehearsal.json` into `options.out` after every variant, so a
/// rehearsal stopped part-way keeps what it measured.
///
/// # Errors
///
/// When a cluster cannot start, a run fails outright, or `kubectl`
/// cannot count what is left. Broken invariants are not errors: they are
/// in [`VariantOutcome::broken`].
pub fn rehearse(options: &Options) -> anyhow::Result<Rehearsal> {
    anyhow::ensure!(
        (1..=SHAPES.len()).contains(&options.clusters),
        "--clusters {}: between 1 and {}",
        options.clusters,
        SHAPES.len()
    );
    anyhow::ensure!(
        options.scale > 0.0 && options.scale.is_finite(),
        "--scale {}: a positive number",
        options.scale
    );
    let mut variants: Vec<Variant> = match &options.variant {
        None => options.workload.variants(),
        Some(name) => {
            let all = options.workload.variants();
            let names: Vec<String> = all.iter().map(|v| v.name.clone()).collect();
            vec![all.into_iter().find(|v| &v.name == name).with_context(|| {
                format!(
                    "{} has no variant `{name}`: one of {}",
                    options.workload,
                    names.join(", ")
                )
            })?]
        }
    };
    if let Some(placement) = &options.placement {
        for variant in &mut variants {
            variant.placement.clone_from(placement);
        }
    }
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    let out = std::path::absolute(&options.out)?;
    let tasks = options.workload.tasks(options.scale);
    let images: Vec<String> = plan::image_table(tasks.iter().map(|t| t.image.as_str())).0;
    let runtime = if options.workload.needs_isolation() {
        PodRuntime::default()
    } else {
        PodRuntime::Plain
    };
    if runtime == PodRuntime::Plain {
        eprintln!(
            "note: the devclusters' pods run as plain processes on this host, NOT sandboxes \
             (--runtime plain): the rehearsal measures the fleet, not isolation"
        );
    }
    let image_dir = out.join("image");
    write_image(&image_dir)?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let shapes = &SHAPES[..options.clusters];
    let mut rehearsal = Rehearsal {
        workload: options.workload.to_string(),
        scale: options.scale,
        tasks: tasks.len(),
        images: images.len(),
        clusters: shapes
            .iter()
            .map(|s| (s.name.to_string(), s.nodes))
            .collect(),
        calibration: Vec::new(),
        variants: Vec::new(),
    };
    // The fresh costs first: a recycled run's are what it adds to them.
    let recycles = variants.iter().any(|v| v.recycle);
    for recycle in [false, true].into_iter().filter(|r| !r || recycles) {
        let fresh = rehearsal.calibration.first().cloned();
        let calibration = calibrate(
            options,
            &tokio,
            (&out, &image_dir),
            runtime,
            recycle,
            fresh.as_ref(),
        )?;
        eprintln!(
            "calibrated ({}): task {:.2} s, cold claim {:.2} s, reset {:.2} s, host CPU {:.3} s a fresh task, {:.3} s a reused one",
            if recycle { "recycled" } else { "fresh" },
            calibration.task_s,
            calibration.cold_claim_s,
            calibration.reset_s,
            calibration.host_cpu_fresh_task_s,
            calibration.host_cpu_reused_task_s,
        );
        rehearsal.calibration.push(calibration);
    }
    for variant in &variants {
        let calibration = rehearsal
            .calibration
            .iter()
            .find(|c| c.recycle == variant.recycle)
            .expect("calibrated for every recycling choice")
            .clone();
        let rig = Rig {
            runtime,
            image_dir: &image_dir,
            images: &images,
            pulls: pull_model(&images),
            shapes,
        };
        let dir = out.join(&variant.name);
        eprintln!(
            "{} / {}: {} tasks → {}",
            options.workload,
            variant.name,
            tasks.len(),
            dir.display()
        );
        let fleet = FleetFile {
            name: format!("rehearse-{}-{}", options.workload, variant.name),
            tasks: &tasks,
            task_time: options.task_time,
            variant,
            concurrent: CONCURRENT,
            plain: runtime == PodRuntime::Plain,
        };
        let costs = |plan: &Plan, placed: &Placement| costs(plan, &calibration, shapes, placed);
        let mut outcome = tokio.block_on(run_variant(&dir, &rig, &fleet, &costs, options))?;
        outcome.check();
        rehearsal.variants.push(outcome);
        write_json(&out.join(REHEARSAL_FILE), &rehearsal)?;
    }
    Ok(rehearsal)
}

/// The directory every image name stands for: a task's workdir, a git
/// repository so a reset check can restore it.
fn write_image(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        dir.join("README"),
        "The rehearsal's image: every task's test is a sleep.\n",
    )
    .with_context(|| format!("writing into {}", dir.display()))
}

/// Each image's size over the bandwidth, on top of a fixed latency.
fn pull_model(images: &[String]) -> PullModel {
    PullModel {
        latency: PULL_LATENCY,
        bandwidth: Some(PULL_BANDWIDTH),
        sizes: images
            .iter()
            .map(|image| (image.clone(), image_bytes(image)))
            .collect(),
        per_node: Some(PULLS_PER_NODE),
    }
}

/// One image's first pull onto a node.
fn pull_cost(image: &str) -> Duration {
    PULL_LATENCY + Duration::from_secs_f64(image_bytes(image) as f64 / PULL_BANDWIDTH as f64)
}

/// The nodes pulling for a run that places `placed` sandboxes on each
/// cluster: pulls follow the sandboxes, so the cluster with the most of
/// them per node sets the pace, as if the fleet had `nodes / share` of its
/// nodes (rounded down). Everything on one cluster is that cluster's
/// nodes; a spread in proportion to nodes is all of them.
fn pulling_nodes(shapes: &[Shape], placed: &[u32]) -> u32 {
    let total: u32 = placed.iter().sum();
    if total == 0 {
        return shapes.iter().map(|s| s.nodes as u32).sum();
    }
    shapes
        .iter()
        .zip(placed)
        .filter(|(_, placed)| **placed > 0)
        .map(|(shape, placed)| shape.nodes as f64 * f64::from(total) / f64::from(*placed))
        .fold(f64::INFINITY, f64::min)
        .floor()
        .max(1.0) as u32
}

/// The plan's images priced with the calibration and the pull model, its
/// pulls on the nodes of the clusters the placement policy uses.
fn costs(
    plan: &Plan,
    calibration: &Calibration,
    shapes: &[Shape],
    placed: &Placement,
) -> SandboxCosts {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    SandboxCosts {
        task: Duration::from_secs_f64(calibration.task_s),
        cold_claim: Duration::from_secs_f64(calibration.cold_claim_s),
        warm_claim: Duration::ZERO,
        warm_start: Duration::from_secs_f64(calibration.warm_start_s),
        cold_start_after: sandfleet_emulator_k8s::Tuning::default().cold_start_after,
        reset: Duration::from_secs_f64(calibration.reset_s),
        pulls: plan.images.iter().map(|i| pull_cost(i)).collect(),
        nodes: pulling_nodes(shapes, &placed.per_cluster),
        pulls_per_node: PULLS_PER_NODE as u32,
        pool_hit: placed.pool_hit,
        host_cpu: Some(HostCpu {
            fresh_task: Duration::from_secs_f64(calibration.host_cpu_fresh_task_s),
            reused_task: Duration::from_secs_f64(calibration.host_cpu_reused_task_s),
            cores,
        }),
    }
}

/// The clusters a run gets.
struct Rig<'a> {
    runtime: PodRuntime,
    image_dir: &'a Path,
    images: &'a [String],
    pulls: PullModel,
    shapes: &'a [Shape],
}

/// What a run's fleet file says.
struct FleetFile<'a> {
    name: String,
    tasks: &'a [Task],
    task_time: Duration,
    variant: &'a Variant,
    concurrent: u32,
    plain: bool,
}

impl FleetFile<'_> {
    /// The fleet file, with relative paths as a user writes them.
    fn text(&self, shapes: &[Shape]) -> String {
        let v = self.variant;
        let mut text = format!(
            "# Written by `sandfleet rehearse`; run it again with\n\
             # `sandfleet run fleet.toml` while the devclusters are up.\n\n\
             [run]\nname = \"{}\"\ndataset = \"tasks.jsonl\"\nout = \"out\"\n\n\
             [adapter]\nname = \"generic\"\n\n\
             [fleet]\nstrategy = \"{}\"\nmax_concurrent = {}\nmax_warmpool_size = {}\n\
             claim_timeout = \"300s\"\ncpu_milli = 250\nmemory_mib = 256\n\
             # The breaker at what the clusters' nodes hold in pods; the plan\n\
             # itself is bounded by what their CPU and memory hold.\n\
             max_live_sandboxes = {}\n",
            self.name,
            v.strategy,
            self.concurrent,
            2 * self.concurrent,
            shapes.iter().map(|s| s.nodes as u32 * s.pods).sum::<u32>()
        );
        if v.recycle {
            text.push_str(&format!("recycle = true\nmax_reuses = {MAX_REUSES}\n"));
        }
        text.push_str(&format!(
            "\n[plugins]\nplacement = \"{}\"\nreset = \"git-restore\"\n",
            v.placement
        ));
        for shape in shapes {
            text.push_str(&format!(
                "\n[[clusters]]\nname = \"{0}\"\nbackend = \"k8s\"\n\n[clusters.k8s]\n\
                 kubeconfig = \"{0}.kubeconfig\"\ncontext = \"{CONTEXT}\"\nnamespace = \"default\"\n",
                shape.name
            ));
        }
        text
    }

    /// `tasks.jsonl`: each test a sleep that carries its task's id as the
    /// command marker the clusters count starts of (through `env`: the
    /// adapter runs a test as words, not through a shell).
    fn dataset(&self) -> String {
        let seconds = self.task_time.as_secs_f64();
        self.tasks
            .iter()
            .map(|task| {
                let mut row = serde_json::json!({
                    "id": task.id,
                    "image": task.image,
                    "test": format!("env {}={} sleep {seconds}", sandfleet_emulator_k8s::MARKER_ENV, task.id),
                });
                if self.plain {
                    // A plain pod is a process on the host, whose root has
                    // no /workspace.
                    row["workdir"] = serde_json::json!("/tmp");
                }
                format!("{row}\n")
            })
            .collect()
    }
}

/// Runs one variant on fresh clusters and measures it.
async fn run_variant(
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

/// Where the placement policy puts a run's sandboxes, found before the run
/// through the policy itself.
struct Placement {
    /// The sandboxes of the plan's peak on each cluster.
    per_cluster: Vec<u32>,
    /// Of an image's claims, the share put on the cluster of its pool.
    pool_hit: f64,
}

/// Claims of each image placed after its pool, to measure the pool hits.
const CLAIMS_AFTER_POOL: u64 = 8;

/// Where the placement policy puts `plan`'s peak: its sandboxes placed one
/// by one as the run's first claims are, before anything is warm or
/// pulled, each cluster as its capacity and weight describe it, its free
/// slots falling as sandboxes land. Then, for each image, its pool and a
/// few of its claims after it, the pool's cluster holding the image and a
/// warm sandbox of it, as the engine shows them to the policy.
async fn place_peak(
    plan: &Plan,
    placement: &PlacementPolicy,
    capacity: &[sandfleet_core::Capacity],
    weights: &[u32],
) -> anyhow::Result<Placement> {
    let states = |live: &[u32], pool: Option<usize>| -> Vec<ClusterState> {
        capacity
            .iter()
            .zip(weights)
            .zip(live)
            .enumerate()
            .map(|(index, ((capacity, weight), live))| ClusterState {
                healthy: true,
                has_image: pool == Some(index),
                free_slots: capacity
                    .sandbox_slots
                    .map_or(u32::MAX, |slots| slots.saturating_sub(*live)),
                live: *live,
                warm_ready: u32::from(pool == Some(index)),
                weight: *weight,
                cpu_free_milli: u32::MAX,
                memory_free_mib: u32::MAX,
            })
            .collect()
    };
    let place = |kind: DemandKind, image: u32, sequence: u64, states: Vec<ClusterState>| async move {
        let demand = Demand {
            kind,
            image,
            count: 1,
            sequence,
        };
        placement
            .place(&demand, &Clusters::from_states(&states))
            .await
            .context("placing the plan's sandboxes")
            .map(|index| index as usize)
    };
    let mut placed = vec![0u32; capacity.len()];
    let images = plan.images.len().max(1) as u32;
    let mut sequence = 0;
    while sequence < u64::from(plan.peak_warm + plan.concurrent) {
        let image = (sequence % u64::from(images)) as u32;
        let at = place(DemandKind::Claim, image, sequence, states(&placed, None)).await?;
        placed[at] += 1;
        sequence += 1;
    }
    let (mut claims, mut hits) = (0u32, 0u32);
    for image in 0..images {
        let pool = place(DemandKind::Pool, image, sequence, states(&placed, None)).await?;
        sequence += 1;
        for _ in 0..CLAIMS_AFTER_POOL {
            let at = place(
                DemandKind::Claim,
                image,
                sequence,
                states(&placed, Some(pool)),
            )
            .await?;
            sequence += 1;
            claims += 1;
            hits += u32::from(at == pool);
        }
    }
    Ok(Placement {
        per_cluster: placed,
        pool_hit: f64::from(hits) / f64::from(claims.max(1)),
    })
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

/// A short run of the workload's own pods, one image, nothing warm, no pull
/// cost: what a task, a cold claim, a reset and the host's CPU cost here.
fn calibrate(
    options: &Options,
    tokio: &tokio::runtime::Runtime,
    (out, image_dir): (&Path, &Path),
    runtime: PodRuntime,
    recycle: bool,
    fresh: Option<&Calibration>,
) -> anyhow::Result<Calibration> {
    let images = vec!["calibration".to_string()];
    let tasks: Vec<Task> = (0..CALIBRATION_TASKS)
        .map(|i| Task {
            id: format!("calibration-t{i:02}"),
            image: images[0].clone(),
        })
        .collect();
    let variant = Variant {
        name: "calibration".into(),
        strategy: "none",
        recycle,
        placement: "least-loaded".to_string(),
    };
    let rig = Rig {
        runtime,
        image_dir,
        images: &images,
        pulls: PullModel::default(),
        shapes: &SHAPES[..1],
    };
    let fleet = FleetFile {
        name: "rehearse-calibration".into(),
        tasks: &tasks,
        task_time: options.task_time,
        variant: &variant,
        concurrent: CONCURRENT,
        plain: runtime == PodRuntime::Plain,
    };
    let dir = out.join(if recycle {
        "calibration-recycled"
    } else {
        "calibration"
    });
    let before = host_cpu();
    let no_costs = |_: &Plan, _: &Placement| costs_unknown();
    tokio.block_on(run_variant(&dir, &rig, &fleet, &no_costs, options))?;
    let cpu = host_cpu().saturating_sub(before);
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out").join(sandfleet_engine::REPORT_FILE))
            .context("reading the calibration's report")?,
    )?;
    let phases = &report["phases"];
    let mean = |phase: &str| {
        let count = phases[phase]["count"].as_f64().unwrap_or(0.0);
        if count > 0.0 {
            phases[phase]["total_s"].as_f64().unwrap_or(0.0) / count
        } else {
            0.0
        }
    };
    let cold_claim_s = phases["claim"]["p50_s"].as_f64().unwrap_or(0.0);
    // A cold claim is the controller's wait for a warm candidate, then the
    // pod's start: what a warm pool's member takes is the start alone.
    let cold_start_after = sandfleet_emulator_k8s::Tuning::default().cold_start_after;
    let cpu = cpu.as_secs_f64();
    let (fresh_task, reused_task) = match fresh {
        // A recycled run's CPU is its claimed sandboxes' tasks at the fresh
        // cost, and the rest at the reused one.
        Some(fresh) => {
            let claims = report["claims"].as_f64().unwrap_or(0.0);
            let reused = report["recycle"]["reused"].as_f64().unwrap_or(0.0);
            let rest = (cpu - claims * fresh.host_cpu_fresh_task_s).max(0.0);
            (
                fresh.host_cpu_fresh_task_s,
                if reused > 0.0 { rest / reused } else { 0.0 },
            )
        }
        None => (cpu / CALIBRATION_TASKS as f64, 0.0),
    };
    Ok(Calibration {
        recycle,
        tasks: CALIBRATION_TASKS,
        task_s: mean("process") + mean("grade"),
        cold_claim_s,
        warm_start_s: (cold_claim_s - cold_start_after.as_secs_f64()).max(0.0),
        reset_s: mean("reset"),
        host_cpu_fresh_task_s: fresh_task,
        host_cpu_reused_task_s: reused_task,
    })
}

fn costs_unknown() -> SandboxCosts {
    SandboxCosts {
        task: Duration::ZERO,
        cold_claim: Duration::ZERO,
        warm_claim: Duration::ZERO,
        warm_start: Duration::ZERO,
        cold_start_after: Duration::ZERO,
        reset: Duration::ZERO,
        pulls: Vec::new(),
        nodes: 1,
        pulls_per_node: 1,
        pool_hit: 1.0,
        host_cpu: None,
    }
}

/// CPU every process on the host has used since boot: `/proc/stat`'s
/// busy time (user, nice, system, irq, softirq, steal), in the kernel's
/// fixed 100 ticks a second (`USER_HZ`). A devcluster's sandboxes, the
/// engine and the emulators all spend the host's CPU, and some of them are
/// no child of this process.
fn host_cpu() -> Duration {
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

/// Writes `value` as pretty JSON, atomically.
fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let partial = path.with_extension("json.partial");
    let mut file = std::fs::File::create(&partial)
        .with_context(|| format!("writing {}", partial.display()))?;
    serde_json::to_writer_pretty(&mut file, value)?;
    file.write_all(b"\n")?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devclusters::SHAPES;

    #[test]
    fn pulls_run_at_the_pace_of_the_cluster_with_most_sandboxes_per_node() {
        // 8, 4, 2 and 1 nodes.
        assert_eq!(pulling_nodes(&SHAPES, &[64, 0, 0, 0]), 8);
        assert_eq!(pulling_nodes(&SHAPES, &[80, 40, 20, 10]), 15);
        // A quarter of the sandboxes on the one-node cluster: it pulls as
        // if the fleet had 4 nodes.
        assert_eq!(pulling_nodes(&SHAPES, &[60, 20, 0, 20]), 5);
        assert_eq!(pulling_nodes(&SHAPES, &[0, 0, 0, 0]), 15);
    }
}
