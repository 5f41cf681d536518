//! Importing images without a registry: from `docker save` tarballs (the
//! legacy format, `manifest.json` with `<id>/layer.tar` entries, and
//! Docker 25's, an OCI layout inside the tarball) and from OCI image
//! layout directories (`oci-layout`, `index.json`, `blobs/sha256/…`).
//!
//! A tarball is indexed once (entry offsets, symlinks) and its blobs are
//! read in place, so nothing is extracted twice. Layers are checked
//! against the config's `diff_ids` (and, in an OCI layout, against their
//! descriptors' digests) exactly as pulled ones are.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;

use crate::digest::Digest;
use crate::error::Error;
use crate::layer::{self, Expected};
use crate::platform::{self, Platform};
use crate::pull::{LayerOptions, Plan, Progress, plan, verify};
use crate::reference::Reference;
use crate::registry::MAX_DOCUMENT;
use crate::retry::RetryPolicy;
use crate::spec::{
    Compression, DOCKER_LAYER_TAR, Descriptor, Document, Manifest, OCI_CONFIG, OCI_MANIFEST,
};
use crate::store::{Image, Store, joined};
use crate::unpack::{Job, UnpackLimits};

/// How to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// The platform wanted from a multi-platform image (default: the
    /// host's).
    pub platform: Platform,
    /// The name to give the image, needed when the archive names none
    /// (and then it must hold one image); it replaces the archive's names
    /// when given.
    pub name: Option<Reference>,
    /// Bounds on each layer's content.
    pub limits: UnpackLimits,
    /// How long to wait for a layer another process is unpacking.
    pub lock_timeout: Duration,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            platform: Platform::host(),
            name: None,
            limits: UnpackLimits::default(),
            lock_timeout: Duration::from_secs(30 * 60),
        }
    }
}

impl LayerOptions for ImportOptions {
    fn limits(&self) -> UnpackLimits {
        self.limits
    }
    fn retry(&self) -> RetryPolicy {
        // A file either reads or does not; nothing here is transient.
        RetryPolicy {
            retries: 0,
            ..RetryPolicy::default()
        }
    }
    fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }
}

impl Store {
    /// Imports every image of a `docker save` tarball or an OCI layout
    /// directory (or tarball) at `path`, under the names it gives them
    /// (or `options.name`).
    ///
    /// # Errors
    ///
    /// [`Error::Import`] when `path` is neither, or is damaged or names no
    /// image; [`Error::NoPlatform`]; and the layer errors of
    /// [`Store::pull`] ([`Error::DigestMismatch`],
    /// [`Error::CorruptLayer`], [`Error::HostileLayer`],
    /// [`Error::DiskFull`]).
    pub async fn import(
        &self,
        path: &Path,
        options: &ImportOptions,
        progress: Progress<'_>,
    ) -> Result<Vec<Image>, Error> {
        let source = path.to_path_buf();
        let archive: Arc<dyn Archive> = tokio::task::spawn_blocking(move || open_archive(&source))
            .await
            .map_err(|e| joined(&path.display().to_string(), e))??;
        let found = if archive.has("oci-layout") && archive.has("index.json") {
            oci_images(path, archive.as_ref(), options)?
        } else if archive.has("manifest.json") {
            docker_images(path, archive.as_ref())?
        } else {
            return Err(import_error(
                path,
                "is neither an OCI layout (oci-layout, index.json) nor a `docker save` tarball (manifest.json)",
            ));
        };
        if found.is_empty() {
            return Err(import_error(path, "holds no image"));
        }
        if options.name.is_some() && found.len() > 1 {
            return Err(import_error(
                path,
                &format!(
                    "holds {} images; a name can be given to one only",
                    found.len()
                ),
            ));
        }
        let mut images = Vec::new();
        for found in found {
            let names = match &options.name {
                Some(name) => vec![name.clone()],
                None if found.names.is_empty() => {
                    return Err(import_error(
                        path,
                        "names no image (pass a name to import it as)",
                    ));
                }
                None => found.names.clone(),
            };
            images.push(
                self.import_one(path, archive.clone(), found, &names, options, progress)
                    .await?,
            );
        }
        Ok(images)
    }

