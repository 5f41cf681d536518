//! Clients keyed by their whole configuration, and the calls they make.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use backon::{ExponentialBuilder, Retryable};
use sandfleet_core::BackendError;

use crate::call::{Body, Call};
use crate::config::TransportConfig;
use crate::failure::HttpFailure;
use crate::retry::{FIRST_PAUSE, Failed, MAX_PAUSE};
use crate::stats::{Counters, Stats};

/// Bytes of a failure body read for its message.
const MAX_FAILURE_BODY: usize = 64 * 1024;

/// Every transport of a process: one per distinct configuration. (Sandbox
/// creation is paced by the engine, which decides every create.)
#[derive(Default)]
pub struct Clients {
    by_config: Mutex<HashMap<TransportConfig, Arc<Transport>>>,
}

impl Clients {
    /// No clients yet.
    pub fn new() -> Self {
        Clients::default()
    }

    /// The transport for `config`: the one already made for an equal
    /// configuration, or a new one.
    ///
    /// # Errors
    ///
    /// When the configuration is invalid or the client cannot be built.
    pub fn transport(&self, config: &TransportConfig) -> Result<Arc<Transport>, String> {
        let mut by_config = self.by_config.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(made) = by_config.get(config) {
            return Ok(Arc::clone(made));
        }
        config.validate()?;
        let made = Arc::new(Transport::build(config.clone())?);
        by_config.insert(config.clone(), Arc::clone(&made));
        Ok(made)
    }

    /// Distinct clients made so far.
    pub fn len(&self) -> usize {
        self.by_config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Whether no client was made yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A pooled HTTP client under one configuration.
pub struct Transport {
    client: reqwest::Client,
    config: TransportConfig,
    counters: Counters,
}

impl Transport {
    fn build(config: TransportConfig) -> Result<Self, String> {
        // reqwest is built without a default crypto provider (no aws-lc C
        // build); ring serves every client. Another caller may have
        // installed one already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .pool_idle_timeout(config.idle_timeout)
            .pool_max_idle_per_host(config.max_idle_per_host)
            .connect_timeout(config.connect_timeout)
            .http1_only()
            .tcp_nodelay(true)
            .tls_backend_rustls()
            // reqwest strips only Authorization and cookies from a redirect
            // to another origin, so the call's own headers (OpenSandbox's
            // API key) would follow it: such a redirect is answered as it
            // came, never followed.
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let first = attempt.previous().first().map(reqwest::Url::origin);
                if attempt.previous().len() > 10 {
                    attempt.error("more than 10 redirects")
                } else if first == Some(attempt.url().origin()) {
                    attempt.follow()
                } else {
                    attempt.stop()
                }
            }))
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(Transport {
            client,
            config,
            counters: Counters::default(),
        })
    }

    /// The configuration it was made for.
    pub fn config(&self) -> &TransportConfig {
        &self.config
    }

    /// Its counters so far.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Makes `call` on behalf of `cluster`, repeating it only where that is
    /// safe, and returns the successful answer (its body unread).
    ///
    /// # Errors
    ///
    /// The last attempt's failure as a [`BackendError`] naming the cluster
    /// and the call; a failure answer is its source ([`HttpFailure`]).
    pub async fn send(
        &self,
        cluster: &str,
        call: &Call,
    ) -> Result<reqwest::Response, BackendError> {
        let idempotent = call.is_idempotent(&self.config);
        let attempts = AtomicUsize::new(0);
        let backoff = ExponentialBuilder::default()
            .with_min_delay(FIRST_PAUSE)
            .with_max_delay(MAX_PAUSE)
            .with_max_times(self.config.attempts as usize - 1)
            .with_jitter();
        let attempt = || async {
            attempts.fetch_add(1, Ordering::Relaxed);
            self.counters.request();
            let answer = self.attempt(call).await;
            if let Err(failed) = &answer {
                self.counters.failure(failed.kind());
            }
            answer
        };
        attempt
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|failed: &Failed| failed.may_retry(call, idempotent))
            .adjust(|failed: &Failed, pause| match (failed.retry_after(), pause) {
                (Some(asked), Some(pause)) => Some(asked.max(pause)),
                (_, pause) => pause,
            })
            .notify(|failed: &Failed, pause| {
                self.counters.retry();
                tracing::debug!(cluster, call = %call.describe(), kind = failed.kind().name(), ?pause, "retrying");
            })
            .await
            .map_err(|failed| {
                failed.into_error(
                    cluster,
                    call,
                    attempts.load(Ordering::Relaxed),
                )
            })
    }

    /// Reads the whole body of a successful answer to `call`.
    ///
    /// # Errors
    ///
    /// [`sandfleet_core::ErrorKind::Transport`] (sent) when the answer
    /// breaks off.
    pub async fn body(
        &self,
        cluster: &str,
        call: &Call,
        response: reqwest::Response,
    ) -> Result<Vec<u8>, BackendError> {
        response.bytes().await.map(|b| b.to_vec()).map_err(|error| {
            self.counters
                .failure(sandfleet_core::ErrorKind::Transport { sent: true });
            BackendError::new(
                sandfleet_core::ErrorKind::Transport { sent: true },
                cluster,
                format!("{}: the answer broke off: {error}", call.describe()),
            )
            .with_source(error)
        })
    }

    /// Makes `call` and reads its answer as JSON of type `T`.
    ///
    /// # Errors
    ///
    /// As [`Transport::send`] and [`Transport::body`]; an answer that is
    /// not a `T` is [`sandfleet_core::ErrorKind::Failed`].
    pub async fn json<T: serde::de::DeserializeOwned>(
        &self,
        cluster: &str,
        call: &Call,
    ) -> Result<T, BackendError> {
        let response = self.send(cluster, call).await?;
        let body = self.body(cluster, call, response).await?;
        serde_json::from_slice(&body).map_err(|error| {
            BackendError::new(
                sandfleet_core::ErrorKind::Failed,
                cluster,
                format!(
                    "{}: the answer is not what the API describes: {error}",
                    call.describe()
                ),
            )
            .with_source(error)
        })
    }

    /// Sends `call` once.
    async fn attempt(&self, call: &Call) -> Result<reqwest::Response, Failed> {
        let mut request = self
            .client
            .request(call.method.clone(), &call.url)
            .headers(call.headers.clone());
        if let Some(timeout) = call.timeout(&self.config) {
            request = request.timeout(timeout);
        }
        request = match &call.body {
            Some(Body::Json(json)) => request.json(json),
            Some(Body::Bytes {
                content_type,
                bytes,
            }) => request
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes.to_vec()),
            None => request,
        };
        let response = request.send().await.map_err(Failed::from_client)?;
        if response.status().is_success() {
            return Ok(response);
        }
        let (status, headers) = (response.status(), response.headers().clone());
        let body = read_capped(response, MAX_FAILURE_BODY)
            .await
            .map_err(Failed::from_client)?;
        Err(Failed::Status(HttpFailure::read(status, &headers, &body)))
    }
}

/// Reads at most `limit` bytes of a body.
async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= limit {
            break;
        }
    }
    Ok(body)
}
