//! The crate's one error type. Every variant prints as one line that names
//! what was being pulled or imported (the reference, or the archive's
//! path), the registry and the HTTP status where there is one, and what
//! failed.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::digest::Digest;

/// What went wrong with an image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The text is not an image reference.
    #[error("{input:?} is not an image reference: {reason}")]
    InvalidReference {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The registry has no such repository, tag, manifest or blob.
    #[error("{reference}: {what} not found on {registry} (HTTP {status}){detail}")]
    NotFound {
        /// The image.
        reference: String,
        /// The registry's host.
        registry: String,
        /// `manifest`, `blob sha256:…`.
        what: String,
        /// 404 as a rule.
        status: u16,
        /// The registry's own words, as `: …`, or empty.
        detail: String,
    },
    /// No connection to the registry (refused, reset, timed out, DNS).
    #[error("{reference}: registry {registry} is unreachable: {detail}")]
    Unreachable {
        /// The image.
        reference: String,
        /// The registry's (or its token service's) host.
        registry: String,
        /// The cause.
        detail: String,
    },
    /// The registry refused the credentials, or asked for some and none
    /// were configured.
    #[error("{reference}: {registry} refused access (HTTP {status}): {detail}")]
    Unauthorized {
        /// The image.
        reference: String,
        /// The registry's host.
        registry: String,
        /// 401 or 403.
        status: u16,
        /// Which credentials were tried and what the registry said.
        detail: String,
    },
    /// The Docker config names a credential helper for this registry.
    #[error(
        "{reference}: the credentials for {registry} are kept by the credential helper \
         {helper:?} ({file}), and credential helpers are not supported; put \
         `auths.\"{registry}\".auth` (base64 of user:password) in a file named by \
         REGISTRY_AUTH_FILE"
    )]
    CredentialHelper {
        /// The image.
        reference: String,
        /// The registry's host.
        registry: String,
        /// The helper's name (`desktop`, `ecr-login`, …).
        helper: String,
        /// The config file naming it.
        file: String,
    },
    /// Any other failed answer.
    #[error("{reference}: {registry} answered HTTP {status} to {what}{detail}")]
    Http {
        /// The image.
        reference: String,
        /// The registry's host.
        registry: String,
        /// What was asked for.
        what: String,
        /// The status.
        status: u16,
        /// The registry's own words, as `: …`, or empty.
        detail: String,
        /// How long the registry asked to wait before asking again.
        retry_after: Option<Duration>,
    },
    /// The registry answered something that is not what the protocol
    /// promises (a malformed manifest, a layer count that disagrees with
    /// the config, a refused plain-HTTP registry).
    #[error("{reference}: {registry}: {detail}")]
    Protocol {
        /// The image.
        reference: String,
        /// The registry's host (or the archive's path).
        registry: String,
        /// What is wrong.
        detail: String,
    },
    /// Content does not have the digest it was promised to have.
    #[error("{reference}: {what} has digest {actual}, not {expected} (digest mismatch)")]
    DigestMismatch {
        /// The image.
        reference: String,
        /// `manifest`, `config`, `layer sha256:… (compressed)`, `layer … (uncompressed)`.
        what: String,
        /// The digest it should have.
        expected: Digest,
        /// The digest it has.
        actual: Digest,
    },
    /// A layer cannot be read to its end: bad compression, a bad tar, or
    /// fewer or more bytes than promised.
    #[error("{reference}: layer {layer} is corrupt or truncated: {detail}")]
    CorruptLayer {
        /// The image.
        reference: String,
        /// The layer (as the manifest names it).
        layer: Digest,
        /// What was wrong.
        detail: String,
    },
    /// A layer entry tries to reach outside the layer, or the layer
    /// exceeds a limit; nothing of it was kept.
    #[error("{reference}: layer {layer} is refused: entry {entry:?} {reason}")]
    HostileLayer {
        /// The image.
        reference: String,
        /// The layer.
        layer: Digest,
        /// The entry's path as the tar has it.
        entry: String,
        /// Why it is refused.
        reason: String,
    },
    /// A manifest list or index has no manifest for the wanted platform.
    #[error("{reference}: no image for {wanted} (the index has {})", available.join(", "))]
    NoPlatform {
        /// The image.
        reference: String,
        /// The platform asked for.
        wanted: String,
        /// The platforms the index lists.
        available: Vec<String>,
    },
    /// The disk (or quota) is full.
    #[error("{reference}: disk full while writing {}", path.display())]
    DiskFull {
        /// The image.
        reference: String,
        /// Where.
        path: PathBuf,
    },
    /// Any other file system failure.
    #[error("{reference}: {what}: {source}")]
    Io {
        /// The image, or the store when no image is involved.
        reference: String,
        /// What was being done, naming the path.
        what: String,
        /// The cause.
        source: io::Error,
    },
    /// Something sandfleet does not do (schema 1 manifests, identity
    /// tokens, layer media types it cannot unpack, ownership it cannot set).
    #[error("{reference}: {detail}")]
    Unsupported {
        /// The image.
        reference: String,
        /// What is not supported.
        detail: String,
    },
    /// The store has no complete image under this reference.
    #[error("{reference}: not in the image store (pull or import it first)")]
    NotPulled {
        /// The reference.
        reference: String,
    },
    /// The image is pinned by a sandbox and cannot be removed.
    #[error("{reference}: in use by a sandbox (pinned); release it first")]
    InUse {
        /// The reference.
        reference: String,
    },
    /// A lock of the store was not free within its deadline.
    #[error("{reference}: {what} was still locked after {}s", waited.as_secs())]
    LockTimeout {
        /// The image, or the store.
        reference: String,
        /// Which lock (the layer, the store's collector).
        what: String,
        /// How long it waited.
        waited: Duration,
    },
    /// An archive to import is not a `docker save` tarball or an OCI
    /// layout, or is damaged.
    #[error("{}: {detail}", path.display())]
    Import {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

impl Error {
    /// Whether the same request may succeed if made again: connection
    /// failures and the statuses that say "later" (408, 429, 5xx but 501).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Http { status, .. } => {
                matches!(status, 408 | 429) || (*status >= 500 && *status != 501)
            }
            _ => false,
        }
    }

    /// The wait a registry asked for, if it did.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A file system failure, as [`Error::DiskFull`] when the disk or a
    /// quota is full.
    pub(crate) fn io(
        reference: &str,
        what: impl Into<String>,
        path: &std::path::Path,
        source: io::Error,
    ) -> Self {
        let full = matches!(
            source.raw_os_error(),
            Some(code) if code == rustix::io::Errno::NOSPC.raw_os_error()
                || code == rustix::io::Errno::DQUOT.raw_os_error()
        );
        if full {
            Error::DiskFull {
                reference: reference.to_string(),
                path: path.to_path_buf(),
            }
        } else {
            Error::Io {
                reference: reference.to_string(),
                what: format!("{} {}", what.into(), path.display()),
                source,
            }
        }
    }
}

