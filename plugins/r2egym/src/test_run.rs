//! The test run as R2E-Gym sees it: `DockerRuntime.run_tests` calls
//! `run("bash /root/run_tests.sh", timeout=300)`, which executes
//! `/bin/sh -c "timeout 300 bash /root/run_tests.sh "` with stdout and stderr
//! interleaved in one stream, and returns `(output, error_code)`:
//!
//! | the command                  | output                                          | error_code             |
//! |------------------------------|-------------------------------------------------|------------------------|
//! | exits 0                      | what it printed                                 | `0`                    |
//! | exits 124 (`timeout` fired)  | `The command took too long to execute (>300s)`  | `-1`                   |
//! | exits with another code N    | what it printed                                 | `Error: Exit code N`   |
//!
//! The outer deadline (the host killing the command) counts as the timeout,
//! as R2E-Gym's own outer deadline does. `run_tests` then removes colour codes
//! and carriage returns from the output, whatever the exit code.

use serde::Serialize;

use crate::{CommandOutput, ansi};

/// The limit `run_tests` gives the script, in seconds.
pub(crate) const TIMEOUT_SECS: u64 = 300;

/// What `/bin/sh` runs, byte for byte as R2E-Gym builds it (with its trailing
/// space: `f"timeout {timeout} {code} {args}"` with empty `args`).
pub(crate) fn shell_command() -> String {
    format!("timeout {TIMEOUT_SECS} bash /root/run_tests.sh ")
}

/// The exit status `timeout` reports when it had to stop the script.
const TIMEOUT_EXIT_CODE: i32 = 124;

/// `run_tests`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TestRun {
    /// The output the log parser reads.
    #[serde(skip)]
    pub(crate) output: String,
    /// R2E-Gym's error code string: `0`, `-1` or `Error: Exit code N`.
    pub(crate) error_code: String,
    /// Whether the 300 s limit (or the host's deadline) ended the run.
    pub(crate) timed_out: bool,
    /// Whether the command could not even start; the tests did not run.
    pub(crate) not_started: bool,
}

impl TestRun {
    /// Reads the host's record of the run-tests command.
    pub(crate) fn from_output(run: &CommandOutput) -> TestRun {
        let timed_out = run.timed_out || run.exit_code == TIMEOUT_EXIT_CODE;
        // The host reports -1 both for a kill at the deadline and for a
        // command that could not start.
        let not_started = !timed_out && run.exit_code == -1;
        let printed = combined(run);
        let (output, error_code) = if timed_out {
            (
                format!("The command took too long to execute (>{TIMEOUT_SECS}s)"),
                "-1".to_owned(),
            )
        } else if not_started {
            // R2E-Gym returns `f"Error: {repr(e)}"` for an exec that raised.
            (format!("Error: {printed}"), "-1".to_owned())
        } else if run.exit_code != 0 {
            (printed, format!("Error: Exit code {}", run.exit_code))
        } else {
            (printed, "0".to_owned())
        };
        TestRun {
            output: ansi::strip_output_codes(&output).into_owned(),
            error_code,
            timed_out,
            not_started,
        }
    }
}

/// stdout and stderr as one stream. The command asks the host to merge them
/// as they happen; if a host still reports stderr apart, it goes last.
fn combined(run: &CommandOutput) -> String {
    if run.stderr.is_empty() {
        run.stdout.clone()
    } else {
        format!("{}{}", run.stdout, run.stderr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(exit_code: i32, stdout: &str, timed_out: bool) -> CommandOutput {
        CommandOutput {
            exit_code,
            stdout: stdout.into(),
            stderr: String::new(),
            timed_out,
            duration_ms: 1,
        }
    }

    #[test]
    fn a_clean_exit_keeps_the_output_without_colours() {
        let run = TestRun::from_output(&output(0, "\u{1b}[32mPASSED\u{1b}[0m a\r\n", false));
        assert_eq!(run.output, "PASSED a\n");
        assert_eq!(run.error_code, "0");
        assert!(!run.timed_out && !run.not_started);
    }

    #[test]
    fn a_failing_exit_keeps_the_output_and_names_the_code() {
        let run = TestRun::from_output(&output(1, "\u{1b}[1;31mFAILED\u{1b}[0m", false));
        assert_eq!(run.output, "FAILED");
        assert_eq!(run.error_code, "Error: Exit code 1");
    }

    #[test]
    fn timeouts_replace_the_output() {
        for run in [output(124, "partial", false), output(-1, "partial", true)] {
            let run = TestRun::from_output(&run);
            assert_eq!(run.output, "The command took too long to execute (>300s)");
            assert_eq!(run.error_code, "-1");
            assert!(run.timed_out);
        }
    }

    #[test]
    fn a_command_that_did_not_start_is_an_error() {
        let mut failed = output(-1, "", false);
        failed.stderr = "no such sandbox".into();
        let run = TestRun::from_output(&failed);
        assert_eq!(run.output, "Error: no such sandbox");
        assert_eq!(run.error_code, "-1");
        assert!(run.not_started);
    }

    #[test]
    fn stderr_reported_apart_is_appended() {
        let mut split = output(2, "out\n", false);
        split.stderr = "err\n".into();
        assert_eq!(TestRun::from_output(&split).output, "out\nerr\n");
    }
}
