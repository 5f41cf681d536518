//! The content-addressed layer store of one state directory: its layout,
//! image records, references, pins, removal and pruning.
//!
//! ```text
//! <state_dir>/images/oci/
//!   gc.lock                         pulls share it while recording an image;
//!                                   prune and remove hold it alone
//!   blobs/sha256/<hex>              manifests, indexes and configs, verified
//!   refs/<sha256 of the ref>.json   {reference, manifest, index}: what a name means
//!   images/<manifest hex>.json      the image record (config, layer list, platform);
//!                                   its mtime is when it was last used
//!   images/<manifest hex>.pin       shared-locked by every Pin of the image
//!   layers/<ownership>/<diff_id hex>/root/      the unpacked layer: an overlay lower dir
//!   layers/<ownership>/<diff_id hex>/layer.json what it holds; its mtime is when it
//!                                               was last used
//!   layers/<ownership>/<diff_id hex>.lock       held by whoever is unpacking it
//!   tmp/<ownership>-<diff_id hex>.<pid>.<n>/    unpacks in progress, or left by killed ones
//! ```
//!
//! Layers are keyed by their uncompressed digest (`diff_id`), so one
//! layer pulled gzip from one registry and zstd from another, or imported
//! from a `docker save` tarball, is unpacked once; and by [`Ownership`], so
//! a store serves a root runtime's shifted owners and a rootless caller's
//! side by side. A layer directory exists only complete: it is unpacked
//! under `tmp/` and renamed into place last, after a `syncfs`. A record
//! is written before its layers are fetched (so prune sees what an
//! unfinished pull needs), and a reference only after all of them are in
//! place, so a name never means an incomplete image.
//!
//! What an image looks like to callers is in `image`, the files' formats
//! in `records`, and what prune and remove delete, in `collect`.

mod collect;
mod image;
mod records;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::digest::Digest;
use crate::error::Error;
use crate::fsx;
use crate::lock::{self, Lock, Mode};
use crate::ownership::Ownership;
use crate::reference::Reference;
use crate::registry::Registry;

use collect::Collector;
pub use collect::PruneReport;
pub use image::{Image, LayerInfo};
pub(crate) use records::{LayerMeta, Record, RecordLayer, RefFile, read_json};
use records::{read_dir, touch};

/// How long a call waits for the store's collector lock (held by a prune
/// or a remove while it deletes).
pub(crate) const GC_LOCK_WAIT: Duration = Duration::from_secs(120);
/// What the store's messages name when no image is involved.
pub(crate) const STORE: &str = "image store";

/// The layer store of one state directory. Cheap to clone; clones share
/// the HTTP client, its tokens, and the in-process record of layers being
/// fetched.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) root: PathBuf,
    pub(crate) ownership: Ownership,
    pub(crate) registry: Registry,
    /// One async mutex per layer being fetched in this process: the
    /// first caller fetches, the others wait and find it done.
    inflight: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

/// Numbers the temporary names of this process. Process-wide, not per
/// store: two stores opened on one directory in one process (tests, a
/// daemon's clusters) would otherwise pick the same name and move each
/// other's files.
static TEMPORARY_NAMES: AtomicU64 = AtomicU64::new(0);

fn temporary_number() -> u64 {
    TEMPORARY_NAMES.fetch_add(1, Ordering::Relaxed)
}

/// Keeps an image from being pruned or removed while it lives (a sandbox
/// of the image holds one). Held as a shared `flock`, so it also holds
/// against other processes; dropping it releases the image.
#[derive(Debug)]
pub struct Pin {
    _lock: Lock,
}

