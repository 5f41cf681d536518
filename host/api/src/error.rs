//! One error type for every handler: a status, a stable `kind` a client
//! can branch on, and a one-line message naming what was wrong. Every
//! error leaves as JSON: `{"error": {"kind": "...", "message": "..."}}`.

use axum::extract::FromRequest;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandfleet_core::ErrorKind;
use sandfleet_engine::SessionError;
use serde::Serialize;

/// A failed request.
#[derive(Debug)]
pub struct AppError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail {
    /// Stable: `invalid_request`, `unauthorized`, `not_found`, `conflict`,
    /// `too_large`, `unavailable`, `sandbox_lost`, `plugin`, `backend`,
    /// `shutting_down`, `internal`.
    kind: String,
    /// One line naming the field, lease, image or cluster.
    message: String,
}

impl AppError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        AppError {
            status,
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The `kind` field.
    pub fn kind(&self) -> &'static str {
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

    pub(crate) fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"kind": self.kind, "message": self.message}})
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.kind, self.message)
    }
}

impl Clone for AppError {
    fn clone(&self) -> Self {
        AppError::new(self.status, self.kind, self.message.clone())
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(kind = self.kind, "{}", self.message);
        }
        (self.status, axum::Json(self.body())).into_response()
    }
}

impl From<SessionError> for AppError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::Invalid(message) => AppError::invalid(message),
            SessionError::Unavailable(message) => AppError::unavailable(message),
            SessionError::Lost(message) => AppError::new(StatusCode::GONE, "sandbox_lost", message),
            SessionError::Backend(error) => {
                let status = match error.kind() {
                    ErrorKind::NotFound => StatusCode::NOT_FOUND,
                    ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
                    ErrorKind::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
                    ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
                    _ => StatusCode::BAD_GATEWAY,
                };
                AppError::new(status, "backend", error.to_string())
            }
            SessionError::Plugin(error) => {
                let status = if error.is_plugin_fault() {
                    StatusCode::BAD_GATEWAY
                } else {
                    StatusCode::UNPROCESSABLE_ENTITY
                };
                AppError::new(status, "plugin", error.to_string())
            }
            SessionError::Run(error) => AppError::unavailable(error.to_string()),
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
            "invalid_request",
            format!(
                "request body is not valid JSON: {}",
                std::error::Error::source(&e).map_or_else(|| e.body_text(), |s| s.to_string())
            ),
        ),
        JsonRejection::MissingJsonContentType(_) => AppError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request",
            "send the body as JSON with `Content-Type: application/json`",
        ),
        JsonRejection::BytesRejection(e) => too_large_or(e.status(), e.body_text()),
        other => AppError::new(other.status(), "invalid_request", other.body_text()),
    }
}

/// A body over its limit becomes `too_large`; anything else keeps its status.
pub(crate) fn too_large_or(status: StatusCode, text: String) -> AppError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::new(
            status,
            "too_large",
            "request body is over the limit ([api] max_body_kib / max_upload_mib)",
        )
    } else {
        AppError::new(status, "invalid_request", text)
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
                        "invalid_request",
                        format!("request body is not valid JSON: {e}"),
                    )
                }
            })
    }
}