/// A registry's or server's words, made safe for one line: the first line,
/// at most 200 characters.
pub(crate) fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut out: String = line.chars().filter(|c| !c.is_control()).take(200).collect();
    if line.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_name_the_subject() {
        let error = Error::NoPlatform {
            reference: "127.0.0.1:5000/x:1".to_string(),
            wanted: "linux/amd64".to_string(),
            available: vec!["linux/arm64/v8".to_string(), "linux/s390x".to_string()],
        };
        assert_eq!(
            error.to_string(),
            "127.0.0.1:5000/x:1: no image for linux/amd64 (the index has linux/arm64/v8, linux/s390x)"
        );
        assert_eq!(one_line("\n  first\nsecond"), "first");
        assert_eq!(one_line(&"x".repeat(300)).chars().count(), 201);
    }

    #[test]
    fn enospc_is_disk_full() {
        let path = std::path::Path::new("/s/tmp/x");
        let full = io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        assert!(matches!(
            Error::io("r", "writing", path, full),
            Error::DiskFull { .. }
        ));
        let other = io::Error::from_raw_os_error(rustix::io::Errno::ACCESS.raw_os_error());
        let error = Error::io("r", "writing", path, other);
        assert!(
            error.to_string().starts_with("r: writing /s/tmp/x: "),
            "{error}"
        );
    }
}
