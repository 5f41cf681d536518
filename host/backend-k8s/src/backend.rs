//! The [`Backend`] for one Kubernetes cluster (a kubeconfig context and a
//! namespace) running agent-sandbox.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ErrorKind, ExecGuarantees, ExecRequest,
    ExecResult, ImagePulls, Images, LABEL_RUN_ID, Labels, OutputSink, Owned, Preflight, Reaped,
    Recycling, RunId, SandboxHandle, TemplateRef, TemplateSpec, WarmPools,
};
use serde::{Deserialize, Serialize};

use crate::claims::ClaimWatch;
use crate::client::{ClientSlot, Clients, K8sClients};
use crate::config::{ExecMode, K8sConfig};
use crate::errors::{api_error, is_not_found};
use crate::exec::{Failure, Session, Target, one_shot};
use crate::objects;
use crate::preflight::MANAGER;
mod ahead;
mod claiming;
mod owned;

use crate::resources::{SandboxClaim, SandboxTemplate, SandboxWarmPool};

/// How long a reap waits for the sandboxes it removed to be gone.
pub(super) const REAP_WAIT: Duration = Duration::from_secs(60);

/// Pause between looks while a reap waits for garbage collection, and
/// before a failed watch resumes.
pub(super) const REAP_PAUSE: Duration = Duration::from_millis(200);

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
    /// How long a pre-pull of one image may take, when the cluster was
    /// asked to pre-pull ([`K8sBackend::pre_pulling`]).
    prepull: Option<Duration>,
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
        let clients = Clients::over(service.clone(), service, &config.namespace);
        let slot = ClientSlot::ready(clients, "the given service".into());
        Ok(Self::with_slot(name, config, slot))
    }

    fn with_slot(name: &str, config: K8sConfig, slot: Arc<ClientSlot>) -> Self {
        K8sBackend {
            name: name.to_string(),
            config: config.settled(),
            slot,
            watches: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            prepull: None,
        }
    }

    /// Makes the cluster pre-pull every image a run names onto every node
    /// its node selector matches, before the run warms anything
    /// (`[fleet] prepull`), waiting at most `timeout` for each image.
    #[must_use]
    pub fn pre_pulling(mut self, timeout: Duration) -> Self {
        self.prepull = Some(timeout);
        self
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

    /// Runs `request` in the pod: on the sandbox's exec session when it
    /// has one free (opened on first use), else on a websocket of its own.
    async fn exec_in(
        &self,
        sandbox: &SandboxHandle,
        data: &HandleData,
        target: &Target,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, Failure> {
        if self.config.exec == ExecMode::Session {
            let slot = self.session_slot(&data.claim);
            // A sandbox busy with another command runs this one on its own.
            if let Ok(mut session) = slot.try_lock() {
                if session.is_none() {
                    match Session::open(target).await {
                        Ok(opened) => *session = Some(opened),
                        Err(error) => {
                            tracing::debug!(cluster = %self.name, sandbox = %sandbox.id, %error, "no exec session; one websocket per command");
                        }
                    }
                }
                if let Some(open) = session.as_mut() {
                    let ran = open.run(target, request, output).await;
                    if ran.is_err() {
                        *session = None;
                    }
                    match ran {
                        // Never read, so never run: it runs on its own
                        // websocket instead.
                        Err(Failure::Unread) => {
                            tracing::info!(cluster = %self.name, sandbox = %sandbox.id, "the exec session ended before reading a command; running it alone");
                        }
                        other => return other,
                    }
                }
            }
        }
        one_shot(target, request, output).await
    }

    /// `error`, or the sandbox lost when the pod has ended or is gone and
    /// that `may_explain` the error (the server refused the exec, or the
    /// stream ended mid-command): the engine replaces a lost sandbox, where
    /// it would give up on an invalid request or a command cut short.
    async fn lost_if_ended(
        &self,
        target: &Target,
        sandbox: &SandboxHandle,
        may_explain: bool,
        error: BackendError,
    ) -> BackendError {
        if !may_explain || error.kind() == ErrorKind::SandboxLost {
            return error;
        }
        match target.ended().await {
            Some(why) => self.error(
                ErrorKind::SandboxLost,
                format!("sandbox {}: {why}", sandbox.id),
            ),
            None => error,
        }
    }

    /// A file move's result as the engine sees it.
    async fn file_outcome<T>(
        &self,
        target: &Target,
        sandbox: &SandboxHandle,
        path: &str,
        moved: Result<T, crate::files::FileError>,
    ) -> Result<T, BackendError> {
        match moved {
            Ok(value) => Ok(value),
            Err(failure) => {
                let refused = failure.not_started();
                let error = failure.into_error(&self.name, sandbox, path);
                Err(self.lost_if_ended(target, sandbox, refused, error).await)
            }
        }
    }

    async fn target(&self, data: &HandleData) -> Result<Target, BackendError> {
        Ok(Target {
            // Retrying: a refused exec upgrade ran nothing, and the engine
            // never repeats a command.
            pods: Api::<Pod>::namespaced(self.clients().await?.exec, &data.namespace),
            pod: data.pod.clone(),
            shell: self.config.pod_shell(),
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

    /// The exec session slot of `claim`'s sandbox, made on first use.
    fn session_slot(&self, claim: &str) -> SessionSlot {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(claim.to_string())
            .or_default()
            .clone()
    }
}

#[async_trait]
impl Backend for K8sBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            lease_ttl: Some(self.config.lease),
            exec: ExecGuarantees {
                argv: true,
                ordered_merge: true,
                kills_process_group: true,
            },
            images: Images::AnyReference,
        }
    }

    fn pools(&self) -> Option<&dyn WarmPools> {
        Some(self)
    }

    fn recycling(&self) -> Option<&dyn Recycling> {
        Some(self)
    }

    fn pulls(&self) -> Option<&dyn ImagePulls> {
        self.prepull.map(|_| self as &dyn ImagePulls)
    }

    async fn preflight(&self) -> Preflight {
        match self.slot.get().await {
            Ok((clients, server)) => {
                crate::preflight::check(
                    &clients.retrying,
                    &self.config,
                    server,
                    self.prepull.is_some(),
                )
                .await
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
        let run = spec
            .run_id()
            .map_err(|e| self.error(ErrorKind::Invalid, e))?;
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

    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        self.claim_within(template, labels, deadline).await
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
        if let Some((name, _)) = request
            .env
            .iter()
            .find(|(name, _)| !crate::frames::is_shell_name(name))
        {
            return Err(self.error(
                ErrorKind::Invalid,
                format!(
                    "`{name}` is not an environment variable name the pod's shell can export \
                     (letters, digits and `_`, not starting with a digit)"
                ),
            ));
        }
        let data = self.handle_data(sandbox)?;
        let target = self.target(&data).await?;
        let program = &request.argv[0];
        let ran = self.exec_in(sandbox, &data, &target, request, output).await;
        match ran {
            Ok(result) => Ok(result),
            Err(failure) => {
                let ended = failure.pod_may_have_ended();
                let error = failure.into_error(&self.name, sandbox, program);
                Err(self.lost_if_ended(&target, sandbox, ended, error).await)
            }
        }
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
        let moved = tokio::time::timeout(
            crate::files::FILE_TIMEOUT,
            crate::files::put(&target, path, contents, mode),
        )
        .await
        .map_err(|_| crate::files::timed_out(&self.name, sandbox, path))?;
        self.file_outcome(&target, sandbox, path, moved).await
    }

    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        let data = self.handle_data(sandbox)?;
        let target = self.target(&data).await?;
        let moved =
            tokio::time::timeout(crate::files::FILE_TIMEOUT, crate::files::get(&target, path))
                .await
                .map_err(|_| crate::files::timed_out(&self.name, sandbox, path))?;
        self.file_outcome(&target, sandbox, path, moved).await
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
            ..Owned::default()
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
        self.wait_gone(&owned).await?;
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run_id);
        Ok(Reaped {
            templates: owned.templates.len(),
            pools: owned.pools.len(),
            sandboxes: owned.sandboxes.len(),
            ..Reaped::default()
        })
    }
}

#[async_trait]
impl Recycling for K8sBackend {
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
}
