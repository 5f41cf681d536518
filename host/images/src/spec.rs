//! The JSON documents of images: manifests, manifest lists / OCI indexes,
//! image configs, and their media types (Docker schema 2 and OCI alike).
//!
//! Only the fields sandfleet reads are declared; unknown fields are
//! ignored, as the specs require of readers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::platform::Platform;

/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image config.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// OCI uncompressed layer.
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// OCI gzip layer.
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// OCI zstd layer.
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
/// Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker schema 2 manifest.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker image config.
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
/// Docker gzip layer.
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
/// Docker uncompressed layer (what `docker save` writes).
pub const DOCKER_LAYER_TAR: &str = "application/vnd.docker.image.rootfs.diff.tar";

/// What a manifest request accepts, best first.
pub(crate) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// How a layer blob is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// A plain tar.
    None,
    /// gzip (one or more members).
    Gzip,
    /// zstd (one or more frames, skippable frames skipped).
    Zstd,
}

impl Compression {
    /// The compression a layer media type declares, `None` for a media
    /// type that is not a layer sandfleet can unpack.
    pub fn of_media_type(media_type: &str) -> Option<Self> {
        // Foreign / non-distributable variants share the suffixes.
        if media_type.ends_with("tar+gzip") || media_type.ends_with("tar.gzip") {
            Some(Compression::Gzip)
        } else if media_type.ends_with("tar+zstd") {
            Some(Compression::Zstd)
        } else if media_type.ends_with(".tar") || media_type.ends_with("diff.tar") {
            Some(Compression::None)
        } else {
            None
        }
    }

    /// The compression a blob's first bytes show (for archives whose media
    /// types cannot be trusted, such as `docker save`'s).
    pub(crate) fn sniff(head: &[u8]) -> Self {
        match head {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
            _ => Compression::None,
        }
    }
}

/// A content descriptor.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The media type of what it points at.
    #[serde(default)]
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// In an index: the platform the manifest is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Annotations (an OCI layout names images with
    /// `org.opencontainers.image.ref.name`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image manifest (OCI or Docker schema 2).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// Set by Docker and usually by OCI writers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The image config.
    pub config: Descriptor,
    /// The layers, lowest first.
    pub layers: Vec<Descriptor>,
}

/// A manifest list or OCI index.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// The manifests it lists.
    pub manifests: Vec<Descriptor>,
}

/// Either kind of manifest document, told apart by media type (or, when a
/// writer left it out, by shape).
#[derive(Debug)]
pub(crate) enum Document {
    Index(Index),
    Manifest(Manifest),
}

impl Document {
    pub(crate) fn parse(media_type: Option<&str>, bytes: &[u8]) -> Result<Self, String> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Probe {
            schema_version: Option<u32>,
            media_type: Option<String>,
            manifests: Option<serde_json::Value>,
        }
        let probe: Probe =
            serde_json::from_slice(bytes).map_err(|e| format!("not a manifest: {e}"))?;
        if probe.schema_version == Some(1) {
            return Err(
                "Docker schema 1 manifests are not supported (push the image again \
                        with a current client)"
                    .to_string(),
            );
        }
        // A header like `application/json; charset=utf-8` says nothing;
        // the document's own media type or its shape decides then.
        let declared = media_type
            .map(|m| m.split(';').next().unwrap_or("").trim().to_string())
            .filter(|m| {
                [OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST].contains(&m.as_str())
            })
            .or(probe.media_type);
        let is_index = match declared.as_deref() {
            Some(OCI_INDEX | DOCKER_LIST) => true,
            Some(OCI_MANIFEST | DOCKER_MANIFEST) => false,
            Some(other) if probe.manifests.is_none() => {
                return Err(format!("unsupported manifest media type {other}"));
            }
            _ => probe.manifests.is_some(),
        };
        if is_index {
            serde_json::from_slice(bytes)
                .map(Document::Index)
                .map_err(|e| format!("bad index: {e}"))
        } else {
            serde_json::from_slice(bytes)
                .map(Document::Manifest)
                .map_err(|e| format!("bad manifest: {e}"))
        }
    }
}

/// An image config: the platform, how to run it, and its layers'
/// uncompressed digests.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ImageConfigFile {
    /// `amd64`, …
    #[serde(default)]
    pub architecture: String,
    /// `linux`.
    #[serde(default)]
    pub os: String,
    /// `v8`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// How to run it.
    #[serde(default)]
    pub config: Option<RunConfig>,
    /// The layers' uncompressed digests.
    pub rootfs: RootFs,
}

/// The uncompressed digests of an image's layers, lowest first.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RootFs {
    /// `layers`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// One per layer of the manifest, in order.
    #[serde(default)]
    pub diff_ids: Vec<Digest>,
}

/// How a container of the image runs (the config's `config` object).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    /// `NAME=value` entries; `PATH` is among them in most images.
    #[serde(default, deserialize_with = "null_as_default")]
    pub env: Vec<String>,
    /// The working directory (empty: `/`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub working_dir: String,
    /// `user`, `uid`, `user:group` or `uid:gid` (empty: root).
    #[serde(default, deserialize_with = "null_as_default")]
    pub user: String,
    /// The entrypoint.
    #[serde(default, deserialize_with = "null_as_default")]
    pub entrypoint: Vec<String>,
    /// The command (arguments to the entrypoint when there is one).
    #[serde(default, deserialize_with = "null_as_default")]
    pub cmd: Vec<String>,
}

/// Docker writes `null` for empty lists and strings.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_media_types_map_to_compressions() {
        assert_eq!(
            Compression::of_media_type(OCI_LAYER_GZIP),
            Some(Compression::Gzip)
        );
        assert_eq!(
            Compression::of_media_type(DOCKER_LAYER_GZIP),
            Some(Compression::Gzip)
        );
        assert_eq!(
            Compression::of_media_type(OCI_LAYER_ZSTD),
            Some(Compression::Zstd)
        );
        assert_eq!(
            Compression::of_media_type(OCI_LAYER_TAR),
            Some(Compression::None)
        );
        assert_eq!(
            Compression::of_media_type(DOCKER_LAYER_TAR),
            Some(Compression::None)
        );
        assert_eq!(
            Compression::of_media_type("application/vnd.in-toto+json"),
            None
        );
    }

    #[test]
    fn documents_are_told_apart_and_schema_1_is_refused() {
        let index = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(
            Document::parse(None, index),
            Ok(Document::Index(_))
        ));
        let v1 = br#"{"schemaVersion":1,"name":"x"}"#;
        assert!(Document::parse(None, v1).unwrap_err().contains("schema 1"));
        let config =
            br#"{"rootfs":{"type":"layers","diff_ids":[]},"config":{"Env":null,"Cmd":["sh"]}}"#;
        let config: ImageConfigFile = serde_json::from_slice(config).unwrap();
        assert_eq!(config.config.unwrap().cmd, ["sh"]);
    }
}
