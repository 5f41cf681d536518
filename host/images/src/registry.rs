//! A small client of the distribution API (`GET /v2/<name>/manifests/…`
//! and `/blobs/…`), on the workspace's reqwest.
//!
//! Why not `oci-client`: it would add a second `sha2`/`digest` major
//! version, chrono, and oci-spec's builder/getter proc-macros to the build,
//! and still leave Docker config credentials, `Retry-After`, and
//! uncompressed-digest checks to write. What is here is the part of the
//! protocol a pull uses:
//!
//! - HTTPS, except plain HTTP for loopback registries and the ones the
//!   caller names as insecure (the token service's realm too).
//! - A 401 answers with a challenge: `Basic` gets the configured
//!   credentials; `Bearer` sends them (or nothing, anonymously, as Docker
//!   Hub allows) to the realm for a token of the repository's pull scope,
//!   cached per registry and repository until it expires.
//! - Every GET is idempotent, so transient failures (connection errors,
//!   408, 429, 5xx) are retried ([`RetryPolicy`]).
//! - Redirects (blobs served from a CDN) are followed; reqwest drops the
//!   `Authorization` header when the host changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, RETRY_AFTER, WWW_AUTHENTICATE,
};

use crate::auth::{Basic, Challenge, Credentials, Found};
use crate::digest::Digest;
use crate::error::{Error, one_line};
use crate::reference::Reference;
use crate::retry::RetryPolicy;
use crate::spec::MANIFEST_ACCEPT;

/// The largest manifest, index or config read into memory.
pub(crate) const MAX_DOCUMENT: u64 = 8 << 20;
/// How long a token is trusted when its service does not say.
const DEFAULT_TOKEN_LIFE: Duration = Duration::from_secs(60);

/// The HTTP client and the tokens it holds, shared by every pull of a
/// store.
pub(crate) struct Registry {
    http: reqwest::Client,
    tokens: Mutex<HashMap<(String, String), (String, Instant)>>,
}

impl Registry {
    pub(crate) fn new() -> Result<Self, String> {
        // reqwest is built without a default crypto provider (no aws-lc C
        // build); ring serves every client, as in the drivers.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            // A stalled body fails after this long; a slow one never does.
            .read_timeout(Duration::from_secs(60))
            .pool_idle_timeout(Duration::from_secs(20))
            .user_agent(concat!("sandfleet/", env!("CARGO_PKG_VERSION")))
            .tls_backend_rustls()
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(Registry {
            http,
            tokens: Mutex::new(HashMap::new()),
        })
    }
}

/// One image's conversation with its registry.
pub(crate) struct Session<'a> {
    registry: &'a Registry,
    /// The reference fetched (after mirror rewrites).
    target: Reference,
    /// What errors name.
    shown: String,
    base: String,
    insecure: &'a [String],
    credentials: Arc<Credentials>,
    retry: RetryPolicy,
}

impl<'a> Session<'a> {
    pub(crate) fn new(
        registry: &'a Registry,
        target: Reference,
        shown: String,
        insecure: &'a [String],
        credentials: Arc<Credentials>,
        retry: RetryPolicy,
    ) -> Self {
        let host = target.api_host();
        let scheme = if plain_http_allowed(host, insecure) {
            "http"
        } else {
            "https"
        };
        let base = format!("{scheme}://{host}/v2/{}", target.repository());
        Session {
            registry,
            target,
            shown,
            base,
            insecure,
            credentials,
            retry,
        }
    }

    /// What errors name: the reference as asked for.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// The reference fetched.
    pub(crate) fn target(&self) -> &Reference {
        &self.target
    }

    /// A manifest or index by tag or digest: its bytes and the media type
    /// the registry declared.
    pub(crate) async fn manifest(&self, key: &str) -> Result<(Bytes, Option<String>), Error> {
        let url = format!("{}/manifests/{key}", self.base);
        self.retry
            .run(
                || async {
                    let response = self.get(&url, "manifest", Some(MANIFEST_ACCEPT)).await?;
                    let media_type = header_text(response.headers(), CONTENT_TYPE);
                    let bytes = self.read_limited(response, "manifest").await?;
                    Ok((bytes, media_type))
                },
                |error, pause| tracing::debug!(%error, ?pause, "retrying a manifest GET"),
            )
            .await
    }

