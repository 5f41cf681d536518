//! The contract between the engine and a sandbox backend.
//!
//! A backend is built once per configured cluster and serves any number of
//! runs at once: everything it creates carries the labels it is given (the
//! run id among them), and `list_owned` / `reap` are scoped to one run id.
//! What differs between backends — whether claimed sandboxes expire, what
//! exec guarantees, which images it can make, and whether it has warm
//! pools, recycling, image pulls or snapshots at all — is declared in
//! [`Capabilities`] and in the optional parts a backend has or has not
//! ([`WarmPools`], [`Recycling`], [`ImagePulls`], [`Snapshots`]), which the engine reads
//! instead of asking which kind of backend it has. Every wait is bounded.
//! A backend never retries a mutating call itself; its errors
//! ([`BackendError`]) say what kind of failure happened, so the engine can
//! retry what is safe.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::error::BackendError;
use crate::exec::{ExecRequest, ExecResult, OutputSink};
use crate::run::{Labels, RunId};
use crate::sandbox::{SandboxHandle, TemplateRef, TemplateSpec};
use crate::snapshot::Snapshots;

/// What preflight found: hard failures stop a run before anything is created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preflight {
    /// Problems that make the backend unusable.
    pub failures: Vec<String>,
    /// Problems worth knowing about.
    pub warnings: Vec<String>,
    /// What the backend checked and enforces (isolation, limits), for the
    /// operator's record.
    pub notes: Vec<String>,
}

/// What a backend can hold; `None` where it cannot tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Nodes (machines) sandboxes can run on.
    pub nodes: Option<u32>,
    /// Allocatable CPU in millicores.
    pub cpu_milli: Option<u64>,
    /// Allocatable memory in MiB.
    pub memory_mib: Option<u64>,
    /// Ephemeral disk per node in MiB.
    pub disk_mib_per_node: Option<u64>,
    /// Sandboxes that can exist at once.
    pub sandbox_slots: Option<u32>,
    /// A scheduler reserves each sandbox's requests on a node (Kubernetes):
    /// sandboxes beyond what the nodes' allocatable holds wait unscheduled.
    /// Where false, sandboxes share the machine and their limits only cap
    /// them (the local backend).
    pub reserves_requests: bool,
}

/// What a backend's exec promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecGuarantees {
    /// Commands are argv lists, run without a shell (else shell strings).
    pub argv: bool,
    /// Merged stderr keeps the order in which the command wrote.
    pub ordered_merge: bool,
    /// A timeout kills everything the command started, not only the command.
    pub kills_process_group: bool,
}

/// Which images a backend can make sandboxes of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Images {
    /// Only these names (a local image map).
    Named(BTreeSet<String>),
    /// Any container image reference the cluster can pull.
    AnyReference,
    /// These names, and any reference that names a registry, a repository
    /// path, a tag or a digest ([`names_a_reference`]): a cluster that
    /// pulls but takes a bare word for one of its own names.
    NamedOrReference(BTreeSet<String>),
}

/// Whether `image` names a registry, a repository path, a tag or a digest
/// (`python:3.11`, `library/python`, `ghcr.io/org/img@sha256:…`). A bare
/// word (`calc`) is far likelier a mistyped image name than Docker Hub's
/// `library/calc`, so a cluster with names of its own does not pull it.
pub fn names_a_reference(image: &str) -> bool {
    image.contains(['/', ':', '@'])
}

impl Images {
    /// Whether `image` can be made.
    pub fn can_make(&self, image: &str) -> bool {
        match self {
            Images::Named(names) => names.contains(image),
            Images::AnyReference => !image.is_empty(),
            Images::NamedOrReference(names) => names.contains(image) || names_a_reference(image),
        }
    }
}

/// What a backend does, declared so the engine never branches on its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// When set, a claimed sandbox expires this long after its last renewal
    /// (or its claim): the engine renews a lease on every claimed sandbox at
    /// a third of it.
    pub lease_ttl: Option<Duration>,
    /// What exec promises.
    pub exec: ExecGuarantees,
    /// Which images it can make.
    pub images: Images,
}

/// A warm pool's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Replicas asked for.
    pub desired: u32,
    /// Warm sandboxes ready to be claimed.
    pub ready: u32,
}

