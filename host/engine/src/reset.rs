//! A reset phase in one round trip: the reset check's commands (its
//! baseline, or its reset actions and probes) joined into one `sh -c`
//! script, run by one exec, and split back into one output per command, so
//! the check judges exactly what it would have judged from one exec each.
//!
//! Each command runs as its own program (`exec`'d in a subshell, so a
//! command named like a shell builtin is still looked up on `PATH`), with
//! stdin from `/dev/null`, under its own timeout where the sandbox has GNU
//! `timeout` (`-k` is probed once per script; exit 124 means it timed out),
//! and with its stderr merged into stdout when it asks. After each command
//! the script writes a marker line carrying a random nonce, the command's
//! index, exit code and duration (from `/proc/uptime`, so no clock process
//! is forked) to stdout, and one with the index to stderr; the bytes between
//! markers are the command's output, byte for byte. The nonce is drawn
//! after the task ended and the sandbox was scrubbed, so nothing the task
//! left can print it.
//!
//! The exec's own timeout is the sum of the commands' timeouts (plus their
//! kill grace): when it strikes, the commands whose markers arrived keep
//! their outputs, the one running is `timed_out` and later ones are reported
//! as not run (`timed_out`, exit -1), which a reset check reads as a failed
//! reset. A script too long for one argument falls back to one exec per
//! command.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use sandfleet_core::{ExecRequest, ExecResult};
use sandfleet_plugin::adapter::{Command, CommandOutput};

use crate::commands::DEFAULT_COMMAND_TIMEOUT;

/// How long GNU `timeout` waits after its TERM before it KILLs.
const KILL_AFTER_SECS: u64 = 5;

/// Scripts longer than this run one exec per command instead: Linux
/// refuses a single argument over 128 KiB.
pub const MAX_JOINED_SCRIPT: usize = 120 * 1024;

/// Exit code GNU `timeout` gives a command it stopped.
const TIMEOUT_EXIT: i32 = 124;

/// Everything an exec of the joined commands needs besides the commands.
#[derive(Debug, Clone)]
pub struct ExecContext<'a> {
    /// Working directory of every command.
    pub workdir: &'a str,
    /// Environment of every command.
    pub env: &'a [(String, String)],
    /// Bytes of each stream kept per command.
    pub max_output: u64,
}

/// Commands joined into one script, and how to read its output back.
#[derive(Debug, Clone)]
pub struct Joined {
    /// `sh -c <script>`.
    pub argv: Vec<String>,
    /// The exec's timeout: every command's timeout and kill grace.
    pub timeout: Duration,
    nonce: String,
    count: usize,
}

impl Joined {
    /// Joins `commands`; `None` when the script would be too long for one
    /// argument.
    pub fn new(commands: &[Command]) -> Option<Self> {
        let nonce = nonce();
        let mut script = format!(
            "M={nonce}\nT=\nif command -v timeout >/dev/null 2>&1 && timeout -k 1 1 true \
             >/dev/null 2>&1; then T=1; fi\n{CLOCK}"
        );
        let mut timeout = Duration::ZERO;
        for (index, command) in commands.iter().enumerate() {
            let limit = command_timeout(command);
            let secs = limit.as_secs_f64().max(0.001);
            timeout += limit + Duration::from_secs(KILL_AFTER_SECS);
            let words: Vec<String> = command.argv.iter().map(|word| quoted(word)).collect();
            let words = words.join(" ");
            let merge = if command.merge_stderr { " 2>&1" } else { "" };
            script.push_str(&format!(
                "clock; s=$t\nif [ -n \"$T\" ]; then (exec timeout -k {KILL_AFTER_SECS} {secs} \
                 {words}) </dev/null{merge}; else (exec {words}) </dev/null{merge}; fi\n\
                 c=$?; clock; printf '%s {index} %s %s\\n' \"$M\" \"$c\" \"$((t - s))\"; \
                 printf '%s {index} %s\\n' \"$M\" \"$T\" >&2\n"
            ));
        }
        (script.len() <= MAX_JOINED_SCRIPT).then(|| Joined {
            argv: vec!["sh".into(), "-c".into(), script],
            timeout,
            nonce,
            count: commands.len(),
        })
    }

    /// The request that runs the script.
    pub fn request(&self, context: &ExecContext<'_>) -> ExecRequest {
        let streams = u64::try_from(self.count).unwrap_or(u64::MAX);
        ExecRequest {
            argv: self.argv.clone(),
            workdir: Some(context.workdir.to_owned()),
            env: context.env.to_vec(),
            timeout: self.timeout,
            merge_stderr: false,
            stdin: None,
            // Every command keeps what it would have kept alone, and the
            // markers fit besides.
            max_output: Some(
                context
                    .max_output
                    .saturating_add(1024)
                    .saturating_mul(streams.max(1)),
            ),
        }
    }

