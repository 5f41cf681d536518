//! `pods/exec` over websocket, as the API server and kubelet serve it: subprotocols
//! `v5.channel.k8s.io` (preferred) and `v4.channel.k8s.io`, binary frames whose first
//! byte is the channel (0 stdin, 1 stdout, 2 stderr, 3 the error channel carrying a
//! `Status` — `NonZeroExitCode` with the exit code as its cause — 4 resize, ignored),
//! an empty frame on the lowest output channel once the stream is set up, v5's
//! close-stdin signal (`255, 0`), then a normal close.
//!
//! The command runs in the pod's local sandbox as a container runtime runs an exec'd
//! process: alone, its stdin a pipe that each stdin frame is written into as it
//! arrives (closed by the close signal or the client's going away), its stdout and
//! stderr read as it writes them and sent on at once — nothing is kept, and a client
//! that reads slowly holds the command back. With `tty`, the command runs under
//! `script` on a pseudo-terminal (stdout and stderr are one stream, as on a tty).

use std::process::ExitStatus;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use sandfleet_backend_local::{DISK_LIMIT_PASSED, SpawnRequest, Spawned};
use sandfleet_core::BackendError;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::api::Query;
use crate::kubelet::runtime::{PodSandbox, READ_CHUNK, Runtime, exit_code};
use crate::state::State;
use crate::status::{ApiError, ApiResult};

/// The subprotocols served, preferred first.
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

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
        stdin: query.flag("stdin"),
        stdout: query.flag("stdout"),
        stderr: query.flag("stderr"),
        tty: query.flag("tty"),
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
) -> ApiResult<(Arc<Value>, Arc<PodSandbox>)> {
    let pod = crate::pods::get(state, namespace, name)?;
    let container = crate::pods::container(&pod, name, container)?;
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
    let sandbox = runtime.sandbox(uid).ok_or_else(|| {
        ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        ))
    })?;
    Ok((pod, sandbox))
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
    let (pod, sandbox) = sandbox_for(
        &state,
        &state.runtime,
        namespace,
        name,
        query.get("container"),
    )?;
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
        .on_upgrade(move |socket| session(socket, state, pod, sandbox, opts, v5))
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

/// Sends one output pipe's bytes on `channel` as they come (when the client asked
/// for them), until the pipe ends.
async fn relay(
    mut pipe: impl AsyncRead + Unpin,
    channel: u8,
    wanted: bool,
    out: mpsc::Sender<Message>,
) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) => return,
            Ok(n) => {
                // A client that went away stops the sending, not the reading: the
                // command must not block on a full pipe.
                if wanted {
                    let _ = out.send(frame(channel, &buffer[..n])).await;
                }
            }
            Err(error) => {
                tracing::debug!(%error, channel, "reading an exec'd command's output");
                return;
            }
        }
    }
}

async fn session(
    socket: WebSocket,
    state: Arc<State>,
    pod: Arc<Value>,
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
    let request = SpawnRequest {
        argv,
        stdin: opts.stdin,
        merge_stderr: opts.tty,
        ..SpawnRequest::default()
    };
    let status = match state.runtime.spawn(&sandbox, request).await {
        Ok(spawned) => {
            state.executions.started(&opts.command, opts.stdin);
            match run(spawned, &opts, v5, &mut receiver, &out, &state.executions).await {
                Ok(status) => exit_status(&opts.command, exit_code(status)),
                Err(error) => {
                    if error.message().contains(DISK_LIMIT_PASSED) {
                        crate::kubelet::evict_for_storage(&state, &pod).await;
                    }
                    failure_status(&error.to_string())
                }
            }
        }
        Err(error) => failure_status(&error.to_string()),
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
}

/// Relays a running command until it has exited and its output has ended; returns
/// how it ended.
async fn run(
    spawned: Spawned,
    opts: &Options,
    v5: bool,
    receiver: &mut SplitStream<WebSocket>,
    out: &mpsc::Sender<Message>,
    executions: &crate::executions::Counters,
) -> Result<ExitStatus, BackendError> {
    let Spawned {
        mut stdin,
        stdout,
        stderr,
        mut exit,
    } = spawned;
    let mut relays = vec![tokio::spawn(relay(
        stdout,
        STDOUT,
        opts.stdout,
        out.clone(),
    ))];
    if let Some(stderr) = stderr {
        relays.push(tokio::spawn(relay(
            stderr,
            STDERR,
            opts.stderr,
            out.clone(),
        )));
    }
    let mut client_open = true;
    let exited = loop {
        tokio::select! {
            message = receiver.next(), if client_open => match message {
                Some(Ok(Message::Binary(data))) => match (data.first(), data.get(1)) {
                    (Some(&STDIN), _) => {
                        executions.read(&data[1..]);
                        if let Some(pipe) = &mut stdin
                            && pipe.write_all(&data[1..]).await.is_err()
                        {
                            // The command closed its stdin, or exited.
                            stdin = None;
                        }
                    }
                    (Some(&CLOSE_SIGNAL), Some(&STDIN)) if v5 => stdin = None,
                    // Resize (4) and anything else: ignored, as by a kubelet without a tty.
                    _ => {}
                },
                Some(Ok(Message::Close(_)) | Err(_)) | None => {
                    client_open = false;
                    stdin = None;
                }
                Some(Ok(_)) => {}
            },
            exited = exit.wait() => break exited,
        }
    };
    drop(stdin);
    // What the command wrote before it exited, to its end.
    for relay in relays {
        let _ = relay.await;
    }
    exited
}
