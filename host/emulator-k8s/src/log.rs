//! `pods/log`, as the API server and the kubelet serve it together: the API server
//! checks the `PodLogOptions` (422 naming the field), finds the pod (404) and the
//! container (400 when it is ambiguous or unknown), and answers an unscheduled pod with
//! nothing (204); the kubelet judges the container's state from the pod's status (400
//! with its words: waiting to start, terminated, no previous instance) and then reads
//! the container's log, `text/plain`: the last `tailLines` lines, those received within
//! `sinceSeconds` or after `sinceTime`, each prefixed with its RFC 3339 timestamp when
//! `timestamps`, cut after `limitBytes`. With `follow` the answer is streamed (chunked)
//! as lines come, until the container ends, the byte limit is reached, or the client
//! goes away.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use crate::api::Query;
use crate::kubelet::container_log::{ContainerLog, ReadOptions, Writer};
use crate::state::State;
use crate::status::{ApiError, ApiResult, Cause};

/// What the client asked for.
#[derive(Debug)]
struct Asked {
    container: Option<String>,
    follow: bool,
    previous: bool,
    read: ReadOptions,
}

/// A boolean query parameter, converted as the API server converts one: absent, `0`
/// or `false` (any case) is false, any other value (even empty) true.
fn boolean(query: &Query, key: &str) -> bool {
    query
        .get(key)
        .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn integer(query: &Query, key: &str) -> ApiResult<Option<i64>> {
    query
        .get(key)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!("{key}: invalid value \"{v}\": must be an integer"))
            })
        })
        .transpose()
}

fn invalid(field: &str, value: i64, problem: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value}: {problem}"),
        field: field.into(),
    }
}

