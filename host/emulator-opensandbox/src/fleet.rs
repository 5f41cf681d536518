//! The sandboxes the emulator holds: each a local sandbox (claimed from the
//! local backend, or forked from one of its snapshots) with its own execd on
//! its own loopback address, created, listed, patched, renewed, and deleted
//! on request or at its `expiresAt`; and their snapshots (`snapshots`).

mod snapshots;

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use jiff::Timestamp;
use sandfleet_core::{Backend, ErrorKind, TemplateRef};
use sandfleet_emulator_runtime::{CREATE_TIMEOUT, CreateGate, Resolved, SandboxHost, Shape};
use tokio::net::TcpSocket;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::commands::SandboxExec;
use crate::counters::Counters;
use crate::error::ApiError;
use crate::execd::{self, EXECD_PORT, Tail};
use crate::faults::Faults;
use crate::random::Rng;

pub(crate) use self::snapshots::{Snapshot, SnapshotStore};

/// execd addresses are drawn from 127.64.0.0/10, away from 127.0.0.1 and
/// the low addresses other tools use.
const EXECD_NET: u32 = 0x7F40_0000;
const EXECD_NET_SIZE: u32 = 1 << 22;

/// A create, validated.
#[derive(Debug, Clone)]
pub(crate) struct CreateSpec {
    /// The image; of a sandbox made of a snapshot, the image of the sandbox
    /// the snapshot was taken of.
    pub(crate) image: String,
    /// The snapshot it is made of (`snapshotId`), instead of `image`.
    pub(crate) snapshot: Option<String>,
    pub(crate) entrypoint: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) extensions: BTreeMap<String, String>,
    /// Seconds to live; `None` never expires.
    pub(crate) timeout: Option<u64>,
    pub(crate) cpu_milli: u32,
    pub(crate) memory_mib: u32,
    pub(crate) limits: BTreeMap<String, String>,
    pub(crate) requests: BTreeMap<String, String>,
    pub(crate) pooled: bool,
    /// The egress policy asked for (one that denies all egress: the
    /// emulator's sandboxes have no network, with or without one).
    pub(crate) network_policy: Option<serde_json::Value>,
}

/// One sandbox.
pub(crate) struct Sandbox {
    pub(crate) id: String,
    pub(crate) spec: CreateSpec,
    pub(crate) metadata: Mutex<BTreeMap<String, String>>,
    pub(crate) created_at: Timestamp,
    pub(crate) expires_at: Mutex<Option<Timestamp>>,
    /// Where its execd listens (port [`EXECD_PORT`]).
    pub(crate) execd_ip: Ipv4Addr,
    exec: Arc<SandboxExec>,
    execd_stop: CancellationToken,
}

impl Sandbox {
    pub(crate) fn metadata(&self) -> BTreeMap<String, String> {
        self.metadata
            .lock()
            .expect("metadata lock poisoned")
            .clone()
    }

    pub(crate) fn expires_at(&self) -> Option<Timestamp> {
        *self.expires_at.lock().expect("expiry lock poisoned")
    }
}

/// Everything the emulator holds.
pub(crate) struct Fleet {
    host: SandboxHost,
    sandboxes: Mutex<BTreeMap<String, Arc<Sandbox>>>,
    pub(crate) snapshots: SnapshotStore,
    pub(crate) counters: Arc<Counters>,
    pub(crate) faults: Faults,
    ids: Arc<Mutex<Rng>>,
    next_address: AtomicU32,
    /// Sandboxes that exist or are being made.
    held: AtomicU32,
    /// Pooled sandboxes that exist or are being made.
    pooled: AtomicU32,
    port_collided: AtomicBool,
    expiry_changed: Notify,
    gate: CreateGate,
}

fn shutting_down() -> ApiError {
    ApiError::runtime(
        StatusCode::SERVICE_UNAVAILABLE,
        "SANDBOX_CREATE_FAILED",
        "Failed to create sandbox: the server is shutting down",
    )
}

