//! The local backend an emulator runs its pods or sandboxes on: one run id
//! for everything it makes (so teardown reaps whatever a failed release
//! left), a state directory (a temporary one unless given), one template
//! per image and shape, and claims bounded by [`CREATE_TIMEOUT`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sandfleet_backend_local::{IsolationMode, LocalBackend, LocalConfig, Volume};
use sandfleet_core::{
    Backend, BackendError, Labels, RunId, SandboxHandle, TemplateRef, TemplateSpec,
};

use crate::images::FleetImages;

/// How long a sandbox may take to be made, like the OpenSandbox Kubernetes
/// runtime's `sandbox_create_timeout_seconds`; also how long teardown waits
/// for creates under way.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// How sandboxes run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// Isolated local sandboxes (namespaces, cgroups, seccomp), each probed
    /// before it is offered.
    #[default]
    Namespaces,
    /// Plain directories and processes, no isolation: for scale tests.
    Plain,
}

/// What an image name stands for on a [`SandboxHost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A directory is mapped to it.
    Directory,
    /// The OCI reference it is, or is mapped to, pulled into the layer store.
    Oci(String),
    /// An OCI image, but sandboxes run as plain processes.
    NeedsIsolation,
    /// Nothing is mapped to it and it names no reference.
    Unknown,
}

/// What a sandbox may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// CPU, in thousandths of a core.
    pub cpu_milli: u32,
    /// Memory, in MiB.
    pub memory_mib: u32,
    /// What its writes may take on disk, in MiB: past it, the command
    /// writing is stopped.
    pub disk_mib: u32,
    /// It shares this host's network namespace; otherwise it has one of its
    /// own with only a loopback device.
    pub network: bool,
}

impl Shape {
    /// Disk for a sandbox that asks for no limit.
    pub const DEFAULT_DISK_MIB: u32 = 10 * 1024;
}

/// The local backend of one emulator and what it made there.
pub struct SandboxHost {
    backend: Arc<LocalBackend>,
    run_id: RunId,
    images: FleetImages,
    isolation: Isolation,
    templates: tokio::sync::Mutex<HashMap<String, TemplateRef>>,
    _scratch: Option<tempfile::TempDir>,
}

impl SandboxHost {
    /// The local backend of emulator `emulator` (`k8s`, `opensandbox`: it
    /// names the run and the temporary state directory) for `images`;
    /// `network` lets a [`Shape`] ask for the host's network.
    ///
    /// # Errors
    ///
    /// When the state directory cannot be made or used.
    pub fn open(
        emulator: &str,
        images: FleetImages,
        isolation: Isolation,
        state_dir: Option<PathBuf>,
        network: bool,
    ) -> anyhow::Result<Self> {
        let (dir, scratch) = match state_dir {
            Some(dir) => (dir, None),
            None => {
                let made = tempfile::Builder::new()
                    .prefix(&format!("sandfleet-emulator-{emulator}-"))
                    .tempdir()
                    .context("making a state directory")?;
                (made.path().to_path_buf(), Some(made))
            }
        };
        let config = LocalConfig {
            state_dir: Some(std::path::absolute(&dir).unwrap_or(dir)),
            isolation: match isolation {
                Isolation::Namespaces => IsolationMode::Namespaces,
                Isolation::Plain => IsolationMode::None,
            },
            // The emulated server, not the local backend, bounds what exists.
            max_sandboxes: Some(1_000_000),
            images: images.directories.clone(),
            oci_images: images.oci.clone(),
            network,
            ..LocalConfig::default()
        };
        let name = format!("{emulator}-emulator");
        let backend = LocalBackend::new(&name, config).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(SandboxHost {
            backend: Arc::new(backend),
            run_id: RunId::generate(&name),
            images,
            isolation,
            templates: tokio::sync::Mutex::new(HashMap::new()),
            _scratch: scratch,
        })
    }

