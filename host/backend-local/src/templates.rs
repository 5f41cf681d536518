//! Templates and their images: what a template's sandboxes are made of
//! and may use; a directory image is prepared (snapshotted where it must
//! be) once per backend, an OCI image pulled once into the layer store and
//! pinned while templates use it, and a run's template records what its
//! sandboxes are made of.

use std::path::PathBuf;
use std::sync::Arc;

use sandfleet_core::{
    ImageToPull, PullProgress, RunId, TemplateRef, TemplateSpec, names_a_reference,
};
use sandfleet_jail::cgroup::Limits;
use sandfleet_jail::protocol::Image;

use crate::backend::Inner;
use crate::config::{ImageSource, SandboxLimits};
use crate::error::{IoContext, LocalError};
use crate::image;
use crate::oci::OciImage;
use crate::process::ProcessIdentity;
use crate::state::{RunRecord, TemplateRecord, unix_now, write_record};

/// How sandboxes are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Isolation {
    /// Linux namespaces.
    Namespaces,
    /// None: directories and host processes.
    Plain,
}

/// What each sandbox of a template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resources {
    /// Memory (the cgroup's limit), in MiB.
    pub(crate) memory_mib: u32,
    /// CPU (a CFS quota), in millicores.
    pub(crate) cpu_milli: u32,
    /// Its writable layer (workdir and `/tmp`), in MiB.
    pub(crate) disk_mib: u32,
    /// Processes and tmpfs sizes.
    pub(crate) limits: SandboxLimits,
}

impl Resources {
    pub(crate) fn cgroup_limits(&self) -> Limits {
        Limits {
            memory_bytes: Some(u64::from(self.memory_mib) << 20),
            cpu_milli: Some(self.cpu_milli),
            pids: Some(self.limits.pids),
        }
    }

    pub(crate) fn disk_bytes(&self) -> u64 {
        u64::from(self.disk_mib) << 20
    }
}

/// A template made ready: what its sandboxes are made of.
#[derive(Debug)]
pub(crate) struct Template {
    /// The template's name.
    pub(crate) name: String,
    /// The run it belongs to, and with it every sandbox made from it.
    pub(crate) run_id: RunId,
    /// The image name.
    pub(crate) image: String,
    /// What its sandboxes' files come from.
    pub(crate) source: ImageRoot,
    /// Where commands start, and the directory whose writes a scrub keeps:
    /// the cluster's workdir, or an OCI image's own `WorkingDir`.
    pub(crate) workdir: String,
    /// Whether its sandboxes keep the host's network.
    pub(crate) share_network: bool,
    /// Environment every command gets.
    pub(crate) env: Vec<(String, String)>,
    /// The start of its sandboxes' ids: the name, made id-safe.
    pub(crate) id_prefix: String,
    /// What each sandbox may use.
    pub(crate) resources: Resources,
}

/// What a template's sandboxes are made of.
#[derive(Debug, Clone)]
pub(crate) enum ImageRoot {
    /// A directory (canonical), seen at the workdir over the host's system
    /// directories.
    Directory(PathBuf),
    /// An OCI image's layers as the whole root.
    Oci(Arc<OciImage>),
}

impl ImageRoot {
    /// What the helper is asked to build.
    pub(crate) fn to_request(&self) -> Image {
        match self {
            ImageRoot::Directory(dir) => Image::Directory(dir.clone()),
            ImageRoot::Oci(image) => Image::Layers {
                dir: image.layers_dir.clone(),
                layers: image.layers.clone(),
            },
        }
    }

    /// The host directory its files are in (a directory image's, or the
    /// store's layers): no sandbox may see it.
    pub(crate) fn host_dir(&self) -> &std::path::Path {
        match self {
            ImageRoot::Directory(dir) => dir,
            ImageRoot::Oci(image) => &image.layers_dir,
        }
    }

    /// The OCI image, if it is one.
    pub(crate) fn oci(&self) -> Option<&OciImage> {
        match self {
            ImageRoot::Oci(image) => Some(image),
            ImageRoot::Directory(_) => None,
        }
    }
}

impl Template {
    /// A sandbox id prefix for template `name`: lowercase letters, digits and
    /// `-`, so ids are valid host names and directory names.
    pub(crate) fn id_prefix(name: &str) -> String {
        let prefix: String = name
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(32)
            .collect();
        let prefix = prefix.trim_matches('-');
        if prefix.is_empty() {
            "sandbox".to_string()
        } else {
            prefix.to_string()
        }
    }
}

impl Inner {
    /// What template image `name` is: a directory image of the config, an
    /// OCI image of the config, or, with namespaces, any OCI reference.
    async fn image_root(&self, name: &str) -> Result<ImageRoot, LocalError> {
        if let Some(source) = self.config.images.get(name) {
            return self.image_dir(name, source).await.map(ImageRoot::Directory);
        }
        let oci_here = self.site.isolation == Isolation::Namespaces;
        let Some(reference) = self.oci_reference(name) else {
            let mut known: Vec<&str> = self.config.images.keys().map(String::as_str).collect();
            known.extend(self.config.oci_images.keys().map(String::as_str));
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            let why = if oci_here {
                "; any other image is pulled when it names a registry, a repository path, a tag \
                 or a digest, like `python:3.11` or `library/python`"
            } else {
                "; OCI images need isolation = \"namespaces\""
            };
            return Err(LocalError::NotFound(format!(
                "image `{name}` (this cluster's images: {known}{why})"
            )));
        };
        self.oci.get(reference).await.map(ImageRoot::Oci)
    }

