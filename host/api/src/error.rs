//! One error type for every handler: a status, a stable `kind` a client
//! can branch on, and a one-line message naming what was wrong. Every
//! error leaves as JSON: `{"error": {"kind": "...", "message": "..."}}`,
//! with `Retry-After` when the backend asked to slow down.
//!
//! The engine's errors keep their causes typed (the backend's
//! [`sandfleet_core::ErrorKind`], the plugin call's error), and so do the
//! domain's (a [`Refusal`], an [`ExecFailure`], a [`SnapshotFailure`]);
//! this module maps them to statuses, once.

use std::time::Duration;

use axum::extract::FromRequest;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandfleet_core::BackendError;
use sandfleet_engine::{RunError, SessionError, StepError};
use sandfleet_plugin::CallError;
use serde::{Deserialize, Serialize};

use crate::domain::Refusal;
use crate::domain::executions::ExecFailure;
use crate::domain::snapshots::SnapshotFailure;

/// What kind of failure an error is: stable, for clients to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed or cannot be served as it is (400, 405,
    /// 415, 422).
    InvalidRequest,
    /// No or a wrong bearer token (401).
    Unauthorized,
    /// No such lease, session, pool, run or endpoint (404).
    NotFound,
    /// The request conflicts with the state (409).
    Conflict,
    /// The body is over the limit (413).
    TooLarge,
    /// The backend asked to slow down; `Retry-After` says how long (429).
    Throttled,
    /// A shared pool has no room for another session (429).
    PoolFull,
    /// No sandbox can be had now; it may later (503).
    Unavailable,
    /// A bounded wait ran out (504).
    Timeout,
    /// The lease's sandbox is gone; release the lease (410).
    SandboxLost,
    /// The session's sandbox was evicted (410).
    SessionLost,
    /// A plugin faulted with no fallback to answer (502), or declined
    /// (422).
    Plugin,
    /// The backend cannot do this (501) or failed in its own machinery
    /// (502).
    Backend,
    /// The daemon is stopping (503).
    ShuttingDown,
    /// A bug (500).
    Internal,
}

/// A failed request.
#[derive(Debug, Clone)]
pub struct AppError {
    status: StatusCode,
    kind: ErrorKind,
    message: String,
    retry_after: Option<Duration>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail {
    kind: ErrorKind,
    /// One line naming the field, lease, image or cluster.
    message: String,
}

impl AppError {
    pub(crate) fn new(status: StatusCode, kind: ErrorKind, message: impl Into<String>) -> Self {
        AppError {
            status,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A request that cannot be served as it is (400).
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest, message)
    }

