//! `/metrics` in Prometheus text format. Every label set is bounded: the
//! outcome and route labels are fixed lists, plugin labels name the
//! configured plugins (one version each: the one serving), pool labels the
//! images the daemon warmed, shared-pool labels the configured shared
//! pools, retry labels the error kinds. Lease, session and snapshot ids
//! never become labels.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sandfleet_engine::{BackendCall, CallObserver};

/// How a command ended, for counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
pub(crate) enum ExecOutcome {
    /// Exit 0.
    Ok,
    /// Another exit status.
    Failed,
    /// Killed at its timeout.
    TimedOut,
    /// The backend failed.
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: ExecOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BackendCallLabels {
    cluster: String,
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BackendOperationLabels {
    cluster: String,
    operation: &'static str,
}

/// Every call the daemon's clusters make to their backends, counted by
/// outcome and timed (the clusters are configured names, the operations and
/// outcomes fixed lists).
pub(crate) struct BackendCalls {
    calls: Family<BackendCallLabels, Counter>,
    seconds: Histograms<BackendOperationLabels>,
}

impl BackendCalls {
    pub(crate) fn new() -> Self {
        BackendCalls {
            calls: Family::default(),
            seconds: Family::new_with_constructor(seconds),
        }
    }
}

impl CallObserver for BackendCalls {
    fn observe(&self, call: &BackendCall<'_>) {
        let cluster = call.cluster.to_string();
        let operation = call.operation.name();
        self.calls
            .get_or_create(&BackendCallLabels {
                cluster: cluster.clone(),
                operation,
                outcome: call.outcome,
            })
            .inc();
        self.seconds
            .get_or_create(&BackendOperationLabels { cluster, operation })
            .observe(call.elapsed.as_secs_f64());
    }
}

/// The daemon's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) leases_live: Gauge,
    leases_acquired: Family<SourceLabels, Counter>,
    pub(crate) leases_expired: Counter,
    acquire_seconds: Histogram,
    exec_seconds: Histogram,
    execs: Family<OutcomeLabels, Counter>,
    pub(crate) evaluate_seconds: Histogram,
    pub(crate) idempotent_replays: Counter,
    pub(crate) snapshots_live: Gauge,
    pub(crate) snapshots_taken: Counter,
    pub(crate) snapshots_expired: Counter,
    pub(crate) snapshot_seconds: Histogram,
    pub(crate) leases_forked: Counter,
    pub(crate) fork_seconds: Histogram,
    pub(crate) restore_seconds: Histogram,
    requests: Histograms<RouteLabels>,
    /// Values read at scrape time (pools, plugins, retries, releases).
    pub(crate) snapshot: Arc<Mutex<Snapshot>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct RouteLabels {
    /// The route's template (`/v1/leases/{id}/exec`), never a lease id.
    pub(crate) route: String,
    pub(crate) status: u16,
}

/// What the scrape reads from the daemon's parts.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// (image, cluster, desired, ready).
    pub(crate) pools: Vec<(String, String, u32, u32)>,
    /// (plugin, version, tier).
    pub(crate) plugins: Vec<(String, String, String)>,
    /// (loaded, failed) plugin loads.
    pub(crate) plugin_loads: (u64, u64),
    /// Calls and faults of every plugin version loaded.
    pub(crate) plugin_calls: Vec<sandfleet_plugin::PluginCalls>,
    /// Retries by error kind.
    pub(crate) retries: Vec<(String, u64)>,
    /// (released, failed) releases.
    pub(crate) releases: (u64, u64),
    /// (prepared, failed) runs of images' prepare hooks.
    pub(crate) prepares: (u64, u64),
    /// Per shared pool.
    pub(crate) shared: Vec<SharedPoolCounts>,
}

/// A family of shared-pool metrics: name, help, type, and its value of a pool.
type SharedFamily = (
    &'static str,
    &'static str,
    MetricType,
    fn(&SharedPoolCounts) -> u64,
);

/// One shared pool's counts at scrape time.
#[derive(Debug, Default)]
pub(crate) struct SharedPoolCounts {
    pub(crate) pool: String,
    pub(crate) open: u64,
    pub(crate) lost: u64,
    pub(crate) opened: u64,
    pub(crate) expired: u64,
    pub(crate) probes_failed: u64,
    pub(crate) evictions: u64,
    pub(crate) heals: u64,
    pub(crate) healthy: u64,
}

#[derive(Debug)]
struct Scraped(Arc<Mutex<Snapshot>>);

fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

impl Metrics {
    pub(crate) fn new(backend: &BackendCalls) -> Self {
        let mut registry = Registry::with_prefix("sandfleet");
        let metrics = Metrics {
            leases_live: Gauge::default(),
            leases_acquired: Family::default(),
            leases_expired: Counter::default(),
            acquire_seconds: seconds(),
            exec_seconds: seconds(),
            execs: Family::default(),
            evaluate_seconds: seconds(),
            idempotent_replays: Counter::default(),
            snapshots_live: Gauge::default(),
            snapshots_taken: Counter::default(),
            snapshots_expired: Counter::default(),
            snapshot_seconds: seconds(),
            leases_forked: Counter::default(),
            fork_seconds: seconds(),
            restore_seconds: seconds(),
            requests: Family::new_with_constructor(seconds),
            snapshot: Arc::new(Mutex::new(Snapshot::default())),
            registry: Registry::default(),
        };
        registry.register(
            "leases_live",
            "Leases live now",
            metrics.leases_live.clone(),
        );
        registry.register(
            "leases_acquired",
            "Leases acquired, by what they were acquired for (image or task)",
            metrics.leases_acquired.clone(),
        );
        registry.register(
            "leases_expired",
            "Leases released because no call came for their idle time",
            metrics.leases_expired.clone(),
        );
        registry.register(
            "acquire_seconds",
            "Time to acquire a lease (claim, baseline, setup)",
            metrics.acquire_seconds.clone(),
        );
        registry.register(
            "exec_seconds",
            "Time commands ran",
            metrics.exec_seconds.clone(),
        );
        registry.register("execs", "Commands by outcome", metrics.execs.clone());
        registry.register(
            "evaluate_seconds",
            "Time evaluations took (prepare, commands, grade)",
            metrics.evaluate_seconds.clone(),
        );
        registry.register(
            "idempotent_replays",
            "Exec requests answered from an earlier execution with the same Idempotency-Key",
            metrics.idempotent_replays.clone(),
        );
        registry.register(
            "snapshots_live",
            "Snapshots of leases' sandboxes live now",
            metrics.snapshots_live.clone(),
        );
        registry.register(
            "snapshots_taken",
            "Snapshots taken of leases' sandboxes",
            metrics.snapshots_taken.clone(),
        );
        registry.register(
            "snapshots_expired",
            "Snapshots deleted because no call used them for their idle time",
            metrics.snapshots_expired.clone(),
        );
        registry.register(
            "snapshot_seconds",
            "Time to snapshot a lease's sandbox",
            metrics.snapshot_seconds.clone(),
        );
        registry.register(
            "leases_forked",
            "Leases made from snapshots (also counted in leases_acquired, as image leases)",
            metrics.leases_forked.clone(),
        );
        registry.register(
            "fork_seconds",
            "Time to make every lease of one fork request from a snapshot",
            metrics.fork_seconds.clone(),
        );
        registry.register(
            "restore_seconds",
            "Time to put a lease's sandbox back to a snapshot in place",
            metrics.restore_seconds.clone(),
        );
        registry.register(
            "http_request_seconds",
            "HTTP requests by route and status",
            metrics.requests.clone(),
        );
        registry.register(
            "backend_calls",
            "Calls to the clusters' backends, by cluster, operation and outcome (ok or the error's kind)",
            backend.calls.clone(),
        );
        registry.register(
            "backend_call_seconds",
            "Time calls to the clusters' backends took, by cluster and operation",
            backend.seconds.clone(),
        );
        registry.register_collector(Box::new(Scraped(metrics.snapshot.clone())));
        Metrics {
            registry,
            ..metrics
        }
    }