    /// The OCI reference template image `name` stands for, when it is an
    /// OCI image here: not a directory image of the config, but an OCI
    /// image of the config or, with namespaces, a reference itself.
    pub(crate) fn oci_reference<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        if self.config.images.contains_key(name) || self.site.isolation != Isolation::Namespaces {
            return None;
        }
        match self.config.oci_images.get(name) {
            Some(source) => Some(source.reference.as_str()),
            None => names_a_reference(name).then_some(name),
        }
    }

    /// Of `images`, the OCI images the store lacks, with the bytes each
    /// pull would download.
    pub(crate) async fn images_to_pull(&self, images: &[String]) -> Vec<ImageToPull> {
        let wanted: Vec<(&str, &str)> = images
            .iter()
            .filter_map(|name| Some((name.as_str(), self.oci_reference(name)?)))
            .collect();
        let references: Vec<&str> = wanted.iter().map(|(_, reference)| *reference).collect();
        self.oci
            .missing(&references)
            .await
            .into_iter()
            .zip(&wanted)
            .filter_map(|(missing, (name, _))| {
                Some(ImageToPull {
                    image: name.to_string(),
                    bytes: missing?.map(Some).map_err(|e| e.into_backend(&self.name)),
                })
            })
            .collect()
    }

    /// Pulls template image `name` when it is an OCI image the store lacks.
    pub(crate) async fn pull_image(
        &self,
        name: &str,
        progress: PullProgress<'_>,
    ) -> Result<(), LocalError> {
        match self.oci_reference(name) {
            Some(reference) => self.oci.pull_ahead(reference, progress).await,
            None => Ok(()),
        }
    }
}

impl Inner {
    async fn image_dir(&self, name: &str, source: &ImageSource) -> Result<PathBuf, LocalError> {
        let mut images = self.images.lock().await;
        if let Some(dir) = images.get(name) {
            return Ok(dir.clone());
        }
        // Run as root, sandboxes need their own copy, owned by their root.
        let owners = (self.site.isolation == Isolation::Namespaces && self.site.ids.count > 1)
            .then_some(self.site.ids);
        let dir = image::prepare(name, source, &self.site.state.images(), owners).await?;
        // Sandboxes are set up from canonical paths only.
        let dir = dir
            .canonicalize()
            .context(|| format!("image `{name}`: resolving {}", dir.display()))?;
        images.insert(name.to_string(), dir.clone());
        Ok(dir)
    }

    /// Writes `run.json` for `spec`'s run the first time this process makes
    /// something for it: who owns it, and where its cgroups are.
    fn record_run(&self, run_id: &sandfleet_core::RunId) -> Result<(), LocalError> {
        if self.live().run(run_id).recorded {
            return Ok(());
        }
        let owner = ProcessIdentity::of(std::process::id() as i32).ok_or_else(|| {
            LocalError::Failed("cannot read this process's /proc/self/stat".into())
        })?;
        let record = RunRecord {
            run_id: run_id.clone(),
            owner,
            started_at: unix_now(),
            cgroup_parent: self
                .site
                .cgroups
                .as_ref()
                .map(|_| self.site.cgroup_parent.clone()),
        };
        write_record(&self.site.run(run_id).record(), &record)?;
        self.live().run(run_id).recorded = true;
        Ok(())
    }

    pub(crate) async fn ensure_template(
        &self,
        spec: &TemplateSpec,
    ) -> Result<TemplateRef, LocalError> {
        let run_id = spec.run_id().map_err(LocalError::Rejected)?;
        if spec.network && !self.config.network {
            return Err(LocalError::Rejected(format!(
                "template `{}` asks for network access, which this cluster does not allow \
                 (set `network = true` in its config)",
                spec.name
            )));
        }
        let env: Vec<(String, String)> = spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let reference = TemplateRef {
            name: spec.name.clone(),
            image: spec.image.clone(),
            run_id: run_id.clone(),
        };
        if let Ok(existing) = self.live().template(&run_id, &spec.name) {
            let same = existing.image == spec.image
                && existing.share_network == spec.network
                && existing.env == env;
            return if same {
                Ok(reference)
            } else {
                Err(LocalError::Rejected(format!(
                    "template `{}` already exists with another image, network or environment",
                    spec.name
                )))
            };
        }
        self.record_run(&run_id)?;
        let source = self.image_root(&spec.image).await?;
        write_record(
            &self.site.run(&run_id).template(&spec.name),
            &TemplateRecord {
                name: spec.name.clone(),
                image: spec.image.clone(),
                image_dir: source.host_dir().to_path_buf(),
                network: spec.network,
                labels: spec.labels.clone(),
            },
        )?;
        let overrides = match self.config.images.get(&spec.image) {
            Some(source) => source.limits,
            None => self
                .config
                .oci_images
                .get(&spec.image)
                .map(|source| source.limits)
                .unwrap_or_default(),
        };
        let workdir = match source.oci() {
            Some(image) => image.workdir(&self.config.workdir),
            None => self.config.workdir.clone(),
        };
        let template = Arc::new(Template {
            name: spec.name.clone(),
            run_id: run_id.clone(),
            image: spec.image.clone(),
            source,
            workdir,
            share_network: spec.network,
            env,
            id_prefix: Template::id_prefix(&spec.name),
            resources: Resources {
                memory_mib: spec.memory_mib,
                cpu_milli: spec.cpu_milli,
                disk_mib: spec.disk_mib,
                limits: self.config.limits.with(overrides),
            },
        });
        self.live()
            .run(&run_id)
            .templates
            .entry(spec.name.clone())
            .or_insert(template);
        Ok(reference)
    }
}
