//! Kubernetes `Status` errors: every failure the server answers is one of these, shaped as
//! `{"kind":"Status","apiVersion":"v1","status":"Failure",...}` so clients print it
//! (`Error from server (Reason): message`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One entry of `details.causes`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cause {
    /// Machine-readable reason, e.g. `FieldValueRequired`.
    pub(crate) reason: String,
    /// Human-readable message.
    pub(crate) message: String,
    /// The field path, e.g. `spec.replicas`.
    pub(crate) field: String,
}

/// A failed request, answered as a Kubernetes `Status`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub(crate) struct ApiError {
    /// HTTP status code.
    pub(crate) code: u16,
    /// `reason` of the Status (`NotFound`, `Conflict`, …).
    pub(crate) reason: &'static str,
    /// The message a client prints.
    pub(crate) message: String,
    /// `details.name`, `details.group`, `details.kind`.
    pub(crate) details: Option<Box<(String, String, String)>>,
    /// `details.causes`.
    pub(crate) causes: Vec<Cause>,
    /// `Retry-After` seconds for 429s and 5xx faults.
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a code, a reason and a message.
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            causes: Vec::new(),
            retry_after: None,
        }
    }

    /// 400 BadRequest.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for `resource "name"` (resource is `plural` or `plural.group`).
    pub(crate) fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
    }

    /// 404 for a path that names no resource.
    pub(crate) fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource (path {path})"),
        )
    }

    /// 409 AlreadyExists.
    pub(crate) fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
    }

    /// 409 Conflict on a stale resourceVersion.
    pub(crate) fn stale(resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        )
    }

    /// 405 MethodNotAllowed.
    pub(crate) fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({method} {path})"
            ),
        )
    }

    /// 415 UnsupportedMediaType.
    pub(crate) fn unsupported_media_type(content_type: &str, supported: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                if supported.is_empty() {
                    format!("none (got {content_type})")
                } else {
                    supported.join(", ")
                }
            ),
        )
    }

    /// 410 Expired for a resourceVersion older than the kept history.
    pub(crate) fn gone(rv: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {rv} ({oldest})"),
        )
    }

    /// 422 Invalid for `Kind.group "name"` with the given causes.
    pub(crate) fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let list: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let message = if list.len() == 1 {
            format!("{qualified} \"{name}\" is invalid: {}", list[0])
        } else {
            format!("{qualified} \"{name}\" is invalid: [{}]", list.join(", "))
        };
        Self {
            details: Some(Box::new((
                name.to_string(),
                group.to_string(),
                kind.to_string(),
            ))),
            causes,
            ..Self::new(422, "Invalid", message)
        }
    }

    /// Attach `details.{name,group,kind}`.
    pub(crate) fn with_details(mut self, name: &str, group: &str, kind: &str) -> Self {
        self.details = Some(Box::new((
            name.to_string(),
            group.to_string(),
            kind.to_string(),
        )));
        self
    }

    /// The Status object as JSON.
    pub(crate) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = serde_json::Map::new();
        if let Some(details_of) = &self.details {
            let (name, group, kind) = &**details_of;
            details.insert("name".into(), json!(name));
            if !group.is_empty() {
                details.insert("group".into(), json!(group));
            }
            details.insert("kind".into(), json!(kind));
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(secs) = self.retry_after {
            details.insert("retryAfterSeconds".into(), json!(secs));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut response = (code, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Result of a request handler.
pub(crate) type ApiResult<T> = Result<T, ApiError>;
