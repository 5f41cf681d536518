//! Pulling an image into the store: resolve the reference to a platform
//! manifest and its config, record the image, fetch each missing layer
//! once (one fetch per layer in this process and across processes sharing
//! the store), and name the image last.
//!
//! What a resolved image is lives in `plan`, what a pull reports in
//! `progress`, and how a layer's bytes get from the registry to the
//! unpacker in `download`.

mod download;
mod plan;
mod progress;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::stream::{self, TryStreamExt as _};

use crate::auth::CredentialSource;
use crate::digest::Digest;
use crate::error::Error;
use crate::layer::Checked;
use crate::lock::{self, Mode};
use crate::platform::Platform;
use crate::reference::{Reference, Rewrites};
use crate::registry::Session;
use crate::retry::RetryPolicy;
use crate::spec::{Compression, Document};
use crate::store::{Image, LayerMeta, Pin, Record, RecordLayer, Store, joined};
use crate::unpack::{Job, UnpackLimits};

use download::download;
pub(crate) use plan::{Plan, PlannedLayer, plan, verify};
pub use progress::{Progress, ProgressEvent};

/// When a pull asks the registry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PullPolicy {
    /// Always resolve the reference at the registry (a moved tag is
    /// followed); layers already in the store are not fetched again.
    #[default]
    Always,
    /// Use the store's image when it has one under this reference; ask
    /// the registry only otherwise.
    IfNotPresent,
}

/// How to pull.
#[derive(Clone, Debug)]
pub struct PullOptions {
    /// The platform wanted from a manifest list or index (default: the
    /// host's).
    pub platform: Platform,
    /// Mirror rewrites applied to the reference before anything is asked.
    pub rewrites: Rewrites,
    /// Registries (`host` or `host:port`) that may be spoken to over plain
    /// HTTP; loopback registries always may.
    pub insecure: Vec<String>,
    /// Where credentials come from.
    pub credentials: CredentialSource,
    /// Whether to ask the registry when the store has the image.
    pub policy: PullPolicy,
    /// Layers fetched at once, per pull.
    pub concurrent_layers: usize,
    /// Retries of transient failures, per request and per layer.
    pub retry: RetryPolicy,
    /// Bounds on each layer's content.
    pub limits: UnpackLimits,
    /// How long to wait for a layer another process is fetching.
    pub lock_timeout: Duration,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            platform: Platform::host(),
            rewrites: Rewrites::default(),
            insecure: Vec::new(),
            credentials: CredentialSource::default(),
            policy: PullPolicy::default(),
            concurrent_layers: 3,
            retry: RetryPolicy::default(),
            limits: UnpackLimits::default(),
            lock_timeout: Duration::from_secs(30 * 60),
        }
    }
}
/// One reference's result from [`Store::missing`].
#[derive(Debug)]
pub struct Missing {
    /// The reference as asked.
    pub reference: Reference,
    /// The bytes its pull would download (layers wanted by an earlier
    /// reference of the same call are counted there only), or why it
    /// cannot be pulled.
    pub result: Result<u64, Error>,
}

