//! A wire-compatible Kubernetes API server for tests and laptops (`sandfleet devcluster
//! k8s`): HTTPS with a CA made at start, a bearer token, discovery (aggregated and
//! legacy), the minimal OpenAPI v3 `kubectl apply` needs, CRD registration with
//! structural schema validation, a generic object store with watches, server-side
//! apply with managed fields, garbage collection by owner references, and the pod
//! subresources a kubelet serves (`exec`, `log`).
//!
//! Pods run as local sandboxes (`kubelet`): of a directory an image name is mapped
//! to, or, with isolated pods, of an OCI image pulled for real from its registry into
//! the local backend's layer store: a reference itself (`registry/repo:tag`), or a
//! name `--images-from` maps with `{ oci = "REF" }`. `imagePullPolicy` is defaulted
//! and honoured as Kubernetes does; a failed pull is `ErrImagePull`, then
//! `ImagePullBackOff`, with the kubelet's events.
//!
//! Tests of other crates start one in-process:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let emulator = sandfleet_emulator_k8s::Emulator::start(Default::default()).await?;
//! emulator.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! println!("{} {}", emulator.url(), emulator.token());
//! emulator.shutdown().await;
//! # Ok(()) }
//! ```

mod api;
mod authz;
mod client;
mod controllers;
mod events;
mod exec;
mod executions;
mod faults;
mod fields;
mod gc;
mod kubeconfig;
mod kubelet;
mod listed;
mod log;
mod pods;
mod registry;
mod schema;
mod seed;
mod selector;
mod server;
mod state;
mod status;
mod store;
mod table;
mod tls;
mod watch;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use authz::{DenyRule, USER};
pub use controllers::Tuning;
pub use executions::Executions;
pub use kubeconfig::{CONTEXT, Kubeconfig};
pub use kubelet::pull_model::PullModel;
pub use sandfleet_emulator_runtime::{ImageMap, Isolation as PodRuntime, MARKER_ENV, OciMap};
pub use seed::NodeShape;
pub use store::Tally;

/// The four agent-sandbox CRDs as agent-sandbox 1.0 installs them (upstream
/// #1393 and #1404): v1beta1 alone, served and stored, with no v1alpha1 and
/// no conversion webhook. The schemas are upstream's v1beta1 ones, unchanged
/// from v0.5.6 to 1.0.3.
pub const AGENT_SANDBOX_CRDS: [(&str, &str); 4] = [
    (
        "agents.x-k8s.io_sandboxes.yaml",
        include_str!("../crds/agents.x-k8s.io_sandboxes.yaml"),
    ),
    (
        "extensions.agents.x-k8s.io_sandboxclaims.yaml",
        include_str!("../crds/extensions.agents.x-k8s.io_sandboxclaims.yaml"),
    ),
    (
        "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
        include_str!("../crds/extensions.agents.x-k8s.io_sandboxtemplates.yaml"),
    ),
    (
        "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
        include_str!("../crds/extensions.agents.x-k8s.io_sandboxwarmpools.yaml"),
    ),
];

