//! What pods/exec has started, for tests that must show that no command ran twice:
//! execs started, those with stdin (a client's shell session, whose commands arrive
//! on stdin), and starts per command marker — [`MARKER_ENV`]`=<id>` anywhere in an
//! exec's command line, where a client's `env` prefix puts it — so a command a client
//! sent again over a websocket of its own shows as a count of 2. Markers written down
//! a session (stdin frames) are counted apart: a frame is what was sent, which the
//! session's shell may never have read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use sandfleet_emulator_runtime::MARKER_ENV;

/// A snapshot of the exec counters ([`crate::Emulator::executions`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Executions {
    /// Execs whose command started.
    pub started: u64,
    /// Of those, execs with stdin.
    pub with_stdin: u64,
    /// Starts per marker; execs without one are not here.
    pub by_marker: BTreeMap<String, u64>,
    /// Stdin frames per marker: commands written down a session, read by its
    /// shell or not.
    pub in_sessions: BTreeMap<String, u64>,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    inner: Mutex<Executions>,
}

impl Counters {
    /// Counts an exec of `argv` whose command started.
    pub(crate) fn started(&self, argv: &[String], stdin: bool) {
        let markers = markers(argv);
        let mut counts = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        counts.started += 1;
        counts.with_stdin += u64::from(stdin);
        for marker in markers {
            *counts.by_marker.entry(marker.to_string()).or_default() += 1;
        }
    }

    /// Counts the markers in one stdin frame: the commands a session's
    /// shell reads.
    pub(crate) fn read(&self, frame: &[u8]) {
        let text = String::from_utf8_lossy(frame);
        let words = [text.into_owned()];
        let markers = markers(&words);
        if markers.is_empty() {
            return;
        }
        let mut counts = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for marker in markers {
            *counts.in_sessions.entry(marker.to_string()).or_default() += 1;
        }
    }

    pub(crate) fn snapshot(&self) -> Executions {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The distinct marker values in `argv`: what follows `MARKER_ENV=` up to the first
/// byte that is not a letter, digit, `-`, `_` or `.`.
fn markers(argv: &[String]) -> BTreeSet<&str> {
    let prefix = format!("{MARKER_ENV}=");
    argv.iter()
        .flat_map(|word| {
            word.match_indices(&prefix)
                .map(|(at, _)| &word[at + prefix.len()..])
        })
        .map(|rest| {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|marker| !marker.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_anywhere_in_the_command_line_once_per_exec() {
        let argv: Vec<String> = [
            "sh",
            "-c",
            "{ sh -c '...' sf m '' 0 env SANDFLEET_COMMAND_ID=cmd-1 X=2 sh -c 'echo $SANDFLEET_COMMAND_ID=cmd-1'; }",
            "SANDFLEET_COMMAND_ID=a.b_c-9;rest",
            "SANDFLEET_COMMAND_ID=",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            markers(&argv).into_iter().collect::<Vec<_>>(),
            ["a.b_c-9", "cmd-1"]
        );
        let counters = Counters::default();
        counters.started(&argv, false);
        counters.started(&["sh".to_string()], true);
        let counted = counters.snapshot();
        assert_eq!((counted.started, counted.with_stdin), (2, 1));
        assert_eq!(counted.by_marker["cmd-1"], 1);
        counters.read(b"{ sh -c '...' sf m '' 0 env 'SANDFLEET_COMMAND_ID=cmd-1 sleep 1' & }\n");
        counters.read(b"plain input");
        let counted = counters.snapshot();
        assert_eq!(counted.by_marker["cmd-1"], 1);
        assert_eq!(counted.in_sessions["cmd-1"], 1);
        assert_eq!(counted.in_sessions.len(), 1);
    }
}
