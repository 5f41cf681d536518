//! Cranelift's cache of compiled functions, packed in one file beside the
//! compiled components.
//!
//! A plugin rebuilt from changed source is a new component, so the
//! component cache misses, yet most of its functions are the ones compiled
//! last time: a Python plugin carries CPython's ~14,000 functions, which
//! are the same from one `componentize-py` build to the next, and a
//! JavaScript one the StarlingMonkey engine's. Cranelift keys each function
//! by its body and the compiler's settings (its own version is checked on
//! reuse), so an entry made by other settings is never used, only kept
//! until the file is compacted.
//!
//! The functions are kept in one file, not a file each: creating 14,000
//! files from the compile threads made a first compile 60 % slower. The
//! file is read on the first lookup of a compile, and what the compiles
//! made is appended as one checksummed batch when the last compile running
//! in this process ends; then the table is dropped, so a daemon holds it
//! only while it compiles. A batch that is truncated or fails its checksum
//! ends the read. When the file would grow past its budget it is rewritten
//! with only the functions the ending compiles used.
//!
//! Like the compiled components, the file is machine code the host runs:
//! whoever can write the cache directory can run code in the host. The
//! checksums catch damage (a torn append, a bad disk), not malice; the file
//! is private to its user, as the components are.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};
use wasmtime::CacheStore;

/// The file's name in the cache directory.
pub(crate) const FILE_NAME: &str = "functions.pack";

/// Starts every batch; a new format gets a new magic.
const BATCH_MAGIC: &[u8; 8] = b"SFFUNC1\n";

/// A batch's header: the magic, the body's length and its sha256.
const HEADER_LEN: usize = BATCH_MAGIC.len() + 8 + 32;

/// Cranelift's compiled functions, shared by the compiles of one engine.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    path: PathBuf,
    /// The size past which the file is rewritten with only what was used.
    budget: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Compiles running now; the last to end writes what they made.
    compiles: usize,
    /// The file's functions and those made since, while a compile runs.
    table: Option<HashMap<Box<[u8]>, Entry>>,
    /// Lookups answered from the table since the first compile started.
    reused: u64,
    /// Functions compiled and added since then.
    made: u64,
}

#[derive(Debug)]
struct Entry {
    value: Arc<[u8]>,
    /// Looked up or made by a compile of this process.
    used: bool,
    /// Not in the file yet.
    fresh: bool,
}

/// How a compile used the function cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FunctionReuse {
    /// Functions taken from the cache.
    pub reused: u64,
    /// Functions Cranelift compiled (and the cache then kept).
    pub compiled: u64,
}

impl FunctionCache {
    /// A cache kept in `dir/functions.pack`, rewritten once it would pass
    /// `budget` bytes.
    pub(crate) fn new(dir: &Path, budget: u64) -> Self {
        FunctionCache {
            path: dir.join(FILE_NAME),
            budget,
            state: Mutex::new(State::default()),
        }
    }