    /// One output per command, from the script's result; an error when the
    /// script ended early without having been killed at its timeout, or
    /// its output was cut.
    pub fn split(&self, result: &ExecResult) -> Result<Vec<CommandOutput>, String> {
        if result.stdout_dropped > 0 || result.stderr_dropped > 0 {
            return Err(format!(
                "the joined commands wrote more than the output limit ({} bytes dropped)",
                result.stdout_dropped + result.stderr_dropped
            ));
        }
        let stdout = Markers::new(&result.stdout, &self.nonce);
        let stderr = Markers::new(&result.stderr, &self.nonce);
        let mut outputs = Vec::with_capacity(self.count);
        let (mut out_at, mut err_at) = (0, 0);
        let mut cut = false;
        for index in 0..self.count {
            let finished = stdout
                .find(index, out_at)
                .zip(stderr.find(index, err_at))
                .filter(|_| !cut);
            let Some((out, err)) = finished else {
                if !result.timed_out {
                    return Err(format!(
                        "the joined commands stopped before command {index} finished (exit code \
                         {}){}",
                        result.exit_code,
                        stderr_tail(&result.stderr[err_at..])
                    ));
                }
                // The first command without a marker was running at the
                // timeout; the rest never started.
                outputs.push(if cut {
                    CommandOutput {
                        exit_code: -1,
                        stdout: String::new(),
                        stderr: "not run: an earlier command used up the reset's time".into(),
                        timed_out: true,
                        duration_ms: 0,
                    }
                } else {
                    CommandOutput {
                        exit_code: -1,
                        stdout: lossy(&result.stdout[out_at..]),
                        stderr: lossy(&result.stderr[err_at..]),
                        timed_out: true,
                        duration_ms: 0,
                    }
                });
                cut = true;
                continue;
            };
            let (exit_code, centis) = out.status;
            let timed_out = exit_code == TIMEOUT_EXIT && err.status.0 == 1;
            outputs.push(CommandOutput {
                exit_code: if timed_out { -1 } else { exit_code },
                stdout: lossy(&result.stdout[out_at..out.start]),
                stderr: lossy(&result.stderr[err_at..err.start]),
                timed_out,
                duration_ms: centis.saturating_mul(10),
            });
            (out_at, err_at) = (out.end, err.end);
        }
        Ok(outputs)
    }
}

/// A command's own timeout, or the default.
fn command_timeout(command: &Command) -> Duration {
    match command.timeout_ms {
        0 => DEFAULT_COMMAND_TIMEOUT,
        ms => Duration::from_millis(ms),
    }
}

/// `clock` sets `t` to centiseconds since boot, or 0 where `/proc/uptime`
/// cannot be read: a builtin `read`, not a process.
const CLOCK: &str = "clock() { t=0; read -r up _ < /proc/uptime 2>/dev/null || return 0; \
                     case $up in *.*) t=${up%.*}${up#*.} ;; esac; \
                     while case $t in 0?*) true ;; *) false ;; esac; do t=${t#0}; done; }\n";

/// 128 bits no process in the sandbox has seen.
fn nonce() -> String {
    let half = || {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        hasher.finish()
    };
    format!("sandfleet-reset-{:016x}{:016x}", half(), half())
}

/// `word` as one single-quoted shell word.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Where a marker line lies in a stream, and the two numbers after its
/// index (stdout: exit code and centiseconds; stderr: whether `timeout`
/// ran the command, 1 or nothing).
struct Found {
    start: usize,
    end: usize,
    status: (i32, u64),
}

/// The marker lines of one stream.
struct Markers<'a> {
    stream: &'a [u8],
    nonce: &'a str,
}

impl<'a> Markers<'a> {
    fn new(stream: &'a [u8], nonce: &'a str) -> Self {
        Markers { stream, nonce }
    }

