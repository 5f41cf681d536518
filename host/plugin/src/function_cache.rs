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
//! files from the compile threads made a first compile 60 % slower. What
//! the compiles made is appended as one batch when the last compile running
//! in this process ends: an index (each function's key, length and sha256,
//! the index itself checksummed), then the functions. The indexes are read
//! on the first lookup of a compile, and a function only when it is looked
//! up, so a cache holding a Python plugin's 30 MB of functions does not
//! slow a small plugin's compile; the table is dropped when the compiles
//! end, so a daemon holds it only while it compiles. A batch that is
//! truncated or whose index fails its checksum ends the read; a function
//! that fails its own is compiled again. When the file would grow past its
//! budget it is rewritten with only the functions the ending compiles
//! used.
//!
//! Like the compiled components, the file is machine code the host runs:
//! whoever can write the cache directory can run code in the host. The
//! checksums catch damage (a torn append, a bad disk), not malice; the file
//! is private to its user, as the components are.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};
use wasmtime::CacheStore;

/// The file's name in the cache directory.
pub(crate) const FILE_NAME: &str = "functions.pack";

/// Starts every batch; a new format gets a new magic.
const BATCH_MAGIC: &[u8; 8] = b"SFFUNC2\n";

/// A batch's header: the magic, the lengths of its index and of its
/// values, and the index's sha256.
const HEADER_LEN: usize = BATCH_MAGIC.len() + 8 + 8 + 32;

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
    /// The file's index and the functions made since, while a compile runs.
    table: Option<Table>,
    /// Lookups answered from the table since the first compile started.
    reused: u64,
    /// Functions compiled and added since then.
    made: u64,
}

/// What a compile can find: the file's functions, read one by one when
/// looked up, and those made since.
#[derive(Debug, Default)]
struct Table {
    /// The file as it was when the table was read (a rewrite by another
    /// process replaces the name, not this).
    file: Option<File>,
    entries: HashMap<Box<[u8]>, Entry>,
    /// The read ended early (damage, or a file of another format): a batch
    /// appended after it would never be read, so the next write rewrites.
    damaged: bool,
}

#[derive(Debug)]
struct Entry {
    value: Value,
    /// Looked up or made by a compile of this process.
    used: bool,
}

#[derive(Debug)]
enum Value {
    /// In the file: where, and the sha256 it must have.
    Stored {
        offset: u64,
        len: u32,
        sha256: [u8; 32],
    },
    /// Made by a compile of this process; not in the file yet.
    Made(Vec<u8>),
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

    /// The table, its index read from the file on first use. Only the
    /// indexes are read here: a cache holding a Python plugin's functions
    /// costs a small plugin's compile a few milliseconds, not a read of
    /// every function.
    fn table<'a>(&self, state: &'a mut State) -> &'a mut Table {
        state.table.get_or_insert_with(|| {
            let file = match File::open(&self.path) {
                Ok(file) => file,
                Err(error) => {
                    if error.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(file = %self.path.display(), "cannot read the function cache: {error}");
                    }
                    return Table::default();
                }
            };
            let (records, damage) = read_indexes(&file);
            if let Some(damage) = &damage {
                tracing::warn!(
                    file = %self.path.display(),
                    "function cache: {damage}; the functions after it are compiled again, and the file rewritten"
                );
            }
            let entries = records
                .into_iter()
                .map(|(key, value)| (key, Entry { value, used: false }))
                .collect();
            Table {
                file: Some(file),
                entries,
                damaged: damage.is_some(),
            }
        })
    }

    /// Writes what the ended compiles made and drops the table.
    fn finish(&self, state: &mut State) {
        let Some(table) = state.table.take() else {
            return;
        };
        let made = |entry: &Entry| matches!(entry.value, Value::Made(_));
        if !table.entries.values().any(made) {
            return;
        }
        if let Err(error) = self.write(&table) {
            tracing::warn!(file = %self.path.display(), "cannot write the function cache: {error}");
        }
    }

    fn write(&self, table: &Table) -> std::io::Result<()> {
        let made = table
            .entries
            .iter()
            .filter_map(|(key, entry)| match &entry.value {
                Value::Made(value) => Some((&key[..], Cow::Borrowed(&value[..]))),
                Value::Stored { .. } => None,
            });
        let batch = encode_batch(made);
        let held = match std::fs::metadata(&self.path) {
            Ok(metadata) => metadata.len(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
            Err(error) => return Err(error),
        };
        if !table.damaged && held + batch.len() as u64 <= self.budget {
            // One write of a whole batch to a file opened for appending: a
            // process appending at the same time lands before or after it.
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                // Machine code the host will run: as private as the
                // compiled components beside it.
                .mode(0o600)
                .open(&self.path)?;
            return file.write_all(&batch);
        }
        let used = table
            .entries
            .iter()
            .filter(|(_, entry)| entry.used)
            .filter_map(|(key, entry)| Some((&key[..], table.value(&entry.value)?)));
        let batch = encode_batch(used);
        let dir = self
            .path
            .parent()
            .expect("the file is in the cache directory");
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        file.write_all(&batch)?;
        file.persist(&self.path).map_err(|error| error.error)?;
        Ok(())
    }
}

