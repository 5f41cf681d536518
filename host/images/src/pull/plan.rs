//! A resolved image before anything of it is stored: its manifest,
//! config and layers, checked against each other and their digests. Pulls
//! make one from a registry's answers, imports from an archive's files.

use bytes::Bytes;

use crate::digest::Digest;
use crate::error::Error;
use crate::spec::{Compression, Descriptor, ImageConfigFile};

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
