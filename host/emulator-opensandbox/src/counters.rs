//! What the emulator has done, for tests that must prove nothing ran twice
//! and nothing is left: commands started, by execd's command id and by the
//! client's marker, and sandboxes created, deleted, expired and live.
//! Served as JSON at `GET /debug/executions` and by
//! [`crate::Emulator::executions`].

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// A snapshot of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Executions {
    /// Commands started (`POST /command` accepted), background ones included.
    pub commands: u64,
    /// Starts per execd command id (always 1 each: ids are never reused).
    pub by_command_id: BTreeMap<String, u64>,
    /// Starts per marker ([`crate::MARKER_ENV`]); commands without one are not
    /// here.
    pub by_marker: BTreeMap<String, u64>,
    /// Sandboxes created.
    pub sandboxes_created: u64,
    /// Sandboxes deleted by `DELETE`.
    pub sandboxes_deleted: u64,
    /// `DELETE /sandboxes/{id}` requests received, whatever they were
    /// answered: how often a client sent a delete.
    pub delete_requests: u64,
    /// Sandboxes deleted at their `expiresAt`.
    pub sandboxes_expired: u64,
    /// Sandboxes that exist now.
    pub sandboxes_live: u64,
}

impl Executions {
    /// Markers started more than once, with their counts.
    pub fn repeated_markers(&self) -> BTreeMap<String, u64> {
        self.by_marker
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(marker, n)| (marker.clone(), *n))
            .collect()
    }
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    inner: Mutex<Executions>,
}

impl Counters {
    fn with<T>(&self, f: impl FnOnce(&mut Executions) -> T) -> T {
        f(&mut self.inner.lock().expect("counters lock poisoned"))
    }

    pub(crate) fn command_started(&self, id: &str, marker: Option<&str>) {
        self.with(|c| {
            c.commands += 1;
            *c.by_command_id.entry(id.to_string()).or_default() += 1;
            if let Some(marker) = marker {
                *c.by_marker.entry(marker.to_string()).or_default() += 1;
            }
        });
    }

    pub(crate) fn delete_requested(&self) {
        self.with(|c| c.delete_requests += 1);
    }

    pub(crate) fn sandbox_created(&self) {
        self.with(|c| c.sandboxes_created += 1);
    }

    pub(crate) fn sandbox_deleted(&self, expired: bool) {
        self.with(|c| {
            if expired {
                c.sandboxes_expired += 1;
            } else {
                c.sandboxes_deleted += 1;
            }
        });
    }

    pub(crate) fn snapshot(&self, live: usize) -> Executions {
        self.with(|c| Executions {
            sandboxes_live: live as u64,
            ..c.clone()
        })
    }
}
