//! The compiled-artifact cache: hits when it should, and never trusts an
//! entry that is corrupt, truncated or made under other engine settings.

use std::path::{Path, PathBuf};

use sandfleet_plugin::{CacheOutcome, FunctionReuse, HostConfig, PluginHost, Source};

fn host(cache: &Path, fuel: bool) -> PluginHost {
    PluginHost::new(HostConfig {
        cache_dir: Some(cache.to_path_buf()),
        fuel,
        ..HostConfig::default()
    })
    .unwrap()
}

fn wasm() -> Vec<u8> {
    std::fs::read(sandfleet_guests::LEAST_LOADED).unwrap()
}

fn compile(host: &PluginHost) -> CacheOutcome {
    host.compile("least-loaded", &wasm(), Source::Memory)
        .unwrap()
        .cache
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    entries.sort();
    entries
}

#[test]
fn a_second_load_hits_the_cache_even_from_a_new_host() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(compile(&host(dir.path(), false)), CacheOutcome::Miss);
    assert_eq!(compile(&host(dir.path(), false)), CacheOutcome::Hit);
    assert_eq!(entries(dir.path()).len(), 1);
}

#[test]
fn a_fresh_compile_ignores_the_cache_and_leaves_an_entry_a_load_hits() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = |host: &PluginHost| {
        host.compile_fresh("least-loaded", &wasm(), Source::Memory)
            .unwrap()
            .cache
    };
    assert_eq!(fresh(&host(dir.path(), false)), CacheOutcome::Stored);
    assert_eq!(entries(dir.path()).len(), 1);
    assert_eq!(compile(&host(dir.path(), false)), CacheOutcome::Hit);
    // An entry there already is compiled past, not loaded.
    assert_eq!(fresh(&host(dir.path(), false)), CacheOutcome::Stored);
    assert_eq!(compile(&host(dir.path(), false)), CacheOutcome::Hit);
    assert_eq!(entries(dir.path()).len(), 1);
}

#[test]
fn an_entry_made_under_other_engine_settings_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(compile(&host(dir.path(), false)), CacheOutcome::Miss);
    let plain_entry = entries(dir.path()).remove(0);

    // Fuel changes the generated code: a different key, so a miss, not a hit.
    let fueled = host(dir.path(), true);
    assert_eq!(compile(&fueled), CacheOutcome::Miss);
    let fueled_entry = entries(dir.path())
        .into_iter()
        .find(|e| *e != plain_entry)
        .expect("a second entry");

    // Even an entry planted under the fueled key is recognised as foreign.
    std::fs::copy(&plain_entry, &fueled_entry).unwrap();
    match compile(&fueled) {
        CacheOutcome::Rejected(reason) => {
            assert!(reason.contains("another engine"), "{reason}")
        }
        other => panic!("expected the entry to be rejected, got {other:?}"),
    }
    // It was rewritten, so the next load hits.
    assert_eq!(compile(&fueled), CacheOutcome::Hit);
    let loaded = fueled
        .compile("least-loaded", &wasm(), Source::Memory)
        .unwrap();
    assert_eq!(loaded.contract.kind, sandfleet_plugin::Kind::Placement);
}

#[test]
fn a_corrupt_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    compile(&host(dir.path(), false));
    let entry = entries(dir.path()).remove(0);
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();

    match compile(&host(dir.path(), false)) {
        CacheOutcome::Rejected(reason) => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("expected the entry to be rejected, got {other:?}"),
    }
    assert_eq!(compile(&host(dir.path(), false)), CacheOutcome::Hit);
}

#[test]
fn a_truncated_or_foreign_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    compile(&host(dir.path(), false));
    let entry = entries(dir.path()).remove(0);
    let bytes = std::fs::read(&entry).unwrap();

    for (damage, expected) in [
        (bytes[..bytes.len() - 100].to_vec(), "checksum"),
        (bytes[..10].to_vec(), "truncated"),
        (
            b"not an entry at all".to_vec(),
            "not a sandfleet cache entry",
        ),
    ] {
        std::fs::write(&entry, &damage).unwrap();
        match compile(&host(dir.path(), false)) {
            CacheOutcome::Rejected(reason) => assert!(reason.contains(expected), "{reason}"),
            other => panic!("expected rejection ({expected}), got {other:?}"),
        }
    }
}

