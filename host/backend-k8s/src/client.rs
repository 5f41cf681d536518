//! One `kube::Client` per distinct configuration (kubeconfig file and
//! context, or in-cluster), shared by every cluster entry that names it.
//!
//! The client is made on first use, so a kubeconfig that cannot be read or
//! has no such context is a preflight failure naming the cluster, not a
//! crash at start. Its HTTP stack bounds the requests in flight and the idle
//! connections kept, so a burst of claims does not leave hundreds of
//! connections open against the API server: what a run holds is its watch,
//! its exec sessions and a handful of pooled connections.
//!
//! One configuration makes two clients over that one pool and bound:
//! `retrying`, with kube's retries of 429/503/504 after `Retry-After`, for
//! the calls nobody above the driver repeats (reaps, clean-up, watches,
//! reads), and `single`, which sends each request once, for the calls the
//! engine retries as a whole within its run's budget (release, renewal,
//! template and pool writes, claims) — so one throttled call is not sent
//! kube's attempts times the engine's.

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
/// slot; watch and exec streams then hold only their connection).
const MAX_IN_FLIGHT: usize = 16;

/// Idle connections kept per client.
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

/// The two clients of one configuration (see the module's docs).
#[derive(Clone)]
pub(crate) struct Clients {
    /// kube retries 429, 503 and 504 itself, after `Retry-After`.
    pub(crate) retrying: kube::Client,
    /// Every request is sent once; its failure goes back to the caller.
    pub(crate) single: kube::Client,
}

impl Clients {
    /// Both roles played by `client` as it is.
    pub(crate) fn same(client: kube::Client) -> Self {
        Clients {
            retrying: client.clone(),
            single: client,
        }
    }

    /// The two clients over `service` (an HTTP stack that reaches the API
    /// server), sharing its connections and one bound on requests in
    /// flight.
    pub(crate) fn over<S, B>(service: S, namespace: &str) -> Self
    where
        S: Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let bounded = ServiceBuilder::new()
            .concurrency_limit(MAX_IN_FLIGHT)
            .map_err(|error: S::Error| -> BoxError { error.into() })
            .service(service);
        // Outside the bound, so a retry waiting out Retry-After holds no
        // slot.
        let retrying = ServiceBuilder::new()
            .layer(tower::retry::RetryLayer::new(RetryPolicy::server_retry()))
            .service(bounded.clone());
        Clients {
            retrying: kube::Client::new(retrying, namespace),
            single: kube::Client::new(bounded, namespace),
        }
    }
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

/// kube's own stack (base URI, auth, TLS) with a bounded pool, as the two
/// clients.
fn build(config: kube::Config) -> Result<Clients, kube::Error> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(MAX_IDLE)
        .pool_idle_timeout(IDLE_TIMEOUT)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(Clients::over(service, &config.default_namespace))
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