impl Store {
    /// Opens (creating it if needed) the store under `state_dir`
    /// (`<state_dir>/images/oci`), unpacking layers with `ownership`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the directories cannot be created;
    /// [`Error::Unsupported`] when no HTTP client can be built.
    pub fn open(state_dir: &Path, ownership: Ownership) -> Result<Self, Error> {
        let root = state_dir.join("images").join("oci");
        let store = Store {
            inner: Arc::new(Inner {
                registry: Registry::new().map_err(|detail| Error::Unsupported {
                    reference: STORE.to_string(),
                    detail,
                })?,
                root,
                ownership,
                inflight: Mutex::new(HashMap::new()),
            }),
        };
        for dir in [
            store.blobs_dir(),
            store.inner.root.join("refs"),
            store.inner.root.join("images"),
            store.layer_root(),
            store.inner.root.join("tmp"),
        ] {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(STORE, "creating", &dir, e))?;
        }
        Ok(store)
    }

    /// The store's directory (`<state_dir>/images/oci`).
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// How it unpacks layers.
    pub fn ownership(&self) -> Ownership {
        self.inner.ownership
    }

    /// The complete image a reference names, from the store alone (no
    /// network).
    ///
    /// # Errors
    ///
    /// [`Error::NotPulled`] when the store has no complete image under
    /// `reference`; [`Error::Io`] when its files cannot be read.
    pub fn image(&self, reference: &Reference) -> Result<Image, Error> {
        let not_pulled = || Error::NotPulled {
            reference: reference.to_string(),
        };
        let Some(found) = self.read_ref(reference)? else {
            return Err(not_pulled());
        };
        let record = self.read_record(&found.manifest)?.ok_or_else(not_pulled)?;
        let image = self.image_of(reference.clone(), &record)?;
        if image.layers.iter().any(|l| l.unpacked_size.is_none()) {
            return Err(not_pulled());
        }
        Ok(image)
    }

    /// Every complete image, each with all its references, newest use
    /// first.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the store cannot be read.
    pub fn list(&self) -> Result<Vec<Image>, Error> {
        let mut names: BTreeMap<Digest, Vec<Reference>> = BTreeMap::new();
        for found in self.read_refs()? {
            if let Ok(reference) = Reference::parse(&found.reference) {
                names.entry(found.manifest).or_default().push(reference);
            }
        }
        let mut images = Vec::new();
        for (manifest, references) in names {
            let Some(record) = self.read_record(&manifest)? else {
                continue;
            };
            let image = self.image_of(references[0].clone(), &record)?;
            if image.layers.iter().all(|l| l.unpacked_size.is_some()) {
                images.push(image);
            }
        }
        images.sort_by(|a, b| {
            b.last_used
                .cmp(&a.last_used)
                .then_with(|| a.reference.cmp(&b.reference))
        });
        Ok(images)
    }

    /// Pins `image` for as long as the returned guard lives, and marks it
    /// used now.
    ///
    /// # Errors
    ///
    /// [`Error::NotPulled`] when it was removed or pruned meanwhile (pull
    /// it again); [`Error::Io`] when the pin cannot be taken.
    pub fn pin(&self, image: &Image) -> Result<Pin, Error> {
        let path = self.pin_path(&image.manifest);
        // A prune or remove holds an image's pin exclusively only while
        // it deletes that image, so this waits briefly if at all.
        let lock = lock::lock_blocking(&path, Mode::Shared)
            .map_err(|e| Error::io(&image.reference.to_string(), "locking", &path, e))?;
        let present = self.read_record(&image.manifest)?.is_some()
            && image
                .layer_dirs()
                .iter()
                .all(|dir| dir.parent().is_some_and(|d| d.join("layer.json").exists()));
        if !present {
            return Err(Error::NotPulled {
                reference: image.reference.to_string(),
            });
        }
        self.touch_image(&image.manifest, image.layers.iter().map(|l| &l.diff_id));
        Ok(Pin { _lock: lock })
    }

    /// Removes `reference`; when no other reference names its image, the
    /// image and the layers no other image uses go too.
    ///
    /// # Errors
    ///
    /// [`Error::NotPulled`] for a reference the store does not have;
    /// [`Error::InUse`] when the image is pinned; [`Error::LockTimeout`]
    /// when a prune holds the store for too long.
    pub async fn remove(&self, reference: &Reference) -> Result<(), Error> {
        let shown = reference.to_string();
        let _gc = self.gc_lock(Mode::Exclusive, &shown).await?;
        let this = self.clone();
        let reference = reference.clone();
        tokio::task::spawn_blocking(move || this.remove_now(&reference))
            .await
            .map_err(|e| joined(&shown, e))?
    }

    fn remove_now(&self, reference: &Reference) -> Result<(), Error> {
        let shown = reference.to_string();
        let Some(found) = self.read_ref(reference)? else {
            return Err(Error::NotPulled { reference: shown });
        };
        let others = self
            .read_refs()?
            .into_iter()
            .filter(|r| r.manifest == found.manifest && r.reference != found.reference)
            .count();
        if others > 0 {
            return self.delete_file(&self.ref_path(reference));
        }
        let pin_path = self.pin_path(&found.manifest);
        let Some(_held) = lock::try_lock(&pin_path, Mode::Exclusive)
            .map_err(|e| Error::io(&shown, "locking", &pin_path, e))?
        else {
            return Err(Error::InUse { reference: shown });
        };
        self.delete_file(&self.ref_path(reference))?;
        self.delete_image(&found.manifest)?;
        let _ = std::fs::remove_file(&pin_path);
        Collector { store: self }.run(&mut PruneReport::default(), None)?;
        Ok(())
    }

    /// Frees disk: removes what killed pulls left, then layers no image
    /// uses (least recently used first), then, while the store holds more
    /// than `budget` bytes of layer content, the least recently used
    /// images that are not pinned with their layers no other image uses.
    /// Without a budget, every unused layer goes and every image stays.
    ///
    /// # Errors
    ///
    /// [`Error::LockTimeout`] when pulls keep the store busy too long;
    /// [`Error::Io`] when something cannot be removed.
    pub async fn prune(&self, budget: Option<u64>) -> Result<PruneReport, Error> {
        let _gc = self.gc_lock(Mode::Exclusive, STORE).await?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut report = PruneReport::default();
            Collector { store: &this }.run(&mut report, budget)?;
            Ok(report)
        })
        .await
        .map_err(|e| joined(STORE, e))?
    }

    /// Removes temporaries nobody is working on: those of `only` (a layer
    /// whose lock the caller holds), or all whose layer lock is free.
    pub(crate) fn clean_temporaries(&self, only: Option<&str>) -> Result<usize, Error> {
        let tmp = self.inner.root.join("tmp");
        let mut removed = 0;
        for entry in read_dir(&tmp)? {
            let name = entry.to_string_lossy().into_owned();
            let Some((layer, _)) = name.split_once('.') else {
                continue;
            };
            let held = match only {
                Some(only) if layer != only => continue,
                Some(_) => None,
                None => {
                    let Some((key, hex)) = layer.rsplit_once('-') else {
                        continue;
                    };
                    let lock_path = self.layer_root_for(key).join(format!("{hex}.lock"));
                    match lock::try_lock(&lock_path, Mode::Exclusive) {
                        Ok(Some(held)) => Some(held),
                        // No layer directory for that ownership: nobody
                        // can be unpacking into it.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                        _ => continue,
                    }
                }
            };
            let path = tmp.join(&entry);
            fsx::remove_tree(&path).map_err(|e| Error::io(STORE, "removing", &path, e))?;
            drop(held);
            removed += 1;
        }
        Ok(removed)
    }

    pub(crate) fn image_of(&self, reference: Reference, record: &Record) -> Result<Image, Error> {
        let references = self
            .read_refs()?
            .into_iter()
            .filter(|r| r.manifest == record.manifest)
            .filter_map(|r| Reference::parse(&r.reference).ok())
            .collect();
        let layers = record
            .layers
            .iter()
            .map(|l| {
                let meta = self.layer_meta(&l.diff_id);
                LayerInfo {
                    digest: l.digest.clone(),
                    diff_id: l.diff_id.clone(),
                    size: l.size,
                    unpacked_size: meta.map(|m| m.bytes),
                }
            })
            .collect();
        Ok(Image {
            reference,
            references,
            manifest: record.manifest.clone(),
            config_digest: record.config.clone(),
            platform: record.platform.clone(),
            config: record.run.clone(),
            layers,
            last_used: self.record_used(&record.manifest),
            layer_root: self.layer_root(),
        })
    }

    // ---- layout -------------------------------------------------------

    pub(crate) fn blobs_dir(&self) -> PathBuf {
        self.inner.root.join("blobs").join("sha256")
    }

    /// Where this store's ownership keeps its layers.
    pub(crate) fn layer_root(&self) -> PathBuf {
        self.layer_root_for(&self.inner.ownership.key())
    }

    fn layer_root_for(&self, key: &str) -> PathBuf {
        self.inner.root.join("layers").join(key)
    }

    pub(crate) fn layer_dir(&self, diff_id: &Digest) -> PathBuf {
        self.layer_root().join(diff_id.hex())
    }

    pub(crate) fn layer_lock_path(&self, diff_id: &Digest) -> PathBuf {
        self.layer_root().join(format!("{}.lock", diff_id.hex()))
    }

    /// A fresh temporary directory name for unpacking `diff_id`.
    pub(crate) fn temporary(&self, diff_id: &Digest) -> PathBuf {
        let n = temporary_number();
        self.inner.root.join("tmp").join(format!(
            "{}.{}.{n}",
            self.temporary_prefix(diff_id),
            std::process::id()
        ))
    }

    pub(crate) fn temporary_prefix(&self, diff_id: &Digest) -> String {
        format!("{}-{}", self.inner.ownership.key(), diff_id.hex())
    }

    fn record_path(&self, manifest: &Digest) -> PathBuf {
        self.inner
            .root
            .join("images")
            .join(format!("{}.json", manifest.hex()))
    }

    fn pin_path(&self, manifest: &Digest) -> PathBuf {
        self.inner
            .root
            .join("images")
            .join(format!("{}.pin", manifest.hex()))
    }

    fn ref_path(&self, reference: &Reference) -> PathBuf {
        let name = Digest::of(reference.to_string().as_bytes());
        self.inner
            .root
            .join("refs")
            .join(format!("{}.json", name.hex()))
    }

    // ---- records, references, layers -----------------------------------

    pub(crate) fn layer_meta(&self, diff_id: &Digest) -> Option<LayerMeta> {
        read_json(&self.layer_dir(diff_id).join("layer.json"))
            .ok()
            .flatten()
    }

    pub(crate) fn read_record(&self, manifest: &Digest) -> Result<Option<Record>, Error> {
        read_json(&self.record_path(manifest))
    }

    fn read_records(&self) -> Result<Vec<Record>, Error> {
        let dir = self.inner.root.join("images");
        let mut records = Vec::new();
        for name in read_dir(&dir)? {
            let name = name.to_string_lossy();
            let Some(hex) = name.strip_suffix(".json") else {
                continue;
            };
            if let Some(digest) = Digest::from_hex(hex)
                && let Some(record) = self.read_record(&digest)?
            {
                records.push(record);
            }
        }
        Ok(records)
    }

    pub(crate) fn write_record(&self, record: &Record) -> Result<(), Error> {
        self.write_json(&self.record_path(&record.manifest), record)
    }

    fn read_ref(&self, reference: &Reference) -> Result<Option<RefFile>, Error> {
        read_json(&self.ref_path(reference))
    }

    fn read_refs(&self) -> Result<Vec<RefFile>, Error> {
        let dir = self.inner.root.join("refs");
        let mut refs = Vec::new();
        for name in read_dir(&dir)? {
            if let Some(found) = read_json::<RefFile>(&dir.join(name))? {
                refs.push(found);
            }
        }
        Ok(refs)
    }

    pub(crate) fn write_ref(
        &self,
        reference: &Reference,
        manifest: &Digest,
        index: Option<&Digest>,
    ) -> Result<(), Error> {
        let found = RefFile {
            reference: reference.to_string(),
            manifest: manifest.clone(),
            index: index.cloned(),
        };
        self.write_json(&self.ref_path(reference), &found)
    }

    /// Stores a verified blob (a manifest, index or config) under its
    /// digest.
    pub(crate) fn write_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<(), Error> {
        let path = self.blobs_dir().join(digest.hex());
        if path.exists() {
            return Ok(());
        }
        self.write_atomic(&path, bytes)
    }

    /// A stored blob, if the store has it.
    pub(crate) fn read_blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.blobs_dir().join(digest.hex())).ok()?;
        (Digest::of(&bytes) == *digest).then_some(bytes)
    }

    fn delete_image(&self, manifest: &Digest) -> Result<(), Error> {
        self.delete_file(&self.record_path(manifest))
    }

    fn delete_file(&self, path: &Path) -> Result<(), Error> {
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(STORE, "removing", path, e)),
        }
    }

    /// Marks an image and its layers used now (their files' mtimes are
    /// the store's LRU clock). Best effort: a clock that cannot be set
    /// only makes prune's order less exact.
    pub(crate) fn touch_image<'d>(
        &self,
        manifest: &Digest,
        diff_ids: impl Iterator<Item = &'d Digest>,
    ) {
        let _ = touch(&self.record_path(manifest));
        for diff_id in diff_ids {
            let _ = touch(&self.layer_dir(diff_id).join("layer.json"));
        }
    }

    fn record_used(&self, manifest: &Digest) -> SystemTime {
        std::fs::metadata(self.record_path(manifest))
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }

    pub(crate) fn write_json<T: Serialize>(&self, path: &Path, value: &T) -> Result<(), Error> {
        let bytes = serde_json::to_vec_pretty(value)
            .map_err(|e| Error::io(STORE, "encoding", path, io::Error::other(e)))?;
        self.write_atomic(path, &bytes)
    }

    /// Writes through a temporary file renamed into place, so readers see
    /// the old file or the new one.
    pub(crate) fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), Error> {
        let n = temporary_number();
        let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|e| Error::io(STORE, "writing", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(STORE, "renaming", path, e)
        })
    }

    // ---- locks -----------------------------------------------------------

    pub(crate) async fn gc_lock(&self, mode: Mode, shown: &str) -> Result<Lock, Error> {
        let path = self.inner.root.join("gc.lock");
        lock::lock_until(&path, mode, GC_LOCK_WAIT, || {
            tracing::info!("waiting for the image store's collector lock");
        })
        .await
        .map_err(|e| Error::io(shown, "locking", &path, e))?
        .ok_or_else(|| Error::LockTimeout {
            reference: shown.to_string(),
            what: "the image store (a prune or remove)".to_string(),
            waited: GC_LOCK_WAIT,
        })
    }

    /// Takes this image's pin for a pull that is recording it (the gc
    /// lock is held shared, so no prune holds the pin exclusively).
    pub(crate) fn pin_manifest(&self, manifest: &Digest, shown: &str) -> Result<Pin, Error> {
        let path = self.pin_path(manifest);
        let lock = lock::lock_blocking(&path, Mode::Shared)
            .map_err(|e| Error::io(shown, "locking", &path, e))?;
        Ok(Pin { _lock: lock })
    }

    /// This process's mutex for fetching a layer.
    pub(crate) fn inflight(&self, diff_id: &Digest) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self
            .inner
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = self.temporary_prefix(diff_id);
        if let Some(existing) = map.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        map.retain(|_, weak| weak.strong_count() > 0);
        let fresh = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(key, Arc::downgrade(&fresh));
        fresh
    }
}

pub(crate) fn joined(shown: &str, error: tokio::task::JoinError) -> Error {
    Error::Io {
        reference: shown.to_string(),
        what: "a store task".to_string(),
        source: io::Error::other(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_stores_on_one_directory_never_pick_the_same_temporary_name() {
        // The escape suite once failed with a rename's ENOENT: two stores
        // of one process on one directory, both counting from zero, wrote
        // the same image record through the same temporary file.
        let dir = tempfile::tempdir().unwrap();
        let ownership = Ownership::Caller;
        let first = Store::open(dir.path(), ownership).unwrap();
        let second = Store::open(dir.path(), ownership).unwrap();
        let layer = Digest::of(b"layer");
        assert_ne!(first.temporary(&layer), second.temporary(&layer));
    }
}
