//! What the store tells about an image and its layers: built from the
//! image's record and the layers found unpacked, read by callers, and
//! handed back to pin the image.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::digest::Digest;
use crate::platform::Platform;
use crate::reference::Reference;
use crate::spec::RunConfig;

/// An image in the store.
#[derive(Clone, Debug)]
pub struct Image {
    /// The reference it was asked for by (or, from [`Store::list`], the
    /// first of its references).
    pub reference: Reference,
    /// Every reference that names it here.
    pub references: Vec<Reference>,
    /// The digest of its (platform) manifest.
    pub manifest: Digest,
    /// The digest of its config.
    pub config_digest: Digest,
    /// The platform it is for.
    pub platform: Platform,
    /// How to run it: `Env`, `WorkingDir`, `User`, `Entrypoint`, `Cmd`.
    pub config: RunConfig,
    /// Its layers, lowest first.
    pub layers: Vec<LayerInfo>,
    /// When a pull, import or pin last used it.
    pub last_used: SystemTime,
    /// Where the store keeps the layers of its ownership.
    pub(super) layer_root: PathBuf,
}

/// One layer of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerInfo {
    /// The blob's (compressed) digest, as the manifest names it.
    pub digest: Digest,
    /// The uncompressed digest (the config's `diff_id`), which the store
    /// keys unpacked layers by.
    pub diff_id: Digest,
    /// The blob's size (what a pull downloads).
    pub size: u64,
    /// Bytes of file content unpacked, when the layer is in the store.
    pub unpacked_size: Option<u64>,
}

impl Image {
    /// The unpacked layers' directories, **lowest first** (the base image
    /// first). overlayfs wants `lowerdir=` the other way round, topmost
    /// first: reverse this list for it.
    pub fn layer_dirs(&self) -> Vec<PathBuf> {
        self.layers
            .iter()
            .map(|l| self.layer_root.join(l.diff_id.hex()).join("root"))
            .collect()
    }

    /// Bytes of file content of all its layers.
    pub fn unpacked_size(&self) -> u64 {
        self.layers.iter().filter_map(|l| l.unpacked_size).sum()
    }
}
