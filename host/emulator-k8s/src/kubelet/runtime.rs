//! The container runtime behind the kubelet: every running pod is one local sandbox
//! (the local backend's machinery, isolated or `plain`), made from the directory its
//! image name maps to; a per-node image cache that makes the first pull of an image on
//! a node pay the pull latency; commands run in a pod's sandbox; and each container's
//! log, kept while its pod exists.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use sandfleet_backend_local::{IsolationMode, LocalBackend, LocalConfig, SpawnRequest, Spawned};
use sandfleet_core::{Backend, Labels, RunId, SandboxHandle, TemplateRef, TemplateSpec};
pub use sandfleet_emulator_opensandbox::ImageMap;
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use super::container_log::ContainerLog;

/// How pods run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PodRuntime {
    /// Isolated local sandboxes (namespaces, cgroups, seccomp), probed before use.
    #[default]
    Namespaces,
    /// Plain directories and processes, no isolation: for scale tests.
    Plain,
}

/// How long a sandbox may take to be made.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
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
    /// No directory is mapped to this image name.
    NotFound,
    /// `imagePullPolicy: Never` and the node does not have it.
    NeverPull,
}

/// A node and an image name.
type NodeImage = (String, String);

/// Runs pods as local sandboxes.
pub(crate) struct Runtime {
    backend: Option<Arc<LocalBackend>>,
    run_id: RunId,
    images: ImageMap,
    pull_latency: Duration,
    templates: tokio::sync::Mutex<HashMap<String, TemplateRef>>,
    /// (node, image) → the pull, done once.
    pulled: Mutex<HashMap<NodeImage, Arc<OnceCell<()>>>>,
    sandboxes: Mutex<HashMap<String, Arc<PodSandbox>>>,
    /// Pod uid → its containers' logs (by container name), from its start until it is
    /// deleted.
    logs: Mutex<HashMap<String, BTreeMap<String, Arc<ContainerLog>>>>,
    _scratch: Option<tempfile::TempDir>,
}

impl Runtime {
    /// A runtime for `images` (none: pods cannot start, and no backend is made).
    ///
    /// # Errors
    /// When an image directory is missing, the state directory cannot be used, or
    /// (isolated) local sandboxes cannot run here.
    pub(crate) async fn new(
        images: ImageMap,
        runtime: PodRuntime,
        pull_latency: Duration,
        state_dir: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        for (reference, source) in &images {
            anyhow::ensure!(
                source.path.is_dir(),
                "image `{reference}`: {} is not a directory",
                source.path.display()
            );
        }
        let mut scratch = None;
        let backend = if images.is_empty() {
            None
        } else {
            let dir = match state_dir {
                Some(d) => d,
                None => {
                    let made = tempfile::Builder::new()
                        .prefix("sandfleet-emulator-k8s-")
                        .tempdir()
                        .context("making a state directory")?;
                    let path = made.path().to_path_buf();
                    scratch = Some(made);
                    path
                }
            };
            let config = LocalConfig {
                state_dir: Some(std::path::absolute(&dir).unwrap_or(dir)),
                isolation: match runtime {
                    PodRuntime::Namespaces => IsolationMode::Namespaces,
                    PodRuntime::Plain => IsolationMode::None,
                },
                // The nodes' allocatable, not the local backend, bounds what runs.
                max_sandboxes: Some(1_000_000),
                images: images.clone(),
                ..LocalConfig::default()
            };
            let backend =
                LocalBackend::new("k8s-emulator", config).map_err(|e| anyhow::anyhow!("{e}"))?;
            if runtime == PodRuntime::Namespaces {
                let preflight = backend.preflight().await;
                anyhow::ensure!(
                    preflight.failures.is_empty(),
                    "local sandboxes cannot run here ({}); --runtime plain runs pods unisolated",
                    preflight.failures.join("; ")
                );
            }
            Some(Arc::new(backend))
        };
        Ok(Self {
            backend,
            run_id: RunId::generate("k8s-emulator"),
            images,
            pull_latency,
            templates: tokio::sync::Mutex::new(HashMap::new()),
            pulled: Mutex::new(HashMap::new()),
            sandboxes: Mutex::new(HashMap::new()),
            logs: Mutex::new(HashMap::new()),
            _scratch: scratch,
        })
    }

    fn backend(&self) -> anyhow::Result<&Arc<LocalBackend>> {
        self.backend
            .as_ref()
            .context("no images are configured (--image REF=DIR)")
    }

