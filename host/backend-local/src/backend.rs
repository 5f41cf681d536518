//! [`LocalBackend`]: the [`Backend`] trait over sandboxes on this machine.
//! One backend serves any number of runs; what it makes for a run lives in
//! that run's state directory and cgroups and is found by its labels.
//!
//! The operations are grouped by concern: `templates` (templates and
//! images), `warming` (warm pools), `claims` (claims, commands, release,
//! reap), `files` (file transfer) and `checks` (preflight, capacity).

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ExecGuarantees, ExecRequest, ExecResult,
    ImagePulls, ImageToPull, Images, Labels, OutputSink, Owned, PoolStatus, Preflight,
    PullProgress, Reaped, Recycling, RunId, SandboxHandle, SnapshotRef, Snapshots, TemplateRef,
    TemplateSpec, WarmPools,
};
use tokio::sync::{Notify, Semaphore};

use crate::checks::{check_searchable, usable_cgroups};
use crate::config::{IsolationMode, LocalConfig};
use crate::discard::Discards;
use crate::error::{IoContext, LocalError};
use crate::inventory::Live;
use crate::oci::Images as OciImages;
use crate::sandbox::{Sandbox, Site};
use crate::spawn::{SpawnRequest, Spawned};
use crate::state::{self, StateDir};
use crate::templates::Isolation;
use crate::{ids, machine};
use sandfleet_jail::protocol::Volume;

/// The embedded local backend: sandboxes on this machine, isolated with
/// Linux namespaces, cgroups, dropped capabilities and seccomp (or, with
/// `isolation = "none"`, not at all).
///
/// Everything it makes for a run lives in `<state>/runs/<run-id>/`.
/// Dropping the backend kills its sandboxes' processes but leaves their
/// directories for [`Backend::reap`] (or [`crate::reap_run`]).
pub struct LocalBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) config: LocalConfig,
    pub(crate) site: Site,
    /// What preflight warns about: no isolation, or limits that are not
    /// enforced.
    pub(crate) warnings: Vec<String>,
    pub(crate) max_sandboxes: u32,
    /// One permit per sandbox that may exist; every live sandbox holds one.
    pub(crate) slots: Arc<Semaphore>,
    /// Bounds how many sandboxes are being started at once, warm or cold,
    /// to the cores: a start's own bounds (the isolation probe's 10 s)
    /// then time its own work, never a queue of a thousand others (a
    /// thousand leases asked at once on 2 cores timed probes out).
    pub(crate) starts: Semaphore,
    /// Image directories by image name. Held across a build, so the same
    /// image is never built twice at once.
    pub(crate) images: tokio::sync::Mutex<HashMap<String, PathBuf>>,
    /// OCI images: the state directory's layer store.
    pub(crate) oci: OciImages,
    pub(crate) live: Mutex<Live>,
    /// Woken whenever a pool gains or loses a ready sandbox.
    pub(crate) pools_changed: Notify,
}

