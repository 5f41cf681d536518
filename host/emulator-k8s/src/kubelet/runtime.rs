//! The container runtime behind the kubelet: every running pod is one local sandbox
//! (the local backend's machinery, isolated or `plain`), made from the directory its
//! image name maps to, or (isolated) from the OCI image it names or maps to, pulled
//! from its registry into the local backend's layer store; a per-node image cache
//! (nodes start empty and share the one store) that makes the first pull of an image
//! on a node pay the pull model's cost on top of the real pull (see `pull_model`);
//! commands run in a pod's
//! sandbox; and each container's log, kept while its pod exists.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use sandfleet_backend_local::{LocalError, SpawnRequest, Spawned, Volume};
use sandfleet_core::{Backend, SandboxHandle, TemplateRef};
use sandfleet_emulator_runtime::{
    CreateGate, FleetImages, ImageMap, OciMap, Resolved, SandboxHost, Shape,
};
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use super::container_log::ContainerLog;
use super::pull_model::{NodePulls, PullModel};
use super::volumes::{self, PodVolumes};
use crate::PodRuntime;

/// How long a pod's main command may run: effectively forever, but bounded.
const MAIN_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long output is still read after a main command has exited. What it wrote is in
/// its pipe already and reads at once; only processes it left behind hold the pipe
/// open, and they go with the sandbox (a container's processes die with its first).
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Bytes read from an output pipe at once.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// The exit code a container runtime reports: the process's, or 128 + the signal that
/// ended it.
pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}

/// One pod's sandbox.
pub(crate) struct PodSandbox {
    /// The local backend's handle.
    pub(crate) handle: SandboxHandle,
    /// The first container's `env` values, given to every command.
    pub(crate) env: Vec<(String, String)>,
    /// The first container's `workingDir`.
    pub(crate) workdir: Option<String>,
}

impl PodSandbox {
    /// The container's environment followed by `own` (later values win).
    fn env_with(&self, own: Vec<(String, String)>) -> Vec<(String, String)> {
        self.env.iter().cloned().chain(own).collect()
    }
}

/// Why an image cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PullError {
    /// No directory or OCI image is mapped to this image name, and it names no
    /// reference.
    NotFound,
    /// An OCI image, but pods run as plain processes.
    NeedsIsolation,
    /// `imagePullPolicy: Never` and the node does not have it.
    NeverPull,
    /// The pull from the registry failed: `not_found` when the registry lacks
    /// the reference; `message` names the reference, the registry and what
    /// failed.
    Registry {
        /// The registry has no such repository, tag or manifest.
        not_found: bool,
        /// The failure, one line.
        message: String,
    },
}

/// What a pull got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pulled {
    /// How long it took, waiting for a pull of the same image included.
    pub(crate) took: Duration,
    /// Of that, the wait for one of the node's pull slots.
    pub(crate) waited: Duration,
    /// The image's size in bytes, when it is an OCI image.
    pub(crate) size: Option<u64>,
}

/// What the store says of a pulled OCI image.
#[derive(Debug, Clone, Default)]
struct OciFacts {
    /// `registry/repository@sha256:…`, the container status's `imageID`.
    id: String,
    /// Its layers' and config's bytes.
    size: u64,
    /// The config's `Entrypoint`.
    entrypoint: Vec<String>,
    /// The config's `Cmd`.
    cmd: Vec<String>,
}

/// A node and an image name.
type NodeImage = (String, String);

/// Runs pods as local sandboxes.
pub(crate) struct Runtime {
    host: Option<SandboxHost>,
    /// Why there is no backend.
    no_backend: String,
    plain: bool,
    pulls: NodePulls,
    /// Image name → what its last pull found (OCI images).
    facts: Mutex<HashMap<String, OciFacts>>,
    /// (node, image) → the pull, done once.
    pulled: Mutex<HashMap<NodeImage, Arc<OnceCell<()>>>>,
    sandboxes: Mutex<HashMap<String, Arc<PodSandbox>>>,
    gate: CreateGate,
    /// Pod uid → its containers' logs (by container name), from its start until it is
    /// deleted.
    logs: Mutex<HashMap<String, BTreeMap<String, Arc<ContainerLog>>>>,
    /// Where pods' `emptyDir` volumes live (removed with the runtime), when pods
    /// run in namespaces.
    volumes: Option<VolumesRoot>,
}