/// How to start an emulator.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; must be a loopback address (`127.0.0.0/8` or `::1`).
    pub listen: SocketAddr,
    /// The nodes to create.
    pub nodes: NodeShape,
    /// Pre-apply the four agent-sandbox CRDs.
    pub with_agent_sandbox: bool,
    /// `--faults` text (empty: none).
    pub faults: String,
    /// How many events watches can replay before a resourceVersion is too old (410).
    pub history: usize,
    /// How often a watch with `allowWatchBookmarks` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// A fixed token (default: a random one).
    pub token: Option<String>,
    /// The images pods can run: image name (as a pod's `image` says it) → directory.
    pub images: ImageMap,
    /// Image names that stand for OCI references (`{ oci = "REF" }`). With
    /// isolated pods, any other image that names a reference (a registry, a
    /// repository path, a tag or a digest) is pulled as it is; a bare name that is
    /// mapped to nothing leaves its pod Pending in `ErrImagePull`.
    pub oci_images: OciMap,
    /// How pods run: isolated local sandboxes, or plain processes (scale tests).
    pub runtime: PodRuntime,
    /// What the first pull of an image on a node costs.
    pub pulls: PullModel,
    /// The local backend's state directory (default: a temporary one).
    pub state_dir: Option<PathBuf>,
    /// The controllers' time-based behaviour.
    pub tuning: Tuning,
    /// How long an event is kept after it last occurred (kube-apiserver's
    /// `--event-ttl`).
    pub event_ttl: Duration,
    /// What the token's user may not do (RBAC that forbids it): 403s and denied
    /// access reviews.
    pub deny: Vec<DenyRule>,
    /// The RuntimeClass handlers the nodes' runtime has (a kubelet's CRI
    /// runtime handlers): a pod whose class names another stays Pending.
    pub runtime_handlers: Vec<String>,
    /// Whether a pod its NetworkPolicies let reach the host shares this
    /// host's network namespace (`Host`), or every pod is offline.
    pub pod_network: PodNetwork,
}

/// What network the emulator's pods may reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PodNetwork {
    /// None: every pod has a network namespace of its own with only a
    /// loopback device, whatever its policies.
    #[default]
    Offline,
    /// This host's: a pod whose NetworkPolicies let it reach 127.0.0.1
    /// shares the host's network namespace (its loopback and whatever
    /// listens there included); the others are offline.
    Host,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            nodes: NodeShape {
                count: 3,
                cpu: "8".into(),
                memory: "32Gi".into(),
                pods: 110,
                disk: "100Gi".into(),
            },
            with_agent_sandbox: false,
            faults: String::new(),
            history: 10_000,
            bookmark_interval: Duration::from_secs(60),
            token: None,
            images: ImageMap::new(),
            oci_images: OciMap::new(),
            runtime: PodRuntime::default(),
            pulls: PullModel::default(),
            state_dir: None,
            tuning: Tuning::default(),
            event_ttl: Duration::from_secs(3600),
            deny: Vec::new(),
            runtime_handlers: vec!["runc".to_string()],
            pod_network: PodNetwork::default(),
        }
    }
}

/// A running emulator.
pub struct Emulator {
    url: String,
    token: String,
    ca_pem: String,
    state: Arc<state::State>,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    background: Vec<JoinHandle<()>>,
}

/// Apply a CRD YAML document through the API (as `kubectl create` would).
fn apply_crd(state: &state::State, file: &str, text: &str) -> anyhow::Result<()> {
    let object: serde_json::Value =
        serde_yaml_ng::from_str(text).with_context(|| format!("parsing embedded CRD {file}"))?;
    let resource = state
        .registry
        .find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .context("the CRD resource is built in")?;
    let target = api::Target {
        resource,
        version: "v1".into(),
        namespace: None,
        name: None,
        subresource: None,
    };
    let query = api::Query(vec![("fieldManager".into(), "sandfleet-devcluster".into())]);
    api::create(state, &target, &query, "sandfleet-devcluster", object)
        .map_err(|e| anyhow::anyhow!("applying embedded CRD {file}: {}", e.message))?;
    Ok(())
}