impl LocalBackend {
    /// A local cluster named `name`, for any number of runs. Cheap: whether
    /// sandboxes can be isolated here is found out by
    /// [`Backend::preflight`], which makes and probes one, and by the probe
    /// every sandbox passes before it is offered.
    ///
    /// # Errors
    ///
    /// [`sandfleet_core::ErrorKind::Invalid`] for an invalid configuration
    /// (a sandbox uid range that overlaps host users, say);
    /// [`sandfleet_core::ErrorKind::Unavailable`] when the state directory
    /// cannot be set up or used.
    pub fn new(name: &str, config: LocalConfig) -> Result<Self, BackendError> {
        use sandfleet_core::ErrorKind::{Invalid, Unavailable};
        let refuse = |kind, detail: String| BackendError::new(kind, name, detail);
        config.validate().map_err(|e| refuse(Invalid, e))?;
        let configured = config.state_dir().map_err(|e| refuse(Invalid, e))?;
        std::fs::create_dir_all(&configured)
            .context(|| format!("state_dir {}: cannot create it", configured.display()))
            .map_err(|e| refuse(Unavailable, e.to_string()))?;
        // Sandboxes are set up from canonical paths only.
        let root = configured
            .canonicalize()
            .context(|| format!("resolving state_dir {}", configured.display()))
            .map_err(|e| refuse(Unavailable, e.to_string()))?;
        let state = StateDir::new(root);
        let probe = state.root().join(crate::state::probe_name(".writable"));
        std::fs::write(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| {
                refuse(
                    Unavailable,
                    format!("state_dir {} is not writable: {e}", state.root().display()),
                )
            })?;
        let mut warnings = Vec::new();
        let ids = ids::sandbox_ids(config.sandbox_uid_base).map_err(|e| refuse(Invalid, e))?;
        let isolation = match config.isolation {
            IsolationMode::Namespaces => {
                check_searchable(state.root(), &ids).map_err(|e| refuse(Unavailable, e))?;
                Isolation::Namespaces
            }
            IsolationMode::None => {
                warnings.push(
                    "isolation = \"none\": sandboxes are plain directories and their commands run \
                     unisolated on the host, with only the workdir and /tmp mapped into the sandbox"
                        .to_string(),
                );
                Isolation::Plain
            }
        };
        let cgroup_parent = PathBuf::from(&config.cgroup_parent);
        let cgroups = match isolation {
            Isolation::Namespaces => match usable_cgroups(&cgroup_parent) {
                Ok(cgroups) => Some(cgroups),
                Err(why) => {
                    warnings.push(format!(
                        "cgroup limits are not enforced ({why}): a sandbox's memory, cpu and \
                         processes are unbounded; run as root, or set cgroup_parent to a cgroup \
                         delegated to this user"
                    ));
                    None
                }
            },
            Isolation::Plain => None,
        };
        let ownership = ids::ownership_of(&ids);
        let oci = OciImages::new(state.root(), ownership, config.registries.clone());
        let cores = machine::cores();
        let max_sandboxes = config.max_sandboxes(cores);
        let hidden = std::iter::once(state.root())
            .chain(config.hidden_paths.iter().map(PathBuf::as_path))
            .map(|path| path.display().to_string())
            .collect();
        Ok(LocalBackend {
            inner: Arc::new(Inner {
                name: name.to_string(),
                site: Site {
                    state,
                    isolation,
                    next_id: AtomicU64::new(1),
                    ids,
                    host_root_uid: ids::host_root_uid(),
                    etc: config.etc_entries(),
                    cgroups,
                    cgroup_parent,
                    hidden,
                    discards: Discards::default(),
                },
                config,
                warnings,
                max_sandboxes,
                slots: Arc::new(Semaphore::new(max_sandboxes as usize)),
                starts: Semaphore::new(cores as usize),
                images: tokio::sync::Mutex::new(HashMap::new()),
                oci,
                live: Mutex::new(Live::default()),
                pools_changed: Notify::new(),
            }),
        })
    }

    /// The state directory (canonical).
    pub fn state_dir(&self) -> &Path {
        self.inner.site.state.root()
    }

    /// Starts `request` in a claimed sandbox and hands it back running, its
    /// stdin open for writing and its output to read as it comes: the
    /// streaming counterpart of [`Backend::exec`], entered and confined the
    /// same way and watched against the same disk limit, keeping nothing.
    ///
    /// # Errors
    ///
    /// [`sandfleet_core::ErrorKind::NotFound`] for a sandbox that is not
    /// claimed here, [`sandfleet_core::ErrorKind::SandboxLost`] when it
    /// has ended, [`sandfleet_core::ErrorKind::Invalid`] for an empty argv
    /// or a bad environment name.
    pub async fn spawn(
        &self,
        sandbox: &SandboxHandle,
        request: &SpawnRequest,
    ) -> Result<Spawned, BackendError> {
        self.inner
            .spawn(sandbox, request)
            .await
            .map_err(|e| self.error(e))
    }

    /// A sandbox of `template`, as [`Backend::claim`] makes one, with
    /// `volumes` (host directories) mounted into it every time it starts:
    /// made new, never taken warm. Running as root, each volume's directory
    /// is given to the sandbox's root.
    ///
    /// # Errors
    ///
    /// As [`Backend::claim`]; [`sandfleet_core::ErrorKind::Invalid`] for a
    /// volume whose directory is missing or whose mount point is not an
    /// absolute path, or for volumes without namespaces.
    pub async fn claim_with_volumes(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        volumes: Vec<Volume>,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        self.inner
            .claim_with(template, labels, volumes, deadline)
            .await
            .map_err(|e| self.error(e))
    }

