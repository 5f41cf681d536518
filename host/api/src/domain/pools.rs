//! Shared pools (`[[shared_pools]]`): K long-lived sandboxes per pool that
//! many small stateful sessions ride, each session pinned to one sandbox
//! (the least-loaded healthy one when it opens), so what a session leaves
//! in its sandbox (files, a running interpreter) is there on its next call.
//!
//! A sandbox evicted after [`EVICT_AFTER`] failed probes in a row takes its
//! sessions' state with it: they answer `session_lost` from then on rather
//! than moving silently, and a new sandbox heals its slot (the daemon's
//! pool keeper does).
//! Such a session counts as lost, not open, until it is closed or dropped
//! when idle.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use sandfleet_engine::Lease;
use sandfleet_fleet::SharedPoolConfig;
use tokio_util::task::TaskTracker;

use super::activity::{Activity, InUse};
use super::executions::Executions;
use super::leases::new_id;
use crate::domain::Refusal;
use crate::domain::holder::{Holder, LeaseCell};
use crate::metrics::SharedPoolCounts;
use crate::model::{HealView, SharedPoolView, SharedSlotView};

/// Failed probes in a row that evict a sandbox.
pub(crate) const EVICT_AFTER: u32 = 3;

/// Heals a pool's view keeps, the latest.
const HEALS_KEPT: usize = 64;

/// Every shared pool and every session open on them.
pub(crate) struct SharedPools {
    pools: BTreeMap<String, Arc<Pool>>,
    /// The fleet file's order, for listings.
    order: Vec<String>,
    sessions: RwLock<HashMap<String, Arc<SharedSession>>>,
    /// The keepers: stopping waits for them before reaping, so no sandbox
    /// is claimed after the reap.
    pub(crate) keepers: TaskTracker,
}

/// Counters of one pool, since the daemon started. (Sessions open now are
/// the slots' session counts.)
#[derive(Default)]
pub(crate) struct Counts {
    /// Sessions pinned to an evicted sandbox and still in the table. Only
    /// changed under the slots' lock, with the slots' session counts, so a
    /// session moves from open to lost once and leaves either once.
    pub(crate) lost: AtomicU64,
    pub(crate) opened: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) probes_failed: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) heals: AtomicU64,
}

/// One pool.
pub(crate) struct Pool {
    pub(crate) config: SharedPoolConfig,
    slots: Mutex<Vec<Slot>>,
    pub(crate) counts: Counts,
    heals: Mutex<VecDeque<HealView>>,
}

#[derive(Default)]
struct Slot {
    sandbox: Option<Arc<Pinned>>,
    sessions: u32,
    failed_probes: u32,
    error: Option<String>,
}

/// One of a pool's sandboxes, which sessions are pinned to.
pub(crate) struct Pinned {
    pub(crate) slot: usize,
    /// The sandbox's id on its cluster.
    pub(crate) id: String,
    /// Released once evicted.
    pub(crate) lease: LeaseCell,
    /// Why it was evicted, once it was.
    evicted: OnceLock<String>,
}

/// A session: sticky to one sandbox of one pool.
pub(crate) struct SharedSession {
    pub(crate) id: String,
    pub(crate) pool: Arc<Pool>,
    pub(crate) sandbox: Arc<Pinned>,
    activity: Arc<Activity>,
    executions: Executions,
}

impl SharedPools {
    pub(crate) fn new(configs: &[SharedPoolConfig]) -> Self {
        SharedPools {
            pools: configs
                .iter()
                .map(|config| (config.name.clone(), Arc::new(Pool::new(config.clone()))))
                .collect(),
            order: configs.iter().map(|c| c.name.clone()).collect(),
            sessions: RwLock::new(HashMap::new()),
            keepers: TaskTracker::new(),
        }
    }

    /// Every pool, in the fleet file's order.
    pub(crate) fn all(&self) -> Vec<Arc<Pool>> {
        self.order
            .iter()
            .filter_map(|name| self.pools.get(name).cloned())
            .collect()
    }

    /// The pool `name`, or a 404 naming it.
    pub(crate) fn pool(&self, name: &str) -> Result<Arc<Pool>, Refusal> {
        self.pools.get(name).cloned().ok_or_else(|| {
            let known = if self.order.is_empty() {
                "none is configured: add [[shared_pools]] to the fleet file".to_string()
            } else {
                format!("configured: {}", self.order.join(", "))
            };
            Refusal::NoSuchPool {
                name: name.to_string(),
                known,
            }
        })
    }