    async fn import_one(
        &self,
        path: &Path,
        archive: Arc<dyn Archive>,
        found: Found,
        names: &[Reference],
        options: &ImportOptions,
        progress: Progress<'_>,
    ) -> Result<Image, Error> {
        let plan = found.plan;
        let pin = self.record(&plan).await?;
        for (planned, blob) in plan.layers.iter().zip(&found.blobs) {
            let known = found.blobs_known;
            let fetch = |root: PathBuf, job: Job| {
                let archive = archive.clone();
                let blob = blob.clone();
                let digest = planned.descriptor.digest.clone();
                let size = planned.descriptor.size;
                let diff_id = planned.diff_id.clone();
                let compression = planned.compression;
                let archive_path = path.to_path_buf();
                let shown = plan.shown.clone();
                async move {
                    tokio::task::spawn_blocking(move || {
                        let reader = archive.open(&blob).map_err(|e| {
                            import_error(&archive_path, &format!("cannot read {blob}: {e}"))
                        })?;
                        let expected = Expected {
                            blob: known.then_some((&digest, size)),
                            diff_id: &diff_id,
                            compression,
                        };
                        layer::unpack_blob(reader, &root, &job, &expected)
                    })
                    .await
                    .map_err(|e| joined(&shown, e))?
                }
            };
            self.ensure_layer(&plan, planned, options, progress, fetch)
                .await?;
        }
        for extra in &names[1..] {
            self.write_ref(extra, &plan.manifest, None)?;
        }
        self.name(&names[0], &plan, pin)
    }
}

/// One image found in an archive.
struct Found {
    plan: Plan,
    /// Each layer's file in the archive.
    blobs: Vec<String>,
    /// Whether the layers' descriptors carry their real digests and sizes
    /// (an OCI layout's do; legacy `docker save` has diff_ids only).
    blobs_known: bool,
    names: Vec<Reference>,
}

