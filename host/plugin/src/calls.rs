//! Calls and faults per plugin version, for operators' metrics.
//!
//! A fault is what [`crate::CallError::is_plugin_fault`] says: a trap, an
//! overrun deadline or memory cap, an answer that breaks the contract. A
//! plugin declining (its own `Err(failure)`) answered, so it is a call, not
//! a fault. A fallback is a call the built-in answered in a faulting
//! version's place: counted on that version, and as a call of the built-in.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One version's counters, shared by every build of it (a baseline build
/// and the optimized build that replaces it count as one version).
#[derive(Debug, Default)]
pub(crate) struct CallCounter {
    calls: AtomicU64,
    faults: AtomicU64,
    fallbacks: AtomicU64,
}

impl CallCounter {
    /// Counts a call, and a fault when it was one.
    pub(crate) fn record(&self, faulted: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if faulted {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a call the fallback answered in this version's place.
    pub(crate) fn record_fallback(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }
}

/// Calls and faults of one plugin version since the registry loaded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCalls {
    /// The plugin's name.
    pub name: String,
    /// The version called.
    pub version: String,
    /// Calls made, faulted or not.
    pub calls: u64,
    /// Calls that faulted.
    pub faults: u64,
    /// Calls the built-in fallback answered in this version's place (the
    /// one that faulted and every later one).
    pub fallbacks: u64,
}

/// The counters of every version a registry loaded, by (name, version).
/// Kept after a version stops serving, so counts never go back; one entry
/// per version that ever loaded.
#[derive(Debug, Default)]
pub(crate) struct CallCounters(Mutex<BTreeMap<(String, String), Arc<CallCounter>>>);

impl CallCounters {
    /// The counter of `name` at `version`, made on first use.
    pub(crate) fn of(&self, name: &str, version: &str) -> Arc<CallCounter> {
        let mut counters = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            counters
                .entry((name.to_string(), version.to_string()))
                .or_default(),
        )
    }

    /// Every version's counts, sorted by name and version.
    pub(crate) fn snapshot(&self) -> Vec<PluginCalls> {
        let counters = self.0.lock().unwrap_or_else(|e| e.into_inner());
        counters
            .iter()
            .map(|((name, version), counter)| PluginCalls {
                name: name.clone(),
                version: version.clone(),
                calls: counter.calls.load(Ordering::Relaxed),
                faults: counter.faults.load(Ordering::Relaxed),
                fallbacks: counter.fallbacks.load(Ordering::Relaxed),
            })
            .collect()
    }
}