/// `policy`'s answer on [`crate::three_clusters`], from a registry on a
/// host caching in `dir`.
fn placed_by(dir: &Path, wasm: &str) -> u32 {
    let registry = crate::registry_with(HostConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..HostConfig::default()
    });
    crate::load(&registry, "policy", wasm);
    let policy = registry.placement("policy").unwrap();
    policy
        .place_blocking(&crate::demand(0), &crate::three_clusters())
        .unwrap()
}

/// Compiles `wasm` afresh on a new host caching in `dir`; how it used the
/// function cache.
fn fresh_functions(dir: &Path, budget: u64, wasm: &str) -> FunctionReuse {
    let host = PluginHost::new(HostConfig {
        cache_dir: Some(dir.to_path_buf()),
        cache_budget: budget,
        ..HostConfig::default()
    })
    .unwrap();
    host.compile_fresh("policy", &std::fs::read(wasm).unwrap(), Source::Memory)
        .unwrap()
        .functions
        .expect("compiled with the function cache")
}

const BUDGET: u64 = sandfleet_plugin::DEFAULT_CACHE_BUDGET;

#[test]
fn another_component_reuses_the_functions_an_earlier_compile_made_and_still_answers_right() {
    let dir = tempfile::tempdir().unwrap();
    let first = fresh_functions(dir.path(), BUDGET, sandfleet_guests::LEAST_LOADED);
    assert!(first.compiled > 100, "{first:?}");
    // The same component, compiled again by another host, takes most of
    // its functions from the first compile (not all: a few functions'
    // keys differ from one engine to the next).
    let again = fresh_functions(dir.path(), BUDGET, sandfleet_guests::LEAST_LOADED);
    assert!(
        again.compiled * 3 < first.compiled,
        "{again:?} after {first:?}"
    );
    // Another guest shares the standard library's functions with it.
    let other = fresh_functions(dir.path(), BUDGET, sandfleet_guests::PICK_LAST);
    assert!(other.reused > other.compiled, "{other:?}");
    assert_eq!(placed_by(dir.path(), sandfleet_guests::PICK_LAST), 2);
    assert_eq!(placed_by(dir.path(), sandfleet_guests::LEAST_LOADED), 1);
}

#[test]
fn a_damaged_function_cache_is_compiled_past_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = sandfleet_guests::LEAST_LOADED;
    let cold = fresh_functions(dir.path(), BUDGET, wasm);
    let pack = dir.path().join("functions.pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    // A byte of the first batch's index, just after its 56-byte header.
    bytes[70] ^= 0xff;
    std::fs::write(&pack, &bytes).unwrap();
    // The batch is not read: every function is compiled again, what they
    // compile answers right, and the file is written anew, not appended
    // to behind the damage.
    let damaged = fresh_functions(dir.path(), BUDGET, wasm);
    assert!(
        damaged.compiled * 10 > cold.compiled * 9,
        "{damaged:?} after {cold:?}"
    );
    assert_eq!(placed_by(dir.path(), wasm), 1);
    let mended = fresh_functions(dir.path(), BUDGET, wasm);
    assert!(
        mended.compiled * 3 < cold.compiled,
        "{mended:?} after {cold:?}"
    );
}

/// Sets `path`'s modification time to `ago` before now.
fn used_ago(path: &Path, ago: std::time::Duration) {
    let file = std::fs::File::options().append(true).open(path).unwrap();
    file.set_modified(std::time::SystemTime::now() - ago)
        .unwrap();
}