    /// Whether a directory is mapped to `image`.
    pub(crate) fn knows(&self, image: &str) -> bool {
        self.images.contains_key(image)
    }

    /// Whether the node has the image already.
    pub(crate) fn cached(&self, node: &str, image: &str) -> bool {
        self.pulled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(node.to_string(), image.to_string()))
            .is_some_and(|cell| cell.initialized())
    }

    /// Pull `image` onto `node` as `policy` says; returns how long the pull took
    /// (None: it was present).
    pub(crate) async fn pull(
        &self,
        node: &str,
        image: &str,
        policy: &str,
    ) -> Result<Option<Duration>, PullError> {
        if !self.images.contains_key(image) {
            return Err(PullError::NotFound);
        }
        let always = policy == "Always";
        if self.cached(node, image) && !always {
            return Ok(None);
        }
        if policy == "Never" {
            return Err(PullError::NeverPull);
        }
        let started = Instant::now();
        if always {
            tokio::time::sleep(self.pull_latency).await;
        }
        let cell = self
            .pulled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((node.to_string(), image.to_string()))
            .or_default()
            .clone();
        // Pods of one image on one node share the first pull.
        cell.get_or_init(|| async { tokio::time::sleep(self.pull_latency).await })
            .await;
        Ok(Some(started.elapsed()))
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

    async fn template(
        &self,
        image: &str,
        cpu_milli: u32,
        memory_mib: u32,
    ) -> anyhow::Result<TemplateRef> {
        let key = format!("{image}|{cpu_milli}|{memory_mib}");
        let mut templates = self.templates.lock().await;
        if let Some(made) = templates.get(&key) {
            return Ok(made.clone());
        }
        let spec = TemplateSpec {
            name: sandfleet_core::template_name(&self.run_id, &key),
            image: image.to_string(),
            cpu_milli,
            memory_mib,
            disk_mib: 10 * 1024,
            network: false,
            env: BTreeMap::new(),
            labels: self.run_id.labels(),
        };
        let made = self
            .backend()?
            .ensure_template(&spec)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        templates.insert(key, made.clone());
        Ok(made)
    }

    /// Make the sandbox of pod `uid`.
    pub(crate) async fn start(
        &self,
        uid: &str,
        image: &str,
        cpu_milli: u32,
        memory_mib: u32,
        env: Vec<(String, String)>,
        workdir: Option<String>,
    ) -> anyhow::Result<Arc<PodSandbox>> {
        let template = self.template(image, cpu_milli, memory_mib).await?;
        let mut labels: Labels = self.run_id.labels();
        labels.insert(sandfleet_core::LABEL_TASK.to_string(), uid.to_string());
        let handle = self
            .backend()?
            .claim(&template, &labels, Instant::now() + CREATE_TIMEOUT)
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

    /// Start a command in a pod's sandbox with live pipes (an exec'd process).
    pub(crate) async fn spawn(
        &self,
        sandbox: &PodSandbox,
        mut request: SpawnRequest,
    ) -> anyhow::Result<Spawned> {
        request.env = sandbox.env_with(request.env);
        request.workdir = request.workdir.or_else(|| sandbox.workdir.clone());
        self.backend()?
            .spawn(&sandbox.handle, &request)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Destroy the sandbox of pod `uid` (idempotent).
    pub(crate) async fn stop(&self, uid: &str) {
        let removed = self
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        if let (Some(sandbox), Ok(backend)) = (removed, self.backend())
            && let Err(error) = backend.release(&sandbox.handle).await
        {
            tracing::warn!(%error, pod = uid, "releasing a pod sandbox failed");
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

    /// Destroy every sandbox and whatever the run left in the local backend.
    pub(crate) async fn teardown(&self) {
        let all: Vec<String> = self
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        let mut stopping = tokio::task::JoinSet::new();
        for uid in all {
            let backend = self.backend.clone();
            let sandbox = self
                .sandboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
            if let (Some(backend), Some(sandbox)) = (backend, sandbox) {
                stopping.spawn(async move {
                    let _ = backend.release(&sandbox.handle).await;
                });
            }
        }
        stopping.join_all().await;
        if let Ok(backend) = self.backend()
            && let Err(error) = backend.reap(&self.run_id).await
        {
            tracing::warn!(%error, "reaping the emulator's pods failed");
        }
    }

    /// The local backend's state directory (where sandboxes live), if any.
    pub(crate) fn state_dir(&self) -> Option<PathBuf> {
        self.backend.as_ref().map(|b| b.state_dir().to_path_buf())
    }
}
