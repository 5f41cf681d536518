//! The daemon's table of leases: ids, idle expiry, and a persisted handle
//! per lease so a restarted daemon can release what a killed one held.
//!
//! A lease is used under its lock: commands and file transfers share it,
//! evaluation and recycling take it alone, and a release waits for what
//! holds it (in the background: `DELETE` answers at once).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use sandfleet_engine::{Lease, Session};
use tokio::sync::{RwLockMappedWriteGuard, RwLockReadGuard};

use super::Refusal;
use super::activity::{Activity, InUse, take_idle};
use super::executions::Executions;
use super::holder::{Holder, LeaseCell};
use crate::model::{LeaseState, LeaseView};
use crate::state::AppState;

/// One lease and what the daemon knows about it.
pub(crate) struct LeaseSlot {
    pub(crate) id: String,
    lease: LeaseCell,
    pub(crate) task_id: Option<String>,
    pub(crate) run_id: Option<String>,
    pub(crate) labels: BTreeMap<String, String>,
    ttl: Mutex<Duration>,
    activity: Arc<Activity>,
    executions: Executions,
}

impl LeaseSlot {
    /// Marks the lease in use until the guard drops.
    pub(crate) fn in_use(&self) -> InUse {
        self.activity.begin()
    }

    pub(crate) fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock().unwrap_or_else(|e| e.into_inner()) = ttl;
        self.activity.touch();
    }

    fn idle_past_ttl(&self, now: Instant) -> bool {
        let ttl = *self.ttl.lock().unwrap_or_else(|e| e.into_inner());
        self.activity.idle_past(ttl, now)
    }

    /// The lease, shared with other calls.
    pub(crate) async fn read(&self) -> Result<RwLockReadGuard<'_, Lease>, Refusal> {
        self.lease.read().await.ok_or_else(|| self.released())
    }

    /// The lease, alone.
    pub(crate) async fn write(&self) -> Result<RwLockMappedWriteGuard<'_, Lease>, Refusal> {
        self.lease.write().await.ok_or_else(|| self.released())
    }

    /// Recycles the lease through `recycle`, answering with its successor
    /// still held alone.
    pub(crate) async fn recycle<T, E, F>(
        &self,
        recycle: impl FnOnce(Lease) -> F,
    ) -> Result<Result<(RwLockMappedWriteGuard<'_, Lease>, T), E>, Refusal>
    where
        F: Future<Output = Result<(Lease, T), E>>,
    {
        self.lease
            .replace(recycle)
            .await
            .ok_or_else(|| self.released())
    }

    fn released(&self) -> Refusal {
        Refusal::Released {
            holder: self.name(),
        }
    }

    /// The view clients get, from the lease as it is now.
    pub(crate) fn view(&self, lease: &Lease) -> LeaseView {
        let handle = lease.handle();
        let ttl = *self.ttl.lock().unwrap_or_else(|e| e.into_inner());
        let last = self.activity.last_used();
        LeaseView {
            id: self.id.clone(),
            cluster: handle.cluster.clone(),
            image: lease.image().to_string(),
            sandbox: handle.id.clone(),
            hostname: handle.hostname.clone(),
            endpoint: handle.endpoint.clone(),
            expires_at: humantime::format_rfc3339_seconds(last + ttl).to_string(),
            task_id: self.task_id.clone(),
            run_id: self.run_id.clone(),
            labels: self.labels.clone(),
            reuses: lease.reuses(),
            state: match lease.lost() {
                Some(_) => LeaseState::Lost,
                None => LeaseState::Ready,
            },
            lost: lease.lost().map(str::to_string),
        }
    }
}

impl Holder for LeaseSlot {
    fn name(&self) -> String {
        format!("lease `{}`", self.id)
    }

    fn lease(&self) -> &LeaseCell {
        &self.lease
    }

    fn executions(&self) -> &Executions {
        &self.executions
    }

    fn in_use(&self) -> InUse {
        LeaseSlot::in_use(self)
    }
}

/// Every live lease.
pub(crate) struct LeaseTable {
    slots: RwLock<HashMap<String, Arc<LeaseSlot>>>,
    /// Where handles are persisted (`<state>/leases/<id>.json`).
    dir: PathBuf,
    default_ttl: Duration,
    max: usize,
}

/// What a new lease carries besides its sandbox.
pub(crate) struct NewLease {
    pub(crate) id: String,
    pub(crate) task_id: Option<String>,
    pub(crate) run_id: Option<String>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) ttl: Option<Duration>,
}