impl Emulator {
    /// Start serving: make the TLS identity, seed the store, bind, and run the garbage
    /// collector.
    ///
    /// # Errors
    /// When the address is not loopback, cannot be bound, or a fault spec is invalid.
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        anyhow::ensure!(
            config.listen.ip().is_loopback(),
            "--listen {}: the emulator listens on loopback only (127.0.0.0/8 or ::1)",
            config.listen
        );
        let faults = faults::Faults::parse(&config.faults)?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let addr = listener.local_addr()?;
        let identity = tls::Identity::generate(Some(addr.ip()))?;
        let tls_config = identity.server_config()?;
        let url = format!("https://{addr}");
        let token = config.token.clone().unwrap_or_else(|| {
            format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            )
        });
        let runtime = kubelet::runtime::Runtime::new(
            config.images.clone(),
            config.oci_images.clone(),
            config.runtime,
            config.pulls.clone(),
            config.state_dir.clone(),
            config.pod_network == PodNetwork::Host,
        )
        .await?;
        let state = Arc::new(state::State {
            store: store::Store::new(config.history),
            registry: registry::Registry::default(),
            token: token.clone(),
            server_address: addr.to_string(),
            bookmark_interval: config.bookmark_interval,
            faults,
            authz: authz::Authorizer::new(config.deny.clone()),
            runtime: Arc::new(runtime),
            connections: std::sync::atomic::AtomicUsize::new(0),
            executions: executions::Counters::default(),
            listed: listed::ListedObjects::default(),
        });
        seed::seed(&state.store, &config.nodes);
        if config.with_agent_sandbox {
            for (file, text) in AGENT_SANDBOX_CRDS {
                apply_crd(&state, file, text)?;
            }
        }
        let background = vec![
            tokio::spawn(gc::run(state.clone())),
            tokio::spawn(events::expire(state.clone(), config.event_ttl)),
            tokio::spawn(controllers::run(state.clone(), config.tuning.clone())),
            tokio::spawn(kubelet::run(
                state.clone(),
                state.runtime.clone(),
                config.runtime_handlers.clone(),
                config.pod_network,
            )),
        ];
        let (stop, stopped) = oneshot::channel::<()>();
        let router = server::router(state.clone());
        let server = tokio::spawn(server::serve(
            state.clone(),
            listener,
            tls_config,
            router,
            async move {
                let _ = stopped.await;
            },
        ));
        tracing::info!(%url, "kubernetes emulator serving");
        Ok(Self {
            url,
            token,
            ca_pem: identity.ca_pem,
            state,
            stop: Some(stop),
            server,
            background,
        })
    }

    /// Client connections the API server holds open now (each HTTP/1.1 or HTTP/2
    /// connection once, however many requests or watches it carries). Also served at
    /// `GET /debug/sandfleet/connections`.
    pub fn connections(&self) -> usize {
        self.state
            .connections
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// What pods/exec has started so far.
    pub fn executions(&self) -> Executions {
        self.state.executions.snapshot()
    }

    /// Objects of `resource` (`sandboxes.agents.x-k8s.io`, or `pods` for the
    /// core group) that list requests have returned so far, as
    /// kube-apiserver's `apiserver_storage_list_returned_objects_total`
    /// counts them.
    pub fn listed_objects(&self, resource: &str) -> u64 {
        self.state.listed.of(resource)
    }

    /// The most image pulls one node has made at once.
    pub fn peak_pulls(&self) -> usize {
        self.state.runtime.images().peak_pulls()
    }

    /// Image pulls every node has started so far (one per image a node did
    /// not have).
    pub fn pulls(&self) -> usize {
        self.state.runtime.images().pulls_started()
    }

    /// What `resource` (`sandboxes.agents.x-k8s.io`, or `pods` for the core
    /// group) has held: objects created, the most at once, and those now.
    pub fn tally(&self, resource: &str) -> Tally {
        let key = match resource.split_once('.') {
            Some((plural, group)) => format!("{group}/{plural}"),
            None => format!("/{resource}"),
        };
        self.state.store.tally(&key)
    }

    /// Pods running as local sandboxes now.
    pub fn running_pods(&self) -> usize {
        self.state.runtime.live()
    }

    /// The local backend's state directory, where pod sandboxes live (None without
    /// images).
    pub fn sandbox_state_dir(&self) -> Option<PathBuf> {
        self.state.runtime.state_dir()
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The CA certificate (PEM) that signed the server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The kubeconfig for this emulator.
    pub fn kubeconfig(&self) -> Kubeconfig {
        Kubeconfig {
            server: self.url.clone(),
            ca_pem: self.ca_pem.clone(),
            token: self.token.clone(),
        }
    }

    /// Write the kubeconfig (context `sandfleet-devcluster`) to `path`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        self.kubeconfig().write(path)
    }

    /// Stop serving, close every connection (watches included), stop the controllers
    /// and destroy every pod sandbox.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.server).await;
        for task in &self.background {
            task.abort();
        }
        self.state.runtime.teardown().await;
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.server.abort();
        for task in &self.background {
            task.abort();
        }
    }
}

