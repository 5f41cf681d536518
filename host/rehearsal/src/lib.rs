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

mod calibration;
mod devclusters;
mod fleet_file;
mod peak;
mod pricing;
mod run;
mod summary;
mod workload;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sandfleet_emulator_k8s::PodRuntime;
use sandfleet_engine::Progress;
use sandfleet_engine::plan::{self, Plan};

use crate::calibration::calibrate;
use crate::fleet_file::FleetFile;
use crate::peak::Placement;
use crate::pricing::{costs, pull_model};
use crate::run::{Rig, run_variant};

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

/// Writes `value` as pretty JSON, atomically.
fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let partial = path.with_extension("json.partial");
    let mut file = std::fs::File::create(&partial)
        .with_context(|| format!("writing {}", partial.display()))?;
    serde_json::to_writer_pretty(&mut file, value)?;
    file.write_all(b"\n")?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}