impl Store {
    /// Pulls `reference` (after `options.rewrites`) into the store and
    /// names it there; `progress` hears of each step.
    ///
    /// # Errors
    ///
    /// Every [`Error`] variant that names a registry can come from here:
    /// [`Error::NotFound`] (HTTP 404), [`Error::Unreachable`],
    /// [`Error::Unauthorized`] (401/403), [`Error::CredentialHelper`],
    /// [`Error::Http`], [`Error::Protocol`], [`Error::NoPlatform`];
    /// and from the layers: [`Error::DigestMismatch`],
    /// [`Error::CorruptLayer`], [`Error::HostileLayer`],
    /// [`Error::DiskFull`], [`Error::Io`], [`Error::LockTimeout`]. A failed
    /// pull names nothing, and leaves no layer that counts as complete.
    pub async fn pull(
        &self,
        reference: &Reference,
        options: &PullOptions,
        progress: Progress<'_>,
    ) -> Result<Image, Error> {
        if options.policy == PullPolicy::IfNotPresent
            && let Ok(image) = self.image(reference)
        {
            return Ok(image);
        }
        let credentials = Arc::new(options.credentials.load()?);
        let target = options.rewrites.apply(reference)?;
        let shown = if target == *reference {
            reference.to_string()
        } else {
            format!("{reference} (via {target})")
        };
        let session = Session::new(
            &self.inner.registry,
            target,
            shown,
            &options.insecure,
            credentials,
            options.retry,
        );
        let plan = self.resolve(&session, &options.platform).await?;
        progress(ProgressEvent::Resolved {
            manifest: plan.manifest.clone(),
            layers: plan
                .layers
                .iter()
                .map(|l| (l.descriptor.digest.clone(), l.descriptor.size))
                .collect(),
        });
        let pin = self.record(&plan).await?;
        let session = &session;
        let plan_ref = &plan;
        stream::iter(plan.layers.iter().map(|planned| {
            let digest = planned.descriptor.digest.clone();
            let size = planned.descriptor.size;
            let compression = planned.compression;
            let diff_id = planned.diff_id.clone();
            self.ensure_layer(
                plan_ref,
                planned,
                options,
                progress,
                move |tmp: PathBuf, job: Job| {
                    let digest = digest.clone();
                    let diff_id = diff_id.clone();
                    async move {
                        download(
                            session,
                            &digest,
                            size,
                            compression,
                            &diff_id,
                            tmp,
                            job,
                            progress,
                        )
                        .await
                    }
                },
            )
        }))
        .buffer_unordered(options.concurrent_layers.max(1))
        .try_collect::<Vec<()>>()
        .await?;
        self.name(reference, &plan, pin)
    }

    /// For each reference, the bytes a pull would download now: the sizes
    /// of its layers the store lacks (a reference the store has counts 0
    /// with [`PullPolicy::IfNotPresent`]). Asks registries for manifests
    /// and configs only.
    pub async fn missing(&self, references: &[Reference], options: &PullOptions) -> Vec<Missing> {
        let mut counted: HashSet<Digest> = HashSet::new();
        let mut out = Vec::new();
        for reference in references {
            let result = self.missing_one(reference, options, &mut counted).await;
            out.push(Missing {
                reference: reference.clone(),
                result,
            });
        }
        out
    }

    async fn missing_one(
        &self,
        reference: &Reference,
        options: &PullOptions,
        counted: &mut HashSet<Digest>,
    ) -> Result<u64, Error> {
        if options.policy == PullPolicy::IfNotPresent && self.image(reference).is_ok() {
            return Ok(0);
        }
        let credentials = Arc::new(options.credentials.load()?);
        let target = options.rewrites.apply(reference)?;
        let session = Session::new(
            &self.inner.registry,
            target,
            reference.to_string(),
            &options.insecure,
            credentials,
            options.retry,
        );
        let plan = self.resolve(&session, &options.platform).await?;
        Ok(plan
            .layers
            .iter()
            .filter(|l| self.layer_meta(&l.diff_id).is_none() && counted.insert(l.diff_id.clone()))
            .map(|l| l.descriptor.size)
            .sum())
    }

