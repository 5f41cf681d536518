//! A short run of the workload's own pods before the variants: what a
//! task, a cold claim, a reset and the host's CPU cost on this machine.

use std::path::Path;

use anyhow::Context as _;
use sandfleet_emulator_k8s::{PodRuntime, PullModel};
use sandfleet_engine::plan::Plan;

use crate::fleet_file::FleetFile;
use crate::peak::Placement;
use crate::pricing::costs_unknown;
use crate::run::{Rig, host_cpu, run_variant};
use crate::{CONCURRENT, Calibration, Options, SHAPES, Task, Variant};

/// Tasks in a calibration run: two for each task slot, so the costs are
/// measured at the variants' own concurrency.
const CALIBRATION_TASKS: usize = 2 * CONCURRENT as usize;

/// A short run of the workload's own pods, one image, nothing warm, no pull
/// cost: what a task, a cold claim, a reset and the host's CPU cost here.
pub(crate) fn calibrate(
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
