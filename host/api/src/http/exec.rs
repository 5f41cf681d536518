//! Commands in a lease's sandbox, buffered or streamed, and never run twice.
//!
//! Every command runs in a task of its own, not in the request: a client
//! whose connection drops does not stop it. An `Idempotency-Key` names the
//! execution in its holder's record ([`crate::domain::executions`]); a
//! retried request with the same key gets its result, or attaches to it
//! while it runs (a stream replays what it printed so far), instead of
//! running the command again.
//!
//! A command runs on a [`Holder`]: a lease, or a shared-pool session
//! pinned to one of the pool's sandboxes; both are served by [`serve`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use sandfleet_core::{ExecRequest, ExecResult, OutputChunk, OutputStream};
use tokio::sync::{mpsc, watch};

use crate::domain::executions::{ExecFailure, Execution, Finisher};
use crate::domain::holder::Holder;
use crate::error::AppError;
use crate::metrics::ExecOutcome;
use crate::model::{ExecRequestBody, ExecResponse};
use crate::state::AppState;

/// Commands without a timeout of their own get this one.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How the client wants the answer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One JSON object at the end.
    Buffered,
    /// A JSON object per line as output is produced, then the result.
    NdJson,
    /// Server-sent events: `output` events, then `exit`.
    Sse,
}

impl Framing {
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if accept.contains("application/x-ndjson") {
            Framing::NdJson
        } else if accept.contains("text/event-stream") {
            Framing::Sse
        } else {
            Framing::Buffered
        }
    }
}

/// The request as the backend takes it.
///
/// # Errors
///
/// Neither or both of `argv` and `command`, an empty `argv`, a bad timeout.
pub(crate) fn request(body: ExecRequestBody, max_output: u64) -> Result<ExecRequest, AppError> {
    let argv = match (body.argv, body.command) {
        (Some(argv), None) => {
            if argv.first().is_none_or(|p| p.is_empty()) {
                return Err(AppError::invalid(
                    "exec: `argv` must name a program (its first element is empty or missing)",
                ));
            }
            argv
        }
        (None, Some(command)) => vec!["sh".into(), "-c".into(), command],
        (Some(_), Some(_)) => {
            return Err(AppError::invalid(
                "exec: give `argv` (a list) or `command` (a shell string), not both",
            ));
        }
        (None, None) => {
            return Err(AppError::invalid(
                "exec: missing field `argv` (a list) or `command` (a shell string)",
            ));
        }
    };
    let timeout = match body.timeout_s {
        None => DEFAULT_TIMEOUT,
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Duration::from_secs_f64(s),
        Some(s) => {
            return Err(AppError::invalid(format!(
                "exec: `timeout_s` must be between 0 and 86400 seconds, not {s}"
            )));
        }
    };
    Ok(ExecRequest {
        argv,
        workdir: body.workdir,
        env: body.env.into_iter().collect(),
        timeout,
        merge_stderr: body.merge_stderr,
        stdin: body.stdin.map(String::into_bytes),
        max_output: Some(max_output),
    })
}

/// `?encoding=base64`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct EncodingQuery {
    encoding: Option<String>,
}

fn wants_base64(query: &EncodingQuery) -> Result<bool, AppError> {
    match query.encoding.as_deref() {
        None | Some("utf-8") | Some("utf8") => Ok(false),
        Some("base64") => Ok(true),
        Some(other) => Err(AppError::invalid(format!(
            "encoding: `{other}` is not `utf-8` or `base64`"
        ))),
    }
}

/// An exec request on `target`, from its parts as the handler got them.
pub(crate) async fn serve<T: Holder>(
    state: &AppState,
    target: &Arc<T>,
    query: &EncodingQuery,
    headers: &HeaderMap,
    body: ExecRequestBody,
) -> Result<Response, AppError> {
    let _in_use = target.in_use();
    let base64 = wants_base64(query)?;
    let request = request(body, state.config.fleet.max_output)?;
    let key = headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .map_err(|_| AppError::invalid("Idempotency-Key: must be visible ASCII"))
        })
        .transpose()?;
    if key.is_some_and(|k| k.is_empty() || k.len() > 256) {
        return Err(AppError::invalid("Idempotency-Key: 1 to 256 characters"));
    }
    run(
        state,
        target,
        request,
        key,
        Framing::from_headers(headers),
        base64,
    )
    .await
}

/// Runs `request` on `target` (or finds the execution `key` names) and
/// answers as `framing` says.
async fn run<T: Holder>(
    state: &AppState,
    target: &Arc<T>,
    request: ExecRequest,
    key: Option<&str>,
    framing: Framing,
    base64: bool,
) -> Result<Response, AppError> {
    let record = framing != Framing::Buffered;
    let start = || {
        let execution = Execution::new(request.clone(), record);
        spawn(state.clone(), target.clone(), execution.clone());
        execution
    };
    let execution = match key {
        Some(key) => {
            let (execution, started) = target.executions().get_or_start(key, start);
            if !started && *execution.request() != request {
                return Err(AppError::conflict(format!(
                    "Idempotency-Key `{key}` was used for another request on {}",
                    target.name()
                )));
            }
            if !started {
                state.metrics.idempotent_replays.inc();
            }
            execution
        }
        None => start(),
    };
    match framing {
        Framing::Buffered => {
            let result = execution.outcome().await.as_ref()?;
            Ok(axum::Json(response(result, base64)).into_response())
        }
        streaming => Ok(stream(execution, streaming, base64)),
    }
}