    /// The reference's platform manifest and config.
    async fn resolve(&self, session: &Session<'_>, platform: &Platform) -> Result<Plan, Error> {
        let target = session.target();
        let wanted = target.digest();
        let (bytes, media_type) = self
            .manifest_bytes(session, &target.manifest_key(), wanted)
            .await?;
        let document =
            Document::parse(media_type.as_deref(), &bytes).map_err(|e| session.protocol(e))?;
        let (manifest, manifest_bytes, index) = match document {
            Document::Manifest(manifest) => (manifest, bytes, None),
            Document::Index(index) => {
                let index_digest = Digest::of(&bytes);
                let chosen = crate::platform::choose(&index, platform).map_err(|available| {
                    Error::NoPlatform {
                        reference: session.shown().to_string(),
                        wanted: platform.to_string(),
                        available,
                    }
                })?;
                let (inner, media_type) = self
                    .manifest_bytes(session, &chosen.digest.to_string(), Some(&chosen.digest))
                    .await?;
                match Document::parse(media_type.as_deref(), &inner)
                    .map_err(|e| session.protocol(e))?
                {
                    Document::Manifest(manifest) => (manifest, inner, Some((index_digest, bytes))),
                    Document::Index(_) => {
                        return Err(session.protocol(format!(
                            "the index's entry {} is another index",
                            chosen.digest
                        )));
                    }
                }
            }
        };
        let manifest_digest = Digest::of(&manifest_bytes);
        let config_digest = manifest.config.digest.clone();
        let config_bytes = match self.read_blob(&config_digest) {
            Some(bytes) => Bytes::from(bytes),
            None => {
                let bytes = session.small_blob(&config_digest).await?;
                verify(session.shown(), "config", &config_digest, &bytes)?;
                bytes
            }
        };
        let layers = manifest
            .layers
            .iter()
            .map(|d| {
                let compression = Compression::of_media_type(&d.media_type).ok_or_else(|| {
                    Error::Unsupported {
                        reference: session.shown().to_string(),
                        detail: format!(
                            "layer {} has media type {:?}, which is not a layer tar",
                            d.digest, d.media_type
                        ),
                    }
                })?;
                Ok((d.clone(), Some(compression)))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        plan(
            session.shown(),
            manifest_digest,
            manifest_bytes,
            index,
            config_digest,
            config_bytes,
            layers,
        )
        .map_err(|detail| session.protocol(detail))
    }

    /// A manifest by tag or digest, checked against the digest when one
    /// was asked for.
    async fn manifest_bytes(
        &self,
        session: &Session<'_>,
        key: &str,
        wanted: Option<&Digest>,
    ) -> Result<(Bytes, Option<String>), Error> {
        if let Some(digest) = wanted
            && let Some(bytes) = self.read_blob(digest)
        {
            return Ok((Bytes::from(bytes), None));
        }
        let (bytes, media_type) = session.manifest(key).await?;
        if let Some(digest) = wanted {
            verify(session.shown(), "manifest", digest, &bytes)?;
        }
        Ok((bytes, media_type))
    }

    /// Stores the plan's documents and its record, pinned, with the
    /// collector held off meanwhile.
    pub(crate) async fn record(&self, plan: &Plan) -> Result<Pin, Error> {
        self.write_blob(&plan.manifest, &plan.manifest_bytes)?;
        self.write_blob(&plan.config_digest, &plan.config_bytes)?;
        if let Some((digest, bytes)) = &plan.index {
            self.write_blob(digest, bytes)?;
        }
        let _gc = self.gc_lock(Mode::Shared, &plan.shown).await?;
        let pin = self.pin_manifest(&plan.manifest, &plan.shown)?;
        let config = &plan.config;
        self.write_record(&Record {
            manifest: plan.manifest.clone(),
            config: plan.config_digest.clone(),
            platform: Platform {
                os: config.os.clone(),
                architecture: config.architecture.clone(),
                variant: config.variant.clone(),
            },
            run: config.config.clone().unwrap_or_default(),
            layers: plan
                .layers
                .iter()
                .map(|l| RecordLayer {
                    digest: l.descriptor.digest.clone(),
                    diff_id: l.diff_id.clone(),
                    size: l.descriptor.size,
                })
                .collect(),
        })?;
        Ok(pin)
    }

    /// Names the recorded, complete image `reference`.
    pub(crate) fn name(
        &self,
        reference: &Reference,
        plan: &Plan,
        pin: Pin,
    ) -> Result<Image, Error> {
        self.write_ref(
            reference,
            &plan.manifest,
            plan.index.as_ref().map(|(d, _)| d),
        )?;
        self.touch_image(&plan.manifest, plan.layers.iter().map(|l| &l.diff_id));
        drop(pin);
        self.image(reference)
    }

    /// Makes sure the layer is unpacked in the store, fetching it with
    /// `fetch` (into a temporary directory) only if no one has or is.
    pub(crate) async fn ensure_layer<F, Fut>(
        &self,
        plan: &Plan,
        planned: &PlannedLayer,
        options_retry: &impl LayerOptions,
        progress: Progress<'_>,
        fetch: F,
    ) -> Result<(), Error>
    where
        F: Fn(PathBuf, Job) -> Fut,
        Fut: Future<Output = Result<Checked, Error>>,
    {
        let digest = &planned.descriptor.digest;
        let diff_id = &planned.diff_id;
        let done = || self.layer_meta(diff_id).is_some();
        if done() {
            progress(ProgressEvent::LayerExists {
                layer: digest.clone(),
            });
            return Ok(());
        }
        let mutex = self.inflight(diff_id);
        let _mine = match mutex.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                progress(ProgressEvent::LayerWaiting {
                    layer: digest.clone(),
                });
                mutex.lock().await
            }
        };
        if done() {
            progress(ProgressEvent::LayerExists {
                layer: digest.clone(),
            });
            return Ok(());
        }
        let lock_path = self.layer_lock_path(diff_id);
        let timeout = options_retry.lock_timeout();
        let _held = lock::lock_until(&lock_path, Mode::Exclusive, timeout, || {
            progress(ProgressEvent::LayerWaiting {
                layer: digest.clone(),
            });
        })
        .await
        .map_err(|e| Error::io(&plan.shown, "locking", &lock_path, e))?
        .ok_or_else(|| Error::LockTimeout {
            reference: plan.shown.clone(),
            what: format!("layer {digest} (another process is fetching it)"),
            waited: timeout,
        })?;
        if done() {
            progress(ProgressEvent::LayerExists {
                layer: digest.clone(),
            });
            return Ok(());
        }
        // Holding the layer's lock, any temporary of it is a leftover.
        self.clean_temporaries(Some(&self.temporary_prefix(diff_id)))?;
        let attempt = || async {
            let tmp = self.temporary(diff_id);
            let result = self
                .fetch_into(plan, planned, options_retry.limits(), &tmp, &fetch)
                .await;
            if result.is_err() {
                let _ = crate::fsx::remove_tree(&tmp);
            }
            result
        };
        options_retry
            .retry()
            .run(attempt, |error, _| {
                progress(ProgressEvent::LayerRetrying {
                    layer: digest.clone(),
                    reason: error.to_string(),
                })
            })
            .await?;
        progress(ProgressEvent::LayerDone {
            layer: digest.clone(),
        });
        Ok(())
    }

