//! What the plugin host's test binaries share: registries, guests,
//! placement inputs.

use std::path::PathBuf;
use std::sync::Arc;

use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind};
use std::time::Duration;

use sandfleet_plugin::{HostConfig, KindLimits, Limits, PluginHost, Registry, Source};

/// A registry on a fresh host with default limits, caching compiled
/// components where every test of this binary does.
pub(crate) fn registry() -> Arc<Registry> {
    registry_with(shared_cache())
}

/// Default settings with compiled components cached under the target
/// directory: the built-ins, which many tests load, are then compiled once
/// for the suite (about 3 s of CPU each time), not once per test. Tests of
/// compiling itself name a cache of their own.
pub(crate) fn shared_cache() -> HostConfig {
    HostConfig {
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")),
        ..HostConfig::default()
    }
}

/// A registry whose deadlines are far beyond any call's run time, for tests
/// about something else that must not fail because a loaded machine
/// descheduled a caller past the default 100 ms.
pub(crate) fn patient_registry() -> Arc<Registry> {
    registry_with(HostConfig {
        limits: KindLimits::uniform(Limits {
            deadline: Duration::from_secs(30),
            ..Limits::default()
        }),
        ..shared_cache()
    })
}

pub(crate) fn registry_with(config: HostConfig) -> Arc<Registry> {
    Registry::new(PluginHost::new(config).expect("host"))
}

/// Loads the test guest at `path` under `name`.
pub(crate) fn load(registry: &Registry, name: &str, path: &str) {
    let bytes = std::fs::read(path).expect("guest built");
    registry
        .load_bytes(name, &bytes, Source::Memory)
        .expect("guest loads");
}

pub(crate) fn demand(image: u32) -> Demand {
    Demand {
        kind: DemandKind::Claim,
        image,
        count: 1,
        sequence: 0,
    }
}

pub(crate) fn cluster(free_slots: u32) -> ClusterState {
    ClusterState {
        healthy: true,
        has_image: false,
        free_slots,
        live: 0,
        warm_ready: 0,
        weight: 1,
        cpu_free_milli: 4_000,
        memory_free_mib: 8_192,
    }
}

/// Three healthy clusters where `least-loaded` picks 1 and `pick-last` picks 2.
pub(crate) fn three_clusters() -> Clusters {
    Clusters::from_states(&[cluster(2), cluster(9), cluster(4)])
}
