//! The [`Backend`] for one OpenSandbox server.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::Method;
use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ErrorKind, ExecGuarantees, ExecRequest,
    ExecResult, Images, LABEL_RUN_ID, Labels, OutputSink, Owned, Preflight, Reaped, RunId,
    SandboxHandle, Snapshots, TemplateRef, TemplateSpec,
};
use sandfleet_transport::{Call, CallKind, Clients, HttpFailure, Transport};

use crate::config::{EndpointMode, OpenSandboxConfig, Resolved};
mod command;
mod create;
mod output;
mod snapshots;

use self::create::Source;
use crate::wire::{Endpoint, HandleData, Sandbox, SandboxPage};

/// The lifecycle API's key header.
const API_KEY: &str = "OPEN-SANDBOX-API-KEY";

/// Label naming the claim a sandbox was created for, so a create whose
/// answer was lost can be found and deleted.
const LABEL_CLAIM: &str = "sandfleet.io/claim";

/// Pause between readiness probes.
const PROBE_PAUSE: Duration = Duration::from_millis(100);

/// Sandboxes listed per page (the server's maximum).
const PAGE_SIZE: u32 = 200;

/// An OpenSandbox server as one cluster.
pub struct OpenSandboxBackend {
    name: String,
    config: OpenSandboxConfig,
    server: Resolved,
    transport: Arc<Transport>,
    templates: Mutex<HashMap<(RunId, String), TemplateSpec>>,
    /// Whether this cluster's execd was found not to keep commands' output
    /// where the driver reads it back exactly (said once).
    no_output_files: AtomicBool,
}

impl OpenSandboxBackend {
    /// The cluster `name` as `config` describes it, its URL and key read
    /// from the environment, its client taken from `clients`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] naming what is wrong in the configuration.
    pub fn new(
        name: &str,
        config: OpenSandboxConfig,
        clients: &Clients,
    ) -> Result<Self, BackendError> {
        let server = config
            .resolve(|variable| std::env::var(variable).ok())
            .map_err(|e| BackendError::new(ErrorKind::Invalid, name, e))?;
        Self::connect(name, config, server, clients)
    }

    /// The cluster `name` at `base_url` with `api_key` (for embedding and
    /// tests; the fleet file always goes through [`OpenSandboxBackend::new`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] naming what is wrong in the configuration.
    pub fn with_server(
        name: &str,
        mut config: OpenSandboxConfig,
        base_url: &str,
        api_key: Option<String>,
        clients: &Clients,
    ) -> Result<Self, BackendError> {
        config.url = Some(base_url.to_string());
        let mut server = config
            .resolve(|_| None)
            .map_err(|e| BackendError::new(ErrorKind::Invalid, name, e))?;
        server.api_key = api_key;
        Self::connect(name, config, server, clients)
    }

    fn connect(
        name: &str,
        config: OpenSandboxConfig,
        server: Resolved,
        clients: &Clients,
    ) -> Result<Self, BackendError> {
        config
            .validate_pools(name)
            .map_err(|e| BackendError::new(ErrorKind::Invalid, name, e))?;
        let transport = clients
            .transport(&config.transport)
            .map_err(|e| BackendError::new(ErrorKind::Invalid, name, e))?;
        Ok(OpenSandboxBackend {
            name: name.to_string(),
            config,
            server,
            transport,
            templates: Mutex::new(HashMap::new()),
            no_output_files: AtomicBool::new(false),
        })
    }

    fn error(&self, kind: ErrorKind, message: impl std::fmt::Display) -> BackendError {
        BackendError::new(kind, &self.name, message)
    }

    /// A lifecycle API call, with the key.
    fn lifecycle(&self, method: Method, path: &str, kind: CallKind, what: String) -> Call {
        self.keyed(Call::new(
            method,
            format!("{}/v1{path}", self.server.base_url),
            kind,
            what,
        ))
    }

