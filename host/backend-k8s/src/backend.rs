//! The [`Backend`] for one Kubernetes cluster (a kubeconfig context and a
//! namespace) running agent-sandbox.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ErrorKind, ExecGuarantees, ExecRequest,
    ExecResult, Images, LABEL_RUN_ID, Labels, OutputSink, Owned, PoolSizing, PoolStatus, Preflight,
    Reaped, RunId, SandboxHandle, TemplateRef, TemplateSpec, validate_labels,
};
use serde::{Deserialize, Serialize};

use crate::claims::{ClaimWatch, NotReady, wait_ready};
use crate::client::{ClientSlot, Clients, K8sClients};
use crate::config::{ExecMode, K8sConfig};
use crate::errors::{api_error, is_not_found};
use crate::exec::{Failure, Session, Target, one_shot};
use crate::files::FileError;
use crate::objects;
use crate::preflight::MANAGER;
use crate::prepull::PrepullError;
use crate::resources::{
    POD_NAME_ANNOTATION, Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool,
};

/// How long a reap waits for the sandboxes it removed to be gone.
const REAP_WAIT: Duration = Duration::from_secs(60);

/// Pause between looks while a reap waits for garbage collection.
const REAP_PAUSE: Duration = Duration::from_millis(200);

/// How long moving one file in or out of a sandbox may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(600);

/// Below this much time left, a claim that did not bind is not made again.
const MIN_RETRY: Duration = Duration::from_secs(2);

/// What the driver keeps on a handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HandleData {
    /// The claim (what release deletes).
    pub(crate) claim: String,
    /// The sandbox bound to it, as its status named it.
    pub(crate) sandbox: String,
    /// The sandbox's pod.
    pub(crate) pod: String,
    pub(crate) namespace: String,
    pub(crate) pod_ips: Vec<String>,
    pub(crate) service_fqdn: Option<String>,
}

type SessionSlot = Arc<tokio::sync::Mutex<Option<Session>>>;

/// A Kubernetes cluster running agent-sandbox, as one sandfleet cluster.
pub struct K8sBackend {
    name: String,
    config: K8sConfig,
    slot: Arc<ClientSlot>,
    /// One claim watch per run.
    watches: Mutex<HashMap<RunId, Arc<ClaimWatch>>>,
    /// One exec session per claimed sandbox (by claim).
    sessions: Mutex<HashMap<String, SessionSlot>>,
}

impl K8sBackend {
    /// The cluster `name` as `config` describes it, its client taken from
    /// `clients` (made on first use; preflight reports a kubeconfig that
    /// cannot be used).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] naming the key that is wrong.
    pub fn new(name: &str, config: K8sConfig, clients: &K8sClients) -> Result<Self, BackendError> {
        config
            .validate()
            .map_err(|e| BackendError::new(ErrorKind::Invalid, name, e))?;
        let slot = clients.slot(&config);
        Ok(Self::with_slot(name, config, slot))
    }

    /// The cluster `name` served through `client` (for embedding and tests;
    /// the fleet file always goes through [`K8sBackend::new`]). Every call
    /// goes through `client` as it is, its retries (if any) included.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] naming the key that is wrong.
    pub fn with_client(
        name: &str,
        config: K8sConfig,
        client: kube::Client,
    ) -> Result<Self, BackendError> {
        config
            .validate()
            .map_err(|e| BackendError::new(ErrorKind::Invalid, name, e))?;
        let slot = ClientSlot::ready(Clients::same(client), "the given client".into());
        Ok(Self::with_slot(name, config, slot))
    }

    /// The cluster `name` reached through `service`, an HTTP stack that
    /// answers as the API server would (a scripted one in tests). The
    /// driver adds what it adds to a real connection: the bound on requests
    /// in flight, and kube's retries for the calls the engine does not
    /// retry itself.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] naming the key that is wrong.
    pub fn with_service<S, B>(
        name: &str,
        config: K8sConfig,
        service: S,
    ) -> Result<Self, BackendError>
    where
        S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<tower::BoxError>,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<tower::BoxError>,
    {
        config
            .validate()
            .map_err(|e| BackendError::new(ErrorKind::Invalid, name, e))?;
        let clients = Clients::over(service, &config.namespace);
        let slot = ClientSlot::ready(clients, "the given service".into());
        Ok(Self::with_slot(name, config, slot))
    }

