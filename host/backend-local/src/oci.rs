//! OCI images: pulled on first use into the layer store of the state
//! directory (`sandfleet-images`), pinned while a template or sandbox of
//! them lives, and run as their config says.
//!
//! A sandbox of an OCI image is its image's unpacked layers as overlay
//! lower layers (no copy per sandbox) under a writable layer of its own,
//! and nothing of the host's root filesystem (the helper's
//! `image_root`). Layers are unpacked as the store's [`Ownership`] says:
//! as root, owners shifted into the sandboxes' id range, so a file the
//! image gives uid `n` is the sandbox's uid `n`; unprivileged, every file
//! the caller's, which is the sandbox's root, as rootless runtimes without
//! a subordinate id range do. The image's config is honoured: its `Env`
//! (with its `PATH`) under the template's and the command's, its `User`
//! for every command, and its `WorkingDir` as the sandbox's workdir.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use sandfleet_core::{PullEvent, PullProgress};
use sandfleet_images::{
    Image, Ownership, Pin, ProgressEvent, PullOptions, PullPolicy, Reference, RetryPolicy, Store,
};

use crate::config::RegistrySettings;
use crate::error::LocalError;

/// Where sandboxes may not keep their workdir: what each init mounts anew.
const PRIVATE_DIRS: [&str; 3] = ["/dev", "/proc", "/tmp"];

/// An image made ready for sandboxes, pinned in the store while it lives.
#[derive(Debug)]
pub(crate) struct OciImage {
    /// The store's directory of unpacked layers (canonical).
    pub(crate) layers_dir: PathBuf,
    /// Each layer's directory beneath `layers_dir`, lowest first.
    pub(crate) layers: Vec<String>,
    /// The config's `Env`, in order.
    pub(crate) env: Vec<(String, String)>,
    /// The config's `User`, when it names one.
    pub(crate) user: Option<String>,
    /// The config's `WorkingDir`, when it names one.
    pub(crate) working_dir: Option<String>,
    /// The digest of its manifest.
    manifest: sandfleet_images::Digest,
    _pin: Pin,
}

impl OciImage {
    /// The workdir of its sandboxes: the image's `WorkingDir` where one
    /// can be (an absolute path below `/` outside the directories every
    /// init mounts anew), else the cluster's.
    pub(crate) fn workdir(&self, cluster_workdir: &str) -> String {
        self.working_dir
            .as_deref()
            .filter(|dir| usable_workdir(dir))
            .unwrap_or(cluster_workdir)
            .trim_end_matches('/')
            .to_string()
    }

    /// The `PATH` its config sets, if any.
    pub(crate) fn path(&self) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.as_str())
    }
}

fn usable_workdir(dir: &str) -> bool {
    let path = Path::new(dir.trim_end_matches('/'));
    path.is_absolute()
        && path != Path::new("/")
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !PRIVATE_DIRS.iter().any(|private| path.starts_with(private))
}

/// The state directory's layer store, opened on first use (a cluster of
/// directory images never makes one), and the images made ready from it.
pub(crate) struct Images {
    state_dir: PathBuf,
    registries: RegistrySettings,
    ownership: Ownership,
    store: OnceLock<Store>,
    /// By reference; held weakly, so an image no template or sandbox uses
    /// is unpinned.
    ready: tokio::sync::Mutex<HashMap<String, Weak<OciImage>>>,
}