    /// Whether a command of `program` with `env` and `workdir` would find
    /// it in `sandbox` (on its `PATH`, beneath its root), without running
    /// anything there: how a container runtime refuses to start a
    /// container whose program is missing.
    ///
    /// # Errors
    ///
    /// [`sandfleet_core::ErrorKind::NotFound`] for a sandbox not claimed
    /// here, [`sandfleet_core::ErrorKind::SandboxLost`] when it has ended.
    pub async fn finds_program(
        &self,
        sandbox: &SandboxHandle,
        program: &str,
        env: &[(String, String)],
        workdir: Option<&str>,
    ) -> Result<bool, BackendError> {
        self.inner
            .finds_program(sandbox, program, env, workdir)
            .await
            .map_err(|e| self.error(e))
    }

    fn error(&self, error: LocalError) -> BackendError {
        error.into_backend(&self.inner.name)
    }

    /// The OCI reference template image `name` stands for here: none for
    /// a directory image of the config or without namespaces; the mapped
    /// reference of an `{ oci = "REF" }` image; else `name` itself when it
    /// names a reference ([`sandfleet_core::names_a_reference`]).
    pub fn oci_reference<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        self.inner.oci_reference(name)
    }

    /// Pulls OCI `reference` into the state directory's layer store, the
    /// one templates of it are made from: with `always`, the registry is
    /// asked even when the store has the image (a moved tag is followed;
    /// layers already stored are not fetched again); otherwise the store's
    /// image is used when it has one. Returns the image as stored (its
    /// manifest digest, layers and run config), not pinned.
    ///
    /// # Errors
    ///
    /// [`LocalError::Image`] naming the reference and what failed (the
    /// registry and its HTTP status, for a failed request).
    pub async fn pull_oci(
        &self,
        reference: &str,
        always: bool,
    ) -> Result<sandfleet_images::Image, LocalError> {
        let policy = if always {
            sandfleet_images::PullPolicy::Always
        } else {
            sandfleet_images::PullPolicy::IfNotPresent
        };
        self.inner.oci.pull_as(reference, policy).await
    }
}

/// How long a warm sandbox may take to become ready.
pub(crate) const WARM_CREATE_TIMEOUT: Duration = Duration::from_secs(60);

impl Inner {
    pub(crate) fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().expect("backend state lock poisoned")
    }

    /// Fails for a handle of another cluster.
    fn check_cluster(&self, handle: &SandboxHandle) -> Result<(), LocalError> {
        if handle.cluster == self.name {
            Ok(())
        } else {
            Err(LocalError::NotFound(format!(
                "sandbox {} (it belongs to cluster `{}`)",
                handle.id, handle.cluster
            )))
        }
    }

    /// The claimed sandbox `handle` names.
    pub(crate) fn claimed(&self, handle: &SandboxHandle) -> Result<Arc<Sandbox>, LocalError> {
        self.check_cluster(handle)?;
        self.live()
            .claimed
            .get(&handle.id)
            .map(|held| Arc::clone(&held.sandbox))
            .ok_or_else(|| LocalError::NotFound(format!("sandbox {}", handle.id)))
    }

    /// The run `labels` name; it must be the template's.
    pub(crate) fn run_of(labels: &Labels, template: &TemplateRef) -> Result<RunId, LocalError> {
        match labels.get(sandfleet_core::LABEL_RUN_ID) {
            Some(run) if run == template.run_id.as_str() => Ok(template.run_id.clone()),
            Some(run) => Err(LocalError::Rejected(format!(
                "labels name run {run}, but template `{}` belongs to run {}",
                template.name, template.run_id
            ))),
            None => Err(LocalError::Rejected(format!(
                "labels for template `{}` carry no {}",
                template.name,
                sandfleet_core::LABEL_RUN_ID
            ))),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            lease_ttl: None,
            exec: ExecGuarantees {
                argv: true,
                ordered_merge: true,
                kills_process_group: true,
            },
            // A reference can be pulled; without namespaces there is no
            // root of its own to run one in.
            images: match self.site.isolation {
                Isolation::Namespaces => Images::NamedOrReference(
                    self.config
                        .images
                        .keys()
                        .chain(self.config.oci_images.keys())
                        .cloned()
                        .collect(),
                ),
                Isolation::Plain => {
                    Images::Named(self.config.images.keys().cloned().collect::<BTreeSet<_>>())
                }
            },
        }
    }
}

