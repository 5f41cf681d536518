//! The bundled quickstart (`examples/quickstart.toml`) as tests on every
//! backend see it: where it is, what its 13 tasks come to, and how to read
//! a run's result lines.

use std::path::{Path, PathBuf};

/// The repository's root, from any crate's tests.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The lines of `dir/results.jsonl` as JSON values (none when it does not
/// exist yet).
pub fn results(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("results.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a result line is JSON"))
        .collect()
}

/// (task, status, grade) of every result line in `dir`, sorted by task.
pub fn statuses(dir: &Path) -> Vec<(String, String, String)> {
    let mut statuses: Vec<(String, String, String)> = results(dir)
        .iter()
        .map(|r| {
            (
                r["task_id"].as_str().unwrap_or("-").to_string(),
                r["status"].as_str().unwrap_or("-").to_string(),
                r["grade"]["status"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    statuses.sort();
    statuses
}

/// What the quickstart's 13 tasks come to, on any backend: eight fixes
/// pass; a wrong fix, a patch that does not apply, a fix that hangs until
/// its timeout and a task with no solution fail.
pub fn expected_statuses() -> Vec<(String, String, String)> {
    [
        ("calc-add", "ok", "passed"),
        ("calc-clamp", "failed", "error"),
        ("calc-div", "failed", "failed"),
        ("calc-mean", "ok", "passed"),
        ("calc-power", "ok", "passed"),
        ("calc-sub", "ok", "passed"),
        ("shell-count", "failed", "failed"),
        ("shell-trim", "ok", "passed"),
        ("shell-upper", "ok", "passed"),
        ("textkit-count", "ok", "passed"),
        ("textkit-slugify", "ok", "passed"),
        ("textkit-truncate", "failed", "failed"),
        ("textkit-wrap", "failed", "failed"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect()
}