impl Images {
    /// The store under `state_dir`, its layers owned as `ownership` says,
    /// pulling as `registries` says.
    pub(crate) fn new(
        state_dir: &Path,
        ownership: Ownership,
        registries: RegistrySettings,
    ) -> Self {
        Images {
            state_dir: state_dir.to_path_buf(),
            registries,
            ownership,
            store: OnceLock::new(),
            ready: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    fn store(&self) -> Result<&Store, LocalError> {
        if let Some(store) = self.store.get() {
            return Ok(store);
        }
        let store = Store::open(&self.state_dir, self.ownership).map_err(LocalError::Image)?;
        Ok(self.store.get_or_init(|| store))
    }

    /// The image `reference` names, pulled when the store does not have
    /// it yet, and pinned.
    ///
    /// # Errors
    ///
    /// [`LocalError::Image`] naming the reference and what failed (the
    /// registry and its HTTP status, for a pull).
    pub(crate) async fn get(&self, reference: &str) -> Result<Arc<OciImage>, LocalError> {
        let parsed = Reference::parse(reference).map_err(LocalError::Image)?;
        let mut ready = self.ready.lock().await;
        if let Some(image) = ready.get(reference).and_then(Weak::upgrade) {
            // The store may hold another image under this reference now (a
            // pull that asked the registry followed a moved tag): templates
            // made from here on get that one.
            let current = self
                .store()
                .ok()
                .and_then(|store| store.image(&parsed).ok())
                .map(|stored| stored.manifest);
            if current.is_none_or(|manifest| manifest == image.manifest) {
                return Ok(image);
            }
        }
        let store = self.store()?.clone();
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        // Tried once: the engine retries a template it could not make, and a
        // second layer of retries under it multiplies every unreachable
        // registry's wait (layers already stored are not fetched again).
        let options = PullOptions {
            retry: RetryPolicy {
                retries: 0,
                ..RetryPolicy::default()
            },
            ..self.pull_options()
        };
        let image = pull(store.clone(), parsed, options, events).await?;
        let pin = store.pin(&image).map_err(LocalError::Image)?;
        let made = Arc::new(ready_image(reference, &image, pin)?);
        ready.retain(|_, image| image.strong_count() > 0);
        ready.insert(reference.to_string(), Arc::downgrade(&made));
        Ok(made)
    }
}

impl Images {
    /// For each of `references`, `None` when the store has its image, else
    /// the bytes its pull would download (layers wanted by an earlier one
    /// counted there only), or why it cannot be pulled.
    pub(crate) async fn missing(
        &self,
        references: &[&str],
    ) -> Vec<Option<Result<u64, LocalError>>> {
        let store = match self.store() {
            Ok(store) => store.clone(),
            Err(error) => {
                let error = error.to_string();
                return references
                    .iter()
                    .map(|_| Some(Err(LocalError::Failed(error.clone()))))
                    .collect();
            }
        };
        let mut out: Vec<Option<Result<u64, LocalError>>> = Vec::new();
        let mut absent = Vec::new();
        for reference in references {
            match Reference::parse(reference) {
                Ok(parsed) if store.image(&parsed).is_ok() => out.push(None),
                Ok(parsed) => {
                    absent.push((out.len(), parsed));
                    out.push(None);
                }
                Err(error) => out.push(Some(Err(LocalError::Image(error)))),
            }
        }
        let parsed: Vec<Reference> = absent.iter().map(|(_, r)| r.clone()).collect();
        let runtime = tokio::runtime::Handle::current();
        let options = self.pull_options();
        let asked =
            tokio::task::spawn_blocking(move || runtime.block_on(store.missing(&parsed, &options)))
                .await;
        match asked {
            Ok(found) => {
                for ((slot, _), missing) in absent.iter().zip(found) {
                    out[*slot] = Some(missing.result.map_err(LocalError::Image));
                }
            }
            Err(error) => {
                for (slot, _) in &absent {
                    out[*slot] = Some(Err(LocalError::Failed(format!(
                        "asking for the image's manifest failed: {error}"
                    ))));
                }
            }
        }
        out
    }

    /// Pulls `reference` into the store unless it is there already,
    /// telling `progress` of each layer. Nothing is pinned: a template of
    /// it pins it ([`Images::get`]).
    pub(crate) async fn pull_ahead(
        &self,
        reference: &str,
        progress: PullProgress<'_>,
    ) -> Result<(), LocalError> {
        let parsed = Reference::parse(reference).map_err(LocalError::Image)?;
        let store = self.store()?.clone();
        let (events, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let pulled = pull(store, parsed, self.pull_options(), events);
        tokio::pin!(pulled);
        loop {
            tokio::select! {
                Some(event) = heard.recv() => progress(PullEvent::from(event)),
                result = &mut pulled => {
                    while let Ok(event) = heard.try_recv() {
                        progress(PullEvent::from(event));
                    }
                    return result.map(drop);
                }
            }
        }
    }
}

impl Images {
    /// Pulls `reference` into the store as `policy` says (`Always` asks
    /// the registry even when the store has it, following a moved tag)
    /// and returns the image as stored. Nothing is pinned.
    pub(crate) async fn pull_as(
        &self,
        reference: &str,
        policy: PullPolicy,
    ) -> Result<Image, LocalError> {
        let parsed = Reference::parse(reference).map_err(LocalError::Image)?;
        let store = self.store()?.clone();
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let options = PullOptions {
            policy,
            ..self.pull_options()
        };
        pull(store, parsed, options, events).await
    }

    fn pull_options(&self) -> PullOptions {
        PullOptions {
            policy: PullPolicy::IfNotPresent,
            insecure: self.registries.insecure.clone(),
            platform: self.registries.platform.clone(),
            ..PullOptions::default()
        }
    }
}

/// Pulls `reference` into `store` unless it is there already, sending its
/// progress to `events`. The pull runs on a blocking thread that drives
/// it on the caller's runtime: its future is not `Send`, as the backend's
/// operations must be.
async fn pull(
    store: Store,
    reference: Reference,
    options: PullOptions,
    events: tokio::sync::mpsc::UnboundedSender<ProgressEvent>,
) -> Result<Image, LocalError> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let send = move |event| {
            let _ = events.send(event);
        };
        runtime.block_on(store.pull(&reference, &options, &send))
    })
    .await
    .map_err(|e| LocalError::Failed(format!("a pull failed: {e}")))?
    .map_err(LocalError::Image)
}

