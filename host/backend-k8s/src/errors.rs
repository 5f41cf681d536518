//! kube's errors as [`BackendError`]s: the API server's status codes and
//! the transport's failures, each said in terms the engine acts on.

use sandfleet_core::{BackendError, ErrorKind};

use crate::client::one_line;

/// `error` from a request about `what` on `cluster`, as a typed error.
pub(crate) fn api_error(cluster: &str, what: &str, error: kube::Error) -> BackendError {
    let kind = kind_of(&error);
    BackendError::new(kind, cluster, format!("{what}: {}", said(&error))).with_source(error)
}

/// What the API server (or the connection) said, on one line.
pub(crate) fn said(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => one_line(other),
    }
}

/// What kind of failure `error` is.
pub(crate) fn kind_of(error: &kube::Error) -> ErrorKind {
    match error {
        kube::Error::Api(status) => kind_of_code(
            status.code,
            status
                .details
                .as_ref()
                .map(|d| std::time::Duration::from_secs(u64::from(d.retry_after_seconds)))
                .filter(|d| !d.is_zero()),
        ),
        // An exec or attach the server answered without switching to a
        // websocket: kube keeps only the status code.
        kube::Error::UpgradeConnection(kube::client::UpgradeConnectionError::ProtocolSwitch(
            code,
        )) => kind_of_code(code.as_u16(), None),
        kube::Error::HyperError(_) | kube::Error::Service(_) => ErrorKind::Transport {
            sent: !never_sent(error),
        },
        _ => ErrorKind::Failed,
    }
}

/// What kind of failure an answer with HTTP status `code` is.
fn kind_of_code(code: u16, retry_after: Option<std::time::Duration>) -> ErrorKind {
    match code {
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        429 => ErrorKind::Throttled { retry_after },
        400 | 401 | 403 | 405 | 415 | 422 => ErrorKind::Invalid,
        500 | 502 | 503 | 504 => ErrorKind::Unavailable,
        _ => ErrorKind::Failed,
    }
}

/// Whether the request cannot have reached the server: the connection was
/// never made.
fn never_sent(error: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(legacy) = cause.downcast_ref::<hyper_util::client::legacy::Error>()
            && legacy.is_connect()
        {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Whether `error` is the API server's 404.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(&format!("{reason} happened"), reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn status_codes_become_kinds_the_engine_acts_on() {
        assert_eq!(kind_of(&status(404, "NotFound")), ErrorKind::NotFound);
        assert_eq!(kind_of(&status(409, "Conflict")), ErrorKind::Conflict);
        assert_eq!(kind_of(&status(403, "Forbidden")), ErrorKind::Invalid);
        assert_eq!(
            kind_of(&status(503, "ServiceUnavailable")),
            ErrorKind::Unavailable
        );
        assert!(matches!(
            kind_of(&status(429, "TooManyRequests")),
            ErrorKind::Throttled { .. }
        ));
        let error = api_error("east", "create claim c1", status(422, "Invalid"));
        assert_eq!(
            error.to_string(),
            "east: create claim c1: 422 Invalid: Invalid happened"
        );
        assert!(is_not_found(&status(404, "NotFound")));
    }
}
