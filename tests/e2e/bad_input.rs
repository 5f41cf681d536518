//! Bad input is caught before any sandbox is created, with one clear error.

use serde_json::json;

use crate::{Scratch, sandfleet, stderr};

fn good_rows() -> Vec<serde_json::Value> {
    vec![
        json!({"id": "t1", "image": "a", "test": "true"}),
        json!({"id": "t2", "image": "b", "test": "true"}),
    ]
}

/// Runs the fleet file and returns stderr, asserting failure and that no
/// run was started.
fn fails(scratch: &Scratch, fleet: &std::path::Path) -> String {
    let output = sandfleet(&[
        "run",
        fleet.to_str().unwrap(),
        "--out",
        scratch.path("out").to_str().unwrap(),
    ]);
    assert!(
        !output.status.success(),
        "expected failure: {}",
        stderr(&output)
    );
    scratch.assert_nothing_created();
    stderr(&output)
}

#[test]
fn malformed_toml_is_located() {
    let scratch = Scratch::new();
    let fleet = scratch.fleet(&good_rows(), "");
    let text = std::fs::read_to_string(&fleet)
        .unwrap()
        .replace("[fleet]", "[fleet");
    std::fs::write(&fleet, text).unwrap();
    let error = fails(&scratch, &fleet);
    assert!(
        error.starts_with(&format!("error: {}:8:7: unclosed table", fleet.display())),
        "{error}"
    );
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let scratch = Scratch::new();
    let fleet = scratch.fleet(&good_rows(), "colour = \"red\"\n");
    let error = fails(&scratch, &fleet);
    assert!(
        error.starts_with(&format!(
            "error: {}:10:1: unknown field `colour`",
            fleet.display()
        )),
        "{error}"
    );
}

#[test]
fn a_row_missing_a_field_names_the_row_and_the_field() {
    let scratch = Scratch::new();
    let rows = vec![
        json!({"id": "t1", "image": "a", "test": "true"}),
        json!({"id": "t2", "test": "true"}),
    ];
    let fleet = scratch.fleet(&rows, "");
    let error = fails(&scratch, &fleet);
    let dataset = scratch.path("tasks.jsonl");
    assert!(
        error.contains(&format!(
            "{}:2: row `t2`: field `image` is missing",
            dataset.display()
        )),
        "{error}"
    );
}

#[test]
fn an_image_without_a_mapping_is_named() {
    let scratch = Scratch::new();
    let rows = vec![json!({"id": "t1", "image": "nowhere", "test": "true"})];
    let fleet = scratch.fleet(&rows, "");
    let error = fails(&scratch, &fleet);
    assert!(error.contains("no cluster maps these images"), "{error}");
    assert!(
        error.contains("`nowhere` (first needed by task `t1`)"),
        "{error}"
    );
}

#[test]
fn a_plugin_that_fails_to_load_is_named() {
    let scratch = Scratch::new();
    let plugins = scratch.path("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("least-loaded.wasm"), b"not a component").unwrap();
    let fleet = scratch.fleet(&good_rows(), "\n[plugins]\ndir = \"plugins\"\n");
    let error = fails(&scratch, &fleet);
    assert!(
        error.contains(&format!(
            "{}: not a WebAssembly component",
            plugins.join("least-loaded.wasm").display()
        )),
        "{error}"
    );
}

#[test]
fn an_image_directory_that_does_not_exist_fails_preflight() {
    let scratch = Scratch::new();
    std::fs::remove_dir_all(scratch.path("images/b")).unwrap();
    let fleet = scratch.fleet(&good_rows(), "");
    let expected = format!(
        "local: image `b`: {} is not a directory",
        scratch.path("images/b").display()
    );
    let error = fails(&scratch, &fleet);
    assert!(error.contains(&expected), "{error}");

    let output = sandfleet(&["preflight", fleet.to_str().unwrap()]);
    assert!(!output.status.success(), "{}", crate::stdout(&output));
    assert!(crate::stdout(&output).contains(&expected.replacen("local: ", "FAILED: ", 1)));
}