/// The directory of every pod's volumes: searchable by the sandboxes' ids, which
/// open their volumes by path, and listable by no one else.
struct VolumesRoot {
    dir: tempfile::TempDir,
    /// `dir`'s canonical path, as the local backend wants volume sources.
    path: PathBuf,
}

impl VolumesRoot {
    fn make() -> anyhow::Result<VolumesRoot> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("sandfleet-k8s-volumes-")
            .tempdir()
            .context("making the directory of pods' volumes")?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        let path = dir.path().canonicalize()?;
        Ok(VolumesRoot { dir, path })
    }
}

impl Drop for VolumesRoot {
    fn drop(&mut self) {
        // Containers may have left directories no one may enter: removed
        // beneath the root, as the local backend removes sandboxes.
        let _ = sandfleet_backend_local::remove_tree(self.dir.path());
    }
}

impl Runtime {
    /// A runtime for `images` (directories) and `oci` (names of OCI references);
    /// with isolation, any image that names a reference is pulled too; `network` lets
    /// pods share the host's network (see `network`).
    ///
    /// # Errors
    /// When an image directory is missing, the state directory cannot be used, or
    /// (isolated, with images configured) local sandboxes cannot run here.
    pub(crate) async fn new(
        images: ImageMap,
        oci: OciMap,
        runtime: PodRuntime,
        pulls: PullModel,
        state_dir: Option<PathBuf>,
        network: bool,
    ) -> anyhow::Result<Self> {
        let images = FleetImages {
            directories: images,
            oci,
        };
        images.check_directories()?;
        let configured = !images.is_empty();
        let made = async {
            let host = SandboxHost::open("k8s", images, runtime, state_dir, network)?;
            if configured {
                host.preflight("pods").await?;
            }
            Ok(host)
        }
        .await;
        // With no images configured, a cluster whose pods cannot run still serves:
        // they stay Pending in ErrImagePull.
        let (host, no_backend) = match made {
            Ok(host) => (Some(host), String::new()),
            Err(error) if !configured => (None, format!("{error:#}")),
            Err(error) => return Err(error),
        };
        Ok(Self {
            host,
            no_backend,
            plain: runtime == PodRuntime::Plain,
            pulls: NodePulls::new(pulls),
            facts: Mutex::new(HashMap::new()),
            pulled: Mutex::new(HashMap::new()),
            sandboxes: Mutex::new(HashMap::new()),
            gate: CreateGate::default(),
            logs: Mutex::new(HashMap::new()),
            volumes: match runtime {
                PodRuntime::Plain => None,
                _ => Some(VolumesRoot::make()?),
            },
        })
    }

    /// Makes the `emptyDir` volumes of `pod` (uid `uid`).
    ///
    /// # Errors
    /// When pods run as plain processes (which share the host's root and can
    /// mount nothing) and a container mounts one, or a directory cannot be made.
    pub(crate) fn pod_volumes(
        &self,
        uid: &str,
        pod: &serde_json::Value,
        containers: &[serde_json::Value],
    ) -> Result<PodVolumes, String> {
        let Some(root) = &self.volumes else {
            let volumes = PodVolumes::of(Path::new("/"), uid, pod)?;
            if volumes.mounted_by(containers) {
                return Err(
                    "emptyDir volumes cannot be mounted: pods run as plain processes on \
                            this host, sharing its root (run the devcluster with isolation)"
                        .into(),
                );
            }
            return Ok(PodVolumes::default());
        };
        let volumes = PodVolumes::of(&root.path, uid, pod)?;
        volumes.create()?;
        Ok(volumes)
    }