    /// Checks that isolated sandboxes can run here (plain ones always can).
    ///
    /// # Errors
    ///
    /// The probe's failures, with the way out: `--runtime plain` runs
    /// `what` (pods, sandboxes) unisolated.
    pub async fn preflight(&self, what: &str) -> anyhow::Result<()> {
        if self.isolation == Isolation::Plain {
            return Ok(());
        }
        let preflight = self.backend.preflight().await;
        anyhow::ensure!(
            preflight.failures.is_empty(),
            "local sandboxes cannot run here ({}); --runtime plain runs {what} unisolated",
            preflight.failures.join("; ")
        );
        Ok(())
    }

    /// The local backend, for what an emulator does in its sandboxes.
    pub fn backend(&self) -> &Arc<LocalBackend> {
        &self.backend
    }

    /// The images it was opened with.
    pub fn images(&self) -> &FleetImages {
        &self.images
    }

    /// What `image` stands for here.
    pub fn resolve(&self, image: &str) -> Resolved {
        if self.images.directories.contains_key(image) {
            return Resolved::Directory;
        }
        match self.backend.oci_reference(image) {
            Some(reference) => Resolved::Oci(reference.to_string()),
            None if self.images.oci.contains_key(image)
                || sandfleet_core::names_a_reference(image) =>
            {
                Resolved::NeedsIsolation
            }
            None => Resolved::Unknown,
        }
    }

    /// The template of `image` in this shape, made once per `key` (what
    /// makes two templates differ for the emulator).
    ///
    /// # Errors
    ///
    /// When the local backend cannot make it.
    pub async fn template(
        &self,
        key: &str,
        image: &str,
        shape: Shape,
    ) -> Result<TemplateRef, BackendError> {
        let mut templates = self.templates.lock().await;
        if let Some(made) = templates.get(key) {
            return Ok(made.clone());
        }
        let spec = TemplateSpec {
            name: sandfleet_core::template_name(&self.run_id, key),
            image: image.to_string(),
            cpu_milli: shape.cpu_milli,
            memory_mib: shape.memory_mib,
            disk_mib: shape.disk_mib,
            network: shape.network,
            env: BTreeMap::new(),
            labels: self.run_id.labels(),
        };
        let made = self.backend.ensure_template(&spec).await?;
        templates.insert(key.to_string(), made.clone());
        Ok(made)
    }

    /// A sandbox of `template` for `task` (a pod's uid, a sandbox's id),
    /// labelled with both the run and the task.
    ///
    /// # Errors
    ///
    /// When the local backend cannot make it within [`CREATE_TIMEOUT`].
    pub async fn claim(
        &self,
        template: &TemplateRef,
        task: &str,
    ) -> Result<SandboxHandle, BackendError> {
        self.claim_with_volumes(template, task, Vec::new()).await
    }

    /// [`SandboxHost::claim`], with `volumes` (host directories) mounted
    /// into the sandbox.
    ///
    /// # Errors
    ///
    /// As [`SandboxHost::claim`]; also a volume the local backend refuses.
    pub async fn claim_with_volumes(
        &self,
        template: &TemplateRef,
        task: &str,
        volumes: Vec<Volume>,
    ) -> Result<SandboxHandle, BackendError> {
        let mut labels: Labels = self.run_id.labels();
        labels.insert(sandfleet_core::LABEL_TASK.to_string(), task.to_string());
        self.backend
            .claim_with_volumes(template, &labels, volumes, Instant::now() + CREATE_TIMEOUT)
            .await
    }

    /// Destroys `sandboxes` (each named for the log) at once, then whatever
    /// else the run left in the local backend.
    pub async fn teardown(&self, sandboxes: impl IntoIterator<Item = (String, SandboxHandle)>) {
        let mut releasing = tokio::task::JoinSet::new();
        for (name, handle) in sandboxes {
            let backend = Arc::clone(&self.backend);
            releasing.spawn(async move {
                if let Err(error) = backend.release(&handle).await {
                    tracing::warn!(sandbox = %name, %error, "releasing a sandbox failed");
                }
            });
        }
        releasing.join_all().await;
        if let Err(error) = self.backend.reap(&self.run_id).await {
            tracing::warn!(%error, "reaping the emulator's run failed");
        }
    }

    /// The local backend's state directory, where sandboxes live.
    pub fn state_dir(&self) -> &Path {
        self.backend.state_dir()
    }
}
