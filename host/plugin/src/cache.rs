//! The on-disk cache of compiled components.
//!
//! An entry is keyed by the component's sha256 and by wasmtime's
//! compatibility hash (its version and every engine setting that affects
//! code), so a host with other settings never finds another host's entries.
//! An entry repeats its key in a header and carries the sha256 of the compiled
//! artifact; an entry whose header or checksum does not match is recompiled
//! and overwritten, never loaded.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 8] = b"SFCWASM1";

/// How a load used the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// No cache configured; compiled.
    Disabled,
    /// Loaded a valid entry; nothing compiled.
    Hit,
    /// No entry; compiled and stored.
    Miss,
    /// An entry existed but was not trusted; compiled and overwritten.
    Rejected(String),
    /// Compiled without looking at the cache, then stored for later loads.
    Stored,
}

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub(crate) struct ArtifactCache {
    dir: PathBuf,
}

impl ArtifactCache {
    /// A cache in `dir`, which must be absolute and is created when missing.
    pub(crate) fn new(dir: PathBuf) -> std::io::Result<Self> {
        let dir = std::path::absolute(dir)?;
        std::fs::create_dir_all(&dir)?;
        Ok(ArtifactCache { dir })
    }

    /// Whether an entry for `source_sha` under `engine` exists; it is
    /// verified only when loaded.
    pub(crate) fn contains(&self, engine: &Engine, source_sha: &str) -> bool {
        let header = Header::new(engine, source_sha);
        self.dir.join(header.file_name()).is_file()
    }

    /// Loads the compiled form of `wasm` (whose sha256 is `source_sha`),
    /// compiling and storing it when there is no trustworthy entry.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
        source_sha: &str,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let header = Header::new(engine, source_sha);
        let path = self.dir.join(header.file_name());
        let outcome = match std::fs::read(&path) {
            Err(_) => CacheOutcome::Miss,
            Ok(entry) => match verify(&entry, &header) {
                Ok(artifact) => match deserialize(engine, artifact) {
                    Ok(component) => return Ok((component, CacheOutcome::Hit)),
                    Err(e) => CacheOutcome::Rejected(format!("wasmtime refused it: {e}")),
                },
                Err(reason) => CacheOutcome::Rejected(reason),
            },
        };
        if let CacheOutcome::Rejected(reason) = &outcome {
            tracing::warn!(entry = %path.display(), "ignoring compiled-cache entry: {reason}");
        }
        let component = Component::new(engine, wasm)?;
        self.store_under(&header, &component);
        Ok((component, outcome))
    }

    /// Stores `component`, compiled from the component whose sha256 is
    /// `source_sha`, replacing any entry for it.
    pub(crate) fn store(&self, engine: &Engine, source_sha: &str, component: &Component) {
        self.store_under(&Header::new(engine, source_sha), component);
    }

    /// A cache that cannot be written is only a slower next load: warned
    /// about, not an error.
    fn store_under(&self, header: &Header, component: &Component) {
        let path = self.dir.join(header.file_name());
        if let Err(e) = self.write(&path, header, component) {
            tracing::warn!(entry = %path.display(), "cannot write compiled-cache entry: {e}");
        }
    }

    fn write(&self, path: &Path, header: &Header, component: &Component) -> wasmtime::Result<()> {
        let artifact = component.serialize()?;
        let header_line = header.encode(&hex_sha256(&artifact));
        // Write beside the entry and rename, so readers never see half an entry.
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(MAGIC)?;
        tmp.write_all(&(header_line.len() as u32).to_le_bytes())?;
        tmp.write_all(header_line.as_bytes())?;
        tmp.write_all(&artifact)?;
        tmp.persist(path)?;
        Ok(())
    }
}

/// What an entry must say about itself to be trusted.
struct Header {
    /// wasmtime's compatibility hash, which covers its version, the target
    /// and every setting that changes generated code.
    engine: String,
    source: String,
}

impl Header {
    fn new(engine: &Engine, source_sha: &str) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Header {
            engine: format!("{:016x}", hasher.finish()),
            source: source_sha.to_string(),
        }
    }

    fn file_name(&self) -> String {
        format!("{}-{}.cwasm", self.source, self.engine)
    }

    fn encode(&self, artifact_sha: &str) -> String {
        format!(
            "engine={} source={} artifact={}",
            self.engine, self.source, artifact_sha
        )
    }
}

/// Returns the artifact of `entry` if the entry matches `expected` exactly.
fn verify<'a>(entry: &'a [u8], expected: &Header) -> Result<&'a [u8], String> {
    let rest = entry
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not a sandfleet cache entry")?;
    let (len, rest) = rest.split_at_checked(4).ok_or("truncated header")?;
    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    let (header, artifact) = rest.split_at_checked(len).ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "garbled header")?;
    let artifact_sha = header
        .rsplit_once(" artifact=")
        .map(|(_, sha)| sha)
        .ok_or("garbled header")?;
    if header != expected.encode(artifact_sha) {
        return Err(format!(
            "made for another engine or component (entry says `{header}`)"
        ));
    }
    if hex_sha256(artifact) != artifact_sha {
        return Err("checksum mismatch: the entry is corrupt or truncated".into());
    }
    Ok(artifact)
}

#[allow(
    unsafe_code,
    reason = "deserializing trusts the bytes as machine code; `verify` checked them against the checksum written with them"
)]
fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: the artifact was produced by `Component::serialize` for an engine
    // with the same compatibility hash, and its sha256 matches the one stored
    // at write time, so it is the bytes wasmtime wrote.
    unsafe { Component::deserialize(engine, artifact) }
}

pub(crate) fn hex_sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        use std::fmt::Write as _;
        write!(hex, "{byte:02x}").expect("writing to a String");
    }
    hex
}
