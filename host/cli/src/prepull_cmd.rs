//! `sandfleet prepull FLEET.toml`: every image the run's tasks need, fetched
//! ahead by every cluster that can — into the local backend's store, and
//! onto every node of every Kubernetes cluster its node selector matches —
//! as a run with `[fleet] prepull = true` does before it warms anything.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use sandfleet_core::RunId;
use sandfleet_fleet::FleetConfig;
use sandfleet_fleet::setup;

use crate::progress_ui;

pub(crate) fn prepull(config_path: &Path) -> anyhow::Result<ExitCode> {
    let mut config = FleetConfig::load(config_path)?;
    config.fleet.prepull = true;
    let plugins = setup::plugins(&config)?;
    let tasks = setup::tasks(&config, &plugins.adapter)?;
    let images: BTreeSet<String> = tasks
        .iter()
        .map(|task| config.fleet.image_rewrite.apply(&task.image))
        .collect();
    let images: Vec<String> = images.into_iter().collect();
    // Its own run id: a reap of it removes a pull it was killed in the
    // middle of.
    let run_id = RunId::generate(&format!("{}-prepull", config.run.name));
    let clusters = setup::clusters(&config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let progress = progress_ui::for_stderr();
    let pulled = runtime.block_on(sandfleet_engine::pulls::pull(
        &clusters,
        &images,
        &run_id.labels(),
        progress.as_ref(),
    ));
    if pulled.failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for (what, error) in pulled.failed.values() {
        eprintln!("error: {what}: {error}");
    }
    anyhow::bail!(
        "{} of {} image(s) could not be pulled (run {run_id}; `sandfleet reap` removes what it left)",
        pulled.failed.len(),
        images.len()
    )
}
