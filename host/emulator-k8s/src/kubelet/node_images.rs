//! The nodes' image cache: which node holds which image (nodes start empty
//! and share the one layer store), what an OCI image's pull found (its id,
//! size, entrypoint and command), and pulls that pay the pull model's cost
//! on top of the real one (see `pull_model`), one per node and image at a
//! time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandfleet_backend_local::{LocalBackend, LocalError};
use tokio::sync::OnceCell;

use super::pull_model::{NodePulls, PullModel};

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

/// Where an OCI image is pulled from, and the backend whose store it goes to.
#[derive(Clone, Copy)]
pub(crate) struct Oci<'a> {
    /// The image's reference.
    pub(crate) reference: &'a str,
    /// The local backend pods run on.
    pub(crate) backend: &'a LocalBackend,
}

/// The image cache of every node.
pub(crate) struct NodeImages {
    pulls: NodePulls,
    /// Image name → what its last pull found (OCI images).
    facts: Mutex<HashMap<String, OciFacts>>,
    /// (node, image) → the pull, done once.
    pulled: Mutex<HashMap<NodeImage, Arc<OnceCell<()>>>>,
}

impl NodeImages {
    /// Empty nodes, pulling as `model` says.
    pub(crate) fn new(model: PullModel) -> Self {
        NodeImages {
            pulls: NodePulls::new(model),
            facts: Mutex::new(HashMap::new()),
            pulled: Mutex::new(HashMap::new()),
        }
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
        oci: Option<Oci<'_>>,
        always: bool,
    ) -> Result<Duration, PullError> {
        let asked = Instant::now();
        let _slot = self.pulls.slot(node).await;
        let waited = asked.elapsed();
        if let Some(oci) = oci {
            self.pull_oci(image, oci, always).await?;
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

    /// Pull `image` onto `node` as `policy` says, from `oci` when it is an
    /// OCI image; returns how long the pull took (None: it was present). An
    /// OCI image is pulled for real into the layer store (`Always` asks its
    /// registry even when the store has it; otherwise a copy another node
    /// pulled serves), and the pull latency comes on top.
    pub(crate) async fn pull(
        &self,
        node: &str,
        image: &str,
        policy: &str,
        oci: Option<Oci<'_>>,
    ) -> Result<Option<Pulled>, PullError> {
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
            waited += self.transfer(node, image, oci, true).await?;
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
            let waited = self.transfer(node, image, oci, always).await?;
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

    async fn pull_oci(&self, image: &str, oci: Oci<'_>, always: bool) -> Result<(), PullError> {
        let pulled = oci
            .backend
            .pull_oci(oci.reference, always)
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
}