    fn with_slot(name: &str, config: K8sConfig, slot: Arc<ClientSlot>) -> Self {
        K8sBackend {
            name: name.to_string(),
            config,
            slot,
            watches: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Pulls `images` on every node the cluster's node selector matches,
    /// through a DaemonSet of `run` deleted once every node has them (or at
    /// `deadline`). Returns the nodes that pulled them.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`] when nodes still lack images at `deadline`;
    /// the API server's refusals as their kinds.
    pub async fn prepull(
        &self,
        run: &RunId,
        images: &[String],
        deadline: Instant,
    ) -> Result<u32, BackendError> {
        if images.is_empty() {
            return Ok(0);
        }
        let daemon_sets = self.api::<DaemonSet>().await?;
        let daemon_set = crate::prepull::daemon_set(run, images, &self.config);
        match crate::prepull::prepull(daemon_sets, daemon_set, deadline).await {
            Ok(nodes) => Ok(u32::try_from(nodes).unwrap_or(0)),
            Err(PrepullError::Api(verb, error)) => {
                Err(self.api_error(&format!("{verb} the pre-pull DaemonSet"), error))
            }
            Err(PrepullError::Timeout { ready, nodes }) => Err(self.error(
                ErrorKind::Timeout,
                format!("pre-pull: {ready} of {nodes} nodes had every image at the deadline"),
            )),
        }
    }

    fn error(&self, kind: ErrorKind, message: impl std::fmt::Display) -> BackendError {
        BackendError::new(kind, &self.name, message)
    }

    fn api_error(&self, what: &str, error: kube::Error) -> BackendError {
        api_error(&self.name, what, error)
    }

    async fn clients(&self) -> Result<Clients, BackendError> {
        self.slot
            .get()
            .await
            .map(|(clients, _)| clients.clone())
            .map_err(|e| self.error(ErrorKind::Unavailable, e))
    }

    /// Through the client that retries 429/503/504 itself: for calls
    /// nobody above the driver repeats.
    async fn api<K>(&self) -> Result<Api<K>, BackendError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Ok(Api::namespaced(
            self.clients().await?.retrying,
            &self.config.namespace,
        ))
    }

    /// Through the client that sends each request once: for calls the
    /// engine retries as a whole, within its run's budget.
    async fn api_once<K>(&self) -> Result<Api<K>, BackendError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Ok(Api::namespaced(
            self.clients().await?.single,
            &self.config.namespace,
        ))
    }

    /// The run's claim watch, started on first use.
    async fn watch(&self, run: &RunId) -> Result<Arc<ClaimWatch>, BackendError> {
        // Retrying: the watch outlives any one claim and is nobody's to redo.
        let claims = self.api::<SandboxClaim>().await?;
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        Ok(watches
            .entry(run.clone())
            .or_insert_with(|| {
                Arc::new(ClaimWatch::start(
                    claims,
                    &format!("{LABEL_RUN_ID}={}", run.as_str()),
                ))
            })
            .clone())
    }

    fn handle_data(&self, sandbox: &SandboxHandle) -> Result<HandleData, BackendError> {
        serde_json::from_str(&sandbox.driver).map_err(|e| {
            self.error(
                ErrorKind::Invalid,
                format!("sandbox {}: not a handle of this driver: {e}", sandbox.id),
            )
        })
    }

    async fn target(&self, data: &HandleData) -> Result<Target, BackendError> {
        Ok(Target {
            // Retrying: a refused exec upgrade ran nothing, and the engine
            // never repeats a command.
            pods: Api::<Pod>::namespaced(self.clients().await?.retrying, &data.namespace),
            pod: data.pod.clone(),
        })
    }

