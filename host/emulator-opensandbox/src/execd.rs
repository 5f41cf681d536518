//! execd, one per sandbox on its own loopback address (port 44772),
//! unauthenticated as real execd is when no access token is configured:
//! `/ping`, `/command` (streamed events, background mode, status, logs,
//! interrupt) and `/files/upload`, `/files/download`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::multipart::MultipartRejection;
use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use sandfleet_core::Backend;

use crate::commands::{Command, CommandRequest, SandboxExec};
use crate::error::ApiError;

/// The port execd listens on in every sandbox.
pub const EXECD_PORT: u16 = 44772;

/// The egress sidecar's port, whose endpoint the SDK resolves at create.
pub const EGRESS_PORT: u16 = 18080;

/// How often a silent command stream carries a `ping` event.
const PING_EVERY: Duration = Duration::from_secs(3);

/// With `cut-tail`, how long after the terminal event the connection is
/// dropped.
const CUT_AFTER: Duration = Duration::from_millis(20);

/// The largest upload accepted.
const MAX_UPLOAD: usize = 1 << 30;

/// The sandbox's workdir, against which relative file paths resolve.
pub(crate) const WORKDIR: &str = "/workspace";

/// How a command stream ends after its terminal event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tail {
    /// Held open this long (real execd: 1 s).
    pub(crate) grace: Option<Duration>,
    /// Dropped at once, without the end of the chunked body.
    pub(crate) cut: bool,
}

#[derive(Clone)]
struct Execd {
    exec: Arc<SandboxExec>,
    tail: Tail,
}

/// execd's routes for one sandbox.
pub(crate) fn router(exec: Arc<SandboxExec>, tail: Tail) -> Router {
    Router::new()
        .route("/ping", get(|| async { StatusCode::OK }))
        .route("/command", post(run_command).delete(interrupt))
        .route("/command/status/{id}", get(status))
        .route("/command/{id}/logs", get(logs))
        .route("/files/upload", post(upload))
        .route("/files/download", get(download))
        .route("/files", axum::routing::delete(remove_files))
        .layer(DefaultBodyLimit::max(MAX_UPLOAD))
        .with_state(Execd { exec, tail })
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST_BODY", message)
}

fn not_found(what: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", what)
}

#[derive(Deserialize)]
struct RunCommandBody {
    command: Option<String>,
    /// Newer execd (SDK 1.1.1): argv instead of a shell string.
    argv: Option<Vec<String>>,
    cwd: Option<String>,
    #[serde(default)]
    background: bool,
    timeout: Option<i64>,
    uid: Option<u32>,
    gid: Option<u32>,
    #[serde(default)]
    envs: BTreeMap<String, String>,
}

/// Quotes `word` for bash.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn parse_command(body: &[u8]) -> Result<CommandRequest, ApiError> {
    let body: RunCommandBody = serde_json::from_slice(body).map_err(|e| {
        bad_request(format!(
            "error parsing request, MAYBE invalid body format: {e}"
        ))
    })?;
    let command = match (body.command, body.argv) {
        (Some(command), _) if !command.trim().is_empty() => command,
        (_, Some(argv)) if !argv.is_empty() => {
            argv.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
        }
        _ => return Err(bad_request("command is required")),
    };
    if body.gid.is_some() && body.uid.is_none() {
        return Err(bad_request("gid requires uid"));
    }
    let timeout = match body.timeout {
        None => None,
        Some(ms) if ms >= 1 => Some(Duration::from_millis(ms as u64)),
        Some(ms) => {
            return Err(bad_request(format!(
                "timeout must be at least 1 ms, got {ms}"
            )));
        }
    };
    Ok(CommandRequest {
        command,
        cwd: body.cwd.filter(|c| !c.is_empty()),
        background: body.background,
        timeout,
        envs: body.envs,
    })
}

