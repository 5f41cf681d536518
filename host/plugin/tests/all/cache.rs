//! The compiled-artifact cache: hits when it should, and never trusts an
//! entry that is corrupt, truncated or made under other engine settings.

use std::path::{Path, PathBuf};

use sandfleet_plugin::{CacheOutcome, HostConfig, PluginHost, Source};

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
