//! `sandfleet plan CONFIG` and `sandfleet preflight CONFIG`: look before
//! running, creating nothing.

use std::path::Path;
use std::process::ExitCode;

use sandfleet_core::RunId;
use sandfleet_engine::{Strategy, plan};

use crate::config::FleetConfig;
use crate::setup;

pub(crate) fn plan(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = FleetConfig::load(config_path)?;
    let plugins = setup::plugins(&config)?;
    let tasks = setup::tasks(&config, &plugins.adapter)?;
    setup::check_images(&config, &tasks)?;
    let (images, counts) = plan::image_table(tasks.iter().map(|t| t.image.as_str()));
    // Disk caps need the clusters' disk; without one the plan ignores them.
    let limits = plan::limits(&config.fleet, 0, 0);
    let planned = plan::plan(&plugins.sizing, images.clone(), counts.clone(), &limits)?;
    print!("{}", planned.render());
    if config.fleet.strategy != Strategy::None {
        let mut per_task = config.fleet.clone();
        per_task.warm_per_task = true;
        per_task.strategy = Strategy::Naive;
        let one_each = plan::plan(
            &plugins.sizing,
            images,
            counts,
            &plan::limits(&per_task, 0, 0),
        )?;
        println!(
            "warming one sandbox per task (capped at max_warmpool_size {}) would hold {} at once",
            config.fleet.max_warmpool_size, one_each.peak_warm
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn preflight(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = FleetConfig::load(config_path)?;
    setup::plugins(&config)?;
    let run_id = RunId::generate("preflight");
    let clusters = setup::clusters(&config, &run_id)?;
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
            Ok(c) => println!(
                "  capacity: {} node(s), {} millicores, {} MiB memory, {} MiB disk per node, {} sandbox slots",
                c.nodes, c.cpu_milli, c.memory_mib, c.disk_mib_per_node, c.sandbox_slots
            ),
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
