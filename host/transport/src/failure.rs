//! A failure response, read the way the servers drivers talk to write them.

use std::fmt;
use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use sandfleet_core::ErrorKind;

/// Longest server message kept in an error.
const MAX_MESSAGE: usize = 300;

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A non-success answer: its status, the server's error code (`code`,
/// Kubernetes' `reason`) and message. Attached as the source of the
/// [`sandfleet_core::BackendError`], so a driver can match the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpFailure {
    /// The status.
    pub status: StatusCode,
    /// The server's code, when its body has one.
    pub code: Option<String>,
    /// The server's message, one line, cut to a few hundred characters.
    pub message: String,
    /// What `Retry-After` asked for, capped at a minute.
    pub retry_after: Option<Duration>,
}

impl HttpFailure {
    /// Reads a failure from its status, headers and body.
    pub fn read(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Self {
        let (code, message) = match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(json) => from_json(&json),
            Err(_) => (None, String::from_utf8_lossy(body).into_owned()),
        };
        HttpFailure {
            status,
            code,
            message: one_line(&message),
            retry_after: headers
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(retry_after),
        }
    }

    /// Whether the server's code ends with `suffix` (servers prefix codes
    /// with their runtime: `KUBERNETES::POD_IP_NOT_AVAILABLE`).
    pub fn code_is(&self, suffix: &str) -> bool {
        self.code
            .as_deref()
            .is_some_and(|code| code.ends_with(suffix))
    }

    /// The kind of failure its status says.
    pub fn kind(&self) -> ErrorKind {
        match self.status.as_u16() {
            404 | 410 => ErrorKind::NotFound,
            409 => ErrorKind::Conflict,
            429 => ErrorKind::Throttled {
                retry_after: self.retry_after,
            },
            501 => ErrorKind::Unsupported,
            502 | 503 => ErrorKind::Unavailable,
            504 | 408 => ErrorKind::Timeout,
            400..=499 => ErrorKind::Invalid,
            _ => ErrorKind::Failed,
        }
    }
}

impl fmt::Display for HttpFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.status)?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for HttpFailure {}

/// The code and message of the error bodies drivers meet: `{code,
/// message}` (OpenSandbox), FastAPI's `{"detail": [...]}` or `{"detail":
/// "..."}`, execd's `{"error": ...}` and Kubernetes' `Status`.
fn from_json(json: &serde_json::Value) -> (Option<String>, String) {
    let text = |key: &str| json.get(key).and_then(|v| v.as_str()).map(str::to_string);
    if json.get("kind").and_then(|k| k.as_str()) == Some("Status") {
        return (text("reason"), text("message").unwrap_or_default());
    }
    if let Some(message) = text("message") {
        return (text("code"), message);
    }
    match json.get("detail") {
        Some(serde_json::Value::Array(problems)) => {
            let said: Vec<String> = problems
                .iter()
                .map(|problem| {
                    let location: Vec<String> = problem
                        .get("loc")
                        .and_then(|l| l.as_array())
                        .map(|parts| {
                            parts
                                .iter()
                                .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                    let message = problem
                        .get("msg")
                        .and_then(|m| m.as_str())
                        .unwrap_or("invalid");
                    if location.is_empty() {
                        message.to_string()
                    } else {
                        format!("{}: {message}", location.join("."))
                    }
                })
                .collect();
            return (None, said.join("; "));
        }
        Some(serde_json::Value::String(detail)) => return (None, detail.clone()),
        _ => {}
    }
    if let Some(error) = json.get("error") {
        return (
            None,
            error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_string),
        );
    }
    (text("code"), json.to_string())
}

fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(MAX_MESSAGE) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(value: &str) -> Option<Duration> {
    let asked = match value.trim().parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(value.trim())
            .ok()?
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    };
    Some(asked.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: u16, headers: &[(&str, &str)], body: &str) -> HttpFailure {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        HttpFailure::read(StatusCode::from_u16(status).unwrap(), &map, body.as_bytes())
    }

    #[test]
    fn every_error_shape_gives_its_code_and_message() {
        let opensandbox = failure(
            404,
            &[],
            r#"{"code":"KUBERNETES::POD_IP_NOT_AVAILABLE","message":"no ip yet"}"#,
        );
        assert!(opensandbox.code_is("POD_IP_NOT_AVAILABLE"));
        assert_eq!(opensandbox.kind(), ErrorKind::NotFound);
        assert_eq!(
            opensandbox.to_string(),
            "404 Not Found KUBERNETES::POD_IP_NOT_AVAILABLE: no ip yet"
        );
        let fastapi = failure(
            422,
            &[],
            r#"{"detail":[{"loc":["body","timeout"],"msg":"Input should be greater than or equal to 60","type":"x"}]}"#,
        );
        assert_eq!(fastapi.kind(), ErrorKind::Invalid);
        assert_eq!(
            fastapi.message,
            "body.timeout: Input should be greater than or equal to 60"
        );
        let execd = failure(401, &[], r#"{"error":"invalid token"}"#);
        assert_eq!(
            (execd.kind(), execd.message.as_str()),
            (ErrorKind::Invalid, "invalid token")
        );
        let kubernetes = failure(
            409,
            &[],
            r#"{"kind":"Status","status":"Failure","message":"Operation cannot be fulfilled","reason":"Conflict","code":409}"#,
        );
        assert_eq!(kubernetes.code.as_deref(), Some("Conflict"));
        assert_eq!(kubernetes.kind(), ErrorKind::Conflict);
        let proxy = failure(502, &[], "Bad Gateway\n\n  upstream\tdown");
        assert_eq!(proxy.message, "Bad Gateway upstream down");
        assert_eq!(proxy.kind(), ErrorKind::Unavailable);
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_a_date_and_capped() {
        let seconds = failure(429, &[("retry-after", "30")], "{}");
        assert_eq!(
            seconds.kind(),
            ErrorKind::Throttled {
                retry_after: Some(Duration::from_secs(30))
            }
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3600));
        let date = failure(503, &[("retry-after", later.as_str())], "");
        assert_eq!(date.retry_after, Some(MAX_RETRY_AFTER));
        let garbage = failure(429, &[("retry-after", "soon")], "");
        assert_eq!(garbage.retry_after, None);
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "x".repeat(1000);
        let cut = failure(500, &[], &long);
        assert_eq!(cut.message.chars().count(), MAX_MESSAGE + 1);
        assert_eq!(cut.kind(), ErrorKind::Failed);
    }
}
