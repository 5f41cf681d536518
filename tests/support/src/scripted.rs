//! [`Scripted`]: a [`Backend`] that keeps its templates, pools and
//! sandboxes in memory, answers commands from a script, and fails the calls
//! a test tells it to fail — for the engine's retry, lease, breaker and
//! release logic, without processes.
//!
//! Pools are ready as soon as they are sized, and refused when they do not
//! fit the reported sandbox slots. Commands answer with what
//! the script's responder returns (by default exit 0, no output), after
//! its delay. With a lease TTL, a sandbox not renewed in time expires: a
//! command on it (or one it was running) fails with
//! [`ErrorKind::SandboxLost`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandfleet_core::{
    Backend, BackendError, Capabilities, Capacity, ErrorKind, ExecGuarantees, ExecRequest,
    ExecResult, Images, Labels, OutputSink, Owned, PoolStatus, Preflight, Reaped, Recycling, RunId,
    SandboxHandle, TemplateRef, TemplateSpec, WarmPools,
};

/// The calls a test can fail and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `ensure_template`.
    EnsureTemplate,
    /// `warm`.
    Warm,
    /// `wait_pool_ready`.
    WaitReady,
    /// `claim`.
    Claim,
    /// `exec`.
    Exec,
    /// `renew`.
    Renew,
    /// `release`.
    Release,
    /// `reap`.
    Reap,
}

/// What a scripted command returns, and how long it takes.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// The result.
    pub result: ExecResult,
    /// How long the command runs.
    pub delay: Duration,
}

type Responder = Box<dyn Fn(&ExecRequest) -> Reply + Send + Sync>;

struct Sandbox {
    run_id: RunId,
    /// When it expires unless renewed (with a lease TTL).
    expires: Option<Instant>,
}

#[derive(Default)]
struct State {
    templates: BTreeMap<(RunId, String), TemplateRef>,
    pools: BTreeMap<(RunId, String), u32>,
    sandboxes: HashMap<String, Sandbox>,
    next_id: u64,
    /// Calls so far, by operation, and when each was made.
    calls: BTreeMap<Op, Vec<Instant>>,
    /// Failures to inject: the nth call (from 1) of an operation.
    failures: HashMap<(Op, usize), ErrorKind>,
    /// Every renewal from this call on fails.
    renewals_fail_from: Option<usize>,
    release_delay: Duration,
}

/// An in-memory backend whose failures a test schedules.
pub struct Scripted {
    name: String,
    lease_ttl: Option<Duration>,
    capacity: Capacity,
    responder: Responder,
    state: Mutex<State>,
}

impl Scripted {
    /// A backend named `name` with unbounded capacity, no lease TTL, and
    /// commands that exit 0 at once.
    pub fn new(name: &str) -> Self {
        Scripted {
            name: name.to_string(),
            lease_ttl: None,
            capacity: Capacity {
                nodes: Some(1),
                cpu_milli: Some(64_000),
                memory_mib: Some(262_144),
                disk_mib_per_node: Some(1 << 20),
                sandbox_slots: Some(1024),
                reserves_requests: false,
            },
            responder: Box::new(|_| Reply::default()),
            state: Mutex::new(State::default()),
        }
    }

    /// Claimed sandboxes expire `ttl` after their claim or last renewal.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// Reports `capacity`.
    pub fn with_capacity(mut self, capacity: Capacity) -> Self {
        self.capacity = capacity;
        self
    }

