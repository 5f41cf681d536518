//! The snapshot routes, as server 1.1.1 answers them: `POST
//! /sandboxes/{id}/snapshots` → 202 with the snapshot `Creating` and
//! `Location: /v1/snapshots/{id}`; `GET /snapshots` (filters `sandboxId`,
//! `name`, `state` repeated for OR; pages); `GET /snapshots/{id}`; `DELETE
//! /snapshots/{id}` → 204. Fields the server leaves `None` are omitted.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{AppState, found, json_body, paginated, query_int, time};
use crate::error::{ApiError, pydantic};
use crate::fleet::Snapshot;

fn snapshot_json(snapshot: &Snapshot) -> Value {
    let status = snapshot.status();
    let mut body = json!({
        "id": snapshot.id,
        "sandboxId": snapshot.sandbox_id,
        "status": {
            "state": status.phase.name(),
            "reason": status.reason,
            "message": status.message,
            "lastTransitionAt": time(status.at),
        },
        "createdAt": time(snapshot.created_at),
    });
    if let Some(name) = &snapshot.name {
        body["name"] = json!(name);
    }
    body
}

/// The optional body of a snapshot create (`CreateSnapshotRequest | null`):
/// the snapshot's name, if it has one.
fn create_request(body: &[u8]) -> Result<Option<String>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let request = json_body(body)?;
    let name = match &request {
        Value::Null => return Ok(None),
        Value::Object(fields) => fields.get("name").unwrap_or(&Value::Null),
        other => {
            return Err(ApiError::validation(pydantic(
                "model_attributes_type",
                &["body"],
                "Input should be a valid dictionary or object to extract fields from",
                other.clone(),
                None,
            )));
        }
    };
    match name {
        Value::Null => Ok(None),
        Value::String(name) if name.is_empty() => Err(ApiError::validation(pydantic(
            "string_too_short",
            &["body", "name"],
            "String should have at least 1 character",
            json!(name),
            Some(json!({"min_length": 1})),
        ))),
        Value::String(name) => Ok(Some(name.clone())),
        other => Err(ApiError::validation(pydantic(
            "string_type",
            &["body", "name"],
            "Input should be a valid string",
            other.clone(),
            None,
        ))),
    }
}

pub(super) async fn create(
    State(app): AppState,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let name = create_request(&body)?;
    let sandbox = found(&app, &id)?;
    let snapshot = app.fleet.take_snapshot(&sandbox, name)?;
    let mut response = (StatusCode::ACCEPTED, axum::Json(snapshot_json(&snapshot))).into_response();
    let location = HeaderValue::from_str(&format!("/v1/snapshots/{}", snapshot.id))
        .expect("ids are header values");
    response.headers_mut().insert(header::LOCATION, location);
    Ok(response)
}

pub(super) async fn list(
    State(app): AppState,
    OriginalUri(uri): OriginalUri,
) -> Result<axum::Json<Value>, ApiError> {
    let query = uri.query().unwrap_or_default();
    let (mut sandbox, mut name, mut states) = (None, None, Vec::new());
    let (mut page, mut page_size) = (1i64, 20i64);
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "sandboxId" => sandbox = Some(value.into_owned()),
            "name" => name = Some(value.into_owned()),
            "state" => states.push(value.into_owned()),
            "page" => page = query_int("page", &value, 1, None)?,
            "pageSize" => page_size = query_int("pageSize", &value, 1, Some(200))?,
            _ => {}
        }
    }
    let mut matching: Vec<Arc<Snapshot>> = app
        .fleet
        .snapshots
        .all()
        .into_iter()
        .filter(|s| sandbox.as_ref().is_none_or(|id| *id == s.sandbox_id))
        .filter(|s| name.is_none() || s.name == name)
        .filter(|s| states.is_empty() || states.iter().any(|x| x == s.status().phase.name()))
        .collect();
    matching.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    Ok(axum::Json(paginated(
        matching.iter().map(|s| snapshot_json(s)).collect(),
        page,
        page_size,
    )))
}

pub(super) async fn read(
    State(app): AppState,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let snapshot = app
        .fleet
        .snapshots
        .get(&id)
        .ok_or_else(|| ApiError::snapshot_not_found(&id))?;
    Ok(axum::Json(snapshot_json(&snapshot)))
}

pub(super) async fn delete(
    State(app): AppState,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    app.fleet.delete_snapshot(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_body_is_optional_and_its_name_not_empty() {
        assert_eq!(create_request(b"").unwrap(), None);
        assert_eq!(create_request(b"null").unwrap(), None);
        assert_eq!(create_request(b"{}").unwrap(), None);
        assert_eq!(
            create_request(br#"{"name": "before-import"}"#).unwrap(),
            Some("before-import".to_string())
        );
        for bad in [&br#"{"name": ""}"#[..], br#"{"name": 3}"#, b"[1]", b"{"] {
            assert_eq!(
                create_request(bad).unwrap_err().status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