/// `sandfleet devcluster k8s`: a wire-compatible Kubernetes API server with
/// agent-sandbox's resources.
#[derive(Debug, Clone, clap::Args)]
pub struct K8sArgs {
    /// Address to listen on (loopback only).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Allocatable CPU per node (a Kubernetes quantity).
    #[arg(long, default_value = "8")]
    pub node_cpu: String,
    /// Allocatable memory per node.
    #[arg(long, default_value = "32Gi")]
    pub node_memory: String,
    /// Allocatable pods per node.
    #[arg(long, default_value_t = 110)]
    pub node_pods: u32,
    /// Allocatable ephemeral storage per node.
    #[arg(long, default_value = "100Gi")]
    pub node_disk: String,
    /// An image pods can run: `REF=DIR`, the image name as a pod's `image` field says
    /// it and the directory it maps to (repeatable).
    #[arg(long = "image", value_name = "REF=DIR", value_parser = sandfleet_emulator_runtime::parse_image_arg)]
    pub images: Vec<(String, sandfleet_backend_local::ImageSource)>,
    /// Take the images from a fleet file's `[clusters.<name>.images]` tables:
    /// directories (relative paths resolved against the file) and names of OCI
    /// references (`{ oci = "REF" }`). Any other image that names a reference
    /// (`registry/repo:tag`) is pulled as it is, with isolated pods.
    #[arg(long, value_name = "FLEET.toml")]
    pub images_from: Option<PathBuf>,
    /// What every pull of an image onto a node costs, on top of its bytes and
    /// the real pull of an OCI image.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub pull_latency: Duration,
    /// Bytes a second a node pulls at, a quantity (`100Mi`): a pull then costs
    /// its image's size over it (default: bytes cost nothing).
    #[arg(long, value_name = "QUANTITY", value_parser = parse_bytes)]
    pub pull_bandwidth: Option<u64>,
    /// The size a directory image's pulls move: `NAME=QUANTITY`, e.g.
    /// `swe/django=2Gi` (repeatable; OCI images have their own).
    #[arg(long = "image-size", value_name = "NAME=QUANTITY", value_parser = parse_image_size)]
    pub image_sizes: Vec<(String, u64)>,
    /// Pulls a node makes at once, as a kubelet's `maxParallelImagePulls`
    /// (1: `serializeImagePulls`, a kubelet's default); default: any number.
    #[arg(long, value_name = "N")]
    pub node_pulls: Option<usize>,
    /// How pods run: isolated local sandboxes (namespaces) or plain processes (plain,
    /// for scale tests).
    #[arg(long, value_enum, default_value_t = PodRuntime::Namespaces)]
    pub runtime: PodRuntime,
    /// The local backend's state directory for pod sandboxes (default: a temporary one).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Injected faults: `latency=MS,conflict=P,watch-drop=S,gone-burst,flaky=P,throttle=QPS,evict=P`.
    #[arg(long, default_value = "")]
    pub faults: String,
    /// Forbid the user a verb on a resource, as RBAC would: `VERB:RESOURCE[.GROUP][/SUB]`
    /// (`*` for any), e.g. `create:sandboxclaims.extensions.agents.x-k8s.io` (repeatable).
    #[arg(long = "deny", value_name = "VERB:RESOURCE")]
    pub deny: Vec<DenyRule>,
    /// Write the kubeconfig here (default: a file in the temp directory).
    #[arg(long, value_name = "FILE")]
    pub write_kubeconfig: Option<PathBuf>,
    /// Pre-apply the four agent-sandbox CRDs (otherwise they are served once applied).
    #[arg(long)]
    pub with_agent_sandbox: bool,
    /// How long an event is kept after it last occurred, as kube-apiserver's
    /// `--event-ttl`.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub event_ttl: Duration,
    /// Changes a watch can replay before its resourceVersion is too old (410
    /// Gone), as kube-apiserver's watch cache. Each is a whole object kept
    /// in memory (about 20 KiB for a pod): 10,000 hold about 170 MiB at
    /// most; a smaller cache bounds a long session's memory, at the cost of
    /// more relists by watchers that fall behind.
    #[arg(long, default_value_t = 10_000)]
    pub watch_cache_size: usize,
    /// A RuntimeClass handler the nodes' runtime has, as a CRI runtime's
    /// configured handlers (repeatable): a pod whose RuntimeClass names
    /// another stays Pending with a `FailedCreatePodSandBox` event.
    #[arg(long = "runtime-handler", value_name = "NAME", default_value = "runc")]
    pub runtime_handlers: Vec<String>,
    /// What network pods may reach: `offline` (none; every pod has only a
    /// loopback device of its own), or `host`: a pod whose NetworkPolicies
    /// let it reach 127.0.0.1 shares this host's network namespace, loopback
    /// services included (only for tasks you trust). Policies are read when
    /// a pod starts.
    #[arg(long, value_enum, default_value_t = PodNetwork::Offline)]
    pub pod_network: PodNetwork,
}