    /// A small blob (an image config) read whole.
    pub(crate) async fn small_blob(&self, digest: &Digest) -> Result<Bytes, Error> {
        let url = format!("{}/blobs/{digest}", self.base);
        let what = format!("blob {digest}");
        self.retry
            .run(
                || async {
                    let response = self.get(&url, &what, None).await?;
                    self.read_limited(response, &what).await
                },
                |error, pause| tracing::debug!(%error, ?pause, "retrying a blob GET"),
            )
            .await
    }

    /// A blob's response, its body still to be read (a layer). The caller
    /// retries a failure of the whole fetch.
    pub(crate) async fn blob(&self, digest: &Digest) -> Result<reqwest::Response, Error> {
        let url = format!("{}/blobs/{digest}", self.base);
        self.get(&url, &format!("blob {digest}"), None).await
    }

    /// An error for a body that broke off.
    pub(crate) fn lost(&self, error: &reqwest::Error) -> Error {
        Error::Unreachable {
            reference: self.shown.clone(),
            registry: self.target.api_host().to_string(),
            detail: format!("the connection broke while reading: {}", innermost(error)),
        }
    }

    /// One GET, answering an auth challenge once.
    async fn get(
        &self,
        url: &str,
        what: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, Error> {
        let key = (
            self.target.api_host().to_string(),
            self.target.repository().to_string(),
        );
        let cached = {
            let tokens = self
                .registry
                .tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            tokens
                .get(&key)
                .filter(|(_, until)| *until > Instant::now())
                .map(|(t, _)| t.clone())
        };
        let had_token = cached.is_some();
        let response = self.send(url, accept, cached.as_deref()).await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return self.check(response, what).await;
        }
        let challenge =
            header_text(response.headers(), WWW_AUTHENTICATE).and_then(|h| Challenge::parse(&h));
        let Some(challenge) = challenge else {
            return self.check(response, what).await;
        };
        // A cached token that is refused is stale: fetch a fresh one once.
        let (authorization, life) = self.authorize(&challenge).await?;
        {
            let mut tokens = self
                .registry
                .tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            tokens.insert(key, (authorization.clone(), Instant::now() + life));
        }
        let response = self.send(url, accept, Some(&authorization)).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            let detail = self.refusal(&challenge, had_token);
            return Err(self.unauthorized(response, detail).await);
        }
        self.check(response, what).await
    }

    async fn send(
        &self,
        url: &str,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<reqwest::Response, Error> {
        let mut request = self.registry.http.get(url);
        if let Some(accept) = accept {
            request = request.header(ACCEPT, accept);
        }
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        request
            .send()
            .await
            .map_err(|e| self.unreachable(self.target.api_host(), &e))
    }

    /// The `Authorization` value the challenge asks for, and how long it
    /// may be reused.
    async fn authorize(&self, challenge: &Challenge) -> Result<(String, Duration), Error> {
        let basic = self.basic()?;
        match challenge {
            Challenge::Basic => {
                let Some(basic) = basic else {
                    return Err(Error::Unauthorized {
                        reference: self.shown.clone(),
                        registry: self.target.api_host().to_string(),
                        status: 401,
                        detail: self.no_credentials(),
                    });
                };
                Ok((basic_header(&basic), Duration::from_secs(3600)))
            }
            Challenge::Bearer {
                realm,
                service,
                scope,
            } => {
                self.token(realm, service.as_deref(), scope.as_deref(), basic.as_ref())
                    .await
            }
        }
    }

    /// The configured user and password for this registry, if any.
    fn basic(&self) -> Result<Option<Basic>, Error> {
        match self
            .credentials
            .find(self.target.registry(), self.target.repository())
        {
            Found::Basic(basic) => Ok(Some(basic)),
            Found::Nothing => Ok(None),
            Found::Helper { helper, file } => Err(Error::CredentialHelper {
                reference: self.shown.clone(),
                registry: self.target.registry().to_string(),
                helper,
                file: file.display().to_string(),
            }),
            Found::IdentityToken { file } => Err(Error::Unsupported {
                reference: self.shown.clone(),
                detail: format!(
                    "the credentials for {} in {} are an identity token, which sandfleet \
                     does not support; use a user name and password (or access token)",
                    self.target.registry(),
                    file.display()
                ),
            }),
        }
    }

    /// A token from the registry's token service.
    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: Option<&str>,
        basic: Option<&Basic>,
    ) -> Result<(String, Duration), Error> {
        let realm_url = reqwest::Url::parse(realm)
            .map_err(|e| self.protocol(format!("bad token realm {realm:?}: {e}")))?;
        let realm_host = realm_url.host_str().unwrap_or("").to_string();
        let realm_authority = match realm_url.port() {
            Some(port) => format!("{realm_host}:{port}"),
            None => realm_host.clone(),
        };
        if realm_url.scheme() != "https" && !plain_http_allowed(&realm_authority, self.insecure) {
            return Err(self.protocol(format!(
                "refusing the token service at {realm} over plain HTTP (name {realm_authority} as insecure to allow it)"
            )));
        }
        let own_scope = format!("repository:{}:pull", self.target.repository());
        let mut url = realm_url.clone();
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("scope", scope.unwrap_or(&own_scope));
            if let Some(service) = service {
                query.append_pair("service", service);
            }
        }
        let fetch = || async {
            let mut request = self.registry.http.get(url.clone());
            if let Some(basic) = basic {
                request = request.basic_auth(&basic.user, Some(&basic.password));
            }
            let response = request
                .send()
                .await
                .map_err(|e| self.unreachable(&realm_authority, &e))?;
            match response.status() {
                s if s.is_success() => self.read_limited(response, "token").await,
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    let detail = match basic {
                        Some(b) => format!("the token service refused user {:?}", b.user),
                        None => format!(
                            "the token service refused an anonymous token; {}",
                            self.no_credentials()
                        ),
                    };
                    Err(self.unauthorized(response, detail).await)
                }
                _ => Err(self.failure(response, "token").await),
            }
        };
        let body = self
            .retry
            .run(
                fetch,
                |error, pause| tracing::debug!(%error, ?pause, "retrying a token GET"),
            )
            .await?;
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
            expires_in: Option<u64>,
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|e| self.protocol(format!("the token service answered no token: {e}")))?;
        let token = answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.protocol("the token service answered no token".to_string()))?;
        let life = answer
            .expires_in
            .map(|s| Duration::from_secs(s.saturating_sub(5).max(1)))
            .unwrap_or(DEFAULT_TOKEN_LIFE);
        Ok((format!("Bearer {token}"), life))
    }

    fn refusal(&self, challenge: &Challenge, had_token: bool) -> String {
        let basic = self.basic().ok().flatten();
        match (challenge, basic) {
            (_, Some(basic)) => format!(
                "user {:?} may not pull {}",
                basic.user,
                self.target.repository()
            ),
            (Challenge::Bearer { .. }, None) => format!(
                "an anonymous token may not pull {} (it is private or does not exist); {}",
                self.target.repository(),
                self.no_credentials()
            ),
            (Challenge::Basic, None) if had_token => "the credentials were refused".to_string(),
            (Challenge::Basic, None) => self.no_credentials(),
        }
    }

    fn no_credentials(&self) -> String {
        format!(
            "no credentials for {} in REGISTRY_AUTH_FILE or the Docker config",
            self.target.registry()
        )
    }

    /// A success passes; a failure becomes the error for its status.
    async fn check(
        &self,
        response: reqwest::Response,
        what: &str,
    ) -> Result<reqwest::Response, Error> {
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(self.failure(response, what).await)
        }
    }

    async fn failure(&self, response: reqwest::Response, what: &str) -> Error {
        let status = response.status().as_u16();
        let retry_after =
            header_text(response.headers(), RETRY_AFTER).and_then(|v| parse_retry_after(&v));
        let detail = error_detail(response).await;
        let registry = self.target.api_host().to_string();
        let reference = self.shown.clone();
        match status {
            404 => Error::NotFound {
                reference,
                registry,
                what: what.to_string(),
                status,
                detail,
            },
            401 | 403 => Error::Unauthorized {
                reference,
                registry,
                status,
                detail: detail.trim_start_matches(": ").to_string(),
            },
            _ => Error::Http {
                reference,
                registry,
                what: what.to_string(),
                status,
                detail,
                retry_after,
            },
        }
    }

    async fn unauthorized(&self, response: reqwest::Response, detail: String) -> Error {
        let status = response.status().as_u16();
        let said = error_detail(response).await;
        Error::Unauthorized {
            reference: self.shown.clone(),
            registry: self.target.api_host().to_string(),
            status,
            detail: format!("{detail}{said}"),
        }
    }

    async fn read_limited(&self, response: reqwest::Response, what: &str) -> Result<Bytes, Error> {
        if response.content_length().is_some_and(|n| n > MAX_DOCUMENT) {
            return Err(self.protocol(format!("the {what} is larger than {MAX_DOCUMENT} bytes")));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.lost(&e))?;
            if body.len() as u64 + chunk.len() as u64 > MAX_DOCUMENT {
                return Err(
                    self.protocol(format!("the {what} is larger than {MAX_DOCUMENT} bytes"))
                );
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    }

    fn unreachable(&self, host: &str, error: &reqwest::Error) -> Error {
        let detail = if error.is_timeout() {
            format!("timed out: {}", innermost(error))
        } else {
            innermost(error)
        };
        Error::Unreachable {
            reference: self.shown.clone(),
            registry: host.to_string(),
            detail,
        }
    }

    pub(crate) fn protocol(&self, detail: String) -> Error {
        Error::Protocol {
            reference: self.shown.clone(),
            registry: self.target.api_host().to_string(),
            detail,
        }
    }
}

