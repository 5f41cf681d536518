//! `sandfleet reap --run-id ID`: removes everything a run left behind,
//! whether it finished, failed or was killed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use sandfleet_core::RunId;

use sandfleet_fleet::FleetConfig;
use sandfleet_fleet::setup;

pub(crate) fn reap(
    run_id: &str,
    config: Option<&Path>,
    state_dir: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let run_id = RunId::new(run_id).map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let reaped = match config {
        Some(path) => {
            let config = FleetConfig::load(path)?;
            let clusters = setup::clusters(&config)?;
            runtime.block_on(sandfleet_engine::reap(&clusters, &run_id))?
        }
        None => {
            let state_dir = match state_dir {
                Some(dir) => dir,
                None => sandfleet_backend_local::LocalConfig::default()
                    .state_dir()
                    .map_err(anyhow::Error::msg)
                    .context("pass --state-dir or a fleet file")?,
            };
            runtime.block_on(sandfleet_backend_local::reap_run(&state_dir, &run_id))?
        }
    };
    println!(
        "run {run_id}: removed {} sandbox(es), {} pool(s), {} template(s), {} snapshot(s); killed \
         {} process(es)",
        reaped.sandboxes, reaped.pools, reaped.templates, reaped.snapshots, reaped.processes
    );
    Ok(ExitCode::SUCCESS)
}