    /// Answers commands with `responder`.
    pub fn respond(
        mut self,
        responder: impl Fn(&ExecRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.responder = Box::new(responder);
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("scripted backend lock poisoned")
    }

    /// Makes the `nth` call (from 1) of `op` fail with `kind`.
    pub fn fail(&self, op: Op, nth: usize, kind: ErrorKind) {
        self.state().failures.insert((op, nth), kind);
    }

    /// Makes every renewal from the `nth` (from 1) on fail.
    pub fn fail_renewals_from(&self, nth: usize) {
        self.state().renewals_fail_from = Some(nth);
    }

    /// Makes every release take `delay`.
    pub fn delay_releases(&self, delay: Duration) {
        self.state().release_delay = delay;
    }

    /// How many times `op` was called.
    pub fn calls(&self, op: Op) -> usize {
        self.state().calls.get(&op).map_or(0, Vec::len)
    }

    /// When each call of `op` was made.
    pub fn call_times(&self, op: Op) -> Vec<Instant> {
        self.state().calls.get(&op).cloned().unwrap_or_default()
    }

    /// Sandboxes of `run_id` that exist (claimed, not released).
    pub fn live(&self, run_id: &RunId) -> usize {
        self.state()
            .sandboxes
            .values()
            .filter(|sandbox| sandbox.run_id == *run_id)
            .count()
    }

    /// Records a call of `op` and returns its scheduled failure, if any.
    fn call(&self, op: Op) -> Result<(), BackendError> {
        let mut state = self.state();
        let calls = state.calls.entry(op).or_default();
        calls.push(Instant::now());
        let nth = calls.len();
        let renewal_fails =
            op == Op::Renew && state.renewals_fail_from.is_some_and(|from| nth >= from);
        let kind = state
            .failures
            .remove(&(op, nth))
            .or(renewal_fails.then_some(ErrorKind::Unavailable));
        match kind {
            Some(kind) => Err(BackendError::new(
                kind,
                &self.name,
                format!("{op:?} #{nth}: injected {}", kind.name()),
            )),
            None => Ok(()),
        }
    }

    fn sandbox_error(&self, kind: ErrorKind, id: &str, what: &str) -> BackendError {
        BackendError::new(kind, &self.name, format!("sandbox {id}: {what}"))
    }

    /// Fails unless sandbox `id` exists and has not expired.
    fn check_alive(&self, id: &str) -> Result<(), BackendError> {
        let state = self.state();
        let sandbox = state
            .sandboxes
            .get(id)
            .ok_or_else(|| self.sandbox_error(ErrorKind::NotFound, id, "not found"))?;
        match sandbox.expires {
            Some(at) if Instant::now() > at => {
                Err(self.sandbox_error(ErrorKind::SandboxLost, id, "its lease expired"))
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Backend for Scripted {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            lease_ttl: self.lease_ttl,
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

    async fn preflight(&self) -> Preflight {
        Preflight::default()
    }

    async fn capacity(&self) -> Result<Capacity, BackendError> {
        Ok(self.capacity)
    }

    async fn ensure_template(&self, spec: &TemplateSpec) -> Result<TemplateRef, BackendError> {
        self.call(Op::EnsureTemplate)?;
        let run = spec
            .run_id()
            .map_err(|e| BackendError::new(ErrorKind::Invalid, &self.name, e))?;
        let template = TemplateRef {
            name: spec.name.clone(),
            image: spec.image.clone(),
            run_id: run.clone(),
        };
        self.state()
            .templates
            .insert((run, spec.name.clone()), template.clone());
        Ok(template)
    }

    async fn claim(
        &self,
        template: &TemplateRef,
        _labels: &Labels,
        _deadline: Instant,
    ) -> Result<SandboxHandle, BackendError> {
        self.call(Op::Claim)?;
        let mut state = self.state();
        state.next_id += 1;
        let id = format!("{}-{}", template.name, state.next_id);
        let expires = self.lease_ttl.map(|ttl| Instant::now() + ttl);
        state.sandboxes.insert(
            id.clone(),
            Sandbox {
                run_id: template.run_id.clone(),
                expires,
            },
        );
        Ok(SandboxHandle {
            id: id.clone(),
            cluster: self.name.clone(),
            template: template.name.clone(),
            run_id: template.run_id.clone(),
            hostname: id,
            endpoint: None,
            driver: String::new(),
        })
    }

    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        request: &ExecRequest,
        _output: Option<&OutputSink>,
    ) -> Result<ExecResult, BackendError> {
        self.call(Op::Exec)?;
        self.check_alive(&sandbox.id)?;
        let reply = (self.responder)(request);
        tokio::time::sleep(reply.delay).await;
        // A sandbox that expired while the command ran took its result with it.
        self.check_alive(&sandbox.id)?;
        Ok(reply.result)
    }

    async fn put_file(
        &self,
        sandbox: &SandboxHandle,
        _: &str,
        _: &[u8],
        _: u32,
    ) -> Result<(), BackendError> {
        self.check_alive(&sandbox.id)
    }

    async fn get_file(&self, sandbox: &SandboxHandle, path: &str) -> Result<Vec<u8>, BackendError> {
        self.check_alive(&sandbox.id)?;
        Err(self.sandbox_error(ErrorKind::NotFound, &sandbox.id, &format!("no file {path}")))
    }

    async fn release(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        let delay = self.state().release_delay;
        tokio::time::sleep(delay).await;
        self.call(Op::Release)?;
        self.state().sandboxes.remove(&sandbox.id);
        Ok(())
    }

    async fn renew(&self, sandbox: &SandboxHandle, ttl: Duration) -> Result<(), BackendError> {
        self.call(Op::Renew)?;
        self.check_alive(&sandbox.id)?;
        if let Some(held) = self.state().sandboxes.get_mut(&sandbox.id) {
            held.expires = Some(Instant::now() + ttl);
        }
        Ok(())
    }

    async fn list_owned(&self, run_id: &RunId) -> Result<Owned, BackendError> {
        let state = self.state();
        Ok(Owned {
            templates: names_of(&state.templates, run_id),
            pools: names_of(&state.pools, run_id),
            sandboxes: state
                .sandboxes
                .iter()
                .filter(|(_, sandbox)| sandbox.run_id == *run_id)
                .map(|(id, _)| id.clone())
                .collect(),
            ..Owned::default()
        })
    }

    async fn reap(&self, run_id: &RunId) -> Result<Reaped, BackendError> {
        self.call(Op::Reap)?;
        let mut state = self.state();
        let before = (
            state.templates.len(),
            state.pools.len(),
            state.sandboxes.len(),
        );
        state.templates.retain(|(run, _), _| run != run_id);
        state.pools.retain(|(run, _), _| run != run_id);
        state
            .sandboxes
            .retain(|_, sandbox| sandbox.run_id != *run_id);
        Ok(Reaped {
            templates: before.0 - state.templates.len(),
            pools: before.1 - state.pools.len(),
            sandboxes: before.2 - state.sandboxes.len(),
            ..Reaped::default()
        })
    }
}

#[async_trait]
impl WarmPools for Scripted {
    async fn warm(
        &self,
        template: &TemplateRef,
        replicas: u32,
        _: &Labels,
    ) -> Result<(), BackendError> {
        self.call(Op::Warm)?;
        let mut state = self.state();
        let key = (template.run_id.clone(), template.name.clone());
        let others: u32 = state
            .pools
            .iter()
            .filter(|(pool, _)| **pool != key)
            .map(|(_, size)| size)
            .sum();
        // Like a backend with a fixed number of slots, refuse pools that
        // cannot fit rather than leave them short.
        if let Some(slots) = self.capacity.sandbox_slots
            && others + replicas > slots
        {
            return Err(BackendError::new(
                ErrorKind::Invalid,
                &self.name,
                format!(
                    "a pool of {replicas} for {} does not fit: {others} of {slots} slots are warm",
                    template.name
                ),
            ));
        }
        state.pools.insert(key, replicas);
        Ok(())
    }

    async fn unwarm(&self, template: &TemplateRef) -> Result<(), BackendError> {
        self.state()
            .pools
            .remove(&(template.run_id.clone(), template.name.clone()));
        Ok(())
    }

    async fn pool_status(&self, template: &TemplateRef) -> Result<PoolStatus, BackendError> {
        let size = self
            .state()
            .pools
            .get(&(template.run_id.clone(), template.name.clone()))
            .copied()
            .unwrap_or(0);
        Ok(PoolStatus {
            desired: size,
            ready: size,
        })
    }

    async fn wait_pool_ready(
        &self,
        template: &TemplateRef,
        at_least: u32,
        _deadline: Instant,
    ) -> Result<PoolStatus, BackendError> {
        self.call(Op::WaitReady)?;
        let status = self.pool_status(template).await?;
        if status.ready >= at_least {
            Ok(status)
        } else {
            Err(BackendError::new(
                ErrorKind::Timeout,
                &self.name,
                format!(
                    "pool of {} has {} of {at_least}",
                    template.name, status.ready
                ),
            ))
        }
    }
}

#[async_trait]
impl Recycling for Scripted {
    async fn scrub(&self, sandbox: &SandboxHandle) -> Result<(), BackendError> {
        self.check_alive(&sandbox.id)
    }
}

/// The names `run_id` owns in a map keyed by (run, name).
fn names_of<V>(owned: &BTreeMap<(RunId, String), V>, run_id: &RunId) -> Vec<String> {
    owned
        .keys()
        .filter(|(run, _)| run == run_id)
        .map(|(_, name)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(run: &RunId) -> TemplateSpec {
        TemplateSpec {
            name: "t".into(),
            image: "img".into(),
            cpu_milli: 1000,
            memory_mib: 512,
            disk_mib: 1024,
            network: false,
            env: Default::default(),
            labels: run.labels(),
        }
    }

    #[tokio::test]
    async fn scheduled_failures_hit_the_nth_call_only() {
        let backend = Scripted::new("s");
        let run = RunId::new("r").unwrap();
        let template = backend.ensure_template(&spec(&run)).await.unwrap();
        backend.fail(Op::Claim, 2, ErrorKind::Conflict);
        let deadline = Instant::now();
        backend
            .claim(&template, &run.labels(), deadline)
            .await
            .unwrap();
        let error = backend
            .claim(&template, &run.labels(), deadline)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Conflict);
        backend
            .claim(&template, &run.labels(), deadline)
            .await
            .unwrap();
        assert_eq!((backend.calls(Op::Claim), backend.live(&run)), (3, 2));
        assert_eq!(backend.reap(&run).await.unwrap().sandboxes, 2);
    }

    #[tokio::test]
    async fn an_unrenewed_sandbox_expires() {
        let backend = Scripted::new("s").with_lease_ttl(Duration::from_millis(50));
        let run = RunId::new("r").unwrap();
        let template = backend.ensure_template(&spec(&run)).await.unwrap();
        let sandbox = backend
            .claim(&template, &run.labels(), Instant::now())
            .await
            .unwrap();
        let request = ExecRequest::default();
        backend.exec(&sandbox, &request, None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        let error = backend.exec(&sandbox, &request, None).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::SandboxLost);
    }
}
