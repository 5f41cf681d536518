//! One `kube::Client` per distinct configuration (kubeconfig file and
//! context, or in-cluster), shared by every cluster entry that names it.
//!
//! The client is made on first use, so a kubeconfig that cannot be read or
//! has no such context is a preflight failure naming the cluster, not a
//! crash at start. API calls go over HTTP/2 when the server offers it (as
//! every API server does): a run's claims, watches and deletes share one
//! connection, so a burst of claims neither opens hundreds of connections
//! against the API server nor waits for a handful; exec websockets, which
//! only HTTP/1.1 can upgrade, take a connection each. What a run holds is
//! that connection, its exec sessions and a few idle ones.
//!
//! One configuration makes two API clients over that one connection and
//! bound: `retrying`, with kube's retries of 429/503/504 after
//! `Retry-After`, for the calls nobody above the driver repeats (reaps,
//! clean-up, watches, reads), and `single`, which sends each request once,
//! for the calls the engine retries as a whole within its run's budget
//! (release, renewal, template and pool writes, claims) — so one throttled
//! call is not sent kube's attempts times the engine's. A third, `exec`,
//! retries like `retrying` over HTTP/1.1.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::OnceCell;
use tower::{BoxError, Service, ServiceBuilder};

use crate::config::K8sConfig;

/// Requests in flight at once on one client (an answer's headers free a
/// slot; watch and exec streams then hold only their connection). As many
/// as the engine's largest burst of claims: over HTTP/2 they are streams
/// of one connection, and the API server's own fairness queues them.
const MAX_IN_FLIGHT: usize = 256;

/// Idle connections kept per client (HTTP/1.1, or a server without HTTP/2).
const MAX_IDLE: usize = 4;

/// How long an idle pooled connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What identifies a client: the same key is the same client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// A kubeconfig (`None`: `$KUBECONFIG` or `~/.kube/config`) and context
    /// (`None`: its current context).
    Kubeconfig {
        path: Option<PathBuf>,
        context: Option<String>,
    },
    /// The pod's service account.
    InCluster,
}

/// The clients of one configuration (see the module's docs).
#[derive(Clone)]
pub(crate) struct Clients {
    /// kube retries 429, 503 and 504 itself, after `Retry-After`.
    pub(crate) retrying: kube::Client,
    /// Every request is sent once; its failure goes back to the caller.
    pub(crate) single: kube::Client,
    /// For `pods/exec` websockets, retrying like `retrying` (a refused
    /// upgrade ran nothing): over HTTP/1.1, the only protocol a websocket
    /// upgrade has, where the others share one HTTP/2 connection.
    pub(crate) exec: kube::Client,
}

impl Clients {
    /// Every role played by `client` as it is.
    pub(crate) fn same(client: kube::Client) -> Self {
        Clients {
            retrying: client.clone(),
            single: client.clone(),
            exec: client,
        }
    }

    /// The clients over `api` and `exec` (HTTP stacks that reach the API
    /// server; `exec` speaks HTTP/1.1), each with its bound on requests in
    /// flight; `retrying` and `single` share `api`'s.
    pub(crate) fn over<S, B, E, C>(api: S, exec: E, namespace: &str) -> Self
    where
        S: Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
        E: Service<http::Request<Body>, Response = http::Response<C>> + Clone + Send + 'static,
        E::Future: Send + 'static,
        E::Error: Into<BoxError>,
        C: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        C::Error: Into<BoxError>,
    {
        let api = bounded(api);
        Clients {
            retrying: kube::Client::new(retrying(api.clone()), namespace),
            single: kube::Client::new(api, namespace),
            exec: kube::Client::new(retrying(bounded(exec)), namespace),
        }
    }
}

/// `service` with at most [`MAX_IN_FLIGHT`] requests in flight.
fn bounded<S, B>(
    service: S,
) -> impl Service<
    http::Request<Body>,
    Response = http::Response<B>,
    Error = BoxError,
    Future: Send + 'static,
> + Clone
+ Send
+ 'static
where
    S: Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    ServiceBuilder::new()
        .concurrency_limit(MAX_IN_FLIGHT)
        .map_err(|error: S::Error| -> BoxError { error.into() })
        .service(service)
}

/// `service` with kube's retries of 429/503/504, outside its bound so a
/// retry waiting out `Retry-After` holds no slot.
fn retrying<S>(service: S) -> tower::retry::Retry<RetryPolicy, S> {
    tower::Layer::layer(
        &tower::retry::RetryLayer::new(RetryPolicy::server_retry()),
        service,
    )
}