    /// Deletes claim `name`; a missing one is already deleted. `once`: the
    /// caller's caller retries it, so it is sent once.
    async fn delete_claim(&self, name: &str, once: bool) -> Result<(), BackendError> {
        let claims = if once {
            self.api_once::<SandboxClaim>().await?
        } else {
            self.api::<SandboxClaim>().await?
        };
        match claims.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(error) if is_not_found(&error) => Ok(()),
            Err(error) => Err(self.api_error(&format!("delete claim {name}"), error)),
        }
    }

    /// Deletes a claim that will not be used, logging a failure.
    async fn discard_claim(&self, name: &str) {
        // Retried here: nothing else will remove it before its shutdown time.
        if let Err(error) = self.delete_claim(name, false).await {
            tracing::warn!(cluster = %self.name, claim = name, %error, "cannot delete a claim that was not used");
        }
    }

    /// One attempt at a claim: create it, wait on the run's watch until it
    /// is ready or `bind_by`, then read its sandbox.
    async fn claim_once(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        bind_by: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        let watch = self.watch(&template.run_id).await?;
        let name = format!("sfc-{:016x}", crate::random());
        let mut seen = watch.follow(&name);
        let outcome = self
            .create_and_wait(template, labels, &name, &mut seen, bind_by)
            .await;
        watch.forget(&name);
        outcome
    }

    async fn create_and_wait(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        name: &str,
        seen: &mut tokio::sync::watch::Receiver<crate::claims::Seen>,
        bind_by: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        // Once: the engine retries a claim as a whole, under a new name.
        let claims = self.api_once::<SandboxClaim>().await?;
        let claim = objects::claim(
            name,
            &template.name,
            &self.config.namespace,
            labels,
            objects::time_after(self.config.lease),
        );
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..PostParams::default()
        };
        if let Err(error) = claims.create(&params, &claim).await {
            // Unless the server refused it (4xx) or it never left, the
            // claim may exist with its answer lost (a cut connection, a 5xx
            // after the write): delete it by its unique name, or it holds a
            // sandbox until its shutdown time while the engine claims again.
            let refused =
                matches!(&error, kube::Error::Api(status) if (400..500).contains(&status.code));
            let error = self.api_error(&format!("create claim {name} of {}", template.name), error);
            if !refused && error.kind() != (ErrorKind::Transport { sent: false }) {
                self.discard_claim(name).await;
            }
            return Err(error);
        }
        let ready = match wait_ready(seen, bind_by.into()).await {
            Ok(ready) => ready,
            Err(not_ready) => {
                if not_ready != NotReady::Deleted {
                    self.discard_claim(name).await;
                }
                return Err(self.not_ready(name, &template.name, not_ready));
            }
        };
        let sandbox_name = ready
            .status
            .as_ref()
            .and_then(|s| s.sandbox.as_ref())
            .map(|s| s.name.clone())
            .expect("a ready claim names its sandbox");
        // Retrying: the claim is bound, and failing here would discard it.
        let sandboxes = self.api::<Sandbox>().await?;
        let sandbox = match sandboxes.get(&sandbox_name).await {
            Ok(sandbox) => sandbox,
            Err(error) => {
                self.discard_claim(name).await;
                let kind = if is_not_found(&error) {
                    ErrorKind::SandboxLost
                } else {
                    crate::errors::kind_of(&error)
                };
                return Err(self.error(
                    kind,
                    format!(
                        "claim {name}: its sandbox {sandbox_name}: {}",
                        crate::client::one_line(&error)
                    ),
                ));
            }
        };
        let pod = sandbox
            .annotations()
            .get(POD_NAME_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| sandbox_name.clone());
        let status = sandbox.status.unwrap_or_default();
        let pod_ips = if status.pod_ips.is_empty() {
            ready
                .status
                .as_ref()
                .and_then(|s| s.sandbox.as_ref())
                .map(|s| s.pod_ips.clone())
                .unwrap_or_default()
        } else {
            status.pod_ips
        };
        let data = HandleData {
            claim: name.to_string(),
            sandbox: sandbox_name,
            pod: pod.clone(),
            namespace: self.config.namespace.clone(),
            pod_ips: pod_ips.clone(),
            service_fqdn: status.service_fqdn.clone(),
        };
        Ok(SandboxHandle {
            id: name.to_string(),
            cluster: self.name.clone(),
            template: template.name.clone(),
            run_id: template.run_id.clone(),
            hostname: pod,
            endpoint: status.service_fqdn.or_else(|| pod_ips.first().cloned()),
            driver: serde_json::to_string(&data).expect("handle data serializes"),
        })
    }

    fn not_ready(&self, claim: &str, template: &str, not_ready: NotReady) -> BackendError {
        match not_ready {
            NotReady::Terminal(reason, message) => {
                let kind = match reason.as_str() {
                    "TemplateNotFound" | "WarmPoolNotFound" => ErrorKind::NotFound,
                    _ => ErrorKind::SandboxLost,
                };
                self.error(
                    kind,
                    format!("claim {claim} of {template}: {reason}: {message}"),
                )
            }
            NotReady::Deleted => self.error(
                ErrorKind::SandboxLost,
                format!("claim {claim} of {template} was deleted before it was ready"),
            ),
            NotReady::Timeout(reason) => self.error(
                ErrorKind::Timeout,
                format!(
                    "claim {claim} of {template} did not bind in time ({}); deleted",
                    reason.unwrap_or_else(|| "no status yet".into())
                ),
            ),
        }
    }

    async fn apply_pool(
        &self,
        template: &str,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError> {
        // Once: the engine retries warm and unwarm as a whole.
        let pools = self.api_once::<SandboxWarmPool>().await?;
        let pool = objects::pool(template, &self.config.namespace, replicas, labels);
        pools
            .patch(
                template,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&pool),
            )
            .await
            .map(drop)
            .map_err(|e| {
                self.api_error(
                    &format!("apply warm pool {template} ({replicas} replicas)"),
                    e,
                )
            })
    }

    fn session_slot(&self, claim: &str) -> SessionSlot {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(claim.to_string())
            .or_default()
            .clone()
    }

    fn exec_failure(
        &self,
        sandbox: &SandboxHandle,
        program: &str,
        failure: Failure,
    ) -> BackendError {
        match failure {
            Failure::NotStarted(error) => {
                let error = self.api_error(
                    &format!("exec `{program}` in sandbox {}", sandbox.id),
                    error,
                );
                if error.kind() == ErrorKind::NotFound {
                    self.error(
                        ErrorKind::SandboxLost,
                        format!("sandbox {}: its pod is gone", sandbox.id),
                    )
                } else {
                    // The upgrade was refused or never made: nothing ran.
                    error
                }
            }
            Failure::Unread => self.error(
                ErrorKind::Transport { sent: false },
                format!(
                    "command `{program}` in sandbox {}: the exec session ended before reading it",
                    sandbox.id
                ),
            ),
            Failure::Lost(why) => self.error(
                ErrorKind::Transport { sent: true },
                format!("command `{program}` in sandbox {}: {why}", sandbox.id),
            ),
        }
    }

    fn file_timeout(&self, sandbox: &SandboxHandle, path: &str) -> BackendError {
        self.error(
            ErrorKind::Timeout,
            format!(
                "sandbox {}: moving {path} took over {}",
                sandbox.id,
                humantime::format_duration(FILE_TIMEOUT)
            ),
        )
    }

    fn file_failure(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        failure: FileError,
    ) -> BackendError {
        match failure {
            FileError::NotStarted(error) => {
                self.api_error(&format!("{path} in sandbox {}", sandbox.id), error)
            }
            FileError::Missing => self.error(
                ErrorKind::NotFound,
                format!("sandbox {}: no file {path}", sandbox.id),
            ),
            FileError::Failed(why) => {
                self.error(ErrorKind::Failed, format!("sandbox {}: {why}", sandbox.id))
            }
        }
    }

    /// What `run` owns: its templates, pools and claims by label, and the
    /// sandboxes owned by those claims and pools (pods and sandboxes lose
    /// `agents.x-k8s.io/*` labels, so ownership is read from owner
    /// references).
    async fn owned(&self, run: &RunId) -> Result<OwnedObjects, BackendError> {
        let selector = ListParams::default().labels(&format!("{LABEL_RUN_ID}={}", run.as_str()));
        let what = |kind: &str| format!("list {kind} of run {run}");
        let templates = self
            .api::<SandboxTemplate>()
            .await?
            .list(&selector)
            .await
            .map_err(|e| self.api_error(&what("templates"), e))?;
        let pools = self
            .api::<SandboxWarmPool>()
            .await?
            .list(&selector)
            .await
            .map_err(|e| self.api_error(&what("warm pools"), e))?;
        let claims = self
            .api::<SandboxClaim>()
            .await?
            .list(&selector)
            .await
            .map_err(|e| self.api_error(&what("claims"), e))?;
        let owners: HashSet<String> = pools
            .items
            .iter()
            .map(|p| p.uid())
            .chain(claims.items.iter().map(|c| c.uid()))
            .flatten()
            .collect();
        let sandboxes = self
            .api::<Sandbox>()
            .await?
            .list(&ListParams::default())
            .await
            .map_err(|e| self.api_error(&what("sandboxes"), e))?;
        let sandboxes = sandboxes
            .items
            .into_iter()
            .filter(|s| s.owner_references().iter().any(|o| owners.contains(&o.uid)))
            .map(|s| s.name_any())
            .collect();
        Ok(OwnedObjects {
            templates: templates.items.iter().map(|t| t.name_any()).collect(),
            pools: pools.items.iter().map(|p| p.name_any()).collect(),
            claims: claims.items.iter().map(|c| c.name_any()).collect(),
            sandboxes,
        })
    }

    /// Waits until none of `names` exists, or [`REAP_WAIT`].
    async fn wait_gone(&self, names: &[String]) -> Result<(), BackendError> {
        if names.is_empty() {
            return Ok(());
        }
        let sandboxes = self.api::<Sandbox>().await?;
        let until = Instant::now() + REAP_WAIT;
        loop {
            let listed = sandboxes
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| self.api_error("list sandboxes", e))?;
            let left = listed
                .items
                .iter()
                .filter(|s| s.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
                .count();
            if left == 0 {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(self.error(
                    ErrorKind::Timeout,
                    format!(
                        "{left} sandboxes were still being removed after {}",
                        humantime::format_duration(REAP_WAIT)
                    ),
                ));
            }
            tokio::time::sleep(REAP_PAUSE).await;
        }
    }
}