#[test]
fn past_its_budget_the_cache_drops_the_least_recently_used_entries_first() {
    let hour = std::time::Duration::from_secs(3600);
    let (kept, stored) = (sandfleet_guests::LEAST_LOADED, sandfleet_guests::PICK_LAST);
    // What the two components and their functions take on disk.
    let measure = tempfile::tempdir().unwrap();
    for wasm in [kept, stored] {
        placed_by(measure.path(), wasm);
    }
    let real: u64 = std::fs::read_dir(measure.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();

    let dir = tempfile::tempdir().unwrap();
    placed_by(dir.path(), kept);
    let [kept_entry] = entries(dir.path()).try_into().unwrap();
    // An entry another component left an hour ago, big enough that the
    // next store puts the directory over its budget; the component above
    // looks older still, until a load uses it.
    let old = dir.path().join(format!("{}-0.cwasm", "0".repeat(64)));
    std::fs::File::create(&old)
        .unwrap()
        .set_len(4 * real)
        .unwrap();
    used_ago(&old, hour);
    used_ago(&kept_entry, 2 * hour);
    let abandoned = dir.path().join(".tmpABANDONED");
    std::fs::write(&abandoned, "half an entry").unwrap();
    used_ago(&abandoned, 2 * hour);
    let writing = dir.path().join(".tmpWRITING");
    std::fs::write(&writing, "half an entry").unwrap();

    let host = PluginHost::new(HostConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        cache_budget: 4 * real,
        ..HostConfig::default()
    })
    .unwrap();
    let load = |wasm: &str| {
        let bytes = std::fs::read(wasm).unwrap();
        host.compile("policy", &bytes, Source::Memory)
            .unwrap()
            .cache
    };
    assert_eq!(load(kept), CacheOutcome::Hit);
    assert_eq!(load(stored), CacheOutcome::Miss);

    assert!(!old.exists(), "the least recently used entry stays");
    assert!(kept_entry.exists(), "an entry a load used went");
    assert_eq!(entries(dir.path()).len(), 2);
    assert!(!abandoned.exists() && writing.exists());
    let total: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total <= 3 * real, "{total} > {}", 3 * real);
    assert_eq!(load(kept), CacheOutcome::Hit);
}

#[test]
fn clearing_removes_the_caches_files_and_leaves_a_writers_and_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    placed_by(dir.path(), sandfleet_guests::LEAST_LOADED);
    let [entry] = entries(dir.path()).try_into().unwrap();
    let abandoned = dir.path().join(".tmpABANDONED");
    std::fs::write(&abandoned, "half an entry").unwrap();
    used_ago(&abandoned, std::time::Duration::from_secs(7200));
    let writing = dir.path().join(".tmpWRITING");
    std::fs::write(&writing, "half an entry").unwrap();
    let foreign = dir.path().join("notes.txt");
    std::fs::write(&foreign, "not the cache's").unwrap();
    let size = |path: &Path| std::fs::metadata(path).unwrap().len();
    let functions = dir.path().join("functions.pack");

    let held = sandfleet_plugin::cache_contents(dir.path()).unwrap();
    assert_eq!(
        (held.components, held.component_bytes),
        (1, size(&entry)),
        "{held:?}"
    );
    assert_eq!(held.function_bytes, Some(size(&functions)), "{held:?}");
    assert_eq!((held.abandoned, held.being_written), (1, 1), "{held:?}");
    assert_eq!(
        held.bytes(),
        size(&entry) + size(&functions) + size(&abandoned)
    );
    assert!(held.last_used.is_some());

    let removed = sandfleet_plugin::clear_cache(dir.path()).unwrap();
    assert_eq!(removed, held);
    assert!(!entry.exists() && !functions.exists() && !abandoned.exists());
    assert!(writing.exists() && foreign.exists());
    let after = sandfleet_plugin::cache_contents(dir.path()).unwrap();
    assert_eq!((after.components, after.bytes()), (0, 0), "{after:?}");
    assert_eq!(after.function_bytes, None);
    // The next compile makes most functions again (it reuses only those
    // of a body it compiled a moment before), where a compile over the
    // full cache reuses most.
    let again = fresh_functions(dir.path(), BUDGET, sandfleet_guests::LEAST_LOADED);
    assert!(again.compiled > again.reused, "{again:?}");
    let over_full = fresh_functions(dir.path(), BUDGET, sandfleet_guests::LEAST_LOADED);
    assert!(over_full.reused > over_full.compiled, "{over_full:?}");
}

#[test]
fn a_missing_cache_directory_holds_nothing_and_clears_as_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("never-made");
    let empty = sandfleet_plugin::CacheContents::default();
    assert_eq!(sandfleet_plugin::cache_contents(&missing).unwrap(), empty);
    assert_eq!(sandfleet_plugin::clear_cache(&missing).unwrap(), empty);
    assert!(!missing.exists());
}