impl K8sArgs {
    /// The emulator configuration these flags describe.
    ///
    /// # Errors
    /// When `--images-from` cannot be read or names no images.
    pub fn config(&self) -> anyhow::Result<Config> {
        let images = sandfleet_emulator_runtime::FleetImages::from_args(
            self.images_from.as_deref(),
            &self.images,
        )?;
        Ok(Config {
            listen: self.listen,
            nodes: NodeShape {
                count: self.nodes,
                cpu: self.node_cpu.clone(),
                memory: self.node_memory.clone(),
                pods: self.node_pods,
                disk: self.node_disk.clone(),
            },
            with_agent_sandbox: self.with_agent_sandbox,
            faults: self.faults.clone(),
            images: images.directories,
            oci_images: images.oci,
            runtime: self.runtime,
            pulls: PullModel {
                latency: self.pull_latency,
                bandwidth: self.pull_bandwidth,
                sizes: self.image_sizes.iter().cloned().collect(),
                per_node: self.node_pulls,
            },
            state_dir: self.state_dir.clone(),
            deny: self.deny.clone(),
            event_ttl: self.event_ttl,
            history: self.watch_cache_size,
            runtime_handlers: self.runtime_handlers.clone(),
            pod_network: self.pod_network,
            ..Config::default()
        })
    }
}

/// A byte quantity (`100Mi`, `2G`, `512`).
fn parse_bytes(text: &str) -> Result<u64, String> {
    kubelet::quantity::units(text)
        .and_then(|bytes| u64::try_from(bytes).ok())
        .ok_or_else(|| format!("`{text}` is not a quantity of bytes (like 100Mi or 2G)"))
}

/// `NAME=QUANTITY`.
fn parse_image_size(text: &str) -> Result<(String, u64), String> {
    let (name, size) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=QUANTITY"))?;
    Ok((name.to_string(), parse_bytes(size)?))
}

/// Run the emulator until `shutdown` resolves; prints the kubeconfig path once ready,
/// and destroys every pod sandbox it made before returning.
///
/// # Errors
/// When the emulator cannot start or the kubeconfig cannot be written.
pub async fn serve(args: K8sArgs, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let emulator = Emulator::start(args.config()?).await?;
    let path = match &args.write_kubeconfig {
        Some(p) => p.clone(),
        None => std::env::temp_dir()
            .join(format!("sandfleet-devcluster-{}", std::process::id()))
            .join("kubeconfig"),
    };
    if let Err(error) = emulator.write_kubeconfig(&path) {
        emulator.shutdown().await;
        return Err(error);
    }
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", path.display());
        let _ = stdout.flush();
    }
    eprintln!(
        "sandfleet devcluster k8s: serving {} (context {CONTEXT}); export KUBECONFIG={}",
        emulator.url(),
        path.display()
    );
    shutdown.await;
    emulator.shutdown().await;
    Ok(())
}