async fn run_command(State(execd): State<Execd>, body: Bytes) -> Result<Response, ApiError> {
    let request = parse_command(&body)?;
    let command = execd.exec.start(request);
    let stream = events(command, execd.tail);
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

enum Phase {
    Events,
    Tail,
    Done,
}

/// The command's events as a body: each as soon as it is recorded, a
/// `ping` after every 3 s of silence, then the tail.
fn events(
    command: Arc<Command>,
    tail: Tail,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let changes = command.subscribe();
    let state = (command, changes, 0usize, Phase::Events, Vec::<Bytes>::new());
    futures_util::stream::unfold(
        state,
        move |(command, mut changes, mut cursor, phase, mut queued)| async move {
            match phase {
                Phase::Done => None,
                Phase::Tail => {
                    if tail.cut {
                        // Long enough for the terminal event to be written out
                        // before the connection is dropped.
                        tokio::time::sleep(CUT_AFTER).await;
                        let cut = std::io::Error::new(
                            std::io::ErrorKind::ConnectionAborted,
                            "cut-tail fault",
                        );
                        return Some((Err(cut), (command, changes, cursor, Phase::Done, queued)));
                    }
                    if let Some(grace) = tail.grace {
                        tokio::time::sleep(grace).await;
                    }
                    None
                }
                Phase::Events => loop {
                    if !queued.is_empty() {
                        let next = queued.remove(0);
                        let phase = match queued.is_empty() && is_done(&command, cursor) {
                            true => Phase::Tail,
                            false => Phase::Events,
                        };
                        return Some((Ok(next), (command, changes, cursor, phase, queued)));
                    }
                    changes.borrow_and_update();
                    let (new, _) = command.events_from(cursor);
                    if !new.is_empty() {
                        cursor += new.len();
                        queued = new;
                        continue;
                    }
                    let ping = tokio::select! {
                        changed = changes.changed() => changed.is_err(),
                        () = tokio::time::sleep(PING_EVERY) => true,
                    };
                    if ping {
                        let ping = Bytes::from(format!(
                            "{}\n\n",
                            json!({"type": "ping", "timestamp": jiff::Timestamp::now().as_millisecond()})
                        ));
                        return Some((Ok(ping), (command, changes, cursor, Phase::Events, queued)));
                    }
                },
            }
        },
    )
}

/// Whether every event up to `cursor` has been read and the last was
/// terminal.
fn is_done(command: &Command, cursor: usize) -> bool {
    let (rest, terminal) = command.events_from(cursor);
    rest.is_empty() && terminal
}

#[derive(Deserialize)]
struct IdQuery {
    id: Option<String>,
}

async fn interrupt(
    State(execd): State<Execd>,
    Query(query): Query<IdQuery>,
) -> Result<StatusCode, ApiError> {
    let id = query
        .id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| bad_request("missing query parameter id"))?;
    let command = execd
        .exec
        .command(&id)
        .ok_or_else(|| not_found(format!("command {id} not found")))?;
    command.interrupt();
    Ok(StatusCode::OK)
}

fn rfc3339(ts: jiff::Timestamp) -> String {
    ts.round(jiff::Unit::Second).unwrap_or(ts).to_string()
}

async fn status(
    State(execd): State<Execd>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let command = execd
        .exec
        .command(&id)
        .ok_or_else(|| not_found(format!("command {id} not found")))?;
    let status = command.status();
    let mut body = json!({
        "id": command.id,
        "content": command.content,
        "running": status.running,
        "exit_code": status.exit_code,
        "started_at": rfc3339(command.started_at),
        "finished_at": status.finished_at.map(rfc3339),
    });
    if let Some(error) = status.error {
        body["error"] = json!(error);
    }
    Ok(axum::Json(body))
}

#[derive(Deserialize)]
struct CursorQuery {
    cursor: Option<String>,
}

