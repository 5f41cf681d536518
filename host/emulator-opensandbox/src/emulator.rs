//! [`Emulator`]: the lifecycle server, its sandboxes and their execds,
//! started together and torn down together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use sandfleet_emulator_runtime::{FleetImages, ImageMap, OciMap, SandboxHost};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Runtime;
use crate::counters::Executions;
use crate::faults::Faults;
use crate::fleet::Fleet;
use crate::lifecycle::{self, App};
use crate::random::Rng;

/// One sandbox's create request, as the emulator took it.
#[derive(Debug, Clone, PartialEq)]
pub struct Created {
    /// The sandbox's id.
    pub id: String,
    /// Its image (of a snapshot's sandbox: the image the snapshot came of).
    pub image: String,
    /// `resourceLimits`.
    pub limits: BTreeMap<String, String>,
    /// `resourceRequests` (the limits when the request left them out).
    pub requests: BTreeMap<String, String>,
    /// `networkPolicy` (honoured only when it denies all egress).
    pub network_policy: Option<serde_json::Value>,
}

/// What an [`Emulator`] serves.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Where the lifecycle API listens (port 0: any free port).
    pub listen: SocketAddr,
    /// The key clients must send; `None` generates one.
    pub api_key: Option<String>,
    /// Image names and their directories.
    pub images: ImageMap,
    /// Image names and the OCI references they stand for; any other image
    /// that names a reference is pulled as it is (with `namespaces`).
    pub oci_images: OciMap,
    /// How sandboxes run.
    pub runtime: Runtime,
    /// The local backend's state directory; `None`: a temporary directory
    /// removed at shutdown.
    pub state_dir: Option<PathBuf>,
    /// Fault switches.
    pub faults: Faults,
}

impl EmulatorConfig {
    /// Loopback on any port, a generated key, these images, no faults.
    pub fn new(images: impl Into<FleetImages>) -> Self {
        let images = images.into();
        EmulatorConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            api_key: None,
            images: images.directories,
            oci_images: images.oci,
            runtime: Runtime::default(),
            state_dir: None,
            faults: Faults::default(),
        }
    }
}

/// A running emulator.
pub struct Emulator {
    address: SocketAddr,
    api_key: String,
    fleet: Arc<Fleet>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Emulator {
    /// Starts the emulator; it serves once this returns.
    ///
    /// # Errors
    ///
    /// When there are no images, the listen address is not loopback or
    /// cannot be bound, the state directory cannot be used, or (with
    /// `namespaces`) local sandboxes cannot be isolated here.
    pub async fn start(config: EmulatorConfig) -> anyhow::Result<Emulator> {
        if !config.listen.ip().is_loopback() {
            bail!(
                "--listen {}: the emulator serves on loopback addresses only",
                config.listen
            );
        }
        if config.images.is_empty()
            && config.oci_images.is_empty()
            && config.runtime == Runtime::Plain
        {
            bail!(
                "no images: map at least one with --image REF=DIR or --images-from FLEET.toml \
                 (plain sandboxes cannot run OCI images)"
            );
        }
        let images = FleetImages {
            directories: config.images,
            oci: config.oci_images,
        };
        images.check_directories()?;
        let host = SandboxHost::open(
            "opensandbox",
            images,
            config.runtime,
            config.state_dir,
            false,
        )?;
        host.preflight("them").await?;
        let api_key = config
            .api_key
            .clone()
            .unwrap_or_else(|| format!("osk-{}", Rng::from_entropy().hex(24)));
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("--listen {}: cannot bind", config.listen))?;
        let address = listener.local_addr()?;
        let fleet = Fleet::new(host, config.faults.clone());
        let app = App::new(Arc::clone(&fleet), api_key.clone());
        let stop = CancellationToken::new();
        let server = tokio::spawn(crate::server::serve(
            listener,
            lifecycle::router(app),
            config.faults.keepalive,
            stop.clone(),
        ));
        let reaper = tokio::spawn(Arc::clone(&fleet).reap_expired(stop.clone()));
        Ok(Emulator {
            address,
            api_key,
            fleet,
            stop,
            tasks: vec![server, reaper],
        })
    }

    /// `http://127.0.0.1:PORT`, the `OPENSANDBOX_BASE_URL` (the SDK's
    /// domain; the API is under `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The lifecycle server's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The key clients send in `OPEN-SANDBOX-API-KEY`.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// The counters: commands started by id and marker, sandboxes made.
    pub fn executions(&self) -> Executions {
        self.fleet.counters.snapshot(self.fleet.live())
    }

    /// Sandboxes that exist now.
    pub fn live_sandboxes(&self) -> usize {
        self.fleet.live()
    }

    /// Snapshots that exist now, whatever their state.
    pub fn live_snapshots(&self) -> usize {
        self.fleet.snapshots.len()
    }

    /// The server pool (`extensions.poolRef`) each sandbox that exists now
    /// was created from, by sandbox id; `None` for a direct create.
    pub fn pool_refs(&self) -> BTreeMap<String, Option<String>> {
        self.fleet
            .all()
            .iter()
            .map(|s| (s.id.clone(), s.spec.extensions.get("poolRef").cloned()))
            .collect()
    }

    /// What each sandbox that exists now was created with, as the
    /// emulator took the request.
    pub fn created(&self) -> Vec<Created> {
        self.fleet
            .all()
            .iter()
            .map(|s| Created {
                id: s.id.clone(),
                image: s.spec.image.clone(),
                limits: s.spec.limits.clone(),
                requests: s.spec.requests.clone(),
                network_policy: s.spec.network_policy.clone(),
            })
            .collect()
    }

    /// Stops serving and removes every sandbox it made.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.fleet.teardown().await;
    }
}
