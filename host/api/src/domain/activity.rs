//! The idle clock of leases and shared-pool sessions: when one was last
//! used, and whether a call holds it now (a running call never counts as
//! idle, however long it runs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// One lease's or session's use.
pub(crate) struct Activity {
    last_used: Mutex<(Instant, SystemTime)>,
    in_flight: AtomicUsize,
}

/// Marks its [`Activity`] in use from creation to drop; the idle clock
/// restarts when the last use ends.
pub(crate) struct InUse(Arc<Activity>);

impl Drop for InUse {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    /// Used just now.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Activity {
            last_used: Mutex::new((Instant::now(), SystemTime::now())),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Restarts the idle clock.
    pub(crate) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) =
            (Instant::now(), SystemTime::now());
    }

    /// In use until the guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> InUse {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InUse(self.clone())
    }

    /// Nothing holds it and it was last used `limit` or longer before `now`.
    pub(crate) fn idle_past(&self, limit: Duration, now: Instant) -> bool {
        let (last, _) = *self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        self.in_flight.load(Ordering::Acquire) == 0 && now.duration_since(last) >= limit
    }

    /// When it was last used, by the wall clock.
    pub(crate) fn last_used(&self) -> SystemTime {
        self.last_used.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

/// Takes the entries `idle` says are idle out of `table`, under one lock,
/// so no call finds one of them afterwards.
pub(crate) fn take_idle<T>(
    table: &mut HashMap<String, Arc<T>>,
    idle: impl Fn(&T) -> bool,
) -> Vec<Arc<T>> {
    let ids: Vec<String> = table
        .iter()
        .filter(|(_, entry)| idle(entry))
        .map(|(id, _)| id.clone())
        .collect();
    ids.iter().filter_map(|id| table.remove(id)).collect()
}
