//! What the daemon's benches share: knobs from the environment and the
//! fleet file they serve (the local backend with the quickstart's `calc`).

use std::path::{Path, PathBuf};

/// The environment variable `name` as a number, else `default`.
pub(crate) fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes `dir/fleet.toml`: one local cluster of up to `max_sandboxes`
/// serving `calc`, then `extra` (more tables).
pub(crate) fn fleet_file(dir: &Path, max_sandboxes: usize, extra: &str) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let text = format!(
        r#"[run]
name = "bench"
dataset = "{dataset}"
[adapter]
name = "generic"
[fleet]
claim_timeout = "300s"
[api]
state_dir = "serve"
max_leases = 4096
[[clusters]]
name = "local"
backend = "local"
[clusters.local]
state_dir = "state"
max_sandboxes = {max_sandboxes}
[clusters.local.images]
calc = {{ path = "{calc}", git = true }}
{extra}"#,
        dataset = repo.join("examples/quickstart/tasks.jsonl").display(),
        calc = repo.join("examples/quickstart/images/calc").display(),
    );
    let path = dir.join("fleet.toml");
    std::fs::write(&path, text).unwrap();
    path
}