    async fn fetch_into<F, Fut>(
        &self,
        plan: &Plan,
        planned: &PlannedLayer,
        limits: UnpackLimits,
        tmp: &Path,
        fetch: &F,
    ) -> Result<(), Error>
    where
        F: Fn(PathBuf, Job) -> Fut,
        Fut: Future<Output = Result<Checked, Error>>,
    {
        let root = tmp.join("root");
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&plan.shown, "creating", &root, e))?;
        let job = Job {
            reference: plan.shown.clone(),
            layer: planned.descriptor.digest.clone(),
            ownership: self.inner.ownership,
            limits,
        };
        let checked = fetch(root, job).await?;
        let meta = LayerMeta {
            diff_id: planned.diff_id.clone(),
            blob: Some(checked.blob),
            blob_size: Some(checked.blob_size),
            bytes: checked.unpacked.bytes,
            entries: checked.unpacked.entries,
        };
        self.write_json(&tmp.join("layer.json"), &meta)?;
        let dir = self.layer_dir(&planned.diff_id);
        let shown = plan.shown.clone();
        let tmp_owned = tmp.to_path_buf();
        tokio::task::spawn_blocking(move || seal(&tmp_owned, &dir, &shown))
            .await
            .map_err(|e| joined(&plan.shown, e))?
    }
}

/// The pull options a layer fetch needs; imports have their own.
pub(crate) trait LayerOptions {
    fn limits(&self) -> UnpackLimits;
    fn retry(&self) -> RetryPolicy;
    fn lock_timeout(&self) -> Duration;
}

impl LayerOptions for PullOptions {
    fn limits(&self) -> UnpackLimits {
        self.limits
    }
    fn retry(&self) -> RetryPolicy {
        self.retry
    }
    fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }
}

/// Flushes the unpacked layer to disk and renames it into place: only
/// then does it count as complete.
fn seal(tmp: &Path, dir: &Path, shown: &str) -> Result<(), Error> {
    let fd = rustix::fs::open(
        tmp,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::io(shown, "opening", tmp, e.into()))?;
    rustix::fs::syncfs(&fd).map_err(|e| Error::io(shown, "syncing", tmp, e.into()))?;
    // The layer directory itself is traversable by everyone: the sandbox
    // runtime mounts it as whatever user it maps to root.
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o755))
        .map_err(|e| Error::io(shown, "opening up", tmp, e.into()))?;
    std::fs::rename(tmp, dir).map_err(|e| Error::io(shown, "renaming into place", dir, e))
}