/// A client, made once on first use.
pub(crate) struct ClientSlot {
    source: Source,
    client: OnceCell<Result<(Clients, String), String>>,
}

/// The clients of a process, by configuration.
#[derive(Default)]
pub struct K8sClients {
    slots: Mutex<HashMap<Source, Arc<ClientSlot>>>,
}

impl K8sClients {
    /// No clients yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The client slot for `config`, shared with every cluster configured
    /// alike.
    pub(crate) fn slot(&self, config: &K8sConfig) -> Arc<ClientSlot> {
        let source = if config.in_cluster {
            Source::InCluster
        } else {
            Source::Kubeconfig {
                path: config.kubeconfig.clone(),
                context: config.context.clone(),
            }
        };
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(source.clone())
            .or_insert_with(|| {
                Arc::new(ClientSlot {
                    source,
                    client: OnceCell::new(),
                })
            })
            .clone()
    }

    /// Distinct clients made or configured so far.
    pub fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ClientSlot {
    /// A slot holding `clients` (tests and embedding).
    pub(crate) fn ready(clients: Clients, server: String) -> Arc<Self> {
        Arc::new(ClientSlot {
            source: Source::InCluster,
            client: OnceCell::new_with(Some(Ok((clients, server)))),
        })
    }

    /// The clients and the server's URL, or why there are none (one line
    /// naming the kubeconfig and context).
    pub(crate) async fn get(&self) -> Result<&(Clients, String), &str> {
        self.client
            .get_or_init(|| connect(&self.source))
            .await
            .as_ref()
            .map_err(String::as_str)
    }
}

pub(crate) async fn connect(source: &Source) -> Result<(Clients, String), String> {
    let config = match source {
        Source::InCluster => {
            kube::Config::incluster().map_err(|e| format!("in-cluster configuration: {e}"))?
        }
        Source::Kubeconfig { path, context } => {
            let (kubeconfig, shown) = match path {
                Some(path) => (
                    Kubeconfig::read_from(path)
                        .map_err(|e| format!("kubeconfig {}: {}", path.display(), one_line(&e)))?,
                    path.display().to_string(),
                ),
                None => (
                    Kubeconfig::read().map_err(|e| {
                        format!(
                            "kubeconfig ($KUBECONFIG or ~/.kube/config): {}",
                            one_line(&e)
                        )
                    })?,
                    std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".into()),
                ),
            };
            if let Some(name) = context
                && !kubeconfig.contexts.iter().any(|c| &c.name == name)
            {
                let known: Vec<&str> = kubeconfig
                    .contexts
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                return Err(format!(
                    "kubeconfig {shown} has no context `{name}` (it has: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ));
            }
            let options = KubeConfigOptions {
                context: context.clone(),
                ..KubeConfigOptions::default()
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| format!("kubeconfig {shown}: {}", one_line(&e)))?
        }
    };
    let server = config.cluster_url.to_string();
    let client = build(config).map_err(|e| format!("client for {server}: {}", one_line(&e)))?;
    Ok((client, server))
}

/// kube's own stack (base URI, auth, TLS) over two pools: the API calls
/// on HTTP/2 when the server offers it (every claim, watch and delete of
/// a run multiplexed on one connection, no TLS handshake per burst), the
/// exec websockets on HTTP/1.1.
fn build(config: kube::Config) -> Result<Clients, kube::Error> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_nodelay(true);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name.clone().try_into().map_err(|e| {
            kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
        })?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let api = pooled(tls.enable_all_versions().wrap_connector(http.clone()));
    let exec = pooled(config.rustls_https_connector_with_connector(http)?);
    let stack = |client| -> Result<_, kube::Error> {
        Ok(ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(client))
    };
    Ok(Clients::over(
        stack(api)?,
        stack(exec)?,
        &config.default_namespace,
    ))
}

/// A client over `connector` keeping at most [`MAX_IDLE`] idle connections.
fn pooled<C>(connector: C) -> hyper_util::client::legacy::Client<C, Body>
where
    C: hyper_util::client::legacy::connect::Connect + Clone,
{
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(MAX_IDLE)
        .pool_idle_timeout(IDLE_TIMEOUT)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector)
}

/// An error and its causes on one line.
pub(crate) fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}