/// `GET /command/{id}/logs?cursor=N`: a background command's output file
/// from byte N on. execd answers 400 for an unknown or foreground command,
/// reads a cursor it cannot parse as 0, and cannot seek to a negative one.
async fn logs(
    State(execd): State<Execd>,
    Path(id): Path<String>,
    Query(query): Query<CursorQuery>,
) -> Result<Response, ApiError> {
    let command = execd
        .exec
        .command(&id)
        .ok_or_else(|| bad_request(format!("command not found: {id}")))?;
    if !command.background {
        return Err(bad_request(format!(
            "command {id} is not running in background"
        )));
    }
    let cursor = query
        .cursor
        .as_deref()
        .and_then(|text| text.parse::<i64>().ok())
        .unwrap_or(0);
    let cursor = usize::try_from(cursor).map_err(|_| {
        bad_request(format!(
            "error seek file: seek /tmp/{id}.output: invalid argument"
        ))
    })?;
    let (text, next) = command.output_from(cursor);
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::HeaderName::from_static("execd-commands-tail-cursor"),
                HeaderValue::from(next),
            ),
        ],
        text,
    )
        .into_response())
}

/// `path` inside the sandbox: relative paths are relative to the workdir.
fn sandbox_path(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{WORKDIR}/{path}")
    }
}

#[derive(Deserialize)]
struct FileMetadata {
    path: String,
    #[serde(default)]
    mode: Option<u32>,
}

/// `mode` as execd reads it: octal digits written as a decimal number
/// (`755`).
fn octal_mode(mode: Option<u32>) -> Result<u32, ApiError> {
    match mode {
        None | Some(0) => Ok(0o644),
        Some(digits) => u32::from_str_radix(&digits.to_string(), 8)
            .map_err(|_| bad_request(format!("mode {digits} is not an octal permission like 644"))),
    }
}

async fn upload(
    State(execd): State<Execd>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<StatusCode, ApiError> {
    let mut multipart =
        multipart.map_err(|e| bad_request(format!("not a multipart upload: {e}")))?;
    // execd reads the form's file parts by name: `metadata` parts (file
    // parts, so a plain form field does not count) and `file` parts, paired
    // in order.
    let mut metadata = Vec::new();
    let mut files = Vec::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| bad_request(format!("reading the multipart body: {e}")))?
    {
        let name = field.name().unwrap_or_default().to_string();
        let is_file = field.file_name().is_some();
        let bytes = field
            .bytes()
            .await
            .map_err(|e| bad_request(format!("reading part `{name}`: {e}")))?;
        match (name.as_str(), is_file) {
            ("metadata", true) => metadata.push(bytes),
            ("file", true) => files.push(bytes),
            _ => {}
        }
    }
    if metadata.is_empty() || metadata.len() != files.len() {
        return Err(bad_request(format!(
            "metadata file parts ({}) and file parts ({}) must pair up, metadata first",
            metadata.len(),
            files.len()
        )));
    }
    for (meta, contents) in metadata.iter().zip(&files) {
        let meta: FileMetadata = serde_json::from_slice(meta).map_err(|e| {
            bad_request(format!(
                "metadata part is not {{path, owner, group, mode}}: {e}"
            ))
        })?;
        let path = sandbox_path(&meta.path);
        let mode = octal_mode(meta.mode)?;
        execd
            .exec
            .backend
            .put_file(&execd.exec.handle, &path, contents, mode)
            .await
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "RUNTIME_ERROR",
                    format!("writing {path}: {e}"),
                )
            })?;
    }
    Ok(StatusCode::OK)
}

/// `DELETE /files?path=A&path=B`: removes files (never directories); a
/// path that is gone is no failure.
async fn remove_files(
    State(execd): State<Execd>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<StatusCode, ApiError> {
    let paths: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(key, value)| key == "path" && !value.is_empty())
        .map(|(_, value)| sandbox_path(&value))
        .collect();
    if paths.is_empty() {
        return Err(bad_request("missing query parameter path"));
    }
    let mut argv = vec!["rm".to_string(), "-f".to_string(), "--".to_string()];
    argv.extend(paths.iter().cloned());
    let request = sandfleet_core::ExecRequest {
        argv,
        timeout: Duration::from_secs(60),
        ..sandfleet_core::ExecRequest::default()
    };
    let removed = execd
        .exec
        .backend
        .exec(&execd.exec.handle, &request, None)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "RUNTIME_ERROR",
                format!("removing {}: {e}", paths.join(", ")),
            )
        })?;
    if removed.exit_code != 0 {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "RUNTIME_ERROR",
            format!(
                "removing {}: {}",
                paths.join(", "),
                String::from_utf8_lossy(&removed.stderr).trim()
            ),
        ));
    }
    Ok(StatusCode::OK)
}

