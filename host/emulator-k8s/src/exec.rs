//! `pods/exec` over websocket, as the API server and kubelet serve it: subprotocols
//! `v5.channel.k8s.io` (preferred) and `v4.channel.k8s.io`, binary frames whose first
//! byte is the channel (0 stdin, 1 stdout, 2 stderr, 3 the error channel carrying a
//! `Status` — `NonZeroExitCode` with the exit code as its cause — 4 resize, ignored),
//! an empty frame on the lowest output channel once the stream is set up, v5's
//! close-stdin signal (`255, 0`), then a normal close.
//!
//! Commands run in the pod's local sandbox. With `stdin`, the command reads a FIFO in
//! the sandbox's `/tmp` that a holder keeps open (so it sees end-of-file only when the
//! client closes stdin) and each stdin frame is written into it by a short command of
//! its own, in order; the local backend's exec takes stdin as bytes given up front, so
//! this is how a long-lived shell gets input as it arrives. With `tty`, the command runs
//! under `script` on a pseudo-terminal (stdout and stderr are one stream, as on a tty).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use sandfleet_core::{ExecRequest, OutputChunk, OutputStream};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::api::Query;
use crate::kubelet::runtime::{PodSandbox, Runtime};
use crate::state::State;
use crate::status::{ApiError, ApiResult};

/// The subprotocols served, preferred first.
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
/// How long a command may run: effectively forever, but bounded.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Bound on the short helper commands of a stdin session.
const HELPER_TIMEOUT: Duration = Duration::from_secs(120);

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
/// v5: a frame `[255, channel]` closes that channel (stdin).
const CLOSE_SIGNAL: u8 = 255;

/// What the client asked for.
struct Options {
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn flag(query: &Query, key: &str) -> bool {
    matches!(query.get(key), Some("true" | "1" | ""))
}

fn options(query: &Query) -> ApiResult<Options> {
    let command: Vec<String> = query
        .all("command")
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    if command.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    let o = Options {
        command,
        stdin: flag(query, "stdin"),
        stdout: flag(query, "stdout"),
        stderr: flag(query, "stderr"),
        tty: flag(query, "tty"),
    };
    if !(o.stdin || o.stdout || o.stderr) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    Ok(o)
}

/// The pod's sandbox for an exec into `container`, or the API server's answer why not.
fn sandbox_for(
    state: &State,
    runtime: &Runtime,
    namespace: &str,
    name: &str,
    container: Option<&str>,
) -> ApiResult<Arc<PodSandbox>> {
    let pod = state
        .store
        .get("/pods", namespace, name)
        .ok_or_else(|| ApiError::not_found("pods", name).with_details(name, "", "pods"))?;
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    match container {
        None if names.len() > 1 => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
        Some(c) if !names.contains(&c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        _ => {}
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    if matches!(phase, "Succeeded" | "Failed") {
        return Err(ApiError::bad_request(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )));
    }
    if pod["spec"]["nodeName"].as_str().is_none() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    runtime.sandbox(uid).ok_or_else(|| {
        let c = container.or(names.first().copied()).unwrap_or_default();
        ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{c}\")"
        ))
    })
}

/// Answer `GET|POST .../pods/NAME/exec` with a websocket upgrade.
pub(crate) async fn serve(
    state: Arc<State>,
    mut parts: Parts,
    namespace: &str,
    name: &str,
) -> ApiResult<Response> {
    let query = Query::parse(parts.uri.query());
    let opts = options(&query)?;
    let runtime = state.runtime.clone();
    let sandbox = sandbox_for(&state, &runtime, namespace, name, query.get("container"))?;
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|_| ApiError::bad_request("Upgrade request required"))?;
    let offered = parts
        .headers
        .get(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let chosen = PROTOCOLS
        .iter()
        .find(|p| offered.split(',').any(|o| o.trim() == **p))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "websocket subprotocols offered ({offered}) include none of: {}",
                PROTOCOLS.join(", ")
            ))
        })?;
    let v5 = *chosen == PROTOCOLS[0];
    Ok(upgrade
        .protocols(PROTOCOLS)
        .on_upgrade(move |socket| session(socket, runtime, sandbox, opts, v5))
        .into_response())
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(Bytes::from(bytes))
}

fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', "'\\''"))
}

