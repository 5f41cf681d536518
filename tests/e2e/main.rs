//! End-to-end tests of the `sandfleet` binary: real processes, real
//! sandboxes, the README's commands. One test binary, one module per concern.

mod bad_input;
mod canary;
mod deploy;
mod harness;
mod hostile;
mod k8s;
mod opensandbox;
mod plan;
mod plugin_projects;
mod plugins_multilang;
mod pulls;
mod quickstart;
mod rehearse;
mod reload;
mod serve;
mod signals;
mod swebench;
mod telemetry;
mod terminal;

use std::path::PathBuf;
use std::process::{Command, Output};

pub(crate) use sandfleet_test_support::quickstart::{repo, results};
pub(crate) use sandfleet_test_support::{processes_running, sandbox_dirs};

/// How long a condition an end-to-end test waits for may take.
pub(crate) const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// Polls `condition` until it holds; panics after [`PATIENCE`].
pub(crate) fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    eventually_none(what, || {
        if condition() {
            Vec::new()
        } else {
            vec!["not yet".to_string()]
        }
    });
}

/// Polls `left` until it lists nothing; panics after [`PATIENCE`] with
/// what it listed last.
pub(crate) fn eventually_none(what: &str, mut left: impl FnMut() -> Vec<String>) {
    let until = std::time::Instant::now() + PATIENCE;
    loop {
        let listed = left();
        if listed.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}; last seen: {}",
            listed.join(", ")
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `sandfleet` with `args`, its output captured.
pub(crate) fn sandfleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(args)
        .current_dir(repo())
        .env("SANDFLEET_LOG", "warn")
        .output()
        .expect("run sandfleet")
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A unique run id for a test.
pub(crate) fn run_id(test: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("e2e-{test}-{}-{nanos:x}", std::process::id())
}

/// A small fleet in a temporary directory: images `a` and `b` (git
/// repositories), a dataset written by the test, and a fleet file.
pub(crate) struct Scratch {
    pub(crate) dir: tempfile::TempDir,
}

impl Scratch {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for image in ["a", "b"] {
            let path = dir.path().join("images").join(image);
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("README"), image).unwrap();
        }
        Scratch { dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn state_dir(&self) -> PathBuf {
        self.path("state")
    }

    /// Writes the dataset and a fleet file using it; returns the fleet file.
    /// `extra` is appended to the fleet file.
    pub(crate) fn fleet(&self, rows: &[serde_json::Value], extra: &str) -> PathBuf {
        let dataset: String = rows.iter().map(|row| format!("{row}\n")).collect();
        std::fs::write(self.path("tasks.jsonl"), dataset).unwrap();
        let config = format!(
            r#"[run]
name = "scratch"
dataset = "tasks.jsonl"

[adapter]
name = "generic"

[fleet]
max_concurrent = 4
{extra}
[[clusters]]
name = "local"
backend = "local"

[clusters.local]
state_dir = "state"

[clusters.local.images]
a = {{ path = "images/a", git = true }}
b = {{ path = "images/b", git = true }}
"#
        );
        let path = self.path("fleet.toml");
        std::fs::write(&path, config).unwrap();
        path
    }

    /// Runs the scratch fleet file must have created nothing.
    pub(crate) fn assert_nothing_created(&self) {
        let runs = self.state_dir().join("runs");
        let created: Vec<_> = std::fs::read_dir(&runs)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(created.is_empty(), "a run was started: {created:?}");
    }
}
