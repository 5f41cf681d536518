//! Bad input at load time: each gives one clear error naming the file and
//! what is wrong, and the serving version is untouched.

use std::path::Path;

use sandfleet_plugin::{Kind, LoadError, LookupError, Source};

use crate::{demand, load, registry, three_clusters};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_file_that_is_not_a_component_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let path = write(dir.path(), "notes.wasm", b"this is not wasm");
    let error = registry.load_file(&path).unwrap_err();
    assert!(matches!(error, LoadError::NotComponent { .. }), "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "{}: not a WebAssembly component: no WebAssembly header",
            path.display()
        )
    );
}

#[test]
fn a_core_module_is_told_to_be_built_as_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    // The smallest core module: magic and version 1.
    let path = write(dir.path(), "core.wasm", b"\0asm\x01\0\0\0");
    let error = registry.load_file(&path).unwrap_err().to_string();
    assert!(error.contains("core module"), "{error}");
    assert!(error.contains("wasm32-wasip2"), "{error}");
}

#[test]
fn a_truncated_component_fails_to_compile_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(sandfleet_guests::LEAST_LOADED).unwrap();
    let path = write(dir.path(), "half.wasm", &bytes[..bytes.len() / 2]);
    let error = registry().load_file(&path).unwrap_err();
    assert!(matches!(error, LoadError::Invalid { .. }), "{error}");
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}: does not compile", path.display()))
    );
}

#[test]
fn an_unknown_contract_version_is_refused() {
    let error = registry()
        .load_file(Path::new(sandfleet_guests::FUTURE_CONTRACT))
        .unwrap_err();
    match &error {
        LoadError::UnknownVersion {
            found, supported, ..
        } => {
            assert_eq!(found, "99.0.0");
            assert_eq!(supported, "0.2.0, 0.1.0");
        }
        other => panic!("expected UnknownVersion, got {other}"),
    }
    assert!(
        error
            .to_string()
            .contains("built against plugin contract 99.0.0"),
        "{error}"
    );
}

#[test]
fn a_missing_file_is_a_read_error() {
    let error = registry()
        .load_file(Path::new("/nonexistent/dir/policy.wasm"))
        .unwrap_err();
    assert!(matches!(error, LoadError::Read { .. }), "{error}");
    assert!(
        error
            .to_string()
            .starts_with("/nonexistent/dir/policy.wasm: cannot read")
    );
}

#[test]
fn a_plugin_of_another_world_cannot_replace_one() {
    let registry = registry();
    load(&registry, "policy", sandfleet_guests::LEAST_LOADED);
    let sizing = std::fs::read(sandfleet_guests::PROPORTIONAL).unwrap();
    let error = registry
        .load_bytes("policy", &sizing, Source::Memory)
        .unwrap_err();
    match &error {
        LoadError::WrongWorld {
            found, expected, ..
        } => {
            assert_eq!((*found, *expected), (Kind::Sizing, Kind::Placement));
        }
        other => panic!("expected WrongWorld, got {other}"),
    }
    // The placement policy still serves.
    let policy = registry.placement("policy").unwrap();
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        1
    );
}

#[test]
fn asking_for_the_wrong_kind_names_both_kinds() {
    let registry = registry();
    load(&registry, "policy", sandfleet_guests::LEAST_LOADED);
    let error = registry.sizing("policy").map(|_| ()).unwrap_err();
    assert!(matches!(error, LookupError::WrongKind { .. }));
    assert_eq!(
        error.to_string(),
        "plugin `policy` is a placement-policy, not a sizing-policy"
    );
    let error = registry.placement("nope").map(|_| ()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no plugin named `nope` (available: policy)"
    );
}

#[test]
fn a_failed_load_keeps_the_serving_version_and_reports_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let path = write(
        dir.path(),
        "policy.wasm",
        &std::fs::read(sandfleet_guests::LEAST_LOADED).unwrap(),
    );
    let first = registry.load_file(&path).unwrap();
    std::fs::write(&path, b"garbage").unwrap();
    registry.load_file(&path).unwrap_err();

    let status = registry.status("policy").unwrap();
    assert_eq!(status.serving.unwrap().plugin.version, first.plugin.version);
    let error = status.last_error.expect("error recorded");
    assert!(error.contains("not a WebAssembly component"), "{error}");
    assert_eq!(registry.load_counts().failed, 1);
    let policy = registry.placement("policy").unwrap();
    assert_eq!(
        policy
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        1
    );
}

#[test]
fn every_builtin_loads_and_a_file_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    registry
        .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
        .unwrap();
    let builtin = registry.placement("least-loaded").unwrap();
    assert_eq!(builtin.version().source, Source::Builtin);

    let path = write(
        dir.path(),
        "least-loaded.wasm",
        &std::fs::read(sandfleet_guests::PICK_LAST).unwrap(),
    );
    registry.load_dir(dir.path()).unwrap();
    assert_eq!(builtin.version().source, Source::File(path.clone()));
    assert_eq!(
        builtin
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        2
    );

    std::fs::remove_file(&path).unwrap();
    registry.unload_file(&path);
    assert_eq!(builtin.version().source, Source::Builtin);
    assert_eq!(
        builtin
            .place_blocking(&demand(0), &three_clusters())
            .unwrap(),
        1
    );
}