    /// A request whose body or parameters break the schema (422).
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::InvalidRequest,
            message,
        )
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorKind::NotFound, message)
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Unavailable,
            message,
        )
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, ErrorKind::Conflict, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Internal,
            message,
        )
    }

    /// The same error with another message (the batch acquire names the
    /// request that failed).
    pub(crate) fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// The `kind` field.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// How long the client should wait before trying again, when the
    /// backend said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    pub(crate) fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"kind": self.kind, "message": self.message}})
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?}): {}", self.status, self.kind, self.message)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(kind = ?self.kind, "{}", self.message);
        }
        let mut response = (self.status, axum::Json(self.body())).into_response();
        // For the middleware's record of recent errors.
        response.extensions_mut().insert(Answered {
            kind: self.kind,
            message: self.message,
        });
        if let Some(after) = self.retry_after {
            // Whole seconds, rounded up: a client that waits less is
            // throttled again.
            let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// What an error response said, kept in its extensions for the middleware
/// (which records the latest errors without reading bodies back).
#[derive(Debug, Clone)]
pub(crate) struct Answered {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
}

impl ErrorKind {
    /// Its name as bodies carry it (`not_found`).
    pub(crate) fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// A backend's error, by its kind.
fn backend(message: String, error: &BackendError) -> AppError {
    use sandfleet_core::ErrorKind as Backend;
    let (status, kind) = match error.kind() {
        Backend::Throttled { retry_after } => {
            let mut throttled =
                AppError::new(StatusCode::TOO_MANY_REQUESTS, ErrorKind::Throttled, message);
            throttled.retry_after = retry_after;
            return throttled;
        }
        Backend::Invalid => (StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest),
        Backend::NotFound => (StatusCode::NOT_FOUND, ErrorKind::NotFound),
        Backend::Conflict => (StatusCode::CONFLICT, ErrorKind::Conflict),
        Backend::Unavailable | Backend::Transport { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorKind::Unavailable)
        }
        Backend::Timeout => (StatusCode::GATEWAY_TIMEOUT, ErrorKind::Timeout),
        Backend::SandboxLost => (StatusCode::GONE, ErrorKind::SandboxLost),
        Backend::Unsupported => (StatusCode::NOT_IMPLEMENTED, ErrorKind::Backend),
        Backend::Failed => (StatusCode::BAD_GATEWAY, ErrorKind::Backend),
    };
    AppError::new(status, kind, message)
}

/// A plugin call's error: a fault nothing answered is the daemon's
/// problem (502), a plugin declining is the request's (422).
fn plugin(message: String, error: &CallError) -> AppError {
    let status = if error.is_plugin_fault() {
        StatusCode::BAD_GATEWAY
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    AppError::new(status, ErrorKind::Plugin, message)
}

impl From<Refusal> for AppError {
    fn from(refusal: Refusal) -> Self {
        let message = refusal.to_string();
        match refusal {
            Refusal::LeaseNotLive { .. }
            | Refusal::Released { .. }
            | Refusal::NoSuchRun { .. }
            | Refusal::NoReport { .. }
            | Refusal::NoSuchPool { .. }
            | Refusal::SessionNotOpen { .. }
            | Refusal::SnapshotNotLive { .. } => AppError::not_found(message),
            Refusal::NoForks { .. }
            | Refusal::TooManyForks { .. }
            | Refusal::OtherTemplate { .. } => AppError::invalid(message),
            Refusal::NoRestoreInPlace { .. } => {
                AppError::new(StatusCode::NOT_IMPLEMENTED, ErrorKind::Backend, message)
            }
            Refusal::TooManyLeases { .. } | Refusal::NoHealthySandbox { .. } => {
                AppError::unavailable(message)
            }
            Refusal::PoolFull { .. } => {
                AppError::new(StatusCode::TOO_MANY_REQUESTS, ErrorKind::PoolFull, message)
            }
            Refusal::SessionLost { .. } => {
                AppError::new(StatusCode::GONE, ErrorKind::SessionLost, message)
            }
        }
    }
}

impl From<&StepError> for AppError {
    fn from(error: &StepError) -> Self {
        let message = error.to_string();
        match error {
            StepError::Backend { source, .. } => backend(message, source),
            StepError::Plugin { source, .. } => plugin(message, source),
            StepError::Lost(_) => AppError::new(StatusCode::GONE, ErrorKind::SandboxLost, message),
            StepError::Prepare(_) => AppError::unavailable(message),
        }
    }
}

impl From<&RunError> for AppError {
    fn from(error: &RunError) -> Self {
        let message = error.to_string();
        match error {
            RunError::Step(step) => AppError::from(step),
            RunError::Backend(source) => backend(message, source),
            RunError::Plugin(source)
            | RunError::Plan(sandfleet_engine::plan::PlanError::Policy(source)) => {
                plugin(message, source)
            }
            RunError::Plan(_) => AppError::invalid(message),
            RunError::Interrupted => AppError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::ShuttingDown,
                message,
            ),
            RunError::Preflight(_) | RunError::Breaker(_) => AppError::unavailable(message),
            RunError::Results(_) | RunError::Internal(_) => AppError::internal(message),
        }
    }
}

impl From<&SessionError> for AppError {
    fn from(error: &SessionError) -> Self {
        match error {
            SessionError::Invalid(message) => AppError::bad_request(message.clone()),
            SessionError::Lost(message) => {
                AppError::new(StatusCode::GONE, ErrorKind::SandboxLost, message.clone())
            }
            SessionError::Step(step) => AppError::from(step),
            SessionError::Run(run) => AppError::from(run),
        }
    }
}

/// The engine's errors as handlers meet them, for `?`: mapped as
/// borrowed, since an execution's failure is kept to answer every retry.
macro_rules! from_owned {
    ($($error:ty),*) => {$(
        impl From<$error> for AppError {
            fn from(error: $error) -> Self {
                AppError::from(&error)
            }
        }
    )*};
}

from_owned!(StepError, RunError, SessionError);

impl From<&ExecFailure> for AppError {
    fn from(failure: &ExecFailure) -> Self {
        match failure {
            ExecFailure::Refused(refusal) => AppError::from(refusal.clone()),
            ExecFailure::Session(error) => AppError::from(error),
            ExecFailure::Abandoned => AppError::internal(failure.to_string()),
        }
    }
}

impl From<SnapshotFailure> for AppError {
    fn from(failure: SnapshotFailure) -> Self {
        match failure {
            SnapshotFailure::Refused(refusal) => AppError::from(refusal),
            SnapshotFailure::Step(step) => AppError::from(step),
            SnapshotFailure::Broken(ref step) => {
                AppError::from(step).with_message(failure.to_string())
            }
        }
    }
}

/// `axum::Json`, whose rejections are [`AppError`]s naming the field and
/// position serde found wrong.
pub(crate) struct Json<T>(pub(crate) T);

impl<S, T> FromRequest<S> for Json<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, AppError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> AppError {
    match rejection {
        JsonRejection::JsonDataError(e) => AppError::invalid(format!(
            "request body: {}",
            std::error::Error::source(&e).map_or_else(|| e.body_text(), |s| s.to_string())
        )),
        JsonRejection::JsonSyntaxError(e) => AppError::new(
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            format!(
                "request body is not valid JSON: {}",
                std::error::Error::source(&e).map_or_else(|| e.body_text(), |s| s.to_string())
            ),
        ),
        JsonRejection::MissingJsonContentType(_) => AppError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::InvalidRequest,
            "send the body as JSON with `Content-Type: application/json`",
        ),
        JsonRejection::BytesRejection(e) => too_large_or(e.status(), e.body_text()),
        other => AppError::new(other.status(), ErrorKind::InvalidRequest, other.body_text()),
    }
}

/// A body over its limit becomes `too_large`; anything else keeps its status.
pub(crate) fn too_large_or(status: StatusCode, text: String) -> AppError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::new(
            status,
            ErrorKind::TooLarge,
            "request body is over the limit ([api] max_body_kib / max_upload_mib)",
        )
    } else {
        AppError::new(status, ErrorKind::InvalidRequest, text)
    }
}

/// A JSON body that may be left out: an empty body is `T::default()`.
pub(crate) struct OptionalJson<T>(pub(crate) T);

impl<S, T> FromRequest<S> for OptionalJson<T>
where
    T: serde::de::DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, AppError> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| too_large_or(e.status(), e.body_text()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        serde_json::from_slice(&bytes)
            .map(OptionalJson)
            .map_err(|e| {
                if e.is_data() {
                    AppError::invalid(format!("request body: {e}"))
                } else {
                    AppError::new(
                        StatusCode::BAD_REQUEST,
                        ErrorKind::InvalidRequest,
                        format!("request body is not valid JSON: {e}"),
                    )
                }
            })
    }
}
