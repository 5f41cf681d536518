//! Why the daemon's tables refuse a request, in their own terms.

/// A request the tables cannot serve as things stand.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("lease `{id}` is not live (released, expired, or never acquired)")]
    LeaseNotLive { id: String },
    #[error("{live} leases are live and {more} more would pass [api] max_leases = {max}")]
    TooManyLeases {
        live: usize,
        more: usize,
        max: usize,
    },
    #[error("{holder} was released")]
    Released { holder: String },
    #[error("no batch run `{id}`")]
    NoSuchRun { id: String },
    #[error(
        "batch run `{id}` has no report.html yet (the run writes it beside report.json); try again later"
    )]
    NoReport { id: String },
    #[error("no shared pool named `{name}` ({known})")]
    NoSuchPool { name: String, known: String },
    #[error(
        "shared pool `{pool}` has no healthy sandbox now (0 of {size}: filling or healing); retry shortly"
    )]
    NoHealthySandbox { pool: String, size: u32 },
    #[error(
        "shared pool `{pool}` is full: its {healthy} healthy sandboxes have max_sessions_per_sandbox = {max} sessions each; close a session or retry later"
    )]
    PoolFull {
        pool: String,
        healthy: usize,
        max: u32,
    },
    #[error("session `{id}` is not open (closed, dropped when idle, or never opened)")]
    SessionNotOpen { id: String },
    #[error(
        "session `{session}`: its sandbox `{sandbox}` in shared pool `{pool}` is gone ({why}), and with it the session's state; open a new session"
    )]
    SessionLost {
        session: String,
        sandbox: String,
        pool: String,
        why: String,
    },
    #[error("snapshot `{id}` is not live (deleted, expired, or never taken)")]
    SnapshotNotLive { id: String },
    #[error("snapshot `{snapshot}`: count must be at least 1")]
    NoForks { snapshot: String },
    #[error(
        "snapshot `{snapshot}`: {count} forks are more leases than [api] max_leases = {max} lets the daemon ever hold at once"
    )]
    TooManyForks {
        snapshot: String,
        count: u32,
        max: usize,
    },
    /// Each side names its id, image, template and cluster.
    #[error(
        "lease {lease} and snapshot {snapshot} are of different templates: a sandbox is restored only to a snapshot of its own template (its image, on its cluster)"
    )]
    OtherTemplate { lease: String, snapshot: String },
    #[error(
        "cluster `{cluster}` cannot put a sandbox back to a snapshot in place (its backend restores none), which restores and forks on this daemon need"
    )]
    NoRestoreInPlace { cluster: String },
}