/// The images of an OCI layout.
fn oci_images(
    path: &Path,
    archive: &dyn Archive,
    options: &ImportOptions,
) -> Result<Vec<Found>, Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Layout {
        image_layout_version: String,
    }
    let layout: Layout = json(path, archive, "oci-layout")?;
    if !layout.image_layout_version.starts_with("1.") {
        return Err(import_error(
            path,
            &format!(
                "has OCI layout version {}, not 1.x",
                layout.image_layout_version
            ),
        ));
    }
    let index_bytes = archive
        .read_small("index.json")
        .map_err(|e| import_error(path, &format!("index.json: {e}")))?;
    let index = match Document::parse(None, &index_bytes) {
        Ok(Document::Index(index)) => index,
        Ok(Document::Manifest(_)) => {
            return Err(import_error(path, "index.json is a manifest, not an index"));
        }
        Err(e) => return Err(import_error(path, &format!("index.json: {e}"))),
    };
    let shown_path = path.display().to_string();
    let mut found = Vec::new();
    for entry in &index.manifests {
        let names = oci_names(path, entry)?;
        let shown = match names.first() {
            Some(name) => format!("{name} (from {shown_path})"),
            None => shown_path.clone(),
        };
        let bytes = blob(path, archive, &entry.digest)?;
        let (manifest, manifest_bytes, index) =
            match Document::parse(Some(&entry.media_type), &bytes)
                .map_err(|e| import_error(path, &format!("{}: {e}", entry.digest)))?
            {
                Document::Manifest(manifest) => (manifest, bytes, None),
                Document::Index(inner) => {
                    let chosen =
                        platform::choose(&inner, &options.platform).map_err(|available| {
                            Error::NoPlatform {
                                reference: shown.clone(),
                                wanted: options.platform.to_string(),
                                available,
                            }
                        })?;
                    let chosen_bytes = blob(path, archive, &chosen.digest)?;
                    match Document::parse(Some(&chosen.media_type), &chosen_bytes) {
                        Ok(Document::Manifest(manifest)) => {
                            (manifest, chosen_bytes, Some((entry.digest.clone(), bytes)))
                        }
                        _ => {
                            return Err(import_error(
                                path,
                                &format!("{} is not an image manifest", chosen.digest),
                            ));
                        }
                    }
                }
            };
        let config = blob(path, archive, &manifest.config.digest)?;
        let layers = manifest
            .layers
            .iter()
            .map(|d| {
                let compression = Compression::of_media_type(&d.media_type).ok_or_else(|| {
                    import_error(
                        path,
                        &format!(
                            "layer {} has media type {:?}, not a layer tar",
                            d.digest, d.media_type
                        ),
                    )
                })?;
                Ok((d.clone(), Some(compression)))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let blobs = manifest
            .layers
            .iter()
            .map(|d| blob_name(&d.digest))
            .collect();
        let plan = plan(
            &shown,
            Digest::of(&manifest_bytes),
            manifest_bytes,
            index,
            manifest.config.digest.clone(),
            config,
            layers,
        )
        .map_err(|detail| import_error(path, &detail))?;
        found.push(Found {
            plan,
            blobs,
            blobs_known: true,
            names,
        });
    }
    Ok(found)
}

/// What an OCI layout's index entry calls its image: containerd's full
/// name, else `org.opencontainers.image.ref.name` when it is a whole
/// reference (a bare tag like `latest` names nothing by itself).
fn oci_names(path: &Path, entry: &Descriptor) -> Result<Vec<Reference>, Error> {
    let annotations = &entry.annotations;
    let name = annotations.get("io.containerd.image.name").or_else(|| {
        annotations
            .get("org.opencontainers.image.ref.name")
            .filter(|n| n.contains([':', '/']))
    });
    match name {
        Some(name) => Reference::parse(name)
            .map(|r| vec![r])
            .map_err(|e| import_error(path, &e.to_string())),
        None => Ok(Vec::new()),
    }
}

/// The images of a legacy `docker save` tarball.
fn docker_images(path: &Path, archive: &dyn Archive) -> Result<Vec<Found>, Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Entry {
        config: String,
        #[serde(default)]
        repo_tags: Option<Vec<String>>,
        layers: Vec<String>,
    }
    let entries: Vec<Entry> = json(path, archive, "manifest.json")?;
    let shown_path = path.display().to_string();
    let mut found = Vec::new();
    for entry in entries {
        let names = entry
            .repo_tags
            .unwrap_or_default()
            .iter()
            .map(|t| Reference::parse(t).map_err(|e| import_error(path, &e.to_string())))
            .collect::<Result<Vec<_>, Error>>()?;
        let shown = match names.first() {
            Some(name) => format!("{name} (from {shown_path})"),
            None => shown_path.clone(),
        };
        let config = Bytes::from(
            archive
                .read_small(&entry.config)
                .map_err(|e| import_error(path, &format!("{}: {e}", entry.config)))?,
        );
        let config_digest = Digest::of(&config);
        #[derive(Deserialize)]
        struct DiffIds {
            rootfs: crate::spec::RootFs,
        }
        let diff_ids: DiffIds = serde_json::from_slice(&config)
            .map_err(|e| import_error(path, &format!("{}: {e}", entry.config)))?;
        if diff_ids.rootfs.diff_ids.len() != entry.layers.len() {
            return Err(import_error(
                path,
                &format!(
                    "{} lists {} layers and its config {} diff_ids",
                    shown,
                    entry.layers.len(),
                    diff_ids.rootfs.diff_ids.len()
                ),
            ));
        }
        // Docker's own archives have no manifest; this one describes the
        // layers as the uncompressed tars they are identified by.
        let mut layers = Vec::new();
        for (file, diff_id) in entry.layers.iter().zip(&diff_ids.rootfs.diff_ids) {
            let size = archive
                .size(file)
                .map_err(|e| import_error(path, &format!("{file}: {e}")))?;
            layers.push(Descriptor {
                media_type: DOCKER_LAYER_TAR.to_string(),
                digest: diff_id.clone(),
                size,
                platform: None,
                annotations: Default::default(),
            });
        }
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.to_string()),
            config: Descriptor {
                media_type: OCI_CONFIG.to_string(),
                digest: config_digest.clone(),
                size: config.len() as u64,
                platform: None,
                annotations: Default::default(),
            },
            layers: layers.clone(),
        };
        let manifest_bytes = Bytes::from(
            serde_json::to_vec(&manifest).map_err(|e| import_error(path, &e.to_string()))?,
        );
        let plan = plan(
            &shown,
            Digest::of(&manifest_bytes),
            manifest_bytes,
            None,
            config_digest,
            config,
            layers.into_iter().map(|d| (d, None)).collect(),
        )
        .map_err(|detail| import_error(path, &detail))?;
        found.push(Found {
            plan,
            blobs: entry.layers,
            blobs_known: false,
            names,
        });
    }
    Ok(found)
}

fn blob_name(digest: &Digest) -> String {
    format!("blobs/sha256/{}", digest.hex())
}

/// A small blob of the archive, checked against its digest.
fn blob(path: &Path, archive: &dyn Archive, digest: &Digest) -> Result<Bytes, Error> {
    let name = blob_name(digest);
    let bytes = archive
        .read_small(&name)
        .map_err(|e| import_error(path, &format!("{name}: {e}")))?;
    verify(&path.display().to_string(), &name, digest, &bytes)?;
    Ok(Bytes::from(bytes))
}

