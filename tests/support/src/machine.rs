//! What runs leave on this machine, for tests that prove a run leaves
//! nothing: live processes and the local backend's sandbox directories.

use std::path::Path;

/// Live (not zombie) processes whose command line starts with `prefix`, as
/// `pid: command line`. Matching the start, not any part, keeps out the
/// `nsenter` and shell processes that merely mention the command.
pub fn processes_running(prefix: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(path.join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('Z'))
            })
            .unwrap_or(true);
        if !zombie && cmdline.starts_with(prefix) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// Sandbox directories run `run_id` still has in the local backend's
/// `state_dir`.
pub fn sandbox_dirs(state_dir: &Path, run_id: &str) -> usize {
    std::fs::read_dir(state_dir.join("runs").join(run_id).join("sandboxes"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_test_process_by_the_start_of_its_command_line() {
        let me = std::env::args().next().unwrap();
        assert!(!processes_running(&me).is_empty());
        assert!(processes_running("no such command 0xdeadbeef").is_empty());
    }

    #[test]
    fn a_missing_run_has_no_sandboxes() {
        assert_eq!(sandbox_dirs(Path::new("/nonexistent"), "run"), 0);
    }
}
