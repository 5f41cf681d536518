//! `sandfleet prepull FLEET.toml` (and `[fleet] prepull = true` before a
//! run): every image the run's tasks need, pulled on every node of every
//! Kubernetes cluster its node selector matches, before the first claim.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use sandfleet_backend_k8s::K8sBackend;
use sandfleet_core::RunId;
use sandfleet_fleet::setup::{self, Connections};
use sandfleet_fleet::{BackendConfig, FleetConfig};

pub(crate) fn prepull(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = FleetConfig::load(config_path)?;
    let plugins = setup::plugins(&config)?;
    let tasks = setup::tasks(&config, &plugins.adapter)?;
    let images = images(&config, tasks.iter().map(|t| t.image.as_str()));
    let run_id = RunId::generate(&format!("{}-prepull", config.run.name));
    let connections = Connections::new(config.fleet.create_rate)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(pull(&config, &images, &run_id, &connections))?;
    Ok(ExitCode::SUCCESS)
}

/// The images the backends are asked for: each task's, through
/// `[run] image_rewrite`, once.
pub(crate) fn images<'a>(
    config: &FleetConfig,
    tasks: impl Iterator<Item = &'a str>,
) -> Vec<String> {
    let images: BTreeSet<String> = tasks
        .map(|image| config.fleet.image_rewrite.apply(image))
        .collect();
    images.into_iter().collect()
}

/// Pulls `images` on every Kubernetes cluster of `config`, as `run` (whose
/// reap removes a pull it was killed in the middle of), over the clients of
/// `connections` (a run's own, when it pulls before it starts).
pub(crate) async fn pull(
    config: &FleetConfig,
    images: &[String],
    run: &RunId,
    connections: &Connections,
) -> anyhow::Result<()> {
    for cluster in &config.clusters {
        let BackendConfig::K8s { k8s } = &cluster.backend else {
            continue;
        };
        let backend = K8sBackend::new(&cluster.name, k8s.clone(), connections.kube())
            .with_context(|| format!("{}: cluster `{}`", config.path.display(), cluster.name))?;
        let started = Instant::now();
        let nodes = backend
            .prepull(run, images, started + config.fleet.pool_ready_timeout)
            .await?;
        eprintln!(
            "{}: {} image(s) on {nodes} node(s) in {:.1}s",
            cluster.name,
            images.len(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
