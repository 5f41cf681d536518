//! The store's files as JSON: image records, reference files and layer
//! metas, and the small file helpers reading them, so the on-disk format
//! is in one place. Where each file lives is in the store module's
//! layout.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::Error;
use crate::platform::Platform;
use crate::spec::RunConfig;

use super::STORE;

/// The image record on disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) manifest: Digest,
    pub(crate) config: Digest,
    pub(crate) platform: Platform,
    pub(crate) run: RunConfig,
    pub(crate) layers: Vec<RecordLayer>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RecordLayer {
    pub(crate) digest: Digest,
    pub(crate) diff_id: Digest,
    pub(crate) size: u64,
}

/// A reference file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RefFile {
    pub(crate) reference: String,
    pub(crate) manifest: Digest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<Digest>,
}

/// What an unpacked layer holds (its `layer.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct LayerMeta {
    pub(crate) diff_id: Digest,
    pub(crate) blob: Option<Digest>,
    pub(crate) blob_size: Option<u64>,
    pub(crate) bytes: u64,
    pub(crate) entries: u64,
}

pub(super) fn read_dir(dir: &Path) -> Result<Vec<std::ffi::OsString>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(STORE, "listing", dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(STORE, "listing", dir, e))?;
        let name = entry.file_name();
        // Atomic writes' temporaries are not entries yet.
        if !name.to_string_lossy().contains(".tmp.") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// A JSON file, `None` when it does not exist.
pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::io(
                STORE,
                "parsing",
                path,
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(STORE, "reading", path, e)),
    }
}

pub(super) fn touch(path: &Path) -> io::Result<()> {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &rustix::fs::Timestamps {
            last_access: now,
            last_modification: now,
        },
        rustix::fs::AtFlags::empty(),
    )?;
    Ok(())
}