/// What a run owns on a backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    /// Templates.
    pub templates: Vec<String>,
    /// Warm pools.
    pub pools: Vec<String>,
    /// Sandboxes, warm or claimed.
    pub sandboxes: Vec<String>,
    /// Snapshots ([`Snapshots`]).
    pub snapshots: Vec<String>,
}

/// What a reap removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Templates removed.
    pub templates: usize,
    /// Warm pools removed.
    pub pools: usize,
    /// Sandboxes removed.
    pub sandboxes: usize,
    /// Processes killed (backends that run processes).
    pub processes: usize,
    /// Snapshots removed.
    pub snapshots: usize,
}

impl std::ops::AddAssign for Reaped {
    fn add_assign(&mut self, other: Reaped) {
        self.templates += other.templates;
        self.pools += other.pools;
        self.sandboxes += other.sandboxes;
        self.processes += other.processes;
        self.snapshots += other.snapshots;
    }
}

/// An image a backend must fetch before it can make sandboxes of it.
#[derive(Debug)]
pub struct ImageToPull {
    /// The image, as the engine named it.
    pub image: String,
    /// The bytes its pull would download (compressed layers the backend
    /// lacks; layers it has cost nothing) where the backend can tell
    /// (`None` where a cluster's nodes fetch it), or why it cannot be
    /// pulled (the error names the reference, the registry and what it
    /// said).
    pub bytes: Result<Option<u64>, BackendError>,
}

/// What a backend reports while it pulls an image, for a display like
/// `docker pull`'s. Layers are named by their blob digest (`sha256:…`);
/// events of several layers may interleave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullEvent {
    /// The image resolved to these layers (digest, compressed bytes),
    /// lowest first.
    Resolved {
        /// The layers.
        layers: Vec<(String, u64)>,
    },
    /// The layer is there already.
    LayerExists {
        /// The layer's digest.
        layer: String,
    },
    /// Another pull is fetching the layer.
    LayerWaiting {
        /// The layer's digest.
        layer: String,
    },
    /// Bytes of the layer downloaded so far.
    LayerProgress {
        /// The layer's digest.
        layer: String,
        /// Bytes so far.
        done: u64,
        /// Bytes in all.
        total: u64,
    },
    /// The layer's fetch failed and will be tried again.
    LayerRetrying {
        /// The layer's digest.
        layer: String,
        /// Why.
        reason: String,
    },
    /// The layer is fetched, unpacked and verified.
    LayerDone {
        /// The layer's digest.
        layer: String,
    },
}

/// Hears a pull's [`PullEvent`]s.
pub type PullProgress<'a> = &'a (dyn Fn(PullEvent) + Send + Sync);

/// A sandbox backend: one configured cluster, serving any number of runs.
///
/// Everything a backend creates carries the labels it is given (which hold
/// the run id, [`crate::LABEL_RUN_ID`]). Every wait is bounded by its
/// deadline. Mutating calls are never retried by the backend; `release`
/// and `reap` are idempotent.
///
/// The parts only some backends have — warm pools the client sizes,
/// recycling of used sandboxes, images fetched ahead, snapshots — are
/// traits of their own that a backend hands out from [`Backend::pools`],
/// [`Backend::recycling`], [`Backend::pulls`] and [`Backend::snapshots`],
/// or does not: a backend
/// without one answers `None` rather than a success that did nothing.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The cluster's configured name.
    fn name(&self) -> &str;

    /// What the backend does (cheap; no I/O).
    fn capabilities(&self) -> Capabilities;

    /// Its warm pools, where the client sizes them. Without them every
    /// claim makes a sandbox (a server that keeps pools of its own fills
    /// claims from them unasked).
    fn pools(&self) -> Option<&dyn WarmPools> {
        None
    }

    /// Its recycling of used sandboxes. Without it a used sandbox is never
    /// reused, so the engine takes no reset baseline of it either.
    fn recycling(&self) -> Option<&dyn Recycling> {
        None
    }

    /// Its fetching of images ahead of their first sandbox. Without it the
    /// cluster pulls images by itself (kubelet, the OpenSandbox server) and
    /// nothing is pulled ahead through sandfleet.
    fn pulls(&self) -> Option<&dyn ImagePulls> {
        None
    }

    /// Its snapshots of sandboxes, forks from them and restores to them.
    /// Without them every sandbox starts from its image, and a used one is
    /// reset (where it is recycled) by its reset check.
    fn snapshots(&self) -> Option<&dyn Snapshots> {
        None
    }

    /// Checks that the backend can be used, before anything is created.
    async fn preflight(&self) -> Preflight;

    /// What the backend can hold now.
    async fn capacity(&self) -> Result<Capacity, BackendError>;

    /// Creates the template if it does not exist; idempotent.
    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError>;

    /// Claims a sandbox of `template` carrying `labels`: a warm one if there
    /// is one, else a new one. Returns only when the sandbox can run
    /// commands, or fails at `deadline`.
    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError>;

    /// Runs a command to completion or timeout. When `output` is given,
    /// output is also sent there as it is produced.
    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError>;

    /// Writes a file into the sandbox, creating parent directories.
    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError>;

    /// Reads a file from the sandbox.
    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError>;

    /// Destroys the sandbox and everything running in it; idempotent.
    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError>;

    /// Extends the sandbox's life to `ttl` from now (where
    /// [`Capabilities::lease_ttl`] says sandboxes expire).
    async fn renew(&self, sandbox: &SandboxHandle, ttl: Duration) -> Result<(), BackendError>;

    /// What `run_id` owns on this backend, including what a crashed run left.
    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError>;

    /// Removes everything `run_id` owns, its snapshots among it;
    /// idempotent.
    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError>;
}

