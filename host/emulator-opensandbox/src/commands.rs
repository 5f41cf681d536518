//! Commands as execd runs them: `bash -c COMMAND` in the sandbox, in its own
//! process group, with its events (`init`, a `stdout`/`stderr` event per
//! line, then `execution_complete` or `error`) recorded as they happen.
//!
//! A command runs in a task of its own, not in the request that started it:
//! like real execd (whose command context is not the request's), it goes on
//! when its client disconnects, and a retry runs it a second time. Streams
//! read the recorded events, so any number of readers see the same ones.
//!
//! Interrupts and timeouts kill the command's process group from inside
//! the sandbox: the wrapper puts the command in a job of its own
//! (`set -m`) and writes the job's process group to a file, and the kill
//! runs `kill -KILL -- -PGID` in the sandbox, which reaches it in a
//! namespaced sandbox as in a plain one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jiff::Timestamp;
use sandfleet_backend_local::LocalBackend;
use sandfleet_core::{Backend, ExecRequest, OutputChunk, OutputStream, SandboxHandle};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};

use sandfleet_emulator_runtime::MARKER_ENV;

use crate::counters::Counters;

/// Runs `$1` with bash as a job of its own (its own process group), writes
/// that group's id to `$2`, and exits with the job's status. The job keeps
/// the command's stderr (as fd 3); the wrapper's own goes nowhere, so
/// bash's job notices (`[1]+ Exit 3 …`) are not the command's output.
const WRAPPER: &str = r#"exec 3>&2 2>/dev/null; set -m; bash -c "$1" 2>&3 3>&- </dev/null & job=$!; exec 3>&-; printf '%s' "$job" >"$2"; wait "$job"; status=$?; rm -f -- "$2"; exit "$status""#;

/// Kills the process group whose id is in `$1`, waiting (bounded) for the
/// wrapper to have written it.
const KILLER: &str = r#"i=0; while [ ! -s "$1" ] && [ "$i" -lt 200 ]; do sleep 0.01; i=$((i+1)); done; [ -s "$1" ] && kill -KILL -- -"$(cat "$1")" 2>/dev/null; exit 0"#;

/// How long a command without a timeout may run: effectively forever, but
/// bounded, as every wait here is.
const NO_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Bytes of each stream the local backend keeps of one command; lines are
/// recorded as they arrive, so this only bounds memory.
const MAX_OUTPUT: u64 = 64 << 20;

/// What execd needs to run commands in one sandbox.
pub(crate) struct SandboxExec {
    pub(crate) backend: Arc<LocalBackend>,
    pub(crate) handle: SandboxHandle,
    /// The create request's `env`, given to every command.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) commands: Mutex<HashMap<String, Arc<Command>>>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) ids: Arc<Mutex<crate::random::Rng>>,
}

/// `POST /command`'s body, checked.
#[derive(Debug, Clone)]
pub(crate) struct CommandRequest {
    pub(crate) command: String,
    pub(crate) cwd: Option<String>,
    pub(crate) background: bool,
    pub(crate) timeout: Option<Duration>,
    pub(crate) envs: BTreeMap<String, String>,
}

/// One command and what it has produced so far.
pub(crate) struct Command {
    pub(crate) id: String,
    pub(crate) content: String,
    pub(crate) background: bool,
    pub(crate) started_at: Timestamp,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    kill: Notify,
}

#[derive(Default)]
struct State {
    /// Events, each serialized with its `\n\n`; the last is terminal once
    /// `terminal` is set.
    events: Vec<Bytes>,
    terminal: bool,
    /// What the command wrote, byte for byte: a foreground command's
    /// stdout and stderr apart, a background command's both in stdout (one
    /// file, as execd keeps it, served by `/logs`).
    written: [Vec<u8>; 2],
    running: bool,
    exit_code: Option<i32>,
    error: Option<String>,
    finished_at: Option<Timestamp>,
    /// Set once the command is being killed: later output (bash reporting
    /// the kill) is not the command's.
    killed: bool,
}

/// `GET /command/status/{id}`'s reply.
pub(crate) struct Status {
    pub(crate) running: bool,
    pub(crate) exit_code: Option<i32>,
    pub(crate) error: Option<String>,
    pub(crate) finished_at: Option<Timestamp>,
}

fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

fn event(mut body: Value) -> Bytes {
    body["timestamp"] = json!(now_ms());
    let mut text = serde_json::to_vec(&body).expect("events serialize");
    text.extend_from_slice(b"\n\n");
    Bytes::from(text)
}

impl Command {
    fn push(&self, bytes: Bytes, terminal: bool) {
        {
            let mut state = self.state();
            if state.terminal {
                return;
            }
            state.events.push(bytes);
            state.terminal = terminal;
        }
        self.changed.send_modify(|n| *n += 1);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("command state lock poisoned")
    }

    /// The events from index `from` on, and whether the last of all events
    /// is terminal.
    pub(crate) fn events_from(&self, from: usize) -> (Vec<Bytes>, bool) {
        let state = self.state();
        (
            state.events.get(from..).unwrap_or_default().to_vec(),
            state.terminal,
        )
    }