impl Table {
    /// A function's compiled form; `None` for a stored one that cannot be
    /// read or fails its sha256.
    fn value<'a>(&self, value: &'a Value) -> Option<Cow<'a, [u8]>> {
        match value {
            Value::Made(value) => Some(Cow::Borrowed(value)),
            Value::Stored {
                offset,
                len,
                sha256,
            } => {
                let mut bytes = vec![0; *len as usize];
                self.file
                    .as_ref()?
                    .read_exact_at(&mut bytes, *offset)
                    .ok()?;
                (Sha256::digest(&bytes).as_slice() == sha256).then_some(Cow::Owned(bytes))
            }
        }
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let mut state = self.lock();
        let table = self.table(&mut state);
        let entry = table.entries.get(key)?;
        let Some(value) = table.value(&entry.value).map(Cow::into_owned) else {
            tracing::warn!(file = %self.path.display(), "function cache: an entry failed its checksum; compiling it again");
            table.entries.remove(key);
            return None;
        };
        table.entries.get_mut(key).expect("found above").used = true;
        state.reused += 1;
        Some(Cow::Owned(value))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut state = self.lock();
        let entry = Entry {
            value: Value::Made(value),
            used: true,
        };
        self.table(&mut state).entries.insert(key.into(), entry);
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

/// A function's key and where its compiled form is.
type Indexed = (Box<[u8]>, Value);

/// One batch of `records`: its header, its index (per function the key,
/// the value's length and sha256) and the values in the index's order.
fn encode_batch<'a>(records: impl Iterator<Item = (&'a [u8], Cow<'a, [u8]>)>) -> Vec<u8> {
    let (mut index, mut values) = (Vec::new(), Vec::new());
    for (key, value) in records {
        let len = |part: &[u8]| u32::try_from(part.len()).expect("a function is under 4 GiB");
        index.extend_from_slice(&len(key).to_le_bytes());
        index.extend_from_slice(key);
        index.extend_from_slice(&len(&value).to_le_bytes());
        index.extend_from_slice(&Sha256::digest(&value));
        values.extend_from_slice(&value);
    }
    let mut batch = Vec::with_capacity(HEADER_LEN + index.len() + values.len());
    batch.extend_from_slice(BATCH_MAGIC);
    batch.extend_from_slice(&(index.len() as u64).to_le_bytes());
    batch.extend_from_slice(&(values.len() as u64).to_le_bytes());
    batch.extend_from_slice(&Sha256::digest(&index));
    batch.extend_from_slice(&index);
    batch.extend_from_slice(&values);
    batch
}

/// The index of every sound batch in `file`, in order, with where each
/// value is; and what ended the read early, if anything did.
fn read_indexes(file: &File) -> (Vec<Indexed>, Option<String>) {
    let mut records = Vec::new();
    let file_len = match file.metadata() {
        Ok(metadata) => metadata.len(),
        Err(error) => return (records, Some(format!("cannot stat it: {error}"))),
    };
    let mut offset = 0;
    while offset < file_len {
        let damage = |what: &str| Some(format!("{what} at byte {offset}"));
        let mut header = [0; HEADER_LEN];
        if file.read_exact_at(&mut header, offset).is_err() {
            return (records, damage("a truncated batch header"));
        }
        let (magic, rest) = header.split_at(BATCH_MAGIC.len());
        if magic != BATCH_MAGIC {
            return (records, damage("no batch"));
        }
        let (index_len, rest) = rest.split_at(8);
        let (values_len, checksum) = rest.split_at(8);
        let index_len = u64::from_le_bytes(index_len.try_into().expect("8 bytes"));
        let values_len = u64::from_le_bytes(values_len.try_into().expect("8 bytes"));
        let values_at = offset + HEADER_LEN as u64 + index_len;
        let end = values_at.checked_add(values_len);
        if end.is_none_or(|end| end > file_len) {
            return (records, damage("a truncated batch"));
        }
        let mut index = vec![0; index_len as usize];
        if file
            .read_exact_at(&mut index, offset + HEADER_LEN as u64)
            .is_err()
            || Sha256::digest(&index).as_slice() != checksum
        {
            return (records, damage("a batch index failing its checksum"));
        }
        let Some(batch) = read_index(&index, values_at, values_len) else {
            return (records, damage("a garbled batch index"));
        };
        records.extend(batch);
        offset = end.expect("checked above");
    }
    (records, None)
}