/// The status the error channel carries for an exit code.
fn exit_status(command: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", command.join(" ")),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

fn failure_status(message: &str) -> Value {
    json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
}

/// The FIFO helpers of a stdin session, each `sh -c SCRIPT sh ID [ARGS]`.
struct Fifo {
    id: String,
}

impl Fifo {
    const DIR: &'static str = r#"d="${TMPDIR:-/tmp}/.sandfleet-exec/$1""#;

    fn argv(&self, script: &str, args: &[String]) -> Vec<String> {
        let mut argv = vec![
            "sh".into(),
            "-c".into(),
            format!("{}; {script}", Self::DIR),
            "sh".into(),
            self.id.clone(),
        ];
        argv.extend_from_slice(args);
        argv
    }

    fn helper(&self, script: &str, stdin: Option<Vec<u8>>) -> ExecRequest {
        ExecRequest {
            argv: self.argv(script, &[]),
            stdin,
            timeout: HELPER_TIMEOUT,
            max_output: Some(64 * 1024),
            ..ExecRequest::default()
        }
    }
}

async fn session(
    socket: WebSocket,
    runtime: Arc<Runtime>,
    sandbox: Arc<PodSandbox>,
    opts: Options,
    v5: bool,
) {
    let (mut sender, mut receiver) = socket.split();
    let (out, mut outgoing) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            if sender.send(message).await.is_err() {
                break;
            }
        }
        let _ = sender.close().await;
    });
    // The kubelet's "stream is ready" signal: an empty frame on the lowest output channel.
    let ready = if opts.stdout {
        STDOUT
    } else if opts.stderr {
        STDERR
    } else {
        ERROR
    };
    let _ = out.send(frame(ready, &[])).await;

    let mut argv = opts.command.clone();
    if opts.tty {
        let line: Vec<String> = argv.iter().map(|a| quote(a)).collect();
        argv = vec![
            "script".into(),
            "-qfec".into(),
            line.join(" "),
            "/dev/null".into(),
        ];
    }
    let fifo = Fifo {
        id: uuid::Uuid::new_v4().simple().to_string(),
    };
    if opts.stdin {
        let setup = fifo.helper(r#"mkdir -p "$d" && mkfifo "$d/in" "$d/hold""#, None);
        match runtime.exec(&sandbox, setup, None).await {
            Ok(r) if r.exit_code == 0 => {}
            other => {
                let why = match other {
                    Ok(r) => String::from_utf8_lossy(&r.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                let _ = out
                    .send(frame(
                        ERROR,
                        failure_status(&format!("setting up stdin: {why}"))
                            .to_string()
                            .as_bytes(),
                    ))
                    .await;
                drop(out);
                let _ = writer.await;
                return;
            }
        }
        let mut wrapped = vec![];
        wrapped.append(&mut argv);
        argv = fifo.argv(r#"shift; exec "$@" <"$d/in""#, &wrapped);
    }
    let holder = opts.stdin.then(|| {
        let runtime = runtime.clone();
        let sandbox = sandbox.clone();
        let request = ExecRequest {
            timeout: COMMAND_TIMEOUT,
            ..fifo.helper(r#"exec 3<>"$d/in"; read _ <"$d/hold"; exit 0"#, None)
        };
        tokio::spawn(async move { runtime.exec(&sandbox, request, None).await })
    });

    let (sink, mut chunks) = mpsc::channel::<OutputChunk>(64);
    let request = ExecRequest {
        argv,
        timeout: COMMAND_TIMEOUT,
        merge_stderr: opts.tty,
        ..ExecRequest::default()
    };
    let main = {
        let runtime = runtime.clone();
        let sandbox = sandbox.clone();
        tokio::spawn(async move { runtime.exec(&sandbox, request, Some(&sink)).await })
    };

    // Stdin frames are fed in order by one task; closing stdin releases the holder.
    let (stdin_tx, mut stdin_rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let feeder = opts.stdin.then(|| {
        let runtime = runtime.clone();
        let sandbox = sandbox.clone();
        let id = fifo.id.clone();
        tokio::spawn(async move {
            let fifo = Fifo { id };
            while let Some(Some(data)) = stdin_rx.recv().await {
                let _ = runtime
                    .exec(&sandbox, fifo.helper(r#"cat >"$d/in""#, Some(data)), None)
                    .await;
            }
            let _ = runtime
                .exec(&sandbox, fifo.helper(r#": >"$d/hold""#, None), None)
                .await;
        })
    });

    let mut main = main;
    let mut client_open = true;
    let mut stdin_open = opts.stdin;
    let result = loop {
        tokio::select! {
            chunk = chunks.recv() => {
                if let Some(chunk) = chunk {
                    let channel = match chunk.stream { OutputStream::Stdout => STDOUT, OutputStream::Stderr => STDERR };
                    let wanted = if channel == STDOUT { opts.stdout } else { opts.stderr };
                    if wanted {
                        let _ = out.send(frame(channel, &chunk.bytes)).await;
                    }
                }
            }
            message = receiver.next(), if client_open => {
                match message {
                    Some(Ok(Message::Binary(data))) => match (data.first(), data.get(1)) {
                        (Some(&STDIN), _) if stdin_open => {
                            let _ = stdin_tx.send(Some(data[1..].to_vec()));
                        }
                        (Some(&CLOSE_SIGNAL), Some(&STDIN)) if v5 && stdin_open => {
                            stdin_open = false;
                            let _ = stdin_tx.send(None);
                        }
                        // Resize (4) and anything else: ignored, as by a kubelet without a tty.
                        _ => {}
                    },
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        client_open = false;
                        if stdin_open {
                            stdin_open = false;
                            let _ = stdin_tx.send(None);
                        }
                    }
                    Some(Ok(_)) => {}
                }
            }
            done = &mut main => break done,
        }
    };
    // Output still queued after the command ended.
    while let Ok(chunk) = chunks.try_recv() {
        let channel = match chunk.stream {
            OutputStream::Stdout => STDOUT,
            OutputStream::Stderr => STDERR,
        };
        if (channel == STDOUT && opts.stdout) || (channel == STDERR && opts.stderr) {
            let _ = out.send(frame(channel, &chunk.bytes)).await;
        }
    }
    if stdin_open {
        let _ = stdin_tx.send(None);
    }
    drop(stdin_tx);
    let status = match result {
        Ok(Ok(r)) => exit_status(
            &opts.command,
            if r.exit_code < 0 { 137 } else { r.exit_code },
        ),
        Ok(Err(e)) => failure_status(&e.to_string()),
        Err(e) => failure_status(&format!("the command's task failed: {e}")),
    };
    let _ = out.send(frame(ERROR, status.to_string().as_bytes())).await;
    let _ = out
        .send(Message::Close(Some(CloseFrame {
            code: 1000,
            reason: "".into(),
        })))
        .await;
    drop(out);
    let _ = writer.await;
    if let Some(feeder) = feeder {
        let _ = feeder.await;
    }
    if let Some(holder) = holder {
        let _ = holder.await;
        let _ = runtime
            .exec(&sandbox, fifo.helper(r#"rm -rf -- "$d""#, None), None)
            .await;
    }
}
