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
    assert!(
        error.contains("no cluster can make these images"),
        "{error}"
    );
    assert!(
        error.contains("mapped under [clusters.local.images]"),
        "{error}"
    );
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

/// The scratch fleet file with `extra` appended to its `[clusters.local]`.
fn with_local_settings(scratch: &Scratch, extra: &str) -> std::path::PathBuf {
    let fleet = scratch.fleet(&good_rows(), "");
    let text = std::fs::read_to_string(&fleet)
        .unwrap()
        .replace("state_dir = \"state\"\n", &format!("{extra}\n"));
    std::fs::write(&fleet, text).unwrap();
    fleet
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"))
}

#[test]
fn a_state_dir_that_cannot_be_made_is_named() {
    let scratch = Scratch::new();
    std::fs::write(scratch.path("a-file"), "").unwrap();
    for (state_dir, why) in [("a-file", "File exists"), ("/proc/sandfleet-state", "")] {
        let fleet = with_local_settings(&scratch, &format!("state_dir = {state_dir:?}"));
        let error = fails(&scratch, &fleet);
        assert!(
            error.contains("state_dir")
                && error.contains("cannot create it")
                && error.contains(why),
            "{state_dir}: {error}"
        );
    }
}

#[test]
fn a_sandbox_uid_range_over_host_users_is_refused() {
    if !running_as_root() {
        eprintln!(
            "SKIPPED: sandbox uids are mapped off the host's only when sandfleet runs as root"
        );
        return;
    }
    let scratch = Scratch::new();
    // Ids 1..65537: daemon, bin, nobody and the rest.
    let fleet = with_local_settings(&scratch, "state_dir = \"state\"\nsandbox_uid_base = 1");
    let error = fails(&scratch, &fleet);
    assert!(
        error.contains("sandbox_uid_base = 1") && error.contains("/etc/passwd"),
        "{error}"
    );
}

#[test]
fn without_cgroups_preflight_warns_and_says_what_to_set() {
    use std::os::unix::fs::PermissionsExt;
    if !running_as_root() {
        eprintln!("SKIPPED: needs root to run sandfleet as an unprivileged user");
        return;
    }
    let scratch = Scratch::new();
    let fleet = scratch.fleet(&good_rows(), "");
    // Everything the unprivileged user needs: the fleet, its images, a state
    // directory of its own.
    std::fs::set_permissions(scratch.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(scratch.state_dir()).unwrap();
    std::fs::set_permissions(scratch.state_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["preflight", fleet.to_str().unwrap()])
        // Its plugin cache under its own home: the caller's `XDG_CACHE_HOME`
        // (a fresh `mktemp -d` in a clean-clone measurement) is a directory
        // only the caller may enter.
        .env("HOME", scratch.state_dir())
        .env_remove("XDG_CACHE_HOME")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", stderr(&output));
    assert!(
        stdout.contains("warning: cgroup limits are not enforced")
            && stdout.contains("cgroup_parent"),
        "{stdout}"
    );
    // Still isolated, with the user as the sandboxes' root.
    assert!(
        stdout.contains("their root is the calling user (uid 65534)"),
        "{stdout}"
    );
}