struct OwnedObjects {
    templates: Vec<String>,
    pools: Vec<String>,
    claims: Vec<String>,
    sandboxes: Vec<String>,
}

#[async_trait]
impl Backend for K8sBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            pool_sizing: PoolSizing::Client,
            lease_ttl: Some(self.config.lease),
            exec: ExecGuarantees {
                argv: true,
                ordered_merge: true,
                kills_process_group: true,
            },
            images: Images::AnyReference,
            scrub: true,
        }
    }

    async fn preflight(&self) -> Preflight {
        match self.slot.get().await {
            Ok((clients, server)) => {
                crate::preflight::check(&clients.retrying, &self.config, server).await
            }
            Err(error) => Preflight {
                failures: vec![error.to_string()],
                ..Preflight::default()
            },
        }
    }

    async fn capacity(&self) -> Result<Capacity, BackendError> {
        let client = self.clients().await?.retrying;
        crate::preflight::capacity(&client, &self.config)
            .await
            .map_err(|e| self.api_error("list nodes", e))
    }

    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError> {
        validate_labels(&spec.labels)
            .map_err(|e| self.error(ErrorKind::Invalid, format!("template {}: {e}", spec.name)))?;
        let run = spec
            .labels
            .get(LABEL_RUN_ID)
            .and_then(|run| RunId::new(run.as_str()).ok())
            .ok_or_else(|| {
                self.error(
                    ErrorKind::Invalid,
                    format!("template {} has no run id label", spec.name),
                )
            })?;
        let template = objects::template(spec, &self.config, &self.config.namespace)
            .map_err(|e| self.error(ErrorKind::Invalid, format!("template {}: {e}", spec.name)))?;
        // Once: the engine retries ensure_template as a whole.
        let templates = self.api_once::<SandboxTemplate>().await?;
        templates
            .patch(
                &spec.name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&template),
            )
            .await
            .map_err(|e| {
                self.api_error(&format!("apply template {} ({})", spec.name, spec.image), e)
            })?;
        // A v1beta1 claim names a pool, never a template: every template
        // has one, empty until warmed.
        let pools = self.api_once::<SandboxWarmPool>().await?;
        let pool = objects::pool(&spec.name, &self.config.namespace, 0, &spec.labels);
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..PostParams::default()
        };
        match pools.create(&params, &pool).await {
            Ok(_) => {}
            // It exists (and may be warm already): leave its size alone.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => {
                return Err(self.api_error(&format!("create warm pool {}", spec.name), error));
            }
        }
        Ok(TemplateRef {
            name: spec.name.clone(),
            image: spec.image.clone(),
            run_id: run,
        })
    }

    async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError> {
        validate_labels(labels)
            .map_err(|e| self.error(ErrorKind::Invalid, format!("pool {}: {e}", template.name)))?;
        self.apply_pool(&template.name, replicas, labels).await
    }

    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError> {
        // Scaled to zero, not deleted: cold claims still go through it.
        match self
            .apply_pool(&template.name, 0, &template.run_id.labels())
            .await
        {
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError> {
        let pools = self.api::<SandboxWarmPool>().await?;
        let pool = pools
            .get(&template.name)
            .await
            .map_err(|e| self.api_error(&format!("read warm pool {}", template.name), e))?;
        Ok(pool_status(&pool))
    }

    async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        deadline: Instant,
    ) -> Result<PoolStatus, BackendError> {
        let pools = self.api::<SandboxWarmPool>().await?;
        let config = watcher::Config::default().fields(&format!("metadata.name={}", template.name));
        let mut events = std::pin::pin!(watcher(pools, config));
        let mut last = PoolStatus::default();
        let waited = tokio::time::timeout_at(deadline.into(), async {
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(pool) | watcher::Event::InitApply(pool)) => {
                        last = pool_status(&pool);
                        if last.ready >= at_least {
                            return Ok(last);
                        }
                    }
                    // DELETED is an answer, not a pool with 0 ready (agent-sandbox-rl #1736).
                    Ok(watcher::Event::Delete(_)) => {
                        return Err(self.error(
                            ErrorKind::NotFound,
                            format!("warm pool {} was deleted while it was filling", template.name),
                        ));
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(cluster = %self.name, pool = %template.name, %error, "pool watch failed; resuming");
                        tokio::time::sleep(REAP_PAUSE).await;
                    }
                }
            }
            Err(self.error(ErrorKind::Failed, "the pool watch ended"))
        })
        .await;
        match waited {
            Ok(outcome) => outcome,
            Err(_) => Err(self.error(
                ErrorKind::Timeout,
                format!(
                    "warm pool {}: {} of {at_least} sandboxes ready at the deadline",
                    template.name, last.ready
                ),
            )),
        }
    }

    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        validate_labels(labels).map_err(|e| {
            self.error(
                ErrorKind::Invalid,
                format!("claim of {}: {e}", template.name),
            )
        })?;
        let now = Instant::now();
        let bind_by = match self.config.bind_timeout {
            Some(bind) => deadline.min(now + bind),
            None => now + deadline.saturating_duration_since(now) / 2,
        };
        match self.claim_once(template, labels, bind_by).await {
            // Did not bind (upstream #1367: cold creates lost under load):
            // it was deleted; the engine makes it again, once there is time
            // for it, under the run's retry budget.
            Err(error)
                if error.kind() == ErrorKind::Timeout
                    && deadline.saturating_duration_since(Instant::now()) > MIN_RETRY =>
            {
                Err(self.error(
                    ErrorKind::Unavailable,
                    format!("{}; claiming again", error.message()),
                ))
            }
            other => other,
        }
    }

    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        if request.argv.is_empty() {
            return Err(self.error(ErrorKind::Invalid, "a command needs a program"));
        }
        let data = self.handle_data(sandbox)?;
        let target = self.target(&data).await?;
        let program = request.argv[0].clone();
        if self.config.exec == ExecMode::Session {
            let slot = self.session_slot(&data.claim);
            // A sandbox busy with another command runs this one on its own.
            if let Ok(mut session) = slot.try_lock() {
                if session.is_none() {
                    match Session::open(&target, &self.config.shell).await {
                        Ok(opened) => *session = Some(opened),
                        Err(error) => {
                            tracing::debug!(cluster = %self.name, sandbox = %sandbox.id, %error, "no exec session; one websocket per command");
                        }
                    }
                }
                if let Some(open) = session.as_mut() {
                    let ran = open.run(&target, request, output).await;
                    if ran.is_err() {
                        *session = None;
                    }
                    match ran {
                        // Never read, so never run: it runs on its own
                        // websocket instead.
                        Err(Failure::Unread) => {
                            tracing::info!(cluster = %self.name, sandbox = %sandbox.id, "the exec session ended before reading a command; running it alone");
                        }
                        other => return other.map_err(|f| self.exec_failure(sandbox, &program, f)),
                    }
                }
            }
        }
        one_shot(&target, request, output)
            .await
            .map_err(|f| self.exec_failure(sandbox, &program, f))
    }

    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError> {
        let data = self.handle_data(sandbox)?;
        let target = self.target(&data).await?;
        tokio::time::timeout(
            FILE_TIMEOUT,
            crate::files::put(&target, path, contents, mode),
        )
        .await
        .map_err(|_| self.file_timeout(sandbox, path))?
        .map_err(|f| self.file_failure(sandbox, path, f))
    }

    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        let data = self.handle_data(sandbox)?;
        let target = self.target(&data).await?;
        tokio::time::timeout(FILE_TIMEOUT, crate::files::get(&target, path))
            .await
            .map_err(|_| self.file_timeout(sandbox, path))?
            .map_err(|f| self.file_failure(sandbox, path, f))
    }

    async fn scrub(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        let data = self.handle_data(sandbox)?;
        // The session's shell is one of the processes a scrub stops.
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&data.claim);
        let target = self.target(&data).await?;
        crate::scrub::scrub(&target, &self.config.entrypoint)
            .await
            .map_err(|why| {
                self.error(
                    ErrorKind::SandboxLost,
                    format!("sandbox {}: {why}", sandbox.id),
                )
            })
    }

    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        let data = self.handle_data(sandbox)?;
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&data.claim);
        // Once: the engine retries a release as a whole.
        self.delete_claim(&data.claim, true).await
    }

    async fn renew(&self, sandbox: &SandboxHandle, ttl: Duration) -> Result<(), BackendError> {
        let data = self.handle_data(sandbox)?;
        // Once: the engine retries a renewal as a whole.
        let claims = self.api_once::<SandboxClaim>().await?;
        let patch =
            serde_json::json!({"spec": {"lifecycle": {"shutdownTime": objects::time_after(ttl)}}});
        match claims
            .patch(&data.claim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_not_found(&error) => Err(self.error(
                ErrorKind::SandboxLost,
                format!("claim {} is gone (expired or deleted)", data.claim),
            )),
            Err(error) => Err(self.api_error(&format!("renew claim {}", data.claim), error)),
        }
    }

    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError> {
        let owned = self.owned(run_id).await?;
        Ok(Owned {
            templates: owned.templates,
            pools: owned.pools,
            sandboxes: owned.sandboxes,
        })
    }

    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError> {
        let owned = self.owned(run_id).await?;
        // Claims first (their sandboxes go with them), then pools (their
        // warm members), then templates.
        // Retrying, as every call of a reap: the engine does not repeat it.
        for claim in &owned.claims {
            self.delete_claim(claim, false).await?;
        }
        let pools = self.api::<SandboxWarmPool>().await?;
        for pool in &owned.pools {
            match pools.delete(pool, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    return Err(self.api_error(&format!("delete warm pool {pool}"), error));
                }
            }
        }
        let templates = self.api::<SandboxTemplate>().await?;
        for template in &owned.templates {
            match templates
                .delete(template, &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    return Err(self.api_error(&format!("delete template {template}"), error));
                }
            }
        }
        // A pre-pull the run was killed in the middle of.
        let daemon_sets = self.api::<DaemonSet>().await?;
        let pulls = match daemon_sets
            .list_metadata(&ListParams::default().labels(&crate::prepull::run_selector(run_id)))
            .await
        {
            Ok(pulls) => pulls.items,
            // An account that may not pre-pull has none to remove.
            Err(kube::Error::Api(status)) if status.code == 403 => Vec::new(),
            Err(error) => return Err(self.api_error("list pre-pull DaemonSets", error)),
        };
        for pull in pulls.iter().filter_map(|d| d.metadata.name.as_deref()) {
            match daemon_sets.delete(pull, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    return Err(self.api_error(&format!("delete DaemonSet {pull}"), error));
                }
            }
        }
        {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            for claim in &owned.claims {
                sessions.remove(claim);
            }
        }
        self.wait_gone(&owned.sandboxes).await?;
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run_id);
        Ok(Reaped {
            templates: owned.templates.len(),
            pools: owned.pools.len(),
            sandboxes: owned.sandboxes.len(),
            processes: 0,
        })
    }
}

fn pool_status(pool: &SandboxWarmPool) -> PoolStatus {
    let ready = pool.status.as_ref().map_or(0, |s| s.ready_replicas);
    PoolStatus {
        desired: u32::try_from(pool.spec.replicas).unwrap_or(0),
        ready: u32::try_from(ready).unwrap_or(0),
    }
}