    /// A receiver that sees every change after it was made.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub(crate) fn status(&self) -> Status {
        let state = self.state();
        Status {
            running: state.running,
            exit_code: state.exit_code,
            error: state.error.clone(),
            finished_at: state.finished_at,
        }
    }

    /// A background command's output from byte `cursor` on, and the
    /// cursor to ask from next (execd seeks its output file).
    pub(crate) fn output_from(&self, cursor: usize) -> (Vec<u8>, usize) {
        let state = self.state();
        let written = &state.written[0];
        (
            written.get(cursor..).unwrap_or_default().to_vec(),
            written.len().max(cursor),
        )
    }

    /// Asks the runner to kill the command; false if it has finished.
    pub(crate) fn interrupt(&self) -> bool {
        let running = self.state().running;
        if running {
            self.kill.notify_one();
        }
        running
    }

    /// Keeps `bytes` the command wrote to `file` (0 stdout, 1 stderr);
    /// false once it is being killed.
    fn wrote(&self, file: usize, bytes: &[u8]) -> bool {
        let mut state = self.state();
        if !state.killed {
            state.written[file].extend_from_slice(bytes);
        }
        !state.killed
    }

    /// Sends one line of `stream` as its event.
    fn line(&self, stream: OutputStream, text: String) {
        if self.state().killed {
            return;
        }
        let kind = match stream {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        };
        self.push(event(json!({"type": kind, "text": text})), false);
    }

    fn finish(&self, exit_code: Option<i32>, error: Option<String>) {
        let mut state = self.state();
        state.running = false;
        state.exit_code = exit_code;
        state.error = error;
        state.finished_at = Some(Timestamp::now());
    }
}

/// Splits one stream into the texts of its line events as execd does
/// (`readFromPos` in `components/execd/pkg/runtime/command_common.go`):
/// `\n`, `\r` and `\r\n` each end a line, which is sent without it; a
/// blank line is sent as "\n"; what is left unterminated at the end is a
/// line of its own.
#[derive(Default)]
struct Lines {
    partial: Vec<u8>,
    /// Whether the last byte was `\r`, whose `\n` then ends nothing.
    after_cr: bool,
}

impl Lines {
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        for &byte in bytes {
            if byte != b'\n' && byte != b'\r' {
                self.after_cr = false;
                self.partial.push(byte);
                continue;
            }
            if !self.partial.is_empty() {
                lines
                    .push(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned());
            } else if !(byte == b'\n' && self.after_cr) {
                lines.push("\n".to_string());
            }
            self.after_cr = byte == b'\r';
        }
        lines
    }

    fn rest(&mut self) -> Option<String> {
        (!self.partial.is_empty())
            .then(|| String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned())
    }
}

impl SandboxExec {
    /// Starts `request` and returns its command, whose first event (`init`)
    /// is already recorded.
    pub(crate) fn start(self: &Arc<Self>, request: CommandRequest) -> Arc<Command> {
        let id = self.ids.lock().expect("id generator lock poisoned").uuid();
        let (changed, _) = watch::channel(0);
        let command = Arc::new(Command {
            id: id.clone(),
            content: request.command.clone(),
            background: request.background,
            started_at: Timestamp::now(),
            state: Mutex::new(State {
                running: true,
                ..State::default()
            }),
            changed,
            kill: Notify::new(),
        });
        command.push(event(json!({"type": "init", "text": id})), false);
        if request.background {
            command.push(
                event(json!({"type": "execution_complete", "execution_time": 0})),
                true,
            );
        }
        self.counters
            .command_started(&id, request.envs.get(MARKER_ENV).map(String::as_str));
        self.commands
            .lock()
            .expect("commands lock poisoned")
            .insert(id, Arc::clone(&command));
        tokio::spawn(Arc::clone(self).run(Arc::clone(&command), request));
        command
    }

    pub(crate) fn command(&self, id: &str) -> Option<Arc<Command>> {
        self.commands
            .lock()
            .expect("commands lock poisoned")
            .get(id)
            .cloned()
    }

    fn pidfile(id: &str) -> String {
        format!("/tmp/.sandfleet-execd-{id}.pgid")
    }

