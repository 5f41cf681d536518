//! A backend that passes every call to the local backend and records the
//! warm pool and claim calls, in order, and every exec's argv.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ExecRequest, ExecResult, Labels, OutputSink,
    Owned, PoolStatus, Preflight, Reaped, Recycling, RunId, SandboxHandle, TemplateRef,
    TemplateSpec, WarmPools,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    Warm(String, u32),
    Unwarm(String),
    Claim(String),
}

pub(crate) struct Recording {
    pub(crate) inner: Arc<dyn Backend>,
    pub(crate) events: Mutex<Vec<Event>>,
    /// The argv of every exec, in order.
    pub(crate) execs: Mutex<Vec<Vec<String>>>,
    /// Extra warm sandboxes started with every claim: a backend that
    /// over-creates, for the breaker.
    pub(crate) leak_per_claim: u32,
    /// Declares that the backend cannot scrub, as OpenSandbox does.
    pub(crate) without_scrub: bool,
}

impl Recording {
    pub(crate) fn new(inner: Arc<dyn Backend>) -> Self {
        Recording {
            inner,
            events: Mutex::new(Vec::new()),
            execs: Mutex::new(Vec::new()),
            leak_per_claim: 0,
            without_scrub: false,
        }
    }

    pub(crate) fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    fn inner_pools(&self) -> &dyn WarmPools {
        self.inner
            .pools()
            .expect("the local backend has warm pools")
    }

    fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }
}

#[async_trait]
impl Backend for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn pools(&self) -> Option<&dyn WarmPools> {
        Some(self)
    }
    fn recycling(&self) -> Option<&dyn Recycling> {
        if self.without_scrub {
            None
        } else {
            self.inner.recycling()
        }
    }
    async fn preflight(&self) -> Preflight {
        self.inner.preflight().await
    }
    async fn capacity(&self) -> Result<Capacity, BackendError> {
        self.inner.capacity().await
    }
    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError> {
        self.inner.ensure_template(spec).await
    }
    async fn claim(
        &self,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        self.record(Event::Claim(template.image.clone()));
        let handle = self.inner.claim(template, labels, deadline).await?;
        if self.leak_per_claim > 0 {
            let asked = self.inner_pools().pool_status(template).await?.desired;
            self.inner_pools()
                .warm(template, asked + self.leak_per_claim, labels)
                .await?;
        }
        Ok(handle)
    }
    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        self.execs.lock().unwrap().push(request.argv.clone());
        self.inner.exec(sandbox, request, output).await
    }
    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), BackendError> {
        self.inner.put_file(sandbox, path, contents, mode).await
    }
    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        self.inner.get_file(sandbox, path).await
    }
    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.release(sandbox).await
    }
    async fn renew(&self, sandbox: &SandboxHandle, ttl: Duration) -> Result<(), BackendError> {
        self.inner.renew(sandbox, ttl).await
    }
    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError> {
        self.inner.list_owned(run_id).await
    }
    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError> {
        self.inner.reap(run_id).await
    }
}

#[async_trait]
impl WarmPools for Recording {
    async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
        labels: &Labels,
    ) -> Result<(), BackendError> {
        self.record(Event::Warm(template.image.clone(), replicas));
        self.inner_pools().warm(template, replicas, labels).await
    }
    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError> {
        self.record(Event::Unwarm(template.image.clone()));
        self.inner_pools().unwarm(template).await
    }
    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError> {
        self.inner_pools().pool_status(template).await
    }
    async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        deadline: Instant,
    ) -> Result<PoolStatus, BackendError> {
        self.inner_pools()
            .wait_pool_ready(template, at_least, deadline)
            .await
    }
}
