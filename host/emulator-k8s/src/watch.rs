//! Watches: one JSON event per line on a chunked 200 response. A watch starts after the
//! asked `resourceVersion` (or with synthetic ADDED events for the current objects when
//! none or `0` is asked), replays the history from there, and follows new changes.
//! An object entering or leaving the selectors is ADDED or DELETED for this watcher.
//! `allowWatchBookmarks` adds periodic BOOKMARKs, `timeoutSeconds` ends the stream
//! (the `timeout` parameter does not), and an RV older than the kept history gets an
//! ERROR event carrying a 410 `Expired` Status, as the real API server answers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::api::{ListOptions, Query, Target, present};
use crate::state::State;
use crate::status::{ApiError, ApiResult};
use crate::store::{EventType, StoreError};

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// Parameters of one watch.
struct Watch {
    target: Target,
    options: ListOptions,
    start: Option<u64>,
    bookmarks: bool,
    initial_events_end: bool,
    timeout: Option<Duration>,
    /// Events carry one-row Tables (`Accept: ...;as=Table`), as the list did.
    table: bool,
}

impl Watch {
    fn object(&self, object: &Value) -> Value {
        let presented = present(&self.target, object);
        if self.table {
            let rv = presented["metadata"]["resourceVersion"].clone();
            crate::table::table(&self.target, &[presented], &json!({"resourceVersion": rv}))
        } else {
            presented
        }
    }
}

/// Start a watch; the response streams until the timeout, a fault, or the client leaves.
///
/// # Errors
/// 400 for bad parameters.
pub(crate) fn start(
    state: Arc<State>,
    target: Target,
    query: &Query,
    table: bool,
) -> ApiResult<Response> {
    let options = ListOptions::read(query, &target.resource.kind)?;
    let start = match query.get("resourceVersion").filter(|s| !s.is_empty()) {
        None | Some("0") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion: {s}")))?,
        ),
    };
    let send_initial = query.flag("sendInitialEvents");
    let timeout = match query.get("timeoutSeconds") {
        None | Some("") => None,
        Some(s) => Some(Duration::from_secs(s.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds: {s}"))
        })?)),
    };
    let watch = Watch {
        target,
        options,
        start: if send_initial { None } else { start },
        bookmarks: query.flag("allowWatchBookmarks"),
        initial_events_end: send_initial,
        timeout,
        table,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(run(state, watch, tx));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

async fn run(state: Arc<State>, watch: Watch, tx: mpsc::Sender<Bytes>) {
    let deadline = [watch.timeout, state.faults.watch_drop]
        .into_iter()
        .flatten()
        .min()
        .map(|d| tokio::time::Instant::now() + d);
    let dropped_by_fault = state.faults.watch_drop.is_some()
        && watch
            .timeout
            .is_none_or(|t| state.faults.watch_drop.is_some_and(|d| d < t));
    let r = &watch.target.resource;
    let key = r.key();
    let ns = if r.namespaced {
        watch.target.namespace.clone()
    } else {
        None
    };
    let mut changes = state.store.subscribe();
    let gone = |rv: u64, oldest: u64| line("ERROR", &ApiError::gone(rv, oldest).to_status());

    if state.faults.take_gone() {
        let _ = tx
            .send(gone(watch.start.unwrap_or(0), state.store.current_rv()))
            .await;
        return;
    }
    let mut position = match watch.start {
        Some(rv) => rv,
        None => {
            let (items, rv) = state.store.list(&key, ns.as_deref());
            for item in items.iter().filter(|o| watch.options.matches(o)) {
                if tx.send(line("ADDED", &watch.object(item))).await.is_err() {
                    return;
                }
            }
            if watch.initial_events_end {
                let bookmark = json!({
                    "kind": r.kind, "apiVersion": watch.target.resource.api_version(&watch.target.version),
                    "metadata": {"resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}},
                });
                if tx.send(line("BOOKMARK", &bookmark)).await.is_err() {
                    return;
                }
            }
            rv
        }
    };
    let mut ticker = tokio::time::interval(state.bookmark_interval);
    ticker.tick().await;
    loop {
        match state.store.events_since(&key, ns.as_deref(), position) {
            Err(StoreError::Gone { asked, oldest }) => {
                let _ = tx.send(gone(asked, oldest)).await;
                return;
            }
            Err(_) => return,
            Ok((events, rv)) => {
                for e in events {
                    let now = watch.options.matches(&e.object);
                    let before = e
                        .previous
                        .as_deref()
                        .is_some_and(|p| watch.options.matches(p));
                    let kind = match (e.kind, before, now) {
                        (EventType::Deleted, true, _) => EventType::Deleted,
                        (EventType::Deleted, false, _) => continue,
                        (_, false, true) => EventType::Added,
                        (_, true, true) => EventType::Modified,
                        (_, true, false) => EventType::Deleted,
                        (_, false, false) => continue,
                    };
                    if tx
                        .send(line(kind.as_str(), &watch.object(&e.object)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                position = rv;
            }
        }
        let sleep_until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = ticker.tick() => {
                if watch.bookmarks {
                    let bookmark = json!({
                        "kind": r.kind,
                        "apiVersion": watch.target.resource.api_version(&watch.target.version),
                        "metadata": {"resourceVersion": position.to_string()},
                    });
                    if tx.send(line("BOOKMARK", &bookmark)).await.is_err() {
                        return;
                    }
                }
            }
            () = tx.closed() => return,
            () = sleep_until => {
                if dropped_by_fault {
                    state.faults.dropped();
                }
                return;
            }
        }
    }
}
