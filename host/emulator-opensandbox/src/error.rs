//! Error replies in the real server's shapes: `{code, message}` with the
//! HTTP status, or FastAPI's 422 `{"detail": [...]}` for what pydantic
//! rejects.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The runtime the emulator answers as: error codes carry its prefix
/// (`KUBERNETES::SANDBOX_NOT_FOUND`), as the Kubernetes runtime's do, since
/// it serves pools (`extensions.poolRef`).
pub(crate) const RUNTIME: &str = "KUBERNETES";

/// An error reply.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: Value,
    retry_after: Option<u64>,
}

impl ApiError {
    /// `{code, message}` with `status`.
    pub(crate) fn new(
        status: StatusCode,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            body: json!({"code": code.into(), "message": message.into()}),
            retry_after: None,
        }
    }

    /// A code with the runtime's prefix.
    pub(crate) fn runtime(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError::new(status, format!("{RUNTIME}::{code}"), message)
    }

    pub(crate) fn sandbox_not_found(id: &str) -> Self {
        ApiError::runtime(
            StatusCode::NOT_FOUND,
            "SANDBOX_NOT_FOUND",
            format!("Sandbox {id} not found"),
        )
    }

    pub(crate) fn snapshot_not_found(id: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "SNAPSHOT::NOT_FOUND",
            format!("Snapshot {id} not found"),
        )
    }

    /// A 400 `{code, message}` with an unprefixed code (`SANDBOX::…`).
    pub(crate) fn bad_request(code: &str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// FastAPI's 422 for one pydantic error.
    pub(crate) fn validation(detail: Value) -> Self {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            body: json!({"detail": [detail]}),
            retry_after: None,
        }
    }

    /// Adds `Retry-After` (seconds).
    pub(crate) fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    #[cfg(test)]
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    #[cfg(test)]
    pub(crate) fn body(&self) -> &Value {
        &self.body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A pydantic error entry: `{type, loc, msg, input[, ctx]}`.
pub(crate) fn pydantic(
    kind: &str,
    loc: &[&str],
    msg: &str,
    input: Value,
    ctx: Option<Value>,
) -> Value {
    let mut entry = json!({"type": kind, "loc": loc, "msg": msg, "input": input});
    if let Some(ctx) = ctx {
        entry["ctx"] = ctx;
    }
    entry
}

/// A model validator's `ValueError`, as FastAPI reports it.
pub(crate) fn value_error(message: &str, input: Value) -> ApiError {
    ApiError::validation(pydantic(
        "value_error",
        &["body"],
        &format!("Value error, {message}"),
        input,
        Some(json!({"error": {}})),
    ))
}
