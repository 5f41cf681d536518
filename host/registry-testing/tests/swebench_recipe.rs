//! The SWE-bench recipe's failures are one line saying what is missing.

use sandfleet_registry_testing::registry::free_port;
use sandfleet_registry_testing::swebench::Recipe;

#[test]
fn a_debian_mirror_that_is_down_fails_the_build_in_one_line_naming_it() {
    let data =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/swebench");
    let mut recipe = Recipe::pytest_11143(&data).unwrap_or_else(|error| panic!("{error}"));
    recipe.mirror = Some(format!("http://127.0.0.1:{}/debian", free_port()));
    let cache = tempfile::tempdir().unwrap();
    let error = recipe
        .build(cache.path())
        .err()
        .expect("no mirror, no image");
    eprintln!("{error}");
    assert!(!error.contains('\n'), "more than one line: {error}");
    let root = std::fs::metadata("/proc/self")
        .is_ok_and(|meta| std::os::unix::fs::MetadataExt::uid(&meta) == 0);
    if !root {
        assert!(error.contains("needs root"), "{error}");
    } else if !std::path::Path::new("/usr/bin/mmdebstrap").exists() {
        assert!(error.starts_with("mmdebstrap is missing"), "{error}");
    } else {
        assert!(
            error.starts_with("mmdebstrap (is the Debian mirror reachable?) failed"),
            "{error}"
        );
        assert!(
            error.contains("E: Failed to fetch http://127.0.0.1:"),
            "{error}"
        );
    }
    // Nothing of the failed build is left to count as cached.
    let left: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".lock")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