    /// `call` with the lifecycle API's key.
    fn keyed(&self, call: Call) -> Call {
        match &self.server.api_key {
            Some(key) => call
                .header(API_KEY, key)
                .expect("keys are checked when read"),
            None => call,
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(&self, call: &Call) -> Result<T, BackendError> {
        self.transport.json(&self.name, call).await
    }

    /// execd's endpoint, once the sandbox has an address: a 404
    /// `POD_IP_NOT_AVAILABLE` is asked again until `deadline`.
    async fn endpoint(&self, id: &str, deadline: Instant) -> Result<HandleData, BackendError> {
        let proxy = self.config.endpoint_mode == EndpointMode::Proxy;
        let call = self.lifecycle(
            Method::GET,
            &format!(
                "/sandboxes/{id}/endpoints/{}?use_server_proxy={proxy}",
                self.config.execd_port
            ),
            CallKind::Lifecycle,
            format!("execd's endpoint of sandbox {id}"),
        );
        loop {
            match self.json::<Endpoint>(&call).await {
                Ok(endpoint) => return Ok(self.handle_data(endpoint)),
                Err(error)
                    if failure_of(&error).is_some_and(|f| f.code_is("POD_IP_NOT_AVAILABLE"))
                        && Instant::now() + PROBE_PAUSE < deadline =>
                {
                    tokio::time::sleep(PROBE_PAUSE).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Where execd is and which headers reach it: the server's own, plus
    /// the API key only through the server's proxy. The scheme is the
    /// answer's when it names one; else a proxied endpoint (the server's
    /// own route) takes the lifecycle URL's and a direct one
    /// `direct_scheme` (execd's plain HTTP unless a gateway says otherwise),
    /// never the lifecycle URL's.
    fn handle_data(&self, endpoint: Endpoint) -> HandleData {
        let named = endpoint.endpoint.trim().trim_end_matches('/');
        let address = match named.split_once("://") {
            Some((scheme, rest))
                if matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") =>
            {
                format!("{}://{rest}", scheme.to_ascii_lowercase())
            }
            _ => {
                let scheme = match self.config.endpoint_mode {
                    EndpointMode::Proxy if self.server.base_url.starts_with("https://") => "https",
                    EndpointMode::Proxy => "http",
                    EndpointMode::Direct => self.config.direct_scheme.as_str(),
                };
                format!("{scheme}://{named}")
            }
        };
        let mut headers = endpoint.headers;
        headers.remove(API_KEY);
        if self.config.endpoint_mode == EndpointMode::Proxy
            && let Some(key) = &self.server.api_key
        {
            headers.insert(API_KEY.to_string(), key.clone());
        }
        HandleData {
            execd: address,
            headers,
        }
    }

    /// Waits for execd to answer `/ping`.
    async fn wait_for_execd(
        &self,
        id: &str,
        execd: &HandleData,
        deadline: Instant,
    ) -> Result<(), BackendError> {
        let ping = self.execd(
            execd,
            Method::GET,
            "/ping",
            CallKind::Lifecycle,
            format!("ping execd of sandbox {id}"),
        )?;
        loop {
            let answer = self.transport.send(&self.name, &ping).await;
            match answer {
                Ok(_) => return Ok(()),
                Err(error) if Instant::now() + PROBE_PAUSE < deadline => {
                    tracing::debug!(cluster = %self.name, sandbox = id, %error, "execd not ready yet");
                    tokio::time::sleep(PROBE_PAUSE).await;
                }
                Err(error) => {
                    return Err(self.error(
                        ErrorKind::Timeout,
                        format!(
                            "sandbox {id}: execd did not answer within ready_timeout ({}): {}",
                            humantime::format_duration(self.config.ready_timeout),
                            error.message()
                        ),
                    ));
                }
            }
        }
    }

    fn execd(
        &self,
        execd: &HandleData,
        method: Method,
        path: &str,
        kind: CallKind,
        what: String,
    ) -> Result<Call, BackendError> {
        let mut call = Call::new(method, format!("{}{path}", execd.execd), kind, what)
            // A proxy that could not reach execd never delivered the call.
            .not_delivered_when(|failure| failure.code_is("BACKEND_CONNECTION_FAILED"));
        for (name, value) in &execd.headers {
            call = call.header(name, value).map_err(|e| {
                self.error(
                    ErrorKind::Failed,
                    format!("the server's endpoint header: {e}"),
                )
            })?;
        }
        Ok(call)
    }

    fn handle_data_of(&self, sandbox: &SandboxHandle) -> Result<HandleData, BackendError> {
        serde_json::from_str(&sandbox.driver).map_err(|e| {
            self.error(
                ErrorKind::Invalid,
                format!("sandbox {}: not a handle of this driver: {e}", sandbox.id),
            )
        })
    }

    async fn delete(&self, id: &str) -> Result<(), BackendError> {
        self.delete_with(id, |call| call).await
    }

    /// Deletes sandbox `id` with the call as `shape` leaves it.
    async fn delete_with(&self, id: &str, shape: fn(Call) -> Call) -> Result<(), BackendError> {
        let call = shape(self.lifecycle(
            Method::DELETE,
            &format!("/sandboxes/{id}"),
            CallKind::Lifecycle,
            format!("delete sandbox {id}"),
        ));
        match self.transport.send(&self.name, &call).await {
            Ok(_) => Ok(()),
            // Already gone: a repeat DELETE answers 404.
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// A lifecycle GET of page `page` (of [`PAGE_SIZE`]) of the listing at
    /// `path` with query `params`.
    fn page_call(
        &self,
        path: &str,
        params: &[(&str, &str)],
        page: u32,
        what: String,
    ) -> Result<Call, BackendError> {
        let (page, size) = (page.to_string(), PAGE_SIZE.to_string());
        let query = params
            .iter()
            .copied()
            .chain([("page", page.as_str()), ("pageSize", size.as_str())]);
        let url =
            reqwest::Url::parse_with_params(&format!("{}/v1{path}", self.server.base_url), query)
                .map_err(|e| self.error(ErrorKind::Invalid, e))?;
        Ok(self.keyed(Call::new(
            Method::GET,
            url.as_str(),
            CallKind::Lifecycle,
            what,
        )))
    }

    /// Ids of the sandboxes whose metadata has every pair of `filter`.
    async fn list(&self, filter: &[(&str, &str)]) -> Result<Vec<String>, BackendError> {
        let metadata: String = filter
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let mut ids = Vec::new();
        for page in 1.. {
            let call = self.page_call(
                "/sandboxes",
                &[("metadata", metadata.as_str())],
                page,
                format!("list sandboxes with {metadata}"),
            )?;
            let listed: SandboxPage = self.json(&call).await?;
            ids.extend(
                listed
                    .items
                    .into_iter()
                    .filter(|s| !is_gone(s))
                    .map(|s| s.id),
            );
            if !listed.pagination.has_next_page {
                break;
            }
        }
        Ok(ids)
    }
}

fn is_gone(sandbox: &Sandbox) -> bool {
    sandbox
        .status
        .as_ref()
        .is_some_and(|s| matches!(s.state.as_str(), "Terminated" | "Stopping"))
}

/// The server's failure answer behind `error`, if it was one.
fn failure_of(error: &BackendError) -> Option<&HttpFailure> {
    std::error::Error::source(error).and_then(|source| source.downcast_ref::<HttpFailure>())
}

#[async_trait]
impl Backend for OpenSandboxBackend {
    fn name(&self) -> &str {
        &self.name
    }

    /// Without [`Backend::pools`], [`Backend::recycling`] or
    /// [`Backend::pulls`]: the server's own pools (`pool`, `pools`) fill
    /// claims unasked, so the engine counts no warm replicas it never asked
    /// for and paces every claim as a create (a pool take is a
    /// `POST /v1/sandboxes` too); no API stops a sandbox's processes or
    /// resets its files; the server pulls images itself.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            lease_ttl: Some(self.config.timeout),
            exec: ExecGuarantees {
                // execd runs `bash -c` on a string.
                argv: false,
                // Merged, the command's stderr is its stdout (`exec 2>&1`):
                // one file, in the order written.
                ordered_merge: true,
                kills_process_group: true,
            },
            images: Images::AnyReference,
        }
    }

    /// The lifecycle API's snapshots (`snapshots` module); a server whose
    /// runtime has none answers a snapshot with 501, [`ErrorKind::Unsupported`].
    fn snapshots(&self) -> Option<&dyn Snapshots> {
        Some(self)
    }

    async fn preflight(&self) -> Preflight {
        let mut found = Preflight::default();
        // A list of one proves the URL, the key and the API together.
        let call = self.lifecycle(
            Method::GET,
            "/sandboxes?page=1&pageSize=1",
            CallKind::Lifecycle,
            "list sandboxes".into(),
        );
        match self.transport.send(&self.name, &call).await {
            Ok(_) => found
                .notes
                .push(format!("{} answers", self.server.base_url)),
            Err(error) => {
                let hint = match failure_of(&error).map(|f| f.status.as_u16()) {
                    Some(401 | 403) => format!(" (check the key in ${})", self.config.api_key_env),
                    _ => String::new(),
                };
                found.failures.push(format!("{}{hint}", error.message()));
            }
        }
        if self.server.api_key.is_none() {
            found.warnings.push(format!(
                "no API key: ${} is not set",
                self.config.api_key_env
            ));
        }
        found
    }

    async fn capacity(&self) -> Result<Capacity, BackendError> {
        Ok(Capacity {
            sandbox_slots: self.config.max_sandboxes,
            ..Capacity::default()
        })
    }

    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError> {
        // The server has no templates: the spec is kept for the creates.
        let run = spec
            .run_id()
            .map_err(|e| self.error(ErrorKind::Invalid, e))?;
        self.check_network(spec)?;
        self.templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((run.clone(), spec.name.clone()), spec.clone());
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
        let spec = self.spec_of(&template.run_id, &template.name)?;
        self.make(&spec, template, labels, Source::Image, deadline)
            .await
    }

    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        self.run_command(sandbox, request, output).await
    }

    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError> {
        let execd = self.handle_data_of(sandbox)?;
        let (content_type, body) = crate::files::upload_body(path, contents, mode);
        let call = self
            .execd(
                &execd,
                Method::POST,
                "/files/upload",
                CallKind::File,
                format!("upload {path} to sandbox {}", sandbox.id),
            )?
            // Writing the same bytes twice is writing them once.
            .idempotent(true)
            .bytes(&content_type, body);
        self.transport.send(&self.name, &call).await.map(drop)
    }

    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        let execd = self.handle_data_of(sandbox)?;
        self.download(&execd, sandbox, path, None)
            .await
            .map(|head| head.bytes)
    }

    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        // The engine retries a release as a whole.
        self.delete_with(&sandbox.id, |call| call.retried_by_caller())
            .await
    }

    async fn renew(&self, sandbox: &SandboxHandle, ttl: Duration) -> Result<(), BackendError> {
        let expires = jiff::Timestamp::now()
            .checked_add(
                jiff::SignedDuration::try_from(ttl)
                    .map_err(|e| self.error(ErrorKind::Invalid, e))?,
            )
            .map_err(|e| self.error(ErrorKind::Invalid, e))?;
        let call = self
            .lifecycle(
                Method::POST,
                &format!("/sandboxes/{}/renew-expiration", sandbox.id),
                CallKind::Lifecycle,
                format!("renew sandbox {}", sandbox.id),
            )
            // An absolute expiry set twice is set once; the engine retries
            // a renewal as a whole.
            .idempotent(true)
            .retried_by_caller()
            .json(serde_json::json!({"expiresAt": expires.to_string()}));
        match self.transport.send(&self.name, &call).await {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == ErrorKind::NotFound => Err(self.error(
                ErrorKind::SandboxLost,
                format!("sandbox {} is gone (expired or deleted)", sandbox.id),
            )),
            Err(error) => Err(error),
        }
    }

    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError> {
        Ok(Owned {
            sandboxes: self.list(&[(LABEL_RUN_ID, run_id.as_str())]).await?,
            snapshots: self
                .snapshots_of_run(run_id)
                .await?
                .into_iter()
                .map(|snapshot| snapshot.id)
                .collect(),
            ..Owned::default()
        })
    }

    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError> {
        let ids = self.list(&[(LABEL_RUN_ID, run_id.as_str())]).await?;
        let snapshots = self.snapshots_of_run(run_id).await?;
        // Everything is tried, so one object the server refuses leaves no
        // other behind; the first refusal says what went wrong.
        let mut refused = Vec::new();
        for id in &ids {
            if let Err(error) = self.delete(id).await {
                refused.push(error);
            }
        }
        for snapshot in &snapshots {
            if let Err(error) = self.delete_snapshot_id(&snapshot.id).await {
                refused.push(error);
            }
        }
        if let Some(first) = refused.first() {
            return Err(self.error(
                first.kind(),
                format!(
                    "{} of the {} objects of run {run_id} ({} sandboxes, {} snapshots) could not \
                     be deleted; the first: {}",
                    refused.len(),
                    ids.len() + snapshots.len(),
                    ids.len(),
                    snapshots.len(),
                    first.message()
                ),
            ));
        }
        self.templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(run, _), _| run != run_id);
        Ok(Reaped {
            sandboxes: ids.len(),
            snapshots: snapshots.len(),
            ..Reaped::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn backend(mode: EndpointMode) -> OpenSandboxBackend {
        backend_of(OpenSandboxConfig {
            endpoint_mode: mode,
            ..OpenSandboxConfig::default()
        })
        .unwrap()
    }

    fn backend_of(config: OpenSandboxConfig) -> Result<OpenSandboxBackend, BackendError> {
        let clients = Clients::new();
        OpenSandboxBackend::with_server(
            "east",
            config,
            "http://127.0.0.1:9",
            Some("secret".into()),
            &clients,
        )
    }

    fn mapped(image: &str, pool: &str) -> BTreeMap<String, String> {
        [(image.to_string(), pool.to_string())].into()
    }

    #[test]
    fn an_empty_pool_name_is_refused_naming_the_cluster_and_key() {
        let error = backend_of(OpenSandboxConfig {
            pools: mapped("calc", ""),
            ..OpenSandboxConfig::default()
        })
        .err()
        .expect("an empty pool name was taken");
        assert_eq!(error.kind(), ErrorKind::Invalid);
        assert!(
            error.to_string().starts_with(
                r#"east: clusters.east.opensandbox.pools."calc": the pool name is empty"#
            ),
            "{error}"
        );
    }

    fn endpoint() -> Endpoint {
        Endpoint {
            endpoint: "127.0.0.1:5000/".into(),
            headers: [
                (API_KEY.to_string(), "from-the-server".to_string()),
                ("OpenSandbox-Secure-Access".to_string(), "t".to_string()),
            ]
            .into(),
        }
    }

    fn backend_at(base_url: &str, config: OpenSandboxConfig) -> OpenSandboxBackend {
        OpenSandboxBackend::with_server("east", config, base_url, None, &Clients::new()).unwrap()
    }

    fn at(endpoint: &str) -> Endpoint {
        Endpoint {
            endpoint: endpoint.into(),
            headers: BTreeMap::new(),
        }
    }

    #[test]
    fn a_direct_endpoint_takes_its_scheme_from_the_answer_never_from_the_lifecycle_url() {
        let tls = backend_at("https://sandbox.example", OpenSandboxConfig::default());
        let plain = backend_at("http://127.0.0.1:9", OpenSandboxConfig::default());
        let gateway = backend_at(
            "http://127.0.0.1:9",
            OpenSandboxConfig {
                direct_scheme: crate::Scheme::Https,
                ..OpenSandboxConfig::default()
            },
        );
        let proxied = backend_at(
            "https://sandbox.example",
            OpenSandboxConfig {
                endpoint_mode: EndpointMode::Proxy,
                ..OpenSandboxConfig::default()
            },
        );
        let cases = [
            // Without a scheme: execd's plain HTTP, though the API is HTTPS.
            (&tls, "10.0.0.7:44772", "http://10.0.0.7:44772"),
            // The answer's own scheme wins, either way round.
            (
                &tls,
                "HTTPS://gw.example/s1/44772/",
                "https://gw.example/s1/44772",
            ),
            (
                &plain,
                "https://gw.example/s1/44772",
                "https://gw.example/s1/44772",
            ),
            // A TLS gateway that names no scheme is configured as one.
            (
                &gateway,
                "s1-44772.gw.example",
                "https://s1-44772.gw.example",
            ),
            // The server's proxy route is the server's: its scheme.
            (
                &proxied,
                "sandbox.example/v1/sandboxes/s1/proxy/44772",
                "https://sandbox.example/v1/sandboxes/s1/proxy/44772",
            ),
        ];
        for (backend, endpoint, execd) in cases {
            assert_eq!(backend.handle_data(at(endpoint)).execd, execd, "{endpoint}");
        }
    }

    #[test]
    fn the_key_never_goes_to_a_direct_endpoint_and_goes_through_the_proxy() {
        let direct = backend(EndpointMode::Direct).handle_data(endpoint());
        assert_eq!(direct.execd, "http://127.0.0.1:5000");
        assert!(!direct.headers.contains_key(API_KEY), "{direct:?}");
        assert!(!direct.headers.values().any(|v| v == "secret"));
        assert_eq!(direct.headers["OpenSandbox-Secure-Access"], "t");
        let proxied = backend(EndpointMode::Proxy).handle_data(endpoint());
        assert_eq!(proxied.headers[API_KEY], "secret");
    }
}
