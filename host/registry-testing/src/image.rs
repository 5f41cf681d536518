//! Images built in Rust: layer tars (whiteouts, opaque markers, links,
//! owners, raw hostile entries), compressed three ways, configs,
//! manifests and indexes, pushed with the distribution API.

use std::io::Write as _;

use sandfleet_images::Digest;
use sandfleet_images::spec::{self, Compression};
use serde_json::json;

use crate::registry::Registry;

/// Entries of one layer tar.
pub struct Tar {
    builder: tar::Builder<Vec<u8>>,
}

/// The modification time of every entry the builder makes.
pub const MTIME: u64 = 1_600_000_000;

impl Default for Tar {
    fn default() -> Self {
        Tar::new()
    }
}

impl Tar {
    /// An empty tar.
    pub fn new() -> Tar {
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

    /// A directory entry.
    pub fn dir(mut self, path: &str, mode: u32) -> Tar {
        let mut header = Tar::header(tar::EntryType::Directory, mode, 0, 0, 0);
        self.builder
            .append_data(&mut header, path, &[][..])
            .unwrap();
        self
    }

    /// A regular file owned by root, mode 0644.
    pub fn file(self, path: &str, content: &[u8]) -> Tar {
        self.file_owned(path, content, 0o644, 0, 0)
    }

    /// A regular file with its mode and owners.
    pub fn file_owned(mut self, path: &str, content: &[u8], mode: u32, uid: u64, gid: u64) -> Tar {
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

    /// A symbolic link.
    pub fn symlink(mut self, path: &str, target: &str) -> Tar {
        let mut header = Tar::header(tar::EntryType::Symlink, 0o777, 0, 0, 0);
        self.builder.append_link(&mut header, path, target).unwrap();
        self
    }

    /// A hard link to an earlier entry.
    pub fn hardlink(mut self, path: &str, target: &str) -> Tar {
        let mut header = Tar::header(tar::EntryType::Link, 0o644, 0, 0, 0);
        self.builder.append_link(&mut header, path, target).unwrap();
        self
    }

    /// A character device (1:3, `/dev/null`'s numbers).
    pub fn char_device(mut self, path: &str) -> Tar {
        let mut header = Tar::header(tar::EntryType::Char, 0o666, 0, 0, 0);
        header.set_device_major(1).unwrap();
        header.set_device_minor(3).unwrap();
        self.builder
            .append_data(&mut header, path, &[][..])
            .unwrap();
        self
    }

    /// The host's file, directory or link at `host` (not followed), as
    /// `path`, with its mode; owned by root.
    pub fn host_entry(self, path: &str, host: &std::path::Path) -> Tar {
        let meta = std::fs::symlink_metadata(host).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(host).unwrap();
            return self.symlink(path, target.to_str().unwrap());
        }
        if meta.is_dir() {
            return self.dir(path, mode);
        }
        let content = std::fs::read(host).unwrap();
        self.file_owned(path, &content, mode, 0, 0)
    }

    /// An entry whose name (and link name) go into the header as given,
    /// without the checks tar writers make: how hostile layers are made.
    pub fn raw(mut self, kind: tar::EntryType, name: &str, link: &str, content: &[u8]) -> Tar {
        let mut header = Tar::header(kind, 0o644, 0, 0, content.len() as u64);
        let gnu = header.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_cksum();
        self.builder.append(&header, content).unwrap();
        self
    }

    /// The tar's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.builder.into_inner().unwrap()
    }
}

/// A layer as pushed: its tar, its blob, and their digests.
#[derive(Clone)]
pub struct Layer {
    /// The blob as pushed (compressed or not).
    pub blob: Vec<u8>,
    /// The blob's digest.
    pub digest: Digest,
    /// The tar's digest.
    pub diff_id: Digest,
    /// The layer's media type.
    pub media_type: &'static str,
}

impl Layer {
    /// A layer of `tar`, compressed as said.
    pub fn new(tar: Vec<u8>, compression: Compression) -> Layer {
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

    /// A gzip layer of `tar`.
    pub fn gzip(tar: Vec<u8>) -> Layer {
        Layer::new(tar, Compression::Gzip)
    }
}

/// An image's config and manifest, made from its layers.
pub struct Built {
    /// The config's bytes.
    pub config: Vec<u8>,
    /// The manifest's bytes.
    pub manifest: Vec<u8>,
    /// The layers, lowest first.
    pub layers: Vec<Layer>,
}

/// An image of `layers` for `architecture`, its config naming `diff_ids`
/// (the layers' own when `None`), with a fixed run config (`PATH`,
/// `LANG`, working directory `/work`, user `1000:1000`).
pub fn build(layers: &[Layer], architecture: &str, diff_ids: Option<Vec<Digest>>) -> Built {
    let run = json!({
        "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
        "WorkingDir": "/work",
        "User": "1000:1000",
        "Entrypoint": null,
        "Cmd": ["sh", "-c", "true"],
    });
    build_with(layers, architecture, diff_ids, run)
}

/// Like [`build`], with `run` as the config's `config` object (`Env`,
/// `WorkingDir`, `User`, …).
pub fn build_with(
    layers: &[Layer],
    architecture: &str,
    diff_ids: Option<Vec<Digest>>,
    run: serde_json::Value,
) -> Built {
    let diff_ids = diff_ids.unwrap_or_else(|| layers.iter().map(|l| l.diff_id.clone()).collect());
    let config = serde_json::to_vec(&json!({
        "architecture": architecture,
        "os": "linux",
        "config": run,
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
pub async fn push(registry: &Registry, repo: &str, tag: &str, built: &Built) -> Digest {
    push_blobs(registry, repo, built).await;
    registry
        .push_manifest(repo, tag, spec::OCI_MANIFEST, &built.manifest)
        .await
}

/// Pushes an image's layers and config.
pub async fn push_blobs(registry: &Registry, repo: &str, built: &Built) {
    for layer in &built.layers {
        registry.push_blob(repo, &layer.blob).await;
    }
    registry.push_blob(repo, &built.config).await;
}

/// Pushes an index of already-pushed manifests (`(manifest, arch)`).
pub async fn push_index(
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