    /// Whether pods run as plain processes on the host.
    pub(crate) fn is_plain(&self) -> bool {
        self.plain
    }

    fn host(&self) -> anyhow::Result<&SandboxHost> {
        self.host
            .as_ref()
            .with_context(|| format!("pods cannot run here: {}", self.no_backend))
    }

    /// What `image` stands for.
    fn resolve(&self, image: &str) -> Resolved {
        match &self.host {
            Some(host) => host.resolve(image),
            // Without a backend nothing is mapped (images configured make one or
            // fail the start); a reference still says what is missing.
            None if self.plain && sandfleet_core::names_a_reference(image) => {
                Resolved::NeedsIsolation
            }
            None => Resolved::Unknown,
        }
    }

    /// Whether `image` can be pulled: a directory is mapped to it, or it is an OCI
    /// image pods can run.
    pub(crate) fn knows(&self, image: &str) -> bool {
        matches!(self.resolve(image), Resolved::Directory | Resolved::Oci(_))
    }

    /// Whether a directory is mapped to `image`.
    pub(crate) fn is_directory(&self, image: &str) -> bool {
        self.resolve(image) == Resolved::Directory
    }

    /// Whether the node has the image already.
    pub(crate) fn cached(&self, node: &str, image: &str) -> bool {
        self.pulled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(node.to_string(), image.to_string()))
            .is_some_and(|cell| cell.initialized())
    }

    /// The container status's `imageID` for `image`.
    pub(crate) fn image_id(&self, image: &str) -> String {
        self.facts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
            .map_or_else(|| format!("sandfleet://{image}"), |f| f.id.clone())
    }

    /// The size of `image` as the node reports it (0 for a directory image).
    fn image_size(&self, image: &str) -> u64 {
        self.facts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
            .map_or(0, |f| f.size)
    }

    /// The bytes a pull of `image` moves: an OCI image's own, else the size
    /// the pull model gives its name.
    fn pull_size(&self, image: &str) -> u64 {
        match self.image_size(image) {
            0 => self.pulls.model.sizes.get(image).copied().unwrap_or(0),
            size => size,
        }
    }

    /// The most pulls one node has made at once.
    pub(crate) fn peak_pulls(&self) -> usize {
        self.pulls.peak()
    }

    /// Pulls started on every node so far.
    pub(crate) fn pulls_started(&self) -> usize {
        self.pulls.started()
    }

    /// One pull of `image` onto `node`: a slot of the node's, the real pull
    /// of an OCI image, then the modelled cost; returns how long it waited
    /// for the slot.
    async fn transfer(
        &self,
        node: &str,
        image: &str,
        oci: Option<&str>,
        always: bool,
    ) -> Result<Duration, PullError> {
        let asked = Instant::now();
        let _slot = self.pulls.slot(node).await;
        let waited = asked.elapsed();
        if let Some(reference) = oci {
            self.pull_oci(image, reference, always).await?;
        }
        tokio::time::sleep(self.pulls.model.cost(self.pull_size(image))).await;
        Ok(waited)
    }

    /// The argv of a container of `image` with this `command` and `args`, as a
    /// container runtime makes it: an OCI image's `Entrypoint` unless `command` is
    /// given, its `Cmd` unless `command` or `args` is.
    pub(crate) fn argv(&self, image: &str, command: Vec<String>, args: Vec<String>) -> Vec<String> {
        let facts = self
            .facts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
            .cloned();
        match facts {
            Some(facts) if command.is_empty() => {
                let args = if args.is_empty() { facts.cmd } else { args };
                facts.entrypoint.into_iter().chain(args).collect()
            }
            _ => command.into_iter().chain(args).collect(),
        }
    }

    /// Pull `image` onto `node` as `policy` says; returns how long the pull took
    /// (None: it was present). An OCI image is pulled for real into the layer
    /// store (`Always` asks its registry even when the store has it; otherwise a
    /// copy another node pulled serves), and the pull latency comes on top.
    pub(crate) async fn pull(
        &self,
        node: &str,
        image: &str,
        policy: &str,
    ) -> Result<Option<Pulled>, PullError> {
        let oci = match self.resolve(image) {
            Resolved::Directory => None,
            Resolved::Oci(reference) => Some(reference),
            Resolved::NeedsIsolation => return Err(PullError::NeedsIsolation),
            Resolved::Unknown => return Err(PullError::NotFound),
        };
        let always = policy == "Always";
        if self.cached(node, image) && !always {
            return Ok(None);
        }
        if policy == "Never" {
            return Err(PullError::NeverPull);
        }
        let started = Instant::now();
        let mut waited = Duration::ZERO;
        if always && self.cached(node, image) {
            waited += self.transfer(node, image, oci.as_deref(), true).await?;
        }
        let cell = self
            .pulled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((node.to_string(), image.to_string()))
            .or_default()
            .clone();
        // Pods of one image on one node share the first pull; a failed one is
        // tried again by the next. The wait for a slot is the puller's.
        let slot_wait = std::sync::atomic::AtomicU64::new(0);
        cell.get_or_try_init(|| async {
            let waited = self.transfer(node, image, oci.as_deref(), always).await?;
            slot_wait.store(
                waited.as_nanos() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            Ok::<(), PullError>(())
        })
        .await?;
        waited += Duration::from_nanos(slot_wait.load(std::sync::atomic::Ordering::Relaxed));
        let size = self.pull_size(image);
        Ok(Some(Pulled {
            took: started.elapsed(),
            waited,
            size: (oci.is_some() || size > 0).then_some(size),
        }))
    }

    async fn pull_oci(&self, image: &str, reference: &str, always: bool) -> Result<(), PullError> {
        let backend = self
            .host()
            .map_err(|e| PullError::Registry {
                not_found: false,
                message: format!("{e:#}"),
            })?
            .backend();
        let pulled =
            backend
                .pull_oci(reference, always)
                .await
                .map_err(|error| PullError::Registry {
                    not_found: matches!(
                        error,
                        LocalError::Image(sandfleet_images::Error::NotFound { .. })
                    ),
                    message: error.to_string(),
                })?;
        let name = &pulled.reference;
        let facts = OciFacts {
            id: format!(
                "{}/{}@{}",
                name.registry(),
                name.repository(),
                pulled.manifest
            ),
            size: pulled.layers.iter().map(|l| l.size).sum(),
            entrypoint: pulled.config.entrypoint.clone(),
            cmd: pulled.config.cmd.clone(),
        };
        self.facts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(image.to_string(), facts);
        Ok(())
    }

    /// The images on `node` (for its status).
    pub(crate) fn node_images(&self, node: &str) -> Vec<String> {
        let pulled = self.pulled.lock().unwrap_or_else(|e| e.into_inner());
        let mut images: Vec<String> = pulled
            .iter()
            .filter(|((n, _), cell)| n == node && cell.initialized())
            .map(|((_, i), _)| i.clone())
            .collect();
        images.sort();
        images
    }

    /// The images on `node` with their sizes, and an OCI image's digest name.
    pub(crate) fn node_image_entries(&self, node: &str) -> Vec<(Vec<String>, u64)> {
        self.node_images(node)
            .into_iter()
            .map(|image| {
                let id = self.image_id(&image);
                let mut names = vec![image.clone()];
                if !id.starts_with("sandfleet://") {
                    names.insert(0, id);
                }
                (names, self.image_size(&image))
            })
            .collect()
    }

    async fn template(&self, image: &str, shape: Shape) -> anyhow::Result<TemplateRef> {
        // An OCI image's digest is part of the key: after a pull that followed a
        // moved tag, new pods get the new image.
        let Shape {
            cpu_milli,
            memory_mib,
            disk_mib,
            network,
        } = shape;
        let key = format!(
            "{image}|{}|{cpu_milli}|{memory_mib}|{disk_mib}|{network}",
            self.image_id(image)
        );
        self.host()?
            .template(&key, image, shape)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Make a sandbox of pod `uid`: its main container's under `uid` itself, an init
    /// container's under [`init_key`]; with `volumes` mounted.
    pub(crate) async fn start(
        &self,
        uid: &str,
        image: &str,
        shape: Shape,
        env: Vec<(String, String)>,
        workdir: Option<String>,
        volumes: Vec<Volume>,
    ) -> anyhow::Result<Arc<PodSandbox>> {
        let Some(_starting) = self.gate.enter() else {
            anyhow::bail!("the cluster is shutting down");
        };
        let template = self.template(image, shape).await?;
        let handle = self
            .host()?
            .claim_with_volumes(&template, uid, volumes)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let sandbox = Arc::new(PodSandbox {
            handle,
            env,
            workdir,
        });
        self.sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), sandbox.clone());
        Ok(sandbox)
    }

    /// The sandbox of pod `uid`, while it runs.
    pub(crate) fn sandbox(&self, uid: &str) -> Option<Arc<PodSandbox>> {
        self.sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .cloned()
    }

    /// How many pod sandboxes exist.
    pub(crate) fn live(&self) -> usize {
        self.sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Run a command in a pod's sandbox to its end (the container's main process), its
    /// stdout and stderr through one pipe into `log` as it writes them (so interleaved
    /// as written); the log is ended once the output is. Returns its exit code.
    ///
    /// # Errors
    /// When it cannot start, or its sandbox ended under it.
    pub(crate) async fn run_main(
        &self,
        sandbox: &PodSandbox,
        argv: Vec<String>,
        log: &ContainerLog,
    ) -> anyhow::Result<i32> {
        let request = SpawnRequest {
            argv,
            merge_stderr: true,
            ..SpawnRequest::default()
        };
        let spawned = self.spawn(sandbox, request).await;
        let Spawned {
            mut stdout,
            mut exit,
            ..
        } = match spawned {
            Ok(spawned) => spawned,
            Err(error) => {
                log.end();
                return Err(error);
            }
        };
        let mut buffer = vec![0u8; READ_CHUNK];
        let mut output_open = true;
        let mut killed = false;
        let timeout = tokio::time::sleep(MAIN_TIMEOUT);
        tokio::pin!(timeout);
        let exited = loop {
            tokio::select! {
                read = stdout.read(&mut buffer), if output_open => match read {
                    Ok(n) if n > 0 => log.write(&buffer[..n]),
                    _ => output_open = false,
                },
                exited = exit.wait() => break exited,
                () = &mut timeout, if !killed => {
                    killed = true;
                    exit.kill();
                }
            }
        };
        if output_open {
            let drain = async {
                while let Ok(n @ 1..) = stdout.read(&mut buffer).await {
                    log.write(&buffer[..n]);
                }
            };
            let _ = tokio::time::timeout(DRAIN_GRACE, drain).await;
        }
        log.end();
        exited.map(exit_code).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Why a container runtime would refuse to start `program` in a pod's sandbox
    /// (containerd's and runc's words), or `None` when it is there to run.
    pub(crate) async fn refuses_to_start(
        &self,
        sandbox: &PodSandbox,
        program: &str,
    ) -> Option<String> {
        let found = self
            .host()
            .ok()?
            .backend()
            .finds_program(
                &sandbox.handle,
                program,
                &sandbox.env,
                sandbox.workdir.as_deref(),
            )
            .await;
        let why = match found {
            Ok(true) | Err(_) => return None,
            Ok(false) if program.contains('/') => {
                format!("exec: \"{program}\": stat {program}: no such file or directory")
            }
            Ok(false) => format!("exec: \"{program}\": executable file not found in $PATH"),
        };
        Some(format!(
            "failed to create containerd task: failed to create shim task: OCI runtime create \
             failed: runc create failed: unable to start container process: error during \
             container init: {why}: unknown"
        ))
    }

    /// Start a command in a pod's sandbox with live pipes (an exec'd process).
    pub(crate) async fn spawn(
        &self,
        sandbox: &PodSandbox,
        mut request: SpawnRequest,
    ) -> anyhow::Result<Spawned> {
        request.env = sandbox.env_with(request.env);
        request.workdir = request.workdir.or_else(|| sandbox.workdir.clone());
        self.host()?
            .backend()
            .spawn(&sandbox.handle, &request)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Destroy the sandboxes of pod `uid` (an init container's running included) and
    /// its volumes; or, given an [`init_key`], that init container's sandbox alone.
    /// Idempotent.
    pub(crate) async fn stop(&self, key: &str) {
        let init_prefix = format!("{key}.");
        let removed: Vec<Arc<PodSandbox>> = {
            let mut sandboxes = self.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<String> = sandboxes
                .keys()
                .filter(|k| *k == key || k.starts_with(&init_prefix))
                .cloned()
                .collect();
            keys.iter().filter_map(|k| sandboxes.remove(k)).collect()
        };
        if let Ok(host) = self.host() {
            for sandbox in removed {
                if let Err(error) = host.backend().release(&sandbox.handle).await {
                    tracing::warn!(%error, pod = key, "releasing a pod sandbox failed");
                }
            }
        }
        if let Some(root) = self.volumes.as_ref().filter(|_| !key.contains('.')) {
            let (root, uid) = (root.path.clone(), key.to_string());
            let _ = tokio::task::spawn_blocking(move || volumes::remove(&root, &uid)).await;
        }
    }

    /// Open the logs of pod `uid`'s containers `names`; returned in `names`' order.
    pub(crate) fn open_logs(&self, uid: &str, names: &[String]) -> Vec<Arc<ContainerLog>> {
        let opened: BTreeMap<String, Arc<ContainerLog>> = names
            .iter()
            .map(|name| (name.clone(), Arc::default()))
            .collect();
        let in_order = names.iter().map(|name| opened[name].clone()).collect();
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), opened);
        in_order
    }

    /// The log of container `name` of pod `uid`, from the pod's start until its
    /// deletion.
    pub(crate) fn log(&self, uid: &str, name: &str) -> Option<Arc<ContainerLog>> {
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)?
            .get(name)
            .cloned()
    }

    /// Drop the logs of pod `uid` (deleted), ending them so that followers finish.
    pub(crate) fn forget_logs(&self, uid: &str) {
        let removed = self
            .logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        for log in removed.into_iter().flat_map(BTreeMap::into_values) {
            log.end();
        }
    }

    /// Destroy every sandbox and whatever the run left in the local backend, once
    /// the sandboxes being made are (bounded).
    pub(crate) async fn teardown(&self) {
        self.gate.close().await;
        let all: Vec<(String, SandboxHandle)> =
            std::mem::take(&mut *self.sandboxes.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .map(|(uid, sandbox)| (uid, sandbox.handle.clone()))
                .collect();
        if let Some(host) = &self.host {
            host.teardown(all).await;
        }
    }

    /// The local backend's state directory (where sandboxes live), if any.
    pub(crate) fn state_dir(&self) -> Option<PathBuf> {
        self.host.as_ref().map(|h| h.state_dir().to_path_buf())
    }
}

/// The key of the sandbox of pod `uid`'s init container number `index` (see
/// [`Runtime::stop`]); it is the sandbox's task label too, so a label value: a
/// pod's uid has no `.`, and the key stays within 63 characters.
pub(crate) fn init_key(uid: &str, index: usize) -> String {
    format!("{uid}.init-{index}")
}