    /// Opens a session on the pool `name`.
    pub(crate) fn open(&self, name: &str) -> Result<Arc<SharedSession>, Refusal> {
        let pool = self.pool(name)?;
        let sandbox = pool.pin()?;
        let session = Arc::new(SharedSession {
            id: new_id("s"),
            pool: pool.clone(),
            sandbox,
            activity: Activity::new(),
            executions: Executions::default(),
        });
        pool.counts.opened.fetch_add(1, Ordering::Relaxed);
        self.sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.id.clone(), session.clone());
        Ok(session)
    }

    /// The session `id`, or a 404 naming it.
    pub(crate) fn session(&self, id: &str) -> Result<Arc<SharedSession>, Refusal> {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Refusal::SessionNotOpen { id: id.to_string() })
    }

    /// Closes the session `id`; false when it is not open.
    pub(crate) fn close(&self, id: &str) -> bool {
        let removed = self
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        removed.map(|session| session.forget()).is_some()
    }

    /// Drops the sessions idle past their pool's idle timeout.
    pub(crate) fn expire_idle(&self) {
        let now = Instant::now();
        let idle: Vec<Arc<SharedSession>> = {
            let mut sessions = self.sessions.write().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<String> = sessions
                .values()
                .filter(|s| s.activity.idle_past(s.pool.config.idle_timeout, now))
                .map(|s| s.id.clone())
                .collect();
            ids.iter().filter_map(|id| sessions.remove(id)).collect()
        };
        for session in &idle {
            session.forget();
            session.pool.counts.expired.fetch_add(1, Ordering::Relaxed);
            tracing::info!(session = %session.id, pool = %session.pool.config.name, "idle past its time; dropped");
        }
    }
}