/// The records of one index whose values start at `values_at` and take
/// `values_len` bytes; `None` unless they account for exactly those bytes.
fn read_index(mut index: &[u8], values_at: u64, values_len: u64) -> Option<Vec<Indexed>> {
    fn take<'a>(index: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
        let (part, rest) = index.split_at_checked(len)?;
        *index = rest;
        Some(part)
    }
    let mut records = Vec::new();
    let mut offset = values_at;
    while !index.is_empty() {
        let key_len = u32::from_le_bytes(take(&mut index, 4)?.try_into().expect("4 bytes"));
        let key = take(&mut index, key_len as usize)?;
        let len = u32::from_le_bytes(take(&mut index, 4)?.try_into().expect("4 bytes"));
        let sha256 = take(&mut index, 32)?.try_into().expect("32 bytes");
        records.push((
            key.into(),
            Value::Stored {
                offset,
                len,
                sha256,
            },
        ));
        offset += u64::from(len);
    }
    (offset == values_at + values_len).then_some(records)
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

    /// The file's records and what ended its read.
    fn indexed(dir: &Path) -> (usize, Option<String>) {
        let file = File::open(dir.join(FILE_NAME)).unwrap();
        let (records, damage) = read_indexes(&file);
        (records.len(), damage)
    }

    #[test]
    fn a_damaged_batch_ends_the_read_and_the_batches_before_it_still_count() {
        let dir = tempfile::tempdir().unwrap();
        compile(&cache(dir.path(), 1 << 20), &[], &["a"]);
        let first = std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len() as usize;
        compile(&cache(dir.path(), 1 << 20), &[], &["b"]);
        let path = dir.path().join(FILE_NAME);
        let whole = std::fs::read(&path).unwrap();
        // A byte of a key in the second batch's index (which only the
        // index's checksum tells), and a cut through its values.
        let mut flipped = whole.clone();
        flipped[first + HEADER_LEN + 4] ^= 0xff;
        for damaged in [flipped, whole[..whole.len() - 3].to_vec()] {
            std::fs::write(&path, &damaged).unwrap();
            let (records, damage) = indexed(dir.path());
            assert_eq!(records, 1);
            let damage = damage.expect("the second batch is damaged");
            assert!(damage.ends_with(&format!("at byte {first}")), "{damage}");
            assert_eq!(
                compile(&cache(dir.path(), 1 << 20), &["a", "b"], &[]),
                [true, false]
            );
        }
        // The next compile that makes something rewrites the file whole.
        compile(&cache(dir.path(), 1 << 20), &["a"], &["c"]);
        assert_eq!(indexed(dir.path()), (2, None));
        std::fs::write(
            &path,
            b"not a batch at all, but long enough for a header....",
        )
        .unwrap();
        assert_eq!(
            compile(&cache(dir.path(), 1 << 20), &["a"], &["a"]),
            [false]
        );
        assert_eq!(indexed(dir.path()), (1, None));
    }

    #[test]
    fn a_function_failing_its_checksum_is_compiled_again_and_the_rest_are_found() {
        let dir = tempfile::tempdir().unwrap();
        compile(&cache(dir.path(), 1 << 20), &[], &["a", "b"]);
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        // The values come last, in the index's order; damage the last one.
        *bytes.last_mut().unwrap() ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(indexed(dir.path()), (2, None));
        let found = compile(&cache(dir.path(), 1 << 20), &["a", "b"], &[]);
        assert_eq!(found.iter().filter(|found| **found).count(), 1, "{found:?}");
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
        assert_eq!(indexed(dir.path()), (2, None));
    }
}