fn json<T: for<'de> Deserialize<'de>>(
    path: &Path,
    archive: &dyn Archive,
    name: &str,
) -> Result<T, Error> {
    let bytes = archive
        .read_small(name)
        .map_err(|e| import_error(path, &format!("{name}: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| import_error(path, &format!("{name}: {e}")))
}

fn import_error(path: &Path, detail: &str) -> Error {
    Error::Import {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}

/// Files of an archive by their names in it.
trait Archive: Send + Sync {
    fn open(&self, name: &str) -> io::Result<Box<dyn Read + Send>>;
    fn size(&self, name: &str) -> io::Result<u64>;

    fn has(&self, name: &str) -> bool {
        self.size(name).is_ok()
    }

    fn read_small(&self, name: &str) -> io::Result<Vec<u8>> {
        if self.size(name)? > MAX_DOCUMENT {
            return Err(io::Error::other(format!(
                "larger than {MAX_DOCUMENT} bytes"
            )));
        }
        let mut bytes = Vec::new();
        self.open(name)?.read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

fn open_archive(path: &Path) -> Result<Arc<dyn Archive>, Error> {
    let meta = std::fs::metadata(path).map_err(|e| import_error(path, &e.to_string()))?;
    if meta.is_dir() {
        return Ok(Arc::new(DirArchive(path.to_path_buf())));
    }
    let mut head = [0u8; 4];
    let mut file = File::open(path).map_err(|e| import_error(path, &e.to_string()))?;
    let n = file
        .read(&mut head)
        .map_err(|e| import_error(path, &e.to_string()))?;
    if Compression::sniff(&head[..n]) != Compression::None {
        return Err(import_error(
            path,
            "is compressed; decompress it first (gunzip or unzstd)",
        ));
    }
    TarArchive::index(path)
        .map(|t| Arc::new(t) as Arc<dyn Archive>)
        .map_err(|e| import_error(path, &format!("not a tar archive: {e}")))
}

/// A name of the archive as relative normal components (`./a/b` is
/// `a/b`); `None` for one that climbs out.
fn clean(name: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(name).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.join("/"))
}

/// An OCI layout directory.
struct DirArchive(PathBuf);

impl DirArchive {
    fn path(&self, name: &str) -> io::Result<PathBuf> {
        clean(name).map(|n| self.0.join(n)).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the name climbs out of the layout",
            )
        })
    }
}

impl Archive for DirArchive {
    fn open(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(File::open(self.path(name)?)?))
    }

    fn size(&self, name: &str) -> io::Result<u64> {
        Ok(std::fs::metadata(self.path(name)?)?.len())
    }
}

/// A tarball read in place: where each file's bytes are, and where its
/// symlinks and hard links lead (Docker 25 links `<id>/layer.tar` to the
/// blob).
struct TarArchive {
    path: PathBuf,
    files: HashMap<String, (u64, u64)>,
    links: HashMap<String, String>,
}

impl TarArchive {
    fn index(path: &Path) -> io::Result<Self> {
        let mut archive = tar::Archive::new(File::open(path)?);
        let mut files = HashMap::new();
        let mut links = HashMap::new();
        for entry in archive.entries_with_seek()? {
            let entry = entry?;
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let Some(name) = clean(&name) else { continue };
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    files.insert(name, (entry.raw_file_position(), entry.size()));
                }
                kind @ (tar::EntryType::Symlink | tar::EntryType::Link) => {
                    let target =
                        String::from_utf8_lossy(&entry.link_name_bytes().unwrap_or_default())
                            .into_owned();
                    // A symlink is relative to its directory; a hard link
                    // names an entry of the archive.
                    let target = if kind == tar::EntryType::Symlink {
                        let dir = Path::new(&name).parent().unwrap_or(Path::new(""));
                        dir.join(target).to_string_lossy().into_owned()
                    } else {
                        target
                    };
                    if let Some(target) = clean(&target) {
                        links.insert(name, target);
                    }
                }
                _ => {}
            }
        }
        Ok(TarArchive {
            path: path.to_path_buf(),
            files,
            links,
        })
    }

    fn find(&self, name: &str) -> io::Result<(u64, u64)> {
        let mut name = clean(name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the name climbs out of the archive",
            )
        })?;
        for _ in 0..16 {
            if let Some(place) = self.files.get(&name) {
                return Ok(*place);
            }
            match self.links.get(&name) {
                Some(target) => name = target.clone(),
                None => break,
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "not in the archive",
        ))
    }
}

impl Archive for TarArchive {
    fn open(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        let (offset, size) = self.find(name)?;
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(offset))?;
        Ok(Box::new(file.take(size)))
    }

    fn size(&self, name: &str) -> io::Result<u64> {
        self.find(name).map(|(_, size)| size)
    }
}
