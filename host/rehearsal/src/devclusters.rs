//! The four devclusters a rehearsal runs on, of different sizes, each a
//! Kubernetes API server with agent-sandbox on loopback whose nodes have
//! allocatable resources, an image cache and a pull-latency model.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sandfleet_emulator_k8s::{
    CONTEXT, Config, Emulator, ImageMap, NodeShape, PodRuntime, PullModel,
};

/// One devcluster's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The cluster's name in the fleet file.
    pub name: &'static str,
    /// Its nodes.
    pub nodes: usize,
    /// Allocatable CPU per node.
    pub cpu: &'static str,
    /// Allocatable memory per node.
    pub memory: &'static str,
    /// Allocatable pods per node.
    pub pods: u32,
}

/// The four shapes, largest first: 15 nodes of three sizes of cluster.
pub const SHAPES: [Shape; 4] = [
    Shape {
        name: "fleet-a",
        nodes: 8,
        cpu: "16",
        memory: "64Gi",
        pods: 110,
    },
    Shape {
        name: "fleet-b",
        nodes: 4,
        cpu: "8",
        memory: "32Gi",
        pods: 110,
    },
    Shape {
        name: "fleet-c",
        nodes: 2,
        cpu: "8",
        memory: "32Gi",
        pods: 110,
    },
    Shape {
        name: "fleet-d",
        nodes: 1,
        cpu: "4",
        memory: "16Gi",
        pods: 110,
    },
];

/// Pulls a node makes at once (the kubelet's `maxParallelImagePulls`).
pub const PULLS_PER_NODE: usize = 2;

/// What the clusters run.
pub(crate) struct Setup {
    /// Image name → directory.
    pub(crate) images: ImageMap,
    /// What pulls cost.
    pub(crate) pulls: PullModel,
    /// How pods run.
    pub(crate) runtime: PodRuntime,
}

/// A running devcluster and its kubeconfig.
pub(crate) struct Devcluster {
    /// Its shape.
    pub(crate) shape: Shape,
    /// The emulator.
    pub(crate) emulator: Emulator,
    /// Its kubeconfig (context [`CONTEXT`]).
    pub(crate) kubeconfig: PathBuf,
}

/// Starts the first `count` shapes, writing their kubeconfigs into `dir`.
///
/// # Errors
/// When an emulator cannot start or its kubeconfig cannot be written.
pub(crate) async fn start(
    count: usize,
    setup: &Setup,
    dir: &Path,
) -> anyhow::Result<Vec<Devcluster>> {
    let mut clusters = Vec::with_capacity(count);
    for shape in SHAPES.iter().take(count) {
        let emulator = Emulator::start(Config {
            nodes: NodeShape {
                count: shape.nodes,
                cpu: shape.cpu.into(),
                memory: shape.memory.into(),
                pods: shape.pods,
                disk: "1Ti".into(),
            },
            with_agent_sandbox: true,
            images: setup.images.clone(),
            runtime: setup.runtime,
            pulls: setup.pulls.clone(),
            ..Config::default()
        })
        .await
        .with_context(|| format!("starting devcluster {}", shape.name))?;
        let kubeconfig = dir.join(format!("{}.kubeconfig", shape.name));
        emulator.write_kubeconfig(&kubeconfig)?;
        clusters.push(Devcluster {
            shape: *shape,
            emulator,
            kubeconfig,
        });
    }
    Ok(clusters)
}

/// What a run may leave nowhere: every kind it creates.
const RUN_OBJECTS: &str =
    "sandboxclaims,sandboxes,sandboxwarmpools,sandboxtemplates,pods,daemonsets";

/// How long a cluster gets to finish deleting what a run released.
const SETTLE: Duration = Duration::from_secs(60);

impl Devcluster {
    /// The objects left in the cluster, as `kubectl get -A -o name` lists
    /// them once deletions have settled (or [`SETTLE`] has passed).
    ///
    /// # Errors
    /// When `kubectl` cannot run or fails.
    pub(crate) async fn left_over(&self) -> anyhow::Result<Vec<String>> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let output = tokio::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(["--context", CONTEXT, "get", RUN_OBJECTS, "-A", "-o", "name"])
                .output()
                .await
                .context("running kubectl (the rehearsal counts what is left with it)")?;
            anyhow::ensure!(
                output.status.success(),
                "kubectl get against {}: {}",
                self.shape.name,
                String::from_utf8_lossy(&output.stderr).trim()
            );
            let left: Vec<String> = String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(|line| format!("{}: {line}", self.shape.name))
                .collect();
            if left.is_empty() || Instant::now() >= deadline {
                return Ok(left);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