impl LeaseTable {
    pub(crate) fn new(dir: PathBuf, default_ttl: Duration, max: usize) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        Ok(LeaseTable {
            slots: RwLock::new(HashMap::new()),
            dir,
            default_ttl,
            max,
        })
    }

    /// Leases live now.
    pub(crate) fn len(&self) -> usize {
        self.slots.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The most leases the daemon holds at once (`[api] max_leases`).
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Whether another lease may be acquired.
    pub(crate) fn check_room(&self, more: usize) -> Result<(), Refusal> {
        let live = self.len();
        if live + more > self.max {
            return Err(Refusal::TooManyLeases {
                live,
                more,
                max: self.max,
            });
        }
        Ok(())
    }

    /// Adds `lease` and persists its handle.
    pub(crate) fn insert(&self, new: NewLease, lease: Lease) -> Arc<LeaseSlot> {
        self.persist(&new.id, &lease);
        let slot = Arc::new(LeaseSlot {
            id: new.id.clone(),
            lease: LeaseCell::new(lease),
            task_id: new.task_id,
            run_id: new.run_id,
            labels: new.labels,
            ttl: Mutex::new(new.ttl.unwrap_or(self.default_ttl)),
            activity: Activity::new(),
            executions: Executions::default(),
        });
        self.slots
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(new.id, slot.clone());
        slot
    }

    /// Records the lease's current sandbox (after a recycle replaced it).
    pub(crate) fn persist(&self, id: &str, lease: &Lease) {
        let path = self.dir.join(format!("{id}.json"));
        let written = serde_json::to_vec(lease.handle())
            .map_err(std::io::Error::other)
            .and_then(|json| std::fs::write(&path, json));
        if let Err(error) = written {
            tracing::warn!(lease = id, "cannot persist the lease's handle: {error}");
        }
    }

    /// The lease `id`.
    pub(crate) fn get(&self, id: &str) -> Result<Arc<LeaseSlot>, Refusal> {
        self.slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Refusal::LeaseNotLive { id: id.to_string() })
    }

    /// Every live lease.
    pub(crate) fn all(&self) -> Vec<Arc<LeaseSlot>> {
        self.slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Takes `id` out of the table: no new call finds it.
    pub(crate) fn remove(&self, id: &str) -> Option<Arc<LeaseSlot>> {
        self.slots
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
    }

    /// Leases idle past their time, taken out of the table.
    pub(crate) fn take_idle(&self) -> Vec<Arc<LeaseSlot>> {
        let now = Instant::now();
        let mut slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
        take_idle(&mut slots, |slot| slot.idle_past_ttl(now))
    }

    /// Releases the slot's sandbox once nothing holds it, and forgets its
    /// handle.
    pub(crate) async fn release(&self, session: &Session, slot: &LeaseSlot) {
        if let Some(lease) = slot.lease.release().await {
            session.release(lease);
        }
        let _ = std::fs::remove_file(self.dir.join(format!("{}.json", slot.id)));
    }
}

/// Releases every lease and deletes every snapshot idle past its time,
/// sweeping every `every`, until the daemon stops. Each release or
/// deletion waits in the background for what still holds its lease or
/// snapshot.
pub(crate) async fn expire_idle(state: AppState, every: Duration) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = state.stopping.cancelled() => return,
        }
        for slot in state.leases.take_idle() {
            tracing::info!(lease = %slot.id, "idle past its time; released");
            state.metrics.leases_expired.inc();
            state.metrics.leases_live.set(state.leases.len() as i64);
            let state = state.clone();
            tokio::spawn(async move { state.leases.release(&state.session, &slot).await });
        }
        super::snapshots::expire_idle(&state);
    }
}

/// Handles a previous daemon persisted in `dir`, with their files.
pub(crate) fn persisted(dir: &std::path::Path) -> Vec<(PathBuf, sandfleet_core::SandboxHandle)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter_map(|path| {
            let parsed = std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok());
            match parsed {
                Some(handle) => Some((path, handle)),
                None => {
                    tracing::warn!("{}: not a sandbox handle; removed", path.display());
                    let _ = std::fs::remove_file(&path);
                    None
                }
            }
        })
        .collect()
}

/// A fresh id: `prefix`, `-` and 16 hex digits (`l-` a lease, `s-` a
/// shared-pool session, `snap-` a snapshot).
pub(crate) fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::AtomicU64;
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(SEQUENCE.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{prefix}-{:016x}", hasher.finish())
}