impl Pool {
    fn new(config: SharedPoolConfig) -> Self {
        Pool {
            slots: Mutex::new((0..config.size).map(|_| Slot::default()).collect()),
            config,
            counts: Counts::default(),
            heals: Mutex::new(VecDeque::new()),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pins a new session to the least-loaded healthy sandbox (the lowest
    /// slot among equals).
    fn pin(&self) -> Result<Arc<Pinned>, Refusal> {
        let mut slots = self.slots();
        let healthy = slots
            .iter()
            .filter(|slot| slot.sandbox.is_some() && slot.failed_probes == 0)
            .count();
        let max = self.config.max_sessions_per_sandbox;
        let least = slots
            .iter_mut()
            .filter(|slot| slot.sandbox.is_some() && slot.failed_probes == 0)
            .filter(|slot| slot.sessions < max)
            .min_by_key(|slot| slot.sessions);
        match least {
            Some(slot) => {
                slot.sessions += 1;
                Ok(slot.sandbox.clone().expect("filtered on a sandbox"))
            }
            None if healthy == 0 => Err(Refusal::NoHealthySandbox {
                pool: self.config.name.clone(),
                size: self.config.size,
            }),
            None => Err(Refusal::PoolFull {
                pool: self.config.name.clone(),
                healthy,
                max,
            }),
        }
    }

    /// A session pinned to `pinned` is gone.
    fn unpin(&self, pinned: &Arc<Pinned>) {
        let mut slots = self.slots();
        let slot = &mut slots[pinned.slot];
        if slot
            .sandbox
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, pinned))
        {
            slot.sessions = slot.sessions.saturating_sub(1);
        } else if pinned.evicted.get().is_some() {
            // Counted as lost when its sandbox was evicted. (A sandbox
            // taken out as the daemon stops counted nowhere after that.)
            self.counts.lost.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Puts a new sandbox in `slot`.
    pub(crate) fn install(&self, slot: usize, lease: Lease) -> Arc<Pinned> {
        let pinned = Arc::new(Pinned {
            slot,
            id: lease.handle().id.clone(),
            lease: LeaseCell::new(lease),
            evicted: OnceLock::new(),
        });
        self.slots()[slot] = Slot {
            sandbox: Some(pinned.clone()),
            ..Slot::default()
        };
        pinned
    }

    /// Notes why filling `slot` failed.
    pub(crate) fn fill_failed(&self, slot: usize, error: String) {
        self.slots()[slot].error = Some(error);
    }

    /// Notes a probe of `pinned`; true when it failed [`EVICT_AFTER`] times
    /// in a row and was evicted (taken out of its slot, its sessions lost).
    pub(crate) fn probed(&self, pinned: &Arc<Pinned>, passed: bool) -> bool {
        let mut slots = self.slots();
        let slot = &mut slots[pinned.slot];
        if !slot
            .sandbox
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, pinned))
        {
            return false;
        }
        if passed {
            slot.failed_probes = 0;
            return false;
        }
        self.counts.probes_failed.fetch_add(1, Ordering::Relaxed);
        slot.failed_probes += 1;
        if slot.failed_probes < EVICT_AFTER {
            return false;
        }
        // Its sessions stay in the table, lost, until closed or idle.
        self.counts
            .lost
            .fetch_add(u64::from(slot.sessions), Ordering::Relaxed);
        *slot = Slot::default();
        let _ = pinned.evicted.set(format!(
            "evicted after {EVICT_AFTER} failed probes in a row"
        ));
        self.counts.evictions.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Records a heal.
    pub(crate) fn healed(&self, heal: HealView) {
        self.counts.heals.fetch_add(1, Ordering::Relaxed);
        let mut heals = self.heals.lock().unwrap_or_else(|e| e.into_inner());
        if heals.len() == HEALS_KEPT {
            heals.pop_front();
        }
        heals.push_back(heal);
    }

    /// Takes every sandbox out of its slot (the daemon is stopping).
    pub(crate) fn take_all(&self) -> Vec<Arc<Pinned>> {
        self.slots()
            .iter_mut()
            .filter_map(|slot| std::mem::take(slot).sandbox)
            .collect()
    }

    /// Slots with a healthy sandbox now.
    pub(crate) fn healthy(&self) -> u32 {
        self.slots()
            .iter()
            .filter(|slot| slot.sandbox.is_some() && slot.failed_probes == 0)
            .count() as u32
    }

    /// Sessions now (open on a live sandbox, lost with an evicted one),
    /// read together under the slots' lock.
    fn sessions_now(&self, slots: &[Slot]) -> SessionsNow {
        SessionsNow {
            open: slots.iter().map(|slot| u64::from(slot.sessions)).sum(),
            lost: self.counts.lost.load(Ordering::Relaxed),
        }
    }

    /// Its counts for `/metrics`.
    pub(crate) fn metrics(&self) -> SharedPoolCounts {
        let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let sessions = self.sessions_now(&self.slots());
        SharedPoolCounts {
            pool: self.config.name.clone(),
            open: sessions.open,
            lost: sessions.lost,
            opened: count(&self.counts.opened),
            expired: count(&self.counts.expired),
            probes_failed: count(&self.counts.probes_failed),
            evictions: count(&self.counts.evictions),
            heals: count(&self.counts.heals),
            healthy: u64::from(self.healthy()),
        }
    }

    pub(crate) fn view(&self) -> SharedPoolView {
        let guard = self.slots();
        let sessions = self.sessions_now(&guard);
        let slots: Vec<SharedSlotView> = guard
            .iter()
            .enumerate()
            .map(|(index, slot)| SharedSlotView {
                slot: index as u32,
                sandbox: slot.sandbox.as_ref().map(|s| s.id.clone()),
                healthy: slot.sandbox.is_some() && slot.failed_probes == 0,
                sessions: slot.sessions,
                failed_probes: slot.failed_probes,
                error: slot.error.clone(),
            })
            .collect();
        drop(guard);
        let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        SharedPoolView {
            name: self.config.name.clone(),
            image: self.config.image.clone(),
            size: self.config.size,
            healthy: slots.iter().filter(|s| s.healthy).count() as u32,
            max_sessions_per_sandbox: self.config.max_sessions_per_sandbox,
            sessions_open: sessions.open,
            sessions_lost: sessions.lost,
            sessions_opened: count(&self.counts.opened),
            sessions_expired: count(&self.counts.expired),
            probes_failed: count(&self.counts.probes_failed),
            evictions: count(&self.counts.evictions),
            heals: count(&self.counts.heals),
            slots,
            recent_heals: self
                .heals
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned()
                .collect(),
        }
    }
}

/// A pool's sessions at one moment.
struct SessionsNow {
    /// On a live sandbox.
    open: u64,
    /// Pinned to an evicted sandbox, not yet closed or dropped.
    lost: u64,
}

impl SharedSession {
    /// Out of the table: its sandbox has one session fewer.
    fn forget(&self) {
        self.pool.unpin(&self.sandbox);
    }

    /// What every call on a session whose sandbox is gone answers.
    fn lost_because(&self, why: &str) -> Refusal {
        Refusal::SessionLost {
            session: self.id.clone(),
            sandbox: self.sandbox.id.clone(),
            pool: self.pool.config.name.clone(),
            why: why.to_string(),
        }
    }

    /// `session_lost` once its sandbox was evicted.
    pub(crate) fn check(&self) -> Result<(), Refusal> {
        match self.sandbox.evicted.get() {
            Some(why) => Err(self.lost_because(why)),
            None => Ok(()),
        }
    }
}

impl Holder for SharedSession {
    fn name(&self) -> String {
        format!("session `{}`", self.id)
    }

    fn lease(&self) -> &LeaseCell {
        &self.sandbox.lease
    }

    fn executions(&self) -> &Executions {
        &self.executions
    }

    fn in_use(&self) -> InUse {
        self.activity.begin()
    }

    fn lost(&self, backend_says: Option<&str>) -> Option<Refusal> {
        match self.sandbox.evicted.get() {
            Some(why) => Some(self.lost_because(why)),
            None => backend_says.map(|why| self.lost_because(why)),
        }
    }
}
