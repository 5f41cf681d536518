//! Pulling an image into the store: resolve the reference to a platform
//! manifest and its config, record the image, fetch each missing layer
//! once (one fetch per layer in this process and across processes sharing
//! the store), and name the image last.

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::stream::{self, TryStreamExt as _};
use tokio::sync::mpsc;

use crate::auth::CredentialSource;
use crate::digest::Digest;
use crate::error::Error;
use crate::layer::{self, Checked, Expected};
use crate::lock::{self, Mode};
use crate::platform::Platform;
use crate::reference::{Reference, Rewrites};
use crate::registry::Session;
use crate::retry::RetryPolicy;
use crate::spec::{Compression, Descriptor, Document, ImageConfigFile};
use crate::store::{Image, LayerMeta, Pin, Record, RecordLayer, Store, joined};
use crate::unpack::{Job, UnpackLimits};

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

/// What a pull reports as it goes, for a display like `docker pull`'s.
/// Layer events may come from several layers at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressEvent {
    /// The reference resolved to a manifest with these layers.
    Resolved {
        /// The manifest's digest.
        manifest: Digest,
        /// The layers' blob digests and sizes, lowest first.
        layers: Vec<(Digest, u64)>,
    },
    /// The layer is in the store already.
    LayerExists {
        /// The layer's blob digest.
        layer: Digest,
    },
    /// Another pull (in this process or another) is fetching the layer.
    LayerWaiting {
        /// The layer's blob digest.
        layer: Digest,
    },
    /// Bytes of the layer downloaded so far.
    LayerProgress {
        /// The layer's blob digest.
        layer: Digest,
        /// Bytes so far.
        done: u64,
        /// Bytes in all.
        total: u64,
    },
    /// A layer's fetch failed and will be tried again.
    LayerRetrying {
        /// The layer's blob digest.
        layer: Digest,
        /// Why.
        reason: String,
    },
    /// The layer is unpacked and verified.
    LayerDone {
        /// The layer's blob digest.
        layer: Digest,
    },
}

impl From<ProgressEvent> for sandfleet_core::PullEvent {
    /// The event as a backend reports it to the engine, layers named by
    /// their digests' text.
    fn from(event: ProgressEvent) -> Self {
        use sandfleet_core::PullEvent;
        match event {
            ProgressEvent::Resolved { layers, .. } => PullEvent::Resolved {
                layers: layers
                    .into_iter()
                    .map(|(layer, size)| (layer.to_string(), size))
                    .collect(),
            },
            ProgressEvent::LayerExists { layer } => PullEvent::LayerExists {
                layer: layer.to_string(),
            },
            ProgressEvent::LayerWaiting { layer } => PullEvent::LayerWaiting {
                layer: layer.to_string(),
            },
            ProgressEvent::LayerProgress { layer, done, total } => PullEvent::LayerProgress {
                layer: layer.to_string(),
                done,
                total,
            },
            ProgressEvent::LayerRetrying { layer, reason } => PullEvent::LayerRetrying {
                layer: layer.to_string(),
                reason,
            },
            ProgressEvent::LayerDone { layer } => PullEvent::LayerDone {
                layer: layer.to_string(),
            },
        }
    }
}

/// The progress callback's type.
pub type Progress<'a> = &'a (dyn Fn(ProgressEvent) + Send + Sync);

/// A resolved image, ready to be recorded and fetched.
pub(crate) struct Plan {
    pub(crate) shown: String,
    pub(crate) manifest: Digest,
    pub(crate) manifest_bytes: Bytes,
    pub(crate) index: Option<(Digest, Bytes)>,
    pub(crate) config_digest: Digest,
    pub(crate) config_bytes: Bytes,
    pub(crate) config: ImageConfigFile,
    pub(crate) layers: Vec<PlannedLayer>,
}

