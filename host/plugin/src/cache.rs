//! The on-disk cache of compiled components.
//!
//! An entry is keyed by the component's sha256 and by wasmtime's
//! compatibility hash (its version and every engine setting that affects
//! code), so a host with other settings never finds another host's entries.
//! An entry repeats its key in a header and carries the sha256 of the compiled
//! artifact; an entry whose header or checksum does not match is recompiled
//! and overwritten, never loaded.
//!
//! The directory is kept under a budget: a load that hits an entry marks it
//! used (its modification time), and a store that puts the directory over
//! the budget removes the least recently used entries until it holds three
//! quarters of it. A Python plugin's entry is about 30 MB and every rebuild
//! makes a new one, so an unbounded cache grows by that on every save of a
//! plugin being written.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 8] = b"SFCWASM1";

/// How old a writer's temporary file must be before a sweep takes it for
/// one a crashed writer left.
const ABANDONED: Duration = Duration::from_secs(3600);

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
    /// The bytes the directory may hold.
    budget: u64,
}

impl ArtifactCache {
    /// A cache in `dir` (made absolute, and created when missing) holding
    /// at most about `budget` bytes.
    pub(crate) fn new(dir: PathBuf, budget: u64) -> std::io::Result<Self> {
        let dir = std::path::absolute(dir)?;
        std::fs::create_dir_all(&dir)?;
        Ok(ArtifactCache { dir, budget })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
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
                    Ok(component) => {
                        mark_used(&path);
                        return Ok((component, CacheOutcome::Hit));
                    }
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
        if let Err(e) = self.sweep(&path) {
            tracing::warn!(dir = %self.dir.display(), "cannot keep the plugin cache to its budget: {e}");
        }
    }

    /// Removes the least recently used entries (never `keep`) while the
    /// directory holds more than its budget, down to three quarters of it,
    /// and temporary files a crashed writer left.
    fn sweep(&self, keep: &Path) -> std::io::Result<()> {
        let now = SystemTime::now();
        let mut held = 0;
        let mut entries = Vec::new();
        for file in std::fs::read_dir(&self.dir)? {
            let file = file?;
            let Ok(metadata) = file.metadata() else {
                continue; // removed meanwhile
            };
            if !metadata.is_file() {
                continue;
            }
            let (path, used) = (file.path(), metadata.modified()?);
            match CacheFile::of(&file.file_name().to_string_lossy()) {
                Some(CacheFile::Temporary) if is_abandoned(used, now) => {
                    remove(&path)?;
                    continue;
                }
                Some(CacheFile::Component) if path != keep => {
                    entries.push((used, metadata.len(), path));
                }
                _ => {}
            }
            held += metadata.len();
        }
        if held <= self.budget {
            return Ok(());
        }
        entries.sort();
        let target = self.budget / 4 * 3;
        for (_, size, path) in entries {
            if held <= target {
                break;
            }
            remove(&path)?;
            held -= size;
        }
        Ok(())
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

/// What a file in the cache directory is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CacheFile {
    /// A compiled component.
    Component,
    /// The function cache.
    Functions,
    /// A writer's file, renamed into place once whole.
    Temporary,
}

impl CacheFile {
    fn of(name: &str) -> Option<CacheFile> {
        if name.starts_with(".tmp") {
            Some(CacheFile::Temporary)
        } else if name.ends_with(".cwasm") {
            Some(CacheFile::Component)
        } else if name == crate::function_cache::FILE_NAME {
            Some(CacheFile::Functions)
        } else {
            None
        }
    }
}

/// Whether a temporary file last written at `written` is one a crashed
/// writer left, not one being written.
fn is_abandoned(written: SystemTime, now: SystemTime) -> bool {
    now.duration_since(written).is_ok_and(|age| age > ABANDONED)
}

/// What a plugin cache directory holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheContents {
    /// Compiled components.
    pub components: usize,
    /// Their bytes.
    pub component_bytes: u64,
    /// The bytes of the function cache (Cranelift's compiled functions,
    /// reused when a changed component is compiled), when there is one.
    pub function_bytes: Option<u64>,
    /// Files crashed writers left.
    pub abandoned: usize,
    /// Their bytes.
    pub abandoned_bytes: u64,
    /// Files a writer is writing now: left alone, and not in
    /// [`CacheContents::bytes`].
    pub being_written: usize,
    /// When a component was last loaded or stored.
    pub last_used: Option<SystemTime>,
}

impl CacheContents {
    /// The bytes of the components, the function cache and the abandoned
    /// files.
    pub fn bytes(&self) -> u64 {
        self.component_bytes + self.function_bytes.unwrap_or(0) + self.abandoned_bytes
    }
}

/// What the plugin cache in `dir` holds; nothing when `dir` does not exist.
/// Files of other names are not the cache's and are not counted.
pub fn cache_contents(dir: &Path) -> std::io::Result<CacheContents> {
    visit_cache(dir, |_| Ok(()))
}

/// Empties the plugin cache in `dir` and returns what it removed: its
/// compiled components, its function cache and the files crashed writers
/// left, never a file a writer is writing now, and no file of another
/// name. A host using the cache meanwhile loses nothing it holds open, and
/// compiles again what it no longer finds.
pub fn clear_cache(dir: &Path) -> std::io::Result<CacheContents> {
    visit_cache(dir, remove)
}

/// Tallies the cache's files in `dir`, calling `act` on each but those
/// being written.
fn visit_cache(
    dir: &Path,
    mut act: impl FnMut(&Path) -> std::io::Result<()>,
) -> std::io::Result<CacheContents> {
    let mut contents = CacheContents::default();
    let files = match std::fs::read_dir(dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(contents),
        other => other?,
    };
    let now = SystemTime::now();
    for file in files {
        let file = file?;
        let Some(kind) = CacheFile::of(&file.file_name().to_string_lossy()) else {
            continue;
        };
        let Ok(metadata) = file.metadata() else {
            continue; // removed meanwhile
        };
        if !metadata.is_file() {
            continue;
        }
        let (size, used) = (metadata.len(), metadata.modified()?);
        match kind {
            CacheFile::Temporary if !is_abandoned(used, now) => {
                contents.being_written += 1;
                continue;
            }
            CacheFile::Temporary => {
                contents.abandoned += 1;
                contents.abandoned_bytes += size;
            }
            CacheFile::Component => {
                contents.components += 1;
                contents.component_bytes += size;
                contents.last_used = contents.last_used.max(Some(used));
            }
            CacheFile::Functions => contents.function_bytes = Some(size),
        }
        act(&file.path())?;
    }
    Ok(contents)
}

/// Marks an entry used now, for the sweep's order; an entry that cannot be
/// marked is only evicted sooner.
fn mark_used(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Removes `path`, which another process may have removed first.
fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
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
