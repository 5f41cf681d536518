//! The container runtime behind the kubelet: every running pod is one local sandbox
//! (the local backend's machinery, isolated or `plain`), made from the directory its
//! image name maps to, or (isolated) from the OCI image it names or maps to, pulled
//! into the local backend's layer store through the nodes' image cache
//! (`node_images`); commands run in a pod's sandbox; and each container's log, kept
//! while its pod exists.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use sandfleet_backend_local::{SpawnRequest, Spawned, Volume};
use sandfleet_core::{Backend, SandboxHandle, TemplateRef};
use sandfleet_emulator_runtime::{
    CreateGate, FleetImages, ImageMap, OciMap, Resolved, SandboxHost, Shape,
};
use tokio::io::AsyncReadExt;

use super::container_log::ContainerLog;
use super::node_images::{NodeImages, Oci, PullError, Pulled};
use super::pull_model::PullModel;
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

/// Runs pods as local sandboxes.
pub(crate) struct Runtime {
    host: Option<SandboxHost>,
    /// Why there is no backend.
    no_backend: String,
    plain: bool,
    images: NodeImages,
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
            images: NodeImages::new(pulls),
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

    /// The nodes' image cache.
    pub(crate) fn images(&self) -> &NodeImages {
        &self.images
    }

    /// Pull `image` onto `node` as `policy` says (see [`NodeImages::pull`]).
    pub(crate) async fn pull(
        &self,
        node: &str,
        image: &str,
        policy: &str,
    ) -> Result<Option<Pulled>, PullError> {
        let reference = match self.resolve(image) {
            Resolved::Directory => None,
            Resolved::Oci(reference) => Some(reference),
            Resolved::NeedsIsolation => return Err(PullError::NeedsIsolation),
            Resolved::Unknown => return Err(PullError::NotFound),
        };
        let oci = match &reference {
            Some(reference) => {
                let host = self.host().map_err(|e| PullError::Registry {
                    not_found: false,
                    message: format!("{e:#}"),
                })?;
                Some(Oci {
                    reference,
                    backend: host.backend(),
                })
            }
            None => None,
        };
        self.images.pull(node, image, policy, oci).await
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
            self.images.image_id(image)
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