/// The options, validated as `ValidatePodLogOptions` does.
fn options(query: &Query, pod: &str) -> ApiResult<Asked> {
    let tail_lines = integer(query, "tailLines")?;
    let limit_bytes = integer(query, "limitBytes")?;
    let since_seconds = integer(query, "sinceSeconds")?;
    let since_time = query
        .get("sinceTime")
        .map(|v| {
            humantime::parse_rfc3339_weak(v).map_err(|e| {
                ApiError::bad_request(format!(
                    "sinceTime: invalid value \"{v}\": {e} (RFC 3339, e.g. 2024-01-02T03:04:05Z)"
                ))
            })
        })
        .transpose()?;
    let mut causes = Vec::new();
    if let Some(n) = tail_lines.filter(|n| *n < 0) {
        causes.push(invalid(
            "tailLines",
            n,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(n) = limit_bytes.filter(|n| *n < 1) {
        causes.push(invalid("limitBytes", n, "must be greater than 0"));
    }
    match (since_seconds, since_time) {
        (Some(_), Some(_)) => causes.push(Cause {
            reason: "FieldValueForbidden".into(),
            message: "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                .into(),
            field: String::new(),
        }),
        (Some(n), None) if n < 1 => {
            causes.push(invalid("sinceSeconds", n, "must be greater than 0"))
        }
        _ => {}
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("PodLogOptions", "", pod, causes));
    }
    // Validated: none is negative.
    let unsigned = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
    let since = since_time.or_else(|| {
        let seconds = unsigned(since_seconds)?;
        SystemTime::now().checked_sub(Duration::from_secs(seconds))
    });
    Ok(Asked {
        container: query.get("container").map(str::to_string),
        follow: boolean(query, "follow"),
        previous: boolean(query, "previous"),
        read: ReadOptions {
            tail_lines: unsigned(tail_lines),
            limit_bytes: unsigned(limit_bytes),
            since,
            timestamps: boolean(query, "timestamps"),
        },
    })
}

/// The kubelet's `validateContainerLogStatus`: whether `container` has a log to read,
/// judged from the pod's status, or why not.
fn log_status(pod: &Value, name: &str, container: &str, previous: bool) -> Result<(), String> {
    let no_log = |why: &str| Err(format!("container \"{container}\" in pod \"{name}\" {why}"));
    if previous {
        // The emulator's kubelet never restarts a container: none has a previous
        // instance (`lastState.terminated`).
        return Err(format!(
            "previous terminated container \"{container}\" in pod \"{name}\" not found"
        ));
    }
    let status = [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .flat_map(|field| pod["status"][field].as_array().into_iter().flatten())
    .find(|s| s["name"] == container);
    // A real kubelet reports a container it is still pulling or creating as waiting in
    // `ContainerCreating`; the emulator's writes no status until the pod runs (or its
    // pull fails), so a scheduled pod's container without one is in that state.
    let Some(status) = status else {
        return no_log("is waiting to start: ContainerCreating");
    };
    let state = &status["state"];
    if state["running"].is_object() {
        return Ok(());
    }
    if state["terminated"].is_object() {
        // An init container's status has no container ID where it did not run
        // (pods of plain processes run their first container alone): no log.
        return if state["terminated"]["containerID"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
        {
            Ok(())
        } else {
            no_log("is terminated")
        };
    }
    match state["waiting"]["reason"].as_str() {
        Some("ErrImagePull") => no_log("is waiting to start: image can't be pulled"),
        Some("ImagePullBackOff") => no_log("is waiting to start: trying and failing to pull image"),
        Some(reason) => no_log(&format!("is waiting to start: {reason}")),
        None => no_log("is waiting to start - no logs yet"),
    }
}

fn text_plain(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// The log as it grows, chunk by chunk, until it ends or the byte limit is reached.
fn follow(log: Arc<ContainerLog>, options: &ReadOptions) -> Body {
    struct Following {
        log: Arc<ContainerLog>,
        changes: tokio::sync::watch::Receiver<()>,
        writer: Writer,
        /// Where to read on from (None: the first read, which starts at the tail).
        next: Option<u64>,
        tail: Option<u64>,
        done: bool,
    }
    let start = Following {
        changes: log.subscribe(),
        log,
        writer: Writer::new(options),
        next: None,
        tail: options.tail_lines,
        done: false,
    };
    let chunks = futures_util::stream::unfold(start, |mut f| async move {
        // Each turn reads what is new since the last, or waits for a change: a
        // container that writes nothing more ends, and so does the stream.
        while !f.done {
            f.changes.borrow_and_update();
            let batch = match f.next {
                None => f.log.read_tail(f.tail),
                Some(from) => f.log.read_from(from),
            };
            f.next = Some(batch.next);
            let chunk = f.writer.render(&batch.entries);
            f.done = batch.ended || f.writer.exhausted();
            if !chunk.is_empty() {
                return Some((Ok::<_, Infallible>(Bytes::from(chunk)), f));
            }
            if !f.done && f.changes.changed().await.is_err() {
                return None;
            }
        }
        None
    });
    Body::from_stream(chunks)
}

/// Answer `GET .../pods/NAME/log`.
pub(crate) fn serve(
    state: &State,
    query: &Query,
    namespace: &str,
    name: &str,
) -> ApiResult<Response> {
    let asked = options(query, name)?;
    let pod = crate::pods::get(state, namespace, name)?;
    let container = crate::pods::container(&pod, name, asked.container.as_deref())?;
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        // No kubelet to ask yet: the API server streams nothing.
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    log_status(&pod, name, &container, asked.previous).map_err(|message| {
        // The kubelet's error, passed on by the API server as a BadRequest about pods/log.
        ApiError::bad_request(message).with_details(name, "", "pods/log")
    })?;
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let Some(log) = state.runtime.log(uid, &container) else {
        // The pod was deleted since it was read, and its logs with it.
        return Ok(text_plain(Body::empty()));
    };
    if asked.follow {
        Ok(text_plain(follow(log, &asked.read)))
    } else {
        Ok(text_plain(Body::from(log.read(&asked.read))))
    }
}