pub(crate) struct PlannedLayer {
    pub(crate) descriptor: Descriptor,
    pub(crate) diff_id: Digest,
    /// `None` to tell by the blob's first bytes.
    pub(crate) compression: Option<Compression>,
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

/// Checks a document against its digest.
pub(crate) fn verify(shown: &str, what: &str, digest: &Digest, bytes: &[u8]) -> Result<(), Error> {
    let actual = Digest::of(bytes);
    if actual == *digest {
        Ok(())
    } else {
        Err(Error::DigestMismatch {
            reference: shown.to_string(),
            what: what.to_string(),
            expected: digest.clone(),
            actual,
        })
    }
}

/// A plan from a manifest's parts, checking the config against the layer
/// list.
pub(crate) fn plan(
    shown: &str,
    manifest: Digest,
    manifest_bytes: Bytes,
    index: Option<(Digest, Bytes)>,
    config_digest: Digest,
    config_bytes: Bytes,
    layers: Vec<(Descriptor, Option<Compression>)>,
) -> Result<Plan, String> {
    let config: ImageConfigFile = serde_json::from_slice(&config_bytes)
        .map_err(|e| format!("the config {config_digest} is not an image config: {e}"))?;
    if config.rootfs.diff_ids.len() != layers.len() {
        return Err(format!(
            "the manifest lists {} layers and the config {} diff_ids",
            layers.len(),
            config.rootfs.diff_ids.len()
        ));
    }
    let layers = layers
        .into_iter()
        .zip(&config.rootfs.diff_ids)
        .map(|((descriptor, compression), diff_id)| PlannedLayer {
            descriptor,
            diff_id: diff_id.clone(),
            compression,
        })
        .collect();
    Ok(Plan {
        shown: shown.to_string(),
        manifest,
        manifest_bytes,
        index,
        config_digest,
        config_bytes,
        config,
        layers,
    })
}

/// Downloads a layer blob and unpacks it as it arrives: the body streams
/// through a channel to a blocking thread that decompresses, hashes and
/// writes.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site; the pieces of one layer"
)]
async fn download(
    session: &Session<'_>,
    digest: &Digest,
    size: u64,
    compression: Option<Compression>,
    diff_id: &Digest,
    root: PathBuf,
    job: Job,
    progress: Progress<'_>,
) -> Result<Checked, Error> {
    let response = session.blob(digest).await?;
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(32);
    let expected_digest = digest.clone();
    let expected_diff_id = diff_id.clone();
    let shown = session.shown().to_string();
    let unpacker = tokio::task::spawn_blocking(move || {
        let expected = Expected {
            blob: Some((&expected_digest, size)),
            diff_id: &expected_diff_id,
            compression,
        };
        layer::unpack_blob(ChannelReader::new(rx), &root, &job, &expected)
    });
    let mut body = response.bytes_stream();
    let mut done = 0u64;
    let mut broke = None;
    progress(ProgressEvent::LayerProgress {
        layer: digest.clone(),
        done,
        total: size,
    });
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => {
                done += chunk.len() as u64;
                if tx.send(Ok(chunk)).await.is_err() {
                    // The unpacker stopped; its error says why.
                    break;
                }
                progress(ProgressEvent::LayerProgress {
                    layer: digest.clone(),
                    done,
                    total: size,
                });
                if done > size {
                    break;
                }
            }
            Err(error) => {
                let _ = tx.send(Err(io::Error::other(error.to_string()))).await;
                broke = Some(session.lost(&error));
                break;
            }
        }
    }
    drop(tx);
    let unpacked = unpacker.await.map_err(|e| joined(&shown, e))?;
    // A broken download explains whatever the unpacker made of it, and
    // is worth another attempt.
    match broke {
        Some(error) => Err(error),
        None => unpacked,
    }
}

/// The blocking side of the download channel.
struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChannelReader {
    fn new(rx: mpsc::Receiver<io::Result<Bytes>>) -> Self {
        ChannelReader {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(error)) => return Err(error),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}
