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
    #[error("no batch run `{id}`")]
    NoSuchRun { id: String },
}
