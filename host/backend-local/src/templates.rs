//! Templates and their images: a directory image is prepared (snapshotted
//! where it must be) once per backend, an OCI image pulled once into the
//! layer store and pinned while templates use it, and a run's template
//! records what its sandboxes are made of.

use std::path::PathBuf;
use std::sync::Arc;

use sandfleet_core::{ImageToPull, PullProgress, TemplateRef, TemplateSpec, names_a_reference};

use crate::backend::Inner;
use crate::config::ImageSource;
use crate::error::{IoContext, LocalError};
use crate::image;
use crate::process::ProcessIdentity;
use crate::sandbox::{ImageRoot, Isolation, Resources, Template};
use crate::state::{RunRecord, TemplateRecord, unix_now, write_record};

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