impl Fleet {
    pub(crate) fn new(host: SandboxHost, faults: Faults) -> Arc<Fleet> {
        let mut rng = Rng::from_entropy();
        let start = (rng.next_u64() as u32) % EXECD_NET_SIZE;
        Arc::new(Fleet {
            host,
            sandboxes: Mutex::new(BTreeMap::new()),
            snapshots: SnapshotStore::default(),
            counters: Arc::new(Counters::default()),
            faults,
            ids: Arc::new(Mutex::new(rng)),
            next_address: AtomicU32::new(start),
            held: AtomicU32::new(0),
            pooled: AtomicU32::new(0),
            port_collided: AtomicBool::new(false),
            expiry_changed: Notify::new(),
            gate: CreateGate::default(),
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Sandbox>>> {
        self.sandboxes.lock().expect("sandboxes lock poisoned")
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.map().get(id).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Sandbox>> {
        self.map().values().cloned().collect()
    }

    pub(crate) fn live(&self) -> usize {
        self.map().len()
    }

    pub(crate) fn image_names(&self) -> Vec<String> {
        self.host.images().names()
    }

    /// Makes sure the image of a create can be made: a directory image, or
    /// an OCI image pulled into the layer store unless it is there (as the
    /// Docker runtime pulls an image it does not have, answering a failed
    /// pull with `SANDBOX_IMAGE_PULL_FAILED`).
    async fn ensure_image(&self, image: &str) -> Result<(), ApiError> {
        let why = match self.host.resolve(image) {
            Resolved::Directory => return Ok(()),
            Resolved::Oci(reference) => return self.pull(image, &reference).await,
            Resolved::NeedsIsolation => "; OCI images need --runtime namespaces",
            Resolved::Unknown => {
                "; map it with --image REF=DIR or { oci = \"REF\" } in --images-from, or name a \
                 reference (registry/repository:tag)"
            }
        };
        Err(ApiError::runtime(
            StatusCode::BAD_REQUEST,
            "IMAGE_NOT_FOUND",
            format!(
                "Image {image} is not known to this emulator (known: {}){why}",
                self.image_names().join(", ")
            ),
        ))
    }

    /// Pulls OCI image `image` into the layer store unless it is there.
    async fn pull(&self, image: &str, reference: &str) -> Result<(), ApiError> {
        self.host
            .backend()
            .pull_oci(reference, false)
            .await
            .map(drop)
            .map_err(|error| {
                ApiError::runtime(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "SANDBOX_IMAGE_PULL_FAILED",
                    format!("Failed to pull image {image}: {error}"),
                )
            })
    }

    async fn template(&self, spec: &CreateSpec) -> Result<TemplateRef, ApiError> {
        let key = format!("{}|{}|{}", spec.image, spec.cpu_milli, spec.memory_mib);
        self.host
            .template(
                &key,
                &spec.image,
                Shape {
                    cpu_milli: spec.cpu_milli,
                    memory_mib: spec.memory_mib,
                    disk_mib: Shape::DEFAULT_DISK_MIB,
                    network: false,
                },
            )
            .await
            .map_err(|e| {
                ApiError::runtime(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "SANDBOX_CREATE_FAILED",
                    format!("Failed to prepare image {}: {e}", spec.image),
                )
            })
    }

    /// Reserves an execd address: a socket bound to `127.x.y.z:44772` that
    /// does not listen yet, so a connect is refused until it does.
    fn reserve_address(&self) -> Result<TcpSocket, ApiError> {
        let mut last = None;
        for _ in 0..4096 {
            let n = self.next_address.fetch_add(1, Ordering::Relaxed) % EXECD_NET_SIZE;
            let ip = Ipv4Addr::from(EXECD_NET | n);
            if matches!(ip.octets()[3], 0 | 255) {
                continue;
            }
            let socket = TcpSocket::new_v4().map_err(|e| internal(format!("execd socket: {e}")))?;
            match socket.bind(SocketAddr::V4(SocketAddrV4::new(ip, EXECD_PORT))) {
                Ok(()) => return Ok(socket),
                Err(e) => last = Some(e),
            }
        }
        Err(internal(format!(
            "no free execd address in 127.64.0.0/10: {}",
            last.map(|e| e.to_string()).unwrap_or_default()
        )))
    }

    /// Creates a sandbox: 202's body is made by the caller from the result.
    pub(crate) async fn create(
        self: &Arc<Self>,
        mut spec: CreateSpec,
    ) -> Result<Arc<Sandbox>, ApiError> {
        let Some(_creating) = self.gate.enter() else {
            return Err(shutting_down());
        };
        let restore = match &spec.snapshot {
            Some(snapshot) => {
                let (local, image) = self.restorable(snapshot)?;
                spec.image = image;
                Some(local)
            }
            None => {
                self.ensure_image(&spec.image).await?;
                None
            }
        };
        if self.gate.is_closed() {
            return Err(shutting_down());
        }
        if self.faults.port_500 && !self.port_collided.swap(true, Ordering::AcqRel) {
            return Err(ApiError::runtime(
                StatusCode::INTERNAL_SERVER_ERROR,
                "SANDBOX_CREATE_FAILED",
                format!(
                    "Failed to create sandbox: Bind for 0.0.0.0:{EXECD_PORT} failed: port is already \
                     allocated (fault port-500)"
                ),
            ));
        }
        let held = self.take_slot(Counted::Held, self.faults.quota, over_quota)?;
        let pool_slot = if spec.pooled {
            Some(self.take_slot(Counted::Pooled, self.faults.pool_max, pool_exhausted)?)
        } else {
            None
        };
        let id = self.ids.lock().expect("id generator lock poisoned").uuid();
        // A snapshot's sandbox has the shape of the one it was taken of.
        let made = match &restore {
            Some(local) => self.fork(local, &id).await,
            None => {
                let template = self.template(&spec).await?;
                self.host.claim(&template, &id).await
            }
        };
        let handle = made.map_err(|e| match e.kind() {
            ErrorKind::Timeout => ApiError::runtime(
                StatusCode::GATEWAY_TIMEOUT,
                "POD_READY_TIMEOUT",
                format!(
                    "Sandbox {id} was not ready within {}s: {e}",
                    CREATE_TIMEOUT.as_secs()
                ),
            ),
            _ => ApiError::runtime(
                StatusCode::INTERNAL_SERVER_ERROR,
                "SANDBOX_CREATE_FAILED",
                format!("Failed to create sandbox {id}: {e}"),
            ),
        })?;
        if self.gate.is_closed() {
            let _ = self.host.backend().release(&handle).await;
            return Err(shutting_down());
        }
        let socket = match self.reserve_address() {
            Ok(socket) => socket,
            Err(error) => {
                let _ = self.host.backend().release(&handle).await;
                return Err(error);
            }
        };
        let execd_ip = match socket.local_addr() {
            Ok(SocketAddr::V4(addr)) => *addr.ip(),
            _ => unreachable!("execd sockets are bound to IPv4 addresses"),
        };
        let exec = Arc::new(SandboxExec {
            backend: Arc::clone(self.host.backend()),
            handle,
            env: spec.env.clone(),
            commands: Mutex::new(HashMap::new()),
            counters: Arc::clone(&self.counters),
            ids: Arc::clone(&self.ids),
        });
        let execd_stop = CancellationToken::new();
        let tail = Tail {
            grace: self.faults.grace_tail,
            cut: self.faults.cut_tail,
        };
        let app = execd::router(Arc::clone(&exec), tail);
        let (late, keepalive, stop) = (
            self.faults.execd_late,
            self.faults.keepalive,
            execd_stop.clone(),
        );
        tokio::spawn(async move {
            if let Some(late) = late {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(late) => {}
                }
            }
            match socket.listen(1024) {
                Ok(listener) => crate::server::serve(listener, app, keepalive, stop).await,
                Err(error) => tracing::error!(%error, %execd_ip, "execd cannot listen"),
            }
        });
        let created_at = Timestamp::now();
        let expires_at = spec
            .timeout
            .map(|secs| created_at + jiff::SignedDuration::from_secs(secs as i64));
        let sandbox = Arc::new(Sandbox {
            id: id.clone(),
            metadata: Mutex::new(spec.metadata.clone()),
            spec,
            created_at,
            expires_at: Mutex::new(expires_at),
            execd_ip,
            exec,
            execd_stop,
        });
        held.keep();
        if let Some(slot) = pool_slot {
            slot.keep();
        }
        self.map().insert(id, Arc::clone(&sandbox));
        self.counters.sandbox_created();
        self.expiry_changed.notify_one();
        Ok(sandbox)
    }

    fn counter(&self, counted: Counted) -> &AtomicU32 {
        match counted {
            Counted::Held => &self.held,
            Counted::Pooled => &self.pooled,
        }
    }

    /// Counts a sandbox against a limit of `max` (a fault's), or answers
    /// `refusal(max)`; the slot is returned when the create fails, or when
    /// the sandbox is deleted.
    fn take_slot(
        self: &Arc<Self>,
        counted: Counted,
        max: Option<u32>,
        refusal: fn(u32) -> ApiError,
    ) -> Result<Slot, ApiError> {
        let taken = self.counter(counted).fetch_add(1, Ordering::AcqRel) + 1;
        let slot = Slot {
            fleet: Arc::clone(self),
            counted,
            kept: false,
        };
        if let Some(max) = max
            && taken > max
        {
            drop(slot);
            return Err(refusal(max));
        }
        Ok(slot)
    }

    /// Deletes sandbox `id`; `None` if there is no such sandbox (any more).
    pub(crate) async fn delete(&self, id: &str, expired: bool) -> Option<()> {
        let sandbox = self.map().remove(id)?;
        // Counted as it disappears from the API, before it is destroyed.
        self.counters.sandbox_deleted(expired);
        self.destroy(&sandbox).await;
        Some(())
    }

    async fn destroy(&self, sandbox: &Sandbox) {
        sandbox.execd_stop.cancel();
        self.held.fetch_sub(1, Ordering::AcqRel);
        if sandbox.spec.pooled {
            self.pooled.fetch_sub(1, Ordering::AcqRel);
        }
        if let Err(error) = self.host.backend().release(&sandbox.exec.handle).await {
            tracing::warn!(sandbox = %sandbox.id, %error, "releasing a sandbox failed");
        }
    }

    /// Sets a sandbox's expiry.
    pub(crate) fn set_expiry(&self, sandbox: &Sandbox, at: Timestamp) {
        *sandbox.expires_at.lock().expect("expiry lock poisoned") = Some(at);
        self.expiry_changed.notify_one();
    }

    /// Deletes sandboxes at their `expiresAt`, until `stop`.
    pub(crate) async fn reap_expired(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let now = Timestamp::now();
            let (due, next): (Vec<String>, Option<Timestamp>) = {
                let map = self.map();
                let due = map
                    .values()
                    .filter(|s| s.expires_at().is_some_and(|at| at <= now))
                    .map(|s| s.id.clone())
                    .collect();
                let next = map
                    .values()
                    .filter_map(|s| s.expires_at())
                    .filter(|at| *at > now)
                    .min();
                (due, next)
            };
            for id in due {
                tracing::debug!(sandbox = %id, "expired");
                self.delete(&id, true).await;
            }
            let wait = next
                .map(|at| {
                    Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or_default()
                })
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.expiry_changed.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Deletes every sandbox and everything the run left in the local
    /// backend.
    pub(crate) async fn teardown(&self) {
        // Creates under way finish first (bounded; one still pulling its image
        // then stops before it makes a sandbox).
        self.gate.close().await;
        let all: Vec<Arc<Sandbox>> = std::mem::take(&mut *self.map()).into_values().collect();
        // Reaping the local backend's run below removes what they captured.
        self.snapshots.clear();
        for sandbox in &all {
            sandbox.execd_stop.cancel();
        }
        let count = all.len();
        self.host
            .teardown(
                all.iter()
                    .map(|sandbox| (sandbox.id.clone(), sandbox.exec.handle.clone())),
            )
            .await;
        for _ in 0..count {
            self.counters.sandbox_deleted(false);
        }
    }
}

/// What a limit counts.
#[derive(Debug, Clone, Copy)]
enum Counted {
    /// Sandboxes that exist or are being made (`quota`).
    Held,
    /// Pooled ones (`pool-max`).
    Pooled,
}

/// One sandbox counted against a limit while its create runs.
struct Slot {
    fleet: Arc<Fleet>,
    counted: Counted,
    kept: bool,
}

impl Slot {
    /// The sandbox exists: it keeps counting until it is deleted.
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.kept {
            self.fleet
                .counter(self.counted)
                .fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The `quota` fault's refusal, a ResourceQuota's.
fn over_quota(max: u32) -> ApiError {
    ApiError::runtime(
        StatusCode::FORBIDDEN,
        "QUOTA_EXCEEDED",
        format!(
            "Failed to create sandbox: exceeded quota: {max} sandboxes exist (fault quota={max})"
        ),
    )
}

/// The `pool-max` fault's refusal.
fn pool_exhausted(max: u32) -> ApiError {
    ApiError::runtime(
        StatusCode::TOO_MANY_REQUESTS,
        "POOL_CAPACITY_EXHAUSTED",
        format!("Pool capacity exhausted: {max} pooled sandboxes are in use (poolMax {max})"),
    )
    .retry_after(30)
}

fn internal(message: String) -> ApiError {
    ApiError::runtime(
        StatusCode::INTERNAL_SERVER_ERROR,
        "SANDBOX_CREATE_FAILED",
        message,
    )
}
