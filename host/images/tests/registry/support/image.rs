//! Images built in Rust: layer tars (whiteouts, opaque markers, links,
//! owners, raw hostile entries), compressed three ways, configs,
//! manifests and indexes, pushed with the distribution API.

use std::io::Write as _;

use sandfleet_images::Digest;
use sandfleet_images::spec::{self, Compression};
use serde_json::json;

use super::registry::Registry;

/// Entries of one layer tar.
pub(crate) struct Tar {
    builder: tar::Builder<Vec<u8>>,
}

pub(crate) const MTIME: u64 = 1_600_000_000;

impl Tar {
    pub(crate) fn new() -> Tar {
        Tar {
            builder: tar::Builder::new(Vec::new()),
        }
    }

    fn header(kind: tar::EntryType, mode: u32, uid: u64, gid: u64, size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(uid);
        header.set_gid(gid);
        header.set_mtime(MTIME);
        header.set_size(size);
        header
    }

    pub(crate) fn dir(mut self, path: &str, mode: u32) -> Tar {
        let mut header = Tar::header(tar::EntryType::Directory, mode, 0, 0, 0);
        self.builder
            .append_data(&mut header, path, &[][..])
            .unwrap();
        self
    }

    pub(crate) fn file(self, path: &str, content: &[u8]) -> Tar {
        self.file_owned(path, content, 0o644, 0, 0)
    }

    pub(crate) fn file_owned(
        mut self,
        path: &str,
        content: &[u8],
        mode: u32,
        uid: u64,
        gid: u64,
    ) -> Tar {
        let mut header = Tar::header(
            tar::EntryType::Regular,
            mode,
            uid,
            gid,
            content.len() as u64,
        );
        self.builder
            .append_data(&mut header, path, content)
            .unwrap();
        self
    }

    pub(crate) fn symlink(mut self, path: &str, target: &str) -> Tar {
        let mut header = Tar::header(tar::EntryType::Symlink, 0o777, 0, 0, 0);
        self.builder.append_link(&mut header, path, target).unwrap();
        self
    }

    pub(crate) fn hardlink(mut self, path: &str, target: &str) -> Tar {
        let mut header = Tar::header(tar::EntryType::Link, 0o644, 0, 0, 0);
        self.builder.append_link(&mut header, path, target).unwrap();
        self
    }

    pub(crate) fn char_device(mut self, path: &str) -> Tar {
        let mut header = Tar::header(tar::EntryType::Char, 0o666, 0, 0, 0);
        header.set_device_major(1).unwrap();
        header.set_device_minor(3).unwrap();
        self.builder
            .append_data(&mut header, path, &[][..])
            .unwrap();
        self
    }

    /// An entry whose name (and link name) go into the header as given,
    /// without the checks tar writers make: how hostile layers are made.
    pub(crate) fn raw(
        mut self,
        kind: tar::EntryType,
        name: &str,
        link: &str,
        content: &[u8],
    ) -> Tar {
        let mut header = Tar::header(kind, 0o644, 0, 0, content.len() as u64);
        let gnu = header.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_cksum();
        self.builder.append(&header, content).unwrap();
        self
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        self.builder.into_inner().unwrap()
    }
}

/// A layer as pushed: its tar, its blob, and their digests.
#[derive(Clone)]
pub(crate) struct Layer {
    pub(crate) blob: Vec<u8>,
    pub(crate) digest: Digest,
    pub(crate) diff_id: Digest,
    pub(crate) media_type: &'static str,
}

impl Layer {
    pub(crate) fn new(tar: Vec<u8>, compression: Compression) -> Layer {
        let (blob, media_type) = match compression {
            Compression::Gzip => {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                encoder.write_all(&tar).unwrap();
                (encoder.finish().unwrap(), spec::OCI_LAYER_GZIP)
            }
            Compression::Zstd => (
                ruzstd::encoding::compress_to_vec(
                    &tar[..],
                    ruzstd::encoding::CompressionLevel::Fastest,
                ),
                spec::OCI_LAYER_ZSTD,
            ),
            Compression::None => (tar.clone(), spec::OCI_LAYER_TAR),
        };
        Layer {
            digest: Digest::of(&blob),
            diff_id: Digest::of(&tar),
            blob,
            media_type,
        }
    }

    pub(crate) fn gzip(tar: Vec<u8>) -> Layer {
        Layer::new(tar, Compression::Gzip)
    }
}

/// An image's config and manifest, made from its layers.
pub(crate) struct Built {
    pub(crate) config: Vec<u8>,
    pub(crate) manifest: Vec<u8>,
    pub(crate) layers: Vec<Layer>,
}

pub(crate) fn build(layers: &[Layer], architecture: &str, diff_ids: Option<Vec<Digest>>) -> Built {
    let diff_ids = diff_ids.unwrap_or_else(|| layers.iter().map(|l| l.diff_id.clone()).collect());
    let config = serde_json::to_vec(&json!({
        "architecture": architecture,
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
            "WorkingDir": "/work",
            "User": "1000:1000",
            "Entrypoint": null,
            "Cmd": ["sh", "-c", "true"],
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": spec::OCI_MANIFEST,
        "config": {"mediaType": spec::OCI_CONFIG, "digest": Digest::of(&config), "size": config.len()},
        "layers": layers.iter().map(|l| json!({
            "mediaType": l.media_type, "digest": l.digest, "size": l.blob.len(),
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    Built {
        config,
        manifest,
        layers: layers.to_vec(),
    }
}

/// Pushes an image's blobs and manifest as `repo:tag`.
pub(crate) async fn push(registry: &Registry, repo: &str, tag: &str, built: &Built) -> Digest {
    push_blobs(registry, repo, built).await;
    registry
        .push_manifest(repo, tag, spec::OCI_MANIFEST, &built.manifest)
        .await
}

pub(crate) async fn push_blobs(registry: &Registry, repo: &str, built: &Built) {
    for layer in &built.layers {
        registry.push_blob(repo, &layer.blob).await;
    }
    registry.push_blob(repo, &built.config).await;
}

/// Pushes an index of already-pushed manifests (`(manifest, arch)`).
pub(crate) async fn push_index(
    registry: &Registry,
    repo: &str,
    tag: &str,
    entries: &[(&Built, &str)],
) -> Digest {
    let manifests: Vec<_> = entries
        .iter()
        .map(|(built, arch)| {
            json!({
                "mediaType": spec::OCI_MANIFEST,
                "digest": Digest::of(&built.manifest),
                "size": built.manifest.len(),
                "platform": {"os": "linux", "architecture": arch},
            })
        })
        .chain(std::iter::once(json!({
            // An attestation manifest, as buildx pushes: never a choice.
            "mediaType": spec::OCI_MANIFEST,
            "digest": Digest::of(&entries[0].0.manifest),
            "size": entries[0].0.manifest.len(),
            "platform": {"os": "unknown", "architecture": "unknown"},
        })))
        .collect();
    for (built, _) in entries {
        push_blobs(registry, repo, built).await;
        registry
            .push_manifest(
                repo,
                &format!("{}", Digest::of(&built.manifest)),
                spec::OCI_MANIFEST,
                &built.manifest,
            )
            .await;
    }
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": spec::OCI_INDEX,
        "manifests": manifests,
    }))
    .unwrap();
    registry
        .push_manifest(repo, tag, spec::OCI_INDEX, &index)
        .await
}