#[async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn pools(&self) -> Option<&dyn WarmPools> {
        Some(self)
    }

    /// Isolated sandboxes restart on a fresh writable layer; plain ones
    /// have their processes stopped.
    fn recycling(&self) -> Option<&dyn Recycling> {
        Some(self)
    }

    fn pulls(&self) -> Option<&dyn ImagePulls> {
        Some(self)
    }

    /// Isolated sandboxes only: a plain one's writes are not in a layer of
    /// their own.
    fn snapshots(&self) -> Option<&dyn Snapshots> {
        (self.inner.site.isolation == Isolation::Namespaces).then_some(self as &dyn Snapshots)
    }

    async fn preflight(&self) -> Preflight {
        self.inner.preflight().await
    }

    async fn capacity(&self) -> Result<Capacity, BackendError> {
        self.inner.capacity().map_err(|e| self.error(e))
    }

    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError> {
        self.inner
            .ensure_template(spec)
            .await
            .map_err(|e| self.error(e))
    }

    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        self.inner
            .claim(template, labels, deadline)
            .await
            .map_err(|e| self.error(e))
    }

    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        self.inner
            .exec(sandbox, request, output)
            .await
            .map_err(|e| self.error(e))
    }

    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError> {
        self.inner
            .put_file(sandbox, path, contents, mode)
            .await
            .map_err(|e| self.error(e))
    }

    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        self.inner
            .get_file(sandbox, path)
            .await
            .map_err(|e| self.error(e))
    }

    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.release(sandbox).await.map_err(|e| self.error(e))
    }

    /// Checks that the sandbox exists. Lifetimes are not enforced
    /// ([`Capabilities::lease_ttl`] is `None`): a claimed sandbox lives until
    /// it is released or its run is reaped.
    async fn renew(&self, sandbox: &SandboxHandle, _ttl: Duration) -> Result<(), BackendError> {
        self.inner
            .claimed(sandbox)
            .map(drop)
            .map_err(|e| self.error(e))
    }

    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError> {
        state::list_run(self.inner.site.state.root(), run_id)
            .await
            .map_err(|e| self.error(e))
    }

    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError> {
        self.inner.reap(run_id).await.map_err(|e| self.error(e))
    }
}

#[async_trait]
impl WarmPools for LocalBackend {
    async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError> {
        self.inner
            .warm(template, replicas, labels)
            .await
            .map_err(|e| self.error(e))
    }

    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError> {
        self.inner.unwarm(template).await.map_err(|e| self.error(e))
    }

    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError> {
        self.inner.pool_status(template).map_err(|e| self.error(e))
    }

    async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        deadline: Instant,
    ) -> Result<PoolStatus, BackendError> {
        self.inner
            .wait_pool_ready(template, at_least, deadline)
            .await
            .map_err(|e| self.error(e))
    }
}

#[async_trait]
impl Recycling for LocalBackend {
    async fn scrub(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.scrub(sandbox).await.map_err(|e| self.error(e))
    }
}

#[async_trait]
impl ImagePulls for LocalBackend {
    async fn images_to_pull(&self, images: &[String]) -> Vec<ImageToPull> {
        self.inner.images_to_pull(images).await
    }

    /// Layers go to the host's shared store, which no run owns: `labels`
    /// have nothing to mark.
    async fn pull_image(
        &self,
        image: &str,
        _labels: &Labels,
        progress: PullProgress<'_>,
    ) -> Result<(), BackendError> {
        self.inner
            .pull_image(image, progress)
            .await
            .map_err(|e| self.error(e))
    }
}

#[async_trait]
impl Snapshots for LocalBackend {
    fn restores_in_place(&self) -> bool {
        true
    }

    async fn snapshot(
        &self,
        sandbox: &SandboxHandle,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SnapshotRef, BackendError> {
        self.inner
            .snapshot(sandbox, labels, deadline)
            .await
            .map_err(|e| self.error(e))
    }

    async fn fork(
        &self,
        snapshot: &SnapshotRef,
        count: u32,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<Vec<SandboxHandle>, BackendError> {
        self.inner
            .fork(snapshot, count, labels, deadline)
            .await
            .map_err(|e| self.error(e))
    }

    async fn restore(
        &self,
        sandbox: &SandboxHandle,
        snapshot: &SnapshotRef,
        deadline: Instant,
    ) -> Result<(), BackendError> {
        self.inner
            .restore(sandbox, snapshot, deadline)
            .await
            .map_err(|e| self.error(e))
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<(), BackendError> {
        self.inner
            .delete_snapshot(snapshot)
            .await
            .map_err(|e| self.error(e))
    }

    async fn list_snapshots(&self, run_id: &RunId) -> Result<Vec<SnapshotRef>, BackendError> {
        self.inner
            .list_snapshots(run_id)
            .await
            .map_err(|e| self.error(e))
    }
}