    /// Marks a compile running until the returned guard drops; the guard
    /// says how the compiles that ran meanwhile used the cache.
    pub(crate) fn compiling(self: &Arc<Self>) -> Compiling {
        let mut state = self.lock();
        if state.compiles == 0 {
            state.reused = 0;
            state.made = 0;
        }
        state.compiles += 1;
        Compiling {
            cache: Arc::clone(self),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("function cache lock poisoned")
    }

    /// The table, read from the file on first use.
    fn table<'a>(&self, state: &'a mut State) -> &'a mut HashMap<Box<[u8]>, Entry> {
        state.table.get_or_insert_with(|| {
            let bytes = match std::fs::read(&self.path) {
                Ok(bytes) => bytes,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(error) => {
                    tracing::warn!(file = %self.path.display(), "cannot read the function cache: {error}");
                    Vec::new()
                }
            };
            let (records, damage) = read_batches(&bytes);
            if let Some(damage) = damage {
                tracing::warn!(
                    file = %self.path.display(),
                    "function cache: {damage}; the functions after it are compiled again"
                );
            }
            records
                .into_iter()
                .map(|(key, value)| {
                    let entry = Entry {
                        value: value.into(),
                        used: false,
                        fresh: false,
                    };
                    (key.into(), entry)
                })
                .collect()
        })
    }

    /// Writes what the ended compiles made and drops the table.
    fn finish(&self, state: &mut State) {
        let Some(table) = state.table.take() else {
            return;
        };
        if !table.values().any(|entry| entry.fresh) {
            return;
        }
        if let Err(error) = self.write(&table) {
            tracing::warn!(file = %self.path.display(), "cannot write the function cache: {error}");
        }
    }

    fn write(&self, table: &HashMap<Box<[u8]>, Entry>) -> std::io::Result<()> {
        let fresh = encode_batch(table.iter().filter(|(_, entry)| entry.fresh));
        let held = match std::fs::metadata(&self.path) {
            Ok(metadata) => metadata.len(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
            Err(error) => return Err(error),
        };
        if held + fresh.len() as u64 <= self.budget {
            // One write of a whole batch to a file opened for appending: a
            // process appending at the same time lands before or after it.
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                // Machine code the host will run: as private as the
                // compiled components beside it.
                .mode(0o600)
                .open(&self.path)?;
            return file.write_all(&fresh);
        }
        let used = encode_batch(table.iter().filter(|(_, entry)| entry.used));
        let dir = self
            .path
            .parent()
            .expect("the file is in the cache directory");
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        file.write_all(&used)?;
        file.persist(&self.path).map_err(|error| error.error)?;
        Ok(())
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let mut state = self.lock();
        let entry = self.table(&mut state).get_mut(key)?;
        entry.used = true;
        let value = Arc::clone(&entry.value);
        state.reused += 1;
        Some(Cow::Owned(value.to_vec()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut state = self.lock();
        let entry = Entry {
            value: value.into(),
            used: true,
            fresh: true,
        };
        self.table(&mut state).insert(key.into(), entry);
        state.made += 1;
        true
    }
}

/// A compile in progress; see [`FunctionCache::compiling`].
pub(crate) struct Compiling {
    cache: Arc<FunctionCache>,
}

impl Compiling {
    /// How the compiles running since the first of them started used the
    /// cache (exact when this compile ran alone).
    pub(crate) fn reuse(&self) -> FunctionReuse {
        let state = self.cache.lock();
        FunctionReuse {
            reused: state.reused,
            compiled: state.made,
        }
    }
}

impl Drop for Compiling {
    fn drop(&mut self) {
        let mut state = self.cache.lock();
        state.compiles -= 1;
        if state.compiles == 0 {
            self.cache.finish(&mut state);
        }
    }
}

/// A function's key and its compiled form, as the file holds them.
type Record<'a> = (&'a [u8], &'a [u8]);

/// One batch holding `entries`.
fn encode_batch<'a>(entries: impl Iterator<Item = (&'a Box<[u8]>, &'a Entry)>) -> Vec<u8> {
    let mut body = Vec::new();
    for (key, entry) in entries {
        for part in [&key[..], &entry.value[..]] {
            let len = u32::try_from(part.len()).expect("a function's entry is under 4 GiB");
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(part);
        }
    }
    let mut batch = Vec::with_capacity(HEADER_LEN + body.len());
    batch.extend_from_slice(BATCH_MAGIC);
    batch.extend_from_slice(&(body.len() as u64).to_le_bytes());
    batch.extend_from_slice(&Sha256::digest(&body));
    batch.extend_from_slice(&body);
    batch
}

/// The records of every sound batch in `bytes`, in order, and what ended
/// the read early, if anything did.
fn read_batches(mut bytes: &[u8]) -> (Vec<Record<'_>>, Option<String>) {
    let mut records = Vec::new();
    let mut offset = 0;
    while !bytes.is_empty() {
        let damage = |what: &str| Some(format!("{what} at byte {offset}"));
        let Some((header, rest)) = bytes.split_at_checked(HEADER_LEN) else {
            return (records, damage("a truncated batch header"));
        };
        let (magic, header) = header.split_at(BATCH_MAGIC.len());
        if magic != BATCH_MAGIC {
            return (records, damage("no batch"));
        }
        let (len, checksum) = header.split_at(8);
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
        let Some((body, rest)) = usize::try_from(len)
            .ok()
            .and_then(|len| rest.split_at_checked(len))
        else {
            return (records, damage("a truncated batch"));
        };
        if Sha256::digest(body).as_slice() != checksum {
            return (records, damage("a batch failing its checksum"));
        }
        let Some(batch) = read_records(body) else {
            return (records, damage("a garbled batch"));
        };
        records.extend(batch);
        offset += HEADER_LEN + body.len();
        bytes = rest;
    }
    (records, None)
}

fn read_records(mut body: &[u8]) -> Option<Vec<Record<'_>>> {
    let mut take = || {
        let (len, rest) = body.split_at_checked(4)?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (part, rest) = rest.split_at_checked(len)?;
        body = rest;
        Some(part)
    };
    let mut records = Vec::new();
    loop {
        let Some(key) = take() else {
            return body.is_empty().then_some(records);
        };
        records.push((key, take()?));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path, budget: u64) -> Arc<FunctionCache> {
        Arc::new(FunctionCache::new(dir, budget))
    }

    /// Runs one compile that looks up `gets` and makes `makes`.
    fn compile(cache: &Arc<FunctionCache>, gets: &[&str], makes: &[&str]) -> Vec<bool> {
        let compiling = cache.compiling();
        let found = gets
            .iter()
            .map(|key| cache.get(key.as_bytes()).is_some())
            .collect();
        for key in makes {
            assert!(cache.insert(key.as_bytes(), format!("code of {key}").into_bytes()));
        }
        drop(compiling);
        found
    }

    #[test]
    fn a_later_compile_in_another_process_finds_what_an_earlier_one_made() {
        let dir = tempfile::tempdir().unwrap();
        compile(&cache(dir.path(), 1 << 20), &["a", "b"], &["a", "b"]);
        let later = cache(dir.path(), 1 << 20);
        let compiling = later.compiling();
        assert_eq!(later.get(b"a").as_deref(), Some(&b"code of a"[..]));
        assert!(later.get(b"c").is_none());
        later.insert(b"c", b"code of c".to_vec());
        assert_eq!(
            compiling.reuse(),
            FunctionReuse {
                reused: 1,
                compiled: 1
            }
        );
        drop(compiling);
        // Appended as a second batch; the third compile finds all three.
        assert_eq!(
            compile(&cache(dir.path(), 1 << 20), &["a", "b", "c"], &[]),
            [true, true, true]
        );
    }

    #[test]
    fn nothing_is_read_or_written_without_a_lookup_or_a_new_function() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), 1 << 20);
        drop(cache.compiling());
        assert!(!dir.path().join(FILE_NAME).exists());
        compile(&cache, &["a"], &["a"]);
        let written = std::fs::read(dir.path().join(FILE_NAME)).unwrap();
        compile(&cache, &["a"], &[]);
        assert_eq!(std::fs::read(dir.path().join(FILE_NAME)).unwrap(), written);
        assert!(
            cache.lock().table.is_none(),
            "the table is dropped after a compile"
        );
    }

    #[test]
    fn a_damaged_batch_ends_the_read_and_the_batches_before_it_still_count() {
        let dir = tempfile::tempdir().unwrap();
        compile(&cache(dir.path(), 1 << 20), &[], &["a"]);
        let first = std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len() as usize;
        compile(&cache(dir.path(), 1 << 20), &[], &["b"]);
        let path = dir.path().join(FILE_NAME);
        let whole = std::fs::read(&path).unwrap();
        let mut flipped = whole.clone();
        *flipped.last_mut().unwrap() ^= 0xff;
        for damaged in [flipped, whole[..whole.len() - 3].to_vec()] {
            std::fs::write(&path, &damaged).unwrap();
            let (records, damage) = read_batches(&damaged);
            assert_eq!(records.len(), 1);
            let damage = damage.expect("the second batch is damaged");
            assert!(damage.ends_with(&format!("at byte {first}")), "{damage}");
            assert_eq!(
                compile(&cache(dir.path(), 1 << 20), &["a", "b"], &[]),
                [true, false]
            );
        }
        std::fs::write(
            &path,
            b"not a batch at all, but long enough for a header....",
        )
        .unwrap();
        assert_eq!(compile(&cache(dir.path(), 1 << 20), &["a"], &[]), [false]);
    }

    #[test]
    fn past_its_budget_the_file_keeps_only_what_the_last_compiles_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        compile(&cache(dir.path(), 1 << 20), &[], &["old", "kept"]);
        let budget = std::fs::metadata(&path).unwrap().len() + 10;
        let cache = cache(dir.path(), budget);
        compile(&cache, &["kept"], &["new"]);
        assert!(std::fs::metadata(&path).unwrap().len() <= budget);
        assert_eq!(
            compile(&cache, &["old", "kept", "new"], &[]),
            [false, true, true]
        );
    }

    #[test]
    fn concurrent_compiles_write_once_when_the_last_ends() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), 1 << 20);
        let first = cache.compiling();
        let second = cache.compiling();
        cache.insert(b"a", b"code of a".to_vec());
        drop(first);
        assert!(!dir.path().join(FILE_NAME).exists());
        cache.insert(b"b", b"code of b".to_vec());
        assert_eq!(
            second.reuse(),
            FunctionReuse {
                reused: 0,
                compiled: 2
            }
        );
        drop(second);
        let written = std::fs::read(dir.path().join(FILE_NAME)).unwrap();
        let (records, damage) = read_batches(&written);
        assert_eq!((records.len(), damage), (2, None));
    }
}
