//! `sandfleet plan CONFIG` and `sandfleet preflight CONFIG`: look before
//! running, creating nothing (`plan` lists the images a cluster would
//! have to pull, and the bytes, asking registries for manifests only).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use sandfleet_core::Capacity;
use sandfleet_engine::recycle_estimate::RecycleEstimate;
use sandfleet_engine::{Strategy, plan, pulls};

use sandfleet_fleet::FleetConfig;
use sandfleet_fleet::setup;

pub(crate) fn plan(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = FleetConfig::load(config_path)?;
    let plugins = setup::plugins(&config)?;
    let dataset = setup::dataset(&config, &plugins.adapter)?;
    let tasks = &dataset.tasks;
    let clusters = setup::clusters(&config)?;
    setup::check_images(&config, &clusters, tasks)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let capacity = setup::capacity(&clusters).await?;
        let planned = setup::plan(&config, &plugins, &dataset, &clusters, &capacity).await?;
        let counts = &planned.tasks;
        print!("{}", planned.render());
        let images: BTreeSet<String> = tasks
            .iter()
            .map(|t| config.fleet.image_rewrite.apply(&t.image))
            .collect();
        let images: Vec<String> = images.into_iter().collect();
        let to_pull = pulls::images_to_pull(&clusters, &images).await;
        print!("{}", pulls::render(&clusters, &to_pull));
        for cluster in &clusters {
            println!(
                "{}",
                RecycleEstimate::render(
                    &cluster.name,
                    &cluster.kind,
                    cluster.backend.recycling().is_some(),
                    config.fleet.recycle
                )
            );
        }
        if config.fleet.strategy != Strategy::None {
            let mut per_task = config.fleet.clone();
            per_task.warm_per_task = true;
            per_task.strategy = Strategy::Naive;
            let (limits, _) = plan::limits(&per_task, &capacity);
            let one_each = plugins.sizing.plan(counts, &limits).await?;
            println!(
                "warming one sandbox per task (capped at max_warmpool_size {}) would hold {} at once",
                limits.max_warmpool_size, one_each.peak_warm
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub(crate) fn preflight(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = FleetConfig::load(config_path)?;
    setup::plugins(&config)?;
    let clusters = setup::clusters(&config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut failed = false;
    for cluster in &clusters {
        let (found, capacity) = runtime.block_on(async {
            (
                cluster.backend.preflight().await,
                cluster.backend.capacity().await,
            )
        });
        println!("{} ({})", cluster.name, cluster.kind);
        for note in &found.notes {
            println!("  {note}");
        }
        for warning in &found.warnings {
            println!("  warning: {warning}");
        }
        for failure in &found.failures {
            println!("  FAILED: {failure}");
        }
        match capacity {
            Ok(c) => println!("  capacity: {}", describe_capacity(&c)),
            Err(e) => println!("  capacity: unavailable: {e}"),
        }
        failed |= !found.failures.is_empty();
        if found.failures.is_empty() {
            println!("  ok");
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `Capacity` for people: what the cluster cannot tell says so.
fn describe_capacity(capacity: &Capacity) -> String {
    let known = |value: Option<u64>, unit: &str| match value {
        Some(value) => format!("{value} {unit}"),
        None => format!("unknown {unit}"),
    };
    [
        known(capacity.nodes.map(u64::from), "node(s)"),
        known(capacity.cpu_milli, "millicores"),
        known(capacity.memory_mib, "MiB memory"),
        known(capacity.disk_mib_per_node, "MiB disk per node"),
        known(capacity.sandbox_slots.map(u64::from), "sandbox slots"),
    ]
    .join(", ")
}