/// Plain HTTP is for registries on this machine, and for the ones the
/// caller trusts by name.
fn plain_http_allowed(host: &str, insecure: &[String]) -> bool {
    if insecure.iter().any(|h| h == host) {
        return true;
    }
    let bare = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        }),
    };
    bare == "localhost"
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn basic_header(basic: &Basic) -> String {
    let pair = format!("{}:{}", basic.user, basic.password);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn header_text(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `Retry-After` as seconds or an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    if let Ok(seconds) = value.trim().parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value.trim()).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// The registry's error document (`{"errors":[{"code","message"}]}`) or
/// the first line of its body, as `: …`; empty when it said nothing.
async fn error_detail(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() > 64 * 1024 {
            break;
        }
    }
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<ErrorItem>,
    }
    #[derive(serde::Deserialize)]
    struct ErrorItem {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let said = match serde_json::from_slice::<Errors>(&body) {
        Ok(errors) => errors
            .errors
            .first()
            .map(|e| format!("{} {}", e.code, e.message))
            .unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(&body).into_owned(),
    };
    let said = one_line(&said);
    if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    }
}

/// The deepest cause of a client error: "connection refused" rather than
/// "error sending request".
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    one_line(&cause.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_for_loopback_and_named_hosts() {
        let none: Vec<String> = Vec::new();
        assert!(plain_http_allowed("127.0.0.1:5000", &none));
        assert!(plain_http_allowed("localhost:5000", &none));
        assert!(plain_http_allowed("localhost", &none));
        assert!(plain_http_allowed("[::1]:5000", &none));
        assert!(!plain_http_allowed("10.0.0.1:5000", &none));
        assert!(!plain_http_allowed("registry.example", &none));
        assert!(plain_http_allowed(
            "registry.example:5000",
            &["registry.example:5000".to_string()]
        ));
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        let soon = std::time::SystemTime::now() + Duration::from_secs(30);
        let parsed = parse_retry_after(&httpdate::fmt_http_date(soon)).unwrap();
        assert!(parsed <= Duration::from_secs(30) && parsed >= Duration::from_secs(28));
        assert_eq!(parse_retry_after("soon"), None);
    }
}