    pub(crate) fn acquired(&self, for_task: bool, took: Duration) {
        let source = if for_task { "task" } else { "image" };
        self.leases_acquired
            .get_or_create(&SourceLabels { source })
            .inc();
        self.acquire_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn exec(&self, outcome: ExecOutcome, took: Duration) {
        self.execs.get_or_create(&OutcomeLabels { outcome }).inc();
        self.exec_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn request(&self, route: String, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RouteLabels { route, status })
            .observe(took.as_secs_f64());
    }

    /// The text exposition.
    pub(crate) fn render(&self) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            let _ = writeln!(text, "# encoding failed: {e}");
        }
        text
    }
}

impl prometheus_client::collector::Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut family = |name: &str,
                          help: &str,
                          kind: MetricType,
                          rows: Vec<(Vec<(&'static str, String)>, u64)>|
         -> Result<(), std::fmt::Error> {
            let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
            for (labels, value) in rows {
                let encoder = metric.encode_family(&labels)?;
                match kind {
                    MetricType::Counter => ConstCounter::new(value).encode(encoder)?,
                    _ => ConstGauge::new(value as i64).encode(encoder)?,
                }
            }
            Ok(())
        };
        family(
            "pool_desired",
            "Warm replicas asked for, per pool",
            MetricType::Gauge,
            snapshot
                .pools
                .iter()
                .map(|(image, cluster, desired, _)| {
                    (
                        vec![("image", image.clone()), ("cluster", cluster.clone())],
                        u64::from(*desired),
                    )
                })
                .collect(),
        )?;
        family(
            "pool_ready",
            "Warm sandboxes ready, per pool",
            MetricType::Gauge,
            snapshot
                .pools
                .iter()
                .map(|(image, cluster, _, ready)| {
                    (
                        vec![("image", image.clone()), ("cluster", cluster.clone())],
                        u64::from(*ready),
                    )
                })
                .collect(),
        )?;
        family(
            "plugin_info",
            "The version serving, per plugin (always 1)",
            MetricType::Gauge,
            snapshot
                .plugins
                .iter()
                .map(|(plugin, version, tier)| {
                    (
                        vec![
                            ("plugin", plugin.clone()),
                            ("version", version.clone()),
                            ("tier", tier.clone()),
                        ],
                        1,
                    )
                })
                .collect(),
        )?;
        let by_version = |calls: &sandfleet_plugin::PluginCalls| {
            vec![
                ("plugin", calls.name.clone()),
                ("version", calls.version.clone()),
            ]
        };
        family(
            "plugin_calls",
            "Plugin calls, per plugin and version",
            MetricType::Counter,
            snapshot
                .plugin_calls
                .iter()
                .map(|calls| (by_version(calls), calls.calls))
                .collect(),
        )?;
        family(
            "plugin_faults",
            "Plugin calls that trapped, overran a limit or broke the contract, per plugin and version",
            MetricType::Counter,
            snapshot
                .plugin_calls
                .iter()
                .map(|calls| (by_version(calls), calls.faults))
                .collect(),
        )?;
        family(
            "plugin_fallbacks",
            "Calls of a plugin version the built-in fallback answered after it faulted, per plugin and version",
            MetricType::Counter,
            snapshot
                .plugin_calls
                .iter()
                .map(|calls| (by_version(calls), calls.fallbacks))
                .collect(),
        )?;
        let (loaded, failed) = snapshot.plugin_loads;
        family(
            "plugin_loads",
            "Plugin loads, by outcome (a failed one leaves the old version serving)",
            MetricType::Counter,
            vec![
                (vec![("outcome", "loaded".to_string())], loaded),
                (vec![("outcome", "failed".to_string())], failed),
            ],
        )?;
        family(
            "retries",
            "Requests retried, by the kind of error that caused them",
            MetricType::Counter,
            snapshot
                .retries
                .iter()
                .map(|(kind, count)| (vec![("kind", kind.clone())], *count))
                .collect(),
        )?;
        let (released, release_failed) = snapshot.releases;
        family(
            "releases",
            "Sandboxes released through the release queue, by outcome",
            MetricType::Counter,
            vec![
                (vec![("outcome", "released".to_string())], released),
                (vec![("outcome", "failed".to_string())], release_failed),
            ],
        )?;
        let (prepared, prepare_failed) = snapshot.prepares;
        family(
            "prepares",
            "New sandboxes through their image's prepare hook, by outcome (a failed one is released and replaced)",
            MetricType::Counter,
            vec![
                (vec![("outcome", "prepared".to_string())], prepared),
                (vec![("outcome", "failed".to_string())], prepare_failed),
            ],
        )?;
        let shared: [SharedFamily; 8] = [
            (
                "shared_sessions_open",
                "Sessions open now on a live sandbox, per shared pool",
                MetricType::Gauge,
                |p| p.open,
            ),
            (
                "shared_sessions_lost",
                "Sessions whose sandbox was evicted, until closed or dropped when idle (they answer 410 session_lost), per shared pool",
                MetricType::Gauge,
                |p| p.lost,
            ),
            (
                "shared_sessions_opened",
                "Sessions opened, per shared pool",
                MetricType::Counter,
                |p| p.opened,
            ),
            (
                "shared_sessions_expired",
                "Sessions dropped for being idle past the pool's idle_timeout, per shared pool",
                MetricType::Counter,
                |p| p.expired,
            ),
            (
                "shared_sandboxes_healthy",
                "Slots with a healthy sandbox now, per shared pool",
                MetricType::Gauge,
                |p| p.healthy,
            ),
            (
                "shared_probes_failed",
                "Health probes that failed, per shared pool",
                MetricType::Counter,
                |p| p.probes_failed,
            ),
            (
                "shared_evictions",
                "Sandboxes evicted after failed probes in a row, per shared pool",
                MetricType::Counter,
                |p| p.evictions,
            ),
            (
                "shared_heals",
                "Evicted sandboxes replaced in their slot, per shared pool",
                MetricType::Counter,
                |p| p.heals,
            ),
        ];
        for (name, help, kind, value) in shared {
            family(
                name,
                help,
                kind,
                snapshot
                    .shared
                    .iter()
                    .map(|pool| (vec![("pool", pool.pool.clone())], value(pool)))
                    .collect(),
            )?;
        }
        Ok(())
    }
}
