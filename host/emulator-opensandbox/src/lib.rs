//! A wire-compatible OpenSandbox server and execd with production failure
//! modes, for tests and laptops (`sandfleet devcluster opensandbox`).
//!
//! The lifecycle API (server 1.1.1, `/v1` and bare routes) runs on one
//! loopback listener (`lifecycle`, with its create checks in `validate` and
//! error shapes in `error`); each sandbox is a local sandbox made by the
//! local backend (`fleet`), with its own execd (`execd`, commands in
//! `commands`) on its own loopback address `127.64.0.0/10:44772`, reached
//! directly or through the server proxy (`proxy`). `server` is the HTTP/1.1
//! accept loop with the `keepalive` idle close; `faults` the fault
//! switches; `counters` what ran and what exists; `random` ids and seeded
//! draws. Images are names mapped to directories or to OCI references
//! (`sandfleet-emulator-runtime`, shared with the Kubernetes emulator); with
//! isolated sandboxes any reference is pulled into the local backend's layer
//! store, and a failed pull fails the create with `SANDBOX_IMAGE_PULL_FAILED`,
//! as the Docker runtime's does — the Kubernetes runtime would only time out;
//! execd runs commands with the image's `bash`, as the real one does. See `SEMANTICS.md` in the shared specs
//! for the behaviour reproduced.
//!
//! Snapshots (`/v1/snapshots`, `snapshotId` creates) are the local backend's
//! own, captured in the background as the server's workers capture them; a
//! sandbox made of one has the shape of the sandbox it was taken of. Where
//! the local backend has none, a snapshot create answers 501
//! `SNAPSHOT::NOT_IMPLEMENTED`, as a runtime without them does.
//!
//! A create's `networkPolicy` is honoured when it denies all egress (the
//! sandboxes have no network) and refused with a 422 naming it when it would
//! let anything out; `platform` is honoured when it names the host's and
//! refused otherwise; `volumes` and `lifecycle` hooks are refused. Without a
//! `networkPolicy` the real runtime's sandbox has a network and the
//! emulator's still has none. An `ephemeral-storage` quantity in
//! `resourceLimits` or `resourceRequests` is checked as the server checks
//! cpu and memory, but not enforced: every sandbox gets the shared
//! runtime's disk. execd's `DELETE /files?path=…` removes files.
//!
//! Not emulated: pause and resume, templates, pools' CRUD,
//! the egress sidecar's API (its endpoint, port 18080, resolves), running
//! the entrypoint (sandboxes are idle until commands come), `uid`/`gid` and
//! file owners (commands run as the sandbox's user).

mod commands;
mod counters;
mod emulator;
mod error;
mod execd;
mod faults;
mod fleet;
mod lifecycle;
mod proxy;
mod random;
mod server;
mod validate;

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

pub use counters::Executions;
pub use emulator::{Created, Emulator, EmulatorConfig};
pub use execd::{EGRESS_PORT, EXECD_PORT};
pub use faults::{DEFAULT_GRACE_TAIL, Faults};
pub use lifecycle::SERVER_VERSION;
pub use sandfleet_emulator_runtime::{
    FleetImages, ImageMap, Isolation as Runtime, MARKER_ENV, OciMap, images_from_fleet,
    parse_image_arg,
};

/// `sandfleet devcluster opensandbox`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct OpenSandboxArgs {
    /// Where the lifecycle API listens (loopback only; port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The API key clients must send (OPEN-SANDBOX-API-KEY); default: generated.
    #[arg(long)]
    pub api_key: Option<String>,
    /// An image: a reference clients may create and the directory it comes
    /// from (repeatable).
    #[arg(long = "image", value_name = "REF=DIR", value_parser = parse_image_arg)]
    pub images: Vec<(String, sandfleet_backend_local::ImageSource)>,
    /// Take images from the `[clusters.<name>.images]` tables of a fleet file:
    /// directories, and names of OCI references (`{ oci = "REF" }`). Any
    /// other image that names a reference (`registry/repo:tag`) is pulled
    /// as it is (with `--runtime namespaces`).
    #[arg(long, value_name = "FLEET.toml")]
    pub images_from: Option<PathBuf>,
    /// How sandboxes run: isolated (namespaces) or as plain processes
    /// (plain, for scale tests).
    #[arg(long, value_enum, default_value_t = Runtime::Namespaces)]
    pub runtime: Runtime,
    /// The local backend's state directory (default: a temporary one).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Fault switches: keepalive=DUR, execd-late=MS, grace-tail[=MS],
    /// cut-tail, pool-max=N, flaky=P, seed=N, port-500, quota=N,
    /// snapshot-late=DUR, throttle-deletes.
    #[arg(long, default_value = "", value_parser = |s: &str| s.parse::<Faults>())]
    pub faults: Faults,
    /// Also write the OPENSANDBOX_* lines to this file.
    #[arg(long, value_name = "FILE")]
    pub write_env: Option<PathBuf>,
}

impl OpenSandboxArgs {
    /// The emulator these arguments describe.
    ///
    /// # Errors
    ///
    /// When `--images-from` cannot be read.
    pub fn config(&self) -> anyhow::Result<EmulatorConfig> {
        let images = FleetImages::from_args(self.images_from.as_deref(), &self.images)?;
        Ok(EmulatorConfig {
            listen: self.listen,
            api_key: self.api_key.clone(),
            images: images.directories,
            oci_images: images.oci,
            runtime: self.runtime,
            state_dir: self.state_dir.clone(),
            faults: self.faults.clone(),
        })
    }
}

/// Runs the emulator until `shutdown` resolves, then removes every sandbox
/// it made. Once it serves, prints `OPENSANDBOX_BASE_URL=…` and
/// `OPENSANDBOX_API_KEY=…` on stdout (and writes them to `--write-env`).
///
/// # Errors
///
/// When the emulator cannot start (see [`Emulator::start`]) or the env file
/// cannot be written.
pub async fn serve(
    args: OpenSandboxArgs,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let emulator = Emulator::start(args.config()?).await?;
    let lines = format!(
        "OPENSANDBOX_BASE_URL={}\nOPENSANDBOX_API_KEY={}\n",
        emulator.base_url(),
        emulator.api_key()
    );
    if let Some(path) = &args.write_env
        && let Err(error) =
            std::fs::write(path, &lines).with_context(|| format!("--write-env {}", path.display()))
    {
        emulator.shutdown().await;
        return Err(error);
    }
    {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(lines.as_bytes());
        let _ = stdout.flush();
    }
    shutdown.await;
    emulator.shutdown().await;
    Ok(())
}