#[derive(Deserialize)]
struct PathQuery {
    path: Option<String>,
}

/// A `Range: bytes=…` header's one range over `len` bytes, as `start..end`.
fn byte_range(header: &str, len: u64) -> Option<(u64, u64)> {
    let spec = header.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (start, end) = spec.split_once('-')?;
    let (start, end) = match (start.trim(), end.trim()) {
        ("", suffix) => {
            let n: u64 = suffix.parse().ok()?;
            (len.saturating_sub(n), len)
        }
        (start, "") => (start.parse().ok()?, len),
        (start, end) => (
            start.parse().ok()?,
            end.parse::<u64>().ok()?.saturating_add(1).min(len),
        ),
    };
    (start < end && start < len).then_some((start, end))
}

async fn download(
    State(execd): State<Execd>,
    Query(query): Query<PathQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = query
        .path
        .filter(|p| !p.is_empty())
        .ok_or_else(|| bad_request("missing query parameter path"))?;
    let path = sandbox_path(&path);
    let contents = execd
        .exec
        .backend
        .get_file(&execd.exec.handle, &path)
        .await
        .map_err(|e| match e.kind() {
            sandfleet_core::ErrorKind::NotFound => ApiError::new(
                StatusCode::NOT_FOUND,
                "FILE_NOT_FOUND",
                format!("file {path} not found"),
            ),
            _ => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "RUNTIME_ERROR",
                format!("reading {path}: {e}"),
            ),
        })?;
    let name = path.rsplit('/').next().unwrap_or("file").replace('"', "");
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    let len = contents.len() as u64;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let mut response = match range {
        None => (StatusCode::OK, contents).into_response(),
        Some(spec) => match byte_range(spec, len) {
            Some((start, end)) => {
                let mut response = (
                    StatusCode::PARTIAL_CONTENT,
                    contents[start as usize..end as usize].to_vec(),
                )
                    .into_response();
                response.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes {start}-{}/{len}", end - 1))
                        .expect("ascii"),
                );
                response
            }
            None => {
                let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
                response.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{len}")).expect("ascii"),
                );
                return Ok(response);
            }
        },
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::CONTENT_DISPOSITION, disposition);
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_rfc_9110() {
        assert_eq!(byte_range("bytes=0-3", 10), Some((0, 4)));
        assert_eq!(byte_range("bytes=4-", 10), Some((4, 10)));
        assert_eq!(byte_range("bytes=-3", 10), Some((7, 10)));
        assert_eq!(byte_range("bytes=5-100", 10), Some((5, 10)));
        assert_eq!(byte_range("bytes=10-", 10), None);
        assert_eq!(byte_range("bytes=0-1,3-4", 10), None);
        assert_eq!(byte_range("lines=1-2", 10), None);
    }

    #[test]
    fn modes_are_octal_digits() {
        assert_eq!(octal_mode(Some(755)).unwrap(), 0o755);
        assert_eq!(octal_mode(None).unwrap(), 0o644);
        assert!(octal_mode(Some(789)).is_err());
    }

    #[test]
    fn command_bodies_are_checked() {
        assert!(parse_command(b"{}").is_err());
        assert!(parse_command(b"not json").is_err());
        assert!(parse_command(br#"{"command":"true","gid":1}"#).is_err());
        assert!(parse_command(br#"{"command":"true","timeout":0}"#).is_err());
        let argv = parse_command(br#"{"argv":["echo","it's"]}"#).unwrap();
        assert_eq!(argv.command, r"'echo' 'it'\''s'");
        let request =
            parse_command(br#"{"command":"ls","timeout":1500,"background":true}"#).unwrap();
        assert_eq!(request.timeout, Some(Duration::from_millis(1500)));
        assert!(request.background);
    }
}
