//! `sandfleet devcluster`: the emulators of the cluster backends, for trying
//! a cluster backend on a laptop and for the drivers' tests. Each runs until
//! SIGINT or SIGTERM, then removes every sandbox it made.

use std::process::ExitCode;

use clap::Subcommand;
use sandfleet_engine::CancellationToken;

use crate::run_cmd::stop_on_signals;

#[derive(Subcommand)]
pub(crate) enum DevclusterCommand {
    /// A Kubernetes API server (HTTPS, bearer token) with agent-sandbox's
    /// CRDs and controllers; prints the kubeconfig's path once ready.
    K8s(sandfleet_emulator_k8s::K8sArgs),
    /// An OpenSandbox server (lifecycle API, server proxy) with an execd in
    /// every sandbox; prints OPENSANDBOX_BASE_URL and OPENSANDBOX_API_KEY
    /// once ready.
    Opensandbox(sandfleet_emulator_opensandbox::OpenSandboxArgs),
}

pub(crate) fn run(command: DevclusterCommand) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let stop = CancellationToken::new();
        tokio::spawn(stop_on_signals(stop.clone()));
        let stopped = stop.cancelled_owned();
        match command {
            DevclusterCommand::K8s(args) => sandfleet_emulator_k8s::serve(args, stopped).await,
            DevclusterCommand::Opensandbox(args) => {
                sandfleet_emulator_opensandbox::serve(args, stopped).await
            }
        }
    })?;
    Ok(ExitCode::SUCCESS)
}