    /// The marker of command `index` at or after `from`: the script writes
    /// it right after the command, so it is the first one there.
    fn find(&self, index: usize, from: usize) -> Option<Found> {
        let prefix = format!("{} {index} ", self.nonce);
        let rest = self.stream.get(from..)?;
        let start = from
            + rest
                .windows(prefix.len())
                .position(|window| window == prefix.as_bytes())?;
        let line_start = start + prefix.len();
        let line_end = line_start + self.stream[line_start..].iter().position(|&b| b == b'\n')?;
        let line = std::str::from_utf8(&self.stream[line_start..line_end]).ok()?;
        let mut numbers = line.split(' ');
        let first = numbers.next().unwrap_or("");
        let first = if first.is_empty() {
            0
        } else {
            first.parse().ok()?
        };
        let second = numbers.next().map_or(Some(0), |n| n.parse().ok())?;
        Some(Found {
            start,
            end: line_end + 1,
            status: (first, second),
        })
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The last lines of what the script wrote to stderr, for an error.
fn stderr_tail(stderr: &[u8]) -> String {
    let text = lossy(stderr);
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    if tail.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = tail.into_iter().rev().collect();
        format!(" (stderr: {})", lines.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(argv: &[&str]) -> Command {
        Command {
            argv: argv.iter().map(|&word| word.to_owned()).collect(),
            timeout_ms: 1000,
            merge_stderr: false,
        }
    }

    fn result(joined: &Joined, stdout: &str, stderr: &str, timed_out: bool) -> ExecResult {
        let mark = |text: &str| text.replace("@", &joined.nonce);
        ExecResult {
            exit_code: if timed_out { -1 } else { 0 },
            stdout: mark(stdout).into_bytes(),
            stderr: mark(stderr).into_bytes(),
            timed_out,
            ..ExecResult::default()
        }
    }

    #[test]
    fn outputs_split_at_the_markers_byte_for_byte() {
        let joined = Joined::new(&[command(&["a"]), command(&["b"]), command(&["c"])]).unwrap();
        let outputs = joined
            .split(&result(
                &joined,
                "one\n@ 0 0 3\nno newline@ 1 7 12\n@ 2 124 100\n",
                "@ 0 1\nwarn\n@ 1 1\n@ 2 1\n",
                false,
            ))
            .unwrap();
        let seen: Vec<_> = outputs
            .iter()
            .map(|o| {
                (
                    o.exit_code,
                    o.stdout.as_str(),
                    o.stderr.as_str(),
                    o.timed_out,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (0, "one\n", "", false),
                (7, "no newline", "warn\n", false),
                (-1, "", "", true),
            ]
        );
        assert_eq!(outputs[1].duration_ms, 120);
    }

    #[test]
    fn exit_124_is_a_timeout_only_when_timeout_ran_the_command() {
        let joined = Joined::new(&[command(&["a"])]).unwrap();
        let outputs = joined
            .split(&result(&joined, "@ 0 124 1\n", "@ 0 \n", false))
            .unwrap();
        assert_eq!((outputs[0].exit_code, outputs[0].timed_out), (124, false));
    }

    #[test]
    fn at_the_scripts_timeout_the_running_command_timed_out_and_the_rest_never_ran() {
        let joined = Joined::new(&[command(&["a"]), command(&["b"]), command(&["c"])]).unwrap();
        let outputs = joined
            .split(&result(&joined, "@ 0 0 1\npartial", "@ 0 1\n", true))
            .unwrap();
        assert_eq!(outputs[0].exit_code, 0);
        assert_eq!(
            (outputs[1].stdout.as_str(), outputs[1].timed_out),
            ("partial", true)
        );
        assert!(outputs[2].timed_out && outputs[2].stderr.starts_with("not run"));
    }

    #[test]
    fn a_script_that_ended_early_or_was_cut_is_an_error() {
        let joined = Joined::new(&[command(&["a"]), command(&["b"])]).unwrap();
        let early = joined
            .split(&result(&joined, "@ 0 0 1\n", "@ 0 1\nsh: oops\n", false))
            .unwrap_err();
        assert!(
            early.contains("before command 1") && early.contains("sh: oops"),
            "{early}"
        );
        let mut cut = result(&joined, "@ 0 0 1\n@ 1 0 1\n", "@ 0 1\n@ 1 1\n", false);
        cut.stdout_dropped = 5;
        assert!(joined.split(&cut).unwrap_err().contains("output limit"));
    }

    #[test]
    fn a_marker_needs_this_scripts_nonce() {
        let joined = Joined::new(&[command(&["a"])]).unwrap();
        let other = Joined::new(&[command(&["a"])]).unwrap();
        assert_ne!(joined.nonce, other.nonce);
        let forged = format!("{} 0 0 1\n", other.nonce);
        let outputs = joined
            .split(&result(
                &joined,
                &format!("{forged}@ 0 3 1\n"),
                "@ 0 1\n",
                false,
            ))
            .unwrap();
        assert_eq!(
            (outputs[0].exit_code, outputs[0].stdout.as_str()),
            (3, forged.as_str())
        );
    }

    #[test]
    fn words_are_quoted_and_a_script_too_long_for_one_argument_is_refused() {
        assert_eq!(quoted("it's $HOME"), r"'it'\''s $HOME'");
        let long = "x".repeat(MAX_JOINED_SCRIPT);
        assert!(Joined::new(&[command(&["echo", &long])]).is_none());
        let joined = Joined::new(&[command(&["echo"])]).unwrap();
        assert_eq!(joined.timeout, Duration::from_secs(1 + KILL_AFTER_SECS));
    }
}