/// What sandboxes need of `image`.
fn ready_image(reference: &str, image: &Image, pin: Pin) -> Result<OciImage, LocalError> {
    let dirs = image.layer_dirs();
    let layers_dir = match dirs.first() {
        Some(first) => first
            .ancestors()
            .nth(2)
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        None => {
            return Err(LocalError::Rejected(format!(
                "image `{reference}` has no layers"
            )));
        }
    };
    let mut layers = Vec::with_capacity(dirs.len());
    for dir in &dirs {
        let relative = dir.strip_prefix(&layers_dir).map_err(|_| {
            LocalError::Failed(format!(
                "image `{reference}`: layer {} is not in {}",
                dir.display(),
                layers_dir.display()
            ))
        })?;
        layers.push(relative.to_string_lossy().into_owned());
    }
    let layers_dir = layers_dir.canonicalize().map_err(|source| LocalError::Io {
        context: format!("image `{reference}`: resolving {}", layers_dir.display()),
        source,
    })?;
    let env = image
        .config
        .env
        .iter()
        .filter_map(|entry| entry.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let nonempty = |text: &str| (!text.is_empty()).then(|| text.to_string());
    Ok(OciImage {
        layers_dir,
        layers,
        env,
        user: nonempty(&image.config.user).filter(|user| user != "root" && user != "0"),
        working_dir: nonempty(&image.config.working_dir),
        manifest: image.manifest.clone(),
        _pin: pin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_working_dir_is_the_workdir_where_it_can_be() {
        for (working_dir, usable) in [
            ("/testbed", true),
            ("/opt/app/", true),
            ("/", false),
            ("/tmp/x", false),
            ("/proc", false),
            ("relative", false),
            ("/a/../b", false),
        ] {
            assert_eq!(usable_workdir(working_dir), usable, "{working_dir}");
        }
    }
}