/// Chunks in flight between a command and its execution record.
const SINK_CHUNKS: usize = 64;

fn spawn<T: Holder>(state: AppState, target: Arc<T>, execution: Arc<Execution>) {
    let in_use = target.in_use();
    let span = tracing::info_span!("exec", on = %target.name());
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let _in_use = in_use;
            let finisher = Finisher::new(execution.clone());
            let started = Instant::now();
            let Some(lease) = target.lease().read().await else {
                execution.finish(Err(ExecFailure::released(&*target)));
                return;
            };
            let (sink, mut chunks) = mpsc::channel::<OutputChunk>(SINK_CHUNKS);
            let recorder = execution.clone();
            let recording = async move {
                while let Some(chunk) = chunks.recv().await {
                    recorder.record(chunk);
                }
            };
            let running = async {
                let result = state
                    .session
                    .exec(&lease, execution.request(), Some(&sink))
                    .await;
                drop(sink);
                result
            };
            let (result, ()) = tokio::join!(running, recording);
            let outcome = match &result {
                Ok(r) if r.timed_out => ExecOutcome::TimedOut,
                Ok(r) if r.exit_code == 0 => ExecOutcome::Ok,
                Ok(_) => ExecOutcome::Failed,
                Err(_) => ExecOutcome::Error,
            };
            state.metrics.exec(outcome, started.elapsed());
            execution.finish(result.map_err(|error| ExecFailure::failed(&*target, error)));
            drop(finisher);
        },
        span,
    ));
}

fn encode(bytes: &[u8], base64: bool) -> String {
    if base64 {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

fn response(result: &ExecResult, base64: bool) -> ExecResponse {
    ExecResponse {
        exit_code: result.exit_code,
        stdout: encode(&result.stdout, base64),
        stderr: encode(&result.stderr, base64),
        timed_out: result.timed_out,
        duration_ms: result.duration.as_millis() as u64,
        stdout_dropped: result.stdout_dropped,
        stderr_dropped: result.stderr_dropped,
    }
}

/// One event of a streamed answer.
fn event(framing: Framing, name: &str, mut data: serde_json::Value) -> Bytes {
    match framing {
        Framing::Sse => Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
        _ => {
            data["event"] = serde_json::Value::String(name.to_string());
            Bytes::from(format!("{data}\n"))
        }
    }
}

fn stream(execution: Arc<Execution>, framing: Framing, base64: bool) -> Response {
    struct Reader {
        execution: Arc<Execution>,
        changes: watch::Receiver<u64>,
        next: usize,
        ended: bool,
    }
    let changes = execution.changes();
    let reader = Reader {
        execution,
        changes,
        next: 0,
        ended: false,
    };
    let events = futures_util::stream::unfold(reader, move |mut reader| async move {
        if reader.ended {
            return None;
        }
        loop {
            reader.changes.borrow_and_update();
            let fresh = reader.execution.chunks_after(reader.next);
            if !fresh.is_empty() {
                reader.next += fresh.len();
                let mut out = Vec::new();
                for chunk in fresh {
                    let stream = match chunk.stream {
                        OutputStream::Stdout => "stdout",
                        OutputStream::Stderr => "stderr",
                    };
                    out.extend_from_slice(&event(
                        framing,
                        "output",
                        serde_json::json!({"stream": stream, "data": encode(&chunk.bytes, base64)}),
                    ));
                }
                return Some((Ok::<_, std::convert::Infallible>(Bytes::from(out)), reader));
            }
            if let Some(outcome) = reader.execution.ended() {
                reader.ended = true;
                let last = match outcome {
                    Ok(result) => {
                        let mut tail = Vec::new();
                        // Not recorded as it ran (a buffered first request):
                        // the whole output, once.
                        if !reader.execution.records_chunks() {
                            for (stream, bytes) in
                                [("stdout", &result.stdout), ("stderr", &result.stderr)]
                            {
                                if !bytes.is_empty() {
                                    tail.extend_from_slice(&event(
                                        framing,
                                        "output",
                                        serde_json::json!({"stream": stream, "data": encode(bytes, base64)}),
                                    ));
                                }
                            }
                        }
                        let mut summary =
                            serde_json::to_value(response(result, base64)).unwrap_or_default();
                        if let Some(object) = summary.as_object_mut() {
                            object.remove("stdout");
                            object.remove("stderr");
                        }
                        tail.extend_from_slice(&event(framing, "exit", summary));
                        tail
                    }
                    Err(failure) => {
                        event(framing, "error", AppError::from(failure).body()).to_vec()
                    }
                };
                return Some((Ok(Bytes::from(last)), reader));
            }
            let _ = reader.changes.changed().await;
        }
    });
    let content_type = match framing {
        Framing::Sse => "text/event-stream",
        _ => "application/x-ndjson",
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(events),
    )
        .into_response()
}