    async fn run(self: Arc<Self>, command: Arc<Command>, request: CommandRequest) {
        let started = Instant::now();
        let pidfile = Self::pidfile(&command.id);
        let exec = ExecRequest {
            argv: ["bash", "-c", WRAPPER, "execd", &request.command, &pidfile]
                .map(String::from)
                .to_vec(),
            workdir: request.cwd.clone(),
            env: self
                .env
                .iter()
                .cloned()
                .chain(request.envs.clone())
                .collect(),
            // Timeouts are enforced here, by killing the job's group.
            timeout: request
                .timeout
                .map_or(NO_TIMEOUT, |t| t + Duration::from_secs(30)),
            max_output: Some(MAX_OUTPUT),
            ..ExecRequest::default()
        };
        let (sink, mut chunks) = mpsc::channel::<OutputChunk>(64);
        let backend = Arc::clone(&self.backend);
        let handle = self.handle.clone();
        let mut running = tokio::spawn(async move {
            let result = backend.exec(&handle, &exec, Some(&sink)).await;
            drop(sink);
            result
        });
        let foreground = !request.background;
        let forward = {
            let command = Arc::clone(&command);
            tokio::spawn(async move {
                let (mut out, mut err) = (Lines::default(), Lines::default());
                while let Some(chunk) = chunks.recv().await {
                    if !foreground {
                        // One file for both streams: no events, only logs.
                        command.wrote(0, &chunk.bytes);
                        continue;
                    }
                    let (file, lines) = match chunk.stream {
                        OutputStream::Stdout => (0, &mut out),
                        OutputStream::Stderr => (1, &mut err),
                    };
                    if command.wrote(file, &chunk.bytes) {
                        for line in lines.feed(&chunk.bytes) {
                            command.line(chunk.stream, line);
                        }
                    }
                }
                for (stream, lines) in [
                    (OutputStream::Stdout, &mut out),
                    (OutputStream::Stderr, &mut err),
                ] {
                    if let Some(rest) = lines.rest() {
                        command.line(stream, rest);
                    }
                }
            })
        };
        let deadline = request.timeout.map(|t| tokio::time::Instant::now() + t);
        let outcome = tokio::select! {
            joined = &mut running => Some(joined),
            () = command.kill.notified() => None,
            () = async { tokio::time::sleep_until(deadline.expect("guarded")).await }, if deadline.is_some() => None,
        };
        let elapsed_ms = |started: Instant| started.elapsed().as_millis() as u64;
        match outcome {
            Some(joined) => {
                // Output first: every line, and execd's files of it, come
                // before the terminal event.
                let _ = forward.await;
                self.keep_output_files(&command, foreground).await;
                let result = joined
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                match result {
                    Ok(result) if result.exit_code == 0 => {
                        command.finish(Some(0), None);
                        command.push(
                            event(json!({"type": "execution_complete", "execution_time": elapsed_ms(started)})),
                            true,
                        );
                    }
                    Ok(result) => {
                        let code = result.exit_code;
                        command.finish(Some(code), None);
                        command.push(
                            error_event(&code.to_string(), &format!("exit status {code}")),
                            true,
                        );
                    }
                    Err(error) => {
                        command.finish(None, Some(error.clone()));
                        command.push(error_event(&error, &error), true);
                    }
                }
            }
            None => {
                command.state().killed = true;
                self.kill(&command.id).await;
                self.keep_output_files(&command, foreground).await;
                command.finish(Some(-1), Some("killed".to_string()));
                command.push(error_event("-1", "signal: killed"), true);
                // The wrapper exits once its job is gone; reap it off the
                // command's path.
                tokio::spawn(async move {
                    let _ = running.await;
                    let _ = forward.await;
                });
            }
        }
    }

    /// Leaves what `command` wrote where execd keeps it and never removes
    /// it: `/tmp/<id>.stdout` and `.stderr`, or `/tmp/<id>.output` for a
    /// background command. (execd makes them, empty, for every command;
    /// here a stream that wrote nothing costs no file.)
    async fn keep_output_files(&self, command: &Command, foreground: bool) {
        let written = command.state().written.clone();
        let names: &[&str] = if foreground {
            &["stdout", "stderr"]
        } else {
            &["output"]
        };
        for (bytes, name) in written.iter().zip(names) {
            if bytes.is_empty() {
                continue;
            }
            let path = format!("/tmp/{}.{name}", command.id);
            // execd opens them with `os.ModePerm`, under a umask of 022.
            if let Err(error) = self
                .backend
                .put_file(&self.handle, &path, bytes, 0o755)
                .await
            {
                tracing::warn!(command = %command.id, %error, "cannot keep a command's output file");
            }
        }
    }

    /// Kills the job of command `id` from inside the sandbox.
    async fn kill(&self, id: &str) {
        let request = ExecRequest {
            argv: ["bash", "-c", KILLER, "kill", &Self::pidfile(id)]
                .map(String::from)
                .to_vec(),
            timeout: Duration::from_secs(10),
            ..ExecRequest::default()
        };
        if let Err(error) = self.backend.exec(&self.handle, &request, None).await {
            tracing::warn!(command = id, %error, "killing a command failed");
        }
    }
}

fn error_event(evalue: &str, trace: &str) -> Bytes {
    event(json!({
        "type": "error",
        "error": {"ename": "CommandExecError", "evalue": evalue, "traceback": [trace]},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_as_execd_splits_them() {
        let mut lines = Lines::default();
        assert_eq!(lines.feed(b"a\n\nb"), ["a", "\n"]);
        // A \r\n cut between two reads is one terminator.
        assert_eq!(lines.feed(b"c\r"), ["bc"]);
        assert_eq!(lines.feed(b"\nd\re\r\r\n"), ["d", "e", "\n"]);
        assert_eq!(lines.feed(b"f"), Vec::<String>::new());
        assert_eq!(lines.rest().as_deref(), Some("f"));
        assert_eq!(lines.rest(), None);
    }
}