/// Warm pools whose size the client sets and the backend keeps filled.
#[async_trait]
pub trait WarmPools: Send + Sync {
    /// Sets the warm pool of `template` to `replicas` sandboxes, each
    /// carrying `labels`. Returns once the request is accepted;
    /// [`WarmPools::wait_pool_ready`] tells when they are ready.
    async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError>;

    /// Removes the warm pool of `template` and its unclaimed sandboxes;
    /// idempotent.
    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError>;

    /// The warm pool's state.
    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError>;

    /// Waits until the pool of `template` has at least `at_least` ready
    /// sandboxes (a watch where the backend has one), and returns its state;
    /// a [`crate::ErrorKind::Timeout`] at `deadline`.
    async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        deadline: Instant,
    ) -> Result<PoolStatus, BackendError>;
}

/// Putting a used sandbox back into service for another task.
#[async_trait]
pub trait Recycling: Send + Sync {
    /// Makes a claimed sandbox fit to serve another task, before its reset
    /// check runs: stops every process in it but its init, found from
    /// outside the sandbox (nothing a task did can hide one), and checks
    /// that nothing a reset check cannot see has changed (its mounts). An
    /// error means the sandbox must not be reused.
    async fn scrub(&self, sandbox: &SandboxHandle) -> Result<(), BackendError>;
}

/// Images fetched ahead, so that a run's first sandboxes wait for no pull:
/// into the backend's own store (the local backend), or onto every node a
/// cluster would run them on (a Kubernetes cluster asked to pre-pull).
#[async_trait]
pub trait ImagePulls: Send + Sync {
    /// Of `images` (ones [`Capabilities::images`] says it can make), those
    /// the backend would fetch before making sandboxes of them, with the
    /// bytes each would download where it can tell. Asks registries for
    /// manifests only.
    async fn images_to_pull(&self, images: &[String]) -> Vec<ImageToPull>;

    /// Fetches `image`, one [`ImagePulls::images_to_pull`] listed, so that
    /// templates and sandboxes of it need no pull; what the fetch creates
    /// carries `labels` (the run's, so that its reap removes a pull it was
    /// killed in the middle of), and `progress` hears each layer's
    /// progress where the backend sees them. Idempotent: an image already
    /// there is not fetched again.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] naming the image's reference, its registry and
    /// what failed (the HTTP status, for a registry's answer).
    async fn pull_image(
        &self,
        image: &str,
        labels: &Labels,
        progress: PullProgress<'_>,
    ) -> Result<(), BackendError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_images_are_the_only_ones_a_map_makes() {
        let named = Images::Named(BTreeSet::from(["calc".to_string()]));
        assert!(named.can_make("calc"));
        assert!(!named.can_make("docker.io/library/python:3.11"));
        assert!(Images::AnyReference.can_make("docker.io/library/python:3.11"));
        assert!(!Images::AnyReference.can_make(""));
        let local = Images::NamedOrReference(BTreeSet::from(["calc".to_owned()]));
        assert!(local.can_make("calc"));
        assert!(local.can_make("python:3.11"));
        assert!(local.can_make("library/python"));
        assert!(local.can_make("python@sha256:00"));
        assert!(!local.can_make("nowhere"));
    }
}
