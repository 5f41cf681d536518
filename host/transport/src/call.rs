//! One request and what makes it safe to repeat.

use std::time::Duration;

use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::TransportConfig;
use crate::failure::HttpFailure;

/// What a call does, which sets its timeout and whether it is repeatable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A read or a small write of the lifecycle API.
    Lifecycle,
    /// Creating a sandbox: never repeated by the transport (a create that
    /// may have arrived could leave a second sandbox).
    Create,
    /// Running a command: never repeated unless the cluster's commands are
    /// idempotent.
    Command {
        /// The command's own timeout, if any.
        timeout: Option<Duration>,
    },
    /// Moving a file.
    File,
}

/// Whether a failure response proves the request never reached its target
/// (a proxy that could not connect to the sandbox), so that even a
/// non-idempotent call may be made again.
pub type NotDelivered = fn(&HttpFailure) -> bool;

/// A request to make through a [`crate::Transport`].
#[derive(Debug, Clone)]
pub struct Call {
    pub(crate) method: Method,
    pub(crate) url: String,
    pub(crate) kind: CallKind,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<Body>,
    pub(crate) what: String,
    idempotent: Option<bool>,
    pub(crate) not_delivered: Option<NotDelivered>,
    pub(crate) retried_by_caller: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Body {
    Json(serde_json::Value),
    /// Shared between attempts without copying.
    Bytes {
        content_type: String,
        bytes: std::sync::Arc<[u8]>,
    },
}

impl Call {
    /// A `method` request to `url` of `kind`; `what` names the object and
    /// the operation for error messages ("create sandbox for sf-calc-…").
    pub fn new(
        method: Method,
        url: impl Into<String>,
        kind: CallKind,
        what: impl Into<String>,
    ) -> Self {
        Call {
            method,
            url: url.into(),
            kind,
            headers: HeaderMap::new(),
            body: None,
            what: what.into(),
            idempotent: None,
            not_delivered: None,
            retried_by_caller: false,
        }
    }

    /// Adds a header; a name or value that is not valid HTTP is refused.
    ///
    /// # Errors
    ///
    /// When `name` or `value` cannot be sent.
    pub fn header(mut self, name: &str, value: &str) -> Result<Self, String> {
        let name = HeaderName::try_from(name).map_err(|e| format!("header name {name:?}: {e}"))?;
        let value = HeaderValue::try_from(value).map_err(|e| format!("header {name}: {e}"))?;
        self.headers.insert(name, value);
        Ok(self)
    }

    /// A JSON body.
    pub fn json(mut self, body: serde_json::Value) -> Self {
        self.body = Some(Body::Json(body));
        self
    }

    /// A body of raw bytes.
    pub fn bytes(mut self, content_type: &str, bytes: Vec<u8>) -> Self {
        self.body = Some(Body::Bytes {
            content_type: content_type.to_string(),
            bytes: bytes.into(),
        });
        self
    }

    /// Says whether repeating the call is harmless, overriding what its
    /// method says (a POST that sets an absolute expiry is; nothing makes a
    /// create or a command so).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = Some(idempotent);
        self
    }

    /// Leaves the retrying of answered failures (throttled, unavailable,
    /// lost) to the caller, which retries the whole operation within its
    /// own budget: the transport repeats the call only when it never left,
    /// so one operation is not sent attempts × attempts times.
    pub fn retried_by_caller(mut self) -> Self {
        self.retried_by_caller = true;
        self
    }

    /// Failure responses that prove the request was not delivered.
    pub fn not_delivered_when(mut self, check: NotDelivered) -> Self {
        self.not_delivered = Some(check);
        self
    }

    /// Whether making the call twice has the effect of making it once.
    pub(crate) fn is_idempotent(&self, config: &TransportConfig) -> bool {
        match self.kind {
            CallKind::Create => false,
            CallKind::Command { .. } => config.idempotent_commands,
            CallKind::Lifecycle | CallKind::File => self.idempotent.unwrap_or(matches!(
                self.method,
                Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS
            )),
        }
    }

    /// How long the whole request may take.
    pub(crate) fn timeout(&self, config: &TransportConfig) -> Option<Duration> {
        match self.kind {
            CallKind::Lifecycle => Some(config.lifecycle_timeout),
            CallKind::Create => Some(config.create_timeout),
            CallKind::File => Some(config.file_timeout),
            CallKind::Command { timeout } => timeout.map(|t| t + config.command_slack),
        }
    }

    /// What the call does, its method and the URL's path, for messages (no
    /// query: it may hold tokens).
    pub fn describe(&self) -> String {
        let path = reqwest::Url::parse(&self.url)
            .map(|url| url.path().to_string())
            .unwrap_or_else(|_| self.url.clone());
        format!("{}: {} {path}", self.what, self.method)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: Method, kind: CallKind) -> Call {
        Call::new(method, "http://127.0.0.1:1/v1/x?token=secret", kind, "test")
    }

    #[test]
    fn only_calls_without_side_effects_are_repeatable_by_default() {
        let config = TransportConfig::default();
        assert!(call(Method::GET, CallKind::Lifecycle).is_idempotent(&config));
        assert!(call(Method::DELETE, CallKind::Lifecycle).is_idempotent(&config));
        assert!(!call(Method::POST, CallKind::Lifecycle).is_idempotent(&config));
        assert!(
            call(Method::POST, CallKind::Lifecycle)
                .idempotent(true)
                .is_idempotent(&config)
        );
        // Nothing makes a create repeatable, and commands only by the
        // cluster's word.
        assert!(
            !call(Method::POST, CallKind::Create)
                .idempotent(true)
                .is_idempotent(&config)
        );
        let command = call(Method::POST, CallKind::Command { timeout: None });
        assert!(!command.clone().idempotent(true).is_idempotent(&config));
        let trusting = TransportConfig {
            idempotent_commands: true,
            ..config
        };
        assert!(command.is_idempotent(&trusting));
    }

    #[test]
    fn messages_name_the_path_but_never_the_query() {
        let described = call(Method::GET, CallKind::Lifecycle).describe();
        assert_eq!(described, "test: GET /v1/x");
    }
}
